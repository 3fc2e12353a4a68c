// gpufeed LMDB's ShardWriter: one environment (part-NNNNN/data.mdb) per
// shard, keyed by the zero-padded sample index (LmdbKeyFor).
#include <lmdb.h>
#include <sys/stat.h>

#include <utility>
#include <vector>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/lmdb_env.h"
#include "gpufeed/writer.h"

namespace gpufeed {

namespace {

// Records are committed in transactions of about this many payload bytes.
constexpr size_t kCommitBytes = 8 << 20;

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
    if (pending_bytes_ >= kCommitBytes) return Commit();
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

Status NewLmdbShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer) {
  if (::mkdir(path.c_str(), 0755) != 0) return Status::FromErrno(errno, path);
  auto lmdb = std::make_unique<LmdbShardWriter>(path);
  GPUFEED_RETURN_IF_ERROR(lmdb->Open());
  *writer = std::move(lmdb);
  return Status::OK();
}

}  // namespace gpufeed
