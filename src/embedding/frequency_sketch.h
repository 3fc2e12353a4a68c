// FrequencySketch: TinyLFU's approximate access counts (Einziger, Friedman
// and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017, as
// Caffeine implements it). A count-min sketch of 4-bit counters: an id's
// four counters lie in one 32-byte block (one cache line), its estimate is
// their minimum. After `sample` increments every counter is halved, so the
// counts follow recent popularity (the "reset" that ages the sketch).
//
// Not thread-safe: each RowCache shard owns one, under its lock.
#ifndef GPUFEED_EMBEDDING_FREQUENCY_SKETCH_H_
#define GPUFEED_EMBEDDING_FREQUENCY_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpufeed {

class FrequencySketch {
 public:
  // Sized for a cache of `entries` ids: 16 counters per entry, halved every
  // 10 * entries increments.
  explicit FrequencySketch(size_t entries);

  // `hash` is the id's 64-bit mix (RowCache::Mix). Inline: it runs for
  // every id looked up.
  void Increment(uint64_t hash) {
    uint64_t* block = &words_[Block(hash)];
    bool added = false;
    for (int i = 0; i < kWordsPerBlock; ++i) {
      const int shift = 4 * Nibble(hash, i);
      if (((block[i] >> shift) & 15) != 15) {
        block[i] += uint64_t{1} << shift;
        added = true;
      }
    }
    if (added && ++additions_ >= sample_) Halve();
  }
  // The estimated count, 0..15.
  int Estimate(uint64_t hash) const;
  // Where Increment/Estimate will look (to prefetch).
  const void* BlockOf(uint64_t hash) const { return &words_[Block(hash)]; }
  size_t bytes() const { return words_.size() * sizeof(uint64_t); }

 private:
  static constexpr int kWordsPerBlock = 4;
  size_t Block(uint64_t hash) const { return static_cast<size_t>(hash & block_mask_) * kWordsPerBlock; }
  // Counter i's nibble within word i of the block.
  static int Nibble(uint64_t hash, int i) { return static_cast<int>((hash >> (32 + 4 * i)) & 15); }
  void Halve();

  std::vector<uint64_t> words_;
  uint64_t block_mask_ = 0;
  uint64_t sample_ = 0;
  uint64_t additions_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_FREQUENCY_SKETCH_H_
