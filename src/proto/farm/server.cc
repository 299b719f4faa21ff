// farm's and farm-var's server side (HERD sec. 5.1.2; docs/farm.md): the worker's farm engine
// registered for clients to READ (every generation), and PUT/DELETE (GETs too, from a client
// that wants them served) by FaRM's message path: the client WRITEs its request into its slots
// of the worker's request region, the worker polls them, applies the request and WRITEs the
// answer into the client's ring. That path is exactly server-reply's (proto/server_reply/), so
// a FarmServer owns a server-reply server side and forwards the RPC calls to it; it adds the
// engine, the regions and the layout.
//
// farm and farm-var are two server sides of the same class (one engine per server, and their
// buckets differ: values inline, or pointers), so they are never served together
// (src/server/options.cc refuses it).

#include <fmt/format.h>

#include "proto/farm/engine.h"
#include "proto/farm/handshake.h"
#include "proto/handshake.h"
#include "proto/read_table/registrations.h"
#include "proto/server_protocol.h"

namespace fabkv::server_reply {
std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w);  // server_reply/server.cc
}

namespace fabkv::farm {

namespace {

class FarmServer final : public proto::ServerProtocol {
 public:
  explicit FarmServer(proto::ServerHost& w)
      : worker_(w), rpc_(server_reply::make_server(w)), tables_(w.fabric()) {}

  void open() override {
    // The worker runs the farm engine (proto/registry.h; farm/engine.cc's make_engine puts
    // values inline for farm, pointers for farm-var) when farm or farm-var is served.
    engine_ = dynamic_cast<Engine*>(worker_.engine_st());
    // Every generation's table and extents are registered read-only for clients.
    if (engine_ != nullptr) engine_->set_hooks(tables_.hooks());
    rpc_->open();
  }
  bool wants_messages() const override { return rpc_->wants_messages(); }
  size_t max_request_bytes(size_t max_value) const override {
    return rpc_->max_request_bytes(max_value);
  }
  size_t max_answer_bytes(size_t max_value) const override {
    return rpc_->max_answer_bytes(max_value);
  }

  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t client,
                    uint16_t epoch, proto::WelcomeParts* out) override {
    if (engine_ == nullptr) return fmt::format("this server does not run {}'s engine", p.name);
    // The RPC half: requests by WRITE into slots, answers by WRITE into the client's ring.
    std::string why = rpc_->admit(p, hello, client, epoch, out);
    if (!why.empty()) return fmt::format("{}: {}", p.name, why);
    tables_.add_regions("farm", worker_.index(), &out->regions);
    const Generation g = tables_.live().info;
    proto::add_to_layout<FarmLayout>(&out->layout, worker_.index(), [&](FarmLayout& l) {
      l.tables.push_back({g.generation, g.homes, g.bucket_bytes, kNeighbourhood, kLayoutVersion});
      l.grace_ms = worker_.settings().farm.grace_ms;
    });
    return "";
  }

  // A client whose READs met a retired table asks for the live generation and re-maps.
  std::optional<nlohmann::json> control(std::string_view op) const override {
    if (op != "farm-layout") return std::nullopt;
    const auto r = tables_.live();
    return nlohmann::json(
        LiveTable{r.info.generation, {r.info.homes, r.info.bucket_bytes}, r.table, r.extents});
  }

  nlohmann::json stats() const override {
    nlohmann::json j = rpc_->stats();
    if (engine_ == nullptr) return j;
    const auto fs = engine_->farm_stats();
    const auto r = tables_.live();
    const uint64_t buckets = table_buckets(r.info.homes);
    j["farm"] = {{"generation", r.info.generation},
                 {"homes", r.info.homes},
                 {"bucket_bytes", r.info.bucket_bytes},
                 {"inline_bytes", engine_->inline_bytes()},
                 {"pointers_only", engine_->pointers_only()},
                 {"extent_bytes", r.extents.length},
                 {"used_buckets", fs.used_buckets},
                 {"fill", buckets
                              ? static_cast<double>(fs.used_buckets) / static_cast<double>(buckets)
                              : 0.0},
                 {"indirect_items", fs.indirect_items},
                 {"growths", fs.growths},
                 {"displacements", fs.displacements},
                 {"moved_keys", fs.moved_keys},
                 {"retired_live", fs.retired_live}};
    return j;
  }

  void add_client_st(uint32_t c, uint16_t epoch, const proto::Info& p,
                     const nlohmann::json& hello) override {
    rpc_->add_client_st(c, epoch, p, hello);
  }
  void remove_client_st(uint32_t c) override { rpc_->remove_client_st(c); }
  void poll_st() override { rpc_->poll_st(); }
  void on_message_st(uint32_t c, const char* msg, size_t len) override {
    rpc_->on_message_st(c, msg, len);
  }
  void on_completion_st(fabric::Completion& c) override { rpc_->on_completion_st(c); }
  bool has_work_st() const override { return rpc_->has_work_st(); }
  void flush_st() override { rpc_->flush_st(); }
  void tick_st() override { rpc_->tick_st(); }
  bool scans_memory() const override { return rpc_->scans_memory(); }
  bool busy_st() const override { return rpc_->busy_st(); }

 private:
  proto::ServerHost& worker_;
  std::unique_ptr<proto::ServerProtocol> rpc_;    // server-reply's side: the message path
  Engine* engine_ = nullptr;                      // the worker owns it
  read_table::Registrations<Generation> tables_;  // before the engine unmaps them
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<FarmServer>(w);
}

}  // namespace fabkv::farm

namespace fabkv::farm_var {
std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<farm::FarmServer>(w);
}
}  // namespace fabkv::farm_var
