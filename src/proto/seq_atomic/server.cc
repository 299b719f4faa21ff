// seq-atomic's server side: the sequencer as one 8-byte counter in server memory that every
// client fetch-and-adds (Guidelines sec. 4.2: "an atomics-based sequencer", 2.24 Mrps on
// Connect-IB, 50x slower than Spec-S0, because the NIC serializes atomics on one address).
// Worker 0 registers the counter (Access::kRemoteReadWrite) and announces it as
// "seq-atomic.counter"; the other workers serve nothing. The server posts nothing: on shm and
// tcp an atomic is applied only when the target reads its completion queue (docs/fabric.md),
// which the worker does every round; each round worker 0 also looks at the counter and keeps
// the persisted high-water mark half a block ahead of it (proto/seq/counter.h). Between two
// looks the counter moves by at most the atomics in flight (max_clients x window on shm and
// tcp, where the worker's own polling applies them; on a NIC a few per microsecond), far below
// half a block, so no value at or above the mark is ever handed out. Values start at the
// persisted mark, so a restart never repeats one.

#include <atomic>
#include <memory>

#include "common/log.h"
#include "fabric/memory_region.h"
#include "proto/seq/counter.h"
#include "proto/seq_atomic/handshake.h"
#include "proto/server_protocol.h"
#include "store/stats.h"

namespace fabkv::seq_atomic {

namespace {

class SeqAtomicServer final : public proto::ServerProtocol {
 public:
  explicit SeqAtomicServer(proto::ServerHost& w)
      : worker_(w), counter_(seq::Counter::open(w.settings().data_dir)) {}

  void open() override {
    if (worker_.index() != 0) return;
    // A cache line of its own: nothing else shares the line the clients' atomics hit.
    mem_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(), 64,
                                                      fabric::Access::kRemoteReadWrite);
    std::atomic_ref<uint64_t>(*value_ptr()).store(counter_->start(), std::memory_order_release);
    if (!counter_->ensure_ahead(counter_->start()))
      throw std::runtime_error("seq-atomic: cannot persist the high-water mark in " +
                               worker_.settings().data_dir);
  }

  std::string admit(const proto::Info&, const nlohmann::json&, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    out->layout.update(nlohmann::json(SeqAtomicLayout{worker_.settings().rpc.window}));
    if (worker_.index() != 0) return "";
    fabric::RemoteRegion r = mem_->remote();
    out->regions.push_back({"seq-atomic.counter", r.addr, 8, r.key,
                            static_cast<uint32_t>(r.access)});
    return "";
  }

  nlohmann::json stats() const override {
    if (worker_.index() != 0) return nlohmann::json::object();
    return {{"sequence",
             {{"start", counter_->start()},
              {"counter", std::atomic_ref<uint64_t>(*value_ptr()).load(std::memory_order_relaxed)},
              {"mark", counter_->mark()},
              {"block", seq::Counter::kBlock},
              {"reservations", counter_->reservations()},
              {"persist_errors", counter_->errors()}}}};
  }

  void add_client_st(uint32_t, uint16_t, const proto::Info&, const nlohmann::json&) override {}
  void remove_client_st(uint32_t) override {}

  // The worker read its completion queues this round (applying the atomics that were
  // waiting); keep the mark ahead of what they made of the counter.
  void poll_st() override {
    if (!mem_) return;
    const uint64_t v = std::atomic_ref<uint64_t>(*value_ptr()).load(std::memory_order_acquire);
    if (v + seq::Counter::kBlock / 2 > counter_->mark() && !counter_->ensure_ahead(v))
      spdlog::error("seq-atomic: cannot persist the high-water mark in {}",
                    worker_.settings().data_dir);
  }

  // Clients' atomics land in memory and (on shm) raise no completion at the server: an
  // adaptive worker must keep polling so that they are applied (docs/fabric.md).
  bool scans_memory() const override { return mem_ != nullptr; }

 private:
  uint64_t* value_ptr() const { return reinterpret_cast<uint64_t*>(mem_->data()); }

  proto::ServerHost& worker_;
  const std::shared_ptr<seq::Counter> counter_;
  std::unique_ptr<fabric::RegisteredBuffer> mem_;  // worker 0: the counter
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<SeqAtomicServer>(w);
}

}  // namespace fabkv::seq_atomic
