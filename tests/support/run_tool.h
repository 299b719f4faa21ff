// Test support: runs one of our command-line tools to its end and returns its exit status,
// with its stdout (lines joined by '\n') and, optionally, text written to its stdin.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "perf/process.h"

namespace fabkv::testing {

// argv[0] is the tool's path. Every wait is bounded (10 s for its output, 10 s for its exit).
inline int run_tool(std::vector<std::string> argv, std::string* out = nullptr,
                    const std::string* stdin_text = nullptr) {
  perf::ChildProcess p(argv);
  if (stdin_text) p.write_line(*stdin_text);
  p.close_stdin();
  std::string line, all;
  bool first = true;
  while (p.read_line(&line, Deadline::after_ms(10000))) {
    if (!first) all += '\n';
    all += line;
    first = false;
  }
  if (out) *out = all;
  return p.wait(Deadline::after_ms(10000));
}

}  // namespace fabkv::testing
