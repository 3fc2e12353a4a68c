// A simulated busy parallel filesystem, for benchmarks only: every read from
// a cache's source (the dataset's own reads of a source shard and the
// cache's fill reads) waits a fixed per-request latency and shares one
// bandwidth cap. Off unless a benchmark turns it on; never used by tests
// to assert anything about time.
#ifndef GPUFEED_CACHE_SOURCE_THROTTLE_H_
#define GPUFEED_CACHE_SOURCE_THROTTLE_H_

#include <cstdint>

namespace gpufeed {

struct SourceThrottle {
  double latency_seconds = 0;       // added to every request
  double bytes_per_second = 0;      // shared by all requests; 0: no cap
};

// Process-wide; call before any read starts.
void SetSourceThrottleForBenchmark(const SourceThrottle& throttle);
// Sleeps as the simulated filesystem would for a request of `bytes`, and
// counts the bytes. A no-op (one relaxed load) when the throttle is off.
void ThrottleSourceRead(uint64_t bytes);
// Bytes read from sources since the process started (counted always).
uint64_t SourceBytesRead();

}  // namespace gpufeed

#endif  // GPUFEED_CACHE_SOURCE_THROTTLE_H_
