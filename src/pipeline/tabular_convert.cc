#include "pipeline/tabular_convert.h"

#include <cmath>
#include <cstring>
#include <string>

#include "format/tabular_field.h"

namespace gpufeed {

Status TabularConvert::Check(const TabularTransformOptions& options, uint32_t sparse_count) {
  if (options.sparse_dtype != TensorDtype::kInt64 && options.sparse_dtype != TensorDtype::kInt32) {
    return Status::InvalidArgument(std::string("the tabular transform's sparse_dtype must be int64 "
                                               "or int32, not ") +
                                   TensorDtypeName(options.sparse_dtype));
  }
  const size_t sizes = options.hash_sizes.size();
  if (sizes > 1 && sizes != sparse_count) {
    return Status::InvalidArgument("hash_sizes has " + std::to_string(sizes) +
                                   " values; the dataset has " + std::to_string(sparse_count) +
                                   " sparse columns (give one size for all, or one per column)");
  }
  for (size_t i = 0; i < sizes; ++i) {
    if (options.hash_sizes[i] == 0) {
      return Status::InvalidArgument("hash_sizes[" + std::to_string(i) + "] is 0");
    }
  }
  return Status::OK();
}

TabularConvert::TabularConvert(const TabularTransformOptions& options, uint32_t sparse_count)
    : log1p_(options.dense_log1p), sparse64_(options.sparse_dtype == TensorDtype::kInt64) {
  modulus_.assign(sparse_count, 0);
  multiplier_.assign(sparse_count, 0);
  hashing_ = !options.hash_sizes.empty();
  for (uint32_t i = 0; i < sparse_count && !options.hash_sizes.empty(); ++i) {
    const uint64_t h = options.hash_sizes.size() == 1 ? options.hash_sizes[0] : options.hash_sizes[i];
    modulus_[i] = h;
    if (h > 1 && h < (uint64_t{1} << 32)) multiplier_[i] = UINT64_MAX / h + 1;
  }
  if (log1p_) {
    log_table_.resize(kLogTable);
    for (int i = 0; i < kLogTable; ++i) log_table_[i] = static_cast<float>(std::log1p(double(i)));
  }
}

float TabularConvert::Log1p(double value) const {
  return static_cast<float>(std::log1p(value > 0 ? value : 0.0));
}

float TabularConvert::LogOfInteger(int64_t value) const {
  if (value <= 0) return 0.0f;
  if (value < kLogTable) return log_table_[value];
  return static_cast<float>(std::log1p(static_cast<double>(value)));
}

// Floor modulo of `id` (as signed when the field is signed), h = modulus.
uint64_t TabularConvert::Hash(uint32_t column, uint64_t id, bool is_signed) const {
  const uint64_t h = modulus_[column];
  if (h == 0) return id;
  if (is_signed && static_cast<int64_t>(id) < 0) {
    // floor(v mod h) for v < 0: h - 1 - ((-v - 1) mod h).
    const uint64_t magnitude = static_cast<uint64_t>(-(static_cast<int64_t>(id) + 1));
    return h - 1 - magnitude % h;
  }
  const uint64_t m = multiplier_[column];
  if (m != 0 && id < (uint64_t{1} << 32)) {
    // Lemire's fastmod: exact for 32-bit ids and moduli.
    const uint64_t low = m * id;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(low) * h) >> 64);
  }
  return id % h;
}

void TabularConvert::Dense(FieldType type, const char* data, uint32_t count, float* out) const {
  switch (type) {
    case FieldType::kFloat32:
      if (!log1p_) {
        std::memcpy(out, data, 4 * static_cast<size_t>(count));
        return;
      }
      for (uint32_t i = 0; i < count; ++i) out[i] = Log1p(LoadUnaligned<float>(data + 4 * i));
      return;
    case FieldType::kInt32:
      if (!log1p_) {
        for (uint32_t i = 0; i < count; ++i) {
          out[i] = static_cast<float>(LoadUnaligned<int32_t>(data + 4 * i));
        }
        return;
      }
      for (uint32_t i = 0; i < count; ++i) {
        const int32_t value = LoadUnaligned<int32_t>(data + 4 * i);
        out[i] = log1p_ ? LogOfInteger(value) : static_cast<float>(value);
      }
      return;
    default: break;
  }
  const size_t item = FieldTypeSize(type);
  const bool integer = type != FieldType::kFloat16 && type != FieldType::kFloat32 &&
                       type != FieldType::kFloat64;
  for (uint32_t i = 0; i < count; ++i) {
    const char* p = data + item * i;
    if (!log1p_) {
      out[i] = static_cast<float>(FieldAsDouble(type, p));
    } else {
      out[i] = integer ? LogOfInteger(FieldAsInt64(type, p)) : Log1p(FieldAsDouble(type, p));
    }
  }
}

void TabularConvert::DenseValues(const int64_t* values, uint32_t count, float* out) const {
  for (uint32_t i = 0; i < count; ++i) {
    out[i] = log1p_ ? LogOfInteger(values[i]) : static_cast<float>(values[i]);
  }
}

void TabularConvert::Sparse(FieldType type, const char* data, uint32_t count, char* out) const {
  const bool is_signed = type != FieldType::kUint8 && type != FieldType::kUint16 &&
                         type != FieldType::kUint32 && type != FieldType::kUint64 &&
                         type != FieldType::kBool;
  if (type == FieldType::kInt32 && !hashing_) {
    // The common case without hashing: a plain widening (or copy) loop.
    if (sparse64_) {
      int64_t* ids = reinterpret_cast<int64_t*>(out);
      for (uint32_t i = 0; i < count; ++i) ids[i] = LoadUnaligned<int32_t>(data + 4 * i);
    } else {
      std::memcpy(out, data, 4 * static_cast<size_t>(count));
    }
    return;
  }
  if (type == FieldType::kInt64 && !hashing_ && sparse64_) {
    std::memcpy(out, data, 8 * static_cast<size_t>(count));
    return;
  }
  if (type == FieldType::kInt32) {
    for (uint32_t i = 0; i < count; ++i) {
      const int64_t id = LoadUnaligned<int32_t>(data + 4 * i);
      Store(i, Hash(i, static_cast<uint64_t>(id), true), out);
    }
    return;
  }
  const size_t item = FieldTypeSize(type);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t id = static_cast<uint64_t>(FieldAsInt64(type, data + item * i));
    Store(i, Hash(i, id, is_signed), out);
  }
}

void TabularConvert::SparseValues(const uint64_t* values, uint32_t count, char* out) const {
  for (uint32_t i = 0; i < count; ++i) Store(i, Hash(i, values[i], false), out);
}

}  // namespace gpufeed
