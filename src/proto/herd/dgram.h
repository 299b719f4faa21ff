// HERD's answers by datagram (HERD sec. 3.3, 4.3, fig. 6; docs/server.md, "HERD's answers by
// datagram"): requests arrive as always (WRITEs into the worker's request region, or SENDs, over
// the reliable endpoint), answers leave as one datagram each from one datagram endpoint per
// worker to the client's datagram endpoint, whose address the client gives in its Hello. The
// server keeps no connection for a client's answers: an address in its worker's address vector.
//
// The datagram endpoints are libfabric's FI_EP_DGRAM beside the reliable fabric: the udp
// provider beside tcp (fabric/fabric.cc). verbs offers its UD endpoints only with the
// FI_MSG_PREFIX mode, which the fabric layer does not take yet (docs/server.md, "Not on verbs
// yet"): there the server stops at start. A datagram may be lost
// (or arrive twice, or late): the client's timeout and bounded retry cover a lost one
// (proto/herd/client.cc), and sequence numbers drop duplicates and late ones (rpc/client.h).
//
// The handshake (keys of the Hello and of the layout):
//   Hello "responses": "follow" (a client that takes either and has no datagram endpoint
//     yet), "dgram" with "dgram_address" (its endpoint's name, bytes); absent: a client that
//     takes answers only by rdm (refused by a dgram server, naming both sides).
//   Layout (DgramLayout): "responses" "rdm"|"dgram"; with dgram, "dgram_provider" (the
//     provider the client must open: "udp", "verbs") and "dgram_max" (the largest datagram;
//     the layout's max_value is capped so that a value's answer fits in one).
//   A "follow" client that learns "dgram" opens its endpoint and says Hello again.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <netdb.h>
#include <rdma/fabric.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "fabric/endpoint.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"
#include "fabric/provider.h"

namespace fabkv::herd {

struct DgramLayout {
  std::string responses = "rdm";  // herd::to_string(Responses)
  std::string dgram_provider;     // dgram: the provider of the worker's datagram endpoints
  size_t dgram_max = 0;           // dgram: the largest datagram (header and value)
};
inline void to_json(nlohmann::json& j, const DgramLayout& l) {
  j = {{"responses", l.responses}};
  if (l.responses != "rdm") {
    j["dgram_provider"] = l.dgram_provider;
    j["dgram_max"] = l.dgram_max;
  }
}
// A server before datagram answers says nothing: rdm.
inline void from_json(const nlohmann::json& j, DgramLayout& l) {
  l.responses = j.value("responses", std::string("rdm"));
  if (l.responses == "rdm") return;
  j.at("dgram_provider").get_to(l.dgram_provider);
  j.at("dgram_max").get_to(l.dgram_max);
}

// The numeric IP address `f`'s endpoints bind to ("127.0.0.1"), or "" when its source address
// is not an IP one.
inline std::string source_host(const fabric::Fabric& f) {
  const fi_info* info = f.info();
  const auto* sa = static_cast<const sockaddr*>(info->src_addr);
  if (sa == nullptr || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return "";
  if (info->addr_format != FI_SOCKADDR_IN && info->addr_format != FI_SOCKADDR_IN6 &&
      info->addr_format != FI_SOCKADDR)
    return "";
  char host[NI_MAXHOST] = {};
  if (getnameinfo(sa, static_cast<socklen_t>(info->src_addrlen), host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

// The datagram fabric beside `reliable`, bound to the same address: udp beside tcp. Throws
// FabricError where there is none (shm offers only rdm endpoints; verbs: FI_MSG_PREFIX).
inline std::unique_ptr<fabric::Fabric> open_dgram_fabric(const fabric::Fabric& reliable,
                                                         bool quiet) {
  fabric::FabricOptions fo;
  fo.provider = fabric::core_provider(reliable.provider_name());
  fo.type = fabric::EndpointType::kDgram;
  fo.bind_host = source_host(reliable);
  if (fo.bind_host == "0.0.0.0" || fo.bind_host == "::") fo.bind_host.clear();
  fo.quiet = quiet;
  return fabric::Fabric::open(fo);
}

// A worker's datagram endpoint: one address per client in its address vector, one datagram
// per answer (server side; worker thread except stats()).
class DgramSender {
 public:
  struct Counters {
    std::atomic<uint64_t> sent{0}, oversized{0}, queue_full{0}, errors{0}, dropped_test{0},
        bad_address{0};
  };
  // Throws FabricError (no datagram endpoints beside `reliable`).
  DgramSender(const fabric::Fabric& reliable, uint32_t max_clients, uint32_t test_drop, bool quiet);
  ~DgramSender();

  fabric::Fabric& fabric() { return *fabric_; }
  const fabric::Fabric& fabric() const { return *fabric_; }
  size_t max_message() const { return fabric_->max_msg_size(); }
  // "" when the fabric can take `name` as a client's address; else why not (control thread:
  // reads only the endpoint's name, constant).
  std::string address_problem(std::span<const uint8_t> name) const;
  void add_st(uint32_t c, std::span<const uint8_t> name);
  void remove_st(uint32_t c);
  // One datagram to client c, or a counted drop (no address, queue full, provider error).
  void send_st(uint32_t c, fabric::LocalBuffer b);
  void note_oversized() { counters_.oversized.fetch_add(1, std::memory_order_relaxed); }
  // Reaps the completions of signaled sends (those over the inject size).
  void poll_st();
  nlohmann::json stats() const;
  fabric::VerbSnapshot verbs() const { return ep_->counters().snapshot(); }

 private:
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::vector<uint8_t> own_name_;
  std::vector<fabric::PeerAddr> peers_;  // per client index; kNoPeer when none
  std::vector<fabric::OpContext> ctx_;   // signaled sends: round-robin contexts
  size_t next_ctx_ = 0, unreaped_ = 0;
  uint32_t drop_left_ = 0;
  Counters counters_;
};

// A client's datagram endpoint and the receive buffers its answers land in (client side,
// owner thread).
class DgramReceiver {
 public:
  struct Counters {
    uint64_t received = 0, answered = 0, late = 0, duplicate = 0, garbage = 0, errors = 0;
  };
  // Throws FabricError (no datagram endpoints beside `reliable`).
  explicit DgramReceiver(const fabric::Fabric& reliable);
  ~DgramReceiver();

  std::vector<uint8_t> name() const { return ep_->name(); }
  // Its name as text ("fi_sockaddr_in://127.0.0.1:40000" on udp), for logs and tests.
  const std::string& address() const { return address_; }
  const std::string& provider() const { return fabric_->provider_name(); }
  size_t max_message() const { return fabric_->max_msg_size(); }
  // Posts n receive buffers of `size` bytes each (the first time, or again for a new layout).
  void post(size_t n, size_t size);
  // Reaps what arrived, up to kPollMax datagrams: f(bytes, len) per datagram, then its buffer
  // is posted again. udp takes one datagram off its socket per CQ read (its progress), so the
  // CQ is read until it is empty: the answers of a window that arrived together are taken in
  // one call, not one per round of the caller's loop.
  static constexpr size_t kPollMax = 16;
  template <class F>
  size_t poll(F&& f) {
    size_t total = 0;
    while (total < kPollMax) {
      fabric::Completion cs[kPollMax];
      const size_t n = ep_->poll(std::span(cs, kPollMax - total));
      for (size_t i = 0; i < n; ++i) take(cs[i], f);
      total += n;
      if (n == 0) break;
    }
    return total;
  }
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }
  const fabric::VerbCounters& verbs() const { return ep_->counters(); }
  fabric::Endpoint& endpoint() { return *ep_; }

 private:
  template <class F>
  void take(const fabric::Completion& c, F& f) {
    const size_t slot = c.context != nullptr ? c.context->tag : rx_ctx_.size();
    if (slot >= rx_ctx_.size()) return;
    if (c.error == 0) {
      counters_.received++;
      f(rx_->data() + slot * size_, std::min(c.len, size_));
    } else if (c.error != 125 /* ECANCELED: closing */) {
      counters_.errors++;  // a datagram the provider could not deliver whole (truncated)
    }
    repost(slot);
  }
  void repost(size_t slot);
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::unique_ptr<fabric::RegisteredBuffer> rx_;
  std::vector<fabric::OpContext> rx_ctx_;
  size_t size_ = 0;
  std::string address_;
  Counters counters_;
};

}  // namespace fabkv::herd
