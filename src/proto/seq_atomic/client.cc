// seq-atomic's client side: each next() is one remote fetch-and-add of 1 on the server's
// counter ("seq-atomic.counter", worker 0; proto/seq_atomic/server.cc); the value is what the
// counter held before the add. Up to `window` (the server's rpc.window) adds in flight, each
// with its own 8-byte result buffer; a slot whose request timed out is reused only once its
// completion has arrived (or the server is gone), so a late result never lands in a newer
// request's buffer. Anything but next is refused (kError, nothing sent).

#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/deadline.h"
#include "fabric/memory_region.h"
#include "fabric/retry.h"
#include "proto/client_protocol.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "proto/seq_atomic/handshake.h"

namespace fabkv::seq_atomic {

namespace {

class SeqAtomicClient final : public proto::ClientProtocol {
 public:
  SeqAtomicClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : host_(host), timeout_ms_(o.timeout_ms) {}

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::seq_atomic).name;
  }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    window_ = rpc::RpcClient::read_layout<SeqAtomicLayout>(layout).window;
    if (window_ == 0 || window_ > 4096) rpc::RpcClient::bad_layout("window out of range");
    if (w.fabric_addresses.empty()) rpc::RpcClient::bad_layout("no fabric address");
    counter_ = rpc::RpcClient::region_of(w, "seq-atomic.counter");
    if (counter_.length < 8) rpc::RpcClient::bad_layout("seq-atomic.counter under 8 bytes");
    ep_ = &host_.endpoint();
    peer_ = ep_->insert_peer(w.fabric_addresses[0]);  // worker 0's endpoint for us
    // [0, 8): the operand 1; then one result per slot.
    mem_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), 8 * (size_t{window_} + 1),
                                                      fabric::Access::kLocalOnly);
    const uint64_t one = 1;
    std::memcpy(mem_->data(), &one, 8);
    slots_ = std::vector<Slot>(window_);
    for (uint32_t i = 0; i < window_; ++i) {
      slots_[i].ctx.user = &kMarker;
      slots_[i].ctx.tag = i;
    }
    return Opened::kReady;
  }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kNext) return Status::kError;
    if (!r.key.empty() || !r.value.empty()) return Status::kInvalidKey;
    if (host_.gone()) return Status::kServerGone;
    Deadline d = Deadline::after_ms(timeout_ms_);
    // The next slot in turn, once free: a client's adds are posted (and, on one endpoint to
    // one target, applied) in order, so its values increase in request order.
    Slot* s = &slots_[next_ % window_];
    while (!s->free()) {
      host_.drive();
      if (!host_.alive()) return Status::kServerGone;
      if (d.expired()) return Status::kTimeout;
    }
    next_++;
    const size_t i = static_cast<size_t>(s - slots_.data());
    s->cb = std::move(cb);
    s->awaiting = true;
    s->posted = true;
    s->deadline = Clock::time_point::max();  // not expirable until posted
    in_flight_++;
    long ret = fabric::post_with_retry(
        [&] {
          return ep_->fetch_add(mem_->local(0, 8), mem_->local(8 * (i + 1), 8), peer_,
                                counter_.at(0), counter_.key, &s->ctx);
        },
        [&] { host_.drive(); }, d, [&] { return host_.alive(); });
    if (ret == 0) {
      s->deadline = d.at();
      return Status::kOk;
    }
    if (s->awaiting) in_flight_--;
    s->awaiting = false;
    s->posted = false;
    s->cb = nullptr;
    if (host_.gone()) return Status::kServerGone;
    return ret == fabric::kAgain ? Status::kTimeout : Status::kError;
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    for (fabric::Completion& c : cs) {
      if (c.context == nullptr || c.context->user != &kMarker) continue;
      Slot& s = slots_[c.context->tag];
      s.posted = false;
      if (!s.awaiting) continue;  // timed out before: its value is lost, never handed out
      s.awaiting = false;
      in_flight_--;
      if (c.error != 0) {
        host_.alive(true);
        finish(s, host_.gone() ? Status::kServerGone : Status::kError, 0);
      } else {
        uint64_t v;
        std::memcpy(&v, mem_->data() + 8 * (c.context->tag + 1), 8);
        finish(s, Status::kOk, v);
      }
      ran++;
    }
    return ran;
  }

  size_t expire(bool all) override {
    size_t ran = 0;
    const auto now = Clock::now();
    for (Slot& s : slots_) {
      if (all) s.posted = false;  // the server is gone: no completion will come
      if (!s.awaiting || (!all && now < s.deadline)) continue;
      s.awaiting = false;
      in_flight_--;
      finish(s, all ? Status::kServerGone : Status::kTimeout, 0);
      ran++;
    }
    return ran;
  }

  size_t in_flight() const override { return in_flight_; }

 private:
  static inline char kMarker;  // OpContext::user of our adds

  struct Slot {
    fabric::OpContext ctx;
    Callback cb;
    bool awaiting = false;  // callback not yet run
    bool posted = false;    // its completion not yet reaped (the result buffer is in use)
    Clock::time_point deadline{};
    bool free() const { return !awaiting && !posted; }
  };

  static void finish(Slot& s, Status st, uint64_t value) {
    Callback cb = std::move(s.cb);
    s.cb = nullptr;
    if (cb) cb(st, {}, value);
  }

  proto::ClientHost& host_;
  const int timeout_ms_;
  fabric::Endpoint* ep_ = nullptr;
  fabric::PeerAddr peer_ = fabric::kNoPeer;
  fabric::RemoteRegion counter_;
  std::unique_ptr<fabric::RegisteredBuffer> mem_;
  std::vector<Slot> slots_;
  uint32_t window_ = 0;
  uint64_t next_ = 0;
  size_t in_flight_ = 0;
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return std::make_unique<SeqAtomicClient>(host, options);
}

}  // namespace fabkv::seq_atomic
