// Token corpora read as they are: Megatron-LM indexed datasets (PREFIX.bin +
// PREFIX.idx), llm.c / modded-nanogpt shards (a 256 x int32 header, then the
// tokens) and headerless token files (nanoGPT's train.bin). A corpus is the
// token stream of its files in order; TokenWindowDataset (token_dataset.cc)
// cuts it into windows of seq_len + 1 tokens. Byte layouts: docs/formats.md.
//
// Every count in a header or an index is checked against the size of the
// file it describes before anything is allocated or read, and a bad one
// fails with Corruption naming the file and the byte offset.
//
// Thread safety: a TokenCorpus is immutable after OpenTokenCorpus.
#ifndef GPUFEED_FORMAT_TOKEN_CORPUS_H_
#define GPUFEED_FORMAT_TOKEN_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/dataset_base.h"
#include "format/manifest.h"
#include "gpufeed/dataset.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

class TokenHeadsWriter;  // token_heads.h

// Megatron-LM's .idx: "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64
// sequence count, u64 document count, int32 lengths[S], int64 byte
// pointers[S], int64 document indices[D] (0 ... S), and in multimodal files
// int8 modes[S].
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kMegatronHeaderBytes = 34;
struct MegatronIndex {
  TokenDtype dtype = TokenDtype::kAuto;
  uint64_t sequences = 0;
  uint64_t documents = 0;  // document indices minus one
  uint64_t tokens = 0;     // sum of the sequence lengths
  bool multimodal = false;
};
// Parses the .idx bytes (`idx_path` names them in errors) against the .bin
// size: the pointers must be the running sum of lengths x dtype size, and
// the tokens must end within `bin_size`. The fuzz target's entry point.
Status ParseMegatronIndex(const char* data, size_t size, const std::string& idx_path,
                          uint64_t bin_size, MegatronIndex* index);

// llm.c: header[0] magic (20240520: uint16 tokens; 20240801: uint32),
// header[1] version, header[2] token count; the tokens follow at byte 1024.
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);
constexpr int32_t kLlmcMagicUint16 = 20240520;
constexpr int32_t kLlmcMagicUint32 = 20240801;
struct LlmcHeader {
  int32_t magic = 0;
  int32_t version = 0;
  TokenDtype dtype = TokenDtype::kAuto;
  uint64_t tokens = 0;
};
bool HasLlmcMagic(const char* data, size_t size);
// Parses the first `size` bytes of a shard whose size is `file_size`: the
// file must hold exactly the header and the tokens it declares.
Status ParseLlmcHeader(const char* data, size_t size, const std::string& path, uint64_t file_size,
                       LlmcHeader* header);

// One file of a corpus.
struct TokenFile {
  std::string path;
  uint64_t data_offset = 0;  // bytes before the first token
  uint64_t tokens = 0;
  uint64_t first_token = 0;  // position of its first token in the stream
  uint64_t bytes = 0;        // the file's size
  // Opened from a manifest without reading its llm.c header: the first read
  // checks it (CheckHeaderAgainstManifest) before any token is returned.
  bool header_checked_at_first_read = false;
  std::shared_ptr<const StoreFile> file;
};

struct TokenCorpus {
  DatasetFormat format = DatasetFormat::kTokens;
  TokenDtype dtype = TokenDtype::kAuto;
  std::vector<TokenFile> files;
  uint64_t tokens = 0;
  uint64_t documents = 0;
  uint64_t sequences = 0;
  // Opened from a manifest: where `gpufeed index` wrote the heads
  // (token_heads.h), which may be missing. Empty otherwise.
  std::string heads_path;
};

// Opens the token corpus at `path` when it is one. With a gpufeed.json that
// describes it (FindTokenManifest; `gpufeed index` writes one), from that
// alone: no token file is opened or read until a window needs it.
// Otherwise from the files (OpenTokenCorpusFromFiles): a Megatron prefix (or
// its .bin / .idx), a directory of Megatron pairs, an llm.c shard or a
// directory of them (name order), or with format kTokens a headerless file
// or a directory of them (the .bin files, else every file, in name order).
// *recognised is false (and OK returned) when options.format is kAuto and
// `path` holds none of these; then the other formats are tried.
Status OpenTokenCorpus(const std::string& path, const DatasetOptions& options,
                       const std::shared_ptr<Store>& store,
                       std::shared_ptr<const TokenCorpus>* corpus, bool* recognised);

// OpenTokenCorpus without looking for a manifest: every file opened and its
// header (or .idx) read now. `gpufeed index` describes the files with it.
Status OpenTokenCorpusFromFiles(const std::string& path, const DatasetOptions& options,
                                const std::shared_ptr<Store>& store,
                                std::shared_ptr<const TokenCorpus>* corpus, bool* recognised);

// token_manifest.cc. The gpufeed.json beside `absolute` (in it, for a
// directory) when it is a token manifest that identifies every file
// (ManifestIdentifiesEveryFile); for one file or Megatron prefix of its
// directory, *manifest keeps that file's shard only. *found false (OK) when
// there is none, it describes another format, or it does not list the file.
Status FindTokenManifest(const std::string& absolute, const DatasetOptions& options,
                         std::string* manifest_path, Manifest* manifest, bool* found);
// The corpus from the manifest alone: no file is opened, stat'ed or read
// (each through Store::OpenLazily); an llm.c file's header is checked
// against the manifest at its first read (CheckHeaderAgainstManifest).
Status OpenTokenCorpusFromManifest(const std::string& manifest_path, const Manifest& manifest,
                                   const DatasetOptions& options,
                                   const std::shared_ptr<Store>& store,
                                   std::shared_ptr<const TokenCorpus>* corpus);
// The manifest WriteTokenManifest writes (the files opened, checksummed),
// and when `heads` is not null the heads file beside it (token_heads.h),
// from the same read of each file, opened and added to (not committed).
Status ManifestForTokenCorpus(const std::string& path, const DatasetOptions& options,
                              std::string* manifest_path, Manifest* manifest,
                              TokenHeadsWriter* heads = nullptr);
// Reads the llm.c header of `file` (a lazily opened file: this read opens
// it) and compares it with what the manifest said: Corruption naming the
// file and byte offset when they differ.
Status CheckHeaderAgainstManifest(const TokenFile& file, TokenDtype dtype);

// The Dataset over a corpus: sample i = window i of `seq_len` + 1 tokens.
// block_bytes > 0: Locate gives whole blocks of about that many bytes (the
// read engine reads each once for all its windows; BlockSizes gives them);
// 0: each window alone (random access).
Status NewTokenWindowDataset(const std::string& path, std::shared_ptr<Store> store,
                             std::shared_ptr<const TokenCorpus> corpus, uint32_t seq_len,
                             uint32_t block_bytes, std::unique_ptr<Dataset>* dataset);
// The same corpus as `dataset` (a token corpus), windowed anew: the loader's
// TokenWindows transform. InvalidArgument naming the format otherwise.
Status TokenWindowsOf(const std::shared_ptr<const Dataset>& dataset, uint32_t seq_len,
                      uint32_t block_bytes, std::shared_ptr<const Dataset>* windows);

// Where a window's seq_len + 1 tokens are: the first seq_len at `tokens`,
// the last at `last` (tokens + seq_len tokens, or in the corpus's heads when
// the window was read without it).
struct TokenWindowBytes {
  const char* tokens = nullptr;
  const char* last = nullptr;
};

// What a token-window dataset offers the loader beyond Dataset.
class TokenWindows {
 public:
  virtual ~TokenWindows() = default;
  // Window `index` inside `data`, the bytes the read engine fetched for
  // `location` (Locate's range): the same checks as ParseLocated, without
  // the copy into a Record. Corruption when the range came back short, or
  // when the heads disagree with the bytes read.
  virtual Status WindowIn(uint64_t index, const RecordLocation& location, const char* data,
                          size_t size, TokenWindowBytes* window) const = 0;
  // The windows of one read unit (with block reads: one block of a file)
  // have the same Locate range, so a caller that located one of them may
  // give the others that range without locating each (a Locate copies the
  // file's name twice and leases its descriptor). kNoReadUnit: the window
  // is located on its own (window reads, or a window spanning two files).
  static constexpr uint64_t kNoReadUnit = UINT64_MAX;
  virtual uint64_t ReadUnitOf(uint64_t index) const = 0;
};

// `dataset` as token windows, or null when it is not a token corpus: look it
// up once (a dynamic_cast), not per window.
const TokenWindows* AsTokenWindows(const Dataset& dataset);

// Verify for token corpora: the headers and indexes (as OpenTokenCorpus),
// then every token byte read. *recognised false: not a token corpus (and
// nothing done). records_checked counts tokens, shards_checked files.
Status VerifyTokenCorpus(const std::string& path, const DatasetOptions& options,
                         VerifyReport* report, bool* recognised);

// Converts `count` tokens at `source` (of `from`; any alignment) to int32 or
// int64 at `destination`.
void WidenTokens(TokenDtype from, const char* source, size_t count, TensorDtype to,
                 void* destination);

// The same by a named path, for tests that compare them: kAuto is what
// WidenTokens does (the best this CPU has). A path the CPU or build lacks,
// or a dtype it does not handle, falls back to the next (AVX2 -> SSE2 ->
// scalar); TokenWideningAvailable says whether `how` runs as itself.
enum class TokenWidening { kAuto, kAvx2, kSse2, kScalar };
bool TokenWideningAvailable(TokenWidening how);
void WidenTokensWith(TokenWidening how, TokenDtype from, const char* source, size_t count,
                     TensorDtype to, void* destination);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TOKEN_CORPUS_H_
