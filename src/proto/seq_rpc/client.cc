// seq-rpc's client side: herd's RPC client (proto/rpc/client.h) sending OpCode::kNext, every
// request of this client to one worker (client index mod workers) so that its values increase
// in request order. Anything but next is refused (kError, nothing sent).

#include <memory>

#include "proto/client_protocol.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"

namespace fabkv::seq_rpc {

namespace {

class SeqRpcClient final : public proto::ClientProtocol {
 public:
  SeqRpcClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : transport_(o.transport), rpc_(host, rpc::ClientConfig{"seq-rpc.requests", true, true}) {}

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::seq_rpc).name;
    if (!transport_.empty()) (*payload)["transport"] = transport_;
    rpc_.hello(payload);
  }
  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    return rpc_.open(w, layout);
  }
  size_t min_multi_recv() const override { return rpc_.min_multi_recv(); }
  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kNext) return Status::kError;
    return rpc_.submit(r, std::move(cb));
  }
  size_t complete(std::span<fabric::Completion> cs) override { return rpc_.complete(cs); }
  size_t expire(bool all) override { return rpc_.expire(all); }
  size_t in_flight() const override { return rpc_.in_flight(); }
  nlohmann::json counters() const override {
    nlohmann::json j = nlohmann::json::object();
    rpc_.counters(&j);
    return j;
  }

 private:
  std::string transport_;
  rpc::RpcClient rpc_;
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "write" && options.transport != "send")
    throw ClientError(Status::kError,
                      "fabkv: transport must be write or send, not '" + options.transport + "'");
  return std::make_unique<SeqRpcClient>(host, options);
}

}  // namespace fabkv::seq_rpc
