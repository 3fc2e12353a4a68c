#include "embedding/row_cache.h"

#include <algorithm>
#include <cstring>

namespace gpufeed {
namespace {

// Index entries: id << kSlotBits | slot. Ids below 2^40 (checked by
// EmbeddingTable::Open), slots of a shard below 2^24.
constexpr int kSlotBits = 24;
constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
constexpr uint64_t kEmptyEntry = ~uint64_t{0};
constexpr int kMaxShardBits = 6;            // 64 shards
constexpr uint64_t kMinShardSlots = 256;    // fewer shards for a small cache
constexpr uint32_t kNoSlot = UINT32_MAX;

uint64_t NextPow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

// The sketch's hash: the index uses the low bits of the mix, the shard its
// top bits; the sketch takes bits 32.. (block) and 0.. (counters).
uint64_t SketchHash(uint64_t hash) { return (hash << 32) | (hash >> 32); }

// Bytes of a shard of `slots` rows besides the rows: slot ids, reference
// bits, the index (a power of two of at least twice the slots, 12 bytes an
// entry) and the sketch (a power of two of 4-word blocks, a word a slot).
uint64_t ShardOverhead(uint64_t slots) {
  const uint64_t index = NextPow2(std::max<uint64_t>(2 * slots, 16));
  const uint64_t sketch_words = NextPow2(std::max<uint64_t>(slots, 16) / 4 + 1) * 4;
  return slots * (sizeof(int64_t) + 1) + index * sizeof(uint64_t) +
         sketch_words * sizeof(uint64_t);
}

}  // namespace

struct alignas(64) RowCache::Shard {
  Shard(uint64_t slot_count, size_t row_bytes)
      : slots(slot_count),
        mask(NextPow2(std::max<uint64_t>(2 * slot_count, 16)) - 1),
        index(new uint64_t[mask + 1]),
        slot_id(new int64_t[std::max<uint64_t>(slot_count, 1)]),
        referenced(new uint8_t[std::max<uint64_t>(slot_count, 1)]()),
        arena(new char[std::max<uint64_t>(slot_count, 1) * row_bytes]),
        sketch(slot_count) {
    std::fill(index.get(), index.get() + mask + 1, kEmptyEntry);
  }

  // An index entry is the id (kIdBits) and the slot (kSlotBits) in one
  // word, so that a probe touches one cache line.
  static uint64_t Entry(int64_t id, uint64_t slot) {
    return (static_cast<uint64_t>(id) << kSlotBits) | slot;
  }
  static int64_t IdOf(uint64_t entry) { return static_cast<int64_t>(entry >> kSlotBits); }

  uint32_t Find(int64_t id, uint64_t hash) const {
    for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
      const uint64_t entry = index[i];
      if (entry == kEmptyEntry) return kNoSlot;
      if (IdOf(entry) == id) return static_cast<uint32_t>(entry & kSlotMask);
    }
  }
  void Put(int64_t id, uint64_t hash, uint64_t slot) {
    uint64_t i = hash & mask;
    while (index[i] != kEmptyEntry) i = (i + 1) & mask;
    index[i] = Entry(id, slot);
  }
  // Linear probing's deletion by backward shift: no tombstones, so probe
  // lengths stay those of the resident ids.
  void Erase(int64_t id) {
    uint64_t i = Mix(static_cast<uint64_t>(id)) & mask;
    while (IdOf(index[i]) != id) i = (i + 1) & mask;
    for (uint64_t j = (i + 1) & mask; index[j] != kEmptyEntry; j = (j + 1) & mask) {
      const uint64_t home = Mix(static_cast<uint64_t>(IdOf(index[j]))) & mask;
      // index[j] may move into the hole at i when its home is not in (i, j].
      const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        index[i] = index[j];
        i = j;
      }
    }
    index[i] = kEmptyEntry;
  }

  std::mutex mutex;
  const uint64_t slots;
  uint64_t used = 0;
  uint64_t hand = 0;
  const uint64_t mask;
  std::unique_ptr<uint64_t[]> index;
  std::unique_ptr<int64_t[]> slot_id;
  std::unique_ptr<uint8_t[]> referenced;
  std::unique_ptr<char[]> arena;
  FrequencySketch sketch;
};

RowCache::RowCache(uint64_t budget_bytes, size_t row_bytes, uint64_t table_rows)
    : row_bytes_(row_bytes) {
  if (row_bytes == 0 || table_rows == 0) return;
  const uint64_t per_row = row_bytes + sizeof(int64_t) + 1 + 16 + 8;
  uint64_t wanted = std::min<uint64_t>(budget_bytes / per_row, table_rows);
  std::vector<uint64_t> slots;
  while (wanted > 0) {
    shard_bits_ = 0;
    while (shard_bits_ < kMaxShardBits && (wanted >> (shard_bits_ + 1)) >= kMinShardSlots) ++shard_bits_;
    const size_t shards = size_t{1} << shard_bits_;
    wanted = std::min<uint64_t>(wanted, shards * kSlotMask / 2);
    slots.assign(shards, (wanted + shards - 1) / shards);
    if (wanted == table_rows && shards > 1) {
      // The whole table: each shard exactly the rows that hash to it.
      std::fill(slots.begin(), slots.end(), 0);
      for (uint64_t id = 0; id < table_rows; ++id) ++slots[ShardOf(Mix(id))];
    }
    uint64_t footprint = 0;
    for (uint64_t s : slots) footprint += s * row_bytes + ShardOverhead(s);
    if (footprint <= budget_bytes) {
      footprint_ = footprint;
      break;
    }
    wanted = wanted * 97 / 100;
  }
  if (wanted == 0) return;
  for (uint64_t s : slots) {
    shards_.push_back(std::make_unique<Shard>(s, row_bytes));
    capacity_ += s;
  }
}

RowCache::~RowCache() = default;

void RowCache::Group(const int64_t* ids, size_t count, std::vector<uint64_t>* hashes,
                     std::vector<uint32_t>* order, std::vector<uint32_t>* starts) const {
  const size_t shards = shards_.size();
  hashes->resize(count);
  order->resize(count);
  starts->assign(shards + 1, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t hash = Mix(static_cast<uint64_t>(ids[i]));
    (*hashes)[i] = hash;
    ++(*starts)[ShardOf(hash) + 1];
  }
  for (size_t s = 0; s < shards; ++s) (*starts)[s + 1] += (*starts)[s];
  std::vector<uint32_t>& next = *starts;  // advanced while placing, then restored
  for (size_t i = 0; i < count; ++i) (*order)[next[ShardOf((*hashes)[i])]++] = static_cast<uint32_t>(i);
  for (size_t s = shards; s > 0; --s) next[s] = next[s - 1];
  next[0] = 0;
}

void RowCache::Find(const int64_t* ids, size_t count, char* out, std::vector<uint32_t>* missing) {
  if (shards_.empty()) {
    for (size_t i = 0; i < count; ++i) missing->push_back(static_cast<uint32_t>(i));
    return;
  }
  thread_local std::vector<uint64_t> hashes;
  thread_local std::vector<uint32_t> order, starts, found;
  Group(ids, count, &hashes, &order, &starts);
  found.resize(count);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const uint32_t begin = starts[s], end = starts[s + 1];
    if (begin == end) continue;
    Shard& shard = *shards_[s];
    std::lock_guard<std::mutex> lock(shard.mutex);
    // Three passes, so that the cache misses of a pass overlap: the index
    // entries, then the rows, then the copies.
    for (uint32_t k = begin; k < end; ++k) {
      const uint64_t hash = hashes[order[k]];
      __builtin_prefetch(&shard.index[hash & shard.mask]);
      __builtin_prefetch(shard.sketch.BlockOf(SketchHash(hash)));
    }
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t i = order[k];
      const uint32_t slot = shard.Find(ids[i], hashes[i]);
      shard.sketch.Increment(SketchHash(hashes[i]));
      found[k] = slot;
      if (slot != kNoSlot) {
        const char* row = shard.arena.get() + size_t{slot} * row_bytes_;
        for (size_t line = 0; line < row_bytes_; line += 64) __builtin_prefetch(row + line);
        __builtin_prefetch(row + row_bytes_ - 1);
      }
    }
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t i = order[k];
      if (found[k] == kNoSlot) {
        missing->push_back(i);
        continue;
      }
      std::memcpy(out + size_t{i} * row_bytes_, shard.arena.get() + size_t{found[k]} * row_bytes_,
                  row_bytes_);
      shard.referenced[found[k]] = 1;
    }
  }
}

RowCache::Admit RowCache::OfferLocked(Shard& shard, int64_t id, uint64_t hash, const char* row,
                                      bool force) {
  if (shard.Find(id, hash) != kNoSlot) return Admit::kPresent;
  uint64_t slot;
  if (shard.used < shard.slots) {
    slot = shard.used++;
    resident_.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (shard.slots == 0) return Admit::kRejected;
    // CLOCK: pass the referenced slots (clearing their bit) to the victim.
    while (shard.referenced[shard.hand]) {
      shard.referenced[shard.hand] = 0;
      shard.hand = (shard.hand + 1) % shard.slots;
    }
    slot = shard.hand;
    const int64_t victim = shard.slot_id[slot];
    const uint64_t victim_hash = Mix(static_cast<uint64_t>(victim));
    if (!force && shard.sketch.Estimate(SketchHash(hash)) <= shard.sketch.Estimate(SketchHash(victim_hash))) {
      return Admit::kRejected;
    }
    shard.Erase(victim);
    shard.hand = (shard.hand + 1) % shard.slots;
    evicted_.fetch_add(1, std::memory_order_relaxed);
  }
  shard.Put(id, hash, static_cast<uint32_t>(slot));
  shard.slot_id[slot] = id;
  shard.referenced[slot] = 1;
  std::memcpy(shard.arena.get() + slot * row_bytes_, row, row_bytes_);
  return Admit::kInserted;
}

void RowCache::Offer(const int64_t* ids, size_t count, const char* rows) {
  if (shards_.empty() || count == 0) return;
  thread_local std::vector<uint64_t> hashes;
  thread_local std::vector<uint32_t> order, starts;
  Group(ids, count, &hashes, &order, &starts);
  uint64_t admitted = 0, rejected = 0;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (starts[s] == starts[s + 1]) continue;
    Shard& shard = *shards_[s];
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (uint32_t k = starts[s]; k < starts[s + 1]; ++k) {
      const uint32_t j = order[k];
      const Admit result = OfferLocked(shard, ids[j], hashes[j], rows + size_t{j} * row_bytes_, false);
      admitted += result == Admit::kInserted;
      rejected += result == Admit::kRejected;
    }
  }
  admitted_.fetch_add(admitted, std::memory_order_relaxed);
  rejected_.fetch_add(rejected, std::memory_order_relaxed);
}

void RowCache::Insert(int64_t first_id, size_t count, const char* rows) {
  if (shards_.empty()) return;
  for (size_t j = 0; j < count; ++j) {
    const int64_t id = first_id + static_cast<int64_t>(j);
    const uint64_t hash = Mix(static_cast<uint64_t>(id));
    Shard& shard = *shards_[ShardOf(hash)];
    std::lock_guard<std::mutex> lock(shard.mutex);
    OfferLocked(shard, id, hash, rows + j * row_bytes_, true);
  }
}

void RowCache::ResetCounters() {
  admitted_.store(0);
  rejected_.store(0);
  evicted_.store(0);
}

}  // namespace gpufeed
