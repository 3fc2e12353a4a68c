// Fuzz target: gpufeed.json parsing. An accepted manifest must serialize
// and parse back to the same fields (token fields included), and the path check used at
// open (ResolveInsideDirectory) must refuse every name that is absolute or
// has a ".." segment.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/datasets.h"
#include "format/manifest.h"
#include "fuzz_util.h"

using namespace gpufeed;

namespace {

bool HasDotDotSegment(const std::string& name) {
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    if (name.substr(start, slash == std::string::npos ? std::string::npos : slash - start) == "..") {
      return true;
    }
    if (slash == std::string::npos) return false;
    start = slash + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  std::string text(reinterpret_cast<const char*>(data), size);
  Manifest manifest;
  if (!ParseManifest(text, "/fuzz/gpufeed.json", &manifest).ok()) return 0;
  uint64_t total = 0;
  for (const ManifestShard& shard : manifest.shards) total += shard.records;
  if (total != manifest.records) std::abort();

  Manifest again;
  if (!ParseManifest(SerializeManifest(manifest), "/fuzz/gpufeed.json", &again).ok()) {
    std::abort();
  }
  // Parsed names are valid UTF-8 (the JSON parser refuses anything else),
  // so every field comes back as it was.
  if (again.records != manifest.records || again.shards.size() != manifest.shards.size() ||
      again.format != manifest.format || again.integer_labels != manifest.integer_labels ||
      again.classes != manifest.classes) {
    std::abort();
  }
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    if (again.shards[i].records != manifest.shards[i].records ||
        again.shards[i].bytes != manifest.shards[i].bytes ||
        again.shards[i].xxh64 != manifest.shards[i].xxh64 ||
        again.shards[i].data_offset != manifest.shards[i].data_offset ||
        again.shards[i].token_dtype != manifest.shards[i].token_dtype ||
        again.shards[i].documents != manifest.shards[i].documents ||
        again.shards[i].sequences != manifest.shards[i].sequences ||
        again.shards[i].file != manifest.shards[i].file ||
        again.shards[i].index != manifest.shards[i].index ||
        again.shards[i].index_bytes != manifest.shards[i].index_bytes ||
        again.shards[i].index_xxh64 != manifest.shards[i].index_xxh64) {
      std::abort();
    }
    const std::string& name = manifest.shards[i].file;
    std::string resolved;
    Status inside = ResolveInsideDirectory("/nonexistent-fuzz-dataset", name, false, "fuzz", &resolved);
    if ((name.front() == '/' || HasDotDotSegment(name)) && inside.ok()) std::abort();
    if (inside.ok() && resolved != "/nonexistent-fuzz-dataset" &&
        resolved.rfind("/nonexistent-fuzz-dataset/", 0) != 0) {
      std::abort();
    }
  }
  return 0;
}
