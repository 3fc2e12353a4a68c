// What names and describes a node-cache entry (layout in
// include/gpufeed/cache.h): the source it copies (CacheSource), its key, its
// meta file's JSON, and a bundle copy's trailer. Pure functions of their
// arguments (StatCacheSource excepted, which stats the source); used by the
// index, the filler and the reader alike.
//
// Thread safety: every function may be called from any thread.
#ifndef GPUFEED_STORAGE_CACHE_ENTRY_H_
#define GPUFEED_STORAGE_CACHE_ENTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/status.h"

namespace gpufeed {

// What identifies the bytes of a source file: a changed file is a new key.
// A bundle (`members` not empty) is identified by its path and its members'
// names only: its members are not stat'ed (that is the metadata load the
// cache removes), so a member changed after its bundle was cached is served
// from the copy until the entry is evicted or cleared.
//
// A file a manifest identifies (Store::OpenLazily) has the key (path, size,
// xxh64) and no mtime: processes that read the copy never stat the source.
// Its fill checks the source's size before copying and the copy's checksum
// after, so a source changed since the manifest was written is never
// cached (its copy would not match the key); the copy carries mtime 0.
struct CacheSource {
  std::string path;   // absolute; a bundle: <dataset>/<bundle name>
  uint64_t size = 0;  // a bundle: 0 here; its entry's meta records the copy's
  int64_t mtime_ns = 0;
  std::string xxh64;  // from a manifest; empty: recorded at fill
  // Identified by (path, size, xxh64) from a manifest, not by a stat (see
  // above). REQUIRES: xxh64 not empty.
  bool identified_by_checksum = false;
  std::string dataset;  // for statistics and `cache clear --dataset`
  CachePolicy policy = CachePolicy::kTrain;
  std::string group;  // checkpoints: the source directory
  // A bundle: the members' absolute paths, in order. Not kept in the meta
  // (which records their count and a hash of their names): a scan of the
  // index reads every meta.
  std::vector<std::string> members;
  bool bundle() const { return !members.empty(); }
};

// Stats the source file at `path` into *source (size, mtime).
Status StatCacheSource(const std::string& path, CacheSource* source);
// "<16 hex digits>-<file name>": stable for (path, size, mtime, xxh64), or
// (path, size, xxh64) for a source identified by its checksum, or (path,
// member names) for a bundle.
std::string CacheKeyFor(const CacheSource& source);

// The meta file's JSON text for `source` with the copy's checksum. A bundle
// also records the copy's size and mtime (`bundle_bytes`,
// `bundle_mtime_ns`; ignored for a file), its member count and its names'
// hash.
std::string EntryMetaJson(const CacheSource& source, const std::string& xxh64,
                          uint64_t bundle_bytes = 0, int64_t bundle_mtime_ns = 0);
// Parses a meta file's text into *source (path, size, mtime, xxh64,
// dataset, group, policy; never the members). Corruption (naming `shown`)
// when a required field is missing.
Status ParseEntryMeta(const std::string& text, const std::string& shown, CacheSource* source);

// A bundle entry's data: the members' bytes back to back, then the trailer
//   uint64 offsets[count + 1]   (little-endian; offsets[count] = data bytes)
//   int64  mtimes_ns[count]     (each member's mtime when it was copied)
//   uint64 count
//   char   magic[8] = "GFBUNDL1"
// so a member is one pread. Writes the trailer for `offsets` and `mtimes_ns`.
std::string EncodeBundleTrailer(const std::vector<uint64_t>& offsets,
                                const std::vector<int64_t>& mtimes_ns);
// Reads and checks the trailer of a bundle copy of `file_size` bytes:
// Corruption (naming `shown`) unless it holds `count` members whose offsets
// rise from 0 to where the trailer starts.
Status ReadBundleTrailer(int fd, uint64_t file_size, size_t count, const std::string& shown,
                         std::vector<uint64_t>* offsets);

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_ENTRY_H_
