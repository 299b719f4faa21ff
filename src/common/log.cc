#include "common/log.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace fabkv {

bool set_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (level == spdlog::level::off && name != "off") return false;
  spdlog::set_level(level);
  return true;
}

void init_logging(const std::string& process_name) {
  auto logger = spdlog::stderr_color_mt(process_name + "-" + std::to_string(::getpid()));
  logger->set_pattern("%H:%M:%S.%e %n %^%l%$ %v");
  spdlog::set_default_logger(logger);
  const char* env = std::getenv("FABKV_LOG");
  if (env == nullptr || !set_log_level(env)) spdlog::set_level(spdlog::level::info);
}

}  // namespace fabkv
