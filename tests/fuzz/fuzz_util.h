// Shared by the fuzz targets: the input as a real file descriptor (memfd),
// since the parsers read through pread like they do from shards on disk.
#ifndef GPUFEED_TESTS_FUZZ_FUZZ_UTIL_H_
#define GPUFEED_TESTS_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "util/file.h"
#include "util/logging.h"

namespace gpufeed {

// An anonymous in-memory file holding `data`; aborts if the kernel refuses
// (then the fuzzer cannot run at all, which must not pass quietly).
inline UniqueFd MemoryFile(const uint8_t* data, size_t size) {
  int fd = memfd_create("gpufeed-fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  return UniqueFd(fd);
}

// Parsers log once per problem at info/warn; at fuzzing rates that is noise.
inline void QuietLogs() {
  static bool done = [] {
    Log().set_level(spdlog::level::off);
    return true;
  }();
  (void)done;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_FUZZ_FUZZ_UTIL_H_
