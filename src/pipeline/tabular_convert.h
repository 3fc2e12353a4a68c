// TabularConvert: what the tabular kind makes of a row's stored values
// (TabularTransformOptions): dense values as float32 (log(max(x, 0) + 1)
// with dense_log1p), sparse ids modulo the hash sizes (floor modulo, as
// numpy's %; unsigned fields as unsigned) narrowed to the output dtype as
// numpy's astype, the label as float32.
//
// Thread safety: const after construction; used by every worker at once.
#ifndef GPUFEED_PIPELINE_TABULAR_CONVERT_H_
#define GPUFEED_PIPELINE_TABULAR_CONVERT_H_

#include <cstdint>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

class TabularConvert {
 public:
  // InvalidArgument when hash_sizes has neither 0, 1 nor `sparse_count`
  // values, holds a 0, or sparse_dtype is neither int32 nor int64.
  static Status Check(const TabularTransformOptions& options, uint32_t sparse_count);
  // REQUIRES: Check(options, sparse_count) is OK.
  TabularConvert(const TabularTransformOptions& options, uint32_t sparse_count);

  // `count` stored values of `type` at `data` into out[0, count).
  void Dense(FieldType type, const char* data, uint32_t count, float* out) const;
  // Parsed (text) values; missing ones are 0.
  void DenseValues(const int64_t* values, uint32_t count, float* out) const;
  // `count` stored ids of `type` at `data`, column i into element i of `out`
  // (sparse_dtype).
  void Sparse(FieldType type, const char* data, uint32_t count, char* out) const;
  // Parsed (text) ids: unsigned.
  void SparseValues(const uint64_t* values, uint32_t count, char* out) const;

  size_t sparse_item() const { return sparse64_ ? 8 : 4; }

 private:
  float Log1p(double value) const;
  float LogOfInteger(int64_t value) const;
  uint64_t Hash(uint32_t column, uint64_t id, bool is_signed) const;
  void Store(uint32_t column, uint64_t id, char* out) const {
    if (sparse64_) {
      reinterpret_cast<int64_t*>(out)[column] = static_cast<int64_t>(id);
    } else {
      reinterpret_cast<int32_t*>(out)[column] = static_cast<int32_t>(static_cast<uint32_t>(id));
    }
  }

  bool log1p_ = false;
  bool sparse64_ = true;
  bool hashing_ = false;  // any column has a modulus
  // Per column: the modulus (0: none) and, below 2^32, Lemire's fastmod
  // multiplier ceil(2^64 / h).
  std::vector<uint64_t> modulus_;
  std::vector<uint64_t> multiplier_;
  // log1p of the small non-negative integers (most Criteo counts).
  static constexpr int kLogTable = 4096;
  std::vector<float> log_table_;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_TABULAR_CONVERT_H_
