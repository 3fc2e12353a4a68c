// What the read engine's parameterized tests share: the engine variants
// (backend, O_DIRECT, io_uring as on an old kernel) and creating one.
#ifndef GPUFEED_TESTS_CPP_IO_ENGINE_TEST_UTIL_H_
#define GPUFEED_TESTS_CPP_IO_ENGINE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "io/read_engine.h"

namespace gpufeed {

struct EngineParam {
  IoBackend backend;
  bool direct;
  // io_uring as on a kernel before 5.19: no SINGLE_ISSUER, DEFER_TASKRUN or
  // COOP_TASKRUN, one completion per wait (the feature probe's fallback).
  bool plain_setup = false;
};

inline std::string EngineParamName(const ::testing::TestParamInfo<EngineParam>& info) {
  return std::string(info.param.backend == IoBackend::kIoUring ? "IoUring" : "Pread") +
         (info.param.direct ? "Direct" : "Buffered") + (info.param.plain_setup ? "PlainSetup" : "");
}

// Every variant: io_uring buffered, O_DIRECT and O_DIRECT on the old-kernel
// setup; pread buffered and O_DIRECT.
inline auto AllEngineParams() {
  return ::testing::Values(EngineParam{IoBackend::kIoUring, false},
                           EngineParam{IoBackend::kIoUring, true},
                           EngineParam{IoBackend::kIoUring, true, true},
                           EngineParam{IoBackend::kPread, false},
                           EngineParam{IoBackend::kPread, true});
}

// Creates the engine `param` names with *options (backend and direct_io
// set from it). NotSupported when io_uring cannot be used here.
inline Status CreateEngineFor(const EngineParam& param, IoOptions* options,
                              std::unique_ptr<ReadEngine>* engine) {
  options->backend = param.backend;
  options->direct_io = param.direct;
  ReadEngineTestHooks hooks;
  hooks.plain_io_uring_setup = param.plain_setup;
  ScopedReadEngineTestHooks scoped(std::move(hooks));  // taken at creation
  return ReadEngine::Create(*options, engine);
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_CPP_IO_ENGINE_TEST_UTIL_H_
