#include "util/path.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "util/checksum.h"

namespace gpufeed {

std::string JoinPath(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  if (!name.empty() && name.front() == '/') return name;
  if (directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

static std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string Dirname(const std::string& path) {
  std::string stripped = StripTrailingSlashes(path);
  size_t slash = stripped.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return stripped.substr(0, slash);
}

std::string Basename(const std::string& path) {
  std::string stripped = StripTrailingSlashes(path);
  size_t slash = stripped.rfind('/');
  return slash == std::string::npos ? stripped : stripped.substr(slash + 1);
}

std::string AbsolutePath(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path;
  std::string normal = absolute.lexically_normal().string();
  return StripTrailingSlashes(normal);
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string ToLower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string IndexPathFor(const std::string& rec_path) {
  if (EndsWith(rec_path, ".rec")) return rec_path.substr(0, rec_path.size() - 4) + ".idx";
  return rec_path + ".idx";
}

namespace {
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (!IsAsciiDigit(a[i]) || !IsAsciiDigit(b[j])) {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i, ++j;
      continue;
    }
    size_t a_end = i, b_end = j;
    while (a_end < a.size() && IsAsciiDigit(a[a_end])) ++a_end;
    while (b_end < b.size() && IsAsciiDigit(b[b_end])) ++b_end;
    size_t a_value = i, b_value = j;  // past the leading zeros (one digit kept)
    while (a_value + 1 < a_end && a[a_value] == '0') ++a_value;
    while (b_value + 1 < b_end && b[b_value] == '0') ++b_value;
    const size_t a_digits = a_end - a_value, b_digits = b_end - b_value;
    if (a_digits != b_digits) return a_digits < b_digits;
    const int order = a.compare(a_value, a_digits, b, b_value, b_digits);
    if (order != 0) return order < 0;
    i = a_end, j = b_end;
  }
  if (i < a.size() || j < b.size()) return j < b.size();
  return a < b;  // equal but for leading zeros: "day_01" < "day_1"
}

std::string IndexFallbackDirectory(const std::string& index_dir, const std::string& cache_dir,
                                   const std::string& kind) {
  if (!index_dir.empty()) return index_dir;
  if (!cache_dir.empty()) return JoinPath(cache_dir, kind);
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return JoinPath(JoinPath(xdg, "gpufeed"), kind);
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return JoinPath(home, ".cache/gpufeed/" + kind);
  return "";
}

std::string IndexPathInDirectory(const std::string& path, const std::string& directory,
                                 const std::string& suffix) {
  Xxh64 hash;
  hash.Update(path.data(), path.size());
  return JoinPath(directory, Basename(path) + "." + Xxh64Hex(hash.Digest()) + suffix);
}

}  // namespace gpufeed
