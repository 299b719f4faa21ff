// Driver: one system under test as fabkv-bench sees it — a fixed set of logical clients, each
// with its own connection (a fabkv::Client with its own endpoint, or a TCP socket), able to
// keep several requests outstanding. The runner (runner.h) feeds every driver the same
// operation streams with the same window, so the systems differ only in what is behind this
// interface.
//
// Threading: a logical client is single-threaded: get(c), put(c) and poll(c) for one c are
// called from one thread at a time, and its completions run on that thread (from poll(c), or
// from a get/put of the same client that has to wait for room). Different clients may be
// driven from different threads at the same time (runner.h's --threads): a driver keeps no
// unsynchronized state shared between clients (fabkv: one fabkv::Client, endpoint and fabric
// per logical client; fabkv-cluster: one fabkv::Cluster, with a Client per server, per logical
// client; memcached/redis: one socket and buffers each; the first-error text is
// under a lock). clients(), max_value(), system() and protocol() are constant. client_verbs()
// may be called from any thread; protocol_counters(first, n) only from the thread driving
// those clients; sample_server() only from the thread driving client 0 (fabkv asks over
// client 0's control connection); error() once no thread is driving.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/cluster.h"
#include "fabric/counters.h"

namespace fabkv::bench {

enum class OpStatus { kOk, kNotFound, kError };

// Where requests report their end: the runner's per-client table of outstanding requests.
class CompletionSink {
 public:
  // `value` (a GET's answer; for kError the driver's reason when it has one, else empty) is
  // valid only during the call. May post new requests for the same client.
  virtual void complete(uint64_t tag, OpStatus s, std::string_view value) = 0;

 protected:
  ~CompletionSink() = default;
};

// A request's completion: the sink and the tag it gave the request (the runner's slot). Two
// words, trivially copyable: drivers keep it in their own tables, and the fabkv driver's
// callback holding it fits std::function's inline buffer, so posting allocates nothing.
struct Completion {
  CompletionSink* sink = nullptr;
  uint64_t tag = 0;
  void operator()(OpStatus s, std::string_view value) const { sink->complete(tag, s, value); }
};
static_assert(std::is_trivially_copyable_v<Completion> && sizeof(Completion) == 16);

// What the server side looked like at one moment (diffed around the measured interval).
struct ServerSample {
  std::optional<fabric::VerbSnapshot> verbs;  // fabkv only: summed over its workers
  std::optional<double> cpu_s;                // when we know the server's pid
  uint64_t evictions = 0;  // cache engine: items lost to eviction (log wrap or a full index bucket)
  std::optional<uint64_t> rounds;  // fabkv: worker poll rounds (summed over workers)
};

// What a protocol counted on the client side (pilaf: GETs, entry/extent READs, retries), summed
// over the logical clients; empty for protocols that count nothing.
using ProtocolCounters = std::map<std::string, uint64_t>;

class Driver {
 public:
  virtual ~Driver() = default;

  // "fabkv" | "fabkv-cluster" | "memcached" | "redis" | "null"
  virtual std::string system() const = 0;
  // fabkv: its access protocol (proto/registry.h); memcached: "text"; redis: "resp"; null: "none"
  virtual std::string protocol() const = 0;
  virtual size_t clients() const = 0;

  // Post one request for logical client c. False: it could not be sent (the connection
  // failed; error() says why) and `done` will not run. The views live until the call returns.
  virtual bool get(size_t c, std::string_view key, Completion done) = 0;
  virtual bool put(size_t c, std::string_view key, std::string_view value, Completion done) = 0;
  // A multi-get of keys.size() keys in one request (memcached's `get k1 k2 ...`, redis's MGET):
  // `done` runs once per key, in the keys' order, with that key's status and value; a failed
  // connection runs it once per key with kError. Only where supports_multi_get(); false as get().
  virtual bool supports_multi_get() const { return false; }
  virtual bool multi_get(size_t /*c*/, std::span<const std::string_view> /*keys*/,
                         Completion /*done*/) {
    return false;
  }
  // Drives client c's connection once; returns the completions it ran.
  virtual size_t poll(size_t c) = 0;
  // Sleeps until client c's connection has something for poll(c) (or can take more of what
  // was posted), at most `timeout_ms`; false, at once, when the driver has nothing to sleep
  // on. The runner's independent mode calls it when a client's round did nothing, so that
  // clients outnumbering their cores sleep instead of spinning (runner.h).
  virtual bool wait(size_t /*c*/, int /*timeout_ms*/) { return false; }

  // Largest value the system accepts (the fabkv layout's max_value; memcached's item size).
  virtual uint64_t max_value() const = 0;
  // Client-side verb counters summed over the logical clients (fabkv only).
  virtual std::optional<fabric::VerbSnapshot> client_verbs() const { return std::nullopt; }
  // Protocol counters summed over clients [first, first + n).
  virtual ProtocolCounters protocol_counters(size_t /*first*/, size_t /*n*/) const { return {}; }
  virtual ServerSample sample_server() = 0;
  // The first failure seen (connection lost, protocol error), empty when none.
  virtual std::string error() const = 0;
  // A sequencer (fabkv:seq-*, docs/sequencer.md) checks the values its clients were handed
  // since the driver connected: {"values", "unique", "duplicates", "per_client_increasing",
  // "decreases", "gaps", "min", "max", "failed"}. nullopt for key-value systems. Only while
  // no thread is driving.
  virtual std::optional<nlohmann::json> sequence_check() const { return std::nullopt; }
  // A cluster (fabkv-cluster): the requests each of its servers was sent so far (Cluster's
  // counters: a PUT counts once per replica), summed over clients [first, first + n). Empty
  // for a single server. Threading as protocol_counters().
  virtual std::vector<uint64_t> server_requests(size_t /*first*/, size_t /*n*/) const { return {}; }
};

// Connection parameters the runner hands to every driver factory.
struct DriverOptions {
  std::string address;                 // HOST:PORT of the server (control channel for fabkv)
  std::string protocol;                // fabkv access protocol, a name of proto/registry.h
  std::string provider;                // fabkv provider
  std::string secret;                  // fabkv control secret
  size_t clients = 1;                  // logical clients (connections)
  uint32_t window = 1;                 // outstanding requests per client (sizes buffers)
  int timeout_ms = 5000;               // per-request bound
  bool pilaf_parallel_probes = false;  // fabkv:pilaf: READ the three entries at once
  pid_t server_pid = 0;  // when we started the server: for its CPU accounting (0: unknown)
  // fabkv-cluster: the servers and the cluster's settings (its `client` options are filled
  // from the fields above), and the pids of those we started (their CPU is summed).
  std::optional<ClusterOptions> cluster;
  std::vector<pid_t> server_pids;
  size_t load_threads = 1;  // load threads that will drive the clients (runner.h)
  // The null target only: client 0 sleeps this long in each poll() that completes something,
  // as a slow connection would hold its caller (tests of the client modes, runner.h).
  uint32_t null_slow_client_us = 0;
};

// Each throws std::runtime_error with a one-line reason when it cannot connect.
// fabkv: one fabkv::Client per logical client; with o.cluster, one fabkv::Cluster per logical
// client (system "fabkv-cluster"), connected to every server before it returns.
std::unique_ptr<Driver> make_fabkv_driver(const DriverOptions& o);
// `system`/`protocol` label the results: "memcached"/"text" for memcached itself, "fabkv"/
// "memcached" for fabkv-server's memcached front end (fabkv:memcached), same driver.
std::unique_ptr<Driver> make_memcached_driver(const DriverOptions& o,
                                              const std::string& system = "memcached",
                                              const std::string& protocol = "text");
std::unique_ptr<Driver> make_redis_driver(const DriverOptions& o);
// The null target (null_driver.cc): no server; every request completes at the client's next
// poll() against an in-process table. For measuring the load generator itself.
std::unique_ptr<Driver> make_null_driver(const DriverOptions& o);

// utime+stime of a process in seconds from /proc/<pid>/stat; nullopt when unreadable.
std::optional<double> process_cpu_seconds(pid_t pid);

}  // namespace fabkv::bench
