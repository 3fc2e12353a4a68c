// RowReader: the tiers below the RAM tier. Reads rows of a table file
// through a Store (the source, or the node cache's copy of the file when
// cache_dir is set) and a ReadEngine: all the rows of a call in flight at
// once, rows whose byte ranges are within the coalescing gap read as one
// request.
//
// Thread safety: Read and Scan may run on any number of threads at once
// (each call waits on its own completion queue; the engine is shared).
#ifndef GPUFEED_EMBEDDING_ROW_READER_H_
#define GPUFEED_EMBEDDING_ROW_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "embedding/table_layout.h"
#include "gpufeed/embedding.h"
#include "io/read_engine.h"
#include "storage/store.h"

namespace gpufeed {

// Where a call's rows came from (EmbeddingStats' tier counters).
struct RowReadFigures {
  uint64_t nvme_rows = 0, nvme_reads = 0, nvme_bytes = 0;
  uint64_t source_rows = 0, source_reads = 0, source_bytes = 0;
};

class RowReader {
 public:
  // Opens `path` through `store` (which the reader keeps) and checks its
  // size against the layout the caller parsed from it.
  static Status Create(std::shared_ptr<Store> store, std::shared_ptr<const StoreFile> file,
                       const TableLayout& layout, const EmbeddingTableOptions& options,
                       std::unique_ptr<RowReader>* reader);
  ~RowReader();

  // Rows rows[0, count) (ascending, distinct, < layout.rows) into
  // out + j * row_bytes. Errors name the file and byte offset (a read that
  // failed, or came back short: the file shrank after Open).
  Status Read(const int64_t* rows, size_t count, char* out, RowReadFigures* figures);
  // The whole table in order, in pieces of whole rows as they arrive:
  // consume(first_row, rows, bytes) (from one thread at a time).
  Status Scan(const std::function<void(uint64_t, uint64_t, const char*)>& consume,
              RowReadFigures* figures);

  const StoreFile& file() const { return *file_; }
  const ReadEngine& engine() const { return *engine_; }

 private:
  RowReader() = default;
  struct Range {
    uint64_t offset = 0;
    uint64_t length = 0;
    size_t first = 0;  // index of its first row in the call's rows
    size_t count = 0;
    bool local = false;
  };
  // The engine's id for the descriptor a view of [offset, offset + length)
  // gives, `bytes` of reads through it counted.
  Status EngineFile(uint64_t offset, uint64_t length, uint64_t bytes, FileId* id, bool* local);
  Status Fail(const Range& range, const ReadCompletion& read) const;
  // Submits `requests` (tag r reads ranges[r]) and hands each range's bytes
  // to `use` as they arrive.
  Status SubmitAndTake(std::vector<ReadRequest> requests, const std::vector<Range>& ranges,
                       RowReadFigures* figures,
                       const std::function<void(const Range&, const char*)>& use);
  static void Note(const Range& range, RowReadFigures* figures);

  std::shared_ptr<Store> store_;
  std::shared_ptr<const StoreFile> file_;
  TableLayout layout_;
  uint64_t gap_ = 0;
  uint64_t max_request_ = 0;
  std::unique_ptr<ReadEngine> engine_;
  std::mutex files_mutex_;
  struct Handle {
    FileId id = 0;
    std::shared_ptr<const void> hold;  // the view's descriptor (and lease)
  };
  std::map<const void*, Handle> files_;  // by the view's hold
};

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_ROW_READER_H_
