// Logging for every fabkv binary: spdlog to stderr, one line per event.
#pragma once

#include <spdlog/spdlog.h>

namespace fabkv {

// Sets the process-wide level from a name ("trace" .. "off"); the default is "info"
// unless FABKV_LOG is set in the environment. Returns false for an unknown name.
bool set_log_level(const std::string& name);

// Installs the stderr logger with fabkv's pattern. Safe to call more than once.
void init_logging(const std::string& process_name);

}  // namespace fabkv
