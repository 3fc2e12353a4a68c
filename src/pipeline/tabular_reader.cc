#include "pipeline/tabular_reader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "pipeline/host_stats.h"

namespace gpufeed {

namespace {

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
      std::max<size_t>(options.inflight_bytes, block * (made->capacity_ + holders + 1));
  GPUFEED_RETURN_IF_ERROR(ReadEngine::Create(options, &made->engine_));
  *reader = std::move(made);
  return Status::OK();
}

TabularReader::TabularReader(const TabularRows* rows, size_t capacity)
    : rows_(rows), capacity_(capacity) {}

TabularReader::~TabularReader() {
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
    // Another worker reads it: wait (the entry may be evicted before this
    // worker wakes; it then looks again).
    const auto started = Clock::now();
    loaded_.wait(lock, [&] {
      auto entry = cache_.find(block);
      return entry == cache_.end() || !entry->second.loading;
    });
    *read_seconds += Seconds(Clock::now() - started);
  }
  lock.unlock();
  const auto started = Clock::now();
  std::shared_ptr<TabularBlockBytes> read;
  Status status = Read(block, &read);
  *read_seconds += Seconds(Clock::now() - started);
  lock.lock();
  // A failed read stays cached as its error: the block's bytes are bad, and
  // every sample of it reports that (or is skipped) without reading again.
  Entry& entry = cache_.at(block);
  entry.loading = false;
  entry.status = status;
  entry.bytes = read;
  *bytes = std::move(read);
  // Over capacity: the least recently used blocks not loading go.
  while (cache_.size() > capacity_) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.loading || it->first == block) continue;
      if (oldest == cache_.end() || it->second.used < oldest->second.used) oldest = it;
    }
    if (oldest == cache_.end()) break;
    cache_.erase(oldest);
  }
  lock.unlock();
  loaded_.notify_all();
  return status;
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

}  // namespace gpufeed
