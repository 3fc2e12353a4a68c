// RecordIO datasets: one or more .rec files, each with an .idx (or scanned).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/recordio.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/fork_hooks.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// Size hint for a record whose end the index does not tell.
constexpr size_t kDefaultRecordHint = 256 << 10;
// A hint is only a guess (an index need not be sorted): never read more
// than this ahead for one record; a larger record is fetched as needed.
constexpr size_t kMaxRecordHint = 4 << 20;

struct RecordIOShard {
  std::string rec_path;
  std::string idx_path;  // empty when scanned
  std::shared_ptr<const StoreFile> file;
  uint64_t file_size = 0;
  // Opened lazily (RecordIOShardSpec::lazy): the .idx, read and parsed at
  // the shard's first use (Load), then let go. `offsets` and `keys` are
  // written once, under load_mutex, before `loaded` is set.
  std::shared_ptr<const StoreFile> index_file;
  int64_t expected_records = -1;
  std::string manifest_path;
  std::mutex load_mutex;
  std::atomic<bool> loaded{true};
  Status load_error;  // guarded by load_mutex: a corrupt or missing .idx
  std::vector<uint64_t> offsets;
  std::vector<std::string> keys;
};

class RecordIODataset final : public DatasetBase {
 public:
  RecordIODataset(std::string path, std::shared_ptr<Store> store)
      : DatasetBase(DatasetFormat::kRecordIO, std::move(path), std::move(store)) {}
  ~RecordIODataset() override {
    if (fork_hooks_ != 0) UnregisterForkHooks(fork_hooks_);
  }

  Status AddShard(const RecordIOShardSpec& spec);
  // A shard of a manifest that identifies its files: nothing is opened.
  Status AddLazyShard(const RecordIOShardSpec& spec);
  void Finalize() {
    first_records_.clear();
    for (const ShardInfo& info : shards_) first_records_.push_back(info.first_record);
    if (lazy_ && fork_hooks_ == 0) {
      fork_hooks_ = RegisterForkHooks({nullptr, nullptr, [this] { ForgetLoadsInChild(); }});
    }
  }
  void SetClasses(std::vector<std::string> classes, bool integer_labels) {
    classes_ = std::move(classes);
    integer_labels_ = integer_labels;
  }

  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                      size_t size, Record* record) const override;
  bool CanLocate() const override;

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    return files_[ShardIndexOf(index)]->file.get();
  }

 private:
  // The shard holding sample `index`, its index read (Load), and the
  // sample's position in it.
  Status ShardOf(uint64_t index, const RecordIOShard** shard, size_t* local) const;
  size_t ShardIndexOf(uint64_t index) const;
  // Reads and checks a lazily opened shard's .idx, once; its error (named)
  // again on every later call when the index is missing or corrupt.
  Status Load(RecordIOShard* shard) const;
  // In a fork()ed child (torch DataLoader workers): a load another thread
  // of the parent ran at the fork left its shard's load_mutex held and its
  // index half-read, forever. Every shard not loaded gets a fresh mutex and
  // an empty index (the old ones leaked, not destroyed: they may be torn),
  // and the child loads it again. A child-only hook: waiting for loads
  // before the fork would wait under the store's fork lock, which a load
  // takes.
  void ForgetLoadsInChild();
  Status ReadIndex(RecordIOShard* shard) const;
  // Bytes from the record's offset to the next record's (or the end of the
  // file); 0 when the index is not sorted there.
  static uint64_t RecordLength(const RecordIOShard& shard, size_t local);
  // Decodes record `local` of `shard` through `view`; `window` holds the
  // file's bytes from `preloaded_at` when that is not negative.
  Status ParseAt(const RecordIOShard& shard, size_t local, uint64_t index, uint64_t hint,
                 const FileView& view, std::string* window, Record* record,
                 int64_t preloaded_at = -1) const;
  // A record that did not parse from a node-cache copy: read it from the
  // source; when that parses, the copy is bad and is made again.
  Status RetryFromSource(const RecordIOShard& shard, size_t local, uint64_t index, uint64_t hint,
                         FileView* bad, Status status, Record* record) const;

  std::vector<std::unique_ptr<RecordIOShard>> files_;
  std::vector<uint64_t> first_records_;
  uint64_t total_ = 0;
  bool lazy_ = false;
  uint64_t fork_hooks_ = 0;  // registered by Finalize for lazy shards
};

void RecordIODataset::ForgetLoadsInChild() {
  for (auto& shard : files_) {
    if (shard->loaded.load(std::memory_order_acquire)) continue;
    RenewInChild(&shard->load_mutex);
    RenewInChild(&shard->load_error);
    RenewInChild(&shard->offsets);
    RenewInChild(&shard->keys);
  }
}

Status RecordIODataset::AddLazyShard(const RecordIOShardSpec& spec) {
  auto shard = std::make_unique<RecordIOShard>();
  shard->rec_path = spec.rec_path;
  shard->idx_path = spec.idx_path;
  shard->file_size = spec.expected_bytes;
  shard->expected_records = spec.expected_records;
  shard->manifest_path = spec.manifest_path;
  shard->loaded.store(false);
  FileIdentity rec{spec.expected_bytes, spec.xxh64, spec.manifest_path};
  FileIdentity idx{spec.index_bytes, spec.index_xxh64, spec.manifest_path};
  GPUFEED_RETURN_IF_ERROR(store_->OpenLazily(spec.rec_path, rec, &shard->file));
  GPUFEED_RETURN_IF_ERROR(store_->OpenLazily(spec.idx_path, idx, &shard->index_file));
  ShardInfo info;
  info.path = spec.rec_path;
  info.first_record = total_;
  info.records = static_cast<uint64_t>(spec.expected_records);
  info.bytes = spec.expected_bytes;
  info.xxh64 = spec.xxh64;
  shards_.push_back(info);
  total_ += info.records;
  files_.push_back(std::move(shard));
  lazy_ = true;
  return Status::OK();
}

Status RecordIODataset::Load(RecordIOShard* shard) const {
  if (shard->loaded.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard<std::mutex> lock(shard->load_mutex);
  if (shard->loaded.load(std::memory_order_relaxed)) return Status::OK();
  if (!shard->load_error.ok()) return shard->load_error;
  Status status = ReadIndex(shard);
  if (!status.ok()) {
    // A missing or corrupt index stays so; a passing I/O error is retried.
    if (status.IsNotFound() || status.IsCorruption()) shard->load_error = status;
    return status;
  }
  // Loaded before the index file goes: a child forked in between finds the
  // shard either loaded or with its index file (ForgetLoadsInChild).
  shard->loaded.store(true, std::memory_order_release);
  shard->index_file.reset();  // read: its descriptor need not stay open
  return Status::OK();
}

Status RecordIODataset::ReadIndex(RecordIOShard* shard) const {
  const StoreFile& index = *shard->index_file;
  auto parse = [&](const FileView& view) -> Status {
    std::string text(index.size(), '\0');
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(PreadFull(view.fd, text.data(), text.size(), 0, view.shown, &done));
    index.Count(view, done);
    if (done != text.size()) {
      return Status::Corruption(view.shown + ": ends at byte offset " + std::to_string(done) +
                                " but the manifest " + shard->manifest_path + " says it holds " +
                                std::to_string(text.size()) + " bytes");
    }
    // The manifest identifies the .idx by its checksum (the key of its
    // node-cache copy): an index edited since packing would describe other
    // offsets than the .rec's checksum vouches for.
    Xxh64 digest;
    digest.Update(text.data(), text.size());
    std::string hex = Xxh64Hex(digest.Digest());
    if (hex != index.xxh64()) {
      return Status::Corruption(view.shown + ": xxh64 " + hex + " does not match " +
                                index.xxh64() + " from the manifest " + shard->manifest_path +
                                " (changed since it was packed?)");
    }
    GPUFEED_RETURN_IF_ERROR(ParseRecordIOIndex(text, shard->idx_path, shard->file_size,
                                               &shard->offsets, &shard->keys));
    if (shard->offsets.size() != static_cast<uint64_t>(shard->expected_records)) {
      return Status::Corruption(shard->idx_path + ": holds " +
                                std::to_string(shard->offsets.size()) +
                                " records but the manifest " + shard->manifest_path + " says " +
                                std::to_string(shard->expected_records));
    }
    return Status::OK();
  };
  FileView view;
  GPUFEED_RETURN_IF_ERROR(index.View(0, index.size(), &view));
  Status status = parse(view);
  if (status.ok() || !view.local || !status.IsCorruption()) return status;
  // A node-cache copy that does not parse where the source may: as for a
  // record (RetryFromSource).
  FileView source;
  if (!index.SourceView(&source).ok()) return status;
  Status from_source = parse(source);
  if (from_source.ok()) index.Invalidate(&view);
  return from_source;
}

Status RecordIODataset::AddShard(const RecordIOShardSpec& spec) {
  auto shard = std::make_unique<RecordIOShard>();
  shard->rec_path = spec.rec_path;
  Status opened = store_->Open(spec.rec_path, spec.xxh64, &shard->file);
  if (opened.IsNotFound() && !spec.manifest_path.empty()) {
    return Status::NotFound(spec.rec_path + ": shard listed in the manifest " +
                            spec.manifest_path + " does not exist");
  }
  GPUFEED_RETURN_IF_ERROR(opened);
  shard->file_size = shard->file->size();
  // The size the manifest recorded is checked before the .idx is trusted: a
  // shard truncated or replaced since packing fails here, by name, rather
  // than at some record later.
  if (spec.expected_bytes != 0 && shard->file_size != spec.expected_bytes) {
    return Status::Corruption(spec.rec_path + ": the file ends at byte offset " +
                              std::to_string(shard->file_size) + " but the manifest " +
                              spec.manifest_path + " says it holds " +
                              std::to_string(spec.expected_bytes) +
                              " bytes (truncated or replaced since it was packed?)");
  }
  std::string idx_path = spec.idx_path.empty() ? IndexPathFor(spec.rec_path) : spec.idx_path;
  // Through the store (counted as a source open), without a stat first.
  std::string index_text;
  Status index = store_->ReadWholeFile(idx_path, &index_text, nullptr);
  if (!index.ok() && !index.IsNotFound()) return index;
  if (index.ok()) {
    shard->idx_path = idx_path;
    GPUFEED_RETURN_IF_ERROR(ParseRecordIOIndex(index_text, idx_path, shard->file_size,
                                               &shard->offsets, &shard->keys));
  } else if (spec.idx_required) {
    return Status::NotFound(idx_path + ": the index named by the manifest does not exist "
                            "(write it with `gpufeed index " + spec.rec_path + "`)");
  } else {
    Log().info("{} has no index ({}); indexing it by scanning. `gpufeed index {}` writes one.",
               spec.rec_path, idx_path, spec.rec_path);
    FileView view;
    GPUFEED_RETURN_IF_ERROR(shard->file->SourceView(&view));
    uint64_t count = 0;
    GPUFEED_RETURN_IF_ERROR(ScanRecordIO(
        view.fd, spec.rec_path, shard->file_size,
        [&](uint64_t offset, const std::string&) {
          shard->offsets.push_back(offset);
          shard->keys.push_back(std::to_string(count++));
          return Status::OK();
        }));
    shard->file->Count(view, shard->file_size);
  }
  if (spec.expected_records >= 0 &&
      shard->offsets.size() != static_cast<uint64_t>(spec.expected_records)) {
    return Status::Corruption((shard->idx_path.empty() ? spec.rec_path : shard->idx_path) +
                              ": holds " + std::to_string(shard->offsets.size()) +
                              " records but the manifest says " +
                              std::to_string(spec.expected_records));
  }
  ShardInfo info;
  info.path = spec.rec_path;
  info.first_record = total_;
  info.records = shard->offsets.size();
  info.bytes = shard->file_size;
  info.xxh64 = spec.xxh64;
  shards_.push_back(info);
  total_ += info.records;
  files_.push_back(std::move(shard));
  return Status::OK();
}

size_t RecordIODataset::ShardIndexOf(uint64_t index) const {
  return ShardContaining(first_records_, index);
}

Status RecordIODataset::ShardOf(uint64_t index, const RecordIOShard** shard,
                                size_t* local) const {
  size_t shard_index = ShardIndexOf(index);
  *local = index - first_records_[shard_index];
  RecordIOShard* found = files_[shard_index].get();
  GPUFEED_RETURN_IF_ERROR(Load(found));
  *shard = found;
  return Status::OK();
}

uint64_t RecordIODataset::RecordLength(const RecordIOShard& shard, size_t local) {
  uint64_t offset = shard.offsets[local];
  uint64_t end = local + 1 < shard.offsets.size() ? shard.offsets[local + 1] : shard.file_size;
  return end > offset ? end - offset : 0;  // an unsorted index tells nothing
}

Status RecordIODataset::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  size_t local = 0;
  const RecordIOShard* found = nullptr;
  Status status = ShardOf(index, &found, &local);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  const RecordIOShard& shard = *found;
  uint64_t length = RecordLength(shard, local);
  uint64_t hint = std::min<uint64_t>(length != 0 ? length : kDefaultRecordHint, kMaxRecordHint);
  FileView view;
  status = shard.file->View(shard.offsets[local], hint, &view);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  // Scratch buffers per thread: no allocation per read once warm.
  thread_local std::string window;
  window.clear();
  status = ParseAt(shard, local, index, hint, view, &window, record);
  if (status.ok() || !view.local || status.code() != Status::Code::kCorruption) return status;
  return RetryFromSource(shard, local, index, hint, &view, status, record);
}

Status RecordIODataset::RetryFromSource(const RecordIOShard& shard, size_t local, uint64_t index,
                                        uint64_t hint, FileView* bad, Status status,
                                        Record* record) const {
  // The copy was verified when it was made: a record that does not parse
  // there may still be fine in the source. Read it there; if it is, the
  // copy is bad and is replaced.
  FileView source;
  if (!shard.file->SourceView(&source).ok()) return status;
  thread_local std::string window;
  window.clear();
  Status from_source = ParseAt(shard, local, index, hint, source, &window, record);
  if (from_source.ok()) shard.file->Invalidate(bad);
  return from_source;
}

bool RecordIODataset::Locate(uint64_t index, RecordLocation* location) const {
  if (index >= total_) return false;
  size_t local = 0;
  const RecordIOShard* found = nullptr;
  if (!ShardOf(index, &found, &local).ok()) return false;  // Read reports it
  const RecordIOShard& shard = *found;
  uint64_t length = RecordLength(shard, local);
  if (length == 0 || length > kMaxRecordHint) return false;
  return LocateRange(*shard.file, shard.rec_path, shard.offsets[local], length, location);
}

bool RecordIODataset::CanLocate() const {
  if (total_ == 0) return false;
  // A manifest that identifies every file was written by Pack, whose
  // indexes are sorted: nothing is read to tell.
  if (lazy_) return true;
  size_t local = 0;
  const RecordIOShard* shard = nullptr;
  return ShardOf(0, &shard, &local).ok() && RecordLength(*shard, local) != 0;
}

Status RecordIODataset::ParseLocated(uint64_t index, const RecordLocation& location,
                                     const char* data, size_t size, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  size_t local = 0;
  const RecordIOShard* found = nullptr;
  Status status = ShardOf(index, &found, &local);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  const RecordIOShard& shard = *found;
  FileView engine_view;  // what the engine read: counted, never read again
  engine_view.local = location.local;
  shard.file->Count(engine_view, size);
  // A record running past the located bytes is read on through a view of
  // its own (the location does not keep a descriptor open).
  FileView view;
  status = shard.file->View(location.offset, location.length, &view);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  thread_local std::string window;
  window.assign(data, size);
  status = ParseAt(shard, local, index, location.length, view, &window, record,
                   static_cast<int64_t>(location.offset));
  if (status.ok() || !location.local || status.code() != Status::Code::kCorruption) {
    return status;
  }
  return RetryFromSource(shard, local, index, location.length, &view, status, record);
}

Status RecordIODataset::ParseAt(const RecordIOShard& shard, size_t local, uint64_t index,
                                uint64_t hint, const FileView& view, std::string* window,
                                Record* record, int64_t preloaded_at) const {
  uint64_t offset = shard.offsets[local];
  thread_local std::string payload;
  // Errors name the source file (what the user knows), and the copy.
  const std::string& shown = view.shown.empty() ? shard.rec_path : view.shown;
  RecordIOCursor cursor(view.fd, shown, shard.file_size, hint, window);
  if (preloaded_at >= 0) cursor.Preload(static_cast<uint64_t>(preloaded_at));
  uint64_t next_offset = 0;
  Status status = cursor.ReadRecord(offset, &payload, &next_offset);
  if (cursor.bytes_read() > 0) shard.file->Count(view, cursor.bytes_read());
  if (status.ok()) {
    ParsedPayload parsed;
    status = ParseIRPayload(payload, &record->labels, &parsed);
    if (!status.ok()) {
      status = status.WithContext(shown + " at byte offset " + std::to_string(offset));
    } else {
      record->data.assign(payload, parsed.data_offset, std::string::npos);
      record->id = parsed.id;
    }
  }
  if (!status.ok()) {
    std::string context = "sample " + std::to_string(index) + " (key " + shard.keys[local];
    if (!shard.idx_path.empty()) {
      context += ", " + shard.idx_path + " line " + std::to_string(local + 1) + " gives offset " +
                 std::to_string(offset);
    }
    return status.WithContext(context + ")");
  }
  record->key = shard.keys[local];
  record->source = shard.rec_path;
  record->source += " at byte offset ";
  record->source += std::to_string(offset);
  record->shape.clear();
  record->encoded = true;
  return Status::OK();
}

}  // namespace

Status OpenRecordIODataset(const std::string& path, const std::vector<RecordIOShardSpec>& shards,
                           const Manifest* manifest, const std::shared_ptr<Store>& store,
                           std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<RecordIODataset>(path, store);
  for (const RecordIOShardSpec& spec : shards) {
    GPUFEED_RETURN_IF_ERROR(spec.lazy ? result->AddLazyShard(spec) : result->AddShard(spec));
  }
  if (manifest != nullptr) result->SetClasses(manifest->classes, manifest->integer_labels);
  result->Finalize();
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no records)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
