// Socket plumbing shared by the control server and client (internal to fabkv_control).
// Every blocking step takes a Deadline; sends use MSG_NOSIGNAL so a vanished peer is an
// error return, never a SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <string>

#include "common/deadline.h"

namespace fabkv::control::detail {

// Owns a file descriptor; closes it once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

std::string errno_text(int err);
// "host:port", with brackets around an IPv6 literal.
std::string format_host_port(const std::string& host, uint16_t port);
// Strips one pair of brackets ("[::1]" -> "::1").
std::string unbracket(const std::string& host);
std::string peer_name(int fd);

void set_nonblocking(int fd);
void set_nodelay(int fd);

enum class IoStatus { kOk, kTimeout, kClosed, kError };
struct IoResult {
  IoStatus status;
  std::string error;  // errno text or "peer closed the connection"
};

// Non-blocking connect to the first address of `host` that answers, within `deadline`.
// Returns an invalid Fd and sets *error on failure (*timed_out when the deadline passed).
Fd connect_tcp(const std::string& host, uint16_t port, const Deadline& deadline, std::string* error,
               bool* timed_out);
// Loops until every byte is sent, the deadline passes or the socket fails.
IoResult send_all(int fd, std::span<const uint8_t> data, const Deadline& deadline);
// Loops until exactly out.size() bytes arrived; kClosed on EOF (even part-way).
IoResult recv_exact(int fd, std::span<uint8_t> out, const Deadline& deadline);

}  // namespace fabkv::control::detail
