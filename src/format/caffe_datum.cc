#include "format/caffe_datum.h"

#include <string>

namespace gpufeed {

namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class WireReader {
 public:
  explicit WireReader(std::string_view buffer) : buffer_(buffer) {}

  bool done() const { return position_ >= buffer_.size(); }
  size_t position() const { return position_; }

  Status Varint(uint64_t* value) {
    size_t start = position_;
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (position_ >= buffer_.size()) {
        return Error(start, "truncated varint (the message ends inside it)");
      }
      uint8_t byte = static_cast<uint8_t>(buffer_[position_++]);
      if (shift == 63 && byte > 1) return Error(start, "varint overflows 64 bits");
      result |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = result;
        return Status::OK();
      }
    }
    return Error(start, "varint longer than 10 bytes");
  }

  Status Bytes(size_t length, std::string_view* out, size_t field_start) {
    if (length > buffer_.size() - position_) {
      return Error(field_start, "length " + std::to_string(length) + " runs past the end of the " +
                                    std::to_string(buffer_.size()) + "-byte message");
    }
    *out = buffer_.substr(position_, length);
    position_ += length;
    return Status::OK();
  }

  Status Error(size_t offset, const std::string& what) const {
    return Status::Corruption("invalid caffe.Datum at byte offset " + std::to_string(offset) +
                              " of the value: " + what);
  }

 private:
  std::string_view buffer_;
  size_t position_ = 0;
};

// An unknown field, skipped by its wire type, still strictly.
Status SkipField(WireReader* reader, uint32_t wire, size_t field_start) {
  std::string_view skipped;
  uint64_t value = 0;
  if (wire == kVarint) return reader->Varint(&value);
  if (wire == kFixed64) return reader->Bytes(8, &skipped, field_start);
  if (wire == kFixed32) return reader->Bytes(4, &skipped, field_start);
  if (wire == kLengthDelimited) {
    GPUFEED_RETURN_IF_ERROR(reader->Varint(&value));
    return reader->Bytes(value, &skipped, field_start);
  }
  return reader->Error(field_start, "wire type " + std::to_string(wire) +
                                        " (groups and reserved types are not valid here)");
}

// Field 6, float_data: unpacked (fixed32 each, proto2's default) or packed
// (one length). Only counted: gpufeed reads uint8 and encoded Datums.
Status CountFloatData(WireReader* reader, uint32_t wire, size_t field_start, CaffeDatum* datum) {
  if (wire == kFixed32) {
    std::string_view skipped;
    GPUFEED_RETURN_IF_ERROR(reader->Bytes(4, &skipped, field_start));
    datum->float_data_count += 1;
    return Status::OK();
  }
  if (wire == kLengthDelimited) {
    uint64_t length = 0;
    GPUFEED_RETURN_IF_ERROR(reader->Varint(&length));
    std::string_view packed;
    GPUFEED_RETURN_IF_ERROR(reader->Bytes(length, &packed, field_start));
    if (length % 4 != 0) return reader->Error(field_start, "packed float_data not a multiple of 4");
    datum->float_data_count += length / 4;
    return Status::OK();
  }
  return reader->Error(field_start, "field 6 has wire type " + std::to_string(wire) +
                                        ", expected 5 or 2");
}

// One field of the message, its tag already read.
Status ReadField(WireReader* reader, uint32_t field, uint32_t wire, size_t field_start,
                 CaffeDatum* datum) {
  auto expect = [&](uint32_t wanted) -> Status {
    if (wire != wanted) {
      return reader->Error(field_start, "field " + std::to_string(field) + " has wire type " +
                                            std::to_string(wire) + ", expected " +
                                            std::to_string(wanted));
    }
    return Status::OK();
  };
  uint64_t value = 0;
  switch (field) {
    case 1:
    case 2:
    case 3:
    case 5: {
      GPUFEED_RETURN_IF_ERROR(expect(kVarint));
      GPUFEED_RETURN_IF_ERROR(reader->Varint(&value));
      // int32 on the wire: negative values are sign-extended to 64 bits.
      int32_t number = static_cast<int32_t>(static_cast<int64_t>(value));
      if (field == 1) datum->channels = number;
      if (field == 2) datum->height = number;
      if (field == 3) datum->width = number;
      if (field == 5) {
        datum->label = number;
        datum->has_label = true;
      }
      return Status::OK();
    }
    case 4:
      GPUFEED_RETURN_IF_ERROR(expect(kLengthDelimited));
      GPUFEED_RETURN_IF_ERROR(reader->Varint(&value));
      return reader->Bytes(value, &datum->data, field_start);
    case 6:
      return CountFloatData(reader, wire, field_start, datum);
    case 7:
      GPUFEED_RETURN_IF_ERROR(expect(kVarint));
      GPUFEED_RETURN_IF_ERROR(reader->Varint(&value));
      datum->encoded = value != 0;
      return Status::OK();
    default:
      return SkipField(reader, wire, field_start);
  }
}

// A decoded Datum's data against its shape: an encoded one has bytes; a
// raw one has exactly channels x height x width bytes (or float_data values).
Status CheckShape(const WireReader& reader, const CaffeDatum& datum) {
  if (datum.encoded) {
    if (datum.data.empty()) return reader.Error(0, "an encoded Datum without data bytes");
    return Status::OK();
  }
  if (datum.channels < 0 || datum.height < 0 || datum.width < 0) {
    return reader.Error(0, "negative shape");
  }
  // 128-bit product: three int32 dimensions cannot overflow it.
  unsigned __int128 pixels = static_cast<unsigned __int128>(datum.channels) *
                             static_cast<unsigned __int128>(datum.height) *
                             static_cast<unsigned __int128>(datum.width);
  std::string shape = std::to_string(datum.channels) + "x" + std::to_string(datum.height) + "x" +
                      std::to_string(datum.width);
  if (datum.data.empty() && datum.float_data_count == 0) {
    return reader.Error(0, pixels == 0 ? std::string("a raw Datum without data")
                                       : "shape " + shape + " but no data bytes");
  }
  if (!datum.data.empty() && pixels != datum.data.size()) {
    return reader.Error(0, "shape " + shape + " needs " +
                               (pixels > UINT64_MAX ? std::string("more than 2^64")
                                                    : std::to_string(static_cast<uint64_t>(pixels))) +
                               " bytes of data, the datum has " +
                               std::to_string(datum.data.size()));
  }
  if (datum.data.empty() && pixels != datum.float_data_count) {
    return reader.Error(0, "shape " + shape + " does not match the " +
                               std::to_string(datum.float_data_count) + " float_data values");
  }
  return Status::OK();
}

}  // namespace

Status DecodeCaffeDatum(std::string_view message, CaffeDatum* datum) {
  *datum = CaffeDatum();
  WireReader reader(message);
  while (!reader.done()) {
    size_t field_start = reader.position();
    uint64_t tag = 0;
    GPUFEED_RETURN_IF_ERROR(reader.Varint(&tag));
    uint32_t field = static_cast<uint32_t>(tag >> 3);
    uint32_t wire = static_cast<uint32_t>(tag & 7);
    if (field == 0 || tag >> 32) {
      return reader.Error(field_start, "invalid field number " + std::to_string(tag >> 3));
    }
    GPUFEED_RETURN_IF_ERROR(ReadField(&reader, field, wire, field_start, datum));
  }
  return CheckShape(reader, *datum);
}

}  // namespace gpufeed
