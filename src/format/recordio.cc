#include "format/recordio.h"

#include <cstring>

#include "util/file.h"

namespace gpufeed {

namespace {

void AppendPart(uint32_t cflag, const char* data, uint32_t length, std::string* out) {
  uint32_t header[2] = {kRecordIOMagic, (cflag << 29) | length};
  out->append(reinterpret_cast<const char*>(header), sizeof(header));
  out->append(data, length);
}

std::string Where(const std::string& path, uint64_t offset) {
  return path + " at byte offset " + std::to_string(offset);
}

}  // namespace

void EncodeRecordIO(std::string_view payload, std::string* out) {
  // Mirrors dmlc-core src/recordio.cc RecordIOWriter::WriteRecord: only
  // 4-byte-aligned positions below the last full word are checked, and the
  // parts between magics are multiples of 4 long, so only the end is padded.
  const char* data = payload.data();
  const uint32_t length = static_cast<uint32_t>(payload.size());
  const uint32_t lower_align = (length >> 2) << 2;
  const uint32_t magic = kRecordIOMagic;
  uint32_t part_start = 0;
  for (uint32_t i = 0; i < lower_align; i += 4) {
    if (std::memcmp(data + i, &magic, 4) == 0) {
      AppendPart(part_start == 0 ? 1u : 2u, data + part_start, i - part_start, out);
      part_start = i + 4;
    }
  }
  AppendPart(part_start != 0 ? 3u : 0u, data + part_start, length - part_start, out);
  out->append(PadTo4(length) - length, '\0');
}

RecordIOCursor::RecordIOCursor(int fd, const std::string& path, uint64_t file_size,
                               size_t read_size, std::string* window)
    : fd_(fd),
      path_(path),
      file_size_(file_size),
      read_size_(read_size),
      window_(window != nullptr ? *window : own_window_) {}

Status RecordIOCursor::Fetch(uint64_t offset, size_t length, const char** data) {
  if (offset >= window_start_ && offset + length <= window_start_ + window_.size()) {
    *data = window_.data() + (offset - window_start_);
    return Status::OK();
  }
  // Bounded by the file: a length field is never trusted beyond its bytes.
  uint64_t want = std::max<uint64_t>(length, read_size_);
  want = std::min<uint64_t>(want, file_size_ - offset);
  window_.resize(want);
  size_t got = 0;
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd_, window_.data(), want, offset, path_, &got));
  window_.resize(got);
  bytes_read_ += got;
  window_start_ = offset;
  if (got < length) {
    // The file shrank after it was opened (truncated underneath us).
    return Status::Corruption(Where(path_, offset + got) + ": file ended early (expected " +
                              std::to_string(length) + " bytes, read " + std::to_string(got) +
                              "; was it truncated while open?)");
  }
  *data = window_.data();
  return Status::OK();
}

Status RecordIOCursor::ReadRecord(uint64_t offset, std::string* payload, uint64_t* next_offset) {
  payload->clear();
  uint64_t position = offset;
  bool in_multipart = false;
  while (true) {
    if (position + 8 > file_size_) {
      if (position == offset && position == file_size_) {
        return Status::Corruption(Where(path_, position) + ": no record here (end of file)");
      }
      return Status::Corruption(Where(path_, position) + ": truncated in a record header (" +
                                std::to_string(file_size_ - position) +
                                " bytes left, a header needs 8)");
    }
    const char* header;
    GPUFEED_RETURN_IF_ERROR(Fetch(position, 8, &header));
    uint32_t magic, lrec;
    std::memcpy(&magic, header, 4);
    std::memcpy(&lrec, header + 4, 4);
    if (magic != kRecordIOMagic) {
      char text[11];
      std::snprintf(text, sizeof(text), "0x%08X", magic);
      if (magic == kRecordIOLegacyMagic) {
        return Status::Corruption(
            Where(path_, position) + ": magic " + text +
            " is the pre-2016 dmlc-core RecordIO variant, which gpufeed does not read; "
            "re-pack the source with a current im2rec or `gpufeed pack`");
      }
      return Status::Corruption(Where(path_, position) + ": bad magic " + text +
                                " (expected 0xCED7230A)" +
                                (position == offset ? "; not at a record boundary?" : ""));
    }
    uint32_t cflag = RecordIOFlag(lrec);
    uint32_t length = RecordIOLength(lrec);
    if (cflag > 3) {
      return Status::Corruption(Where(path_, position) + ": invalid continuation flag " +
                                std::to_string(cflag));
    }
    if (!in_multipart && (cflag == 2 || cflag == 3)) {
      return Status::Corruption(Where(path_, position) + ": continuation part (flag " +
                                std::to_string(cflag) + ") without a start part");
    }
    if (in_multipart && (cflag == 0 || cflag == 1)) {
      return Status::Corruption(Where(path_, position) + ": a new record (flag " +
                                std::to_string(cflag) +
                                ") starts before the multi-part record at offset " +
                                std::to_string(offset) + " ended");
    }
    uint64_t body = position + 8;
    if (length > file_size_ - body) {
      return Status::Corruption(Where(path_, position) + ": length " + std::to_string(length) +
                                " runs past the end of the file (" +
                                std::to_string(file_size_ - body) +
                                " bytes left; truncated mid-payload?)");
    }
    const char* bytes;
    GPUFEED_RETURN_IF_ERROR(Fetch(body, length, &bytes));
    payload->append(bytes, length);
    // The padding after the final part may be missing at the very end of a
    // file; anywhere else the next header starts at the padded position.
    position = std::min<uint64_t>(body + PadTo4(length), file_size_);
    if (cflag == 0 || cflag == 3) break;
    uint32_t magic_word = kRecordIOMagic;
    payload->append(reinterpret_cast<const char*>(&magic_word), 4);
    in_multipart = true;
  }
  *next_offset = position;
  return Status::OK();
}

}  // namespace gpufeed
