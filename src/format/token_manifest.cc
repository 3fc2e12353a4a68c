// Token corpora described by a gpufeed.json (manifest.h): writing it
// (WriteTokenManifest, `gpufeed index`), opening a corpus from it without
// touching its files (every file through Store::OpenLazily: no open, stat
// or header read until a window is read), and the check of an llm.c
// header against the manifest at that first read.
#include <algorithm>

#include "format/datasets.h"
#include "format/registry.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "format/token_heads.h"
#include "gpufeed/writer.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

std::string ManifestPathFor(const std::string& absolute) {
  return JoinPath(IsDirectory(absolute) ? absolute : Dirname(absolute), kManifestName);
}

// The name of `path` relative to `directory` (its parent or an ancestor).
std::string RelativeTo(const std::string& directory, const std::string& path) {
  std::string prefix = directory.back() == '/' ? directory : directory + "/";
  return path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : path;
}

}  // namespace

namespace {

// The corpus `gpufeed index` describes: read from its files (an old
// manifest may describe them no longer), and for a file or prefix, the
// whole directory that holds it.
Status OpenCorpusToIndex(const std::string& absolute, const DatasetOptions& options,
                         const std::string& directory,
                         std::shared_ptr<const TokenCorpus>* corpus) {
  std::shared_ptr<Store> store;
  GPUFEED_RETURN_IF_ERROR(NewDatasetStore(CacheOptions(), absolute, &store));
  bool recognised = false;
  GPUFEED_RETURN_IF_ERROR(OpenTokenCorpusFromFiles(absolute, options, store, corpus, &recognised));
  if (!recognised) {
    return Status::InvalidArgument(absolute + ": not a token corpus (a Megatron prefix, llm.c "
                                   "shards, or with format=\"tokens\" and token_dtype headerless "
                                   "token files)");
  }
  if (IsDirectory(absolute)) return Status::OK();
  // The manifest describes its whole directory (opening the directory
  // reads it); a file or prefix of it is then opened as its shard alone.
  DatasetOptions same_format = options;
  same_format.format = (*corpus)->format;
  const std::string wanted = (*corpus)->files.front().path;
  GPUFEED_RETURN_IF_ERROR(
      OpenTokenCorpusFromFiles(directory, same_format, store, corpus, &recognised));
  auto listed = [&](const TokenFile& file) { return file.path == wanted; };
  if (!recognised || std::none_of((*corpus)->files.begin(), (*corpus)->files.end(), listed)) {
    return Status::InvalidArgument(
        wanted + ": its directory, read as a " + FormatName(same_format.format) +
        " corpus, does not hold it; a gpufeed.json describes a whole directory (move the file "
        "into a directory of its own)");
  }
  return Status::OK();
}

// A Megatron pair's .idx in its shard: name, size, checksum and counts.
Status DescribeMegatronIndex(const std::string& directory, const TokenFile& file,
                             ManifestShard* shard) {
  const std::string idx_path = file.path.substr(0, file.path.size() - 4) + ".idx";
  std::string index_bytes;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(idx_path, &index_bytes));
  MegatronIndex index;
  GPUFEED_RETURN_IF_ERROR(ParseMegatronIndex(index_bytes.data(), index_bytes.size(), idx_path,
                                             file.bytes, &index));
  shard->index = RelativeTo(directory, idx_path);
  shard->index_bytes = index_bytes.size();
  Xxh64 index_digest;
  index_digest.Update(index_bytes.data(), index_bytes.size());
  shard->index_xxh64 = Xxh64Hex(index_digest.Digest());
  shard->documents = index.documents;
  shard->sequences = index.sequences;
  return Status::OK();
}

}  // namespace

Status ManifestForTokenCorpus(const std::string& path, const DatasetOptions& options,
                              std::string* manifest_path, Manifest* manifest,
                              TokenHeadsWriter* heads) {
  const std::string absolute = AbsolutePath(path);
  *manifest_path = ManifestPathFor(absolute);
  const std::string directory = Dirname(*manifest_path);
  std::shared_ptr<const TokenCorpus> corpus;
  GPUFEED_RETURN_IF_ERROR(OpenCorpusToIndex(absolute, options, directory, &corpus));
  *manifest = Manifest();
  manifest->format = corpus->format;
  manifest->records = corpus->tokens;
  const uint32_t token_bytes = static_cast<uint32_t>(TokenDtypeSize(corpus->dtype));
  if (heads != nullptr) {
    GPUFEED_RETURN_IF_ERROR(
        heads->Open(JoinPath(directory, kTokenHeadsName), token_bytes, corpus->files.size()));
  }
  for (const TokenFile& file : corpus->files) {
    ManifestShard shard;
    shard.file = RelativeTo(directory, file.path);
    shard.records = file.tokens;
    shard.bytes = file.bytes;
    shard.data_offset = file.data_offset;
    shard.token_dtype = corpus->dtype;
    // One read of the file for its checksum and its heads.
    TokenHeadsEntry entry{file.bytes, 0, file.data_offset,
                          file.data_offset + file.tokens * token_bytes};
    TokenHeadsSpan(entry.data_offset, entry.data_end, kTokenHeadsGranule, token_bytes,
                   &entry.first, &entry.count);
    std::string file_heads;
    GPUFEED_RETURN_IF_ERROR(ScanTokenFile(file.path, entry.data_offset, entry.data_end,
                                          token_bytes, &entry.xxh64, &file_heads));
    if (heads != nullptr) GPUFEED_RETURN_IF_ERROR(heads->Add(entry, file_heads));
    shard.xxh64 = Xxh64Hex(entry.xxh64);
    if (corpus->format == DatasetFormat::kMegatron) {
      GPUFEED_RETURN_IF_ERROR(DescribeMegatronIndex(directory, file, &shard));
    }
    manifest->shards.push_back(std::move(shard));
  }
  return Status::OK();
}

Status WriteTokenManifest(const std::string& path, const DatasetOptions& options,
                          std::string* manifest_path, uint64_t* tokens) {
  Manifest manifest;
  TokenHeadsWriter heads;
  GPUFEED_RETURN_IF_ERROR(ManifestForTokenCorpus(path, options, manifest_path, &manifest, &heads));
  *tokens = manifest.records;
  // The heads first: a manifest is never newer than the heads beside it.
  GPUFEED_RETURN_IF_ERROR(heads.Commit());
  return WriteManifest(*manifest_path, manifest);
}

Status FindTokenManifest(const std::string& absolute, const DatasetOptions& options,
                         std::string* manifest_path, Manifest* manifest, bool* found) {
  *found = false;
  std::string candidate = ManifestPathFor(absolute);
  if (!IsRegularFile(candidate)) return Status::OK();
  const bool whole = IsDirectory(absolute) || Basename(absolute) == kManifestName;
  Status read = ReadManifest(candidate, manifest);
  // A file of the directory (a .rec, a Megatron prefix) was opened without
  // the directory's manifest before: one it cannot use does not stop it.
  if (!read.ok()) return whole ? read : Status::OK();
  if (!IsTokenFormat(manifest->format) || !ManifestIdentifiesEveryFile(*manifest)) {
    return Status::OK();  // another format's, or one that cannot open lazily
  }
  if (options.format != DatasetFormat::kAuto && options.format != manifest->format) {
    return Status::InvalidArgument(candidate + " describes a " + FormatName(manifest->format) +
                                   " corpus, but format=\"" + FormatName(options.format) +
                                   "\" was asked for");
  }
  if (!whole) {
    // One file (or Megatron prefix) of the directory the manifest describes.
    std::string file = absolute;
    if (manifest->format == DatasetFormat::kMegatron && !EndsWith(file, ".bin")) {
      file = (EndsWith(file, ".idx") ? file.substr(0, file.size() - 4) : file) + ".bin";
    }
    const std::string directory = Dirname(candidate);
    auto same = [&](const ManifestShard& shard) {
      return AbsolutePath(JoinPath(directory, shard.file)) == file;
    };
    auto it = std::find_if(manifest->shards.begin(), manifest->shards.end(), same);
    if (it == manifest->shards.end()) return Status::OK();  // not listed: opened as before
    ManifestShard only = *it;
    manifest->shards = {only};
    manifest->records = only.records;
  }
  *manifest_path = candidate;
  *found = true;
  return Status::OK();
}

Status OpenTokenCorpusFromManifest(const std::string& manifest_path, const Manifest& manifest,
                                   const DatasetOptions& options,
                                   const std::shared_ptr<Store>& store,
                                   std::shared_ptr<const TokenCorpus>* corpus) {
  const std::string directory = Dirname(manifest_path);
  const TokenDtype requested = options.tokens.token_dtype;
  auto opened = std::make_shared<TokenCorpus>();
  opened->format = manifest.format;
  opened->dtype = manifest.shards.front().token_dtype;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = manifest_path + " shard " + std::to_string(i);
    TokenFile file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, shard.file,
                                                   options.allow_external_paths, named_by,
                                                   &file.path));
    if (shard.token_dtype != opened->dtype) {
      return Status::Corruption(named_by + " holds " + TokenDtypeName(shard.token_dtype) +
                                " tokens, but shard 0 holds " + TokenDtypeName(opened->dtype) +
                                ": the files of one corpus share a dtype");
    }
    const uint64_t expected_offset =
        manifest.format == DatasetFormat::kLlmc ? kLlmcHeaderBytes : 0;
    if (shard.data_offset != expected_offset) {
      return Status::Corruption(named_by + ": data_offset " + std::to_string(shard.data_offset) +
                                ", expected " + std::to_string(expected_offset) + " for " +
                                FormatName(manifest.format) + " files");
    }
    file.bytes = shard.bytes;
    file.data_offset = shard.data_offset;
    file.tokens = shard.records;
    file.first_token = opened->tokens;
    file.header_checked_at_first_read = manifest.format == DatasetFormat::kLlmc;
    FileIdentity identity{shard.bytes, shard.xxh64, manifest_path};
    GPUFEED_RETURN_IF_ERROR(store->OpenLazily(file.path, identity, &file.file));
    opened->tokens += file.tokens;
    opened->documents += shard.documents;
    opened->sequences += shard.sequences;
    opened->files.push_back(std::move(file));
  }
  if (requested != TokenDtype::kAuto && requested != opened->dtype) {
    return Status::InvalidArgument(manifest_path + " describes " + TokenDtypeName(opened->dtype) +
                                   " tokens, but token_dtype=\"" + TokenDtypeName(requested) +
                                   "\" was asked for");
  }
  // Looked for at the first window read that can use it, not here: opening
  // from the manifest touches no file.
  opened->heads_path = JoinPath(directory, kTokenHeadsName);
  *corpus = std::move(opened);
  return Status::OK();
}

Status CheckHeaderAgainstManifest(const TokenFile& file, TokenDtype dtype) {
  char header_bytes[kLlmcHeaderBytes];
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(file.file->ReadAt(0, sizeof(header_bytes), header_bytes, &done));
  LlmcHeader header;
  GPUFEED_RETURN_IF_ERROR(ParseLlmcHeader(header_bytes, done, file.path, file.bytes, &header));
  if (header.tokens != file.tokens || header.dtype != dtype) {
    return Status::Corruption(file.path + " at byte offset 0: the llm.c header declares " +
                              std::to_string(header.tokens) + " " + TokenDtypeName(header.dtype) +
                              " tokens, but its manifest says " + std::to_string(file.tokens) +
                              " " + TokenDtypeName(dtype) +
                              " (the file changed since `gpufeed index`: run it again)");
  }
  return Status::OK();
}

}  // namespace gpufeed
