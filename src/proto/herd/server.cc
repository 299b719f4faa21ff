// HERD's server side (HERD sec. 4): requests arrive in the client's slots of the worker's
// request region ("herd.requests.<w>") or as messages (sec. 5.5), as --transport says (auto:
// proto/herd/options.h); every answer is one SEND (sec. 4.2 uses UD SENDs) through the worker's endpoints, in turn
// over rpc.queues of them (Guidelines sec. 4.3.1). Everything else is the shared RPC piece
// (proto/rpc/server.h).

#include <fmt/format.h>

#include "proto/rpc/server.h"

namespace fabkv::herd {

namespace {

class HerdServer final : public rpc::RpcServer {
 public:
  explicit HerdServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::herd), config(w)),
        transport_(transport_of(w)) {}

  std::string admit(const proto::Info&, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    std::string asked = rpc::to_string(transport_);
    if (hello.contains("transport")) {
      if (!hello.at("transport").is_string()) return "transport must be a string";
      asked = hello.at("transport").get<std::string>();
    }
    if (asked != rpc::to_string(transport_))
      return fmt::format("this server takes requests by {} (--transport), not {}",
                         rpc::to_string(transport_), asked);
    welcome(transport_, out);
    return "";
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    j["transport"] = rpc::to_string(transport_);
    return j;
  }

 private:
  static rpc::Transport transport_of(const proto::ServerHost& w) {
    return resolve(w.settings().herd.transport, w.provider());
  }
  static Config config(const proto::ServerHost& w) {
    Config c;
    c.slots = transport_of(w) == rpc::Transport::kWrite;
    c.messages = !c.slots;
    return c;
  }

  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char*, size_t len) override {
    worker_.reply_st(c, epoch, answer_buffer(c, seq, len));
  }

  const rpc::Transport transport_;
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<HerdServer>(w);
}

}  // namespace fabkv::herd
