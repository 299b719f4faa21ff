// Pilaf's server side (Pilaf sec. 3): the pilaf engine's table and extents, registered for
// clients to READ (every generation, Pilaf sec. 3.3), and PUT/DELETE (pilaf-vo: everything)
// arriving as messages, served by the shared RPC piece (proto/rpc/server.h) and answered by
// SEND. The layout control request ({"op": "layout"}) tells a client the live generation.

#include "proto/rpc/server.h"

#include <fmt/format.h>

#include "fabric/memory_region.h"
#include "proto/handshake.h"
#include "proto/pilaf/engine.h"
#include "proto/pilaf/handshake.h"
#include "proto/read_table/registrations.h"
#include "proto/rpc/server.h"

namespace fabkv::pilaf {

namespace {

class PilafServer final : public rpc::RpcServer {
 public:
  explicit PilafServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::pilaf), {.slots = false, .messages = true}),
        tables_(w.fabric()) {}

  void open() override {
    // The worker runs the pilaf engine (proto/registry.h) when a pilaf protocol is served.
    engine_ = dynamic_cast<Engine*>(worker_.engine_st());
    // Every generation's table and extents are registered read-only for clients.
    if (engine_ != nullptr) engine_->set_hooks(tables_.hooks());
    RpcServer::open();
  }

  // Pilaf clients send PUT/DELETE (pilaf-vo: everything) as messages (Pilaf sec. 3.1, 5.1).
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (std::string why = rpc::check_transport(hello, p.name, rpc::Transport::kSend, true);
        !why.empty())
      return why;
    if (engine_ == nullptr) return "this server does not run the pilaf engine";
    welcome(rpc::Transport::kSend, out);
    tables_.add_regions("pilaf", worker_.index(), &out->regions);
    const Generation g = tables_.live().info;
    proto::add_to_layout<PilafLayout>(&out->layout, worker_.index(), [&](PilafLayout& l) {
      l.tables.push_back({g.generation, g.entries});
      l.grace_ms = worker_.settings().pilaf.grace_ms;
    });
    return "";
  }

  // A client whose READs found a retired table asks for the live generation and re-maps
  // (Pilaf sec. 3.3, with a control request instead of a reset connection).
  std::optional<nlohmann::json> control(std::string_view op) const override {
    if (op != "layout") return std::nullopt;
    const auto r = tables_.live();
    return nlohmann::json(LiveTable{r.info.generation, {r.info.entries}, r.table, r.extents});
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    auto ps = engine_->pilaf_stats();
    const auto r = tables_.live();
    j["pilaf"] = {{"generation", r.info.generation},
                  {"entries", r.info.entries},
                  {"extent_bytes", r.extents.length},
                  {"used_entries", ps.used_entries},
                  {"fill", r.info.entries ? static_cast<double>(ps.used_entries) /
                                                static_cast<double>(r.info.entries)
                                          : 0.0},
                  {"growths", ps.growths},
                  {"paths", ps.paths},
                  {"moved_keys", ps.moved_keys},
                  {"retired_live", ps.retired_live}};
    return j;
  }

 private:
  Engine* engine_ = nullptr;                      // the worker owns it
  read_table::Registrations<Generation> tables_;  // before the engine unmaps them
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<PilafServer>(w);
}

}  // namespace fabkv::pilaf
