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

#include <mutex>

#include <fmt/format.h>

#include "fabric/memory_region.h"
#include "proto/farm/engine.h"
#include "proto/farm/handshake.h"
#include "proto/handshake.h"
#include "proto/server_protocol.h"

namespace fabkv::server_reply {
std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w);  // server_reply/server.cc
}

namespace fabkv::farm {

namespace {

// Where clients READ a worker's engine (its live generation).
struct Regions {
  uint32_t generation = 0;
  uint64_t homes = 0;
  size_t bucket_bytes = 0;
  fabric::RemoteRegion table, extents;
};

class FarmServer final : public proto::ServerProtocol {
 public:
  FarmServer(proto::ServerHost& w, proto::Id id)
      : worker_(w), id_(id), rpc_(server_reply::make_server(w)) {}

  ~FarmServer() override {
    mrs_.clear();  // deregister every generation before the engine unmaps its memory
  }

  std::unique_ptr<store::Engine> make_engine(const store::EngineOptions& so) override {
    const proto::ServerSettings& o = worker_.settings();
    store::FarmOptions fo;
    // HERD sec. 5.1.2: FaRM-em inlines the values, FaRM-em-VAR keeps pointers in the buckets.
    fo.inline_bytes = o.farm.inline_bytes;
    fo.pointers_only = id_ == proto::Id::farm_var;
    fo.initial_homes = o.farm.homes;
    fo.initial_extent_bytes = o.farm.extents;
    fo.retire_grace_ms = o.farm.grace_ms;
    auto engine = std::make_unique<store::FarmEngine>(so, fo);
    engine_ = engine.get();
    // Every generation's table and extents are registered read-only for clients; a growth
    // registers the new one before the old one is marked retired.
    store::FarmHooks hooks;
    hooks.on_live = [this](const store::FarmGeneration& g) { live(g); };
    hooks.on_release = [this](const store::FarmGeneration& g) {
      std::erase_if(mrs_, [&](const Mrs& m) { return m.generation == g.generation; });
    };
    engine_->set_hooks(std::move(hooks));
    return engine;
  }

  void open() override { rpc_->open(); }
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
    const Regions r = regions();
    const uint32_t w = worker_.index();
    out->regions.push_back({fmt::format("farm.table.{}", w), r.table.addr, r.table.length,
                            r.table.key, static_cast<uint32_t>(r.table.access)});
    out->regions.push_back({fmt::format("farm.extents.{}", w), r.extents.addr, r.extents.length,
                            r.extents.key, static_cast<uint32_t>(r.extents.access)});
    proto::add_to_layout<FarmLayout>(&out->layout, w, [&](FarmLayout& l) {
      l.tables.push_back({r.generation, r.homes, r.bucket_bytes, kNeighbourhood, kLayoutVersion});
      l.grace_ms = worker_.settings().farm.grace_ms;
    });
    return "";
  }

  // A client whose READs met a retired table asks for the live generation and re-maps.
  std::optional<nlohmann::json> control(std::string_view op) const override {
    if (op != "farm-layout") return std::nullopt;
    const Regions r = regions();
    return nlohmann::json(LiveTable{r.generation, {r.homes, r.bucket_bytes}, r.table, r.extents});
  }

  nlohmann::json stats() const override {
    nlohmann::json j = rpc_->stats();
    if (engine_ == nullptr) return j;
    const auto fs = engine_->farm_stats();
    const Regions r = regions();
    const uint64_t buckets = table_buckets(r.homes);
    j["farm"] = {{"generation", r.generation},
                 {"homes", r.homes},
                 {"bucket_bytes", r.bucket_bytes},
                 {"inline_bytes", engine_->inline_bytes()},
                 {"pointers_only", engine_->pointers_only()},
                 {"extent_bytes", r.extents.length},
                 {"used_buckets", fs.used_buckets},
                 {"fill", buckets ? static_cast<double>(fs.used_buckets) /
                                        static_cast<double>(buckets)
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
  struct Mrs {
    uint32_t generation;
    std::unique_ptr<fabric::MemoryRegion> table, extents;
  };

  void live(const store::FarmGeneration& g) {
    Mrs m;
    m.generation = g.generation;
    m.table = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), g.table, g.table_bytes,
                                                     fabric::Access::kRemoteRead);
    m.extents = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), g.extents,
                                                       g.extent_bytes, fabric::Access::kRemoteRead);
    Regions r;
    r.generation = g.generation;
    r.homes = g.homes;
    r.bucket_bytes = g.bucket_bytes;
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

  proto::ServerHost& worker_;
  const proto::Id id_;
  std::unique_ptr<proto::ServerProtocol> rpc_;  // server-reply's side: the message path
  store::FarmEngine* engine_ = nullptr;         // the worker owns it
  std::vector<Mrs> mrs_;                        // every generation still mapped (current last)
  mutable std::mutex mu_;                       // current_ (the control thread reads it)
  Regions current_;
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<FarmServer>(w, proto::Id::farm);
}

}  // namespace fabkv::farm

namespace fabkv::farm_var {
std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<farm::FarmServer>(w, proto::Id::farm_var);
}
}  // namespace fabkv::farm_var
