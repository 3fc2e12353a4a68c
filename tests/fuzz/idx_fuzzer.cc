// Fuzz target: the .idx parser. The first 4 bytes choose the .rec size the
// offsets are checked against; the rest is the index text. Every accepted
// entry must lie inside that size, on the 4-byte grid, and there may be no
// more entries than the .rec can hold.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/datasets.h"
#include "fuzz_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 4) return 0;
  uint32_t rec_size = 0;
  std::memcpy(&rec_size, data, 4);
  std::string text(reinterpret_cast<const char*>(data + 4), size - 4);
  std::vector<uint64_t> offsets;
  std::vector<std::string> keys;
  Status status = ParseRecordIOIndex(text, "fuzz.idx", rec_size, &offsets, &keys);
  if (status.ok()) {
    if (offsets.size() != keys.size() || offsets.size() > rec_size / 8) std::abort();
    for (uint64_t offset : offsets) {
      if (offset + 8 > rec_size || offset % 4 != 0) std::abort();
    }
  } else if (status.message().find("fuzz.idx") == std::string::npos) {
    std::abort();  // errors must name the file
  }
  return 0;
}
