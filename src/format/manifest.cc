#include "format/manifest.h"

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

// A count field: a non-negative integer.
Status ReadCount(const Json& object, const char* name, uint64_t* value) {
  const Json& field = object.at(name);
  if (!field.is_number_unsigned() && !(field.is_number_integer() && field.get<int64_t>() >= 0)) {
    return Status::Corruption(std::string("\"") + name + "\" must be a non-negative integer");
  }
  *value = field.get<uint64_t>();
  return Status::OK();
}

// "format" (one the registry opens from a gpufeed.json) and "format_version".
Status ReadFormat(const Json& json, Manifest* manifest, const FormatEntry** entry) {
  std::string format = json.at("format").get<std::string>();
  *entry = nullptr;
  if (ParseFormat(format, &manifest->format).ok()) *entry = FindFormat(manifest->format);
  if (*entry == nullptr || (*entry)->open_manifest == nullptr) {
    manifest->format = DatasetFormat::kRecordIO;
    return Status::Corruption("unknown format \"" + format + "\"");
  }
  if (!json.at("format_version").is_number_integer()) {
    return Status::Corruption("format_version must be an integer");
  }
  int64_t version = json.at("format_version").get<int64_t>();
  manifest->format_version = version == kManifestFormatVersion ? kManifestFormatVersion : -1;
  if (version != kManifestFormatVersion) {
    return Status::Corruption("format_version " + std::to_string(version) +
                              " is not supported by this gpufeed (it reads version " +
                              std::to_string(kManifestFormatVersion) + ")");
  }
  return Status::OK();
}

// Shard `i`'s common fields, then the format's own (parse_manifest_shard).
Status ReadShard(const Json& entry, size_t i, const FormatEntry& format, ManifestShard* shard) {
  shard->file = entry.at("file").get<std::string>();
  shard->index = entry.value("index", "");
  GPUFEED_RETURN_IF_ERROR(ReadCount(entry, "records", &shard->records));
  if (entry.contains("bytes")) GPUFEED_RETURN_IF_ERROR(ReadCount(entry, "bytes", &shard->bytes));
  shard->xxh64 = entry.value("xxh64", "");
  if (entry.contains("index_bytes")) {
    GPUFEED_RETURN_IF_ERROR(ReadCount(entry, "index_bytes", &shard->index_bytes));
  }
  shard->index_xxh64 = entry.value("index_xxh64", "");
  const std::string where = "shard " + std::to_string(i) + " (\"" + shard->file + "\")";
  if (!IsUsableName(shard->file) || (entry.contains("index") && !IsUsableName(shard->index))) {
    return Status::Corruption(where + ": a shard or index path is empty or has a NUL byte");
  }
  if (!shard->xxh64.empty() && !IsHex16(shard->xxh64)) {
    return Status::Corruption(where + ": xxh64 must be 16 lowercase hex digits");
  }
  if (!shard->index_xxh64.empty() && !IsHex16(shard->index_xxh64)) {
    return Status::Corruption(where + ": index_xxh64 must be 16 lowercase hex digits");
  }
  if (shard->records > (uint64_t{1} << 48)) {
    return Status::Corruption(where + ": implausible record count");
  }
  if (format.parse_manifest_shard != nullptr) {
    GPUFEED_RETURN_IF_ERROR(format.parse_manifest_shard(entry, where, shard));
  }
  return Status::OK();
}

// Everything after the text parsed as JSON. A Corruption's message is what
// follows "invalid manifest: "; nlohmann's exceptions pass through.
Status ReadManifestJson(const Json& json, Manifest* manifest) {
  if (!json.is_object()) return Status::Corruption("the top level is not an object");
  const FormatEntry* format = nullptr;
  GPUFEED_RETURN_IF_ERROR(ReadFormat(json, manifest, &format));
  GPUFEED_RETURN_IF_ERROR(ReadCount(json, "records", &manifest->records));
  manifest->integer_labels = json.value("label_kind", "float") == "class_index";
  if (json.contains("classes") && !json["classes"].is_null()) {
    manifest->classes = json["classes"].get<std::vector<std::string>>();
  }
  const Json& shards = json.at("shards");
  if (!shards.is_array()) return Status::Corruption("\"shards\" is not a list");
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    ManifestShard shard;
    GPUFEED_RETURN_IF_ERROR(ReadShard(shards[i], i, *format, &shard));
    total += shard.records;
    manifest->shards.push_back(std::move(shard));
  }
  if (total != manifest->records) {
    return Status::Corruption("the shards hold " + std::to_string(total) +
                              " records but \"records\" says " +
                              std::to_string(manifest->records));
  }
  return Status::OK();
}

}  // namespace

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
    // A number such as 1e99999 throws out_of_range (406) from the parser,
    // not parse_error.
    return bad(std::string("not valid JSON (") + error.what() + ")");
  }
  try {
    Status status = ReadManifestJson(json, manifest);
    if (!status.ok()) return bad(status.message());
  } catch (const Json::exception& error) {
    return bad(error.what());
  }
  return Status::OK();
}

bool ManifestIdentifiesEveryFile(const Manifest& manifest) {
  const FormatEntry* entry = FindFormat(manifest.format);
  return entry != nullptr && entry->manifest_identifies_every_file != nullptr &&
         entry->manifest_identifies_every_file(manifest);
}

Status ReadManifest(const std::string& path, Manifest* manifest) {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(path, &text, kMaxManifestBytes));
  return ParseManifest(text, path, manifest);
}

std::string SerializeManifest(const Manifest& manifest) {
  const FormatEntry* format = FindFormat(manifest.format);
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
    // Every field ParseManifest accepted is written back (a write and a read
    // keep the manifest), the index's only when given.
    if (!shard.index_xxh64.empty() || shard.index_bytes != 0) {
      entry["index_bytes"] = shard.index_bytes;
    }
    if (!shard.index_xxh64.empty()) entry["index_xxh64"] = shard.index_xxh64;
    if (format != nullptr && format->write_manifest_shard != nullptr) {
      format->write_manifest_shard(manifest, shard, &entry);
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
