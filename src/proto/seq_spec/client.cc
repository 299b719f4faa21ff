// seq-spec's client side: Spec-S0 (Guidelines sec. 4.2; proto/seq_spec/server.cc). A next() is
// one zero-length SEND with immediate data (ImmPrefix: our index and epoch; the high 32 bits:
// our guess of the value's high 32 bits, the high bits of the last value we were handed),
// posted inlined and unsignaled. The answer is a zero-length SEND whose immediate data is the
// value's low 32 bits (the guess was right), or an 8-byte SEND of the whole value (it was
// not: counted as misspeculated, and the guess follows the value). All our requests go to one
// worker (client index mod workers), whose answers come back in request order, so answers are
// matched to requests first in, first out; a request that timed out keeps its place in the
// queue until its answer arrives (or the server is gone), so a late answer never completes a
// newer request. Anything but next is refused (kError, nothing sent).

#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "common/deadline.h"
#include "fabric/error.h"
#include "fabric/isolation.h"
#include "fabric/memory_region.h"
#include "fabric/retry.h"
#include "proto/client_protocol.h"
#include "proto/handshake.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "proto/seq_spec/handshake.h"
#include "proto/server_protocol.h"

namespace fabkv::seq_spec {

namespace {

constexpr size_t kExtraRecvs = 4;

class SeqSpecClient final : public proto::ClientProtocol {
 public:
  SeqSpecClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : host_(host), timeout_ms_(o.timeout_ms) {}

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::seq_spec).name;
  }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    const auto session = rpc::RpcClient::read_layout<proto::SessionLayout>(layout);
    const auto l = rpc::RpcClient::read_layout<SeqSpecLayout>(layout);
    const uint32_t workers = session.workers, queues = l.queues;
    window_ = l.window;
    prefix_.client = session.client;
    prefix_.epoch = session.epoch;
    guess_ = l.high;
    if (window_ == 0 || window_ > 4096) rpc::RpcClient::bad_layout("window out of range");
    if (workers == 0 || queues == 0 || w.fabric_addresses.size() != size_t{workers} * queues)
      rpc::RpcClient::bad_layout("fabric addresses do not match workers x queues");
    ep_ = &host_.endpoint();
    // Every endpoint into the AV: answers may come from any queue of our worker, and on shm a
    // receiver must know a sender.
    std::vector<fabric::PeerAddr> peers;
    for (const auto& a : w.fabric_addresses) peers.push_back(ep_->insert_peer(a));
    peer_ = peers[size_t{prefix_.client % workers} * queues];
    recv_size_ = (fabric::lock_free_capacity(host_.fabric(), 8) + 7) & ~size_t{7};
    const size_t n = window_ + kExtraRecvs;
    rx_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), n * recv_size_,
                                                     fabric::Access::kLocalOnly);
    recv_ctx_ = std::vector<fabric::OpContext>(n);
    Deadline d = Deadline::after_ms(host_.settings().connect_timeout_ms);
    for (size_t i = 0; i < n; ++i) {
      recv_ctx_[i].user = &kRecvMarker;
      recv_ctx_[i].tag = i;
      long ret = post_recv(i, d);
      if (ret != 0) throw fabric::FabricError("fi_recv", ret);
    }
    return Opened::kReady;
  }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kNext) return Status::kError;
    if (!r.key.empty() || !r.value.empty()) return Status::kInvalidKey;
    if (host_.gone()) return Status::kServerGone;
    Deadline d = Deadline::after_ms(timeout_ms_);
    // At most `window` answers owed (those of timed-out requests included): each has a
    // receive buffer.
    while (queue_.size() >= window_) {
      host_.drive();
      if (!host_.alive()) return Status::kServerGone;
      if (d.expired()) return Status::kTimeout;
    }
    fabric::PostOptions po;
    po.inlined = true;  // nothing to copy: fi_injectdata, no completion
    po.signaled = false;
    const uint64_t imm = prefix_.to_imm(guess_);
    long ret = fabric::post_with_retry(
        [&] { return ep_->send_imm(fabric::LocalBuffer{}, imm, peer_, nullptr, po); },
        [&] { host_.drive(); }, d, [&] { return host_.alive(); });
    if (ret != 0) {
      if (host_.gone()) return Status::kServerGone;
      return ret == fabric::kAgain ? Status::kTimeout : Status::kError;
    }
    queue_.push_back(Request{std::move(cb), d.at(), false});
    in_flight_++;
    return Status::kOk;
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    for (fabric::Completion& c : cs) {
      if (c.context == nullptr || c.context->user != &kRecvMarker) continue;
      const size_t i = c.context->tag;
      if (c.error == 125 /* ECANCELED: endpoint closing */) continue;
      if (c.error == 0) {
        uint64_t v = 0;
        bool ok = true;
        if (c.len == 0 && c.has_data) {
          v = (uint64_t{guess_} << 32) | static_cast<uint32_t>(c.data);
          speculated_++;
        } else if (c.len >= 8) {
          std::memcpy(&v, rx_->data() + i * recv_size_, 8);
          if (v != 0) {
            misspeculated_++;
            guess_ = static_cast<uint32_t>(v >> 32);
          }
        } else {
          ok = false;  // not an answer of ours
        }
        if (ok) ran += answer(v);
      }
      post_recv(i, Deadline::after_ms(timeout_ms_));
    }
    return ran;
  }

  size_t expire(bool all) override {
    size_t ran = 0;
    const auto now = Clock::now();
    for (Request& q : queue_) {
      if (q.zombie || (!all && now < q.deadline)) continue;
      q.zombie = true;
      in_flight_--;
      finish(q, all ? Status::kServerGone : Status::kTimeout, 0);
      ran++;
    }
    if (all) queue_.clear();  // the server is gone: no answer will come
    return ran;
  }

  size_t in_flight() const override { return in_flight_; }

  nlohmann::json counters() const override {
    const uint64_t answers = speculated_ + misspeculated_;
    return {{"answers", answers},
            {"speculated", speculated_},
            {"misspeculated", misspeculated_},
            {"misspeculation_rate",
             answers == 0 ? 0.0
                          : static_cast<double>(misspeculated_) / static_cast<double>(answers)}};
  }

 private:
  static inline char kRecvMarker;  // OpContext::user of our receive buffers

  struct Request {
    Callback cb;
    Clock::time_point deadline;
    bool zombie = false;  // its callback ran (timeout); its answer is still owed
  };

  // The oldest request's answer: the value, or 0 when the server could not hand one out.
  size_t answer(uint64_t v) {
    if (queue_.empty()) return 0;  // an answer nobody waits for (cannot happen in order)
    Request q = std::move(queue_.front());
    queue_.pop_front();
    if (q.zombie) return 0;
    in_flight_--;
    finish(q, v == 0 ? Status::kError : Status::kOk, v);
    return 1;
  }
  static void finish(Request& q, Status st, uint64_t v) {
    Callback cb = std::move(q.cb);
    q.cb = nullptr;
    if (cb) cb(st, {}, v);
  }
  long post_recv(size_t i, const Deadline& d) {
    return fabric::post_with_retry(
        [&] { return ep_->recv(rx_->local(i * recv_size_, recv_size_), &recv_ctx_[i]); },
        [&] { host_.reap(); }, d);
  }

  proto::ClientHost& host_;
  const int timeout_ms_;
  fabric::Endpoint* ep_ = nullptr;
  fabric::PeerAddr peer_ = fabric::kNoPeer;
  proto::ImmPrefix prefix_{};
  uint32_t window_ = 0;
  uint32_t guess_ = 0;  // high 32 bits we expect the next value to have
  size_t recv_size_ = 0;
  std::unique_ptr<fabric::RegisteredBuffer> rx_;
  std::vector<fabric::OpContext> recv_ctx_;
  std::deque<Request> queue_;  // requests whose answer is owed, oldest first
  size_t in_flight_ = 0;       // of those, the ones whose callback has not run
  uint64_t speculated_ = 0, misspeculated_ = 0;
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return std::make_unique<SeqSpecClient>(host, options);
}

}  // namespace fabkv::seq_spec
