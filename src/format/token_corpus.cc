// Token corpora: the header and index parsers, the dtype functions and
// OpenTokenCorpus (detection and the checks against file sizes).
#include "format/token_corpus.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "format/datasets.h"
#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

const char* TokenDtypeName(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kAuto: return "auto";
    case TokenDtype::kUint8: return "uint8";
    case TokenDtype::kInt8: return "int8";
    case TokenDtype::kInt16: return "int16";
    case TokenDtype::kUint16: return "uint16";
    case TokenDtype::kInt32: return "int32";
    case TokenDtype::kUint32: return "uint32";
    case TokenDtype::kInt64: return "int64";
  }
  return "unknown";
}

Status ParseTokenDtype(const std::string& name, TokenDtype* dtype) {
  for (int value = 0; value <= static_cast<int>(TokenDtype::kInt64); ++value) {
    if (name == TokenDtypeName(static_cast<TokenDtype>(value))) {
      *dtype = static_cast<TokenDtype>(value);
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown token dtype \"" + name +
                                 "\" (expected uint8, int8, int16, uint16, int32, uint32 or "
                                 "int64)");
}

size_t TokenDtypeSize(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kAuto: return 0;
    case TokenDtype::kUint8:
    case TokenDtype::kInt8: return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16: return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kUint32: return 4;
    case TokenDtype::kInt64: return 8;
  }
  return 0;
}

namespace {

template <typename T>
T Load(const char* data) {
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

// Megatron's DType codes; float64 (6) and float32 (7) hold no token ids.
Status MegatronDtype(uint8_t code, const std::string& idx_path, TokenDtype* dtype) {
  static const TokenDtype kCodes[] = {TokenDtype::kAuto,  TokenDtype::kUint8, TokenDtype::kInt8,
                                      TokenDtype::kInt16, TokenDtype::kInt32, TokenDtype::kInt64,
                                      TokenDtype::kAuto,  TokenDtype::kAuto,  TokenDtype::kUint16};
  if (code >= 1 && code <= 8 && kCodes[code] != TokenDtype::kAuto) {
    *dtype = kCodes[code];
    return Status::OK();
  }
  std::string what = code == 6 || code == 7 ? " (a float dtype: not token ids)" : "";
  return Status::Corruption(idx_path + ": dtype code " + std::to_string(code) +
                            " at byte offset 17 is not a token dtype" + what +
                            " (expected 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
}

std::string At(const std::string& path, uint64_t offset) {
  return path + " at byte offset " + std::to_string(offset);
}

// The sequence lengths and byte pointers (`sequences` of each, from byte
// kMegatronHeaderBytes): each sequence starts where the one before ends and
// ends within `bin_size`. *end_byte: where the last one ends.
Status CheckMegatronSequences(const char* data, const std::string& idx_path, uint64_t sequences,
                              size_t item, uint64_t bin_size, uint64_t* end_byte) {
  const uint64_t lengths_at = kMegatronHeaderBytes;
  const uint64_t pointers_at = lengths_at + sequences * 4;
  uint64_t expected_pointer = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    int32_t length = Load<int32_t>(data + lengths_at + i * 4);
    int64_t pointer = Load<int64_t>(data + pointers_at + i * 8);
    if (length < 0) {
      return Status::Corruption(At(idx_path, lengths_at + i * 4) + ": sequence " +
                                std::to_string(i) + " has negative length " +
                                std::to_string(length));
    }
    if (pointer < 0 || static_cast<uint64_t>(pointer) != expected_pointer) {
      return Status::Corruption(At(idx_path, pointers_at + i * 8) + ": sequence " +
                                std::to_string(i) + " starts at .bin byte " +
                                std::to_string(pointer) + ", expected " +
                                std::to_string(expected_pointer) +
                                " (sequences must follow each other in the .bin)");
    }
    expected_pointer += static_cast<uint64_t>(length) * item;
    if (expected_pointer > bin_size) {
      return Status::Corruption(At(idx_path, lengths_at + i * 4) + ": sequence " +
                                std::to_string(i) + " ends at .bin byte " +
                                std::to_string(expected_pointer) + ", past the end of the " +
                                std::to_string(bin_size) + "-byte .bin (truncated?)");
    }
  }
  *end_byte = expected_pointer;
  return Status::OK();
}

// The document indices (`entries` int64 at `documents_at`): non-decreasing
// from 0 to the sequence count.
Status CheckMegatronDocuments(const char* data, const std::string& idx_path,
                              uint64_t documents_at, uint64_t entries, uint64_t sequences) {
  uint64_t previous = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    int64_t entry = Load<int64_t>(data + documents_at + i * 8);
    bool bad = entry < 0 || static_cast<uint64_t>(entry) > sequences ||
               static_cast<uint64_t>(entry) < previous || (i == 0 && entry != 0) ||
               (i + 1 == entries && static_cast<uint64_t>(entry) != sequences);
    if (bad) {
      return Status::Corruption(At(idx_path, documents_at + i * 8) + ": document index " +
                                std::to_string(i) + " is " + std::to_string(entry) +
                                " (expected non-decreasing from 0 to the sequence count " +
                                std::to_string(sequences) + ")");
    }
    previous = static_cast<uint64_t>(entry);
  }
  return Status::OK();
}

}  // namespace

Status ParseMegatronIndex(const char* data, size_t size, const std::string& idx_path,
                          uint64_t bin_size, MegatronIndex* index) {
  if (size < kMegatronHeaderBytes) {
    return Status::Corruption(idx_path + ": " + std::to_string(size) +
                              " bytes, shorter than the 34-byte Megatron index header");
  }
  if (std::memcmp(data, kMegatronMagic, sizeof(kMegatronMagic)) != 0) {
    return Status::Corruption(At(idx_path, 0) + ": no Megatron index magic MMIDIDX\\0\\0");
  }
  uint64_t version = Load<uint64_t>(data + 9);
  if (version != 1) {
    return Status::Corruption(At(idx_path, 9) + ": index version " + std::to_string(version) +
                              ", expected 1");
  }
  GPUFEED_RETURN_IF_ERROR(MegatronDtype(static_cast<uint8_t>(data[17]), idx_path, &index->dtype));
  const uint64_t sequences = Load<uint64_t>(data + 18);
  const uint64_t document_entries = Load<uint64_t>(data + 26);
  // Sizes first, before any count is used to index: 12 bytes per sequence
  // and 8 per document entry must fit in the file.
  const uint64_t rest = size - kMegatronHeaderBytes;
  if (sequences > rest / 12 || document_entries > rest / 8 ||
      sequences * 12 + document_entries * 8 > rest) {
    return Status::Corruption(At(idx_path, 18) + ": " + std::to_string(sequences) +
                              " sequences and " + std::to_string(document_entries) +
                              " document entries do not fit in the file's " +
                              std::to_string(size) + " bytes (truncated?)");
  }
  const uint64_t arrays = sequences * 12 + document_entries * 8;
  if (arrays != rest && arrays + sequences != rest) {
    return Status::Corruption(At(idx_path, kMegatronHeaderBytes + arrays) + ": " +
                              std::to_string(rest - arrays) +
                              " bytes after the document indices, expected 0 (or one mode byte "
                              "per sequence in a multimodal index)");
  }
  index->multimodal = arrays != rest;
  index->sequences = sequences;
  if (document_entries == 0) {
    return Status::Corruption(At(idx_path, 26) + ": no document indices (expected at least 0)");
  }
  index->documents = document_entries - 1;
  const size_t item = TokenDtypeSize(index->dtype);
  uint64_t end_byte = 0;
  GPUFEED_RETURN_IF_ERROR(
      CheckMegatronSequences(data, idx_path, sequences, item, bin_size, &end_byte));
  index->tokens = end_byte / item;
  const uint64_t documents_at = kMegatronHeaderBytes + sequences * 12;
  return CheckMegatronDocuments(data, idx_path, documents_at, document_entries, sequences);
}

bool HasLlmcMagic(const char* data, size_t size) {
  if (size < sizeof(int32_t)) return false;
  int32_t magic = Load<int32_t>(data);
  return magic == kLlmcMagicUint16 || magic == kLlmcMagicUint32;
}

Status ParseLlmcHeader(const char* data, size_t size, const std::string& path, uint64_t file_size,
                       LlmcHeader* header) {
  if (size < kLlmcHeaderBytes) {
    return Status::Corruption(path + ": " + std::to_string(size) +
                              " bytes, shorter than the 1024-byte llm.c header (truncated?)");
  }
  header->magic = Load<int32_t>(data);
  header->version = Load<int32_t>(data + 4);
  int32_t tokens = Load<int32_t>(data + 8);
  if (header->magic == kLlmcMagicUint16) {
    header->dtype = TokenDtype::kUint16;
  } else if (header->magic == kLlmcMagicUint32) {
    header->dtype = TokenDtype::kUint32;
  } else {
    return Status::Corruption(At(path, 0) + ": magic " + std::to_string(header->magic) +
                              " is not an llm.c shard's (20240520 or 20240801)");
  }
  if (tokens < 0) {
    return Status::Corruption(At(path, 8) + ": negative token count " + std::to_string(tokens));
  }
  header->tokens = static_cast<uint64_t>(tokens);
  uint64_t expected = kLlmcHeaderBytes + header->tokens * TokenDtypeSize(header->dtype);
  if (expected != file_size) {
    return Status::Corruption(At(path, 8) + ": the header declares " +
                              std::to_string(header->tokens) + " tokens (" +
                              std::to_string(expected) + " bytes with the header), but the file " +
                              "has " + std::to_string(file_size) + " bytes" +
                              (file_size < expected ? " (truncated?)" : ""));
  }
  return Status::OK();
}

namespace {

struct Found {
  DatasetFormat format = DatasetFormat::kAuto;
  std::vector<std::string> files;  // .bin files (Megatron: the prefix + ".bin")
};

bool IsMegatronPrefix(const std::string& prefix) {
  return IsRegularFile(prefix + ".idx") && IsRegularFile(prefix + ".bin");
}

std::string StripExtension(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(0, dot);
}

bool FileHasLlmcMagic(const std::string& path) {
  UniqueFd fd;
  char magic[4];
  size_t done = 0;
  return OpenForRead(path, &fd).ok() && PreadFull(fd.get(), magic, 4, 0, path, &done).ok() &&
         HasLlmcMagic(magic, done);
}

Status FindInDirectory(const std::string& directory, const DatasetOptions& options,
                       Found* found) {
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  std::vector<std::string> megatron, bins, all;
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_regular_file) continue;
    std::string full;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, entry.name,
                                                   options.allow_external_paths,
                                                   JoinPath(directory, entry.name), &full));
    if (entry.name == kManifestName) continue;  // gpufeed's own, not tokens
    all.push_back(full);
    if (!EndsWith(entry.name, ".bin")) continue;
    if (IsRegularFile(StripExtension(full) + ".idx")) {
      megatron.push_back(full);
    } else {
      bins.push_back(full);
    }
  }
  DatasetFormat format = options.format;
  if (format == DatasetFormat::kAuto || format == DatasetFormat::kMegatron) {
    if (!megatron.empty()) {
      found->format = DatasetFormat::kMegatron;
      found->files = megatron;
      return Status::OK();
    }
    if (format == DatasetFormat::kMegatron) {
      return Status::NotFound(directory + ": no PREFIX.bin + PREFIX.idx pair (format=\"megatron\")");
    }
  }
  if (format == DatasetFormat::kAuto || format == DatasetFormat::kLlmc) {
    if (!bins.empty() && FileHasLlmcMagic(bins.front())) {
      found->format = DatasetFormat::kLlmc;
      found->files = bins;
      return Status::OK();
    }
    if (format == DatasetFormat::kLlmc) {
      return Status::NotFound(directory + ": no .bin file starting with an llm.c header "
                              "(format=\"llmc\")");
    }
  }
  if (format == DatasetFormat::kTokens) {
    found->format = DatasetFormat::kTokens;
    found->files = bins.empty() ? all : bins;
    if (found->files.empty()) return Status::NotFound(directory + ": no token files (format=\"tokens\")");
  }
  return Status::OK();
}

Status FindFile(const std::string& path, const DatasetOptions& options, Found* found) {
  DatasetFormat format = options.format;
  std::string prefix = EndsWith(path, ".bin") || EndsWith(path, ".idx") ? StripExtension(path) : path;
  if ((format == DatasetFormat::kAuto || format == DatasetFormat::kMegatron) &&
      (IsMegatronPrefix(prefix) || (prefix == path && IsRegularFile(path + ".idx")))) {
    found->format = DatasetFormat::kMegatron;
    found->files = {prefix + ".bin"};
    return Status::OK();
  }
  if (!IsRegularFile(path)) {
    if (format == DatasetFormat::kMegatron) {
      return Status::NotFound(prefix + ".idx / " + prefix + ".bin: no Megatron indexed dataset "
                              "with this prefix");
    }
    return Status::OK();
  }
  if (format == DatasetFormat::kTokens) {
    found->format = DatasetFormat::kTokens;
    found->files = {path};
  } else if ((format == DatasetFormat::kAuto || format == DatasetFormat::kLlmc) &&
             FileHasLlmcMagic(path)) {
    found->format = DatasetFormat::kLlmc;
    found->files = {path};
  } else if (format == DatasetFormat::kLlmc) {
    return Status::Corruption(At(path, 0) + ": no llm.c magic (20240520 or 20240801)");
  } else if (format == DatasetFormat::kAuto && EndsWith(path, ".bin")) {
    return Status::InvalidArgument(path + ": a .bin file with neither a Megatron .idx beside it "
                                   "nor an llm.c header; for a headerless token file pass "
                                   "format=\"tokens\" and its token_dtype");
  }
  return Status::OK();
}

Status AddFile(TokenCorpus* corpus, const std::string& path, const std::shared_ptr<Store>& store,
               TokenDtype requested) {
  TokenFile file;
  file.path = path;
  GPUFEED_RETURN_IF_ERROR(store->Open(path, "", &file.file));
  file.bytes = file.file->size();
  TokenDtype dtype = requested;
  if (corpus->format == DatasetFormat::kMegatron) {
    std::string idx_path = StripExtension(path) + ".idx";
    std::string index_bytes;
    GPUFEED_RETURN_IF_ERROR(ReadFileToString(idx_path, &index_bytes));
    MegatronIndex index;
    GPUFEED_RETURN_IF_ERROR(
        ParseMegatronIndex(index_bytes.data(), index_bytes.size(), idx_path, file.bytes, &index));
    dtype = index.dtype;
    file.tokens = index.tokens;
    corpus->documents += index.documents;
    corpus->sequences += index.sequences;
  } else if (corpus->format == DatasetFormat::kLlmc) {
    char header_bytes[kLlmcHeaderBytes];
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(file.file->ReadAt(0, sizeof(header_bytes), header_bytes, &done));
    LlmcHeader header;
    GPUFEED_RETURN_IF_ERROR(ParseLlmcHeader(header_bytes, done, path, file.bytes, &header));
    dtype = header.dtype;
    file.data_offset = kLlmcHeaderBytes;
    file.tokens = header.tokens;
  } else {
    if (requested == TokenDtype::kAuto) {
      return Status::InvalidArgument(path + ": a headerless token file does not say its dtype; "
                                     "pass token_dtype (e.g. \"uint16\" for nanoGPT's GPT-2 "
                                     "tokens)");
    }
    size_t item = TokenDtypeSize(requested);
    if (file.bytes % item != 0) {
      return Status::Corruption(At(path, file.bytes - file.bytes % item) + ": the file ends in a "
                                "partial " + TokenDtypeName(requested) + " token (" +
                                std::to_string(file.bytes) + " bytes; truncated, or another "
                                "dtype?)");
    }
    file.tokens = file.bytes / item;
  }
  if (requested != TokenDtype::kAuto && requested != dtype) {
    return Status::InvalidArgument(path + " holds " + TokenDtypeName(dtype) +
                                   " tokens, but token_dtype=\"" + TokenDtypeName(requested) +
                                   "\" was asked for");
  }
  if (corpus->dtype != TokenDtype::kAuto && corpus->dtype != dtype) {
    return Status::InvalidArgument(path + " holds " + TokenDtypeName(dtype) + " tokens, but " +
                                   corpus->files.front().path + " holds " +
                                   TokenDtypeName(corpus->dtype) +
                                   ": the files of one corpus share a dtype");
  }
  corpus->dtype = dtype;
  file.first_token = corpus->tokens;
  corpus->tokens += file.tokens;
  corpus->files.push_back(std::move(file));
  return Status::OK();
}

}  // namespace

Status OpenTokenCorpus(const std::string& path, const DatasetOptions& options,
                       const std::shared_ptr<Store>& store,
                       std::shared_ptr<const TokenCorpus>* corpus, bool* recognised) {
  *recognised = false;
  if (options.format != DatasetFormat::kAuto && !IsTokenFormat(options.format)) {
    return Status::OK();
  }
  std::string manifest_path;
  Manifest manifest;
  GPUFEED_RETURN_IF_ERROR(
      FindTokenManifest(AbsolutePath(path), options, &manifest_path, &manifest, recognised));
  if (*recognised) {
    return OpenTokenCorpusFromManifest(manifest_path, manifest, options, store, corpus);
  }
  return OpenTokenCorpusFromFiles(path, options, store, corpus, recognised);
}

Status OpenTokenCorpusFromFiles(const std::string& path, const DatasetOptions& options,
                                const std::shared_ptr<Store>& store,
                                std::shared_ptr<const TokenCorpus>* corpus, bool* recognised) {
  *recognised = false;
  DatasetFormat format = options.format;
  if (format != DatasetFormat::kAuto && !IsTokenFormat(format)) return Status::OK();
  std::string absolute = AbsolutePath(path);
  Found found;
  if (IsDirectory(absolute)) {
    GPUFEED_RETURN_IF_ERROR(FindInDirectory(absolute, options, &found));
  } else {
    GPUFEED_RETURN_IF_ERROR(FindFile(absolute, options, &found));
  }
  if (found.format == DatasetFormat::kAuto) {
    if (format == DatasetFormat::kAuto) return Status::OK();
    return Status::NotFound(absolute + ": no " + FormatName(format) + " token files here");
  }
  *recognised = true;
  auto opened = std::make_shared<TokenCorpus>();
  opened->format = found.format;
  for (const std::string& file : found.files) {
    GPUFEED_RETURN_IF_ERROR(AddFile(opened.get(), file, store, options.tokens.token_dtype));
  }
  *corpus = std::move(opened);
  return Status::OK();
}

}  // namespace gpufeed
