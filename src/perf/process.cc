#include "perf/process.h"

#include "fabric/isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace fabkv::perf {

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, int stderr_fd) {
  // Writing to a child that died must be an error return, not a process-killing SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  // fork + exec rather than posix_spawn: the child asks the kernel to kill it when its parent
  // dies (PR_SET_PDEATHSIG), so a crashed test or coordinator never leaves busy-polling
  // servers behind. Only async-signal-safe calls between fork and exec.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    if (stderr_fd >= 0) ::dup2(stderr_fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid_ < 0) {
    int err = errno;
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error("fork " + argv[0] + ": " + std::strerror(err));
  }
  in_ = in[1];
  out_ = out[0];
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (in_ >= 0) ::close(in_);
  if (out_ >= 0) ::close(out_);
}

bool ChildProcess::read_line(std::string* line, Deadline deadline) {
  while (true) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      *line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return true;
    }
    auto left = deadline.remaining().count();
    if (left <= 0) return false;
    pollfd p{out_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    char chunk[4096];
    ssize_t n = ::read(out_, chunk, sizeof(chunk));
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

bool ChildProcess::write_line(const std::string& line) {
  if (in_ < 0) return false;
  std::string s = line + "\n";
  return ::write(in_, s.data(), s.size()) == static_cast<ssize_t>(s.size());
}

void ChildProcess::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

int ChildProcess::wait(Deadline deadline) {
  if (reaped_) return status_;
  while (true) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (deadline.expired()) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::kill(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

}  // namespace fabkv::perf

namespace fabkv::perf {
void remove_shm_leftovers(pid_t pid) { fabric::remove_regions_of(pid); }
}  // namespace fabkv::perf
