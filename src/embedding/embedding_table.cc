// EmbeddingTable (include/gpufeed/embedding.h): the RAM tier (RowCache)
// over the RowReader's node-cache copy and source.
#include "gpufeed/embedding.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "embedding/latency_histogram.h"
#include "embedding/row_cache.h"
#include "embedding/row_reader.h"
#include "embedding/table_layout.h"
#include "format/npy.h"
#include "util/fork_hooks.h"
#include "util/path.h"
#include "util/system_stats.h"

namespace gpufeed {
namespace {

using Clock = std::chrono::steady_clock;

class EmbeddingTableImpl final : public EmbeddingTable {
 public:
  ~EmbeddingTableImpl() override;
  Status Init(const std::string& path, const EmbeddingTableOptions& options);
  Status Lookup(const int64_t* ids, size_t count, void* out) override;
  EmbeddingStats Stats() const override;
  void ResetStats() override;

 private:
  Status ReadLayout(const StoreFile& file, const EmbeddingTableOptions& options);
  Status Preload();
  Status CheckIds(const int64_t* ids, size_t count) const;
  // The rows of ids at `missing` positions, from below, into out; offered
  // to the RAM tier.
  Status FillMissing(const int64_t* ids, const std::vector<uint32_t>& missing, char* out);
  void Add(const RowReadFigures& figures);

  TableLayout layout_;
  std::unique_ptr<RowCache> cache_;
  std::unique_ptr<RowReader> reader_;
  LatencyHistogram latency_;
  std::atomic<uint64_t> lookups_{0}, rows_looked_up_{0}, ram_hits_{0};
  std::atomic<uint64_t> nvme_rows_{0}, nvme_reads_{0}, nvme_bytes_{0};
  std::atomic<uint64_t> source_rows_{0}, source_reads_{0}, source_bytes_{0};
  uint64_t preload_bytes_ = 0;
  // The process that opened the table. A copy inherited by fork() has the
  // parent's reader and cache without their threads (whose locks they may
  // hold): its lookups fail naming this, and it is leaked, not destroyed.
  pid_t owner_process_ = 0;
};

EmbeddingTableImpl::~EmbeddingTableImpl() {
  if (CurrentProcessId() != owner_process_) {
    (void)reader_.release();  // the parent's threads: not ours to stop
    (void)cache_.release();
  }
}

Status EmbeddingTableImpl::ReadLayout(const StoreFile& file, const EmbeddingTableOptions& options) {
  const std::string& path = file.path();
  if (!IsNpyPath(path)) {
    return RawTableLayout(file.size(), path, options.dim, options.dtype, &layout_);
  }
  std::string head(static_cast<size_t>(std::min<uint64_t>(file.size(), kNpyMaxHeaderBytes)), '\0');
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(file.ReadAt(0, head.size(), head.data(), &done));
  return NpyTableLayout(head.data(), done, file.size(), path, options.dim, options.dtype, &layout_);
}

Status EmbeddingTableImpl::Init(const std::string& path, const EmbeddingTableOptions& options) {
  owner_process_ = CurrentProcessId();
  if (options.dtype.has_value() && !IsTableDtype(*options.dtype)) {
    return Status::InvalidArgument(std::string("an embedding table's dtype is float32, float16, "
                                               "bfloat16, int8 or uint8, not ") +
                                   TensorDtypeName(*options.dtype));
  }
  const std::string absolute = AbsolutePath(path);
  CacheOptions cache = options.cache;
  cache.wait_for_fill = false;  // a lookup never waits for the copy
  std::shared_ptr<Store> store;
  GPUFEED_RETURN_IF_ERROR(NewDatasetStore(cache, absolute, &store));
  std::shared_ptr<const StoreFile> file;
  GPUFEED_RETURN_IF_ERROR(store->Open(absolute, "", &file));
  GPUFEED_RETURN_IF_ERROR(ReadLayout(*file, options));
  if (layout_.rows > static_cast<uint64_t>(RowCache::kMaxId)) {
    return Status::NotSupported(absolute + ": a table of " + std::to_string(layout_.rows) +
                                " rows (at most 2^40 - 2)");
  }
  path_ = absolute;
  rows_ = layout_.rows;
  dim_ = layout_.dim;
  dtype_ = layout_.dtype;
  row_bytes_ = layout_.row_bytes;
  GPUFEED_RETURN_IF_ERROR(RowReader::Create(store, file, layout_, options, &reader_));
  if (options.cache_bytes > 0) {
    cache_ = std::make_unique<RowCache>(options.cache_bytes, row_bytes_, rows_);
  }
  if (options.preload) {
    const uint64_t holds = cache_ ? cache_->capacity_rows() : 0;
    if (holds < rows_) {
      return Status::InvalidArgument(
          path_ + ": preload needs the whole table in the RAM tier, but cache_bytes " +
          std::to_string(options.cache_bytes) + " holds " + std::to_string(holds) + " of its " +
          std::to_string(rows_) + " rows (" + std::to_string(row_bytes_) +
          " bytes each, plus about 41 bytes of index per row)");
    }
    GPUFEED_RETURN_IF_ERROR(Preload());
  }
  return Status::OK();
}

Status EmbeddingTableImpl::Preload() {
  RowReadFigures figures;
  Status status = reader_->Scan(
      [&](uint64_t first, uint64_t rows, const char* bytes) {
        cache_->Insert(static_cast<int64_t>(first), rows, bytes);
      },
      &figures);
  preload_bytes_ = figures.nvme_bytes + figures.source_bytes;
  cache_->ResetCounters();
  return status;
}

Status EmbeddingTableImpl::CheckIds(const int64_t* ids, size_t count) const {
  const int64_t rows = static_cast<int64_t>(rows_);
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return Status::OutOfRange("id " + std::to_string(ids[i]) + " (position " +
                                std::to_string(i) + ") is out of range for embedding table " +
                                path_ + " of " + std::to_string(rows_) + " rows");
    }
  }
  return Status::OK();
}

Status EmbeddingTableImpl::FillMissing(const int64_t* ids, const std::vector<uint32_t>& missing,
                                       char* out) {
  thread_local std::vector<int64_t> wanted;
  thread_local std::vector<char> rows;
  wanted.resize(missing.size());
  for (size_t k = 0; k < missing.size(); ++k) wanted[k] = ids[missing[k]];
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  rows.resize(wanted.size() * row_bytes_);
  RowReadFigures figures;
  Status status = reader_->Read(wanted.data(), wanted.size(), rows.data(), &figures);
  Add(figures);
  GPUFEED_RETURN_IF_ERROR(status);
  for (uint32_t position : missing) {
    const size_t j = static_cast<size_t>(
        std::lower_bound(wanted.begin(), wanted.end(), ids[position]) - wanted.begin());
    std::memcpy(out + size_t{position} * row_bytes_, rows.data() + j * row_bytes_, row_bytes_);
  }
  if (cache_) cache_->Offer(wanted.data(), wanted.size(), rows.data());
  return Status::OK();
}

Status EmbeddingTableImpl::Lookup(const int64_t* ids, size_t count, void* out) {
  if (CurrentProcessId() != owner_process_) {
    return InheritedByFork("the embedding table " + path_, owner_process_,
                           "open the table again here");
  }
  const auto started = Clock::now();
  GPUFEED_RETURN_IF_ERROR(CheckIds(ids, count));
  char* destination = static_cast<char*>(out);
  thread_local std::vector<uint32_t> missing;
  missing.clear();
  if (cache_) {
    cache_->Find(ids, count, destination, &missing);
  } else {
    for (size_t i = 0; i < count; ++i) missing.push_back(static_cast<uint32_t>(i));
  }
  Status status;
  if (!missing.empty()) status = FillMissing(ids, missing, destination);
  lookups_.fetch_add(1, std::memory_order_relaxed);
  rows_looked_up_.fetch_add(count, std::memory_order_relaxed);
  ram_hits_.fetch_add(count - missing.size(), std::memory_order_relaxed);
  latency_.Record(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started).count()));
  return status;
}

void EmbeddingTableImpl::Add(const RowReadFigures& figures) {
  nvme_rows_.fetch_add(figures.nvme_rows, std::memory_order_relaxed);
  nvme_reads_.fetch_add(figures.nvme_reads, std::memory_order_relaxed);
  nvme_bytes_.fetch_add(figures.nvme_bytes, std::memory_order_relaxed);
  source_rows_.fetch_add(figures.source_rows, std::memory_order_relaxed);
  source_reads_.fetch_add(figures.source_reads, std::memory_order_relaxed);
  source_bytes_.fetch_add(figures.source_bytes, std::memory_order_relaxed);
}

EmbeddingStats EmbeddingTableImpl::Stats() const {
  EmbeddingStats stats;
  stats.lookups = lookups_.load();
  stats.rows = rows_looked_up_.load();
  stats.ram_hits = ram_hits_.load();
  stats.nvme_rows = nvme_rows_.load();
  stats.nvme_reads = nvme_reads_.load();
  stats.nvme_bytes = nvme_bytes_.load();
  stats.source_rows = source_rows_.load();
  stats.source_reads = source_reads_.load();
  stats.source_bytes = source_bytes_.load();
  if (cache_) {
    stats.admitted = cache_->admitted();
    stats.rejected = cache_->rejected();
    stats.evicted = cache_->evicted();
    stats.resident_rows = cache_->resident_rows();
    // The index and sketches are allocated whole; rows as they arrive.
    stats.resident_bytes = cache_->footprint_bytes() -
                           (cache_->capacity_rows() - stats.resident_rows) * row_bytes_;
    stats.capacity_rows = cache_->capacity_rows();
  }
  stats.preload_bytes = preload_bytes_;
  stats.p50_us = latency_.Percentile(0.5) / 1e3;
  stats.p99_us = latency_.Percentile(0.99) / 1e3;
  const uint64_t calls = latency_.count();
  stats.lookup_seconds = static_cast<double>(latency_.total_nanoseconds()) / 1e9;
  stats.mean_us = calls > 0 ? stats.lookup_seconds * 1e6 / static_cast<double>(calls) : 0;
  return stats;
}

void EmbeddingTableImpl::ResetStats() {
  for (auto* counter : {&lookups_, &rows_looked_up_, &ram_hits_, &nvme_rows_, &nvme_reads_,
                        &nvme_bytes_, &source_rows_, &source_reads_, &source_bytes_}) {
    counter->store(0);
  }
  if (cache_) cache_->ResetCounters();
  latency_.Reset();
}

}  // namespace

EmbeddingTable::~EmbeddingTable() = default;

Status EmbeddingTable::Open(const std::string& path, const EmbeddingTableOptions& options,
                            std::shared_ptr<EmbeddingTable>* table) {
  auto made = std::make_shared<EmbeddingTableImpl>();
  GPUFEED_RETURN_IF_ERROR(made->Init(path, options));
  *table = std::move(made);
  return Status::OK();
}

}  // namespace gpufeed
