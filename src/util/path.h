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

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_PATH_H_
