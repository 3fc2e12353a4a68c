// EmbeddingTable: rows of an embedding table served by id with memory
// latency, from a file on a slow shared filesystem (the recommender
// pattern: many small lookups, bound by latency). Three tiers:
//
//   RAM      the hot rows, within cache_bytes (rows, not the file: a table
//            larger than the budget keeps the rows that are used). Rows
//            enter by frequency (TinyLFU admission: a missed row replaces
//            a resident one only when it was asked for more often
//            recently) and leave by CLOCK; see docs/embeddings.md for why
//            this suits Zipf-distributed CTR ids.
//   NVMe     the node cache (EmbeddingTableOptions::cache.cache_dir): a
//            local copy of the table file, made once per node in the
//            background and shared by the node's processes, as for
//            datasets (gpufeed/cache.h). Misses read the copy once it (or
//            the part they need) is written, else the source.
//   source   the table file itself, read through the read engine
//            (io_uring, many row reads in flight, O_DIRECT optional);
//            neighbouring missed rows are read as one request.
//
// A table the budget holds whole can be read once, sequentially, at Open
// (preload): every lookup is then a RAM hit.
//
//   gpufeed::EmbeddingTableOptions options;
//   options.cache_bytes = 8ull << 30;
//   std::shared_ptr<gpufeed::EmbeddingTable> table;
//   GPUFEED_RETURN_IF_ERROR(gpufeed::EmbeddingTable::Open("/lustre/emb.npy", options, &table));
//   std::vector<char> out(ids.size() * table->row_bytes());
//   GPUFEED_RETURN_IF_ERROR(table->Lookup(ids.data(), ids.size(), out.data()));
//
// Thread safety: Lookup and Stats may be called from any number of threads
// at once. A table is not used across fork: in a forked child (a torch
// DataLoader worker) its Lookup fails with InvalidArgument saying so; open
// one per process (the node cache is what processes share).
#ifndef GPUFEED_EMBEDDING_H_
#define GPUFEED_EMBEDDING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gpufeed/cache.h"
#include "gpufeed/export.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

struct EmbeddingTableOptions {
  // A .npy file gives the shape and dtype (a 2-D C-order array of float32,
  // float16, int8 or uint8; uint16 read as bfloat16 with dtype kBfloat16).
  // A raw row-major file (any other name) needs both: rows are its size
  // divided by dim * element size, which must divide it exactly. Given for
  // a .npy, they must agree with its header (InvalidArgument otherwise).
  uint32_t dim = 0;
  std::optional<TensorDtype> dtype;  // kFloat32, kFloat16, kBfloat16, kInt8, kUint8
  // The RAM tier's budget: resident rows plus their index and the admission
  // sketch. 0: no RAM tier (every lookup reads the NVMe copy or the source).
  uint64_t cache_bytes = 8ull << 30;
  // The node NVMe tier (cache_dir empty: none). wait_for_fill is ignored:
  // a lookup never waits for the copy, it reads the source meanwhile.
  CacheOptions cache;
  // Read the whole table once at Open, sequentially, into the RAM tier.
  // InvalidArgument when it does not fit in cache_bytes.
  bool preload = false;
  // Source and NVMe reads: backend, reads in flight, O_DIRECT. The read
  // buffers (inflight_bytes, 16 MiB here: queue_depth requests, 64 here as
  // in Python's EmbeddingTable, of the longest coalesced read, 256 KiB) are
  // the table's memory beyond cache_bytes, with one call's missed rows per
  // looking-up thread.
  IoOptions io = [] {
    IoOptions io;
    io.queue_depth = 64;
    io.inflight_bytes = 16u << 20;
    return io;
  }();
  // Missed rows whose byte ranges are at most this far apart are read as
  // one request (the bytes between are read and dropped). Larger: fewer,
  // longer requests; 0: only adjacent rows merge.
  uint32_t coalesce_gap_bytes = 4096;
};

// Counters since Open (or ResetStats). `rows` = ram_hits + nvme_rows +
// source_rows; a row asked for twice in one call counts twice in `rows`
// and is read once.
struct EmbeddingStats {
  uint64_t lookups = 0;      // Lookup calls
  uint64_t rows = 0;         // ids looked up
  uint64_t ram_hits = 0;     // ids served from the RAM tier
  uint64_t nvme_rows = 0;    // distinct missed rows read from the node-cache copy
  uint64_t source_rows = 0;  // distinct missed rows read from the table file
  uint64_t nvme_reads = 0;   // read requests to the node-cache copy
  uint64_t nvme_bytes = 0;
  uint64_t source_reads = 0;  // read requests to the table file (after coalescing)
  uint64_t source_bytes = 0;
  uint64_t admitted = 0;     // missed rows that entered the RAM tier
  uint64_t rejected = 0;     // missed rows the admission filter kept out
  uint64_t evicted = 0;      // rows that left the RAM tier for them
  uint64_t resident_rows = 0;   // rows in the RAM tier now
  uint64_t resident_bytes = 0;  // the RAM tier's bytes now (rows, index, sketch)
  uint64_t capacity_rows = 0;   // rows the budget holds
  uint64_t preload_bytes = 0;   // read at Open by preload
  // Latency of a Lookup call, microseconds (from a log histogram with 64
  // buckets per power of two: within about 1%), and the total.
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  double lookup_seconds = 0;
};

class GPUFEED_EXPORT EmbeddingTable {
 public:
  // Opens `path` (.npy or raw). Errors name the file: NotFound,
  // InvalidArgument (bad options, a raw file whose size is not a multiple
  // of the row), Corruption (a .npy header that is not one, a file shorter
  // or longer than its header says), NotSupported (a dtype or layout a
  // table cannot have).
  static Status Open(const std::string& path, const EmbeddingTableOptions& options,
                     std::shared_ptr<EmbeddingTable>* table);
  virtual ~EmbeddingTable();

  const std::string& path() const { return path_; }
  uint64_t rows() const { return rows_; }
  uint32_t dim() const { return dim_; }
  TensorDtype dtype() const { return dtype_; }
  size_t row_bytes() const { return row_bytes_; }

  // Row ids[i] of the table into out + i * row_bytes(), for i < count:
  // bit-identical to numpy_table[ids]. Duplicates and any order are fine;
  // count 0 does nothing. OutOfRange naming the id, its position and the
  // table for an id < 0 or >= rows() (nothing is read then); Corruption or
  // IOError naming the file and byte offset when the file changed or the
  // read failed (rows of `out` may then be partly written).
  virtual Status Lookup(const int64_t* ids, size_t count, void* out) = 0;
  virtual EmbeddingStats Stats() const = 0;
  virtual void ResetStats() = 0;

 protected:
  EmbeddingTable() = default;
  std::string path_;
  uint64_t rows_ = 0;
  uint32_t dim_ = 0;
  TensorDtype dtype_ = TensorDtype::kFloat32;
  size_t row_bytes_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_H_
