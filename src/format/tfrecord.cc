// TFRecord framing, CRC32C, the Example wire format and the index text
// (tfrecord.h).
#include "format/tfrecord.h"

#include <array>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GPUFEED_CRC32C_X86 1
#include <nmmintrin.h>
#endif

namespace gpufeed {

namespace {

// Slicing-by-8 tables of the reflected Castagnoli polynomial.
struct Crc32cTables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
      t[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

uint64_t LoadLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void StoreLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A protobuf wire reader over one message's bytes.
struct Wire {
  std::string_view bytes;
  size_t pos = 0;

  bool done() const { return pos >= bytes.size(); }
  Status Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= bytes.size()) return Status::Corruption("a varint runs past its message");
      uint8_t byte = static_cast<uint8_t>(bytes[pos++]);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return Status::OK();
    }
    return Status::Corruption("a varint is longer than 10 bytes");
  }
  Status Length(std::string_view* out) {
    uint64_t n = 0;
    GPUFEED_RETURN_IF_ERROR(Varint(&n));
    if (n > bytes.size() - pos) {
      return Status::Corruption("a field of " + std::to_string(n) + " bytes runs past its message");
    }
    *out = bytes.substr(pos, n);
    pos += n;
    return Status::OK();
  }
  Status Fixed(size_t n, std::string_view* out) {
    if (n > bytes.size() - pos) return Status::Corruption("a fixed field runs past its message");
    *out = bytes.substr(pos, n);
    pos += n;
    return Status::OK();
  }
  // Skips a field of `wire_type` (groups are refused).
  Status Skip(uint32_t wire_type) {
    uint64_t ignored = 0;
    std::string_view view;
    switch (wire_type) {
      case 0: return Varint(&ignored);
      case 1: return Fixed(8, &view);
      case 2: return Length(&view);
      case 5: return Fixed(4, &view);
      default:
        return Status::Corruption("wire type " + std::to_string(wire_type) +
                                  " (a group or no type) in a tf.train.Example");
    }
  }
  Status Tag(uint32_t* field, uint32_t* wire_type) {
    uint64_t tag = 0;
    GPUFEED_RETURN_IF_ERROR(Varint(&tag));
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    if (*field == 0) return Status::Corruption("field number 0 in a tf.train.Example");
    return Status::OK();
  }
};

// One map entry of Features.feature: key=1 (string), value=2 (Feature).
Status ParseFeatureEntry(
    std::string_view entry,
    const std::function<Status(std::string_view, TfFeatureKind, std::string_view)>& visit) {
  Wire wire{entry};
  std::string_view key, feature;
  while (!wire.done()) {
    uint32_t field = 0, type = 0;
    GPUFEED_RETURN_IF_ERROR(wire.Tag(&field, &type));
    if ((field == 1 || field == 2) && type == 2) {
      GPUFEED_RETURN_IF_ERROR(wire.Length(field == 1 ? &key : &feature));
    } else {
      GPUFEED_RETURN_IF_ERROR(wire.Skip(type));
    }
  }
  // Feature: a oneof of bytes_list=1, float_list=2, int64_list=3 (the last wins).
  Wire inner{feature};
  TfFeatureKind kind = TfFeatureKind::kNone;
  std::string_view list;
  while (!inner.done()) {
    uint32_t field = 0, type = 0;
    GPUFEED_RETURN_IF_ERROR(inner.Tag(&field, &type));
    if (field >= 1 && field <= 3 && type == 2) {
      GPUFEED_RETURN_IF_ERROR(inner.Length(&list));
      kind = static_cast<TfFeatureKind>(field);
    } else {
      GPUFEED_RETURN_IF_ERROR(inner.Skip(type));
    }
  }
  return visit(key, kind, list);
}

// The values (field 1) of a FloatList or Int64List: packed (wire type 2) or
// one by one (`scalar_type`); `take` reads one value from a Wire.
template <typename T, typename Take>
Status NumericValues(std::string_view list, uint32_t scalar_type, Take take,
                     std::vector<T>* values) {
  values->clear();
  Wire wire{list};
  while (!wire.done()) {
    uint32_t field = 0, type = 0;
    GPUFEED_RETURN_IF_ERROR(wire.Tag(&field, &type));
    if (field != 1) {
      GPUFEED_RETURN_IF_ERROR(wire.Skip(type));
    } else if (type == 2) {
      std::string_view packed;
      GPUFEED_RETURN_IF_ERROR(wire.Length(&packed));
      Wire inner{packed};
      while (!inner.done()) GPUFEED_RETURN_IF_ERROR(take(&inner, values));
    } else if (type == scalar_type) {
      GPUFEED_RETURN_IF_ERROR(take(&wire, values));
    } else {
      return Status::Corruption("a list value of wire type " + std::to_string(type));
    }
  }
  return Status::OK();
}

}  // namespace

#ifdef GPUFEED_CRC32C_X86
namespace {

// SSE4.2's crc32 instruction computes the same reflected Castagnoli CRC,
// eight bytes an instruction; compiled for the function alone, called only
// on CPUs that have it (the library runs on any x86-64).
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, size_t size,
                                                        uint32_t crc) {
  uint64_t wide = ~crc;
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
  }
  uint32_t narrow = static_cast<uint32_t>(wide);
  for (; size > 0; ++p, --size) narrow = _mm_crc32_u8(narrow, *p);
  return ~narrow;
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}

}  // namespace
#endif

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
#ifdef GPUFEED_CRC32C_X86
  if (HaveSse42()) return Crc32cSse42(static_cast<const uint8_t*>(data), size, crc);
#endif
  return Crc32cPortable(data, size, crc);
}

uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc) {
  static const Crc32cTables tables;
  const auto& t = tables.t;
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (size >= 8) {
    uint32_t lo = crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                         uint32_t{p[3]} << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

Status ParseTfRecordHeader(const char* header, const std::string& path, uint64_t offset,
                           uint64_t* length) {
  const std::string where = path + ": the record at byte offset " + std::to_string(offset);
  uint32_t expected = static_cast<uint32_t>(LoadLe(header + 8, 4));
  if (MaskCrc32c(Crc32c(header, 8)) != expected) {
    return Status::Corruption(where + " has a bad length CRC (not a TFRecord, or corrupt)");
  }
  *length = LoadLe(header, 8);
  if (*length > kTfRecordMaxLength) {
    return Status::Corruption(where + " says it holds " + std::to_string(*length) +
                              " bytes, more than a tf.train.Example may");
  }
  return Status::OK();
}

Status CheckTfRecord(const char* record, size_t size, const std::string& path, uint64_t offset,
                     std::string_view* data) {
  const std::string where = path + ": the record at byte offset " + std::to_string(offset);
  if (size < kTfRecordFraming) return Status::Corruption(where + " is cut short");
  uint64_t length = 0;
  GPUFEED_RETURN_IF_ERROR(ParseTfRecordHeader(record, path, offset, &length));
  if (length != size - kTfRecordFraming) {
    return Status::Corruption(where + " holds " + std::to_string(length) + " bytes but its range " +
                              "has " + std::to_string(size - kTfRecordFraming) +
                              " (cut short, or the index is stale)");
  }
  const char* payload = record + kTfRecordHeaderSize;
  uint32_t expected = static_cast<uint32_t>(LoadLe(payload + length, 4));
  if (MaskCrc32c(Crc32c(payload, length)) != expected) {
    return Status::Corruption(where + " has a bad data CRC (" + std::to_string(length) +
                              " bytes corrupt)");
  }
  *data = std::string_view(payload, length);
  return Status::OK();
}

Status CheckNotCompressedTfRecord(const char* head, size_t size, const std::string& path) {
  if (size < 2) return Status::OK();
  const auto b0 = static_cast<uint8_t>(head[0]), b1 = static_cast<uint8_t>(head[1]);
  bool gzip = b0 == 0x1f && b1 == 0x8b;
  // zlib: CM 8, a window of at most 32 KiB, and the header a multiple of 31.
  bool zlib = (b0 & 0x0f) == 8 && (b0 >> 4) <= 7 && ((b0 << 8) | b1) % 31 == 0;
  if (!gzip && !zlib) return Status::OK();
  // A valid record's length may begin with these bytes: its CRC tells.
  if (size >= kTfRecordHeaderSize) {
    uint64_t length = 0;
    if (ParseTfRecordHeader(head, path, 0, &length).ok()) return Status::OK();
  }
  return Status::NotSupported(
      path + ": a " + (gzip ? "GZIP" : "ZLIB") +
      "-compressed TFRecord cannot be read at random offsets; decompress it once: python3 -c "
      "\"import " + (gzip ? "gzip" : "zlib") + ",shutil,sys; " +
      (gzip ? "shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2],'wb'))"
            : "open(sys.argv[2],'wb').write(zlib.decompress(open(sys.argv[1],'rb').read()))") +
      "\" IN OUT.tfrecord");
}

std::string EncodeTfRecord(std::string_view data) {
  std::string out;
  StoreLe(data.size(), 8, &out);
  StoreLe(MaskCrc32c(Crc32c(out.data(), 8)), 4, &out);
  out.append(data.data(), data.size());
  StoreLe(MaskCrc32c(Crc32c(data.data(), data.size())), 4, &out);
  return out;
}

const char* TfFeatureKindName(TfFeatureKind kind) {
  switch (kind) {
    case TfFeatureKind::kBytes: return "bytes_list";
    case TfFeatureKind::kFloat: return "float_list";
    case TfFeatureKind::kInt64: return "int64_list";
    default: return "empty";
  }
}

Status ForEachTfFeature(
    std::string_view example,
    const std::function<Status(std::string_view, TfFeatureKind, std::string_view)>& visit) {
  Wire wire{example};
  while (!wire.done()) {
    uint32_t field = 0, type = 0;
    GPUFEED_RETURN_IF_ERROR(wire.Tag(&field, &type));
    if (field != 1 || type != 2) {
      GPUFEED_RETURN_IF_ERROR(wire.Skip(type));
      continue;
    }
    std::string_view features;
    GPUFEED_RETURN_IF_ERROR(wire.Length(&features));
    Wire map{features};
    while (!map.done()) {
      GPUFEED_RETURN_IF_ERROR(map.Tag(&field, &type));
      if (field != 1 || type != 2) {
        GPUFEED_RETURN_IF_ERROR(map.Skip(type));
        continue;
      }
      std::string_view entry;
      GPUFEED_RETURN_IF_ERROR(map.Length(&entry));
      GPUFEED_RETURN_IF_ERROR(ParseFeatureEntry(entry, visit));
    }
  }
  return Status::OK();
}

Status TfBytesValues(std::string_view list, std::vector<std::string_view>* values) {
  values->clear();
  Wire wire{list};
  while (!wire.done()) {
    uint32_t field = 0, type = 0;
    GPUFEED_RETURN_IF_ERROR(wire.Tag(&field, &type));
    if (field == 1 && type == 2) {
      values->emplace_back();
      GPUFEED_RETURN_IF_ERROR(wire.Length(&values->back()));
    } else {
      GPUFEED_RETURN_IF_ERROR(wire.Skip(type));
    }
  }
  return Status::OK();
}

Status TfFloatValues(std::string_view list, std::vector<float>* values) {
  return NumericValues<float>(
      list, 5,
      [](Wire* wire, std::vector<float>* out) {
        std::string_view bits;
        GPUFEED_RETURN_IF_ERROR(wire->Fixed(4, &bits));
        uint32_t word = static_cast<uint32_t>(LoadLe(bits.data(), 4));
        float value = 0;
        std::memcpy(&value, &word, 4);
        out->push_back(value);
        return Status::OK();
      },
      values);
}

Status TfInt64Values(std::string_view list, std::vector<int64_t>* values) {
  return NumericValues<int64_t>(
      list, 0,
      [](Wire* wire, std::vector<int64_t>* out) {
        uint64_t value = 0;
        GPUFEED_RETURN_IF_ERROR(wire->Varint(&value));
        out->push_back(static_cast<int64_t>(value));
        return Status::OK();
      },
      values);
}

Status ParseTfRecordIndex(std::string_view text, const std::string& index_path,
                          std::vector<TfRecordEntry>* entries) {
  entries->clear();
  size_t start = 0;
  for (uint64_t line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    char* stop = nullptr;
    const char* p = line.c_str();
    TfRecordEntry entry;
    bool ok = line.find('-') == std::string::npos;
    entry.offset = std::strtoull(p, &stop, 10);
    ok = ok && stop != p;
    p = stop;
    entry.size = std::strtoull(p, &stop, 10);
    ok = ok && stop != p && std::string(stop).find_first_not_of(" \t\r") == std::string::npos;
    if (!ok || entry.size < kTfRecordFraming) {
      return Status::Corruption(index_path + " line " + std::to_string(line_number) +
                                ": expected \"offset size\" (tfrecord2idx), got \"" +
                                line.substr(0, 60) + "\"");
    }
    entries->push_back(entry);
  }
  return Status::OK();
}

void EncodeTfRecordIndex(const std::vector<TfRecordEntry>& entries, std::string* text) {
  text->clear();
  for (const TfRecordEntry& entry : entries) {
    *text += std::to_string(entry.offset) + " " + std::to_string(entry.size) + "\n";
  }
}

bool TfRecordIndexMatches(const std::vector<TfRecordEntry>& entries, uint64_t file_size) {
  uint64_t next = 0;
  for (const TfRecordEntry& entry : entries) {
    if (entry.offset != next || entry.size > file_size - entry.offset) return false;
    next = entry.offset + entry.size;
  }
  return next == file_size;
}

Status ScanTfRecords(const std::string& path, uint64_t file_size, const TfReadAt& read,
                     std::vector<TfRecordEntry>* entries) {
  entries->clear();
  char header[kTfRecordHeaderSize];
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(read(0, sizeof(header), header, &done));
  GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTfRecord(header, done, path));
  std::string record;
  for (uint64_t offset = 0; offset < file_size;) {
    const std::string where = path + ": the record at byte offset " + std::to_string(offset);
    GPUFEED_RETURN_IF_ERROR(read(offset, sizeof(header), header, &done));
    if (done < sizeof(header)) return Status::Corruption(where + " is cut short in its header");
    uint64_t length = 0;
    GPUFEED_RETURN_IF_ERROR(ParseTfRecordHeader(header, path, offset, &length));
    if (length + kTfRecordFraming > file_size - offset) {
      return Status::Corruption(where + " holds " + std::to_string(length) +
                                " bytes but the file ends at byte offset " +
                                std::to_string(file_size) + " (cut short)");
    }
    record.resize(length + kTfRecordFraming);
    GPUFEED_RETURN_IF_ERROR(read(offset, record.size(), &record[0], &done));
    if (done < record.size()) return Status::Corruption(where + " is cut short");
    std::string_view data;
    GPUFEED_RETURN_IF_ERROR(CheckTfRecord(record.data(), record.size(), path, offset, &data));
    entries->push_back({offset, record.size()});
    offset += record.size();
  }
  return Status::OK();
}

}  // namespace gpufeed
