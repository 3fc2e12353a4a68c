#include "embedding/frequency_sketch.h"

#include <algorithm>

namespace gpufeed {

FrequencySketch::FrequencySketch(size_t entries) {
  // 16 counters (one word) per entry, in blocks of four words.
  size_t blocks = 1;
  while (blocks * kWordsPerBlock < std::max<size_t>(entries, 16)) blocks <<= 1;
  words_.assign(blocks * kWordsPerBlock, 0);
  block_mask_ = blocks - 1;
  sample_ = 10 * std::max<size_t>(entries, 16);
}

int FrequencySketch::Estimate(uint64_t hash) const {
  const uint64_t* block = &words_[Block(hash)];
  int count = 15;
  for (int i = 0; i < kWordsPerBlock; ++i) {
    count = std::min(count, static_cast<int>((block[i] >> (4 * Nibble(hash, i))) & 15));
  }
  return count;
}

void FrequencySketch::Halve() {
  for (uint64_t& word : words_) word = (word >> 1) & 0x7777777777777777ull;
  additions_ /= 2;
}

}  // namespace gpufeed
