// A simulated busy parallel filesystem, for benchmarks only: the throttled
// store (store.h, NewThrottledStore) makes every read of its source wait a
// fixed per-request latency and share one bandwidth cap. Off unless a
// benchmark turns it on; never used by tests to assert anything about time.
#ifndef GPUFEED_STORAGE_SOURCE_THROTTLE_H_
#define GPUFEED_STORAGE_SOURCE_THROTTLE_H_

#include <cstdint>

namespace gpufeed {

struct SourceThrottle {
  double latency_seconds = 0;       // added to every request
  double bytes_per_second = 0;      // shared by all requests; 0: no cap
  bool active() const { return latency_seconds > 0 || bytes_per_second > 0; }
};

// Process-wide: datasets opened afterwards read their sources through a
// throttled store (NewDatasetStore). Call before opening them.
void SetSourceThrottleForBenchmark(const SourceThrottle& throttle);
SourceThrottle SourceThrottleForBenchmark();

// Bytes read from source files by every store of this process (dataset
// reads and cache fills), counted always.
uint64_t SourceBytesRead();
void CountSourceBytes(uint64_t bytes);

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_SOURCE_THROTTLE_H_
