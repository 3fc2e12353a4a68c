// Fuzz target: the RecordIO framing (RecordIOCursor through ScanRecordIO,
// then the IRHeader of each payload), with two differential checks that
// turn silently wrong data into a crash the fuzzer reports:
//  - a cursor with a tiny read window (many refills, records straddling
//    windows) must return exactly what the 4 MiB scan returned;
//  - any payload must survive EncodeRecordIO -> ReadRecord unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/recordio.h"
#include "fuzz_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  const std::string path = "fuzz.rec";
  UniqueFd fd = MemoryFile(data, size);
  std::vector<std::pair<uint64_t, std::string>> scanned;
  Status scan = ScanRecordIO(fd.get(), path, size, [&](uint64_t offset, const std::string& payload) {
    scanned.emplace_back(offset, payload);
    std::vector<float> labels;
    ParsedPayload parsed;
    if (ParseIRPayload(payload, &labels, &parsed).ok()) {
      if (parsed.data_offset > payload.size()) std::abort();
      if (labels.empty()) std::abort();
    }
    return Status::OK();
  });
  (void)scan;

  // Random access with a small window must agree with the scan.
  size_t read_size = size > 0 ? 1 + data[0] % 61 : 1;
  std::string window;
  RecordIOCursor cursor(fd.get(), path, size, read_size, &window);
  std::string payload;
  for (const auto& [offset, expected] : scanned) {
    uint64_t next = 0;
    Status status = cursor.ReadRecord(offset, &payload, &next);
    if (!status.ok() || payload != expected) std::abort();
    if (next <= offset || next > size) std::abort();
  }

  // Round trip: the input as a payload.
  std::string framed;
  EncodeRecordIO(std::string_view(reinterpret_cast<const char*>(data), size), &framed);
  UniqueFd framed_fd =
      MemoryFile(reinterpret_cast<const uint8_t*>(framed.data()), framed.size());
  RecordIOCursor round_trip(framed_fd.get(), path, framed.size(), read_size);
  uint64_t next = 0;
  Status status = round_trip.ReadRecord(0, &payload, &next);
  if (!status.ok() || payload.size() != size ||
      (size > 0 && payload.compare(0, size, reinterpret_cast<const char*>(data), size) != 0) ||
      next != framed.size()) {
    std::abort();
  }
  return 0;
}
