// RecordIO framing, byte-compatible with dmlc-core (MXNet, DALI):
//
//   [u32 magic 0xCED7230A][u32 lrec = cflag << 29 | length][payload part][zero pad to 4]
//
// A payload that contains the magic word at a 4-byte-aligned offset is split
// there: the magic is dropped and each piece becomes a part with cflag 1
// (first), 2 (middle) or 3 (last); cflag 0 is a whole record. The reader puts
// the magic back between the parts. See docs/formats.md.
#ifndef GPUFEED_FORMAT_RECORDIO_H_
#define GPUFEED_FORMAT_RECORDIO_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "gpufeed/status.h"

namespace gpufeed {

constexpr uint32_t kRecordIOMagic = 0xCED7230A;
// dmlc-core's magic before 2016 differed in the top bits; such files are
// recognised so that the error can say what they are.
constexpr uint32_t kRecordIOLegacyMagic = 0x3ED7230A;
constexpr uint32_t kRecordIOMaxLength = (1u << 29) - 1;

inline uint32_t RecordIOFlag(uint32_t lrec) { return (lrec >> 29) & 7u; }
inline uint32_t RecordIOLength(uint32_t lrec) { return lrec & kRecordIOMaxLength; }
inline uint64_t PadTo4(uint64_t length) { return (length + 3) & ~uint64_t{3}; }

// Appends the framing of `payload` to *out exactly as dmlc-core's
// RecordIOWriter::WriteRecord writes it. REQUIRES: payload.size() < 2^29.
void EncodeRecordIO(std::string_view payload, std::string* out);

// Reads records of one .rec file through a window of buffered bytes: one
// pread serves a whole record (or many, when scanning).
class RecordIOCursor {
 public:
  // `read_size`: bytes to read ahead on a miss (a record's size hint for
  // random access, a few MiB for scans). Does not own `fd`.
  // `window` (optional) is a caller-owned buffer reused across cursors, so
  // that a warm reader allocates nothing per record.
  RecordIOCursor(int fd, const std::string& path, uint64_t file_size, size_t read_size,
                 std::string* window = nullptr);

  // Decodes the record that starts at `offset` into *payload (parts joined)
  // and stores the offset just past it (padding included) in *next_offset.
  // Corruption naming the file and the byte offset of the bad header when
  // the framing is wrong: truncated header or payload, wrong magic (or the
  // pre-2016 magic), a continuation without a start, a part after the last.
  Status ReadRecord(uint64_t offset, std::string* payload, uint64_t* next_offset);

  void set_read_size(size_t read_size) { read_size_ = read_size; }
  // Bytes this cursor read from the file so far (for the store's counters).
  uint64_t bytes_read() const { return bytes_read_; }
  // Declares that the window (passed to the constructor) already holds the
  // file's bytes from `start`: records inside it are parsed without I/O.
  void Preload(uint64_t start) { window_start_ = start; }

 private:
  // Makes [offset, offset + length) resident and points *data at it.
  // REQUIRES: offset + length <= file_size.
  Status Fetch(uint64_t offset, size_t length, const char** data);

  int fd_;
  const std::string& path_;
  uint64_t file_size_;
  size_t read_size_;
  std::string own_window_;
  std::string& window_;
  uint64_t window_start_ = 0;
  uint64_t bytes_read_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_RECORDIO_H_
