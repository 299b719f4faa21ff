// HydraDB's server side (survey sec. 3.1; the contract is wire.h and layout.h in this folder):
// requests arrive in the client's slots of the worker's request region ("hydradb.requests.<w>")
// as server-reply's do, and each answer is one WRITE into the client's response ring, with an
// ItemRef after the value: for a GET hit, where the item is in the worker's item arena and the
// lease. The worker brings the hydradb engine (engine.h), whose arena it registers read-only
// for clients ("hydradb.items.<w>"); the engine holds a replaced item's memory for
// lease + margin before reuse.

#include <fmt/format.h>

#include "fabric/memory_region.h"
#include "proto/hydradb/engine.h"
#include "proto/hydradb/handshake.h"
#include "proto/hydradb/wire.h"
#include "proto/json.h"
#include "proto/rpc/handshake.h"
#include "proto/rpc/server.h"

namespace fabkv::hydradb {

namespace {

class HydraServer final : public rpc::RpcServer {
 public:
  explicit HydraServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::hydradb), config(w)),
        lease_us_(w.settings().hydradb.lease_ms * 1000u),
        rings_(w.settings().max_clients) {}

  ~HydraServer() override { items_mr_.reset(); }  // before the engine unmaps the arena

  void open() override {
    // The worker runs the hydradb engine (proto/registry.h, its make_engine holds a replaced
    // item for the lease plus the margin) when hydradb is served.
    engine_ = dynamic_cast<Engine*>(worker_.engine_st());
    if (engine_ != nullptr) {
      const store::EngineMemory m = engine_->memory();
      items_mr_ = std::make_unique<fabric::MemoryRegion>(worker_.fabric(), m.base, m.size,
                                                         fabric::Access::kRemoteRead);
    }
    RpcServer::open();
  }

  // As server-reply: a ring the client lets us WRITE, large enough for every worker's W
  // answers of the largest value; plus the item arena it may READ.
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (engine_ == nullptr) return "this server does not run the hydradb engine";
    if (std::string why = rpc::check_transport(hello, p.name, rpc::Transport::kWrite, true);
        !why.empty())
      return why;
    try {
      (void)proto::region_from_json(hello.at("ring"));
    } catch (const std::exception& e) {
      return std::string("hydradb needs a response ring in the Hello: ") + e.what();
    }
    welcome(rpc::Transport::kWrite, out);
    const size_t ring_size = ring_bytes(worker_.settings().workers, window_, max_value_);
    out->layout.update(nlohmann::json(rpc::RingLayout{ring_size}));
    out->layout.update(nlohmann::json(HydradbLayout{kWireVersion, kLayoutVersion,
                                                    worker_.settings().hydradb.lease_ms}));
    const fabric::RemoteRegion r = items_mr_->remote();
    out->regions.push_back({fmt::format("hydradb.items.{}", worker_.index()), r.addr, r.length,
                            r.key, static_cast<uint32_t>(r.access)});
    return "";
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    j["ring_too_small"] = unanswered_.load(std::memory_order_relaxed);
    j["leases"] = leases_.load(std::memory_order_relaxed);
    if (engine_ != nullptr) {
      const auto hs = engine_->hydra_stats();
      j["hydradb"] = {{"retired", hs.retired},
                      {"reclaimed", hs.reclaimed},
                      {"held_items", hs.held_items},
                      {"held_bytes", hs.held_bytes},
                      {"lease_ms", worker_.settings().hydradb.lease_ms},
                      {"margin_ms", worker_.settings().hydradb.margin_ms}};
    }
    return j;
  }

 private:
  static Config config(const proto::ServerHost& w) {
    Config c;
    c.slots = true;
    c.messages = false;
    c.answer_bytes = response_bytes(w.settings().max_value);
    return c;
  }

  void learn_client_st(uint32_t c, const nlohmann::json& hello) override {
    rings_[c] = proto::region_from_json(hello.at("ring"));  // admit() checked it
    if (rings_[c].length < ring_bytes(worker_.settings().workers, window_, max_value_))
      rings_[c] = {};  // too small: the client comes back with one that fits
  }

  // Survey sec. 3.1: a GET answer carries the item's address, so that the next GET of the key
  // is a READ. No lease for an item with an expiry: its expiry is judged by the server's clock
  // (docs/hydradb.md).
  size_t extend_answer_st(const store::Request& req, const store::Response& r, char* out,
                          size_t len) override {
    ItemRef ref{kNoItem, 0, 0};
    if (req.op == store::Op::kGet && r.status == store::Status::kOk &&
        r.location != store::kNoLocation && r.expire_at == 0) {
      ref.offset = r.location;
      ref.lease_us = lease_us_;
      store::add_st(leases_);
    }
    const size_t at = ref_offset(len - sizeof(rpc::ResponseHeader));
    std::memset(out + len, 0, at - len);
    rpc::store(out + at, ref);
    return at + sizeof(ItemRef);
  }

  // Header, value and (for engine answers) the ItemRef are in `slot`; an error answer gets an
  // empty ItemRef here. The trailer goes after them and the whole answer is one WRITE.
  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char* slot, size_t len) override {
    const rpc::ResponseHeader h = rpc::load<rpc::ResponseHeader>(slot);
    const size_t value_len = h.value_len;
    if (len != trailer_offset(value_len)) {
      // An error answer (rpc::RpcServer::reply_error_st): header only.
      const size_t at = ref_offset(value_len);
      std::memset(slot + len, 0, at - len);
      rpc::store(slot + at, ItemRef{kNoItem, 0, 0});
    }
    const size_t toff = trailer_offset(value_len);
    rpc::store(slot + toff, ResponseTrailer{seq, response_check(slot, value_len, seq)});
    const fabric::RemoteRegion& ring = rings_[c];
    if (ring.length == 0) {
      unanswered_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    uint64_t raddr = ring.at(ring_offset(worker_.index(), window_, max_value_, seq));
    worker_.reply_write_st(c, epoch, answer_buffer(c, seq, toff + sizeof(ResponseTrailer)), raddr,
                           ring.key);
  }

  const uint32_t lease_us_;
  hydradb::Engine* engine_ = nullptr;  // the worker owns it
  std::unique_ptr<fabric::MemoryRegion> items_mr_;
  std::vector<fabric::RemoteRegion> rings_;  // by client index
  std::atomic<uint64_t> unanswered_{0};      // requests of clients whose ring was too small
  std::atomic<uint64_t> leases_{0};          // GET answers that carried an address
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<HydraServer>(w);
}

}  // namespace fabkv::hydradb
