// Test support: a child process of a test (a fabkv-server, a fabric peer, a client process)
// whose end is judged. Its stdout is piped to the test (perf::ChildProcess); its stderr goes to
// an unlinked temporary file, so that a child that ends otherwise than the test asked fails the
// test with what it wrote (from a sanitizer's report on, when there is one). A sanitizer's
// report is such an end: under the Makefile's test-asan and test-tsan a report turns a clean
// stop (exit 0) into SIGABRT or exit 66, and LeakSanitizer reports at exit, i.e. only when the
// child is stopped cleanly and asked to.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/deadline.h"
#include "perf/process.h"

namespace fabkv::testing {

// What perf::ChildProcess::wait returns for a child killed by `sig` (as a shell says it).
constexpr int killed_by(int sig) { return 128 + sig; }

// "exit 0", "killed by SIGABRT", "still running" for a perf::ChildProcess::wait status. Under
// the Makefile's test-asan a report of ASan, LeakSanitizer or UBSan aborts (abort_on_error=1:
// SIGABRT); under test-tsan a TSan report exits 66 (halt_on_error=1, TSan's exit code).
inline std::string ending_text(int status) {
  if (status < 0) return "still running";
  if (status > 128 && status < 128 + 65) {
    const char* name = ::sigabbrev_np(status - 128);
    return std::string("killed by SIG") + (name ? name : std::to_string(status - 128));
  }
  return "exit " + std::to_string(status);
}

// An unlinked temporary file for a child's stderr: nothing to clean up, however the test ends.
class StderrFile {
 public:
  StderrFile() {
    std::string path = (std::filesystem::temp_directory_path() / "fabkv-stderr-XXXXXX").string();
    fd_ = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("mkostemp " + path + ": " + ::strerror(errno));
    ::unlink(path.c_str());
  }
  ~StderrFile() { ::close(fd_); }
  StderrFile(const StderrFile&) = delete;
  StderrFile& operator=(const StderrFile&) = delete;

  int fd() const { return fd_; }
  // What to show of it, at most about `max_bytes`: from the first sanitizer report on (its
  // first lines say what and where; the end keeps its SUMMARY), else the last lines.
  std::string excerpt(size_t max_bytes = 8000) const {
    const std::string all = read_all();
    size_t at = std::string::npos;
    for (const char* mark : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "WARNING: ThreadSanitizer", "runtime error:"})
      at = std::min(at, all.find(mark));
    if (at == std::string::npos) return last(all, max_bytes);
    const size_t line = all.rfind('\n', at);
    const std::string report = all.substr(line == std::string::npos ? 0 : line + 1);
    if (report.size() <= max_bytes) return report;
    const size_t keep_end = max_bytes / 4;
    return report.substr(0, max_bytes - keep_end) + "\n" + last(report, keep_end);
  }

 private:
  // The file's text (its last 4 MiB when larger).
  std::string read_all() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || st.st_size <= 0) return {};
    const size_t size = static_cast<size_t>(st.st_size), cap = size_t{4} << 20;
    const size_t from = size > cap ? size - cap : 0;
    std::string s(size - from, '\0');
    const ssize_t n = ::pread(fd_, s.data(), s.size(), static_cast<off_t>(from));
    s.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return s;
  }
  // The last `max_bytes` of `s`, from the start of a line.
  static std::string last(const std::string& s, size_t max_bytes) {
    if (s.size() <= max_bytes) return s;
    const std::string t = s.substr(s.size() - max_bytes);
    const size_t nl = t.find('\n');
    return "[...]\n" + (nl == std::string::npos ? t : t.substr(nl + 1));
  }

  int fd_ = -1;
};

// A child process of the test with its stderr kept (StderrFile).
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv)
      : name_(std::filesystem::path(argv.at(0)).filename().string()),
        proc_(std::make_unique<perf::ChildProcess>(argv, err_.fd())) {}

  perf::ChildProcess& proc() { return *proc_; }
  const perf::ChildProcess& proc() const { return *proc_; }
  pid_t pid() const { return proc_->pid(); }
  const std::string& name() const { return name_; }
  // Its stderr, or the part of it that matters (StderrFile::excerpt).
  std::string stderr_excerpt(size_t max_bytes = 8000) const { return err_.excerpt(max_bytes); }

  // Whether it ended with `expected` (an exit code, or killed_by(sig)); otherwise a failure
  // that says how it ended and shows its stderr (StderrFile::excerpt). Waits up to `ms` for
  // the end, and kills a child still running after that (a failure too).
  ::testing::AssertionResult ends_as(int expected, int ms) {
    int status = proc_->wait(Deadline::after_ms(ms));
    if (status < 0) {
      proc_->kill(SIGKILL);
      proc_->wait(Deadline::after_ms(5000));
    }
    if (status == expected) return ::testing::AssertionSuccess();
    auto failure = ::testing::AssertionFailure();
    failure << name_ << " (pid " << pid() << ") ";
    if (status < 0) failure << "was still running " << ms << " ms later (killed now)";
    else failure << "ended with " << ending_text(status);
    return failure << " where " << ending_text(expected) << " was expected; its stderr:\n"
                   << stderr_excerpt();
  }
  // SIGKILLs it on purpose (a crash, a victim): it must die of that signal, not of something
  // it met before (a sanitizer's abort, an exit of its own).
  ::testing::AssertionResult kill() {
    proc_->kill(SIGKILL);
    return ends_as(killed_by(SIGKILL), 10000);
  }

 private:
  std::string name_;
  StderrFile err_;
  std::unique_ptr<perf::ChildProcess> proc_;
};

}  // namespace fabkv::testing
