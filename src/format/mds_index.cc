// MDS parsers: index.json, a shard's offset table, a sample's columns, an
// integer label and a pil image (format/mds.h). Every input is untrusted.
#include <cstring>
#include <nlohmann/json.hpp>

#include "format/mds.h"

namespace gpufeed {

namespace {

// Encodings and their fixed sizes (0: variable).
struct EncodingSize {
  const char* kind;
  int64_t size;
};
constexpr EncodingSize kEncodings[] = {
    {"bytes", 0},   {"str", 0},       {"int", 8},         {"int8", 1},    {"int16", 2},
    {"int32", 4},   {"int64", 8},     {"uint8", 1},       {"uint16", 2},  {"uint32", 4},
    {"uint64", 8},  {"float16", 2},   {"float32", 4},     {"float64", 8}, {"json", 0},
    {"str_int", 0}, {"str_float", 0}, {"str_decimal", 0}, {"jpeg", 0},    {"png", 0},
    {"pil", 0},     {"pkl", 0},       {"ndarray", 0},
};

const EncodingSize* FindEncoding(const std::string& kind) {
  for (const EncodingSize& e : kEncodings) {
    if (kind == e.kind) return &e;
  }
  return nullptr;
}

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (as every gpufeed format)
  return v;
}

// `object`'s field `key`, or null when it has none (operator[] of a const
// json must not be asked for a missing key).
const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!object.is_object()) return *kNull;
  auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

// The fixed size of "ndarray:DTYPE:D0,D1,..." (0 without a shape).
Status NdarraySize(const std::string& encoding, const std::string& where, int64_t* size) {
  *size = 0;
  size_t first = encoding.find(':');
  if (first == std::string::npos) return Status::OK();
  size_t second = encoding.find(':', first + 1);
  std::string dtype = encoding.substr(
      first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  const EncodingSize* e = FindEncoding(dtype);
  if (e == nullptr || e->size == 0 || dtype == "int") {
    return Status::Corruption(where + ": ndarray dtype \"" + dtype + "\" is not one MDS writes");
  }
  if (second == std::string::npos) return Status::OK();
  int64_t count = 1;
  std::string dims = encoding.substr(second + 1);
  size_t pos = 0;
  while (pos <= dims.size()) {
    size_t comma = dims.find(',', pos);
    std::string dim =
        dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (dim.empty() || dim.size() > 9 || dim.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(dim) < 1 || count > (int64_t{1} << 40) / std::stoll(dim)) {
      return Status::Corruption(where + ": bad ndarray shape \"" + dims + "\"");
    }
    count *= std::stoll(dim);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  *size = count * e->size;
  return Status::OK();
}

Status ParseColumns(const nlohmann::json& shard, const std::string& where,
                    std::vector<MdsColumn>* columns) {
  const auto& names = Field(shard, "column_names");
  const auto& encodings = Field(shard, "column_encodings");
  const auto& sizes = Field(shard, "column_sizes");
  if (!names.is_array() || !encodings.is_array() || !sizes.is_array() ||
      names.size() != encodings.size() || names.size() != sizes.size() || names.empty()) {
    return Status::Corruption(where +
                              ": column_names, column_encodings and column_sizes must "
                              "be lists of one length");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    MdsColumn column;
    if (!names[i].is_string() || !encodings[i].is_string()) {
      return Status::Corruption(where + ": column " + std::to_string(i) + " is not named");
    }
    column.name = names[i].get<std::string>();
    column.encoding = encodings[i].get<std::string>();
    column.kind = column.encoding.substr(0, column.encoding.find(':'));
    std::string what = where + ": column \"" + column.name + "\"";
    const EncodingSize* e = FindEncoding(column.kind);
    if (e == nullptr) {
      return Status::NotSupported(what + " has encoding \"" + column.encoding +
                                  "\", which is not one Streaming's MDS writer writes");
    }
    int64_t fixed = e->size;
    if (column.kind == "ndarray")
      GPUFEED_RETURN_IF_ERROR(NdarraySize(column.encoding, what, &fixed));
    if (sizes[i].is_number_unsigned()) {
      column.size = static_cast<int64_t>(std::min<uint64_t>(sizes[i].get<uint64_t>(), 1ull << 40));
      if (fixed != 0 && column.size != fixed) {
        return Status::Corruption(what + " (" + column.encoding + ") has size " +
                                  std::to_string(column.size) + ", not " + std::to_string(fixed));
      }
    } else if (!sizes[i].is_null()) {
      return Status::Corruption(what + ": its column_sizes entry is neither null nor a size");
    }
    columns->push_back(std::move(column));
  }
  return Status::OK();
}

Status ParseFileInfo(const nlohmann::json& data, const std::string& where, MdsFileInfo* info) {
  if (!data.is_object() || !Field(data, "basename").is_string() ||
      !Field(data, "bytes").is_number_unsigned()) {
    return Status::Corruption(where + " needs a basename and bytes");
  }
  info->basename = Field(data, "basename").get<std::string>();
  info->bytes = Field(data, "bytes").get<uint64_t>();
  if (info->basename.empty() || info->basename.find('/') != std::string::npos ||
      info->basename == "." || info->basename == "..") {
    return Status::Corruption(where + ": basename \"" + info->basename +
                              "\" is not a file name in the dataset's directory");
  }
  if (data.contains("hashes") && Field(data, "hashes").is_object()) {
    for (const auto& [name, value] : Field(data, "hashes").items()) {
      if (value.is_string()) info->hashes[name] = value.get<std::string>();
    }
  }
  return Status::OK();
}

Status ParseShard(const nlohmann::json& shard, const std::string& where, MdsShardInfo* info) {
  if (!shard.is_object()) return Status::Corruption(where + " is not an object");
  if (!Field(shard, "format").is_string() || Field(shard, "format").get<std::string>() != "mds") {
    return Status::NotSupported(where +
                                " is not of format \"mds\" (Streaming's xsv/json shards "
                                "are not read; write the dataset with MDSWriter)");
  }
  if (!Field(shard, "samples").is_number_unsigned() ||
      Field(shard, "samples").get<uint64_t>() > (1u << 30)) {
    return Status::Corruption(where + ": samples is not a count");
  }
  info->samples = Field(shard, "samples").get<uint64_t>();
  GPUFEED_RETURN_IF_ERROR(ParseColumns(shard, where, &info->columns));
  GPUFEED_RETURN_IF_ERROR(
      ParseFileInfo(Field(shard, "raw_data"), where + ": raw_data", &info->raw));
  if (Field(shard, "compression").is_string())
    info->compression = Field(shard, "compression").get<std::string>();
  if (!Field(shard, "zip_data").is_null()) {
    GPUFEED_RETURN_IF_ERROR(
        ParseFileInfo(Field(shard, "zip_data"), where + ": zip_data", &info->zip));
    info->zipped = true;
    if (info->compression.rfind("zstd", 0) != 0) {
      return Status::NotSupported(where + " is compressed with \"" + info->compression +
                                  "\"; gpufeed reads zstd shards (decompress the others, or "
                                  "write with compression=\"zstd\" or none)");
    }
  }
  return Status::OK();
}

}  // namespace

bool IsMdsEncoding(const std::string& kind) { return FindEncoding(kind) != nullptr; }

bool IsMdsImageEncoding(const std::string& kind) {
  return kind == "jpeg" || kind == "png" || kind == "pil";
}

bool IsMdsIntegerEncoding(const std::string& kind) {
  return kind == "int" || kind == "str_int" || kind == "int8" || kind == "int16" ||
         kind == "int32" || kind == "int64" || kind == "uint8" || kind == "uint16" ||
         kind == "uint32" || kind == "uint64";
}

Status ParseMdsIndex(std::string_view text, const std::string& path,
                     std::vector<MdsShardInfo>* shards) {
  shards->clear();
  nlohmann::json index = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (index.is_discarded()) return Status::Corruption(path + ": not valid JSON");
  if (!index.is_object() || !Field(index, "version").is_number_integer() ||
      Field(index, "version").get<int64_t>() != 2) {
    return Status::NotSupported(path + ": not an MDS index of version 2");
  }
  if (!Field(index, "shards").is_array()) return Status::Corruption(path + ": no \"shards\" list");
  for (size_t i = 0; i < Field(index, "shards").size(); ++i) {
    MdsShardInfo info;
    GPUFEED_RETURN_IF_ERROR(
        ParseShard(Field(index, "shards")[i], path + ": shard " + std::to_string(i), &info));
    shards->push_back(std::move(info));
  }
  return Status::OK();
}

Status ParseMdsOffsets(std::string_view header, uint64_t samples, uint64_t file_size,
                       const std::string& path, std::vector<uint32_t>* offsets) {
  uint64_t table_end = 4 * (samples + 2);
  if (header.size() < table_end || file_size < table_end) {
    return Status::Corruption(path + ": " + std::to_string(file_size) +
                              " bytes cannot hold the offsets of " + std::to_string(samples) +
                              " samples (truncated?)");
  }
  uint32_t count = LoadU32(header.data());
  if (count != samples) {
    return Status::Corruption(path + ": at byte offset 0: the shard holds " +
                              std::to_string(count) + " samples but index.json says " +
                              std::to_string(samples));
  }
  offsets->resize(samples + 1);
  for (uint64_t i = 0; i <= samples; ++i) {
    uint32_t offset = LoadU32(header.data() + 4 * (i + 1));
    uint64_t low = i == 0 ? table_end : (*offsets)[i - 1];
    bool bad = i == 0 ? offset != table_end : offset < low;
    if (bad || offset > file_size || (i == samples && offset != file_size)) {
      return Status::Corruption(path + ": at byte offset " + std::to_string(4 * (i + 1)) +
                                ": offset " + std::to_string(offset) + " of sample " +
                                std::to_string(i) + " is out of order or past the end of " +
                                std::to_string(file_size) + " bytes (truncated?)");
    }
    (*offsets)[i] = offset;
  }
  return Status::OK();
}

Status SplitMdsSample(std::string_view sample, const std::vector<MdsColumn>& columns,
                      const std::string& where, std::vector<std::string_view>* values) {
  values->clear();
  size_t pos = 0;
  std::vector<uint64_t> sizes;
  for (const MdsColumn& column : columns) {
    if (column.size >= 0) {
      sizes.push_back(static_cast<uint64_t>(column.size));
      continue;
    }
    if (sample.size() - pos < 4) {
      return Status::Corruption(where + ": the sample (" + std::to_string(sample.size()) +
                                " bytes) ends inside its column sizes");
    }
    sizes.push_back(LoadU32(sample.data() + pos));
    pos += 4;
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    if (sizes[i] > sample.size() - pos) {
      return Status::Corruption(where + ": column \"" + columns[i].name + "\" of " +
                                std::to_string(sizes[i]) + " bytes at sample byte " +
                                std::to_string(pos) + " runs past the sample's " +
                                std::to_string(sample.size()) + " bytes");
    }
    values->push_back(sample.substr(pos, sizes[i]));
    pos += sizes[i];
  }
  if (pos != sample.size()) {
    return Status::Corruption(where + ": the columns take " + std::to_string(pos) + " of the " +
                              "sample's " + std::to_string(sample.size()) + " bytes");
  }
  return Status::OK();
}

Status MdsIntegerLabel(const MdsColumn& column, std::string_view value, const std::string& where,
                       float* label) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(where + ": label column \"" + column.name + "\" (" + column.encoding +
                              "): " + what);
  };
  long double number = 0;
  if (column.kind == "str_int") {
    std::string text(value);
    size_t digits = text.size() > 0 && text[0] == '-' ? 1 : 0;
    if (text.size() == digits || text.size() > 20 ||
        text.find_first_not_of("0123456789", digits) != std::string::npos) {
      return bad("\"" + text.substr(0, 40) + "\" is not an integer");
    }
    number = std::stold(text);
  } else {
    char raw[8] = {0};
    if (value.size() > 8 || value.empty()) return bad("not a fixed-size integer");
    std::memcpy(raw, value.data(), value.size());
    bool is_signed = column.kind[0] == 'i';
    int64_t s = 0;
    uint64_t u = 0;
    std::memcpy(&u, raw, 8);
    if (is_signed) {
      int shift = 64 - 8 * static_cast<int>(value.size());
      s = static_cast<int64_t>(u << shift) >> shift;  // sign-extend
      number = s;
    } else {
      number = u;
    }
  }
  if (number > (1 << 24) || number < -(1 << 24)) return bad("beyond +-2^24 (a float label)");
  *label = static_cast<float>(number);
  return Status::OK();
}

Status MdsPilToRgb(const MdsColumn& column, std::string_view value, const std::string& where,
                   std::string* pixels, int64_t* height, int64_t* width) {
  std::string what = where + ": pil column \"" + column.name + "\"";
  if (value.size() < 12) return Status::Corruption(what + " is shorter than its 12-byte header");
  uint64_t w = LoadU32(value.data()), h = LoadU32(value.data() + 4);
  uint64_t mode_size = LoadU32(value.data() + 8);
  if (mode_size > value.size() - 12) return Status::Corruption(what + ": its mode runs past it");
  std::string mode(value.substr(12, mode_size));
  std::string_view raw = value.substr(12 + mode_size);
  uint64_t channels = mode == "RGB" ? 3 : mode == "L" ? 1 : 0;
  if (channels == 0) {
    return Status::NotSupported(what + " holds mode \"" + mode.substr(0, 16) +
                                "\" pixels; gpufeed reads pil images of mode RGB or L");
  }
  if (w == 0 || h == 0 || w > (1u << 16) || h > (1u << 16) || raw.size() != w * h * channels) {
    return Status::Corruption(what + ": " + std::to_string(raw.size()) + " bytes of pixels for " +
                              std::to_string(w) + "x" + std::to_string(h) + " " + mode);
  }
  *height = static_cast<int64_t>(h);
  *width = static_cast<int64_t>(w);
  if (channels == 3) {
    pixels->assign(raw.data(), raw.size());
    return Status::OK();
  }
  pixels->resize(raw.size() * 3);
  for (size_t i = 0; i < raw.size(); ++i) {
    std::memset(&(*pixels)[3 * i], static_cast<unsigned char>(raw[i]), 3);
  }
  return Status::OK();
}

}  // namespace gpufeed
