// server-reply's server side (wire.h in this folder): requests arrive in the client's slots of
// the worker's request region ("server-reply.requests.<w>") exactly as HERD's do, and each
// answer is one WRITE into the client's response ring. The shared RPC piece
// (proto/rpc/server.h) does the rest.

#include <fmt/format.h>

#include "proto/json.h"
#include "proto/rpc/handshake.h"
#include "proto/rpc/server.h"
#include "proto/server_reply/wire.h"

namespace fabkv::server_reply {

namespace {

class ServerReplyServer final : public rpc::RpcServer {
 public:
  explicit ServerReplyServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::server_reply), config(w)),
        rings_(w.settings().max_clients) {}

  // The client must offer a ring it lets us WRITE, large enough for every worker's W answers
  // of the largest value.
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (std::string why = rpc::check_transport(hello, p.name, rpc::Transport::kWrite, true);
        !why.empty())
      return why;
    fabric::RemoteRegion ring;
    try {
      ring = proto::region_from_json(hello.at("ring"));
    } catch (const std::exception& e) {
      return std::string("server-reply needs a response ring in the Hello: ") + e.what();
    }
    // A client cannot know the ring's size before it has seen the layout: one whose ring is too
    // small is admitted, told the size (ring_bytes) and never answered; it comes back with a
    // ring that fits (src/proto/server_reply/client.cc).
    welcome(rpc::Transport::kWrite, out);
    const size_t ring_size = ring_bytes(worker_.settings().workers, window_, max_value_);
    out->layout.update(nlohmann::json(rpc::RingLayout{ring_size}));
    return "";
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
      rings_[c] = {};  // too small (see admit): nothing is written into it
  }

  // Header and value are in `slot`; the trailer goes after them and the whole answer is one
  // WRITE into the ring slot of this worker and seq.
  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char* slot, size_t len) override {
    const size_t value_len = len - sizeof(rpc::ResponseHeader);
    ResponseTrailer t{seq, response_check(slot, value_len, seq)};
    size_t toff = trailer_offset(value_len);
    std::memset(slot + len, 0, toff - len);
    rpc::store(slot + toff, t);
    const fabric::RemoteRegion& ring = rings_[c];
    if (ring.length == 0) {
      unanswered_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    uint64_t raddr = ring.at(ring_offset(worker_.index(), window_, max_value_, seq));
    worker_.reply_write_st(c, epoch, answer_buffer(c, seq, toff + sizeof(t)), raddr, ring.key);
  }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    j["ring_too_small"] = unanswered_.load(std::memory_order_relaxed);
    return j;
  }

  std::vector<fabric::RemoteRegion> rings_;  // by client index
  std::atomic<uint64_t> unanswered_{0};      // requests of clients whose ring was too small
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<ServerReplyServer>(w);
}

}  // namespace fabkv::server_reply
