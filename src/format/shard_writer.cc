// ShardWriter for RecordIO (.rec + .idx) and gpufeed LMDB shards.
#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/lmdb_env.h"
#include "format/recordio.h"
#include "gpufeed/writer.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

ShardWriter::~ShardWriter() = default;

namespace {

// Output is buffered and written in large sequential chunks: parallel
// filesystems want few, big writes.
constexpr size_t kWriteBufferSize = 8 << 20;

class RecordIOShardWriter final : public ShardWriter {
 public:
  RecordIOShardWriter(std::string rec_path, UniqueFd fd)
      : rec_path_(std::move(rec_path)), idx_path_(IndexPathFor(rec_path_)), fd_(std::move(fd)) {}

  ~RecordIOShardWriter() override {
    if (fd_.valid()) (void)Finish();  // a destructor cannot report; call Finish to see errors
  }

  Status Append(const SampleToWrite& sample) override {
    if (!fd_.valid()) return Status::InvalidArgument(rec_path_ + ": writer already finished");
    payload_.clear();
    AppendIRPayload(sample, &payload_);
    if (payload_.size() > kRecordIOMaxLength) {
      return Status::InvalidArgument(rec_path_ + ": sample " + std::to_string(sample.index) +
                                     " is " + std::to_string(payload_.size()) +
                                     " bytes; RecordIO records must be under 2^29 bytes");
    }
    index_text_ += std::to_string(sample.id.value_or(sample.index)) + "\t" +
                   std::to_string(offset_) + "\n";
    size_t before = buffer_.size();
    EncodeRecordIO(payload_, &buffer_);
    offset_ += buffer_.size() - before;
    bytes_ = offset_;
    records_ += 1;
    if (buffer_.size() >= kWriteBufferSize) return Flush();
    return Status::OK();
  }

  Status Finish() override {
    if (!fd_.valid()) return Status::OK();
    Status status = Flush();
    if (status.ok() && ::fsync(fd_.get()) != 0) status = Status::FromErrno(errno, rec_path_);
    fd_.reset();
    if (status.ok()) status = WriteFileAtomically(idx_path_, index_text_);
    return status;
  }

 private:
  Status Flush() {
    Status status = WriteFull(fd_.get(), buffer_.data(), buffer_.size(), rec_path_);
    buffer_.clear();
    return status;
  }

  std::string rec_path_;
  std::string idx_path_;
  UniqueFd fd_;
  std::string buffer_;
  std::string payload_;
  std::string index_text_;
  uint64_t offset_ = 0;
};

class LmdbShardWriter final : public ShardWriter {
 public:
  explicit LmdbShardWriter(std::string directory) : directory_(std::move(directory)) {}

  ~LmdbShardWriter() override {
    if (env_ != nullptr) {
      (void)Finish();  // a destructor cannot report; call Finish to see errors
    }
  }

  Status Open() {
    int rc = mdb_env_create(&env_);
    if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory_ + ": mdb_env_create");
    rc = mdb_env_set_mapsize(env_, map_size_);
    if (rc == MDB_SUCCESS) rc = mdb_env_open(env_, directory_.c_str(), MDB_NOSYNC, 0644);
    if (rc != MDB_SUCCESS) {
      mdb_env_close(env_);
      env_ = nullptr;
      return LmdbStatus(rc, directory_ + ": mdb_env_open");
    }
    return Status::OK();
  }

  Status Append(const SampleToWrite& sample) override {
    if (env_ == nullptr) return Status::InvalidArgument(directory_ + ": writer already finished");
    if (records_ > 0 && sample.index <= last_index_) {
      return Status::InvalidArgument(directory_ + ": LMDB sample indices must increase (" +
                                     std::to_string(sample.index) + " after " +
                                     std::to_string(last_index_) + ")");
    }
    last_index_ = sample.index;
    std::string payload;
    AppendIRPayload(sample, &payload);
    pending_bytes_ += payload.size();
    bytes_ += payload.size();
    records_ += 1;
    pending_.emplace_back(LmdbKeyFor(sample.index), std::move(payload));
    if (pending_bytes_ >= kWriteBufferSize) return Commit();
    return Status::OK();
  }

  Status Finish() override {
    if (env_ == nullptr) return Status::OK();
    Status status = Commit();
    if (status.ok()) status = LmdbStatus(mdb_env_sync(env_, 1), directory_ + ": mdb_env_sync");
    mdb_env_close(env_);
    env_ = nullptr;
    return status;
  }

 private:
  // Writes the pending records in one transaction. When the map is full the
  // transaction is aborted, the map doubled and the whole batch written again.
  Status Commit() {
    while (!pending_.empty()) {
      MDB_txn* txn = nullptr;
      int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory_ + ": mdb_txn_begin");
      MDB_dbi dbi;
      rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
      for (size_t i = 0; rc == MDB_SUCCESS && i < pending_.size(); ++i) {
        MDB_val key{pending_[i].first.size(), pending_[i].first.data()};
        MDB_val value{pending_[i].second.size(), pending_[i].second.data()};
        rc = mdb_put(txn, dbi, &key, &value, MDB_APPEND);
      }
      if (rc == MDB_SUCCESS) {
        rc = mdb_txn_commit(txn);
      } else {
        mdb_txn_abort(txn);
      }
      if (rc == MDB_MAP_FULL) {
        map_size_ *= 2;
        rc = mdb_env_set_mapsize(env_, map_size_);
        if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory_ + ": mdb_env_set_mapsize");
        continue;
      }
      if (rc == MDB_KEYEXIST) {
        return Status::InvalidArgument(directory_ + ": LMDB keys must increase");
      }
      if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory_ + ": write");
      pending_.clear();
      pending_bytes_ = 0;
    }
    return Status::OK();
  }

  std::string directory_;
  MDB_env* env_ = nullptr;
  size_t map_size_ = 64 << 20;
  std::vector<std::pair<std::string, std::string>> pending_;
  size_t pending_bytes_ = 0;
  uint64_t last_index_ = 0;
};

}  // namespace

Status ShardWriter::Open(const std::string& path, ShardFormat format,
                         std::unique_ptr<ShardWriter>* writer) {
  if (format == ShardFormat::kRecordIO) {
    int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (raw < 0) return Status::FromErrno(errno, path);
    *writer = std::make_unique<RecordIOShardWriter>(path, UniqueFd(raw));
    return Status::OK();
  }
  if (format == ShardFormat::kWebDataset) return NewTarShardWriter(path, writer);
  if (::mkdir(path.c_str(), 0755) != 0) return Status::FromErrno(errno, path);
  auto lmdb = std::make_unique<LmdbShardWriter>(path);
  GPUFEED_RETURN_IF_ERROR(lmdb->Open());
  *writer = std::move(lmdb);
  return Status::OK();
}

Status WriteRecordIOIndex(const std::string& rec_path, const std::string& idx_path,
                          uint64_t* records) {
  UniqueFd fd;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(rec_path, &fd));
  uint64_t size = 0;
  GPUFEED_RETURN_IF_ERROR(FileSizeOf(fd.get(), rec_path, &size));
  std::string text;
  uint64_t count = 0;
  GPUFEED_RETURN_IF_ERROR(ScanRecordIO(fd.get(), rec_path, size,
                                       [&](uint64_t offset, const std::string&) {
                                         text += std::to_string(count++) + "\t" +
                                                 std::to_string(offset) + "\n";
                                         return Status::OK();
                                       }));
  GPUFEED_RETURN_IF_ERROR(WriteFileAtomically(idx_path, text));
  if (records != nullptr) *records = count;
  return Status::OK();
}

}  // namespace gpufeed
