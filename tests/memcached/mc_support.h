// Test support for the memcached front end: a real fabkv-server process with --memcached, and
// a blocking TCP client whose every wait is bounded (SO_RCVTIMEO).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "perf/process.h"
#include "support/child.h"

namespace fabkv::testing {

// fabkv-server with --memcached 127.0.0.1:0 and `extra` flags; learns both addresses from its
// "READY host:port" and "MEMCACHED host:port" lines. Stopped by SIGTERM, after which it must
// exit 0 (support/child.h: else the test fails showing the server's stderr).
class McServer {
 public:
  explicit McServer(std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        FABKV_SERVER_BIN, "--listen", "127.0.0.1:0", "--memcached", "127.0.0.1:0",
        "--cores",        "-1",       "--log",       "warn"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(argv);
    std::string line;
    if (!child_->proc().read_line(&line, Deadline::after_ms(20000)) || line.rfind("READY ", 0) != 0)
      throw std::runtime_error("fabkv-server did not start: " + line + "\n" +
                               child_->stderr_excerpt());
    address_ = line.substr(6);
    if (!child_->proc().read_line(&line, Deadline::after_ms(20000)) ||
        line.rfind("MEMCACHED ", 0) != 0)
      throw std::runtime_error("fabkv-server did not say where memcached is: " + line);
    const std::string mc = line.substr(10);
    port_ = static_cast<uint16_t>(std::stoi(mc.substr(mc.rfind(':') + 1)));
  }
  ~McServer() { stop(); }
  // SIGKILL (a crash at this instant); it must die of it.
  void kill() {
    const pid_t pid = child_->pid();
    EXPECT_TRUE(child_->kill());
    child_.reset();
    perf::remove_shm_leftovers(pid);
  }
  const std::string& address() const { return address_; }
  uint16_t port() const { return port_; }
  bool running() { return child_ && child_->proc().wait(Deadline::after_ms(0)) < 0; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }
  // SIGTERM; returns the exit status (perf::ChildProcess::wait's; a test failure unless 0
  // within 20 s).
  int stop() {
    if (!child_) return -1;
    child_->proc().kill(SIGTERM);
    EXPECT_TRUE(child_->ends_as(0, 20000)) << "stopped by SIGTERM";
    int rc = child_->proc().wait(Deadline::after_ms(0));
    child_.reset();
    return rc;
  }

 private:
  std::unique_ptr<Child> child_;
  std::string address_;
  uint16_t port_ = 0;
};

// A blocking client socket; reads give up after `timeout_ms` (a test failure, never a hang).
class McConn {
 public:
  // `rcvbuf` > 0: a receive buffer that small (a client that reads slowly or not at all fills
  // it, and then the server's answers wait in the server).
  explicit McConn(uint16_t port, int timeout_ms = 10000, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd_);
      throw std::runtime_error("connect failed");
    }
  }
  ~McConn() {
    if (fd_ >= 0) close(fd_);
  }
  McConn(const McConn&) = delete;
  McConn& operator=(const McConn&) = delete;
  int fd() const { return fd_; }

  bool send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // One line without its "\r\n"; "<closed>" or "<timeout>" when none comes.
  std::string line() {
    for (;;) {
      size_t nl = buf_.find("\r\n");
      if (nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 2);
        return l;
      }
      if (!fill()) return closed_ ? "<closed>" : "<timeout>";
    }
  }
  // Exactly n bytes ("" short when the connection ends).
  std::string bytes(size_t n) {
    while (buf_.size() < n)
      if (!fill()) break;
    std::string b = buf_.substr(0, std::min(n, buf_.size()));
    buf_.erase(0, b.size());
    return b;
  }
  // Sends `c` and returns the first line of the answer.
  std::string cmd(std::string_view c) {
    send(c);
    return line();
  }
  // Did the server close the connection (EOF within the timeout)?
  bool closed_by_peer() {
    while (fill()) {
    }
    return closed_;
  }

 private:
  bool fill() {
    char b[65536];
    ssize_t n = recv(fd_, b, sizeof b, 0);
    if (n > 0) {
      buf_.append(b, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) closed_ = true;
    return false;
  }
  int fd_ = -1;
  std::string buf_;
  bool closed_ = false;
};

}  // namespace fabkv::testing
