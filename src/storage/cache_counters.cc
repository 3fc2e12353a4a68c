// CacheDirectory's counters: stats.json, hits, misses, fills and evictions
// per dataset. Keeps the invariant that stats.json is only rewritten under
// the index lock (one writer) and atomically (temp file, fsync, rename), so
// concurrent processes never lose each other's counts or leave it torn.
#include <nlohmann/json.hpp>

#include "storage/cache_directory.h"
#include "storage/cache_directory_internal.h"
#include "util/path.h"

namespace gpufeed {

using cache_internal::ReadSmallAt;
using cache_internal::WriteSmallAtomicallyAt;

Status CacheDirectory::AddCounters(const std::string& dataset, CachePolicy policy,
                                   const CacheCounters& delta) {
  if (delta.empty()) return Status::OK();
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  return AddCountersLocked(dataset, policy, delta);
}

Status CacheDirectory::AddCountersLocked(const std::string& dataset, CachePolicy policy,
                                         const CacheCounters& delta) {
  std::string text;
  nlohmann::json json = nlohmann::json::object();
  if (ReadSmallAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"), &text).ok()) {
    json = nlohmann::json::parse(text, nullptr, false);
    if (!json.is_object()) json = nlohmann::json::object();
  }
  nlohmann::json& entry = json["datasets"][dataset.empty() ? std::string("-") : dataset];
  auto add = [&](const char* name, uint64_t value) {
    uint64_t old = entry.contains(name) && entry[name].is_number_unsigned()
                       ? entry[name].get<uint64_t>()
                       : 0;
    entry[name] = old + value;
  };
  add("hits", delta.hits);
  add("misses", delta.misses);
  add("fills", delta.fills);
  add("fill_bytes", delta.fill_bytes);
  add("evictions", delta.evictions);
  entry["policy"] = CachePolicyName(policy);
  return WriteSmallAtomicallyAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"),
                                json.dump(1) + "\n", FileMode());
}

Status CacheDirectory::ReadCountersText(std::string* text) {
  Status status = ReadSmallAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"), text);
  if (status.code() == Status::Code::kNotFound) {
    *text = "{}";
    return Status::OK();
  }
  return status;
}

}  // namespace gpufeed
