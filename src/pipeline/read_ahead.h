// ReadAhead: the host stage's reads through the read engine (src/io/).
// For the samples a window of batches allows, it asks the dataset where each
// record lies (Dataset::Locate: a byte range and the store's descriptor for
// it), adopts that descriptor in the engine once (FileFor), submits the byte
// ranges (or whole files) together, and a collector thread files each
// completion under its task for the worker that will decode it. A sample
// that cannot be located (Caffe) or whose file the engine cannot take is
// marked "direct": its worker reads it with Dataset::Read.
//
// Tasks are positions in a run (the host stage's samples from a cursor);
// a new run (Reset) drops what the previous one fetched, and completions of
// an older run are dropped as they arrive.
//
// Thread safety: every method but the constructor, the destructor and
// AddStats' engine figures runs under the host stage's mutex (passed in),
// which also guards the fields below marked so; Submit releases it around
// the locating and the submission.
#ifndef GPUFEED_PIPELINE_READ_AHEAD_H_
#define GPUFEED_PIPELINE_READ_AHEAD_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "batch/batch_source.h"
#include "format/dataset_base.h"
#include "format/token_corpus.h"
#include "gpufeed/dataset.h"
#include "gpufeed/options.h"
#include "io/read_engine.h"
#include "pipeline/host_stats.h"

namespace gpufeed {

class ReadAhead {
 public:
  struct SharedRead;
  // The bytes of one task's record. Tasks whose locations name the same
  // byte range (the windows of one token block) share one read: `shared`
  // is that read, whose completion the ReadAhead owns until the last of its
  // tasks is Released; their `completion` then does not own it (no atomic
  // reference count per window: workers releasing the windows of one block
  // would all write one cache line).
  struct Fetched {
    std::shared_ptr<const ReadCompletion> completion;
    RecordLocation location;
    SharedRead* shared = nullptr;
  };

  // Null (and one log line) when the engine cannot be created: the workers
  // then read every record themselves. `mutex` and `changed` are the host
  // stage's; both outlive the ReadAhead.
  static std::unique_ptr<ReadAhead> Create(const Dataset* dataset, const IoOptions& io,
                                           std::mutex* mutex, std::condition_variable* changed);
  // The engine finishes its reads in flight (into the queue), then the
  // collector stops. REQUIRES: no worker inside Submit or Take; the caller
  // does not hold the mutex (the collector takes it).
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // A new run: nothing submitted or fetched. REQUIRES: the mutex.
  void Reset(uint64_t run);
  // Submits the reads of tasks up to `end` (not yet submitted) of the run
  // whose samples are `samples`. REQUIRES: `lock` held (released around the
  // locating and the submission, held again on return).
  void Submit(std::unique_lock<std::mutex>& lock, const std::vector<uint64_t>& samples,
              uint64_t end);
  // Tasks below this are submitted (or read directly). REQUIRES: the mutex.
  uint64_t submitted() const { return submit_cursor_; }
  // Waits for task's bytes: true with them in *fetched; false when the task
  // is read directly, the run changed or `stopping` became true. Adds the
  // wait to *waited_seconds. REQUIRES: `lock` held.
  bool Take(std::unique_lock<std::mutex>& lock, uint64_t task, const bool& stopping,
            Fetched* fetched, double* waited_seconds);
  // The task is done with *fetched's bytes (a shared read's are returned
  // to the engine with its last task). REQUIRES: the mutex.
  void Release(Fetched* fetched);
  // The engine's figures. REQUIRES: the mutex.
  void AddStats(StageStats* stats) const;

 private:
  ReadAhead(const Dataset* dataset, std::mutex* mutex, std::condition_variable* changed);
  static uint64_t Tag(uint64_t run, uint64_t task) { return (run << 40) | task; }
  bool FileFor(const RecordLocation& location, FileId* file);
  void Collect();  // the collector thread

  // Constant after Create.
  const DatasetBase* const dataset_;  // the read path of the dataset given to Create
  const TokenWindows* const tokens_;  // dataset_ as token windows, or null
  std::mutex* const mutex_;
  std::condition_variable* const changed_;
  // Declared before engine_: the engine delivers into it until destroyed.
  CompletionQueue queue_;
  std::unique_ptr<ReadEngine> engine_;
  std::thread collector_;
  int queue_depth_ = 0;  // the engine's, for the stats

  // The engine's handles on the descriptors locations name (a source file
  // or a node-cache copy), keyed by the location's holder. At most
  // kEngineFiles stay registered: the least recently used is closed (reads
  // in flight keep it open until they complete), so a dataset of 100,000
  // shards reads under a small descriptor limit, and a node-cache copy is
  // not pinned after the store let it go.
  static constexpr size_t kEngineFiles = 64;
  struct EngineFile {
    FileId id = 0;
    std::shared_ptr<const void> hold;  // the store's descriptor stays open while registered
    std::list<const void*>::iterator lru;
  };
  std::mutex files_mutex_;  // guards what follows
  std::unordered_map<const void*, EngineFile> engine_files_;
  std::list<const void*> engine_lru_;

  // Guarded by *mutex_.
  uint64_t run_ = 0;
  uint64_t submit_cursor_ = 0;
  std::unordered_map<uint64_t, Fetched> fetched_;          // task -> bytes
  std::unordered_map<uint64_t, RecordLocation> locations_;  // tag -> where
  std::unordered_set<uint64_t> direct_;                     // tasks read by the workers
  // A byte range of an engine file (FileIds are never reused). Integers,
  // not a formatted string: token windows look one up per window, on the
  // workers' hot path.
  struct RangeKey {
    FileId file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    bool operator==(const RangeKey& other) const {
      return file == other.file && offset == other.offset && length == other.length;
    }
  };
  struct RangeKeyHash {
    size_t operator()(const RangeKey& key) const {
      uint64_t h = key.offset * 0x9E3779B97F4A7C15ull ^ (key.length + 0x632BE59BD9B4E019ull);
      return static_cast<size_t>(h ^ (uint64_t{key.file} << 47) ^ (h >> 29));
    }
  };

 public:
  // Ranges read once for several tasks, keyed by file, offset and length:
  // the tasks waiting for a read in flight, then the completion until the
  // last task using it is Released (a later task of the same range takes it
  // at once). Guarded by the host stage's mutex.
  struct SharedRead {
    RangeKey key;
    bool in_flight = true;
    uint64_t users = 0;  // tasks given it (or waiting for it), not yet Released
    std::vector<std::pair<uint64_t, RecordLocation>> followers;  // task, where
    std::shared_ptr<const ReadCompletion> done;
  };

 private:
  // Node-based: Fetched::shared points into it.
  std::unordered_map<RangeKey, SharedRead, RangeKeyHash> shared_reads_;
  std::unordered_map<uint64_t, RangeKey> lead_keys_;  // tag of the read -> its range

  // Submit's steps. What its unlocked part learns about its tasks:
  struct LocatedTasks {
    std::vector<std::pair<uint64_t, RecordLocation>> located;  // task, where
    std::vector<RangeKey> keys;    // of `located`, in order (unused for whole files)
    std::vector<FileId> files;     // likewise
    std::vector<uint64_t> direct;  // tasks the workers read themselves (Dataset::Read)
  };
  // Locates the tasks (whose samples are `task_samples`) and takes their
  // files into the engine; the windows of one token block share its range.
  // Runs without the mutex (FileFor takes files_mutex_).
  void LocateTasks(const std::vector<uint64_t>& tasks, const std::vector<uint64_t>& task_samples,
                   LocatedTasks* batch);
  // The requests for batch's located tasks of `run`, moving each location
  // into locations_; a range already in shared_reads_ is joined instead of
  // read again (the task is its follower, or fetched at once), a new one is
  // added there and to *leads. REQUIRES: the mutex.
  std::vector<ReadRequest> PlanReads(uint64_t run, LocatedTasks* batch,
                                     std::vector<RangeKey>* leads);
  // The engine refused the requests: batch's tasks and the followers of the
  // ranges in `leads` are read directly, and those ranges forgotten.
  // REQUIRES: the mutex.
  void ReadDirectlyAfterFailedSubmit(const LocatedTasks& batch,
                                     const std::vector<RangeKey>& leads);
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_READ_AHEAD_H_
