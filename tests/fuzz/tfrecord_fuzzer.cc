// Fuzz target: TFRecord framing (ScanTfRecords over the input as a file,
// then every record's tf.train.Example through ForEachTfFeature and the
// list readers) and the tfrecord2idx text, with differential checks that
// turn silently wrong data into a crash:
//  - every scanned record re-framed by EncodeTfRecord passes CheckTfRecord
//    and gives back the same payload;
//  - an index the parser accepts survives Encode -> Parse unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/tfrecord.h"
#include "fuzz_util.h"
#include "util/file.h"

using namespace gpufeed;

namespace {

void ParseExample(std::string_view example) {
  std::vector<std::string_view> bytes;
  std::vector<float> floats;
  std::vector<int64_t> integers;
  Status parsed = ForEachTfFeature(example, [&](std::string_view key, TfFeatureKind kind,
                                                std::string_view list) -> Status {
    if (key.data() != nullptr &&
        (key.data() < example.data() || key.data() + key.size() > example.data() + example.size()))
      std::abort();
    switch (kind) {
      case TfFeatureKind::kBytes: return TfBytesValues(list, &bytes);
      case TfFeatureKind::kFloat: return TfFloatValues(list, &floats);
      case TfFeatureKind::kInt64: return TfInt64Values(list, &integers);
      default: return Status::OK();
    }
  });
  (void)parsed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  const std::string path = "fuzz.tfrecord";
  UniqueFd fd = MemoryFile(data, size);
  std::vector<TfRecordEntry> entries;
  Status scan = ScanTfRecords(
      path, size,
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        return PreadFull(fd.get(), destination, length, offset, path, done);
      },
      &entries);
  if (scan.ok() && !TfRecordIndexMatches(entries, size)) std::abort();
  const char* bytes = reinterpret_cast<const char*>(data);
  for (const TfRecordEntry& entry : entries) {
    if (entry.offset + entry.size > size) std::abort();
    std::string_view payload;
    if (!CheckTfRecord(bytes + entry.offset, entry.size, path, entry.offset, &payload).ok()) {
      std::abort();  // the scan accepted it
    }
    std::string framed = EncodeTfRecord(payload);
    std::string_view again;
    if (!CheckTfRecord(framed.data(), framed.size(), path, 0, &again).ok() || again != payload) {
      std::abort();
    }
    ParseExample(payload);
  }
  ParseExample(std::string_view(bytes, size));  // the input as one Example

  std::vector<TfRecordEntry> index;
  if (ParseTfRecordIndex(std::string_view(bytes, size), "fuzz.idx", &index).ok()) {
    std::string text;
    EncodeTfRecordIndex(index, &text);
    std::vector<TfRecordEntry> back;
    if (!ParseTfRecordIndex(text, "fuzz.idx", &back).ok() || back.size() != index.size()) {
      std::abort();
    }
    for (size_t i = 0; i < index.size(); ++i) {
      if (back[i].offset != index[i].offset || back[i].size != index[i].size) std::abort();
    }
  }
  return 0;
}
