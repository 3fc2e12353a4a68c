// WidenTokens' paths (AVX2, SSE2, scalar) against a plain loop: every token
// dtype to int32 and int64, lengths around the vector widths, sources at
// every byte alignment and destinations at every element alignment, and the
// bytes around the destination left alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/token_corpus.h"

namespace gpufeed {
namespace {

template <typename From, typename To>
void Check(TokenWidening how, TokenDtype from, TensorDtype to) {
  std::mt19937_64 rng(7);
  for (size_t count : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 2049}) {
    for (size_t source_shift = 0; source_shift < sizeof(From) + 1; ++source_shift) {
      for (size_t destination_shift = 0; destination_shift < 3; ++destination_shift) {
        std::vector<From> values(count);
        for (From& value : values) value = static_cast<From>(rng());
        std::vector<char> source(count * sizeof(From) + source_shift + 1);
        if (count > 0) {
          std::memcpy(source.data() + source_shift, values.data(), count * sizeof(From));
        }
        const To guard = static_cast<To>(0x5a5a5a5a);
        std::vector<To> destination(count + destination_shift + 2, guard);
        WidenTokensWith(how, from, source.data() + source_shift, count, to,
                        destination.data() + destination_shift + 1);
        for (size_t i = 0; i < destination_shift + 1; ++i) ASSERT_EQ(destination[i], guard);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(destination[destination_shift + 1 + i], static_cast<To>(values[i]))
              << "count " << count << " token " << i << " source shift " << source_shift;
        }
        ASSERT_EQ(destination.back(), guard);
      }
    }
  }
}

template <typename From>
void CheckBoth(TokenWidening how, TokenDtype from) {
  Check<From, int64_t>(how, from, TensorDtype::kInt64);
  Check<From, int32_t>(how, from, TensorDtype::kInt32);
}

void CheckAll(TokenWidening how) {
  CheckBoth<uint8_t>(how, TokenDtype::kUint8);
  CheckBoth<int8_t>(how, TokenDtype::kInt8);
  CheckBoth<int16_t>(how, TokenDtype::kInt16);
  CheckBoth<uint16_t>(how, TokenDtype::kUint16);
  CheckBoth<int32_t>(how, TokenDtype::kInt32);
  CheckBoth<uint32_t>(how, TokenDtype::kUint32);
  Check<int64_t, int64_t>(how, TokenDtype::kInt64, TensorDtype::kInt64);
}

TEST(TokenWidenTest, Scalar) { CheckAll(TokenWidening::kScalar); }

TEST(TokenWidenTest, Sse2) {
  if (!TokenWideningAvailable(TokenWidening::kSse2)) GTEST_SKIP() << "no SSE2 in this build";
  CheckAll(TokenWidening::kSse2);
}

TEST(TokenWidenTest, Avx2) {
  if (!TokenWideningAvailable(TokenWidening::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  CheckAll(TokenWidening::kAvx2);
}

TEST(TokenWidenTest, Auto) { CheckAll(TokenWidening::kAuto); }

}  // namespace
}  // namespace gpufeed
