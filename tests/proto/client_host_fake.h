// A ClientHost (proto/client_protocol.h) without a session, a fabric or a server: what a
// protocol's client side can be tested against in-process. It counts every service the
// protocol asks of it, so that a test can check that a refused request touched nothing:
// asking for the fabric or the endpoint (the first step of sending anything) throws.
#pragma once

#include <cstddef>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "proto/client_protocol.h"
#include "proto/client_settings.h"

namespace fabkv::testing {

class FakeClientHost final : public proto::ClientHost {
 public:
  struct Calls {
    size_t fabric = 0, endpoint = 0, reap = 0, drive = 0, alive = 0, control = 0;
    size_t total() const { return fabric + endpoint + reap + drive + alive + control; }
  };

  fabric::Fabric& fabric() override {
    calls_.fabric++;
    throw std::logic_error("FakeClientHost has no fabric");
  }
  fabric::Endpoint& endpoint() override {
    calls_.endpoint++;
    throw std::logic_error("FakeClientHost has no endpoint");
  }
  const proto::ClientSettings& settings() const override { return settings_; }
  void reap() override { calls_.reap++; }
  void drive() override { calls_.drive++; }
  bool alive(bool) override {
    calls_.alive++;
    return !gone_;
  }
  nlohmann::json control_request(const nlohmann::json&) override {
    calls_.control++;
    return nlohmann::json::object();
  }

  // What the session would fill in from ClientOptions; set before making the protocol.
  proto::ClientSettings& mutable_settings() { return settings_; }
  // As the session does once the server's control connection closed.
  void set_gone() { gone_ = true; }
  const Calls& calls() const { return calls_; }

 private:
  proto::ClientSettings settings_;
  Calls calls_;
};

}  // namespace fabkv::testing
