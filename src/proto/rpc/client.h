// The client half of the RPC protocols (herd, server-reply, pilaf's PUT/DELETE, pilaf-vo): the
// slot machinery of HERD sec. 4.2 over the wire format in proto/rpc/wire.h.
//
// Per worker w the client keeps W slots. Request seq (1, 2, ..., wrapping as proto/rpc/wire.h
// says) goes to slot seq_slot(seq, W), the slot the worker derives from the same seq; a slot
// is reused only when both its answer and the local completion of its WRITE/SEND have arrived
// (an inlined post is unsignaled and its buffer free at once), so neither the server's slot
// nor our local buffer is overwritten while in use. Requests travel by WRITE into our slots of
// the worker's request region (HERD sec. 4.2) or by SEND (HERD sec. 5.5), as the server's
// layout says; a request larger than a slot is indirect (the worker READs key+value from our
// staging region). Answers arrive as SENDs into multi-recv buffers posted here (herd, pilaf,
// drtm, seq-rpc; "Answers by SEND" below), or wherever the owning protocol finds them, which then
// hands them to answer() (server-reply's ring).
//
// Answers by SEND: kRxBuffers buffers posted FI_MULTI_RECV, each taking answers one after
// another until less than the endpoint's min_multi_recv is left, when the provider releases it
// (fabric::Completion::multi_recv_done) and it is posted again. The minimum must be at least the
// largest answer (fabric/endpoint.h) and is fixed when the endpoint is enabled, before the
// Welcome says how large answers are: min_multi_recv() guesses a default server's, and open()
// asks for a second Hello from an endpoint made with the Welcome's recv_size when that is
// larger. A callback gets a view into a buffer and may poll again (a nested on_recv), so a
// released buffer is posted again only once no running callback holds a view into it.
//
// Used by composition: a protocol (src/proto/<name>/client.cc) owns one RpcClient and
// forwards hello/open/submit/complete/expire to it. Owner thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/client_protocol.h"
#include "proto/rpc/request.h"
#include "proto/rpc/wire.h"

namespace fabkv::rpc {

inline OpCode to_opcode(proto::ClientOp op) {
  switch (op) {
    case proto::ClientOp::kGet: return OpCode::kGet;
    case proto::ClientOp::kPut: return OpCode::kPut;
    case proto::ClientOp::kDel: return OpCode::kDel;
    case proto::ClientOp::kNext: return OpCode::kNext;
  }
  return OpCode::kGet;
}

struct ClientConfig {
  // Worker w's request region is "<requests_region>.<w>" in the Welcome (write transport):
  // "<protocol>.requests", as the server's RPC piece names it (proto/rpc/server.cc).
  const char* requests_region = "";
  // Post receive buffers for answers by SEND. false: the owner finds the answers (answer()).
  bool recv_answers = true;
  // Sends kNext requests (a sequencer, proto/seq_rpc/): no key; all of this client's go to
  // one worker (client index mod workers), so that its values increase in request order.
  // Without it kNext is refused with kError.
  bool next = false;
};

class RpcClient {
 public:
  RpcClient(proto::ClientHost& host, const ClientConfig& config);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Registers the staging region (indirect requests) and announces it as "region".
  void hello(nlohmann::json* payload);
  // What ClientProtocol::min_multi_recv() asks the session for: with answers by SEND, the
  // largest answer a server with the default max_value sends, or the larger one the last
  // Welcome announced; 0 without (recv_answers false).
  size_t min_multi_recv() const;
  // Checks the layout's RPC part and sets up slots, buffers and receives. kHelloAgain when
  // the staging region cannot hold the server's largest request, or the endpoint's
  // min_multi_recv the largest answer (answers by SEND). Throws ClientError.
  proto::ClientProtocol::Opened open(const control::Welcome& w, const nlohmann::json& layout);
  // The Welcome's region called `name`; throws ClientError(kMalformed) when there is none.
  static fabric::RemoteRegion region_of(const control::Welcome& w, const std::string& name);
  [[noreturn]] static void bad_layout(const std::string& why);
  // A part of the handshake layout (proto/handshake.h); one the server's layout does not
  // have, or has with keys of other types, is bad_layout().
  template <class Part>
  static Part read_layout(const nlohmann::json& layout) {
    try {
      return layout.get<Part>();
    } catch (const nlohmann::json::exception& e) {
      bad_layout(e.what());
    }
  }

  // Validates, waits (bounded by timeout_ms) for the key's worker to have a free slot and
  // the staging bytes, encodes and posts. kOk: the callback runs exactly once.
  Status submit(const proto::ClientRequest& r, Callback&& cb);
  // Would submit() find worker w's next slot free at once? For a caller that must not wait
  // for one (hydradb sends the GET after a stale READ only then, docs/hydradb.md): an inline
  // request to w then waits for nothing but the provider's queue.
  bool slot_free(uint32_t w) const {
    return w < workers_.size() &&
           workers_[w].slots[seq_slot(next_seq(workers_[w].last_seq, window_), window_)].free();
  }
  // Ours: the context of a request's WRITE/SEND or of a receive buffer.
  bool owns(const fabric::OpContext* ctx) const {
    return ctx != nullptr && (ctx->user == &kTxMarker || ctx->user == &kRecvMarker);
  }
  // One of our completions (owns()). Returns callbacks run.
  size_t complete(fabric::Completion& c);
  // Every completion of a batch that is ours (for a protocol whose only posts are the RPC's).
  size_t complete(std::span<fabric::Completion> cs) {
    size_t ran = 0;
    for (fabric::Completion& c : cs)
      if (owns(c.context)) ran += complete(c);
    return ran;
  }
  // An answer found by the owner: completes the slot of (h.worker, h.seq, h.op; any op for a
  // kMalformed answer with op kOpUnknown, wire.h) if this incarnation of our index asked for
  // it. `value` must stay valid during the callback and must not be reusable by a request the
  // callback posts. Returns callbacks run.
  // What answer() made of an answer: it ran its request's callback; it was the late answer of
  // a request given up on (a timeout); no request of ours waits for it (a duplicate, or later
  // still); or it names another client, incarnation or worker (not ours at all).
  enum class Fate : uint8_t { kRan, kLate, kUnmatched, kForeign };
  size_t answer(const ResponseHeader& h, std::string_view value, Fate* fate = nullptr);
  // Answers arrive elsewhere (herd's datagram endpoint, proto/herd/dgram.h): open() posts no
  // receive buffers. Before open().
  void set_recv_answers(bool on) { config_.recv_answers = on; }
  // The bound on one attempt, where the owner retries (herd by datagram): requests expire
  // after `ms` instead of the client's timeout. After open().
  void set_attempt_timeout_ms(int ms) { timeout_ms_ = ms; }
  size_t expire(bool all);
  size_t in_flight() const { return in_flight_; }

  // For the owner's own lookups (pilaf's READs, server-reply's ring).
  uint32_t workers() const { return n_workers_; }
  uint32_t window() const { return window_; }
  size_t max_value() const { return max_value_; }
  uint16_t client() const { return client_; }
  uint16_t epoch() const { return epoch_; }
  bool send_transport() const { return send_transport_; }
  fabric::PeerAddr peer(uint32_t w) const { return workers_[w].peer; }
  uint32_t worker_of(std::string_view key) const;
  // Calls f(worker, seq) for every slot whose answer may still come (awaited or given up on
  // by a timeout but not yet reclaimed).
  template <class F>
  void for_each_waiting(F&& f) const {
    for (uint32_t w = 0; w < n_workers_; ++w)
      for (const Slot& s : workers_[w].slots)
        if (s.awaiting || s.zombie) f(w, s.seq);
  }
  size_t waiting() const { return in_flight_ + zombies_; }
  // Adds what the RPC client counts to a protocol's counters(): "seq_wraps", the times a
  // worker's sequence number went from its largest value back to 1; with answers by SEND,
  // "rx_reposts" (multi-recv buffers the provider released and that were posted again),
  // "rx_reposts_deferred" (releases that found a running callback holding a view into the
  // buffer, whose repost waited for it) and "rx_min_raised" (Hellos said again because the
  // Welcome's answers were larger than the endpoint's min_multi_recv). All counts of events,
  // as a benchmark takes differences of them.
  void counters(nlohmann::json* out) const;

 private:
  static constexpr size_t kNoStaging = ~size_t{0};
  static inline char kTxMarker, kRecvMarker;  // OpContext::user of our posts
  // Multi-recv buffers for answers by SEND: two, so that one is posted while the other waits
  // for the callbacks reading it.
  static constexpr size_t kRxBuffers = 2;

  struct Slot {
    fabric::OpContext tx_ctx;
    Callback cb;
    uint32_t seq = 0;
    uint8_t op = 0;
    bool awaiting = false;    // answer expected and callback not yet run
    bool zombie = false;      // callback ran (timeout) but the answer may still come
    bool tx_pending = false;  // local WRITE/SEND completion not yet reaped
    Clock::time_point deadline{};
    size_t staging_off = kNoStaging;
    bool free() const { return !awaiting && !zombie && !tx_pending; }
  };
  struct Worker {
    fabric::PeerAddr peer = fabric::kNoPeer;  // request endpoint (w*k)
    fabric::RemoteRegion region;              // <requests_region>.<w>
    uint32_t last_seq = 0;                    // the seq of the last request posted (0: none yet)
    std::vector<Slot> slots;
  };
  class StagingArena;
  struct RxBuffer {
    fabric::OpContext ctx;  // tag: its index
    uint32_t views = 0;     // callbacks running with a view into it (nested ones: several)
    bool released = false;  // the provider gave it back; not posted again yet
  };
  class ViewGuard;

  // How a request travels (HERD sec. 4.2, 5.5): inline in its slot; indirect (the slot holds
  // where in our staging region the worker READs key and value); or, by SEND and larger than
  // a slot, built whole in staging.
  enum class Carriage { kInline, kIndirect, kStagedSend };

  void parse(const control::Welcome& w, const nlohmann::json& layout);
  // submit()'s steps, in order.
  Status route(const proto::ClientRequest& r, uint32_t* w) const;
  Carriage carriage(size_t body) const;
  Status wait_for_slot(const Worker& wk, size_t staging_len, const Deadline& d, uint32_t* si,
                       size_t* off);
  fabric::LocalBuffer encode(uint32_t w, uint32_t si, Carriage how, const RequestFields& f,
                             const proto::ClientRequest& r, size_t off);
  Status post(uint32_t w, uint32_t si, const fabric::LocalBuffer& src, Callback&& cb,
              const Deadline& d);
  void open_receive_buffers();
  size_t on_recv(fabric::Completion& c);
  size_t on_answer(RxBuffer& rb, const fabric::Completion& c);
  void repost_released();
  size_t on_tx(fabric::Completion& c);
  void release_staging(Slot& s);
  void set_zombie(Slot& s, bool z);
  static void finish(Slot& s, Status st, std::string_view value, uint64_t version);
  size_t tx_offset(uint32_t w, uint32_t s) const { return (size_t{w} * window_ + s) * tx_stride_; }

  proto::ClientHost& host_;
  ClientConfig config_;
  fabric::Endpoint* ep_ = nullptr;  // host_.endpoint() as of open()
  size_t staging_bytes_ = 0;        // what the next hello() registers
  std::unique_ptr<fabric::RegisteredBuffer> staging_buf_, tx_;
  std::unique_ptr<fabric::RegisteredBuffer> rx_;  // kRxBuffers multi-recv buffers of rx_per_
  std::unique_ptr<StagingArena> staging_;
  fabric::RemoteRegion staging_remote_;

  uint16_t client_ = 0, epoch_ = 0;
  uint32_t n_workers_ = 0, window_ = 0, slot_size_ = 0, queues_ = 1;
  size_t max_value_ = 0, recv_size_ = 0;
  size_t rx_min_ = 0;     // min_multi_recv() learnt from a Welcome (0: none yet, the guess)
  size_t rx_per_ = 0;     // bytes per multi-recv buffer
  size_t tx_stride_ = 0;  // bytes per request slot in `tx_` (room for lock-free padding)
  bool send_transport_ = false;
  int timeout_ms_ = 2000;
  uint32_t first_seq_ = 0;                       // ClientTestHooks::first_seq (TEST ONLY)
  uint64_t garbage_request_ = 0, requests_ = 0;  // ClientTestHooks::garbage_request (TEST ONLY)
  uint64_t seq_wraps_ = 0;
  uint64_t rx_reposts_ = 0, rx_deferred_ = 0, rx_min_raised_ = 0;
  size_t rx_released_ = 0;  // buffers released and not yet posted again

  std::vector<Worker> workers_;
  std::vector<RxBuffer> rx_bufs_;  // never resized after open(): contexts stay put
  size_t in_flight_ = 0;           // slots awaiting an answer
  size_t zombies_ = 0;             // slots given up on whose answer may still come
};

}  // namespace fabkv::rpc
