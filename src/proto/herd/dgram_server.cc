// A worker's datagram endpoint for HERD's answers (proto/herd/dgram.h).
#include <fmt/format.h>

#include "fabric/error.h"
#include "proto/herd/dgram.h"

namespace fabkv::herd {

namespace {

// A full send queue is polled this many times before the answer is dropped (a lost datagram,
// which the client's retry covers): the worker never waits on one client's answers.
constexpr int kSendTries = 4;

fabric::EndpointOptions sender_options(uint32_t max_clients) {
  fabric::EndpointOptions eo;
  eo.av_size = max_clients;
  eo.tx_depth = 1024;
  eo.rx_depth = 16;
  eo.cq_depth = 2048;
  return eo;
}

}  // namespace

DgramSender::DgramSender(const fabric::Fabric& reliable, uint32_t max_clients, uint32_t test_drop,
                         bool quiet)
    : fabric_(open_dgram_fabric(reliable, quiet)),
      ep_(std::make_unique<fabric::Endpoint>(*fabric_, sender_options(max_clients))),
      own_name_(ep_->name()),
      peers_(max_clients, fabric::kNoPeer),
      ctx_(1024),
      drop_left_(test_drop) {}

DgramSender::~DgramSender() {
  ep_.reset();  // before the fabric it belongs to
}

std::string DgramSender::address_problem(std::span<const uint8_t> name) const {
  return fabric::peer_name_problem(*fabric_, own_name_, name);
}

void DgramSender::add_st(uint32_t c, std::span<const uint8_t> name) {
  remove_st(c);
  try {
    peers_[c] = ep_->insert_peer(name);
  } catch (const fabric::FabricError&) {
    // admit() checked its shape; a provider that still refuses it leaves the client without
    // answers, counted, and its requests time out.
    counters_.bad_address.fetch_add(1, std::memory_order_relaxed);
  }
}

void DgramSender::remove_st(uint32_t c) {
  if (peers_[c] == fabric::kNoPeer) return;
  ep_->remove_peer(peers_[c]);
  peers_[c] = fabric::kNoPeer;
}

void DgramSender::send_st(uint32_t c, fabric::LocalBuffer b) {
  if (peers_[c] == fabric::kNoPeer) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (drop_left_ > 0) {  // TEST ONLY (herd::Options::test_drop_responses)
    drop_left_--;
    counters_.dropped_test.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  fabric::PostOptions po;
  po.inlined = b.len <= ep_->inject_size();
  po.signaled = !po.inlined;
  for (int attempt = 0; attempt < kSendTries; ++attempt) {
    fabric::OpContext* ctx = nullptr;
    if (po.signaled) {
      if (unreaped_ >= ctx_.size()) poll_st();
      ctx = &ctx_[next_ctx_];
    }
    const long ret = ep_->send(b, peers_[c], ctx, po);
    if (ret == 0) {
      if (po.signaled) {
        next_ctx_ = (next_ctx_ + 1) % ctx_.size();
        unreaped_++;
      }
      counters_.sent.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (ret != fabric::kAgain) {
      counters_.errors.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    poll_st();
  }
  counters_.queue_full.fetch_add(1, std::memory_order_relaxed);
}

void DgramSender::poll_st() {
  // Inlined sends raise no completion: nothing to reap, and no provider call (on udp a CQ read
  // is a recvmsg on the endpoint's socket).
  if (unreaped_ == 0) return;
  fabric::Completion cs[32];
  size_t n = 0;
  do {
    n = ep_->poll(cs);
    for (size_t i = 0; i < n; ++i) {
      if (cs[i].error != 0) counters_.errors.fetch_add(1, std::memory_order_relaxed);
      if (!cs[i].inbound && unreaped_ > 0) unreaped_--;
    }
  } while (n == std::size(cs));
}

nlohmann::json DgramSender::stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {{"dgram_sent", r(counters_.sent)},
          {"dgram_oversized", r(counters_.oversized)},
          {"dgram_queue_full", r(counters_.queue_full)},
          {"dgram_send_errors", r(counters_.errors)},
          {"dgram_dropped_test", r(counters_.dropped_test)},
          {"dgram_bad_address", r(counters_.bad_address)}};
}

}  // namespace fabkv::herd
