// Test support: a real server process of ours (fabkv-server, `fabkv-perf serve`) started with
// --listen 127.0.0.1:0, which prints "READY <host:port>" as its first line. How it ends is
// checked (support/child.h): a clean stop must exit 0 and a kill must be what killed it, else
// the test fails with the end of the server's stderr (where a sanitizer's report goes).
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "perf/process.h"
#include "support/child.h"

namespace fabkv::testing {

class ReadyProcess {
 public:
  // How the process is asked to stop: a STOP line on stdin, or SIGTERM.
  enum class Stop { kStdinLine, kSigterm };

  ReadyProcess(const std::vector<std::string>& argv, Stop how) : how_(how) {
    child_ = std::make_unique<Child>(argv);
    std::string line;
    if (!child_->proc().read_line(&line, Deadline::after_ms(20000)) || line.rfind("READY ", 0) != 0)
      throw std::runtime_error(argv[0] + " did not start: " + line + "\n" +
                               child_->stderr_excerpt());
    address_ = line.substr(6);
  }
  ~ReadyProcess() { stop(); }
  ReadyProcess(const ReadyProcess&) = delete;
  ReadyProcess& operator=(const ReadyProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }

  // Asks the process to stop and returns its exit status (as perf::ChildProcess::wait; -1 if
  // gone already). Anything but exit 0 within 20 s is a test failure that shows the process's
  // stderr: a server that crashed earlier, hung on the way out (then killed), or whose
  // sanitizer reported.
  int stop() {
    if (!child_) return -1;
    if (how_ == Stop::kStdinLine) child_->proc().write_line("STOP");
    else child_->proc().kill(SIGTERM);
    if (suspended_) resume();
    EXPECT_TRUE(child_->ends_as(0, 20000))
        << "stopped by " << (how_ == Stop::kStdinLine ? "a STOP line" : "SIGTERM");
    int rc = child_->proc().wait(Deadline::after_ms(0));
    child_.reset();
    return rc;
  }
  // SIGKILL, as a crash would; cleans up the shm regions it leaves behind. A process that had
  // died already of something else is a test failure.
  void kill() {
    if (!child_) return;
    pid_t pid = child_->pid();
    EXPECT_TRUE(child_->kill());
    child_.reset();
    perf::remove_shm_leftovers(pid);
  }
  // SIGSTOP / SIGCONT: a server that answers nothing meanwhile (its clients' requests stay in
  // flight; shm READs of its memory still complete, the initiator copies them). suspend()
  // returns once every thread has stopped (a signal to a running process lands a little
  // later), or false after 5 s.
  bool suspend() {
    if (!child_) return false;
    child_->proc().kill(SIGSTOP);
    suspended_ = true;
    const std::string tasks = "/proc/" + std::to_string(child_->pid()) + "/task";
    for (Deadline d = Deadline::after_ms(5000); !d.expired();) {
      bool all = true;
      std::error_code ec;
      for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
        std::ifstream in(t.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        // "pid (comm) S ...": the state follows the last ')'.
        const size_t paren = stat.rfind(')');
        const char state = paren + 2 < stat.size() ? stat[paren + 2] : '?';
        all = all && (state == 'T' || state == 't');
      }
      if (!ec && all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  void resume() {
    if (!child_) return;
    child_->proc().kill(SIGCONT);
    suspended_ = false;
  }

 private:
  Stop how_;
  std::unique_ptr<Child> child_;
  std::string address_;
  bool suspended_ = false;
};

}  // namespace fabkv::testing
