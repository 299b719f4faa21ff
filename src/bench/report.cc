#include "bench/report.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "bench/servers.h"
#include "perf/process.h"

extern char** environ;

namespace fabkv::bench {

namespace fs = std::filesystem;

std::string report_script() {
  std::vector<fs::path> candidates;
#ifdef FABKV_SOURCE_DIR
  candidates.push_back(fs::path(FABKV_SOURCE_DIR) / "python" / "fabkv" / "report.py");
#endif
  fs::path exe_dir = fs::path(perf::self_executable()).parent_path();
  candidates.push_back(exe_dir / ".." / ".." / "python" / "fabkv" / "report.py");
  candidates.push_back(exe_dir / ".." / "share" / "fabkv" / "report.py");
  for (const auto& c : candidates)
    if (fs::exists(c)) return fs::weakly_canonical(c).string();
  throw std::runtime_error("python/fabkv/report.py not found next to " + exe_dir.string());
}

int render_report(const std::string& input, const std::string& out_dir) {
  if (!fs::exists(input)) throw std::runtime_error("no results file " + input);
  // Debian's interpreter first: python3-matplotlib is installed for it, not for a pyenv one.
  std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                      : find_executable("python3");
  if (python.empty())
    throw std::runtime_error("python3 not found (apt-get install python3-matplotlib)");
  std::string script = report_script();
  std::vector<std::string> argv = {python, script, "--input", input, "--out", out_dir};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, python.c_str(), nullptr, nullptr, args.data(), environ);
  if (rc != 0) throw std::runtime_error("cannot run " + python + ": " + std::strerror(rc));
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace fabkv::bench
