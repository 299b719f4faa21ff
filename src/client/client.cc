// fabkv::Client: the public API over a Session (client/session.h), which drives the protocol
// the options name (proto/client_protocol.h, one folder per protocol under src/proto/).
#include "client/client.h"

#include "client/session.h"
#include "client/testing.h"

namespace fabkv {

namespace {

proto::ClientRequest request(proto::ClientOp op, std::string_view key, std::string_view value = {},
                             uint64_t expected_version = 0, uint32_t expire_at = 0) {
  proto::ClientRequest r;
  r.op = op;
  r.key = key;
  r.value = value;
  r.expected_version = expected_version;
  r.expire_at = expire_at;
  return r;
}

}  // namespace

Client::Client(std::unique_ptr<Session> session) : session_(std::move(session)) {}

Client::~Client() = default;

std::unique_ptr<Client> Client::connect(const ClientOptions& options) {
  return std::unique_ptr<Client>(new Client(Session::connect(options)));
}

std::unique_ptr<Client> testing::connect(const ClientOptions& options,
                                         const proto::ClientTestHooks& hooks) {
  return std::unique_ptr<Client>(new Client(Session::connect(options, hooks)));
}

Status Client::get(std::string_view key, std::string* value, uint64_t* version) {
  return session_->blocking(request(proto::ClientOp::kGet, key), value, version);
}
Status Client::put(std::string_view key, std::string_view value, uint64_t expected_version,
                   uint32_t expire_at, uint64_t* new_version) {
  return session_->blocking(request(proto::ClientOp::kPut, key, value, expected_version, expire_at),
                            nullptr, new_version);
}
Status Client::del(std::string_view key) {
  return session_->blocking(request(proto::ClientOp::kDel, key), nullptr, nullptr);
}
Status Client::next(uint64_t* value) {
  return session_->blocking(request(proto::ClientOp::kNext, {}), nullptr, value);
}
Status Client::next_async(Callback cb) {
  return session_->submit(request(proto::ClientOp::kNext, {}), std::move(cb));
}
Status Client::get_async(std::string_view key, Callback cb) {
  return session_->submit(request(proto::ClientOp::kGet, key), std::move(cb));
}
Status Client::put_async(std::string_view key, std::string_view value, Callback cb,
                         uint64_t expected_version, uint32_t expire_at) {
  return session_->submit(request(proto::ClientOp::kPut, key, value, expected_version, expire_at),
                          std::move(cb));
}
Status Client::del_async(std::string_view key, Callback cb) {
  return session_->submit(request(proto::ClientOp::kDel, key), std::move(cb));
}

size_t Client::poll() { return session_->poll(); }
Status Client::flush() { return session_->flush(); }
size_t Client::in_flight() const { return session_->in_flight(); }
Client::WaitFds Client::wait_fds() const { return session_->wait_fds(); }
bool Client::can_wait() { return session_->can_wait(); }
size_t Client::expire() { return session_->expire(); }
nlohmann::json Client::protocol_counters() const { return session_->protocol_counters(); }
nlohmann::json Client::stats() { return session_->stats(); }
fabric::VerbSnapshot Client::counters() const { return session_->counters(); }
const nlohmann::json& Client::layout() const { return session_->layout(); }
const std::string& Client::provider() const { return session_->provider(); }

}  // namespace fabkv
