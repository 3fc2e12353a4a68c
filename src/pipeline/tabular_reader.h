// TabularReader: the bytes of blocks of tabular rows (format/tabular.h) for
// the loader's tabular kind. A block (about TabularDatasetOptions::block_bytes
// of consecutive rows, one range per part) is read through a read engine of
// its own (O_DIRECT when IoOptions::direct_io) in one request per part, and
// kept in a cache shared by the workers, so that every block a window of
// shuffle="block" needs is read once however many batches take rows from
// it. A block another worker is reading is waited for, not read twice.
//
// Memory is bounded: the cache keeps at most `capacity` blocks (the least
// recently used go first; a worker still holding one keeps it alive), and
// the engine's buffer budget covers those plus what the workers hold.
//
// Thread safety: every method may be called from any number of workers.
#ifndef GPUFEED_PIPELINE_TABULAR_READER_H_
#define GPUFEED_PIPELINE_TABULAR_READER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format/tabular.h"
#include "gpufeed/options.h"
#include "io/read_engine.h"

namespace gpufeed {

// The bytes of one block: part p's rows at parts[p] (binary: rows *
// stride; text: the lines' span).
struct TabularBlockBytes {
  size_t block = 0;
  const char* parts[3] = {nullptr, nullptr, nullptr};
  std::vector<ReadCompletion> reads;  // own the bytes
};

class TabularReader {
 public:
  // `rows` (a dataset) outlives the reader. `holders`: the most blocks the
  // workers hold at once besides the cache (threads x blocks per run).
  static Status Create(const TabularRows* rows, const IoOptions& io, size_t capacity,
                       size_t holders, std::unique_ptr<TabularReader>* reader);
  ~TabularReader();

  // Block b's bytes: from the cache, or read now (adding the wait to
  // *read_seconds). IOError/Corruption naming the file and byte offset.
  Status Get(size_t block, std::shared_ptr<const TabularBlockBytes>* bytes,
             double* read_seconds);
  // The blocks the coming samples lie in (up to half the cache, in order of
  // first use) are read ahead by the reader's own threads, so that the disk
  // reads the next blocks while the workers convert these. Scans
  // samples[0, count) at a stride; returns at once.
  void Prefetch(const uint64_t* samples, size_t count);

  // Rows from anywhere (a global or node shuffle): the ranges of each of
  // samples[0, count) read at once, many in flight, into *reads (row i's
  // part p at i * parts + p, `parts` the table's parts per row). IOError /
  // Corruption naming the file, the byte offset and the sample.
  // REQUIRES: count * parts * max(row part, 4 KiB) within the engine's budget
  // (RowsPerRead says how many rows that allows).
  Status ReadRows(const uint64_t* samples, size_t count, std::vector<ReadCompletion>* reads,
                  double* read_seconds);
  size_t RowsPerRead() const;

  IoStats io_stats() const { return engine_->stats(); }

 private:
  TabularReader(const TabularRows* rows, size_t capacity);
  Status Read(size_t block, std::shared_ptr<TabularBlockBytes>* bytes);
  // Reads a block taken as loading (its entry exists) and files the result.
  void Load(size_t block, std::unique_lock<std::mutex>& lock, double* read_seconds,
            std::shared_ptr<const TabularBlockBytes>* bytes, Status* status);
  void EvictLocked(size_t keep);
  void PrefetchLoop();  // a read-ahead thread
  Status EngineFile(size_t file, uint64_t offset, uint64_t length, FileId* id);

  const TabularRows* const rows_;
  const size_t capacity_;
  std::unique_ptr<ReadEngine> engine_;

  std::mutex mutex_;  // guards what follows
  std::condition_variable loaded_;
  struct Entry {
    bool loading = true;
    Status status;
    std::shared_ptr<const TabularBlockBytes> bytes;
    uint64_t used = 0;  // tick of the last Get
  };
  std::unordered_map<size_t, Entry> cache_;
  uint64_t tick_ = 0;
  std::deque<size_t> queued_;  // blocks taken as loading, for the read-ahead threads
  std::condition_variable queued_changed_;
  bool stopping_ = false;
  std::vector<std::thread> prefetchers_;

  // The engine's handles on the files' descriptors, keyed by the store's
  // holder of each (a source file or a node-cache copy), kept while the
  // reader lives (a dataset has a few files per segment).
  std::mutex files_mutex_;  // guards files_
  struct Handle {
    FileId id = 0;
    std::shared_ptr<const void> hold;
  };
  std::map<const void*, Handle> files_;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_TABULAR_READER_H_
