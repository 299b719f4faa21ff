// Client side of the control channel: connect, send a Hello, receive the Welcome, then keep
// the TCP connection open (the server treats its closing as the client's death) and
// optionally exchange framed requests. Every call has a deadline.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "control/socket.h"
#include "control/wire.h"

namespace fabkv::control {

// Thrown on rejection (what() carries the server's message), timeout, connection failure or
// a malformed answer. status() is the server's Status, kTimeout for a local deadline, or
// kConnectionFailed for refused/reset/EOF.
class ControlError : public std::runtime_error {
 public:
  ControlError(Status status, const std::string& what, std::string server_provider = {})
      : std::runtime_error(what), status_(status), server_provider_(std::move(server_provider)) {}
  Status status() const { return status_; }
  // The provider field of the server's refusal: a fabkv server names its own there, so that a
  // client on another fabric learns which one to open (docs/control-channel.md, "Welcome").
  // Empty for anything but a refusal, and from servers that do not name it.
  const std::string& server_provider() const { return server_provider_; }

 private:
  Status status_;
  std::string server_provider_;
};

class ControlClient {
 public:
  // Connects to "host:port" / "[v6]:port", sends `hello`, waits for the Welcome. With a
  // `secret`, the Hello says so (hello.auth is set from it) and the client answers the
  // server's challenge with a proof of it (control/auth.h); the secret itself is never sent.
  // The whole handshake shares one deadline of timeout_ms. Throws ControlError.
  static ControlClient connect(const std::string& host_port, const Hello& hello,
                               int timeout_ms = 5000, const std::string& secret = {});
  // Like connect() but sends `first_bytes` verbatim instead of an encoded Hello (and may
  // then stay silent) and reads the server's answer: for tests and protocol probes that
  // need to send a wrong or truncated handshake.
  static ControlClient connect_raw(const std::string& host_port,
                                   std::span<const uint8_t> first_bytes, int timeout_ms = 5000);

  ControlClient(ControlClient&&) noexcept = default;
  ControlClient& operator=(ControlClient&&) noexcept = default;
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  ~ControlClient() = default;  // closes the socket

  const Welcome& welcome() const { return welcome_; }
  uint64_t session_id() const { return welcome_.session_id; }

  // Sends a Request frame and returns the Reply body. Throws ControlError on timeout, EOF,
  // or an Error frame from the server (with the server's status and message). Not
  // thread-safe: one request at a time per client.
  std::vector<uint8_t> request(std::span<const uint8_t> body, int timeout_ms = 5000);
  // False once the server has closed (or reset) the connection, or after close().
  bool alive() const;
  // The connection's socket, for a caller that waits with poll(2): it becomes readable (or
  // hung up) when the server closes it. -1 after close().
  int fd() const { return fd_.get(); }
  void close();

 private:
  ControlClient(detail::Fd fd, Welcome w, std::string peer)
      : fd_(std::move(fd)), welcome_(std::move(w)), peer_(std::move(peer)) {}
  static ControlClient handshake(const std::string& host_port, std::span<const uint8_t> first_bytes,
                                 int timeout_ms, const std::string& secret);

  detail::Fd fd_;
  Welcome welcome_;
  std::string peer_;
};

// Splits "host:port" / "[v6]:port" (port 0..65535, digits only); returns false on garbage,
// including an unbracketed IPv6 literal.
bool split_host_port(const std::string& s, std::string* host, uint16_t* port);

}  // namespace fabkv::control
