// The client side of an access protocol, as the generic session (src/client/session.h) drives
// it. The session owns what every protocol shares: the fabric, the one endpoint and its
// completion queue, the control channel and its liveness, deadlines, the poll loop and the
// blocking calls built on the async ones. A protocol owns how a request travels and how its
// answer comes back: the memory it registers, what it posts, and the completions (or memory)
// that finish a request. Each protocol's folder defines
//   std::unique_ptr<proto::ClientProtocol> fabkv::<id>::make_client(ClientHost&,
//                                                                    const ClientSettings&)
// and src/client/protocols.cc lists them from proto/registry.h. This header and the two it
// names for Status and ClientSettings are all a protocol sees of the client: nothing under
// src/proto/ includes src/client/.
//
// Fits, on paper:
//   herd, pilaf-vo   submit() encodes into a slot and WRITEs/SENDs it; complete() takes the
//                    RECV of the answer in a multi-recv buffer (src/proto/rpc/client.h does
//                    both).
//   pilaf            submit() of a GET posts READs; complete() runs its state machine; PUT/DEL
//                    as herd by SEND.
//   server-reply     submit() as herd's write transport; polls_memory() and poll() find the
//                    answer WRITten into the client's ring (hello() announces the ring).
//   RF-RPC           as server-reply, but poll() READs the server's response region instead
//                    of watching local memory (READ completions arrive through complete()).
//   DrTM             submit() posts atomics (compare_swap/fetch_add) and READs; PUT by CAS
//                    then WRITE; complete() advances per-op state as pilaf's reader does.
//   FaRM             submit() of a GET is one READ of the key's neighbourhood.
//   sequencers       no engine and no key: submit() with an empty key is the protocol's to
//                    accept (it validates), zero-length SENDs, complete() on the RECV.
//
// Cost on the hot path: one virtual call per submit and one per batch of reaped completions
// (not per completion); poll() is called only when polls_memory() said so at open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.h"
#include "control/wire.h"
#include "fabric/endpoint.h"
#include "fabric/fabric.h"
#include "proto/client_settings.h"
#include "proto/status.h"

namespace fabkv::proto {

// kNext: a sequencer's next value (no key, no value; the callback's version is the value,
// docs/sequencer.md). A key-value protocol refuses it (kError, nothing sent).
enum class ClientOp : uint8_t { kGet, kPut, kDel, kNext };

// One operation as the user asked for it. The views live until submit() returns.
struct ClientRequest {
  ClientOp op = ClientOp::kGet;
  std::string_view key;
  std::string_view value;         // kPut
  uint64_t expected_version = 0;  // kPut: memcached cas, 0 = unconditional
  uint32_t expire_at = 0;         // kPut: absolute Unix seconds, 0 = never
};

// What the session offers its protocol. Everything here is off the hot path except
// endpoint(), which a protocol caches at open().
class ClientHost {
 public:
  virtual fabric::Fabric& fabric() = 0;
  // Valid from hello() on; a new one (a second Hello) before the next hello().
  virtual fabric::Endpoint& endpoint() = 0;
  virtual const ClientSettings& settings() const = 0;
  // Reaps the completion queue once and hands what it found to the protocol's complete()
  // (and runs its poll()). No expiry: for retrying a post in the middle of a request.
  virtual void reap() = 0;
  // What Client::poll() does: reap(), and every so often the liveness check and expiry. For
  // a protocol waiting for a free slot (an expired request frees one).
  virtual void drive() = 0;
  // False once the server is known gone (control connection closed). Checks at most once per
  // millisecond unless `now`; a protocol asks with now = true after an error completion.
  virtual bool alive(bool now = false) = 0;
  // What alive() last found, without asking again: a flag test for the hot path.
  bool gone() const { return gone_; }
  // Waits for an op of a protocol's pool whose `busy` is false, driving the client meanwhile
  // (a completion or an expiry frees one), at most until `deadline`: kOk with *out set,
  // kServerGone or kTimeout.
  template <class Op>
  Status free_op(std::vector<Op>& ops, const Deadline& deadline, Op** out) {
    while (true) {
      for (Op& o : ops)
        if (!o.busy) {
          *out = &o;
          return Status::kOk;
        }
      drive();
      if (!alive()) return Status::kServerGone;
      if (deadline.expired()) return Status::kTimeout;
    }
  }
  // A control request ({"op": ...}) and its JSON reply; throws on failure (and notes a
  // closed control connection). pilaf fetches its layout again so.
  virtual nlohmann::json control_request(const nlohmann::json& request) = 0;

 protected:
  ~ClientHost() = default;
  bool gone_ = false;  // set by the session once the server is known gone
};

class ClientProtocol {
 public:
  virtual ~ClientProtocol() = default;

  // ---- set-up (connect) -----------------------------------------------------------------
  // Fills the Hello payload: {"protocol": name, "transport": ..., regions it exposes}.
  // Registers what it announces. May be called again after open() said kHelloAgain.
  virtual void hello(nlohmann::json* payload) = 0;
  enum class Opened { kReady, kHelloAgain };
  // Learns the layout from the Welcome (`layout` is its parsed payload) and sets up the data
  // path. kHelloAgain: what hello() announced, or the endpoint it was said from, does not fit
  // this server (a region too small for its max_value; an endpoint whose min_multi_recv() is
  // under the server's largest answer); the session closes, opens a new endpoint and says
  // hello() again. Throws ClientError(kMalformed) for an unusable layout.
  virtual Opened open(const control::Welcome& welcome, const nlohmann::json& layout) = 0;
  // FI_OPT_MIN_MULTI_RECV for the session's endpoint (fabric/endpoint.h), asked before each
  // endpoint is made: the provider reads it only when the endpoint is enabled. A protocol that
  // receives its answers in multi-recv buffers asks for its guess of the largest answer and,
  // when open() learns of a larger one, says kHelloAgain to get an endpoint made with that.
  // 0: the provider's default (the protocol posts no multi-recv buffers).
  virtual size_t min_multi_recv() const { return 0; }
  // True when answers arrive in local memory that poll() must look at (set at open()).
  virtual bool polls_memory() const { return false; }
  // An endpoint of the protocol's own, opened waitable, whose completions poll() reaps (herd's
  // datagram answers, proto/herd/dgram.h): a session that blocks when idle wakes for it too.
  // nullptr when none (set at open()).
  virtual fabric::Endpoint* own_endpoint() { return nullptr; }

  // ---- data path ------------------------------------------------------------------------
  // kOk once posted: the callback then runs exactly once. Anything else: nothing was sent,
  // the callback will not run (validation is the protocol's: kInvalidKey, kTooLarge).
  virtual Status submit(const ClientRequest& r, Callback&& cb) = 0;
  // Every completion the session reaped, including those without a context (shm drops a
  // failed READ's), handed over one at a time from the session's batch: a wait inside
  // complete() (a callback posting into a full window) polls again, and those polls go on
  // with the rest of the batch. Better still not to wait here (docs/hydradb.md, "Never wait
  // inside complete()"). Returns callbacks run.
  virtual size_t complete(std::span<fabric::Completion> completions) = 0;
  // Memory-polled answers (polls_memory()). Returns callbacks run.
  virtual size_t poll() { return 0; }
  // Ends requests past their deadline with kTimeout, or every request with kServerGone
  // (all: the server is gone). Returns callbacks run.
  virtual size_t expire(bool all) = 0;
  virtual size_t in_flight() const = 0;
  // What Client::protocol_counters() returns (an empty object when nothing is counted).
  virtual nlohmann::json counters() const { return nlohmann::json::object(); }
};

}  // namespace fabkv::proto
