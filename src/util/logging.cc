#include "util/logging.h"

#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/ansicolor_sink.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "util/fork_hooks.h"

namespace gpufeed {

namespace {

// The sink's lock. spdlog's own console sinks share a mutex inside
// libspdlog that a fork() can leave held by a thread of the parent that
// was writing a line (to a full pipe, say): a forked child (a torch
// DataLoader worker) then hung at its first log line. This one is ours:
// the child gets a fresh one. It is a leaf lock (nothing is taken under
// it), and threads log while holding other locks, so it is not taken
// around the fork (that would order it before locks registered later).
struct LogMutex {
  using mutex_t = std::mutex;
  static mutex_t& mutex() {
    static mutex_t instance;
    return instance;
  }
};

// Registered when the library loads, not at the first log line: a thread
// registering while another forks would wait for the fork (fork_hooks.h).
const uint64_t kLogForkHooks = RegisterForkHooks(
    {nullptr, nullptr, [] { RenewInChild(&LogMutex::mutex()); }});

}  // namespace

spdlog::logger& Log() {
  // A function-local static: initialised once, thread-safe, and independent of
  // static initialisation order (no import-time side effects in Python).
  static std::shared_ptr<spdlog::logger> logger = [] {
    (void)kLogForkHooks;
    auto sink = std::make_shared<spdlog::sinks::ansicolor_stderr_sink<LogMutex>>();
    auto created = std::make_shared<spdlog::logger>("gpufeed", sink);
    created->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [gpufeed] [%l] %v");
    spdlog::level::level_enum level = spdlog::level::info;
    if (const char* env = std::getenv("GPUFEED_LOG_LEVEL")) {
      level = spdlog::level::from_str(env);
      // from_str maps unknown names to "off"; only accept "off" when asked.
      if (level == spdlog::level::off && std::string(env) != "off") level = spdlog::level::info;
    }
    created->set_level(level);
    return created;
  }();
  return *logger;
}

}  // namespace gpufeed
