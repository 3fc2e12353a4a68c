// Tests run once per resampling path (resample.h: scalar, SSE4.1, AVX2),
// shared by the tests of the code that dispatches on ActiveResamplePath().
#ifndef GPUFEED_TESTS_DECODE_RESAMPLE_PATH_TEST_UTIL_H_
#define GPUFEED_TESTS_DECODE_RESAMPLE_PATH_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "decode/resample.h"

namespace gpufeed {

// A path this CPU (or build) lacks is skipped with the reason; the path in
// use before the test is restored after it.
class ResamplePathTest : public ::testing::TestWithParam<ResamplePath> {
 protected:
  void SetUp() override {
    saved_ = ActiveResamplePath();
    if (!ResamplePathSupported(GetParam())) {
      GTEST_SKIP() << "this CPU (or build) has no " << ResamplePathName(GetParam()) << " path";
    }
  }
  void TearDown() override { ASSERT_TRUE(SetResamplePathForTesting(saved_)); }
  ResamplePath saved_ = ResamplePath::kScalar;
};

// INSTANTIATE_TEST_SUITE_P(Name, Fixture, kEveryResamplePath, ResamplePathParamName).
inline const auto kEveryResamplePath =
    ::testing::Values(ResamplePath::kScalar, ResamplePath::kSse41, ResamplePath::kAvx2);

inline std::string ResamplePathParamName(const ::testing::TestParamInfo<ResamplePath>& info) {
  return ResamplePathName(info.param);
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_DECODE_RESAMPLE_PATH_TEST_UTIL_H_
