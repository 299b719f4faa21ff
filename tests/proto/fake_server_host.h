// A ServerHost (proto/server_host.h) without a worker: it records the answers a server side
// would post instead of posting them, runs execute_st on a real small cache engine, and
// answers READs as its test says. Memory is registered with a real fabric domain (shm: no
// endpoint, no peer, no completion), so a test reaches a protocol's regions by the virtual
// addresses its Welcome publishes, as a client WRITEs into them.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fabric/error.h"
#include "fabric/fabric.h"
#include "fabric/isolation.h"
#include "proto/rpc/wire.h"
#include "proto/server_host.h"
#include "store/engine.h"

namespace fabkv::proto::testing {

class FakeServerHost final : public ServerHost {
 public:
  // One answer as the server side handed it over.
  struct Reply {
    uint32_t client;
    uint16_t epoch;
    std::string bytes;  // copied at once: the side reuses its answer buffers
    bool write = false;
    uint64_t raddr = 0, rkey = 0;
    bool has_imm = false;
    uint64_t imm = 0;
    rpc::ResponseHeader header() const { return rpc::load<rpc::ResponseHeader>(bytes.data()); }
  };
  struct Read {
    uint32_t client;
    fabric::LocalBuffer dst;
    uint64_t raddr, rkey;
    fabric::OpContext* ctx;
  };

  explicit FakeServerHost(ServerSettings s) : settings_(std::move(s)) {
    fabric::FabricOptions fo;
    fo.provider = "shm";
    fo.quiet = true;
    fabric_ = fabric::Fabric::open(fo);
    recv_size_ = fabric::lock_free_capacity(*fabric_,
                                            sizeof(rpc::ResponseHeader) + settings_.max_value);
    store::EngineOptions eo;
    eo.memory_bytes = size_t{4} << 20;
    eo.max_value_size = settings_.max_value;
    engine_ = store::make_engine(store::EngineKind::kCache, eo);
  }

  uint32_t index() const override { return 0; }
  const ServerSettings& settings() const override { return settings_; }
  fabric::Fabric& fabric() override { return *fabric_; }
  const std::string& provider() const override { return fabric_->provider_name(); }
  bool isolated() const override { return false; }
  size_t recv_size() const override { return recv_size_; }

  bool serving_st(uint32_t, uint16_t) const override { return true; }
  bool dropped_st(uint32_t) const override { return false; }
  store::Engine* engine_st() override { return engine_.get(); }
  void execute_st(std::span<const store::Request> reqs, store::CompletionFn done) override {
    engine_->run_batch(reqs, done);
  }
  uint64_t log_barrier_st(std::string_view) override { return 0; }
  void when_durable_st(uint64_t, std::function<void()> fn) override { fn(); }
  void reply_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src) override {
    replies.push_back({c, epoch, copy(src)});
  }
  void reply_write_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t raddr,
                      uint64_t rkey) override {
    replies.push_back({c, epoch, copy(src), true, raddr, rkey});
  }
  void reply_imm_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t imm) override {
    replies.push_back({c, epoch, copy(src), false, 0, 0, true, imm});
  }
  void send_replies_st() override { sends++; }
  // A READ the side asked for is kept in `reads` (the test completes it), or refused with
  // `read_result` when that is not 0.
  long read_st(uint32_t c, fabric::LocalBuffer dst, uint64_t raddr, uint64_t rkey,
               fabric::OpContext* ctx) override {
    if (read_result != 0) return read_result;
    reads.push_back({c, dst, raddr, rkey, ctx});
    return 0;
  }

  std::deque<Reply> replies;
  std::vector<Read> reads;
  long read_result = 0;
  uint64_t sends = 0;

 private:
  static std::string copy(fabric::LocalBuffer b) {
    return std::string(static_cast<const char*>(b.addr), b.len);
  }

  ServerSettings settings_;
  std::unique_ptr<fabric::Fabric> fabric_;
  size_t recv_size_ = 0;
  std::unique_ptr<store::Engine> engine_;
};

}  // namespace fabkv::proto::testing
