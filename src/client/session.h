// The generic client session: everything fabkv::Client does that is not a protocol. It owns
// the fabric, the one endpoint and its completion queue, the control channel (and with it
// liveness: a closed control connection means the server is gone), deadlines, the poll loop,
// the blocking calls built on the async ones, and flush. The protocol
// (proto/client_protocol.h), made through the registry (src/client/protocols.cc), owns how
// requests travel and how answers come back.
//
// Threading: as Client (client.h): one thread at a time; counters() from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "common/deadline.h"
#include "common/poll.h"
#include "control/client.h"
#include "fabric/endpoint.h"
#include "fabric/fabric.h"
#include "fabric/waiter.h"
#include "proto/client_protocol.h"
#include "proto/client_settings.h"

namespace fabkv {

class Session final : public proto::ClientHost {
 public:
  // Checks the options, makes the protocol, opens the fabric, says hello and learns the
  // layout. Throws ClientError (Client::connect's contract). `hooks`: tests only
  // (client/testing.h).
  static std::unique_ptr<Session> connect(const ClientOptions& options,
                                          const proto::ClientTestHooks& hooks = {});
  // Lets requests in flight finish briefly, closes the control channel (the server reclaims
  // our slots), then frees the protocol's memory before the endpoint and fabric.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // ---- data path
  Status submit(const proto::ClientRequest& r, Callback&& cb) {
    return proto_->submit(r, std::move(cb));
  }
  Status blocking(const proto::ClientRequest& r, std::string* out_value, uint64_t* out_version);
  // One round of progress: completions, memory-polled answers, and every 128 rounds (or once
  // the server is gone) liveness and expiry. Returns callbacks run.
  size_t poll();
  Status flush();
  size_t in_flight() const { return proto_->in_flight(); }
  // Client::wait_fds(), can_wait(), expire(): for a caller's own event loop.
  Client::WaitFds wait_fds() const;
  bool can_wait();
  size_t expire();

  // ---- the rest of Client's API
  nlohmann::json stats();
  nlohmann::json protocol_counters() const { return proto_->counters(); }
  // The session's endpoint and the protocol's own (herd's datagram answers), together.
  fabric::VerbSnapshot counters() const;
  const nlohmann::json& layout() const { return layout_; }
  const std::string& provider() const { return fabric_->provider_name(); }

  // ---- proto::ClientHost
  fabric::Fabric& fabric() override { return *fabric_; }
  fabric::Endpoint& endpoint() override { return *ep_; }
  const proto::ClientSettings& settings() const override { return settings_; }
  void reap() override;
  void drive() override { poll(); }
  bool alive(bool now) override {
    check_control(now);
    return !gone_;
  }
  nlohmann::json control_request(const nlohmann::json& request) override;

 private:
  Session(const ClientOptions& o, const proto::ClientTestHooks& hooks);
  void open(const std::string& host);
  // Opens fabric_ for `provider` (auto|shm|tcp|verbs|udp; fabric/provider.h), the server on
  // `host`.
  void open_fabric(const std::string& provider, const std::string& host);
  // Says hello (handshake()). With provider auto, a first guess of the fabric that is not the
  // server's is refused with the server's provider named in the refusal
  // (ControlError::server_provider()): the client then opens that fabric, with a new protocol
  // object, and says hello once more. One extra round trip, only when the guess was wrong.
  void greet(const std::string& host);
  // Closes ep_, then proto_ (whose buffers the endpoint's receives point into).
  void close_endpoint_then_protocol();
  void handshake();
  // Is the control connection still up? It closes when the server process dies, which is
  // how a client learns "server gone" without waiting for a timeout. A system call, so at
  // most once per millisecond unless `now`.
  void check_control(bool now);
  Status wait_for(const bool& done, Deadline d);
  // Adaptive waiting (ClientOptions::poll): after a round that ran callbacks, `idle` restarts;
  // after poll.spin_us of rounds that ran none, blocks (or sleeps) once, never past `d`.
  void idle(size_t ran, Deadline d);
  // Hands the completions reaped but not yet given to the protocol to its complete(), one at
  // a time, reaping a new batch first when none are left. The batch is the session's, not a
  // local array: a callback (or a protocol) that waits inside complete() for a free slot
  // polls again from in there, and that nested poll must see the completions still queued
  // behind the one being handled (the WRITE completion that frees its slot may be one of
  // them); a batch held in an outer frame stalled such a wait until its deadline.
  size_t dispatch();

  ClientOptions o_;
  proto::ClientSettings settings_;  // what the protocol sees of o_ (and of the test hooks)
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::optional<control::ControlClient> ctl_;
  nlohmann::json layout_;
  std::unique_ptr<proto::ClientProtocol> proto_;
  bool polls_memory_ = false;     // proto_->polls_memory(), asked once
  bool followed_server_ = false;  // greet() opened the server's fabric in place of our guess
  uint32_t spins_ = 0;
  PollOptions poll_;
  std::unique_ptr<fabric::Waiter> waiter_;  // adaptive only
  uint32_t idle_rounds_ = 0;
  Clock::time_point idle_since_{};
  uint32_t sleep_us_ = PollOptions::kFirstSleepUs;
  Clock::time_point last_alive_check_{};
  // dispatch(): completions reaped, [batch_next_, batch_len_) not yet handed over.
  std::array<fabric::Completion, 16> batch_;
  size_t batch_next_ = 0, batch_len_ = 0;
};

// src/client/protocols.cc: the protocol called `name` in proto/registry.h, made by its
// folder's make_client(). Throws ClientError(kError) for an unknown name (with the list of
// known ones) or settings the protocol refuses.
std::unique_ptr<proto::ClientProtocol> make_client_protocol(std::string_view name,
                                                            proto::ClientHost& host,
                                                            const proto::ClientSettings& settings);

}  // namespace fabkv
