// Pilaf's server side (Pilaf sec. 3): the pilaf engine's table and extents, registered for
// clients to READ (every generation, Pilaf sec. 3.3), and PUT/DELETE (pilaf-vo: everything)
// arriving as messages, served by the shared RPC piece (proto/rpc/server.h) and answered by
// SEND. The layout control request ({"op": "layout"}) tells a client the live generation.

#include "proto/rpc/server.h"

#include <fmt/format.h>

#include "proto/json.h"
#include "proto/pilaf/engine.h"
#include "proto/read_table/registrations.h"
#include "server/worker.h"

namespace fabkv::pilaf {

namespace {

class PilafServer final : public rpc::RpcServer {
 public:
  explicit PilafServer(server::Worker& w)
      : RpcServer(w, proto::info(proto::Id::pilaf), config(w)), tables_(w.fabric()) {}

  void open() override {
    // The worker runs the pilaf engine (proto/registry.h) when a pilaf protocol is served.
    engine_ = dynamic_cast<Engine*>(&worker_.engine());
    // Every generation's table and extents are registered read-only for clients.
    if (engine_ != nullptr) engine_->set_hooks(tables_.hooks());
    RpcServer::open();
  }

  // Pilaf clients send PUT/DELETE (pilaf-vo: everything) as messages (Pilaf sec. 3.1, 5.1).
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (hello.value("transport", std::string("send")) != "send")
      return fmt::format("{} sends its requests as messages: transport must be send", p.name);
    if (engine_ == nullptr) return "this server does not run the pilaf engine";
    welcome(rpc::Transport::kSend, out);
    tables_.add_regions("pilaf", worker_.index(), &out->regions);
    const Generation g = tables_.live().info;
    out->layout["pilaf"].push_back({{"generation", g.generation}, {"entries", g.entries}});
    out->layout["pilaf_grace_ms"] = worker_.options().pilaf.grace_ms;
    return "";
  }

  // A client whose READs found a retired table asks for the live generation and re-maps
  // (Pilaf sec. 3.3, with a control request instead of a reset connection).
  std::optional<nlohmann::json> control(std::string_view op) const override {
    if (op != "layout") return std::nullopt;
    const auto r = tables_.live();
    return nlohmann::json{{"generation", r.info.generation},
                          {"entries", r.info.entries},
                          {"table", proto::region_to_json(r.table)},
                          {"extents", proto::region_to_json(r.extents)}};
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
  static Config config(const server::Worker& w) {
    Config c;
    c.slots = false;
    c.messages = true;
    c.answer_bytes = w.recv_size();
    return c;
  }

  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char*, size_t len) override {
    worker_.reply_st(c, epoch, answer_buffer(c, seq, len));
  }

  Engine* engine_ = nullptr;                      // the worker owns it
  read_table::Registrations<Generation> tables_;  // before the engine unmaps them
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(server::Worker& w) {
  return std::make_unique<PilafServer>(w);
}

}  // namespace fabkv::pilaf
