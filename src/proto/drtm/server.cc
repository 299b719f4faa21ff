// DrTM-KV's server side (survey sec. 3.5; Guidelines sec. 4.3.2): the drtm engine's table,
// registered read-only for clients, and its items, registered for READ, WRITE and atomics, so
// that GETs and PUTs of existing keys bypass the worker. What needs the worker comes as RPC
// messages (proto/rpc/server.h), answered by SEND: a PUT of a new key (the worker allocates
// the item), a PUT that cannot go by CAS (the value outgrew the item, or the lock stayed held
// past the lease: docs/drtm.md), DELETE, and GETs of items with an expiry (judged by the
// worker's clock).
//
// On shm and tcp the worker applies the clients' atomics itself, inside its completion-queue
// polls (docs/fabric.md); the engine relies on that only for speed, never for correctness: its
// own changes of lock words are compare-and-swaps (proto/drtm/engine.h).

#include <fmt/format.h>

#include <stdexcept>

#include "fabric/memory_region.h"
#include "proto/drtm/atomics.h"
#include "proto/drtm/engine.h"
#include "proto/drtm/handshake.h"
#include "proto/handshake.h"
#include "proto/json.h"
#include "proto/rpc/server.h"

namespace fabkv::drtm {

namespace {

class DrtmServer final : public rpc::RpcServer {
 public:
  explicit DrtmServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::drtm), {.slots = false, .messages = true}) {}

  ~DrtmServer() override {
    // Deregister before the engine unmaps the memory.
    table_mr_.reset();
    items_mr_.reset();
  }

  void open() override {
    // Lock words need atomics that are atomic with the worker's own (atomics.h): refused at
    // set-up, with the reason, where that is not known.
    std::string device;
    const AtomicScope scope = device_atomic_scope(worker_.fabric(), &device);
    if (std::string why = atomics_refusal(worker_.fabric().provider_name(), device, scope);
        !why.empty())
      throw std::runtime_error(why);
    // The worker runs the drtm engine (proto/registry.h) when drtm is served.
    engine_ = dynamic_cast<Engine*>(worker_.engine_st());
    if (engine_ != nullptr) {
      const Regions& r = engine_->regions();
      table_mr_ = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), r.table, r.table_bytes,
                                                         fabric::Access::kRemoteRead);
      // Atomics need read and write (docs/fabric.md).
      items_mr_ = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), r.items, r.items_bytes,
                                                         fabric::Access::kRemoteReadWrite);
    }
    RpcServer::open();
  }

  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    // What needs the worker travels as messages.
    if (std::string why = rpc::check_transport(hello, p.name, rpc::Transport::kSend, true);
        !why.empty())
      return why;
    if (engine_ == nullptr) return "this server does not run the drtm engine";
    welcome(rpc::Transport::kSend, out);
    const uint32_t w = worker_.index();
    const fabric::RemoteRegion t = table_mr_->remote(), i = items_mr_->remote();
    out->regions.push_back({fmt::format("drtm.table.{}", w), t.addr, t.length, t.key,
                            static_cast<uint32_t>(t.access)});
    out->regions.push_back({fmt::format("drtm.items.{}", w), i.addr, i.length, i.key,
                            static_cast<uint32_t>(i.access)});
    const drtm::Regions& r = engine_->regions();
    proto::add_to_layout<DrtmLayout>(&out->layout, w, [&](DrtmLayout& l) {
      l.drtm.push_back({r.main_buckets, r.overflow_buckets});
      l.drtm_layout = kLayoutVersion;
    });
    return "";
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    const drtm::Engine::DrtmStats s = engine_->drtm_stats();
    j["drtm"] = {{"in_place", s.in_place},
                 {"superseded", s.superseded},
                 {"locked_seen", s.locked_seen},
                 {"retired_live", s.retired_live},
                 {"overflow_used", s.overflow_used},
                 {"torn_gets", s.torn_gets},
                 {"own_cas_failures", s.own_cas_failures}};
    return j;
  }

 private:
  drtm::Engine* engine_ = nullptr;  // the worker owns it
  std::unique_ptr<fabric::MemoryRegion> table_mr_, items_mr_;
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<DrtmServer>(w);
}

}  // namespace fabkv::drtm
