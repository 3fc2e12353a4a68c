// Fuzz target: the MDS parsers (format/mds.h). The input is read as
// index.json (ParseMdsIndex), as a shard's offset table (ParseMdsOffsets,
// the sample count taken from the first u32), and each sample it yields
// is split into the columns of a fixed schema with every kind of column,
// whose label and pil values are parsed. Properties: accepted offsets rise
// from the table's end to the input's size; a split sample's columns lie
// inside it, in order, and cover it exactly.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/mds.h"
#include "fuzz_util.h"

using namespace gpufeed;

namespace {

std::vector<MdsColumn> Schema() {
  auto column = [](const char* name, const char* encoding, int64_t size) {
    MdsColumn c;
    c.name = name;
    c.encoding = encoding;
    c.kind = std::string(encoding).substr(0, std::string(encoding).find(':'));
    c.size = size;
    return c;
  };
  return {column("image", "jpeg", -1), column("cls", "int", 8),  column("si", "str_int", -1),
          column("pic", "pil", -1),    column("u8", "uint8", 1), column("i16", "int16", 2)};
}

void CheckSample(std::string_view sample, const std::vector<MdsColumn>& columns) {
  std::vector<std::string_view> values;
  if (!SplitMdsSample(sample, columns, "fuzz", &values).ok()) return;
  if (values.size() != columns.size()) std::abort();
  size_t covered = 0;
  for (std::string_view value : values) {
    if (value.data() < sample.data() || value.data() + value.size() > sample.data() + sample.size())
      std::abort();
    covered += value.size();
  }
  if (covered > sample.size()) std::abort();
  float label = 0;
  for (size_t i : {size_t{1}, size_t{2}, size_t{4}, size_t{5}}) {
    (void)MdsIntegerLabel(columns[i], values[i], "fuzz", &label);
  }
  std::string pixels;
  int64_t height = 0, width = 0;
  if (MdsPilToRgb(columns[3], values[3], "fuzz", &pixels, &height, &width).ok() &&
      pixels.size() != static_cast<size_t>(height * width * 3)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<MdsShardInfo> shards;
  (void)ParseMdsIndex(bytes, "index.json", &shards);
  if (size < 4) return 0;
  uint32_t samples = 0;
  std::memcpy(&samples, data, 4);
  if (samples > size) return 0;
  std::vector<uint32_t> offsets;
  if (!ParseMdsOffsets(bytes, samples, size, "shard.mds", &offsets).ok()) return 0;
  if (offsets.size() != samples + 1 || offsets.back() != size) std::abort();
  std::vector<MdsColumn> columns = Schema();
  for (uint32_t i = 0; i < samples; ++i) {
    if (offsets[i] > offsets[i + 1]) std::abort();
    CheckSample(bytes.substr(offsets[i], offsets[i + 1] - offsets[i]), columns);
  }
  return 0;
}
