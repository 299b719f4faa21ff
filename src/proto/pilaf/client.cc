#include "proto/pilaf/client.h"

#include <fmt/format.h>

#include "proto/pilaf/handshake.h"
#include "proto/pilaf/layout.h"
#include "proto/pilaf/reader.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "store/limits.h"

namespace fabkv::pilaf {

namespace {

class PilafClient final : public proto::ClientProtocol {
 public:
  // reads: GETs by READ (pilaf); false: everything by SEND (pilaf-vo).
  PilafClient(proto::ClientHost& host, const proto::ClientSettings& o, proto::Id id, bool reads)
      : host_(host),
        options_(o),
        id_(id),
        reads_(reads),
        rpc_(host, rpc::ClientConfig{"pilaf.requests", true}) {}

  ~PilafClient() override {
    reader_.reset();  // its buffer's registration goes before the RPC client's
  }

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(id_).name;
    (*payload)["transport"] = "send";  // Pilaf sec. 3.1: PUT/DELETE are messages
    rpc_.hello(payload);
  }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    Opened r = rpc_.open(w, layout);
    if (r != Opened::kReady || !reads_) return r;
    const auto l = rpc::RpcClient::read_layout<PilafLayout>(layout);
    if (l.tables.size() != rpc_.workers())
      rpc::RpcClient::bad_layout("the server runs no pilaf engine for these workers");
    setup_reader(w, l);
    return r;
  }
  size_t min_multi_recv() const override { return rpc_.min_multi_recv(); }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kGet || !reader_) return rpc_.submit(r, std::move(cb));
    if (host_.gone()) return Status::kServerGone;
    Status v = rpc::validate(r.key, 0, rpc_.max_value());
    if (v != Status::kOk) return v;
    return reader_->get(r.key, rpc_.worker_of(r.key), std::move(cb));
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    for (fabric::Completion& c : cs) {
      // Our posts all carry a context; the reader takes those without one (failed READs).
      if (reader_ ? reader_->take(c, ran) : c.context == nullptr) continue;
      if (rpc_.owns(c.context)) ran += rpc_.complete(c);
    }
    return ran;
  }

  size_t expire(bool all) override {
    size_t ran = 0;
    if (all || rpc_.in_flight() > 0) ran += rpc_.expire(all);
    if (reader_ && reader_->in_flight() > 0)
      ran += reader_->expire(all, all ? Status::kServerGone : Status::kTimeout);
    return ran;
  }
  size_t in_flight() const override {
    return rpc_.in_flight() + (reader_ ? reader_->in_flight() : 0);
  }
  nlohmann::json counters() const override {
    nlohmann::json j = reader_ ? reader_->counters().to_json() : nlohmann::json::object();
    rpc_.counters(&j);
    return j;
  }

 private:
  void setup_reader(const control::Welcome& w, const PilafLayout& layout) {
    const uint32_t n = rpc_.workers();
    std::vector<PilafMap> maps(n);
    for (uint32_t i = 0; i < n; ++i) {
      maps[i].peer = rpc_.peer(i);
      maps[i].table = rpc::RpcClient::region_of(w, fmt::format("pilaf.table.{}", i));
      maps[i].extents = rpc::RpcClient::region_of(w, fmt::format("pilaf.extents.{}", i));
      maps[i].generation = layout.tables[i].generation;
      maps[i].entries = layout.tables[i].entries;
      if (maps[i].entries == 0 || table_bytes(maps[i].entries) > maps[i].table.length)
        rpc::RpcClient::bad_layout(fmt::format("pilaf.table.{} is smaller than its entries", i));
    }
    PilafReader::Options po;
    po.ops = rpc_.window() * n;
    po.max_record = record_bytes(store::kMaxKeySize, rpc_.max_value());
    po.timeout_ms = options_.timeout_ms;
    po.grace_ms = layout.grace_ms;
    po.parallel_probes = options_.protocols.pilaf.parallel_probes;
    po.clock_skew_s = options_.test.clock_skew_s;  // test only
    reader_ = std::make_unique<PilafReader>(
        host_, po, std::move(maps), [this](std::vector<PilafMap>* m) { return refresh(m); });
  }

  // The engines' current generations ({"op": "layout"}; Pilaf sec. 3.3 with a control
  // request instead of a reset connection).
  bool refresh(std::vector<PilafMap>* maps) {
    return read_table::refresh_maps<TableShape>(host_, "layout", maps,
                                                [](PilafMap& m, const LiveTable& t) {
                                                  if (t.shape.entries == 0) return false;
                                                  m.entries = t.shape.entries;
                                                  return true;
                                                });
  }

  proto::ClientHost& host_;
  proto::ClientSettings options_;
  proto::Id id_;
  bool reads_;
  rpc::RpcClient rpc_;
  std::unique_ptr<PilafReader> reader_;  // pilaf: GETs by READ
};

std::unique_ptr<proto::ClientProtocol> make(proto::ClientHost& host, const proto::ClientSettings& o,
                                            proto::Id id, bool reads) {
  if (!o.transport.empty() && o.transport != "send")
    throw ClientError(Status::kError, fmt::format("fabkv: {} sends its requests as messages: "
                                                  "transport must be send",
                                                  proto::info(id).name));
  return std::make_unique<PilafClient>(host, o, id, reads);
}

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return make(host, options, proto::Id::pilaf, true);
}

}  // namespace fabkv::pilaf

namespace fabkv::pilaf_vo {
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return pilaf::make(host, options, proto::Id::pilaf_vo, false);
}
}  // namespace fabkv::pilaf_vo
