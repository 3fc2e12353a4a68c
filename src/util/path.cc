#include "util/path.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

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

}  // namespace gpufeed
