// Test support: a real server process of ours (fabkv-server, `fabkv-perf serve`) started with
// --listen 127.0.0.1:0, which prints "READY <host:port>" as its first line.
#pragma once

#include <signal.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "perf/process.h"

namespace fabkv::testing {

class ReadyProcess {
 public:
  // How the process is asked to stop: a STOP line on stdin, or SIGTERM.
  enum class Stop { kStdinLine, kSigterm };

  ReadyProcess(const std::vector<std::string>& argv, Stop how) : how_(how) {
    proc_ = std::make_unique<perf::ChildProcess>(argv);
    std::string line;
    if (!proc_->read_line(&line, Deadline::after_ms(20000)) || line.rfind("READY ", 0) != 0)
      throw std::runtime_error(argv[0] + " did not start: " + line);
    address_ = line.substr(6);
  }
  ~ReadyProcess() { stop(); }
  ReadyProcess(const ReadyProcess&) = delete;
  ReadyProcess& operator=(const ReadyProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }

  // Asks the process to stop and returns its exit status (SIGKILL after 10 s; -1 if gone).
  int stop() {
    if (!proc_) return -1;
    if (how_ == Stop::kStdinLine) proc_->write_line("STOP");
    else proc_->kill(SIGTERM);
    int rc = proc_->wait(Deadline::after_ms(10000));
    if (rc < 0) proc_->kill(SIGKILL);
    proc_.reset();
    return rc;
  }
  // SIGKILL, as a crash would; cleans up the shm regions it leaves behind.
  void kill() {
    if (!proc_) return;
    pid_t pid = proc_->pid();
    proc_->kill(SIGKILL);
    proc_->wait(Deadline::after_ms(5000));
    proc_.reset();
    perf::remove_shm_leftovers(pid);
  }

 private:
  Stop how_;
  std::unique_ptr<perf::ChildProcess> proc_;
  std::string address_;
};

}  // namespace fabkv::testing
