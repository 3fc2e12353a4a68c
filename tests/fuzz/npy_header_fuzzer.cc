// Fuzz target: the .npy header parser (src/format/npy.h). The first 8 bytes
// are the size of the file the header is checked against; the rest is the
// file's start. Properties: an accepted header lies inside the bytes given,
// names a dtype gpufeed reads, and its byte count is the shape's product
// times the item size without overflow; every error names the file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "format/npy.h"
#include "fuzz_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 8) return 0;
  uint64_t file_size = 0;
  std::memcpy(&file_size, data, 8);
  const char* body = reinterpret_cast<const char*>(data + 8);
  NpyHeader header;
  Status status = ParseNpyHeader(body, size - 8, "fuzz.npy", &header);
  if (!status.ok()) {
    if (status.message().find("fuzz.npy") == std::string::npos) std::abort();
    return 0;
  }
  if (header.data_offset > size - 8) std::abort();
  if (std::strchr("fbiu", header.kind) == nullptr || header.kind == 0) std::abort();
  if (header.item_size != 1 && header.item_size != 2 && header.item_size != 4 &&
      header.item_size != 8) {
    std::abort();
  }
  uint64_t elements = 1;
  for (uint64_t dimension : header.shape) elements *= dimension;
  if (elements != header.elements || elements * header.item_size != header.data_bytes) std::abort();
  if (header.item_size != 0 && header.data_bytes / header.item_size != elements) std::abort();
  Status sized = CheckNpyFileSize(header, file_size, "fuzz.npy");
  const bool fits = header.data_bytes <= UINT64_MAX - header.data_offset;
  if (sized.ok() != (fits && file_size == header.data_offset + header.data_bytes)) std::abort();
  return 0;
}
