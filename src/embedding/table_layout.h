// Where an embedding table's rows lie in its file: a 2-D .npy (the header
// gives rows, dim and dtype) or a raw row-major file (the options give dim
// and dtype; rows = file bytes / row bytes).
#ifndef GPUFEED_EMBEDDING_TABLE_LAYOUT_H_
#define GPUFEED_EMBEDDING_TABLE_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

struct TableLayout {
  uint64_t rows = 0;
  uint32_t dim = 0;
  TensorDtype dtype = TensorDtype::kFloat32;
  size_t row_bytes = 0;
  uint64_t data_offset = 0;  // row r starts at data_offset + r * row_bytes
  uint64_t file_bytes = 0;   // what the file must hold, exactly
  bool npy = false;
};

// True for a path ending in ".npy" (then the file must be one).
bool IsNpyPath(const std::string& path);

// The layout of the .npy whose first `size` bytes are `head` (at least the
// header) in a file of `file_bytes`. `dim`/`dtype` (0 / nullopt: not given)
// must agree with the header, except kBfloat16 which reads a '<u2' array's
// bits. Errors name `path`: Corruption (not a .npy, cut or extended),
// NotSupported (not 2-D, a dtype a table cannot have), InvalidArgument (a
// dim or dtype that disagrees).
Status NpyTableLayout(const char* head, size_t size, uint64_t file_bytes, const std::string& path,
                      uint32_t dim, std::optional<TensorDtype> dtype, TableLayout* layout);

// A raw file of `file_bytes`: InvalidArgument naming `path` without a dim or
// a dtype, or when the size is not a multiple of the row.
Status RawTableLayout(uint64_t file_bytes, const std::string& path, uint32_t dim,
                      std::optional<TensorDtype> dtype, TableLayout* layout);

// The dtypes a table may have: float32, float16, bfloat16, int8, uint8.
bool IsTableDtype(TensorDtype dtype);

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_TABLE_LAYOUT_H_
