#include "embedding/latency_histogram.h"

namespace gpufeed {

LatencyHistogram::LatencyHistogram() { Reset(); }

// Values below 64 have a bucket each; above, bucket (e - 5) * 64 + the six
// bits after the leading one, e being the leading one's position.
size_t LatencyHistogram::BucketOf(uint64_t value) {
  if (value < (uint64_t{1} << kSubBits)) return static_cast<size_t>(value);
  const int e = 63 - __builtin_clzll(value);
  const uint64_t sub = (value >> (e - kSubBits)) & ((uint64_t{1} << kSubBits) - 1);
  return static_cast<size_t>((e - kSubBits + 1) << kSubBits) + static_cast<size_t>(sub);
}

double LatencyHistogram::Midpoint(size_t bucket) {
  if (bucket < (size_t{1} << kSubBits)) return static_cast<double>(bucket);
  const int e = static_cast<int>(bucket >> kSubBits) + kSubBits - 1;
  const uint64_t sub = bucket & ((uint64_t{1} << kSubBits) - 1);
  const double low = static_cast<double>((uint64_t{1} << e) + (sub << (e - kSubBits)));
  return low + static_cast<double>(uint64_t{1} << (e - kSubBits)) / 2;
}

void LatencyHistogram::Record(uint64_t nanoseconds) {
  counts_[BucketOf(nanoseconds)].fetch_add(1, std::memory_order_relaxed);
  total_.fetch_add(nanoseconds, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

double LatencyHistogram::Percentile(double fraction) const {
  const uint64_t n = count();
  if (n == 0) return 0;
  // The smallest bucket whose cumulative count reaches ceil(fraction * n).
  uint64_t wanted = static_cast<uint64_t>(fraction * static_cast<double>(n) + 0.999999);
  if (wanted < 1) wanted = 1;
  uint64_t seen = 0;
  for (size_t b = 0; b < static_cast<size_t>(kBuckets); ++b) {
    seen += counts_[b].load(std::memory_order_relaxed);
    if (seen >= wanted) return Midpoint(b);
  }
  return Midpoint(kBuckets - 1);
}

void LatencyHistogram::Reset() {
  for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
  total_.store(0, std::memory_order_relaxed);
}

}  // namespace gpufeed
