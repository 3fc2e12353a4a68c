#include "storage/source_throttle.h"

#include <atomic>
#include <mutex>

namespace gpufeed {

namespace {

std::atomic<uint64_t> source_bytes{0};
std::mutex throttle_mutex;
SourceThrottle throttle_settings;

}  // namespace

void SetSourceThrottleForBenchmark(const SourceThrottle& throttle) {
  std::lock_guard<std::mutex> lock(throttle_mutex);
  throttle_settings = throttle;
}

SourceThrottle SourceThrottleForBenchmark() {
  std::lock_guard<std::mutex> lock(throttle_mutex);
  return throttle_settings;
}

uint64_t SourceBytesRead() { return source_bytes.load(std::memory_order_relaxed); }
void CountSourceBytes(uint64_t bytes) { source_bytes.fetch_add(bytes, std::memory_order_relaxed); }

}  // namespace gpufeed
