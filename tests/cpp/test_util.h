// Helpers shared by the C++ tests: real temporary directories on disk.
#ifndef GPUFEED_TESTS_TEST_UTIL_H_
#define GPUFEED_TESTS_TEST_UTIL_H_

#include <stdlib.h>

#include <fstream>
#include <string>

#include "util/file.h"

namespace gpufeed {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/gpufeed-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    path_ = made ? made : "";
  }
  ~TempDir() { (void)RemoveRecursively(path_); }  // best effort
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  std::string bytes;
  (void)ReadFileToString(path, &bytes);  // empty when missing: the comparison fails
  return bytes;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_TEST_UTIL_H_
