#include "client/session.h"

#include <algorithm>

#include "fabric/error.h"
#include "fabric/provider.h"
#include "fabric/rxm.h"
#include "proto/json.h"
#include "proto/registry.h"

namespace fabkv {

using proto::json_bytes;

Session::Session(const ClientOptions& o, const proto::ClientTestHooks& hooks) : o_(o) {
  settings_.transport = o.transport;
  settings_.timeout_ms = o.timeout_ms;
  settings_.connect_timeout_ms = o.connect_timeout_ms;
  settings_.staging_bytes = o.staging_bytes;
  settings_.protocols = o.protocol_options;
  settings_.test = hooks;
}

std::unique_ptr<Session> Session::connect(const ClientOptions& options,
                                          const proto::ClientTestHooks& hooks) {
  std::unique_ptr<Session> s(new Session(options, hooks));
  // The protocol first: an unknown name or settings it refuses fail before anything opens.
  s->proto_ = make_client_protocol(options.protocol, *s, s->settings_);
  if (options.timeout_ms <= 0 || options.connect_timeout_ms <= 0)
    throw ClientError(Status::kError, "fabkv: timeouts must be positive");
  std::optional<PollMode> mode = poll_mode_from_string(options.poll);
  if (!mode)
    throw ClientError(Status::kError,
                      "fabkv: poll must be spin or adaptive, not '" + options.poll + "'");
  if (options.poll_spin_us < 0 || options.poll_sleep_us < 1)
    throw ClientError(Status::kError, "fabkv: poll_spin_us must be >= 0 and poll_sleep_us >= 1");
  s->poll_.mode = *mode;
  s->poll_.spin_us = static_cast<uint32_t>(options.poll_spin_us);
  s->poll_.sleep_us = static_cast<uint32_t>(std::max<int>(options.poll_sleep_us,
                                                          PollOptions::kFirstSleepUs));
  if (s->poll_.mode == PollMode::kAdaptive) s->waiter_ = std::make_unique<fabric::Waiter>();
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(options.server, &host, &port))
    throw ClientError(Status::kError,
                      "fabkv: --server wants HOST:PORT, got '" + options.server + "'");
  try {
    s->open(host);
  } catch (const ClientError&) {
    throw;
  } catch (const control::ControlError& e) {
    Status st = Status::kServerGone;
    if (e.status() == control::Status::kTimeout) st = Status::kTimeout;
    else if (e.status() == control::Status::kMalformed) st = Status::kMalformed;
    // The control client's text already names the server and, on a rejection, carries the
    // server's own message ("this server takes requests by write ...").
    throw ClientError(st, std::string("fabkv: ") + e.what());
  } catch (const fabric::FabricError& e) {
    throw ClientError(Status::kError, std::string("fabkv: fabric: ") + e.what());
  } catch (const std::exception& e) {
    throw ClientError(Status::kError, std::string("fabkv: ") + e.what());
  }
  return s;
}

void Session::open(const std::string& host) {
  open_fabric(o_.provider, host);
  // A protocol may find that what its Hello offered does not fit this server (a region too
  // small for its max_value, an endpoint whose minimum for multi-recv buffers is under the
  // largest answer); it then says hello again, from a new endpoint, once per thing it learnt.
  for (int attempt = 0;; ++attempt) {
    greet(host);
    if (proto_->open(ctl_->welcome(), layout_) == proto::ClientProtocol::Opened::kReady) break;
    if (attempt == 2)
      throw ClientError(Status::kMalformed,
                        "fabkv: unusable layout from the server: it keeps asking for more");
    ctl_->close();
    ctl_.reset();
    ep_.reset();
  }
  polls_memory_ = proto_->polls_memory();
}

void Session::open_fabric(const std::string& provider, const std::string& host) {
  fabric::FabricOptions fo;
  fo.provider = provider;
  fo.peer_host = host;
  fo.quiet = true;
  fabric_ = fabric::Fabric::open(fo);
}

void Session::greet(const std::string& host) {
  std::string theirs;
  try {
    handshake();
    return;
  } catch (const control::ControlError& e) {
    theirs = e.server_provider();
    if (o_.provider != "auto" || followed_server_ || theirs.empty() ||
        theirs == fabric_->provider_name())
      throw;
  }
  // Our guess was not the server's fabric. The protocol's registrations (its staging, its
  // rings) belong to the fabric we guessed: they go, after the endpoint (see ~Session) and
  // before the fabric, and a new protocol says the new Hello on the server's fabric.
  followed_server_ = true;
  const std::string core = fabric::core_provider(theirs);
  close_endpoint_then_protocol();
  fabric_.reset();
  try {
    open_fabric(core, host);
  } catch (const std::exception& e) {
    throw ClientError(Status::kError, "fabkv: the server serves " + core +
                                          ", which this client cannot open: " + e.what());
  }
  proto_ = make_client_protocol(o_.protocol, *this, settings_);
  handshake();
}

void Session::handshake() {
  fabric::EndpointOptions eo;
  eo.tx_depth = 512;
  eo.rx_depth = 512;
  eo.cq_depth = 4096;
  eo.av_size = 256;
  eo.waitable = poll_.mode == PollMode::kAdaptive;
  // Before the Hello: the provider reads it only when the endpoint is enabled (a protocol that
  // learns from the Welcome that it needs more says kHelloAgain).
  eo.min_multi_recv = proto_->min_multi_recv();
  ep_ = std::make_unique<fabric::Endpoint>(*fabric_, eo);
  nlohmann::json payload = nlohmann::json::object();
  proto_->hello(&payload);
  // Over rxm both sides must have one eager size (fabric/rxm.h): the server compares.
  if (fabric_->provider_name().find("ofi_rxm") != std::string::npos)
    payload["rxm_eager_bytes"] = fabric::rxm_eager_bytes();
  control::Hello hello;
  hello.service = proto::kService;
  hello.provider = fabric_->provider_name();
  hello.fabric_address = ep_->name();
  hello.payload = json_bytes(payload);
  ctl_.emplace(control::ControlClient::connect(o_.server, hello, o_.connect_timeout_ms, o_.secret));
  const control::Welcome& w = ctl_->welcome();
  try {
    layout_ = nlohmann::json::parse(w.payload.begin(), w.payload.end());
  } catch (const nlohmann::json::exception& e) {
    throw ClientError(Status::kMalformed,
                      std::string("fabkv: unusable layout from the server: payload is not JSON: ") +
                          e.what());
  }
  if (!layout_.is_object())
    throw ClientError(Status::kMalformed,
                      "fabkv: unusable layout from the server: payload is not a JSON object");
}

Session::~Session() {
  if (proto_ && ep_ && proto_->in_flight() > 0 && !gone_) {
    // Let requests in flight finish briefly so the server is not left with our half-sent
    // bytes.
    Deadline d = Deadline::after_ms(std::min(o_.timeout_ms, 200));
    while (proto_->in_flight() > 0 && !gone_ && !d.expired()) poll();
  }
  if (ctl_) ctl_->close();
  close_endpoint_then_protocol();
}

void Session::close_endpoint_then_protocol() {
  // The endpoint first: closing it may still deliver answers that arrived late (on tcp,
  // ofi_rxm's fi_close hands each message it holds for a connection to the receive it matches,
  // copying into that receive's buffer), and those buffers are the protocol's. Its memory
  // registrations, which are the domain's and bound to no endpoint (fabric/memory_region.cc
  // never calls fi_mr_bind), then go before the fabric (the member order of session.h).
  ep_.reset();
  proto_.reset();
}

void Session::check_control(bool now) {
  if (gone_) return;
  auto t = Clock::now();
  if (!now && t - last_alive_check_ < std::chrono::milliseconds(1)) return;
  last_alive_check_ = t;
  if (!ctl_ || !ctl_->alive()) gone_ = true;
}

size_t Session::dispatch() {
  if (batch_next_ == batch_len_) {
    batch_next_ = 0;
    batch_len_ = ep_->poll(batch_);
  }
  size_t ran = 0;
  while (batch_next_ < batch_len_) {
    // Taken off the batch before the protocol sees it: a nested dispatch() (from a wait
    // inside complete()) goes on with the next one and may refill the batch meanwhile.
    fabric::Completion c = batch_[batch_next_++];
    ran += proto_->complete(std::span(&c, 1));
  }
  return ran;
}

void Session::reap() {
  dispatch();
  if (polls_memory_) proto_->poll();
}

size_t Session::poll() {
  size_t ran = dispatch();
  if (polls_memory_) ran += proto_->poll();
  if ((++spins_ & 127) == 0 || gone_) {
    check_control(false);
    if (gone_) ran += proto_->expire(true);
    else if (proto_->in_flight() > 0) ran += proto_->expire(false);
  }
  return ran;
}

Status Session::wait_for(const bool& done, Deadline d) {
  idle_rounds_ = 0;
  while (!done) {
    size_t ran = poll();
    if (done) break;
    if (waiter_) idle(ran, d);
    // Our own deadline is a backstop; the request's own expiry normally answers first.
    if (d.expired()) {
      proto_->expire(false);
      if (!done) return Status::kTimeout;
    }
  }
  return Status::kOk;
}

void Session::idle(size_t ran, Deadline d) {
  constexpr uint32_t kIdleCheck = 16;  // the clock is read every 16 idle rounds
  if (ran > 0) {
    idle_rounds_ = 0;
    sleep_us_ = PollOptions::kFirstSleepUs;
    return;
  }
  if (++idle_rounds_ % kIdleCheck != 0) return;
  const auto now = Clock::now();
  if (idle_rounds_ == kIdleCheck) {
    idle_since_ = now;
    return;
  }
  if (now - idle_since_ < std::chrono::microseconds(poll_.spin_us) || now >= d.at()) return;
  // Never past the deadline, and at most 10 ms at a time: each request's own expiry runs in
  // poll() between two waits.
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(d.at() - now);
  left = std::min<std::chrono::microseconds>(left, std::chrono::milliseconds(10));
  const int ctl[] = {ctl_ ? ctl_->fd() : -1};
  std::span<const int> extra(ctl, ctl[0] >= 0 ? 1 : 0);
  fabric::Endpoint* own = proto_->own_endpoint();
  fabric::Endpoint* both[] = {ep_.get(), own};
  const std::span<fabric::Endpoint* const> eps(both, own != nullptr ? 2 : 1);
  fabric::Waiter::Woke woke;
  if (ep_->wait_fd() >= 0) {
    // tcp: any bytes from the server wake us (an answer by SEND, a WRITE into our ring, a
    // READ's data); the control connection wakes us when the server dies.
    woke = waiter_->wait(eps, extra, left);
  } else {
    // shm has no wait object: the server's SEND waits in our queue and its WRITE lands in our
    // memory while we sleep; we look again after a bounded sleep.
    woke = waiter_->wait(
        {}, extra, std::min<std::chrono::microseconds>(left, std::chrono::microseconds(sleep_us_)));
    sleep_us_ = std::min(sleep_us_ * 2, poll_.sleep_us);
  }
  if (woke != fabric::Waiter::Woke::kTimeout) idle_rounds_ = 0;
  check_control(false);
}

Status Session::blocking(const proto::ClientRequest& r, std::string* out_value,
                         uint64_t* out_version) {
  struct Wait {
    bool done = false;
    Status result = Status::kError;
    std::string* value;
    uint64_t* version;
  } w{false, Status::kError, out_value, out_version};
  // One pointer captured: the callback fits std::function's small buffer, no allocation.
  Status st = proto_->submit(r, [p = &w](Status s, std::string_view v, uint64_t ver) {
    p->done = true;
    p->result = s;
    if (p->value && s == Status::kOk) p->value->assign(v.data(), v.size());
    if (p->version) *p->version = ver;
  });
  if (st != Status::kOk) return st;
  Status ws = wait_for(w.done, Deadline::after_ms(o_.timeout_ms + 100));
  return ws == Status::kOk ? w.result : ws;
}

Status Session::flush() {
  // Each request expires at its own deadline, so this ends within timeout_ms of the last post.
  Deadline backstop = Deadline::after_ms(o_.timeout_ms + 100);
  idle_rounds_ = 0;
  while (proto_->in_flight() > 0) {
    size_t ran = poll();
    if (backstop.expired()) proto_->expire(false);
    else if (waiter_ && proto_->in_flight() > 0) idle(ran, backstop);
  }
  check_control(true);
  return gone_ ? Status::kServerGone : Status::kOk;
}

fabric::VerbSnapshot Session::counters() const {
  fabric::VerbSnapshot s = ep_->counters().snapshot();
  if (const fabric::Endpoint* own = proto_->own_endpoint()) s += own->counters().snapshot();
  return s;
}

Client::WaitFds Session::wait_fds() const {
  const fabric::Endpoint* own = proto_->own_endpoint();
  return {ep_->wait_fd(), ctl_ ? ctl_->fd() : -1, own != nullptr ? own->wait_fd() : -1};
}

bool Session::can_wait() {
  if (!waiter_ || ep_->wait_fd() < 0) return false;
  // A zero-length wait: fi_trywait first (fabric/waiter.h), then a look at the descriptors.
  fabric::Endpoint* own = proto_->own_endpoint();
  fabric::Endpoint* both[] = {ep_.get(), own};
  const std::span<fabric::Endpoint* const> eps(both, own != nullptr ? 2 : 1);
  return waiter_->wait(eps, {}, std::chrono::microseconds(0)) != fabric::Waiter::Woke::kPending;
}

size_t Session::expire() {
  check_control(true);
  if (gone_) return proto_->expire(true);
  return proto_->in_flight() > 0 ? proto_->expire(false) : 0;
}

nlohmann::json Session::control_request(const nlohmann::json& request) {
  if (!ctl_ || gone_) throw ClientError(Status::kServerGone, "fabkv: server gone");
  try {
    auto reply = ctl_->request(json_bytes(request), o_.timeout_ms);
    return nlohmann::json::parse(reply.begin(), reply.end());
  } catch (const std::exception&) {
    check_control(true);
    throw;
  }
}

nlohmann::json Session::stats() {
  try {
    return control_request({{"op", "stats"}});
  } catch (const ClientError&) {
    throw;
  } catch (const control::ControlError& e) {
    throw ClientError(e.status() == control::Status::kTimeout ? Status::kTimeout
                                                              : Status::kServerGone,
                      std::string("fabkv: stats: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw ClientError(Status::kMalformed, std::string("fabkv: stats reply: ") + e.what());
  }
}

}  // namespace fabkv
