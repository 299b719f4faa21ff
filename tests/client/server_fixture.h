// What the end-to-end tests of the protocols that bring their own engine (pilaf, farm, drtm)
// share: a fabkv-server process with the tests' defaults, a fixture parameterised by the
// provider, and self-describing values that a torn or foreign copy cannot imitate.
// The including test target defines FABKV_SERVER_BIN (tests/client/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "support/ready_process.h"
#include "values.h"

#ifndef FABKV_SERVER_BIN
#error "tests/client/server_fixture.h needs FABKV_SERVER_BIN"
#endif

namespace fabkv::testing {

// fabkv-server on any port, unpinned, 64 MiB, warnings only, plus `extra`; SIGTERM at the end.
// Throws (ReadyProcess) when the server refuses to start.
class KvServer : public ReadyProcess {
 public:
  KvServer(const std::string& provider, const std::string& protocols,
           const std::vector<std::string>& extra = {})
      : ReadyProcess(argv(provider, protocols, extra), Stop::kSigterm) {}

 private:
  static std::vector<std::string> argv(const std::string& provider, const std::string& protocols,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> a = {FABKV_SERVER_BIN,
                                  "--provider",
                                  provider,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--protocols",
                                  protocols,
                                  "--cores",
                                  "-1",
                                  "--memory",
                                  "64M",
                                  "--log",
                                  "warn"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

// GetParam() is the provider.
class ProviderE2E : public ::testing::TestWithParam<std::string> {
 protected:
  void start_server(const std::string& protocols, const std::vector<std::string>& extra = {}) {
    server_ = std::make_unique<KvServer>(GetParam(), protocols, extra);
  }
  ClientOptions options(const std::string& protocol) const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam();
    o.protocol = protocol;
    o.timeout_ms = 10000;  // two cores shared with busy-polling workers and the rest of CI
    return o;
  }
  static uint64_t counter(const Client& c, const char* name) {
    return c.protocol_counters().value(name, uint64_t{0});
  }
  static uint64_t worker_sum(const nlohmann::json& stats, const char* name) {
    uint64_t n = 0;
    for (const auto& w : stats.at("workers")) n += w.value(name, uint64_t{0});
    return n;
  }
  std::unique_ptr<KvServer> server_;
};

}  // namespace fabkv::testing
