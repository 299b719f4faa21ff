// A child process of this executable with its stdin and stdout piped to the parent: how the
// fabkv-perf coordinator runs real server and client processes.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/deadline.h"

namespace fabkv::perf {

class ChildProcess {
 public:
  // Spawns `argv[0]` (an absolute path) with `argv`; throws std::runtime_error on failure.
  // With `stderr_fd` >= 0 the child's stderr is that descriptor (tests keep what a server
  // wrote, a sanitizer's report included, to show it when the server ended badly).
  explicit ChildProcess(const std::vector<std::string>& argv, int stderr_fd = -1);
  ~ChildProcess();  // kills (SIGKILL) and reaps a child that is still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // One line from the child's stdout (without '\n'); false on EOF or deadline.
  bool read_line(std::string* line, Deadline deadline);
  bool write_line(const std::string& line);
  void close_stdin();
  // Waits for exit up to the deadline; returns the exit status, or -1 if still running.
  int wait(Deadline deadline);
  void kill(int sig);

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  bool reaped_ = false;
  int status_ = -1;
};

// Path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace fabkv::perf

namespace fabkv::perf {
// The shm provider names its regions /dev/shm/<pid>:<uid>:<index> and unlinks them at close;
// a process killed with SIGKILL leaves them behind (16 MiB each). Tests that kill peers call
// this to clean up after them.
void remove_shm_leftovers(pid_t pid);
}  // namespace fabkv::perf
