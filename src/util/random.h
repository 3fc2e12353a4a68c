// The deterministic generator gpufeed draws every random choice from: the
// sampler's epoch order (pipeline/sampler.h) and the transforms' crop and
// flip (decode/transform.h). It is specified bit for bit (docs/sampler.md),
// so an order or a crop is the same on every machine, compiler and thread
// count, and other tools can reproduce it:
//
//   splitmix64(x): x += 0x9E3779B97F4A7C15; z = x;
//                  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//                  z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)
//   stream state  = splitmix64(seed) ^ splitmix64(epoch ^ 0x6770756665656400 /* "gpufeed\0" */)
//   next()        = splitmix64 step on the state (state += golden; mix; return)
//   bounded(n)    = Lemire's multiply-shift with rejection: unbiased in [0, n)
//
// Thread safety: a SampleRng is used by one thread at a time; SplitMix64 is
// a pure function.
#ifndef GPUFEED_UTIL_RANDOM_H_
#define GPUFEED_UTIL_RANDOM_H_

#include <cstdint>

namespace gpufeed {

uint64_t SplitMix64(uint64_t value);

// The stream described above, for (seed, epoch).
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch);
  uint64_t Next();
  // Uniform in [0, bound). REQUIRES: bound > 0.
  uint64_t Bounded(uint64_t bound);

 private:
  uint64_t state_;
};

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_RANDOM_H_
