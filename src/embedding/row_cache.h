// RowCache: the RAM tier of an embedding table. Rows are kept by id in
// shards (an id's shard from its hash; one lock per shard, taken once per
// shard per call), each with a fixed arena of row slots, an open-addressing
// index id -> slot, and a FrequencySketch.
//
// Policy: TinyLFU admission over CLOCK eviction. Every id looked up counts
// in its shard's sketch (hits and misses alike). A missed row takes a free
// slot while there is one; after that it replaces CLOCK's victim (the first
// slot not referenced since the hand last passed it) only when the sketch
// says it was asked for more often recently than the victim. CTR ids are
// Zipf-like: a few rows take most lookups and the long tail is seen once.
// Plain LRU/CLOCK would let every tail id evict a hot row; the frequency
// filter keeps the tail out, so the resident set converges on the most
// frequent rows (what an ideal static cache would hold), and the sketch's
// periodic halving lets it follow a popularity that drifts.
//
// Memory: everything (rows, index, sketch) fits in the budget given at
// construction; arenas are allocated once, untouched pages cost nothing.
//
// Thread safety: Find and Offer may run on any number of threads at once.
#ifndef GPUFEED_EMBEDDING_ROW_CACHE_H_
#define GPUFEED_EMBEDDING_ROW_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "embedding/frequency_sketch.h"

namespace gpufeed {

class RowCache {
 public:
  // Slots for as many rows as `budget_bytes` holds with their overhead, at
  // most `table_rows`. capacity_rows() is 0 when not even one row fits.
  RowCache(uint64_t budget_bytes, size_t row_bytes, uint64_t table_rows);
  ~RowCache();

  uint64_t capacity_rows() const { return capacity_; }
  // What the cache may occupy (rows, index, sketches): at most the budget.
  uint64_t footprint_bytes() const { return footprint_; }
  uint64_t resident_rows() const { return resident_.load(std::memory_order_relaxed); }

  // Copies the resident rows among ids[0, count) to out + i * row_bytes and
  // appends the positions i of the others to *missing (grouped by shard).
  // Every id counts once in the sketches.
  void Find(const int64_t* ids, size_t count, char* out, std::vector<uint32_t>* missing);
  // Offers rows read from below: ids[j]'s row is rows + j * row_bytes (ids
  // distinct). Each is admitted or rejected as the policy says.
  void Offer(const int64_t* ids, size_t count, const char* rows);
  // Inserts without admission (preload). REQUIRES: room for them.
  void Insert(int64_t first_id, size_t count, const char* rows);

  uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }
  void ResetCounters();

  static uint64_t Mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

 private:
  struct Shard;
  enum class Admit { kInserted, kPresent, kRejected };
  // REQUIRES: the shard's lock.
  Admit OfferLocked(Shard& shard, int64_t id, uint64_t hash, const char* row, bool force);
  // Positions of ids[0, count) grouped by shard: *order holds them, shard
  // s's from (*starts)[s] to (*starts)[s + 1].
  void Group(const int64_t* ids, size_t count, std::vector<uint64_t>* hashes,
             std::vector<uint32_t>* order, std::vector<uint32_t>* starts) const;
  size_t ShardOf(uint64_t hash) const { return shard_bits_ == 0 ? 0 : hash >> (64 - shard_bits_); }

  size_t row_bytes_ = 0;
  uint64_t capacity_ = 0;
  uint64_t footprint_ = 0;
  int shard_bits_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> resident_{0};
  std::atomic<uint64_t> admitted_{0}, rejected_{0}, evicted_{0};
};

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_ROW_CACHE_H_
