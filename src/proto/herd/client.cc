#include "proto/herd/client.h"

#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include "proto/herd/dgram.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "proto/rpc/request.h"

namespace fabkv::herd {

namespace {

// Answers by datagram (proto/herd/dgram.h): a request whose answer does not come within a third
// of the client's timeout is sent again, twice at most, so that every request still ends within
// the timeout (docs/server.md, "Loss and retry").
constexpr int kAttempts = 3;
// Receive buffers for datagram answers: one per slot and a few more, at most what the
// endpoint's receive queue holds (dgram_client.cc).
constexpr size_t kExtraRecvs = 4, kMaxRecvs = 1024;

class HerdClient final : public proto::ClientProtocol {
 public:
  HerdClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : host_(host),
        transport_(o.transport),
        timeout_ms_(o.timeout_ms),
        rpc_(host, rpc::ClientConfig{"herd.requests", true}) {}

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::herd).name;
    // "" = whatever the server takes (its --transport); the Welcome says which.
    if (!transport_.empty()) (*payload)["transport"] = transport_;
    // How answers come back (proto/herd/dgram.h, the handshake): "follow" the server until it
    // says datagrams, then from this client's datagram endpoint.
    (*payload)["responses"] = dgram_ ? "dgram" : "follow";
    if (dgram_) (*payload)["dgram_address"] = dgram_->name();
    rpc_.hello(payload);
  }
  Opened open(const control::Welcome& w, const nlohmann::json& layout) override;
  size_t min_multi_recv() const override { return rpc_.min_multi_recv(); }
  bool polls_memory() const override { return ready_; }
  fabric::Endpoint* own_endpoint() override { return ready_ ? &dgram_->endpoint() : nullptr; }
  size_t poll() override;
  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (!ready_) return rpc_.submit(r, std::move(cb));
    auto a = std::make_shared<Attempt>();
    a->key.assign(r.key);
    a->value.assign(r.value);
    a->r = r;
    a->r.key = a->key;
    a->r.value = a->value;
    a->cb = std::move(cb);
    return post(a);
  }
  size_t complete(std::span<fabric::Completion> cs) override { return rpc_.complete(cs); }
  size_t expire(bool all) override;
  size_t in_flight() const override { return rpc_.in_flight() + again_.size(); }
  nlohmann::json counters() const override;

 private:
  // A request by datagram answer, owned until its callback runs: a retry sends it again.
  struct Attempt {
    proto::ClientRequest r;  // views into key and value below
    std::string key, value;
    Callback cb;
    int left = kAttempts - 1;
  };
  Status post(const std::shared_ptr<Attempt>& a) {
    return rpc_.submit(a->r, [this, a](Status st, std::string_view v, uint64_t version) {
      if (st == Status::kTimeout && a->left > 0) {
        a->left--;
        deferred_++;
        again_.push_back(a);  // sent again by expire(), outside the RPC client's loop
        return;
      }
      Callback cb = std::move(a->cb);
      cb(st, v, version);
    });
  }
  size_t send_again(bool all);
  void open_receiver(const DgramLayout& l);
  void on_datagram(const char* buf, size_t len, size_t* ran);

  proto::ClientHost& host_;
  std::string transport_;
  const int timeout_ms_;
  rpc::RpcClient rpc_;
  std::unique_ptr<DgramReceiver> dgram_;
  bool ready_ = false;    // answers come by datagram
  bool sending_ = false;  // in send_again()
  std::deque<std::shared_ptr<Attempt>> again_;
  uint64_t retries_ = 0, gave_up_ = 0, deferred_ = 0;
};

void HerdClient::open_receiver(const DgramLayout& l) {
  const std::string mine = fabric::core_provider(host_.fabric().provider_name());
  try {
    dgram_ = std::make_unique<DgramReceiver>(host_.fabric());
  } catch (const std::exception& e) {
    throw ClientError(Status::kError,
                      fmt::format("fabkv: the server answers herd requests by datagram ({} "
                                  "endpoints, its --herd-responses dgram); this client cannot "
                                  "open a datagram endpoint beside {}: {}; start the server "
                                  "with --herd-responses rdm",
                                  l.dgram_provider, mine, e.what()));
  }
  if (fabric::core_provider(dgram_->provider()) != fabric::core_provider(l.dgram_provider)) {
    const std::string theirs = dgram_->provider();
    dgram_.reset();
    throw ClientError(Status::kError,
                      fmt::format("fabkv: the server answers herd requests by {} datagrams; this "
                                  "client's datagram endpoint is {}",
                                  l.dgram_provider, theirs));
  }
}

proto::ClientProtocol::Opened HerdClient::open(const control::Welcome& w,
                                               const nlohmann::json& layout) {
  const auto l = rpc::RpcClient::read_layout<DgramLayout>(layout);
  ready_ = false;
  if (l.responses == "dgram") {
    if (!dgram_) {
      open_receiver(l);
      return Opened::kHelloAgain;  // with its address
    }
    if (l.dgram_max < sizeof(rpc::ResponseHeader)) rpc::RpcClient::bad_layout("dgram_max");
    rpc_.set_recv_answers(false);
  } else if (l.responses != "rdm") {
    rpc::RpcClient::bad_layout("responses " + l.responses);
  } else {
    dgram_.reset();
  }
  const Opened o = rpc_.open(w, layout);
  if (o == Opened::kHelloAgain || !dgram_) return o;
  rpc_.set_attempt_timeout_ms(std::max(1, timeout_ms_ / kAttempts));
  const size_t n = size_t{rpc_.workers()} * rpc_.window() + kExtraRecvs;
  dgram_->post(std::min(n, kMaxRecvs), l.dgram_max);
  ready_ = true;
  return o;
}

void HerdClient::on_datagram(const char* buf, size_t len, size_t* ran) {
  DgramReceiver::Counters& n = dgram_->counters();
  rpc::ParsedResponse r;
  if (!rpc::parse_response(buf, len, &r)) {
    n.garbage++;
    return;
  }
  rpc::RpcClient::Fate fate = rpc::RpcClient::Fate::kForeign;
  *ran += rpc_.answer(r.header, r.value, &fate);
  switch (fate) {
    case rpc::RpcClient::Fate::kRan: n.answered++; break;
    case rpc::RpcClient::Fate::kLate: n.late++; break;
    case rpc::RpcClient::Fate::kUnmatched: n.duplicate++; break;
    case rpc::RpcClient::Fate::kForeign: n.garbage++; break;
  }
}

size_t HerdClient::poll() {
  size_t ran = 0;
  dgram_->poll([&](const char* buf, size_t len) { on_datagram(buf, len, &ran); });
  return ran;
}

size_t HerdClient::expire(bool all) {
  const uint64_t before = deferred_;
  size_t ran = rpc_.expire(all);
  // The callbacks that queued a retry are not the user's.
  ran -= std::min<size_t>(ran, deferred_ - before);
  return ran + send_again(all);
}

// The requests whose attempt timed out, sent again (with new sequence numbers: the old
// answer, should it come, is dropped as late). Returns callbacks run (those that could not be).
size_t HerdClient::send_again(bool all) {
  if (sending_) return 0;  // a wait for a slot below drove the client into expire() again
  sending_ = true;
  size_t ran = 0;
  while (!again_.empty()) {
    std::shared_ptr<Attempt> a = std::move(again_.front());
    again_.pop_front();
    Status st = Status::kServerGone;
    if (!all && !host_.gone()) {
      retries_++;
      st = post(a);
    }
    if (st != Status::kOk) {
      gave_up_++;
      Callback cb = std::move(a->cb);
      cb(st == Status::kOk ? Status::kTimeout : st, {}, 0);
      ran++;
    }
  }
  sending_ = false;
  return ran;
}

nlohmann::json HerdClient::counters() const {
  nlohmann::json j = nlohmann::json::object();
  rpc_.counters(&j);
  if (!dgram_) return j;
  const DgramReceiver::Counters& n = dgram_->counters();
  j["dgram_received"] = n.received;
  j["dgram_answered"] = n.answered;
  j["dgram_late"] = n.late;
  j["dgram_duplicate"] = n.duplicate;
  j["dgram_garbage"] = n.garbage;
  j["dgram_errors"] = n.errors;
  j["retries"] = retries_;
  j["retries_failed"] = gave_up_;
  j["dgram_address"] = dgram_->address();
  return j;
}

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "write" && options.transport != "send")
    throw ClientError(Status::kError,
                      "fabkv: transport must be write or send, not '" + options.transport + "'");
  return std::make_unique<HerdClient>(host, options);
}

}  // namespace fabkv::herd
