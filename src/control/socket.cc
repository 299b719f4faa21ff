#include "control/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fabkv::control::detail {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int err) {
  char buf[128];
  // GNU strerror_r returns the message pointer (may not use buf).
  const char* msg = strerror_r(err, buf, sizeof buf);
  return msg;
}

std::string format_host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string unbracket(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return format_host_port(host, port);
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error("control: fcntl(O_NONBLOCK): " + errno_text(errno));
}

void set_nodelay(int fd) {
  // Handshake frames are small request/response pairs; Nagle would add up to 40 ms.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

int poll_ms(const Deadline& d) {
  auto ms = d.remaining().count();
  if (ms > 60'000) ms = 60'000;  // re-check periodically; Deadline::never() is huge
  // Round up so a sub-millisecond remainder does not spin with timeout 0.
  return static_cast<int>(ms) + 1;
}

// Waits for `events` on fd; false when the deadline passed first.
bool wait_for(int fd, short events, const Deadline& deadline, int* err) {
  *err = 0;
  for (;;) {
    if (deadline.expired()) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, poll_ms(deadline));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      *err = errno;
      return true;
    }
  }
}

}  // namespace

Fd connect_tcp(const std::string& host_in, uint16_t port, const Deadline& deadline,
               std::string* error, bool* timed_out) {
  *timed_out = false;
  std::string host = unbracket(host_in);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  // getaddrinfo has no timeout; numeric hosts (the normal case) resolve without I/O.
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "cannot resolve " + host + ": " + gai_strerror(rc);
    return Fd();
  }
  std::string last = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last = "socket: " + errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = errno_text(errno);
        continue;
      }
      int perr = 0;
      if (!wait_for(fd.get(), POLLOUT, deadline, &perr)) {
        *timed_out = true;
        last = "connect timed out";
        break;
      }
      int soerr = perr;
      socklen_t len = sizeof soerr;
      if (soerr == 0) getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
      if (soerr != 0) {
        last = errno_text(soerr);
        continue;
      }
    }
    set_nodelay(fd.get());
    freeaddrinfo(res);
    return fd;
  }
  freeaddrinfo(res);
  *error = "cannot connect to " + format_host_port(host, port) + ": " + last;
  return Fd();
}

IoResult send_all(int fd, std::span<const uint8_t> data, const Deadline& deadline) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int err = 0;
      if (!wait_for(fd, POLLOUT, deadline, &err)) return {IoStatus::kTimeout, "send timed out"};
      if (err) return {IoStatus::kError, errno_text(err)};
      continue;
    }
    int err = errno;
    if (err == EPIPE || err == ECONNRESET)
      return {IoStatus::kClosed, "peer closed the connection (" + errno_text(err) + ")"};
    return {IoStatus::kError, errno_text(err)};
  }
  return {IoStatus::kOk, {}};
}

IoResult recv_exact(int fd, std::span<uint8_t> out, const Deadline& deadline) {
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::recv(fd, out.data() + off, out.size() - off, 0);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return {IoStatus::kClosed, "peer closed the connection"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int err = 0;
      if (!wait_for(fd, POLLIN, deadline, &err)) return {IoStatus::kTimeout, "receive timed out"};
      if (err) return {IoStatus::kError, errno_text(err)};
      continue;
    }
    int err = errno;
    if (err == ECONNRESET)
      return {IoStatus::kClosed, "peer reset the connection (" + errno_text(err) + ")"};
    return {IoStatus::kError, errno_text(err)};
  }
  return {IoStatus::kOk, {}};
}

}  // namespace fabkv::control::detail
