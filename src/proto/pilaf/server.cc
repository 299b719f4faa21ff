// Pilaf's server side (Pilaf sec. 3): the pilaf engine's table and extents, registered for
// clients to READ (every generation, Pilaf sec. 3.3), and PUT/DELETE (pilaf-vo: everything)
// arriving as messages, served by the shared RPC piece (proto/rpc/server.h) and answered by
// SEND. The layout control request ({"op": "layout"}) tells a client the live generation.

#include <mutex>

#include <fmt/format.h>

#include "fabric/memory_region.h"
#include "proto/handshake.h"
#include "proto/pilaf/handshake.h"
#include "proto/rpc/server.h"
#include "proto/pilaf/engine.h"

namespace fabkv::pilaf {

namespace {

// Where clients READ a worker's engine (its live generation).
struct Regions {
  uint32_t generation = 0;
  uint64_t entries = 0;
  fabric::RemoteRegion table, extents;
};

class PilafServer final : public rpc::RpcServer {
 public:
  explicit PilafServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::pilaf), {.slots = false, .messages = true}) {}

  ~PilafServer() override {
    // Deregister every generation before the engine unmaps its memory.
    mrs_.clear();
  }

  std::unique_ptr<store::Engine> make_engine(const store::EngineOptions& so) override {
    const proto::ServerSettings& o = worker_.settings();
    store::PilafOptions po;
    po.initial_entries = o.pilaf.entries;
    po.initial_extent_bytes = o.pilaf.extents;
    po.retire_grace_ms = o.pilaf.grace_ms;
    auto engine = std::make_unique<store::PilafEngine>(so, po);
    engine_ = engine.get();
    // Every generation's table and extents are registered read-only for clients; a growth
    // registers the new one before the old one is marked retired (Pilaf sec. 3.3).
    store::PilafHooks hooks;
    hooks.on_live = [this](const store::PilafGeneration& g) { live(g); };
    hooks.on_release = [this](const store::PilafGeneration& g) {
      std::erase_if(mrs_, [&](const Mrs& m) { return m.generation == g.generation; });
    };
    engine_->set_hooks(std::move(hooks));
    return engine;
  }

  // Pilaf clients send PUT/DELETE (pilaf-vo: everything) as messages (Pilaf sec. 3.1, 5.1).
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (hello.value("transport", std::string("send")) != "send")
      return fmt::format("{} sends its requests as messages: transport must be send", p.name);
    if (engine_ == nullptr) return "this server does not run the pilaf engine";
    welcome(rpc::Transport::kSend, out);
    Regions r = regions();
    const uint32_t w = worker_.index();
    out->regions.push_back({fmt::format("pilaf.table.{}", w), r.table.addr, r.table.length,
                            r.table.key, static_cast<uint32_t>(r.table.access)});
    out->regions.push_back({fmt::format("pilaf.extents.{}", w), r.extents.addr,
                            r.extents.length, r.extents.key,
                            static_cast<uint32_t>(r.extents.access)});
    proto::add_to_layout<PilafLayout>(&out->layout, w, [&](PilafLayout& l) {
      l.tables.push_back({r.generation, r.entries});
      l.grace_ms = worker_.settings().pilaf.grace_ms;
    });
    return "";
  }

  // A client whose READs found a retired table asks for the live generation and re-maps
  // (Pilaf sec. 3.3, with a control request instead of a reset connection).
  std::optional<nlohmann::json> control(std::string_view op) const override {
    if (op != "layout") return std::nullopt;
    Regions r = regions();
    return nlohmann::json(LiveTable{r.generation, {r.entries}, r.table, r.extents});
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    auto ps = engine_->pilaf_stats();
    Regions r = regions();
    j["pilaf"] = {{"generation", r.generation},
                  {"entries", r.entries},
                  {"extent_bytes", r.extents.length},
                  {"used_entries", ps.used_entries},
                  {"fill", r.entries ? static_cast<double>(ps.used_entries) /
                                           static_cast<double>(r.entries)
                                     : 0.0},
                  {"growths", ps.growths},
                  {"paths", ps.paths},
                  {"moved_keys", ps.moved_keys},
                  {"retired_live", ps.retired_live}};
    return j;
  }

 private:
  struct Mrs {
    uint32_t generation;
    std::unique_ptr<fabric::MemoryRegion> table, extents;
  };

  void live(const store::PilafGeneration& g) {
    Mrs m;
    m.generation = g.generation;
    m.table = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), g.table, g.table_bytes,
                                                     fabric::Access::kRemoteRead);
    m.extents = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), g.extents,
                                                       g.extent_bytes, fabric::Access::kRemoteRead);
    Regions r;
    r.generation = g.generation;
    r.entries = g.entries;
    r.table = m.table->remote();
    r.extents = m.extents->remote();
    mrs_.push_back(std::move(m));
    std::lock_guard lock(mu_);
    current_ = r;
  }

  Regions regions() const {
    std::lock_guard lock(mu_);
    return current_;
  }

  store::PilafEngine* engine_ = nullptr;  // the worker owns it
  std::vector<Mrs> mrs_;                  // every generation still mapped (current last)
  mutable std::mutex mu_;                 // current_ (the control thread reads it)
  Regions current_;
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<PilafServer>(w);
}

}  // namespace fabkv::pilaf
