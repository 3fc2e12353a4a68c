// The registry entries of the token corpora: Megatron-LM indexed datasets,
// llm.c shards and headerless token files, read as windows of tokens. One
// finder (OpenTokenCorpus) tells the three apart, so they share one open
// hook and one verify hook. Their gpufeed.json shards add the token fields
// (manifest.h) read and written here.
#include <nlohmann/json.hpp>

#include "format/registry.h"
#include "format/token_corpus.h"

namespace gpufeed {

namespace {

// A corpus at the path (a Megatron prefix names no file of its own), with a
// gpufeed.json from `gpufeed index` or by its files.
Status OpenCorpus(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::shared_ptr<const TokenCorpus> corpus;
  bool recognised = false;
  GPUFEED_RETURN_IF_ERROR(
      OpenTokenCorpus(request.path, request.options, request.store, &corpus, &recognised));
  if (!recognised) return Status::OK();
  return NewTokenWindowDataset(request.path, request.store, corpus,
                               request.options.tokens.seq_len, 0, dataset);
}

std::string UnidentifiedManifest(const std::string& manifest_path, const Manifest& manifest) {
  return manifest_path + " describes a " + FormatName(manifest.format) +
         " corpus but not every file's bytes, xxh64 and token_dtype: run `gpufeed index` on it "
         "again";
}

// OpenCorpus opens a token manifest that identifies its files; one that
// does not (hand-written) reaches here, after the files were not recognised.
Status OpenManifest(const std::string& manifest_path, const Manifest& manifest,
                    const OpenRequest&, std::unique_ptr<Dataset>*) {
  return Status::InvalidArgument(UnidentifiedManifest(manifest_path, manifest));
}

// VerifyTokenCorpus (verify_before_stat) checks every corpus it recognises;
// only a gpufeed.json naming a token format that does not identify its
// files reaches here (Dataset::Open refuses it too).
void VerifyUnidentified(const VerifyRequest& request, VerifyReport* report) {
  if (request.manifest == nullptr) {
    report->problems.push_back(request.path + ": gpufeed verify does not check " +
                               FormatName(report->format) + " datasets");
    return;
  }
  report->problems.push_back(UnidentifiedManifest(request.manifest_path, *request.manifest));
}

using Json = nlohmann::json;

// The token fields of a shard (records = its tokens). Only what can be
// checked without the file: the tokens must fit in its bytes.
Status ParseShard(const Json& entry, const std::string& where, ManifestShard* shard) {
  auto count = [&](const char* name, uint64_t* value) -> Status {
    if (!entry.contains(name)) return Status::OK();
    const Json& field = entry.at(name);
    if (!field.is_number_unsigned() && !(field.is_number_integer() && field.get<int64_t>() >= 0)) {
      return Status::Corruption(where + ": \"" + name + "\" must be a non-negative integer");
    }
    *value = field.get<uint64_t>();
    return Status::OK();
  };
  uint64_t tokens = shard->records;
  GPUFEED_RETURN_IF_ERROR(count("tokens", &tokens));
  if (tokens != shard->records) {
    return Status::Corruption(where + ": \"tokens\" " + std::to_string(tokens) +
                              " differs from \"records\" " + std::to_string(shard->records));
  }
  GPUFEED_RETURN_IF_ERROR(count("data_offset", &shard->data_offset));
  GPUFEED_RETURN_IF_ERROR(count("documents", &shard->documents));
  GPUFEED_RETURN_IF_ERROR(count("sequences", &shard->sequences));
  if (entry.contains("token_dtype")) {
    if (!entry.at("token_dtype").is_string() ||
        !ParseTokenDtype(entry.at("token_dtype").get<std::string>(), &shard->token_dtype).ok() ||
        shard->token_dtype == TokenDtype::kAuto) {
      return Status::Corruption(where + ": \"token_dtype\" must be uint8, int8, int16, uint16, "
                                "int32, uint32 or int64");
    }
  }
  const uint64_t item = TokenDtypeSize(shard->token_dtype);
  if (shard->bytes != 0 && item != 0 &&
      (shard->data_offset > shard->bytes ||
       shard->records > (shard->bytes - shard->data_offset) / item)) {
    return Status::Corruption(where + ": " + std::to_string(shard->records) + " " +
                              TokenDtypeName(shard->token_dtype) + " tokens after byte " +
                              std::to_string(shard->data_offset) + " do not fit in its " +
                              std::to_string(shard->bytes) + " bytes");
  }
  return Status::OK();
}

void WriteShard(const Manifest& manifest, const ManifestShard& shard, Json* entry) {
  (*entry)["tokens"] = shard.records;
  (*entry)["data_offset"] = shard.data_offset;
  if (shard.token_dtype != TokenDtype::kAuto) {
    (*entry)["token_dtype"] = TokenDtypeName(shard.token_dtype);
  }
  // Megatron's counts are always written; another corpus's only when its
  // manifest gave them (ParseShard accepts them on every token format), so
  // every field ParseShard accepted survives a write and a read.
  const bool megatron = manifest.format == DatasetFormat::kMegatron;
  if (megatron || shard.documents != 0) (*entry)["documents"] = shard.documents;
  if (megatron || shard.sequences != 0) (*entry)["sequences"] = shard.sequences;
}

// Every file's size, xxh64 and token dtype, and a Megatron .idx's too.
bool IdentifiesEveryFile(const Manifest& manifest) {
  if (manifest.shards.empty()) return false;
  const bool megatron = manifest.format == DatasetFormat::kMegatron;
  for (const ManifestShard& shard : manifest.shards) {
    if (shard.xxh64.empty() || shard.token_dtype == TokenDtype::kAuto ||
        (megatron &&
         (shard.index.empty() || shard.index_xxh64.empty() || shard.index_bytes == 0))) {
      return false;
    }
  }
  return true;
}

FormatEntry TokenEntry(DatasetFormat format, const char* name) {
  FormatEntry e;
  e.format = format;
  e.name = name;
  e.open_before_stat = OpenCorpus;
  e.open_manifest = OpenManifest;
  e.verify_before_stat = VerifyTokenCorpus;
  e.verify = VerifyUnidentified;
  e.parse_manifest_shard = ParseShard;
  e.write_manifest_shard = WriteShard;
  e.manifest_identifies_every_file = IdentifiesEveryFile;
  e.token_corpus = true;
  return e;
}

}  // namespace

const FormatEntry& MegatronFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kMegatron, "megatron");
  return entry;
}

const FormatEntry& LlmcFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kLlmc, "llmc");
  return entry;
}

const FormatEntry& TokensFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kTokens, "tokens");
  return entry;
}

}  // namespace gpufeed
