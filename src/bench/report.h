// `fabkv-bench report`: turns JSON Lines results into PNG plots and summary.md with
// python/fabkv/report.py (matplotlib from Debian's python3-matplotlib).
#pragma once

#include <string>

namespace fabkv::bench {

// Path of python/fabkv/report.py (run as a file: it needs no other part of the fabkv package):
// the source tree this binary was built from, else next to the executable's ../../python/fabkv
// or ../share/fabkv. Throws std::runtime_error when none exists.
std::string report_script();

// Runs the script (inheriting stdout/stderr); returns its exit status. Throws
// std::runtime_error when the input is missing or no python3 is found.
int render_report(const std::string& input, const std::string& out_dir);

}  // namespace fabkv::bench
