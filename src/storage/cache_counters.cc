// CacheCounterFile: stats.json, rewritten atomically under the index lock
// (cache_counters.h).
#include "storage/cache_counters.h"

#include <nlohmann/json.hpp>

#include "util/path.h"

namespace gpufeed {

using cache_internal::ReadSmallAt;
using cache_internal::WriteSmallAtomicallyAt;

Status CacheCounterFile::Add(const std::string& dataset, CachePolicy policy,
                             const CacheCounters& delta) const {
  if (delta.empty()) return Status::OK();
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
  return AddLocked(dataset, policy, delta);
}

Status CacheCounterFile::AddLocked(const std::string& dataset, CachePolicy policy,
                                   const CacheCounters& delta) const {
  const std::string shown = JoinPath(layout_->path(), "stats.json");
  std::string text;
  nlohmann::json json = nlohmann::json::object();
  if (ReadSmallAt(layout_->top_fd(), "stats.json", shown, &text).ok()) {
    json = nlohmann::json::parse(text, nullptr, false);
    if (!json.is_object()) json = nlohmann::json::object();
  }
  nlohmann::json& entry = json["datasets"][dataset.empty() ? std::string("-") : dataset];
  auto add = [&](const char* name, uint64_t value) {
    uint64_t old =
        entry.contains(name) && entry[name].is_number_unsigned() ? entry[name].get<uint64_t>() : 0;
    entry[name] = old + value;
  };
  add("hits", delta.hits);
  add("misses", delta.misses);
  add("fills", delta.fills);
  add("fill_bytes", delta.fill_bytes);
  add("evictions", delta.evictions);
  entry["policy"] = CachePolicyName(policy);
  return WriteSmallAtomicallyAt(layout_->top_fd(), "stats.json", shown, json.dump(1) + "\n",
                                layout_->file_mode());
}

Status CacheCounterFile::ReadText(std::string* text) const {
  Status status =
      ReadSmallAt(layout_->top_fd(), "stats.json", JoinPath(layout_->path(), "stats.json"), text);
  if (status.code() == Status::Code::kNotFound) {
    *text = "{}";
    return Status::OK();
  }
  return status;
}

}  // namespace gpufeed
