#include "proto/herd/client.h"

#include "proto/registry.h"
#include "proto/rpc/client.h"

namespace fabkv::herd {

namespace {

class HerdClient final : public proto::ClientProtocol {
 public:
  HerdClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : transport_(o.transport), rpc_(host, rpc::ClientConfig{"herd.requests", true}) {}

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::herd).name;
    // "" = whatever the server takes (its --transport); the Welcome says which.
    if (!transport_.empty()) (*payload)["transport"] = transport_;
    rpc_.hello(payload);
  }
  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    return rpc_.open(w, layout);
  }
  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
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
  return std::make_unique<HerdClient>(host, options);
}

}  // namespace fabkv::herd
