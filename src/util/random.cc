#include "util/random.h"

namespace gpufeed {

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kEpochSalt = 0x6770756665656400ull;  // "gpufeed\0"

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t SplitMix64(uint64_t value) { return Mix(value + kGolden); }

SampleRng::SampleRng(uint64_t seed, uint64_t epoch)
    : state_(SplitMix64(seed) ^ SplitMix64(epoch ^ kEpochSalt)) {}

uint64_t SampleRng::Next() {
  state_ += kGolden;
  return Mix(state_);
}

uint64_t SampleRng::Bounded(uint64_t bound) {
  // Lemire, "Fast Random Integer Generation in an Interval" (2019).
  unsigned __int128 product = static_cast<unsigned __int128>(Next()) * bound;
  uint64_t low = static_cast<uint64_t>(product);
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(Next()) * bound;
      low = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace gpufeed
