// seq-spec's server side: Spec-S0, the Guidelines' fastest sequencer (sec. 4.2, Table 3:
// 122 Mrps on Connect-IB): header-only SENDs both ways (sec. 3). A request is a zero-length
// SEND whose immediate data names the client (low 32 bits, proto::ImmPrefix) and carries the
// client's guess of the next value's high 32 bits (high 32 bits). The worker collects a
// round's requests, claims their values with one atomic add on the shared counter
// (proto/seq/counter.h), and answers each with a zero-length SEND whose immediate data is the
// value's low 32 bits when the guess was right, or with an 8-byte SEND of the whole value
// when it was not (counted: misspeculated). Immediate data is used as 32 bits on the answer,
// as an RDMA NIC carries it; the request uses 64 (the client's identity travels in it on
// shm and tcp, whose CQ data is 8 bytes, /work/shared/design/PROVIDERS.md; on a NIC the
// connection names the client).
//
// An 8-byte answer waits in a per-client ring of 4 x window buffers until it is posted: a
// client that keeps more than its window in flight can only get its own values mixed up,
// never another client's.

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "fabric/isolation.h"
#include "fabric/memory_region.h"
#include "proto/seq/counter.h"
#include "proto/seq_spec/handshake.h"
#include "proto/server_protocol.h"
#include "store/stats.h"

namespace fabkv::seq_spec {

namespace {

using store::add_st;

class SeqSpecServer final : public proto::ServerProtocol {
 public:
  explicit SeqSpecServer(proto::ServerHost& w)
      : worker_(w),
        counter_(seq::Counter::open(w.settings().data_dir)),
        ring_(4 * w.settings().rpc.window),
        stride_((fabric::lock_free_capacity(w.fabric(), 8) + 7) & ~size_t{7}) {}

  void open() override {
    const size_t n = size_t{worker_.settings().max_clients} * ring_;
    tx_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(), n * stride_,
                                                     fabric::Access::kLocalOnly);
    clients_.resize(worker_.settings().max_clients);
  }
  bool wants_messages() const override { return true; }
  // Requests are header-only SENDs (nothing to receive but the immediate data); an answer is
  // the 8-byte value.
  size_t max_answer_bytes(size_t) const override { return 8; }

  std::string admit(const proto::Info&, const nlohmann::json&, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    const proto::ServerSettings& o = worker_.settings();
    // The client matches answers to requests in order: answers sent in turn over several
    // queues (Worker::post_reply_st) could overtake each other.
    if (!worker_.isolated() && o.rpc.queues > 1)
      return "seq-spec matches answers to requests in order: serve it with --queues 1";
    SeqSpecLayout l;
    l.window = o.rpc.window;
    l.queues = worker_.isolated() ? 1u : o.rpc.queues;
    // The client's first guess: the high 32 bits of the value about to be handed out.
    l.high = static_cast<uint32_t>(counter_->peek() >> 32);
    out->layout.update(nlohmann::json(l));
    return "";
  }

  nlohmann::json stats() const override {
    auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return {{"requests", r(requests_)},
            {"nexts", r(requests_)},
            {"misspeculated", r(misspeculated_)},
            {"malformed", r(malformed_)},
            {"next_errors", r(errors_)},
            {"batches", r(batches_)},
            {"sequence",
             {{"start", counter_->start()},
              {"mark", counter_->mark()},
              {"block", seq::Counter::kBlock},
              {"reservations", counter_->reservations()},
              {"persist_errors", counter_->errors()}}}};
  }

  void add_client_st(uint32_t c, uint16_t epoch, const proto::Info&,
                     const nlohmann::json&) override {
    clients_[c] = ClientState{true, epoch, 0};
  }
  void remove_client_st(uint32_t c) override { clients_[c].active = false; }

  bool on_header_only_st(uint32_t c, uint64_t imm) override {
    add_st(requests_);
    pending_.push_back({c, clients_[c].epoch, static_cast<uint32_t>(imm >> 32)});
    return true;
  }
  // A message with a body is no seq-spec request.
  void on_message_st(uint32_t, const char*, size_t) override { add_st(malformed_); }

  bool has_work_st() const override { return !pending_.empty(); }

  // Guidelines sec. 4.2: the round's N requests claim N values with one atomic add.
  void flush_st() override {
    if (pending_.empty()) return;
    add_st(batches_);
    std::erase_if(pending_, [&](const Pending& p) {
      return !clients_[p.client].active || clients_[p.client].epoch != p.epoch;
    });
    if (pending_.empty()) return;
    const uint64_t first = counter_->claim(pending_.size());
    if (first == 0) add_st(errors_);
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Pending& p = pending_[i];
      const uint64_t v = first == 0 ? 0 : first + i;  // 0: the client reports an error
      if (v != 0 && static_cast<uint32_t>(v >> 32) == p.guess) {
        worker_.reply_imm_st(p.client, p.epoch, fabric::LocalBuffer{}, static_cast<uint32_t>(v));
        continue;
      }
      if (v != 0) add_st(misspeculated_);
      ClientState& cs = clients_[p.client];
      const size_t off = (size_t{p.client} * ring_ + cs.next++ % ring_) * stride_;
      std::memcpy(tx_->data() + off, &v, 8);
      worker_.reply_st(p.client, p.epoch, tx_->local(off, 8));
    }
    pending_.clear();
  }

 private:
  struct ClientState {
    bool active = false;
    uint16_t epoch = 0;
    uint64_t next = 0;  // next buffer of its ring
  };
  struct Pending {
    uint32_t client;
    uint16_t epoch;
    uint32_t guess;  // the high 32 bits the client expects
  };

  proto::ServerHost& worker_;
  const std::shared_ptr<seq::Counter> counter_;
  const size_t ring_, stride_;
  std::unique_ptr<fabric::RegisteredBuffer> tx_;  // 8-byte answers, ring_ per client
  std::vector<ClientState> clients_;
  std::vector<Pending> pending_;
  std::atomic<uint64_t> requests_{0}, misspeculated_{0}, malformed_{0}, errors_{0}, batches_{0};
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<SeqSpecServer>(w);
}

}  // namespace fabkv::seq_spec
