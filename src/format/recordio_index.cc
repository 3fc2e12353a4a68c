// The .idx of a RecordIO shard (MXNet's "key<TAB>offset" lines) and the scan
// that indexes a .rec without one: the helpers datasets.h declares for the
// RecordIO dataset, Pack and Verify.
#include <string>
#include <vector>

#include "format/datasets.h"
#include "format/recordio.h"
#include "util/file.h"

namespace gpufeed {

namespace {

// Read-ahead for the scan of a whole file: large sequential reads.
constexpr size_t kScanReadSize = 4 << 20;

}  // namespace

Status ScanRecordIO(int fd, const std::string& path, uint64_t file_size,
                    const std::function<Status(uint64_t, const std::string&)>& visit) {
  RecordIOCursor cursor(fd, path, file_size, kScanReadSize);
  std::string payload;
  uint64_t offset = 0;
  while (offset < file_size) {
    uint64_t next = 0;
    GPUFEED_RETURN_IF_ERROR(cursor.ReadRecord(offset, &payload, &next));
    GPUFEED_RETURN_IF_ERROR(visit(offset, payload));
    offset = next;
  }
  return Status::OK();
}

Status ReadRecordIOIndex(const std::string& idx_path, uint64_t rec_size,
                         std::vector<uint64_t>* offsets, std::vector<std::string>* keys) {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(idx_path, &text));
  return ParseRecordIOIndex(text, idx_path, rec_size, offsets, keys);
}

Status ParseRecordIOIndex(const std::string& text, const std::string& idx_path, uint64_t rec_size,
                          std::vector<uint64_t>* offsets, std::vector<std::string>* keys) {
  // Every record takes at least its 8-byte header in the .rec file.
  const uint64_t max_entries = rec_size / 8;
  offsets->clear();
  keys->clear();
  size_t line_start = 0;
  uint64_t line_number = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    ++line_number;
    std::string line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto bad = [&](const std::string& what) {
      return Status::Corruption(idx_path + " line " + std::to_string(line_number) + ": " + what);
    };
    // "key<TAB>offset": MXNet splits on tabs and takes columns 0 and 1,
    // DALI reads two whitespace-separated tokens; either way extra columns
    // and surrounding blanks are ignored, and so they are here.
    std::vector<std::string> tokens;
    size_t position = 0;
    while (tokens.size() < 2) {
      size_t start = line.find_first_not_of(" \t", position);
      if (start == std::string::npos) break;
      size_t end = line.find_first_of(" \t", start);
      tokens.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      position = end;
    }
    if (tokens.size() < 2) {
      return bad("expected \"key<TAB>offset\", got \"" + line.substr(0, 80) + "\"");
    }
    std::string key = tokens[0];
    std::string number = tokens[1];
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) {
      return bad("offset \"" + number.substr(0, 40) + "\" is not a non-negative integer");
    }
    if (number.size() > 19) {
      return bad("offset " + number.substr(0, 40) + " is past the end of the .rec file (" +
                 std::to_string(rec_size) + " bytes)");
    }
    uint64_t offset = std::stoull(number);
    if (offset + 8 > rec_size) {
      return bad("offset " + std::to_string(offset) + " is past the end of the .rec file (" +
                 std::to_string(rec_size) + " bytes)");
    }
    if (offset % 4 != 0) {
      return bad("offset " + std::to_string(offset) +
                 " is not at a record boundary (records start at multiples of 4)");
    }
    if (offsets->size() >= max_entries) {
      return bad("more index entries than the " + std::to_string(rec_size) +
                 "-byte .rec file can hold (at most " + std::to_string(max_entries) +
                 ", 8 bytes of framing each)");
    }
    offsets->push_back(offset);
    keys->push_back(std::move(key));
  }
  return Status::OK();
}

}  // namespace gpufeed
