// Loading one stored value of a tabular field (FieldType, little-endian,
// possibly unaligned) as a double or an int64, on the loader's hot path.
// Conversions are numpy's astype: floats to integers truncate toward zero
// (NaN and values out of int64's range give INT64_MIN), uint64 above
// INT64_MAX wraps.
#ifndef GPUFEED_FORMAT_TABULAR_FIELD_H_
#define GPUFEED_FORMAT_TABULAR_FIELD_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gpufeed/dataset.h"

namespace gpufeed {

// IEEE binary16 to binary32 (subnormals, infinities and NaN kept).
inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3FFu;
      bits = sign | static_cast<uint32_t>(127 - 15 + 1 - shift) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

template <typename T>
inline T LoadUnaligned(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

inline double FieldAsDouble(FieldType type, const char* p) {
  switch (type) {
    case FieldType::kBool: return *p != 0 ? 1.0 : 0.0;
    case FieldType::kInt8: return static_cast<int8_t>(*p);
    case FieldType::kUint8: return static_cast<uint8_t>(*p);
    case FieldType::kInt16: return LoadUnaligned<int16_t>(p);
    case FieldType::kUint16: return LoadUnaligned<uint16_t>(p);
    case FieldType::kInt32: return LoadUnaligned<int32_t>(p);
    case FieldType::kUint32: return LoadUnaligned<uint32_t>(p);
    case FieldType::kInt64: return static_cast<double>(LoadUnaligned<int64_t>(p));
    case FieldType::kUint64: return static_cast<double>(LoadUnaligned<uint64_t>(p));
    case FieldType::kFloat16: return HalfToFloat(LoadUnaligned<uint16_t>(p));
    case FieldType::kFloat32: return LoadUnaligned<float>(p);
    case FieldType::kFloat64: return LoadUnaligned<double>(p);
  }
  return 0;
}

inline int64_t FloatToInt64(double value) {
  if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) return INT64_MIN;
  return static_cast<int64_t>(value);
}

inline int64_t FieldAsInt64(FieldType type, const char* p) {
  switch (type) {
    case FieldType::kBool: return *p != 0 ? 1 : 0;
    case FieldType::kInt8: return static_cast<int8_t>(*p);
    case FieldType::kUint8: return static_cast<uint8_t>(*p);
    case FieldType::kInt16: return LoadUnaligned<int16_t>(p);
    case FieldType::kUint16: return LoadUnaligned<uint16_t>(p);
    case FieldType::kInt32: return LoadUnaligned<int32_t>(p);
    case FieldType::kUint32: return LoadUnaligned<uint32_t>(p);
    case FieldType::kInt64: return LoadUnaligned<int64_t>(p);
    case FieldType::kUint64: return static_cast<int64_t>(LoadUnaligned<uint64_t>(p));
    case FieldType::kFloat16:
    case FieldType::kFloat32:
    case FieldType::kFloat64: return FloatToInt64(FieldAsDouble(type, p));
  }
  return 0;
}

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TABULAR_FIELD_H_
