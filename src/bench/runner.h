// The load generator: load threads (one by default, pinned to the client core) drive the
// logical clients of a Driver round-robin, keeping `window` requests outstanding per client,
// from the shared workload generator. With `threads` N > 1 the clients are split into N
// contiguous slices, each driven by its own thread pinned to its own core (client core, +1,
// ...), with its own latency histogram and check counters, merged at the end. On the 2-core
// development machines one thread is what fits next to a server on the other core
// (PROVIDERS.md: memcached -t 2 is slower than -t 1 for the same reason); on a larger machine
// more threads let the generator saturate a server core.
//
// Client modes (RunSpec::mode, docs/bench.md "Client modes"). Shared: the above, a load thread
// round-robins over its slice, so every client of a slice is posted to and polled as often as
// the others and their counts come out equal by construction (the generator's cost and the
// server's capacity with the least client overhead). Independent: one load thread per logical
// client, posting up to `window` and polling only its own connection, so that a slow client
// holds nobody else up and per-client counts measure fairness (the survey's fig. 20). Its
// threads are spread over `threads` cores from the client core (default: all on the client
// core, so 8 clients on a 2-core machine share core 1 with the scheduler deciding who runs),
// and a thread whose round posted and completed nothing sleeps on its connection
// (Driver::wait: memcached, redis) or, where there is nothing to sleep on, yields its core.
//
// Measurement: warm-up, then a fixed interval; a request counts when it completes inside the
// interval (its latency from post to completion). Verb counters and server CPU are sampled at
// the interval's edges by thread 0 (which drives client 0). Every GET is checked against the
// generator's values.
//
// Cost per request (docs/results/loadgen-2026-11-23.md): no allocation and no std::function
// on the data path (requests live in a fixed table of window slots per client, drivers get a
// 16-byte Completion); one clock read per post and one per poll that completed anything,
// shared by the completions it ran.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/workload.h"
#include "common/histogram.h"

namespace fabkv::bench {

enum class ClientMode { kShared, kIndependent };
const char* to_string(ClientMode m);  // "shared" | "independent"
// Parses "shared" | "independent"; throws std::invalid_argument otherwise.
ClientMode parse_client_mode(const std::string& s);

struct RunSpec {
  WorkloadSpec workload;
  size_t clients = 1;   // the first `clients` logical clients of the driver
  uint32_t window = 1;  // outstanding requests per client
  // Shared: load threads (at most `clients` are used). Independent: the cores its one thread
  // per client is spread over, from the client core.
  size_t threads = 1;
  ClientMode mode = ClientMode::kShared;
  double warmup_s = 0.5;
  double duration_s = 5;
};

struct GetCheck {
  uint64_t checked = 0;            // GETs answered with a value, each compared
  uint64_t mismatches = 0;         // ... whose value is not one the generator wrote for the key
  uint64_t misses = 0;             // GETs answered "not found"
  uint64_t unexpected_misses = 0;  // ... for a key known to be stored when the GET was posted
};

struct RunResult {
  uint64_t ops = 0;       // completed in the interval (a read-modify-write is one op)
  uint64_t requests = 0;  // GETs + PUTs completed in the interval (RMW counts two, a multi-get one)
  uint64_t gets = 0, puts = 0;
  double elapsed_s = 0;  // the measured interval, as it really was
  std::vector<uint64_t> per_client_ops;
  LatencyHistogram latency;
  std::optional<fabric::VerbSnapshot> client_verbs, server_verbs;  // interval diffs
  std::optional<double> server_cpu_s;
  std::optional<uint64_t> server_rounds;  // fabkv workers' poll rounds in the interval
  ProtocolCounters protocol;              // client-side protocol counters, interval diff
  // A cluster: requests sent to each server in the interval (Driver::server_requests; each
  // thread's clients from when it starts measuring to when it stops posting); else empty.
  std::vector<uint64_t> server_requests;
  uint64_t evictions = 0;  // server-side evictions so far (cache engine)
  GetCheck check;
  // The load generator's own cost: CPU time of the load thread(s) over the interval
  // (CLOCK_THREAD_CPUTIME_ID), and how many threads drove the clients.
  double load_cpu_s = 0;
  size_t load_threads = 1;
  ClientMode mode = ClientMode::kShared;
};

// Progress of the load phase: (done, total, seconds since start).
using LoadProgress = std::function<void(uint64_t done, uint64_t total, double elapsed_s)>;

class Runner {
 public:
  // `core`: the load generator's core (-1: unpinned); the calling thread is pinned to it for
  // the duration of load() and run() and drives the first slice of clients; load thread i is
  // pinned to core + i (independent mode: core + i % spec.threads).
  Runner(Driver& driver, int core) : driver_(driver), core_(core) {}
  // When *stop becomes true (a signal handler), load() and run() drain what is in flight and
  // throw std::runtime_error("interrupted"), so servers and endpoints are closed on the way out.
  void set_stop_flag(const std::atomic<bool>* stop) { stop_ = stop; }

  // Writes version 0 of keys [0, ceil(fill*keys)) with every client pipelining `window`
  // PUTs. Returns the seconds it took. Throws std::runtime_error on a failed request.
  double load(const WorkloadSpec& w, uint32_t window, const LoadProgress& progress);
  // One measured run. Throws std::runtime_error when a request fails or never completes.
  RunResult run(const RunSpec& spec, std::shared_ptr<const ScrambledZipfian> zipf);

 private:
  class LoadThread;  // runner.cc
  friend class LoadThread;

  void reset_stored(uint64_t keys);
  bool stopped() const;

  Driver& driver_;
  int core_;
  const std::atomic<bool>* stop_ = nullptr;
  // key id -> known to be in the store (loaded, or PUT by any load thread): 0 -> 1 only,
  // relaxed atomics (a thread may see another's PUT late: fewer misses flagged, never a false one).
  std::unique_ptr<std::atomic<uint8_t>[]> stored_;
  uint64_t stored_keys_ = 0;
};

}  // namespace fabkv::bench
