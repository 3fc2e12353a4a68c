#include "format/manifest.h"

#include <functional>

#include <nlohmann/json.hpp>

#include "format/registry.h"
#include "util/file.h"

namespace gpufeed {

namespace {

using Json = nlohmann::json;

// A shard name is a path; whether it may leave the dataset directory
// (absolute, "..", symlinks) is decided when the dataset is opened, where
// DatasetOptions::allow_external_paths is known (ResolveInsideDirectory).
bool IsUsableName(const std::string& name) {
  return !name.empty() && name.find('\0') == std::string::npos;
}

bool IsHex16(const std::string& text) {
  if (text.size() != 16) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The token fields of a shard (records = its tokens). Only what can be
// checked without the file: the tokens must fit in its bytes.
Status ParseTokenShard(const Json& entry, const std::string& where, ManifestShard* shard,
                       const std::function<Status(const std::string&)>& bad) {
  auto count = [&](const char* name, uint64_t* value) -> Status {
    if (!entry.contains(name)) return Status::OK();
    const Json& field = entry.at(name);
    if (!field.is_number_unsigned() && !(field.is_number_integer() && field.get<int64_t>() >= 0)) {
      return bad(where + ": \"" + name + "\" must be a non-negative integer");
    }
    *value = field.get<uint64_t>();
    return Status::OK();
  };
  uint64_t tokens = shard->records;
  GPUFEED_RETURN_IF_ERROR(count("tokens", &tokens));
  if (tokens != shard->records) {
    return bad(where + ": \"tokens\" " + std::to_string(tokens) + " differs from \"records\" " +
               std::to_string(shard->records));
  }
  GPUFEED_RETURN_IF_ERROR(count("data_offset", &shard->data_offset));
  GPUFEED_RETURN_IF_ERROR(count("documents", &shard->documents));
  GPUFEED_RETURN_IF_ERROR(count("sequences", &shard->sequences));
  if (entry.contains("token_dtype")) {
    if (!entry.at("token_dtype").is_string() ||
        !ParseTokenDtype(entry.at("token_dtype").get<std::string>(), &shard->token_dtype).ok() ||
        shard->token_dtype == TokenDtype::kAuto) {
      return bad(where + ": \"token_dtype\" must be uint8, int8, int16, uint16, int32, uint32 or "
                 "int64");
    }
  }
  const uint64_t item = TokenDtypeSize(shard->token_dtype);
  if (shard->bytes != 0 && item != 0 &&
      (shard->data_offset > shard->bytes ||
       shard->records > (shard->bytes - shard->data_offset) / item)) {
    return bad(where + ": " + std::to_string(shard->records) + " " +
               TokenDtypeName(shard->token_dtype) + " tokens after byte " +
               std::to_string(shard->data_offset) + " do not fit in its " +
               std::to_string(shard->bytes) + " bytes");
  }
  return Status::OK();
}

}  // namespace

bool IsTokenFormat(DatasetFormat format) {
  return format == DatasetFormat::kMegatron || format == DatasetFormat::kLlmc ||
         format == DatasetFormat::kTokens;
}

Status ParseManifest(const std::string& text, const std::string& path, Manifest* manifest) {
  *manifest = Manifest();
  auto bad = [&](const std::string& what) {
    return Status::Corruption(path + ": invalid manifest: " + what);
  };
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::parse_error& error) {
    return bad("not valid JSON at byte offset " + std::to_string(error.byte) + " (" +
               error.what() + ")");
  } catch (const Json::exception& error) {
    // Found by the manifest fuzzer: a number such as 1e99999 throws
    // out_of_range (406) from the parser, not parse_error.
    return bad(std::string("not valid JSON (") + error.what() + ")");
  }
  if (!json.is_object()) return bad("the top level is not an object");
  auto count_field = [&](const Json& object, const char* name, uint64_t* value) -> Status {
    const Json& field = object.at(name);
    if (!field.is_number_unsigned() && !(field.is_number_integer() && field.get<int64_t>() >= 0)) {
      return bad(std::string("\"") + name + "\" must be a non-negative integer");
    }
    *value = field.get<uint64_t>();
    return Status::OK();
  };
  try {
    // The formats a gpufeed.json may name: those the registry opens from one.
    std::string format = json.at("format").get<std::string>();
    const FormatEntry* entry = nullptr;
    if (ParseFormat(format, &manifest->format).ok()) entry = FindFormat(manifest->format);
    if (entry == nullptr || entry->open_manifest == nullptr) {
      manifest->format = DatasetFormat::kRecordIO;
      return bad("unknown format \"" + format + "\"");
    }
    if (!json.at("format_version").is_number_integer()) return bad("format_version must be an integer");
    int64_t version = json.at("format_version").get<int64_t>();
    manifest->format_version = version == kManifestFormatVersion ? kManifestFormatVersion : -1;
    if (version != kManifestFormatVersion) {
      return bad("format_version " + std::to_string(version) +
                 " is not supported by this gpufeed (it reads version " +
                 std::to_string(kManifestFormatVersion) + ")");
    }
    GPUFEED_RETURN_IF_ERROR(count_field(json, "records", &manifest->records));
    manifest->integer_labels = json.value("label_kind", "float") == "class_index";
    if (json.contains("classes") && !json["classes"].is_null()) {
      manifest->classes = json["classes"].get<std::vector<std::string>>();
    }
    const Json& shards = json.at("shards");
    if (!shards.is_array()) return bad("\"shards\" is not a list");
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const Json& entry = shards[i];
      ManifestShard shard;
      shard.file = entry.at("file").get<std::string>();
      shard.index = entry.value("index", "");
      GPUFEED_RETURN_IF_ERROR(count_field(entry, "records", &shard.records));
      if (entry.contains("bytes")) GPUFEED_RETURN_IF_ERROR(count_field(entry, "bytes", &shard.bytes));
      shard.xxh64 = entry.value("xxh64", "");
      if (entry.contains("index_bytes")) {
        GPUFEED_RETURN_IF_ERROR(count_field(entry, "index_bytes", &shard.index_bytes));
      }
      shard.index_xxh64 = entry.value("index_xxh64", "");
      std::string where = "shard " + std::to_string(i) + " (\"" + shard.file + "\")";
      if (!IsUsableName(shard.file) || (entry.contains("index") && !IsUsableName(shard.index))) {
        return bad(where + ": a shard or index path is empty or has a NUL byte");
      }
      if (!shard.xxh64.empty() && !IsHex16(shard.xxh64)) {
        return bad(where + ": xxh64 must be 16 lowercase hex digits");
      }
      if (!shard.index_xxh64.empty() && !IsHex16(shard.index_xxh64)) {
        return bad(where + ": index_xxh64 must be 16 lowercase hex digits");
      }
      if (shard.records > (uint64_t{1} << 48)) return bad(where + ": implausible record count");
      if (IsTokenFormat(manifest->format)) {
        GPUFEED_RETURN_IF_ERROR(ParseTokenShard(entry, where, &shard, bad));
      }
      total += shard.records;
      manifest->shards.push_back(std::move(shard));
    }
    if (total != manifest->records) {
      return bad("the shards hold " + std::to_string(total) + " records but \"records\" says " +
                 std::to_string(manifest->records));
    }
  } catch (const Json::exception& error) {
    return bad(error.what());
  }
  return Status::OK();
}

bool ManifestIdentifiesEveryFile(const Manifest& manifest) {
  if (IsTokenFormat(manifest.format) && !manifest.shards.empty()) {
    const bool megatron = manifest.format == DatasetFormat::kMegatron;
    for (const ManifestShard& shard : manifest.shards) {
      if (shard.xxh64.empty() || shard.token_dtype == TokenDtype::kAuto ||
          (megatron && (shard.index.empty() || shard.index_xxh64.empty() ||
                        shard.index_bytes == 0))) {
        return false;
      }
    }
    return true;
  }
  if (manifest.format != DatasetFormat::kRecordIO || manifest.shards.empty()) return false;
  for (const ManifestShard& shard : manifest.shards) {
    // A shard of records has at least their framing: 0 bytes means "not
    // recorded" (hand-written manifests).
    if (shard.bytes == 0 || shard.xxh64.empty() || shard.index_xxh64.empty() ||
        (shard.index_bytes == 0 && shard.records != 0)) {
      return false;
    }
  }
  return true;
}

Status ReadManifest(const std::string& path, Manifest* manifest) {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(path, &text, kMaxManifestBytes));
  return ParseManifest(text, path, manifest);
}

std::string SerializeManifest(const Manifest& manifest) {
  Json json;
  json["format"] = FormatName(manifest.format);
  json["format_version"] = manifest.format_version;
  json["created_by"] = std::string("gpufeed ") + GetBuildInfo().version;
  json["records"] = manifest.records;
  json["label_kind"] = manifest.integer_labels ? "class_index" : "float";
  json["classes"] = manifest.classes;
  Json shards = Json::array();
  for (const ManifestShard& shard : manifest.shards) {
    Json entry;
    entry["file"] = shard.file;
    if (!shard.index.empty()) entry["index"] = shard.index;
    entry["records"] = shard.records;
    entry["bytes"] = shard.bytes;
    entry["xxh64"] = shard.xxh64;
    if (!shard.index_xxh64.empty()) {
      entry["index_bytes"] = shard.index_bytes;
      entry["index_xxh64"] = shard.index_xxh64;
    }
    if (IsTokenFormat(manifest.format)) {
      entry["tokens"] = shard.records;
      entry["data_offset"] = shard.data_offset;
      if (shard.token_dtype != TokenDtype::kAuto) {
        entry["token_dtype"] = TokenDtypeName(shard.token_dtype);
      }
      if (manifest.format == DatasetFormat::kMegatron) {
        entry["documents"] = shard.documents;
        entry["sequences"] = shard.sequences;
      }
    }
    shards.push_back(std::move(entry));
  }
  json["shards"] = std::move(shards);
  // Names that are not valid UTF-8 are written with U+FFFD, never a throw.
  return json.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Status WriteManifest(const std::string& path, const Manifest& manifest) {
  return WriteFileAtomically(path, SerializeManifest(manifest));
}

}  // namespace gpufeed
