// The NumPy .npy header (format versions 1.0, 2.0 and 3.0, as np.save and
// np.lib.format write them): magic "\x93NUMPY", major and minor version, the
// header's length (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0) and
// a Python dict literal {'descr': '<f4', 'fortran_order': False,
// 'shape': (N, 13), } padded with spaces and a newline; the array's bytes
// follow at data_offset. Read by the tabular formats (TorchRec's Criteo
// triplets) and embedding tables, which read the rows themselves.
//
// Only what those readers can use is accepted: C order, little-endian (or
// single-byte) numeric and bool dtypes. Anything else is an error naming the
// file and the byte offset, never a guess.
#ifndef GPUFEED_FORMAT_NPY_H_
#define GPUFEED_FORMAT_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

struct NpyHeader {
  int major = 0;  // format version
  int minor = 0;
  // The dtype: kind 'f' (float), 'i' (signed), 'u' (unsigned) or 'b' (bool),
  // and the element's size in bytes; `descr` as written ("<f4", "|b1").
  char kind = 0;
  size_t item_size = 0;
  std::string descr;
  std::vector<uint64_t> shape;  // () for a scalar
  uint64_t data_offset = 0;     // where the array's bytes start
  uint64_t elements = 1;        // product of shape
  uint64_t data_bytes = 0;      // elements * item_size
};

// Bytes a header may need at most before it can be parsed: the preamble
// and the longest header accepted (parsing stops with Corruption beyond).
constexpr size_t kNpyMaxHeaderBytes = 64 * 1024;

// Parses the header at the start of `data` (`size` bytes, at least the
// whole header; more is ignored). `path` names the file in errors.
// Corruption (bad magic, a header past `size`, a malformed dict, a shape
// whose byte count overflows), NotSupported (a version other than 1-3,
// Fortran order, a big-endian, structured, string or object dtype).
Status ParseNpyHeader(const char* data, size_t size, const std::string& path, NpyHeader* header);

// Corruption naming the file when a file of `file_bytes` is shorter than
// the header says (truncated), or longer (something after the array).
Status CheckNpyFileSize(const NpyHeader& header, uint64_t file_bytes, const std::string& path);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_NPY_H_
