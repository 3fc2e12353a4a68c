// TokenWindowDataset: a token corpus (token_corpus.h) as samples of
// seq_len + 1 tokens. Window i is stream[i * seq_len, i * seq_len + seq_len + 1).
//
// Reads: a window inside one file is located for the read engine, alone
// (block_bytes 0: random access) or as its whole block (consecutive windows
// of about block_bytes, one large read the engine shares between them); a
// window that spans two files is read by Read, which assembles it from
// both through the store. A window located alone whose last token the
// corpus's heads keep (token_heads.h) is located without that token.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/datasets.h"
#include "format/token_corpus.h"
#include "format/token_heads.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

constexpr uint64_t kDefaultBlockBytes = 4u << 20;

class TokenWindowDataset : public DatasetBase, public TokenWindows {
 public:
  TokenWindowDataset(const std::string& path, std::shared_ptr<Store> store,
                     std::shared_ptr<const TokenCorpus> corpus, uint32_t seq_len,
                     uint32_t block_bytes);

  uint64_t size() const override { return info_.windows; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                      size_t size, Record* record) const override;
  bool CanLocate() const override { return info_.windows > 0; }
  void CountLocatedRead(const RecordLocation& location, uint64_t bytes) const override;
  std::vector<uint64_t> BlockSizes() const override;
  const TokenCorpusInfo* token_info() const override { return &info_; }
  const std::shared_ptr<const TokenCorpus>& corpus() const { return corpus_; }
  // ParseLocated without the copy: where the window lies in `data`.
  Status WindowIn(uint64_t index, const RecordLocation& location, const char* data, size_t size,
                  TokenWindowBytes* window) const override;
  uint64_t ReadUnitOf(uint64_t index) const override;

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    if (index >= info_.windows) return nullptr;
    return corpus_->files[FileOfToken(index * seq_len_)].file.get();
  }

 private:
  // Consecutive windows starting in one file, read together.
  struct Block {
    uint64_t first_window = 0;
    uint64_t windows = 0;
    size_t file = 0;
    uint64_t begin_token = 0;  // stream positions, within the file
    uint64_t end_token = 0;
  };
  size_t FileOfToken(uint64_t token) const;
  const Block& BlockOf(uint64_t window) const;
  uint64_t ByteOffset(const TokenFile& file, uint64_t token) const {
    return file.data_offset + (token - file.first_token) * item_;
  }
  void Describe(uint64_t index, Record* record) const;
  // OK, or why file `f` must not be read (its llm.c header disagrees with
  // the manifest it was opened from), naming sample `index`.
  Status ReadyToRead(size_t f, uint64_t index) const;
  // The head the corpus's heads keep for the last token of window `index`
  // (in file `f`), or null: window reads only, and only for windows whose
  // first seq_len tokens span at least one granule, so that the bytes read
  // always hold heads to check (CheckHeads). The heads file is mapped at
  // the first call.
  const char* LastFromHeads(size_t f, uint64_t index) const;
  void LoadHeads() const;
  // Corruption when a head inside the bytes read for the window at byte
  // `offset` of file `f` differs from them (the file changed since
  // `gpufeed index`).
  Status CheckHeads(size_t f, uint64_t index, uint64_t offset, const char* tokens) const;

  const std::shared_ptr<const TokenCorpus> corpus_;
  const uint64_t seq_len_;
  const size_t item_;
  const bool window_reads_;
  TokenCorpusInfo info_;
  std::vector<Block> blocks_;
  std::unordered_map<std::string, size_t> file_of_path_;  // for CountLocatedRead
  // Files opened from a manifest: their header checked once, at the first
  // read of any thread (the others wait for it), the outcome kept.
  struct FirstRead {
    std::once_flag once;
    Status status;  // written once under `once`, then read only
  };
  mutable std::unique_ptr<FirstRead[]> first_reads_;
  // Written once under heads_once_, then read only.
  mutable std::once_flag heads_once_;
  mutable std::shared_ptr<const TokenHeads> heads_;
  mutable std::vector<const TokenHeadsEntry*> heads_of_file_;  // per file, or null
};

TokenWindowDataset::TokenWindowDataset(const std::string& path, std::shared_ptr<Store> store,
                                       std::shared_ptr<const TokenCorpus> corpus,
                                       uint32_t seq_len, uint32_t block_bytes)
    : DatasetBase(corpus->format, path, std::move(store)),
      corpus_(std::move(corpus)),
      seq_len_(seq_len),
      item_(TokenDtypeSize(corpus_->dtype)),
      window_reads_(block_bytes == 0) {
  info_.token_dtype = corpus_->dtype;
  info_.tokens = corpus_->tokens;
  info_.documents = corpus_->documents;
  info_.sequences = corpus_->sequences;
  info_.seq_len = seq_len;
  info_.windows = corpus_->tokens > 0 ? (corpus_->tokens - 1) / seq_len_ : 0;
  const uint64_t block = block_bytes == 0 ? kDefaultBlockBytes : block_bytes;
  const uint64_t per_block = std::max<uint64_t>(1, block / (seq_len_ * item_));
  first_reads_ = std::make_unique<FirstRead[]>(corpus_->files.size());
  for (size_t f = 0; f < corpus_->files.size(); ++f) {
    const TokenFile& file = corpus_->files[f];
    file_of_path_.emplace(file.path, f);
    const uint64_t file_end = file.first_token + file.tokens;
    uint64_t first = (file.first_token + seq_len_ - 1) / seq_len_;
    uint64_t last = std::min(info_.windows, (file_end + seq_len_ - 1) / seq_len_);
    ShardInfo shard;
    shard.path = file.path;
    shard.first_record = first;
    shard.records = last > first ? last - first : 0;
    shard.bytes = file.bytes;
    shards_.push_back(shard);
    for (uint64_t w = first; w < last; w += per_block) {
      Block b;
      b.first_window = w;
      b.windows = std::min(per_block, last - w);
      b.file = f;
      b.begin_token = w * seq_len_;
      b.end_token = std::min(file_end, (w + b.windows - 1) * seq_len_ + seq_len_ + 1);
      blocks_.push_back(b);
    }
  }
}

size_t TokenWindowDataset::FileOfToken(uint64_t token) const {
  const auto& files = corpus_->files;
  auto after = std::upper_bound(files.begin(), files.end(), token,
                                [](uint64_t t, const TokenFile& f) { return t < f.first_token; });
  size_t f = static_cast<size_t>(after - files.begin()) - 1;
  // Files without tokens share a first_token with the next: skip them.
  while (f + 1 < files.size() && files[f].tokens == 0) ++f;
  return f;
}

const TokenWindowDataset::Block& TokenWindowDataset::BlockOf(uint64_t window) const {
  auto after = std::upper_bound(blocks_.begin(), blocks_.end(), window,
                                [](uint64_t w, const Block& b) { return w < b.first_window; });
  return *(after - 1);
}

uint64_t TokenWindowDataset::ReadUnitOf(uint64_t index) const {
  if (window_reads_ || index >= info_.windows) return kNoReadUnit;
  const Block& block = BlockOf(index);
  const TokenFile& file = corpus_->files[block.file];
  // As Locate: a window spanning two files is read on its own.
  if (index * seq_len_ + seq_len_ + 1 > file.first_token + file.tokens) return kNoReadUnit;
  return static_cast<uint64_t>(&block - blocks_.data());
}

std::vector<uint64_t> TokenWindowDataset::BlockSizes() const {
  std::vector<uint64_t> sizes;
  for (const Block& b : blocks_) sizes.push_back(b.windows);
  if (sizes.empty()) sizes.push_back(info_.windows);
  return sizes;
}

void TokenWindowDataset::Describe(uint64_t index, Record* record) const {
  const TokenFile& file = corpus_->files[FileOfToken(index * seq_len_)];
  record->labels.clear();
  record->key.clear();
  record->id = index;
  record->encoded = false;
  if (record->shape.size() != 1) record->shape.resize(1);
  record->shape[0] = static_cast<int64_t>(seq_len_ + 1);
  // The file only (no per-window formatting on the hot path): the window's
  // offset is index * seq_len tokens into the stream (errors give it).
  record->source = file.path;
}

Status TokenWindowDataset::ReadyToRead(size_t f, uint64_t index) const {
  const TokenFile& file = corpus_->files[f];
  if (!file.header_checked_at_first_read) return Status::OK();
  FirstRead& first = first_reads_[f];
  std::call_once(first.once,
                 [&] { first.status = CheckHeaderAgainstManifest(file, corpus_->dtype); });
  if (first.status.ok()) return Status::OK();  // no string built per window
  return first.status.WithContext("sample " + std::to_string(index));
}

Status TokenWindowDataset::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  Describe(index, record);
  record->data.resize((seq_len_ + 1) * item_);
  uint64_t token = index * seq_len_;
  uint64_t end = token + seq_len_ + 1;
  char* out = record->data.data();
  // A window spanning files is assembled from each in turn.
  for (size_t f = FileOfToken(token); token < end; ++f) {
    const TokenFile& file = corpus_->files[f];
    uint64_t count = std::min(end, file.first_token + file.tokens) - token;
    if (count == 0) continue;
    size_t want = count * item_, done = 0;
    uint64_t offset = ByteOffset(file, token);
    GPUFEED_RETURN_IF_ERROR(ReadyToRead(f, index));
    Status read = file.file->ReadAt(offset, want, out, &done);
    if (!read.ok()) {
      // A file opened from its manifest is first opened here: say which
      // sample's read found it missing or of another size.
      return file.file->lazy() ? read.WithContext("sample " + std::to_string(index)) : read;
    }
    if (done != want) {
      return Status::Corruption(file.path + " at byte offset " + std::to_string(offset + done) +
                                ": the file ends early (it held " + std::to_string(file.bytes) +
                                " bytes when opened), sample " + std::to_string(index));
    }
    out += want;
    token += count;
  }
  return Status::OK();
}

bool TokenWindowDataset::Locate(uint64_t index, RecordLocation* location) const {
  if (index >= info_.windows) return false;
  const Block& block = BlockOf(index);
  const TokenFile& file = corpus_->files[block.file];
  uint64_t begin = index * seq_len_, end = begin + seq_len_ + 1;
  if (end > file.first_token + file.tokens) return false;  // spans two files: Read
  if (!ReadyToRead(block.file, index).ok()) return false;  // Read returns the error
  if (!window_reads_) {
    begin = block.begin_token;
    end = block.end_token;
  } else if (LastFromHeads(block.file, index) != nullptr) {
    end -= 1;  // WindowIn takes the last token from the heads
  }
  return LocateRange(*file.file, file.path, ByteOffset(file, begin), (end - begin) * item_,
                     location);
}

const char* TokenWindowDataset::LastFromHeads(size_t f, uint64_t index) const {
  if (!window_reads_ || corpus_->heads_path.empty()) return nullptr;
  std::call_once(heads_once_, [this] { LoadHeads(); });
  const TokenHeadsEntry* entry = heads_of_file_.empty() ? nullptr : heads_of_file_[f];
  if (entry == nullptr || seq_len_ * item_ < heads_->granule()) return nullptr;
  return heads_->At(*entry, ByteOffset(corpus_->files[f], index * seq_len_ + seq_len_));
}

void TokenWindowDataset::LoadHeads() const {
  // The heads only speed reads up: without usable ones, windows are read
  // whole, and a heads file that is damaged or describes other files says
  // so once.
  Status opened = TokenHeads::Open(corpus_->heads_path, &heads_);
  if (!opened.ok()) {
    if (opened.code() == Status::Code::kNotFound) {
      Log().info("{}: none (indexed before heads existed); windows are read whole, one token "
                 "past seq_len (`gpufeed index` again writes it)",
                 corpus_->heads_path);
    } else {
      Log().warn("{}; token windows are read whole", opened.ToString());
    }
    return;
  }
  size_t missing = 0;
  const TokenFile* first_missing = nullptr;
  heads_of_file_.assign(corpus_->files.size(), nullptr);
  for (size_t f = 0; f < corpus_->files.size(); ++f) {
    const TokenFile& file = corpus_->files[f];
    if (heads_->token_bytes() == item_) {
      heads_of_file_[f] = heads_->Find(file.bytes, file.file->xxh64(), file.data_offset,
                                       file.data_offset + file.tokens * item_);
    }
    if (heads_of_file_[f] == nullptr && missing++ == 0) first_missing = &file;
  }
  if (missing > 0) {
    Log().warn("{} does not describe {} of the corpus's {} files as its manifest does ({} and "
               "any others: run `gpufeed index` again); their windows are read whole",
               corpus_->heads_path, missing, corpus_->files.size(), first_missing->path);
  }
  if (missing < corpus_->files.size()) {
    Log().info("{}: windows whose last token starts a {}-byte boundary are read without it",
               corpus_->heads_path, heads_->granule());
  }
}

Status TokenWindowDataset::CheckHeads(size_t f, uint64_t index, uint64_t offset,
                                      const char* tokens) const {
  // Every head inside the bytes read (at least one: LastFromHeads) is
  // compared with them.
  Status compared = heads_->Compare(*heads_of_file_[f], corpus_->files[f].path, offset, tokens,
                                    seq_len_ * item_);
  if (compared.ok()) return compared;
  return Status::Corruption(compared.message() + ", sample " + std::to_string(index));
}

Status TokenWindowDataset::WindowIn(uint64_t index, const RecordLocation& location,
                                    const char* data, size_t size,
                                    TokenWindowBytes* window) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  const size_t f = FileOfToken(index * seq_len_);
  const TokenFile& file = corpus_->files[f];
  const size_t bytes = (seq_len_ + 1) * item_;
  const uint64_t offset = ByteOffset(file, index * seq_len_);
  // Counts nothing: the read is counted once, by CountLocatedRead, so the
  // per-window path touches no shared counter.
  const char* head = nullptr;
  const bool inside = offset >= location.offset;
  const bool whole = inside && offset - location.offset + bytes <= size;
  if (!whole && inside && offset - location.offset + bytes - item_ <= size) {
    head = LastFromHeads(f, index);  // located without it
  }
  if (!whole && head == nullptr) {
    return Status::Corruption(file.path + " at byte offset " +
                              std::to_string(location.offset + size) +
                              ": the file ends early (it held " + std::to_string(file.bytes) +
                              " bytes when opened), sample " + std::to_string(index));
  }
  window->tokens = data + (offset - location.offset);
  window->last = whole ? window->tokens + seq_len_ * item_ : head;
  return whole ? Status::OK() : CheckHeads(f, index, offset, window->tokens);
}

void TokenWindowDataset::CountLocatedRead(const RecordLocation& location, uint64_t bytes) const {
  // A located range lies in one file (Locate refuses windows spanning two).
  auto found = file_of_path_.find(location.path);
  if (found == file_of_path_.end()) return;
  FileView engine_view;
  engine_view.local = location.local;
  corpus_->files[found->second].file->Count(engine_view, bytes);
}

Status TokenWindowDataset::ParseLocated(uint64_t index, const RecordLocation& location,
                                        const char* data, size_t size, Record* record) const {
  TokenWindowBytes window;
  GPUFEED_RETURN_IF_ERROR(WindowIn(index, location, data, size, &window));
  Describe(index, record);
  record->data.assign(window.tokens, seq_len_ * item_);
  record->data.append(window.last, item_);
  return Status::OK();
}

}  // namespace

Status NewTokenWindowDataset(const std::string& path, std::shared_ptr<Store> store,
                             std::shared_ptr<const TokenCorpus> corpus, uint32_t seq_len,
                             uint32_t block_bytes, std::unique_ptr<Dataset>* dataset) {
  if (seq_len == 0) return Status::InvalidArgument("seq_len must be at least 1");
  if (corpus->tokens < 2) {
    return Status::InvalidArgument(path + ": the corpus holds " + std::to_string(corpus->tokens) +
                                   " tokens, too few for one window (at least 2)");
  }
  *dataset = std::make_unique<TokenWindowDataset>(path, std::move(store), std::move(corpus),
                                                  seq_len, block_bytes);
  return Status::OK();
}

Status TokenWindowsOf(const std::shared_ptr<const Dataset>& dataset, uint32_t seq_len,
                      uint32_t block_bytes, std::shared_ptr<const Dataset>* windows) {
  auto* tokens = dynamic_cast<const TokenWindowDataset*>(dataset.get());
  if (tokens == nullptr) {
    return Status::InvalidArgument(std::string("the token-window transform needs a token corpus "
                                                "(megatron, llmc or tokens); ") +
                                   dataset->path() + " is a " + FormatName(dataset->format()) +
                                   " dataset");
  }
  std::unique_ptr<Dataset> made;
  GPUFEED_RETURN_IF_ERROR(NewTokenWindowDataset(tokens->path(), tokens->store(), tokens->corpus(),
                                                seq_len, block_bytes, &made));
  *windows = std::move(made);
  return Status::OK();
}

const TokenWindows* AsTokenWindows(const Dataset& dataset) {
  return dynamic_cast<const TokenWindowDataset*>(&dataset);
}

}  // namespace gpufeed
