// fabkv's client library: a key-value client over libfabric that speaks any protocol of
// proto/registry.h (herd by default, HERD sec. 4). docs/client.md has the API tour, an
// example program, the C interface and how a Session drives a protocol.
//
//   auto c = fabkv::Client::connect(options);    // throws fabkv::ClientError
//   c->put("k", "v");                            // blocking: returns a Status
//   c->get_async("k", [](fabkv::Status s, std::string_view v, uint64_t ver) { ... });
//   c->flush();                                  // runs the callbacks of everything in flight
//
// Connect-time failures throw ClientError (with a Status and the reason, the server's own
// message when it rejected us); every data-path call returns a Status and never throws.
// Every wait is bounded by ClientOptions::timeout_ms: a dead server gives kServerGone (its
// control connection closed, or a fabric error completion) or kTimeout, never a hang.
//
// Threading: a Client is NOT thread-safe. It owns one fabric endpoint and its completion
// queue (FI_THREAD_DOMAIN); use it from one thread at a time, one Client per thread for
// parallelism. Only counters() may be called from another thread.
//
// Waiting is busy polling by default (ClientOptions::poll): a sleep and wake-up costs 15-20 us
// on these hosts, more than a whole request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fabric/counters.h"
#include "proto/client_options.h"
#include "proto/registry.h"
#include "proto/status.h"  // Status, to_string(Status), Callback, ClientError

namespace fabkv {

class Client;
class Session;
struct ClientOptions;
namespace proto {
struct ClientTestHooks;  // proto/client_settings.h
}
namespace testing {
// src/client/testing.h: connect with test hooks (fault and clock injection), for tests only.
std::unique_ptr<Client> connect(const ClientOptions& options, const proto::ClientTestHooks& hooks);
}  // namespace testing

struct ClientOptions {
  std::string server = "127.0.0.1:7000";  // control channel HOST:PORT of fabkv-server
  // Access protocol, a name from proto/registry.h (its one-line summaries; docs/ has a page
  // per protocol). An unknown name fails at connect with the list.
  std::string protocol = proto::info(proto::kDefault).name;
  // auto: the server's (docs/client.md, "Provider selection"); shm|tcp|verbs: refused unless
  // it is the server's.
  std::string provider = "auto";
  std::string transport;          // request transport "write"|"send"; "" = the protocol's
                                  // (or the server's --transport, where it may choose)
  std::string secret;             // control-channel shared secret ("" = none)
  int timeout_ms = 2000;          // bound on every data-path wait (per request)
  int connect_timeout_ms = 5000;  // bound on the handshake
  // Bytes of client memory the server may READ large (indirect) requests from. 0 = 1 MiB, and
  // always at least one largest request (the client reconnects once if the server's max_value
  // needs more).
  size_t staging_bytes = 0;
  // Each protocol's own client knobs, declared in its folder and gathered in
  // proto/client_options.h; a protocol reads only its own.
  proto::ClientProtocolOptions protocol_options;
  // How the blocking calls (get, put, del, flush) wait for their answer: "spin" polls without
  // pause (lowest latency, a core while waiting); "adaptive" polls for poll_spin_us, then blocks
  // on the endpoint's wait object and the control connection (tcp: any bytes from the server
  // wake it), or where the provider has none (shm) sleeps, doubling from 50 us up to
  // poll_sleep_us, until the answer or the deadline. docs/client.md, "Waiting".
  std::string poll = "spin";
  int poll_spin_us = 100;
  int poll_sleep_us = 1000;
};

class Client {
 public:
  // value is valid only during the callback. version: get: the item's version, put: the new
  // version, del: 0 (proto/status.h).
  using Callback = fabkv::Callback;

  // Opens the fabric, connects the control channel, learns the layout. Throws ClientError
  // (kServerGone when unreachable or rejected: what() has the server's message; kTimeout;
  // kMalformed for a layout this client cannot use; kError for local fabric failures).
  static std::unique_ptr<Client> connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // ---- blocking calls: return when the response arrives or timeout_ms passes. They also run
  // callbacks of earlier async requests that complete meanwhile.
  Status get(std::string_view key, std::string* value, uint64_t* version = nullptr);
  // expected_version != 0: only if the item still has that version (memcached cas).
  // expire_at: absolute Unix seconds, 0 = never.
  Status put(std::string_view key, std::string_view value, uint64_t expected_version = 0,
             uint32_t expire_at = 0, uint64_t* new_version = nullptr);
  Status del(std::string_view key);

  // A sequencer's next value (a protocol without key-value data, docs/sequencer.md): unique
  // across all clients of the server, increasing for this client. kError from a key-value
  // protocol (nothing sent).
  Status next(uint64_t* value);

  // ---- asynchronous calls: return kOk once posted; the callback then runs exactly once,
  // from poll()/flush()/a blocking call, with the result (or kTimeout/kServerGone). When the
  // key's worker already has W requests in flight they poll until a slot frees (bounded by
  // timeout_ms). Any other return means nothing was sent and the callback will not run.
  // Callbacks may post new async requests; they must not call blocking calls or flush().
  Status get_async(std::string_view key, Callback cb);
  Status put_async(std::string_view key, std::string_view value, Callback cb,
                   uint64_t expected_version = 0, uint32_t expire_at = 0);
  Status del_async(std::string_view key, Callback cb);
  // next(): the callback's `version` is the value.
  Status next_async(Callback cb);

  // Drives progress once: reaps completions, runs callbacks, expires requests past their
  // deadline. Returns the number of callbacks run.
  size_t poll();
  // Waits for every request in flight (each bounded by its own deadline). kOk, or kServerGone
  // when the server went away meanwhile.
  Status flush();
  size_t in_flight() const;

  // ---- for a caller that runs its own event loop (python/fabkv/aio.py): what to wait on
  // between poll()s instead of spinning or sleeping. docs/client.md, "Waiting".
  struct WaitFds {
    // Readable when the provider may have something for us (tcp: any bytes from the server).
    // -1 when there is none: shm has no wait object, and poll "spin" opens none.
    int fabric = -1;
    // The control connection: readable (or hung up) when the server closes it. -1 once closed.
    int control = -1;
    // Readable when answers arrive on an endpoint of the protocol's own (herd's answers by
    // datagram, docs/server.md); -1 when there is none. can_wait() covers it too.
    int answers = -1;
  };
  WaitFds wait_fds() const;
  // True when blocking on wait_fds().fabric is safe now (fi_trywait); false while the provider
  // has completions queued or work to do first (poll() again), and when there is no fabric fd.
  bool can_wait();
  // Ends the requests past their deadline (their callbacks run with kTimeout), or every request
  // with kServerGone once the control connection is closed: what poll() does only every 128
  // rounds. Returns the number of callbacks run.
  size_t expire();

  // Server statistics (control request {"op":"stats"}). Throws ClientError.
  nlohmann::json stats();
  // What the protocol counted on this client (ClientProtocol::counters(); a protocol that
  // READs the server's table counts its GETs, READs, retries and their per-GET means, each
  // protocol's page in docs/ lists them). An empty object when the protocol counts nothing.
  // Owner thread.
  nlohmann::json protocol_counters() const;
  // This client's verb counters (its one endpoint). Safe from any thread.
  fabric::VerbSnapshot counters() const;
  // The layout the server handed us at connect (wire.h's Welcome payload).
  const nlohmann::json& layout() const;
  // Provider actually used, e.g. "shm" or "tcp;ofi_rxm".
  const std::string& provider() const;

 private:
  friend std::unique_ptr<Client> testing::connect(const ClientOptions&,
                                                  const proto::ClientTestHooks&);
  explicit Client(std::unique_ptr<Session> session);
  std::unique_ptr<Session> session_;  // client/session.h
};

}  // namespace fabkv
