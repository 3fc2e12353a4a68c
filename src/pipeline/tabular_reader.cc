#include "pipeline/tabular_reader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "pipeline/host_stats.h"

namespace gpufeed {

namespace {

// Read-ahead threads: each keeps one block read in flight (blocks are
// megabytes: two in flight keep a disk or a parallel filesystem streaming).
constexpr int kPrefetchThreads = 2;

// The largest block of `rows` in bytes (text blocks vary with their lines).
uint64_t LargestBlockBytes(const TabularRows& rows) {
  const TabularTable& table = rows.table();
  uint64_t largest = 0;
  std::vector<TabularRange> ranges;
  for (const TabularBlock& block : rows.blocks()) {
    TabularRanges(table.segments[block.segment], block.first_row, block.rows, &ranges);
    uint64_t bytes = 0;
    for (const TabularRange& range : ranges) bytes += range.length;
    largest = std::max(largest, bytes);
  }
  return largest;
}

}  // namespace

Status TabularReader::Create(const TabularRows* rows, const IoOptions& io, size_t capacity,
                             size_t holders, std::unique_ptr<TabularReader>* reader) {
  std::unique_ptr<TabularReader> made(new TabularReader(rows, std::max<size_t>(1, capacity)));
  IoOptions options = io;
  // Cached and held blocks keep their buffers: the budget must cover them
  // (plus alignment slack per part), or a read would wait for buffers only
  // the cache can free.
  const uint64_t block = LargestBlockBytes(*rows) + 3 * (64u << 10);
  options.inflight_bytes =
      std::max<size_t>(options.inflight_bytes, block * (made->capacity_ + holders + 1 + kPrefetchThreads));
  // Reads of megabytes gain nothing from registered buffers, and pinning
  // the whole budget at open would cost the first batch its page faults.
  options.register_buffers = false;
  GPUFEED_RETURN_IF_ERROR(ReadEngine::Create(options, &made->engine_));
  *reader = std::move(made);
  return Status::OK();
}

TabularReader::TabularReader(const TabularRows* rows, size_t capacity)
    : rows_(rows), capacity_(capacity) {}

TabularReader::~TabularReader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_changed_.notify_all();
  for (std::thread& thread : prefetchers_) thread.join();
  // Blocks first (their buffers belong to the engine's pool), then the engine.
  cache_.clear();
  engine_.reset();
}

Status TabularReader::Get(size_t block, std::shared_ptr<const TabularBlockBytes>* bytes,
                          double* read_seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    auto [found, added] = cache_.try_emplace(block);
    found->second.used = ++tick_;
    if (added) break;  // this worker reads it
    if (!found->second.loading) {
      *bytes = found->second.bytes;
      return found->second.status;
    }
    auto queued = std::find(queued_.begin(), queued_.end(), block);
    if (queued != queued_.end()) {
      queued_.erase(queued);  // read ahead but not started: this worker reads it now
      break;
    }
    // Another thread reads it: wait (the entry may be evicted before this
    // worker wakes; it then looks again).
    const auto started = Clock::now();
    loaded_.wait(lock, [&] {
      auto entry = cache_.find(block);
      return entry == cache_.end() || !entry->second.loading;
    });
    *read_seconds += Seconds(Clock::now() - started);
  }
  Status status;
  Load(block, lock, read_seconds, bytes, &status);
  return status;
}

void TabularReader::Load(size_t block, std::unique_lock<std::mutex>& lock, double* read_seconds,
                         std::shared_ptr<const TabularBlockBytes>* bytes, Status* status) {
  lock.unlock();
  const auto started = Clock::now();
  std::shared_ptr<TabularBlockBytes> read;
  *status = Read(block, &read);
  *read_seconds += Seconds(Clock::now() - started);
  lock.lock();
  // A failed read stays cached as its error: the block's bytes are bad, and
  // every sample of it reports that (or is skipped) without reading again.
  Entry& entry = cache_.at(block);
  entry.loading = false;
  entry.status = *status;
  entry.bytes = read;
  *bytes = std::move(read);
  EvictLocked(block);
  loaded_.notify_all();
}

// Over capacity: the least recently used blocks not loading go (never `keep`).
void TabularReader::EvictLocked(size_t keep) {
  while (cache_.size() > capacity_) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.loading || it->first == keep) continue;
      if (oldest == cache_.end() || it->second.used < oldest->second.used) oldest = it;
    }
    if (oldest == cache_.end()) return;
    cache_.erase(oldest);
  }
}

void TabularReader::Prefetch(const uint64_t* samples, size_t count) {
  const std::vector<TabularBlock>& blocks = rows_->blocks();
  const size_t limit = std::max<size_t>(1, capacity_ / 2);
  std::vector<size_t> wanted;
  size_t last = SIZE_MAX;
  // Rows of a window come from its few blocks in random order: a stride of
  // a small part of a block still finds each of them.
  const size_t stride = std::max<uint64_t>(1, blocks.empty() ? 1 : blocks[0].rows / 64);
  for (size_t i = 0; i < count && wanted.size() < limit; i += stride) {
    if (last != SIZE_MAX && samples[i] >= blocks[last].first_row &&
        samples[i] < blocks[last].first_row + blocks[last].rows) {
      continue;
    }
    last = rows_->BlockOf(samples[i]);
    if (std::find(wanted.begin(), wanted.end(), last) == wanted.end()) wanted.push_back(last);
  }
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t block : wanted) {
      auto [found, added] = cache_.try_emplace(block);
      found->second.used = ++tick_;
      if (!added) continue;
      queued_.push_back(block);
      queued = true;
    }
    if (queued && prefetchers_.empty()) {
      for (int i = 0; i < kPrefetchThreads; ++i) prefetchers_.emplace_back([this] { PrefetchLoop(); });
    }
  }
  if (queued) queued_changed_.notify_all();
}

void TabularReader::PrefetchLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    queued_changed_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    const size_t block = queued_.front();
    queued_.pop_front();
    double seconds = 0;
    std::shared_ptr<const TabularBlockBytes> bytes;
    Status status;
    Load(block, lock, &seconds, &bytes, &status);
  }
}

Status TabularReader::EngineFile(size_t file, uint64_t offset, uint64_t length, FileId* id) {
  const StoreFile& store_file = *rows_->table().files[file];
  FileView view;
  GPUFEED_RETURN_IF_ERROR(store_file.View(offset, length, &view));
  std::lock_guard<std::mutex> lock(files_mutex_);
  const void* key = view.hold ? view.hold.get() : &store_file;
  auto found = files_.find(key);
  if (found == files_.end()) {
    Handle handle;
    GPUFEED_RETURN_IF_ERROR(engine_->AdoptFile(view.fd, view.shown, &handle.id));
    handle.hold = view.hold;
    found = files_.emplace(key, std::move(handle)).first;
  }
  *id = found->second.id;
  store_file.Count(view, length);
  return Status::OK();
}

Status TabularReader::Read(size_t block, std::shared_ptr<TabularBlockBytes>* bytes) {
  const TabularTable& table = rows_->table();
  const TabularBlock& where = rows_->blocks()[block];
  std::vector<TabularRange> ranges;
  TabularRanges(table.segments[where.segment], where.first_row, where.rows, &ranges);
  std::vector<ReadRequest> requests(ranges.size());
  for (size_t p = 0; p < ranges.size(); ++p) {
    GPUFEED_RETURN_IF_ERROR(
        EngineFile(ranges[p].file, ranges[p].offset, ranges[p].length, &requests[p].file));
    requests[p].offset = ranges[p].offset;
    requests[p].length = ranges[p].length;
    requests[p].tag = p;
  }
  auto made = std::make_shared<TabularBlockBytes>();
  made->block = block;
  GPUFEED_RETURN_IF_ERROR(engine_->ReadAll(std::move(requests), &made->reads));
  for (size_t p = 0; p < ranges.size() && p < 3; ++p) {
    const ReadCompletion& read = made->reads[p];
    const std::string& path = table.files[ranges[p].file]->path();
    if (!read.status.ok()) return read.status.WithContext(path);
    if (read.buffer.size() != ranges[p].length) {
      return Status::Corruption(path + ": rows " + std::to_string(where.first_row) + " to " +
                                std::to_string(where.first_row + where.rows - 1) +
                                " at byte offset " + std::to_string(ranges[p].offset) +
                                " are cut short (" + std::to_string(read.buffer.size()) + " of " +
                                std::to_string(ranges[p].length) +
                                " bytes): the file was truncated after it was opened");
    }
    made->parts[p] = read.buffer.data();
  }
  *bytes = std::move(made);
  return Status::OK();
}

size_t TabularReader::RowsPerRead() const {
  const TabularTable& table = rows_->table();
  uint64_t row = 0;
  for (const TabularSegment& segment : table.segments) {
    uint64_t bytes = 0;
    for (const TabularPart& part : segment.parts) {
      // An O_DIRECT read of a few bytes takes an aligned 4 KiB buffer.
      bytes += std::max<uint64_t>(part.stride > 0 ? part.stride : TabularRowBytes(table, segment),
                                  4096);
    }
    row = std::max(row, bytes);
  }
  return static_cast<size_t>(
      std::max<uint64_t>(1, engine_->options().inflight_bytes / 2 / std::max<uint64_t>(row, 1)));
}

Status TabularReader::ReadRows(const uint64_t* samples, size_t count,
                               std::vector<ReadCompletion>* reads, double* read_seconds) {
  const auto started = Clock::now();
  const TabularTable& table = rows_->table();
  std::vector<ReadRequest> requests;
  std::vector<size_t> files;  // of each request, for messages
  std::vector<TabularRange> ranges;
  for (size_t i = 0; i < count; ++i) {
    const TabularSegment& segment = table.segments[rows_->SegmentOf(samples[i])];
    TabularRanges(segment, samples[i], 1, &ranges);
    for (const TabularRange& range : ranges) {
      ReadRequest request;
      Status status = EngineFile(range.file, range.offset, range.length, &request.file);
      if (!status.ok()) return status.WithContext("sample " + std::to_string(samples[i]));
      request.offset = range.offset;
      request.length = range.length;
      request.tag = requests.size();
      requests.push_back(request);
      files.push_back(range.file);
    }
  }
  std::vector<ReadRequest> asked = requests;
  Status status = engine_->ReadAll(std::move(requests), reads);
  *read_seconds += Seconds(Clock::now() - started);
  GPUFEED_RETURN_IF_ERROR(status);
  const size_t parts = count > 0 ? asked.size() / count : 0;
  for (size_t r = 0; r < reads->size(); ++r) {
    const ReadCompletion& read = (*reads)[r];
    const uint64_t sample = samples[parts > 0 ? r / parts : 0];
    if (!read.status.ok()) return read.status.WithContext("sample " + std::to_string(sample));
    if (read.buffer.size() != asked[r].length) {
      return Status::Corruption(table.files[files[r]]->path() + ": row " +
                                std::to_string(sample) + " at byte offset " +
                                std::to_string(asked[r].offset) + " is cut short (" +
                                std::to_string(read.buffer.size()) + " of " +
                                std::to_string(asked[r].length) +
                                " bytes): the file was truncated after it was opened");
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
