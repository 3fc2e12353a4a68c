// LatencyHistogram: counts of durations in logarithmic buckets (64 per
// power of two, so a percentile is within about 1.1% of the true value),
// recorded from any number of threads with one relaxed atomic add each.
#ifndef GPUFEED_EMBEDDING_LATENCY_HISTOGRAM_H_
#define GPUFEED_EMBEDDING_LATENCY_HISTOGRAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpufeed {

class LatencyHistogram {
 public:
  LatencyHistogram();
  void Record(uint64_t nanoseconds);
  // The duration below which `fraction` (0..1) of the recorded ones fall, in
  // nanoseconds (a bucket's midpoint); 0 when nothing was recorded.
  double Percentile(double fraction) const;
  uint64_t count() const;
  uint64_t total_nanoseconds() const { return total_.load(std::memory_order_relaxed); }
  void Reset();

 private:
  static constexpr int kSubBits = 6;                  // 64 buckets per power of two
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;
  static size_t BucketOf(uint64_t value);
  static double Midpoint(size_t bucket);

  std::atomic<uint64_t> counts_[kBuckets];
  std::atomic<uint64_t> total_{0};
};

}  // namespace gpufeed

#endif  // GPUFEED_EMBEDDING_LATENCY_HISTOGRAM_H_
