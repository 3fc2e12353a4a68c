#include "util/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace gpufeed {

spdlog::logger& Log() {
  // A function-local static: initialised once, thread-safe, and independent of
  // static initialisation order (no import-time side effects in Python).
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
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
