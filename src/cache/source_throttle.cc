#include "cache/source_throttle.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> throttle_on{false};
std::atomic<uint64_t> source_bytes{0};
std::mutex throttle_mutex;
SourceThrottle throttle_settings;
// When the simulated link is free again: requests queue behind each other
// for their transfer time, as on a shared network link.
Clock::time_point link_free_at;

}  // namespace

void SetSourceThrottleForBenchmark(const SourceThrottle& throttle) {
  std::lock_guard<std::mutex> lock(throttle_mutex);
  throttle_settings = throttle;
  link_free_at = Clock::now();
  throttle_on.store(throttle.latency_seconds > 0 || throttle.bytes_per_second > 0);
}

void ThrottleSourceRead(uint64_t bytes) {
  source_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (!throttle_on.load(std::memory_order_relaxed)) return;
  Clock::time_point done;
  {
    std::lock_guard<std::mutex> lock(throttle_mutex);
    auto now = Clock::now();
    auto start = std::max(now, link_free_at);
    auto transfer = throttle_settings.bytes_per_second > 0
                        ? std::chrono::duration<double>(static_cast<double>(bytes) /
                                                        throttle_settings.bytes_per_second)
                        : std::chrono::duration<double>(0);
    link_free_at = start + std::chrono::duration_cast<Clock::duration>(transfer);
    done = link_free_at + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(throttle_settings.latency_seconds));
  }
  std::this_thread::sleep_until(done);
}

uint64_t SourceBytesRead() { return source_bytes.load(std::memory_order_relaxed); }

}  // namespace gpufeed
