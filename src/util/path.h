// Path string helpers (POSIX paths, '/' separated).
#ifndef GPUFEED_UTIL_PATH_H_
#define GPUFEED_UTIL_PATH_H_

#include <string>
#include <string_view>

namespace gpufeed {

std::string JoinPath(const std::string& directory, const std::string& name);
// The directory part ("." when there is none); trailing slashes ignored.
std::string Dirname(const std::string& path);
std::string Basename(const std::string& path);
// Absolute and lexically normal; symlinks are not resolved.
std::string AbsolutePath(const std::string& path);
bool EndsWith(std::string_view text, std::string_view suffix);
bool StartsWith(std::string_view text, std::string_view prefix);
std::string ToLower(std::string text);
// "part-00000.rec" -> "part-00000.idx"; any other name gets ".idx" appended.
std::string IndexPathFor(const std::string& rec_path);

// Natural order of file names: runs of digits compare as numbers ("day_2"
// < "day_10"; leading zeros ignored), everything else byte by byte; names
// equal that way compare bytewise ("day_01" < "day_1").
bool NaturalLess(const std::string& a, const std::string& b);

// Where an index of a file (a tar's member index, a TSV file's line
// index) goes when the file's own directory is not writable: `index_dir`
// when given, else <cache_dir>/<kind> with a node cache, else
// $XDG_CACHE_HOME/gpufeed/<kind> or ~/.cache/gpufeed/<kind>; "" when none
// of them can be named.
std::string IndexFallbackDirectory(const std::string& index_dir, const std::string& cache_dir,
                                   const std::string& kind);
// The index of `path` inside `directory`: its base name, the xxh64 of its
// whole path (files of one name in several directories), then `suffix`.
std::string IndexPathInDirectory(const std::string& path, const std::string& directory,
                                 const std::string& suffix);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_PATH_H_
