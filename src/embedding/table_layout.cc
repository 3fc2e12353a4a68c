#include "embedding/table_layout.h"

#include <string>

#include "format/npy.h"

namespace gpufeed {
namespace {

// The table dtype a .npy header's (kind, size) holds, with the dtype the
// caller asked for (bfloat16 reads uint16 bits).
Status NpyDtype(const NpyHeader& header, const std::string& path,
                std::optional<TensorDtype> asked, TensorDtype* dtype) {
  const char kind = header.kind;
  const size_t size = header.item_size;
  if (kind == 'f' && size == 4) {
    *dtype = TensorDtype::kFloat32;
  } else if (kind == 'f' && size == 2) {
    *dtype = TensorDtype::kFloat16;
  } else if (kind == 'i' && size == 1) {
    *dtype = TensorDtype::kInt8;
  } else if (kind == 'u' && size == 1) {
    *dtype = TensorDtype::kUint8;
  } else if (kind == 'u' && size == 2 && asked == TensorDtype::kBfloat16) {
    *dtype = TensorDtype::kBfloat16;
  } else {
    return Status::NotSupported(
        path + ": an embedding table of dtype " + header.descr +
        " (a table holds float32, float16, int8, uint8, or bfloat16 stored as uint16 with "
        "dtype=bfloat16)");
  }
  if (asked.has_value() && *asked != *dtype) {
    return Status::InvalidArgument(path + ": dtype " + TensorDtypeName(*asked) +
                                   " was asked for, the file holds " + header.descr);
  }
  return Status::OK();
}

}  // namespace

bool IsNpyPath(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
}

bool IsTableDtype(TensorDtype dtype) {
  return dtype == TensorDtype::kFloat32 || dtype == TensorDtype::kFloat16 ||
         dtype == TensorDtype::kBfloat16 || dtype == TensorDtype::kInt8 ||
         dtype == TensorDtype::kUint8;
}

Status NpyTableLayout(const char* head, size_t size, uint64_t file_bytes, const std::string& path,
                      uint32_t dim, std::optional<TensorDtype> dtype, TableLayout* layout) {
  NpyHeader header;
  GPUFEED_RETURN_IF_ERROR(ParseNpyHeader(head, size, path, &header));
  if (header.shape.size() != 2) {
    return Status::NotSupported(path + ": an embedding table is a 2-D array (rows, dim); this one has " +
                                std::to_string(header.shape.size()) + " dimensions");
  }
  if (header.shape[1] == 0 || header.shape[1] > UINT32_MAX) {
    return Status::NotSupported(path + ": a table of " + std::to_string(header.shape[1]) +
                                " columns");
  }
  GPUFEED_RETURN_IF_ERROR(NpyDtype(header, path, dtype, &layout->dtype));
  if (dim != 0 && dim != header.shape[1]) {
    return Status::InvalidArgument(path + ": dim " + std::to_string(dim) +
                                   " was given, the file's rows have " +
                                   std::to_string(header.shape[1]) + " values");
  }
  GPUFEED_RETURN_IF_ERROR(CheckNpyFileSize(header, file_bytes, path));
  layout->npy = true;
  layout->rows = header.shape[0];
  layout->dim = static_cast<uint32_t>(header.shape[1]);
  layout->row_bytes = header.item_size * layout->dim;
  layout->data_offset = header.data_offset;
  layout->file_bytes = file_bytes;
  return Status::OK();
}

Status RawTableLayout(uint64_t file_bytes, const std::string& path, uint32_t dim,
                      std::optional<TensorDtype> dtype, TableLayout* layout) {
  if (dim == 0 || !dtype.has_value()) {
    return Status::InvalidArgument(path + " is not a .npy file: a raw table needs dim and dtype");
  }
  if (!IsTableDtype(*dtype)) {
    return Status::NotSupported(path + ": an embedding table of dtype " +
                                TensorDtypeName(*dtype) +
                                " (a table holds float32, float16, bfloat16, int8 or uint8)");
  }
  const size_t row_bytes = TensorDtypeSize(*dtype) * dim;
  if (file_bytes % row_bytes != 0) {
    return Status::InvalidArgument(
        path + ": " + std::to_string(file_bytes) + " bytes is not a whole number of rows of " +
        std::to_string(dim) + " " + TensorDtypeName(*dtype) + " (" + std::to_string(row_bytes) +
        " bytes each): the file is cut or dim/dtype are wrong");
  }
  layout->npy = false;
  layout->rows = file_bytes / row_bytes;
  layout->dim = dim;
  layout->dtype = *dtype;
  layout->row_bytes = row_bytes;
  layout->data_offset = 0;
  layout->file_bytes = file_bytes;
  return Status::OK();
}

}  // namespace gpufeed
