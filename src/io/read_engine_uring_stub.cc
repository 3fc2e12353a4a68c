// The io_uring backend in a build without liburing (GPUFEED_WITH_IO_URING=OFF):
// creating it says so, and ReadEngine::Create in auto mode falls back to the
// pread pool. CMakeLists.txt compiles this file instead of
// read_engine_uring.cc, read_engine_uring_submit.cc and read_engine_uring_reap.cc.
#include "io/read_engine.h"

namespace gpufeed {

Status CreateUringEngine(const IoOptions&, std::unique_ptr<ReadEngine>*) {
  return Status::NotSupported(
      "gpufeed was built without io_uring (install liburing-dev and rebuild with "
      "-DGPUFEED_WITH_IO_URING=ON)");
}

}  // namespace gpufeed
