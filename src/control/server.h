// Server side of the control channel: one thread polls the listening socket and every
// connection (non-blocking, per-connection buffers), so a silent or slow peer costs one fd
// and a deadline, never another client's time. See docs/control-channel.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "control/wire.h"

namespace fabkv::control {

struct ControlServerOptions {
  // Address to listen on: an IPv4 or IPv6 literal ("::1" or "[::1]") or a host name.
  std::string host = "127.0.0.1";
  // 0 = ephemeral; read the chosen one with port().
  uint16_t port = 0;
  // Shared secret a client must prove it knows: the server answers its Hello with a random
  // nonce and checks an HMAC-SHA256 keyed by the secret (control/auth.h); the secret never
  // travels. Empty: no secret, and a client that has one is refused (it would believe others
  // are kept out). The data path is not encrypted (docs/control-channel.md, "Security").
  std::string secret;
  // A connection must deliver a complete Hello within this time or it gets kTimeout and is
  // closed. Longer tolerates slower links; shorter frees fds of silent peers sooner.
  int handshake_timeout_ms = 2000;
  // Open connections (handshaking + established) beyond which a newcomer gets kServerBusy.
  // Each costs one fd and a small buffer; keep it under `ulimit -n`.
  size_t max_sessions = 4096;
};

struct ControlServerStats {
  uint64_t accepted = 0;          // TCP connections accepted
  uint64_t handshakes_ok = 0;     // Welcome with kOk sent
  uint64_t rejected_version = 0;  // kBadVersion
  uint64_t rejected_secret = 0;   // kBadSecret: none, a wrong one, or one the server lacks
  uint64_t malformed = 0;         // bad magic, oversize, truncated/garbage body, wrong type
  uint64_t timed_out = 0;         // no complete Hello within handshake_timeout_ms
  uint64_t closed = 0;            // established sessions that ended (on_close fired)
  uint64_t active = 0;            // established sessions open now
  // Added beyond the first API draft:
  uint64_t rejected_busy = 0;        // kServerBusy (max_sessions reached)
  uint64_t rejected_by_handler = 0;  // on_hello returned a non-kOk status
  uint64_t requests = 0;             // request frames answered after the handshake
  uint64_t handshaking = 0;          // connections still waiting for their Hello now
};

class ControlServer {
 public:
  struct Handlers {
    // Called on the server's control thread for a well-formed Hello with the right version
    // whose client has proven the secret (where the server has one). Return a Welcome; a
    // non-kOk status rejects the client (sent, then the connection is closed). The server
    // fills session_id. If it throws, or returns a Welcome over the wire limits, the client
    // gets kRejected. Null = an empty kOk Welcome.
    std::function<Welcome(uint64_t session_id, const Hello&)> on_hello;
    // Optional: a framed request after the handshake; the returned bytes are the reply body.
    // Null (or a throw) answers with an Error frame (kRejected); the session stays open.
    std::function<std::vector<uint8_t>(uint64_t session_id, std::span<const uint8_t>)> on_request;
    // Optional: a session that completed its handshake ended (EOF, reset, protocol error or
    // server stop). Called once per such session, on the control thread.
    std::function<void(uint64_t session_id)> on_close;
  };

  // Binds, listens and starts the control thread. Throws std::runtime_error with the errno
  // text if the address cannot be resolved or bound.
  ControlServer(ControlServerOptions options, Handlers handlers);
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Closes the listener and every connection (on_close fires for established sessions) and
  // joins the thread. Idempotent. From inside a handler it only requests the stop; the
  // destructor or a later stop() from another thread joins.
  void stop();
  uint16_t port() const;
  std::string address() const;       // "host:port" ("[v6]:port")
  ControlServerStats stats() const;  // thread-safe snapshot

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabkv::control
