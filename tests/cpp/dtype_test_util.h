// Test helpers: reading elements of any output dtype back as float, to
// compare device batches with host ones (device_test and gpu_bench).
#ifndef GPUFEED_TESTS_CPP_DTYPE_TEST_UTIL_H_
#define GPUFEED_TESTS_CPP_DTYPE_TEST_UTIL_H_

#include <cstdint>
#include <cstring>

#include "gpufeed/batch.h"

namespace gpufeed {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      exponent = 127 - 15 + 1;
      while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        exponent -= 1;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Element i of a dense buffer of `dtype`, as float (uint8/int as is).
inline float ElementAsFloat(const uint8_t* data, size_t i, TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kFloat32: {
      float value;
      std::memcpy(&value, data + 4 * i, 4);
      return value;
    }
    case TensorDtype::kFloat16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return HalfToFloat(h);
    }
    case TensorDtype::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      float value;
      std::memcpy(&value, &bits, 4);
      return value;
    }
    default: return data[i];
  }
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_CPP_DTYPE_TEST_UTIL_H_
