#include "proto/server_reply/client.h"

#include <cstring>
#include <string>

#include "proto/json.h"
#include "proto/registry.h"
#include "proto/rpc/answer_ring.h"
#include "proto/rpc/client.h"
#include "proto/server_reply/wire.h"

namespace fabkv::server_reply {

namespace {

class ServerReplyClient final : public proto::ClientProtocol {
 public:
  explicit ServerReplyClient(proto::ClientHost& host)
      : rpc_(host, rpc::ClientConfig{"server-reply.requests", false}),
        ring_(host, rpc_, proto::Id::server_reply, &ring_bytes) {}

  void hello(nlohmann::json* payload) override { ring_.hello(payload); }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    const Opened r = ring_.open(w, layout);
    if (r != Opened::kReady) return r;
    workers_ = rpc_.workers();
    window_ = rpc_.window();
    max_value_ = rpc_.max_value();
    copy_.reserve(sizeof(rpc::ResponseHeader) + max_value_);  // the copy never allocates
    return r;
  }
  bool polls_memory() const override { return true; }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    return rpc_.submit(r, std::move(cb));
  }
  size_t complete(std::span<fabric::Completion> cs) override { return rpc_.complete(cs); }
  size_t poll() override {
    if (rpc_.waiting() == 0) return 0;
    size_t ran = 0;
    rpc_.for_each_waiting([&](uint32_t w, uint32_t seq) { ran += take(w, seq); });
    return ran;
  }
  size_t expire(bool all) override { return all || rpc_.in_flight() > 0 ? rpc_.expire(all) : 0; }
  size_t in_flight() const override { return rpc_.in_flight(); }
  nlohmann::json counters() const override {
    nlohmann::json j = nlohmann::json::object();
    rpc_.counters(&j);
    return j;
  }

 private:
  // The answer to (w, seq) if it has landed whole (read_answer in wire.h): callbacks run (0
  // or 1).
  size_t take(uint32_t w, uint32_t seq) {
    char* slot = ring_.data() + ring_offset(w, window_, max_value_, seq);
    // A callback that posts may poll and take another answer meanwhile: nested takes copy
    // into their own string (allocating only then).
    std::string nested;
    std::string& copy = depth_ == 0 ? copy_ : nested;
    if (!read_answer(slot, seq, max_value_, &copy)) return 0;
    const rpc::ResponseHeader h = rpc::load<rpc::ResponseHeader>(copy.data());
    // Zeroed before the slot can be reused: a stale answer never matches a later request.
    std::memset(slot + trailer_offset(h.value_len), 0, sizeof(ResponseTrailer));
    std::memset(slot, 0, sizeof(rpc::ResponseHeader));
    if (h.worker != w) return 0;  // not from the worker we asked (a bug on one side)
    // answer() checks client and epoch (an answer meant for a predecessor of our index).
    depth_++;
    struct Leave {
      uint32_t& d;
      ~Leave() { d--; }
    } leave{depth_};
    return rpc_.answer(h, std::string_view(copy).substr(sizeof(rpc::ResponseHeader)));
  }

  rpc::RpcClient rpc_;
  rpc::AnswerRing ring_;  // the worker WRITEs answers here
  uint32_t workers_ = 0, window_ = 0;
  size_t max_value_ = 0;
  std::string copy_;    // the answer (header and value) copied out of the ring
  uint32_t depth_ = 0;  // take()s running a callback
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "write")
    throw ClientError(Status::kError,
                      "fabkv: server-reply WRITEs its requests: transport must be write, not '" +
                          options.transport + "'");
  return std::make_unique<ServerReplyClient>(host);
}

}  // namespace fabkv::server_reply
