// Test support: a real `fabkv-perf serve` process as the remote peer, and a client-side
// endpoint connected to it through the real control channel.
#pragma once

#include <signal.h>

#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "control/client.h"
#include "fabric/endpoint.h"
#include "perf/perf.h"
#include "perf/process.h"
#include "perf/wire.h"
#include "support/ready_process.h"

namespace fabkv::testing {

// The fabkv-perf executable, from the build (CMake passes its path).
inline std::string perf_binary() { return FABKV_PERF_BIN; }

// A `fabkv-perf serve` peer; stops on a STOP line.
class PeerServer : public ReadyProcess {
 public:
  explicit PeerServer(const std::string& provider)
      : ReadyProcess({perf_binary(), "serve", "--provider", provider, "--listen", "127.0.0.1:0",
                      "--core", "-1", "--stdin-control"},
                     Stop::kStdinLine) {}
};

// Our side: a fabric, an endpoint, a local registered buffer, and the peer's regions.
struct Connection {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::Endpoint> ep;
  std::unique_ptr<fabric::RegisteredBuffer> local;
  std::optional<control::ControlClient> ctl;
  fabric::PeerAddr peer = fabric::kNoPeer;
  fabric::RemoteRegion target, counters, readonly, writeonly;
  uint64_t area = 0;  // our part of the target region

  Connection(const std::string& provider, const PeerServer& server, perf::RunSpec spec = {},
             fabric::EndpointOptions eo = {}) {
    fabric::FabricOptions fo;
    fo.provider = provider;
    fo.quiet = true;
    fabric = fabric::Fabric::open(fo);
    ep = std::make_unique<fabric::Endpoint>(*fabric, eo);
    local = std::make_unique<fabric::RegisteredBuffer>(*fabric, 1 << 20,
                                                       fabric::Access::kRemoteReadWrite);
    control::Hello hello;
    hello.service = perf::kService;
    hello.provider = fabric->provider_name();
    hello.fabric_address = ep->name();
    hello.payload = perf::json_bytes({{"spec", perf::to_json(spec)},
                                      {"region", perf::region_to_json(local->remote())}});
    ctl.emplace(control::ControlClient::connect(server.address(), hello, 5000));
    const auto& w = ctl->welcome();
    peer = ep->insert_peer(w.fabric_addresses.at(0));
    for (const auto& r : w.regions) {
      fabric::RemoteRegion rr{r.addr, r.length, r.key, static_cast<fabric::Access>(r.access)};
      if (r.name == perf::kTargetRegion) target = rr;
      if (r.name == perf::kCounterRegion) counters = rr;
      if (r.name == perf::kReadOnlyRegion) readonly = rr;
      if (r.name == perf::kWriteOnlyRegion) writeonly = rr;
    }
    area = perf::bytes_json(w.payload).at("index").get<uint64_t>() * perf::kClientStride;
  }

  // Posts with retry while the queue is full or the peer is not yet connected (the first
  // operation to a new peer waits for its progress); completions reaped meanwhile are kept.
  template <class Post>
  long post(Post&& p, std::vector<fabric::Completion>* reaped) {
    Deadline d = Deadline::after_ms(5000);
    long ret;
    while ((ret = p()) == fabric::kAgain && !d.expired()) {
      fabric::Completion c[8];
      size_t n = ep->poll(c);
      for (size_t i = 0; i < n; ++i) reaped->push_back(std::move(c[i]));
    }
    return ret;
  }

  // Waits for `n` completions in total in `got` (some may have been reaped while posting).
  bool wait(size_t n, std::vector<fabric::Completion>* got, int ms = 5000) {
    if (got->size() >= n) return true;
    ep->wait(n - got->size(), Deadline::after_ms(ms), got);
    return got->size() >= n;
  }

  nlohmann::json server_counters() {
    return perf::bytes_json(ctl->request(perf::json_bytes({{"op", "counters"}}), 5000))
        .at("counters");
  }
};

}  // namespace fabkv::testing
