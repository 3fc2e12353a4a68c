// The library's logger: spdlog, named "gpufeed", level from the environment
// variable GPUFEED_LOG_LEVEL (trace, debug, info, warn, error, critical, off;
// default info). One line per event worth knowing, never one per sample.
#ifndef GPUFEED_UTIL_LOGGING_H_
#define GPUFEED_UTIL_LOGGING_H_

#include <spdlog/spdlog.h>

#include <memory>

namespace gpufeed {

// Thread-safe; created on first use.
spdlog::logger& Log();

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_LOGGING_H_
