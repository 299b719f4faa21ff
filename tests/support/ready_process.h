// Test support: a real server process of ours (fabkv-server, `fabkv-perf serve`) started with
// --listen 127.0.0.1:0, which prints "READY <host:port>" as its first line.
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
    if (suspended_) resume();
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
  // SIGSTOP / SIGCONT: a server that answers nothing meanwhile (its clients' requests stay in
  // flight; shm READs of its memory still complete, the initiator copies them). suspend()
  // returns once every thread has stopped (a signal to a running process lands a little
  // later), or false after 5 s.
  bool suspend() {
    if (!proc_) return false;
    proc_->kill(SIGSTOP);
    suspended_ = true;
    const std::string tasks = "/proc/" + std::to_string(proc_->pid()) + "/task";
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
    if (!proc_) return;
    proc_->kill(SIGCONT);
    suspended_ = false;
  }

 private:
  Stop how_;
  std::unique_ptr<perf::ChildProcess> proc_;
  std::string address_;
  bool suspended_ = false;
};

}  // namespace fabkv::testing
