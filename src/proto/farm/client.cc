#include "proto/farm/client.h"

#include <fmt/format.h>

#include "proto/farm/handshake.h"
#include "proto/farm/layout.h"
#include "proto/farm/reader.h"
#include "proto/handshake.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "proto/rpc/handshake.h"
#include "proto/server_reply/client.h"
#include "store/hash.h"
#include "store/limits.h"

namespace fabkv::farm {

namespace {

class FarmClient final : public proto::ClientProtocol {
 public:
  FarmClient(proto::ClientHost& host, const proto::ClientSettings& o, proto::Id id)
      : host_(host), options_(o), id_(id), rpc_(server_reply::make_client(host, o)) {}

  ~FarmClient() override {
    reader_.reset();  // its buffer's registration goes before the RPC client's
  }

  void hello(nlohmann::json* payload) override {
    rpc_->hello(payload);  // transport "write", the staging region and the answer ring
    (*payload)["protocol"] = proto::info(id_).name;
  }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    Opened r = rpc_->open(w, layout);
    if (r != Opened::kReady) return r;
    setup_reader(w, layout);
    return r;
  }
  bool polls_memory() const override { return true; }  // answers to PUT/DEL land in the ring

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kGet) return rpc_->submit(r, std::move(cb));
    if (host_.gone()) return Status::kServerGone;
    if (!reader_) return Status::kError;
    Status v = rpc::validate(r.key, 0, max_value_);
    if (v != Status::kOk) return v;
    return reader_->get(r.key, store::partition_of(store::hash_key(r.key), workers_),
                        std::move(cb));
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    if (reader_)
      for (fabric::Completion& c : cs) reader_->take(c, ran);
    return ran + rpc_->complete(cs);  // it takes only its own
  }
  size_t poll() override { return rpc_->poll(); }

  size_t expire(bool all) override {
    size_t ran = rpc_->expire(all);
    if (reader_ && (reader_->in_flight() > 0 || all))
      ran += reader_->expire(all, all ? Status::kServerGone : Status::kTimeout);
    return ran;
  }
  size_t in_flight() const override {
    return rpc_->in_flight() + (reader_ ? reader_->in_flight() : 0);
  }
  nlohmann::json counters() const override {
    return reader_ ? reader_->counters().to_json() : nlohmann::json::object();
  }

 private:
  void setup_reader(const control::Welcome& w, const nlohmann::json& layout) {
    const auto session = rpc::RpcClient::read_layout<proto::SessionLayout>(layout);
    const auto slots = rpc::RpcClient::read_layout<rpc::RpcLayout>(layout);
    const auto farm = rpc::RpcClient::read_layout<FarmLayout>(layout);
    workers_ = static_cast<uint32_t>(farm.tables.size());
    max_value_ = session.max_value;
    if (workers_ == 0 || slots.queues == 0 ||
        w.fabric_addresses.size() < size_t{workers_} * slots.queues)
      rpc::RpcClient::bad_layout("the server runs no farm engine for its workers");
    std::vector<FarmMap> maps(workers_);
    for (uint32_t i = 0; i < workers_; ++i) {
      const TableGeneration& t = farm.tables[i];
      if (t.version != kLayoutVersion || t.neighbourhood != kNeighbourhood)
        rpc::RpcClient::bad_layout("the server's farm table has another layout version");
      maps[i].generation = t.generation;
      maps[i].homes = t.homes;
      maps[i].bucket_bytes = t.bucket_bytes;
      maps[i].table = rpc::RpcClient::region_of(w, fmt::format("farm.table.{}", i));
      maps[i].extents = rpc::RpcClient::region_of(w, fmt::format("farm.extents.{}", i));
      if (maps[i].homes == 0 || maps[i].bucket_bytes < bucket_bytes(kPointerBytes) ||
          table_bytes(maps[i].homes, maps[i].bucket_bytes) > maps[i].table.length)
        rpc::RpcClient::bad_layout(fmt::format("farm.table.{} is smaller than its buckets", i));
      // The worker's first endpoint, as the RPC client addresses it (proto/rpc/client.cc).
      maps[i].peer = host_.endpoint().insert_peer(w.fabric_addresses[size_t{i} * slots.queues]);
    }
    FarmReader::Options fo;
    fo.ops = slots.window * workers_;
    fo.max_record = record_bytes(store::kMaxKeySize, max_value_);
    fo.timeout_ms = options_.timeout_ms;
    fo.grace_ms = farm.grace_ms;
    reader_ = std::make_unique<FarmReader>(host_, fo, std::move(maps),
                                           [this](std::vector<FarmMap>* m) { return refresh(m); });
  }

  // The engines' current generations ({"op": "farm-layout"}).
  bool refresh(std::vector<FarmMap>* maps) {
    return read_table::refresh_maps<TableShape>(
        host_, "farm-layout", maps, [](FarmMap& m, const LiveTable& t) {
          // The reader's buffer was sized for these buckets: another size needs a new client.
          if (t.shape.bucket_bytes != m.bucket_bytes || t.shape.homes == 0 ||
              table_bytes(t.shape.homes, t.shape.bucket_bytes) > t.table.length)
            return false;
          m.homes = t.shape.homes;
          return true;
        });
  }

  proto::ClientHost& host_;
  proto::ClientSettings options_;
  proto::Id id_;
  std::unique_ptr<proto::ClientProtocol> rpc_;  // server-reply's client: PUT and DELETE
  std::unique_ptr<FarmReader> reader_;          // GETs by READ
  uint32_t workers_ = 0;
  size_t max_value_ = 0;
};

std::unique_ptr<proto::ClientProtocol> make(proto::ClientHost& host, const proto::ClientSettings& o,
                                            proto::Id id) {
  if (!o.transport.empty() && o.transport != "write")
    throw ClientError(Status::kError,
                      fmt::format("fabkv: {} WRITEs its requests (FaRM's message path): "
                                  "transport must be write, not '{}'",
                                  proto::info(id).name, o.transport));
  return std::make_unique<FarmClient>(host, o, id);
}

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return make(host, options, proto::Id::farm);
}

}  // namespace fabkv::farm

namespace fabkv::farm_var {
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  return farm::make(host, options, proto::Id::farm_var);
}
}  // namespace fabkv::farm_var
