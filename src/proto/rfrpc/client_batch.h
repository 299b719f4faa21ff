// RF-RPC's batching on the client (RF-RPC sec. 4; the wire is proto/rfrpc/wire.h): small
// requests are buffered per worker and WRITten as one request batch when it holds N entries
// (the current batch size), when the next one would take it past L bytes, or when it has waited
// T; the worker answers with one result batch, which the client READs as it READs single
// results (F bytes, the rest when larger, again while not there). Up to W batches per worker
// are in flight (the paper's pipeline, RF-RPC sec. 4.1: batches go out while the calls without
// results stay under a threshold; ours is the window W), one per batch slot: a batch holds at
// least one call, so a call finds a free slot whenever its worker has fewer than W of our calls
// in flight, and waits only as src/client/client.h says async calls do. A result that did not
// fit its result batch is asked for again alone. With llimit set, the batch size follows
// RF-RPC eq. 3: every 100 calls, one smaller when more than alpha of them took longer than
// llimit, one larger when fewer than alpha / 10 did; the size travels in each request batch's
// auxiliary field.
//
// Owned by the rfrpc client (proto/rfrpc/client.cc), which routes to it; owner thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/client_protocol.h"
#include "proto/rpc/client.h"

namespace fabkv::rfrpc {

class Batcher {
 public:
  struct Config {
    uint32_t entries = 0;       // N
    uint32_t bytes = 2048;      // L
    uint32_t timeout_us = 100;  // T
    uint32_t llimit_us = 0;     // eq. 3 (0: the size stays N)
    uint32_t alpha_pct = 5;
  };
  // After the RPC client's open(): its layout (workers, client index, max_value) is known.
  // Throws ClientError(kMalformed) when the Welcome lacks the batch regions.
  Batcher(proto::ClientHost& host, rpc::RpcClient& rpc, const Config& config,
          const control::Welcome& welcome);
  ~Batcher();

  // Small enough to go in a batch (else the caller sends it alone).
  bool takes(const proto::ClientRequest& r) const;
  Status submit(const proto::ClientRequest& r, Callback&& cb);
  bool owns(const fabric::OpContext* ctx) const {
    return ctx != nullptr && (ctx->user == &kTxMarker || ctx->user == &kRxMarker);
  }
  size_t complete(fabric::Completion& c);
  // Sends batches that waited T, fetches results. Returns callbacks run.
  size_t poll();
  size_t expire(bool all);
  size_t in_flight() const;
  void counters(nlohmann::json* out) const;

 private:
  static inline char kTxMarker, kRxMarker;
  struct Entry {
    Callback cb;
    uint64_t t0_ns = 0;
  };
  struct Open {
    std::string payload;
    std::vector<Entry> entries;
    uint64_t opened_ns = 0;
  };
  struct Flight {
    fabric::OpContext tx_ctx, rx_ctx;
    bool busy = false;  // a batch in this slot awaits its results
    bool dead = false;  // given up on (timeout): freed when its results come or later
    uint32_t seq = 0;   // the batch's number in this slot
    uint32_t read_seq = 0;
    bool reading = false;
    size_t have = 0, read_end = 0;
    uint32_t fails = 0;
    uint64_t deadline_ns = 0;
    std::vector<Entry> entries;
    std::string payload;  // the request entries (to send one again alone)
  };
  struct WorkerState {
    Open open;
    std::vector<Flight> flights;  // one per batch slot (W); sized once: the contexts stay put
    uint32_t next_b = 0;          // where the search for a free slot starts
    uint32_t entry_seq = 0;
    bool sending = false;
    bool posting = false;  // a request batch's WRITE is being retried: no READs meanwhile
  };

  size_t send(uint32_t w);
  void post_read(uint32_t w, uint32_t b, size_t off, size_t len);
  size_t deliver(uint32_t w, uint32_t b);
  size_t fail(std::vector<Entry>& entries, Status st);
  void observe(uint64_t latency_ns);
  char* tx_slot(uint32_t w, uint32_t b) const;
  char* rx_slot(uint32_t w, uint32_t b) const;

  proto::ClientHost& host_;
  rpc::RpcClient& rpc_;
  const Config config_;
  fabric::Endpoint* ep_ = nullptr;
  uint32_t workers_ = 0;
  uint32_t slots_ = 0;  // batch slots per worker: the window W (wire.h)
  size_t bslot_ = 0, rslot_ = 0, max_value_ = 0;
  int timeout_ms_ = 2000;
  std::vector<fabric::RemoteRegion> batches_, bresults_;  // by worker
  std::unique_ptr<fabric::RegisteredBuffer> tx_, rx_;
  std::vector<WorkerState> workers_state_;
  std::string copy_;
  uint32_t size_ = 1;             // the batch size in use (N, or eq. 3's)
  uint64_t seen_ = 0, over_ = 0;  // eq. 3's sample: calls and those over llimit

  struct Counters {
    uint64_t batches = 0, batched = 0, reads = 0, failed = 0, second_reads = 0, torn = 0,
             overflows = 0, bad = 0, timeouts_sent = 0, resized = 0, errors = 0, seq_wraps = 0;
  };
  Counters counters_;
};

}  // namespace fabkv::rfrpc
