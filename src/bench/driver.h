// Driver: one system under test as fabkv-bench sees it — a fixed set of logical clients, each
// with its own connection (a fabkv::Client with its own endpoint, or a TCP socket), able to
// keep several requests outstanding. The runner (runner.h) feeds every driver the same
// operation streams with the same window, so the systems differ only in what is behind this
// interface.
//
// Threading: a Driver is used from one thread (the load generator's); completions run from
// poll() and may post new requests for the same client.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fabric/counters.h"

namespace fabkv::bench {

enum class OpStatus { kOk, kNotFound, kError };

// value is valid only during the call.
using Completion = std::function<void(OpStatus, std::string_view value)>;

// What the server side looked like at one moment (diffed around the measured interval).
struct ServerSample {
  std::optional<fabric::VerbSnapshot> verbs;  // fabkv only: summed over its workers
  std::optional<double> cpu_s;                // when we know the server's pid
  uint64_t evictions = 0;                     // cache engine: items lost to eviction
  std::optional<uint64_t> rounds;             // fabkv: worker poll rounds (summed over workers)
};

// What a protocol counted on the client side (pilaf: GETs, entry/extent READs, retries), summed
// over the logical clients; empty for protocols that count nothing.
using ProtocolCounters = std::map<std::string, uint64_t>;

class Driver {
 public:
  virtual ~Driver() = default;

  virtual std::string system() const = 0;    // "fabkv" | "memcached" | "redis" | "null"
  // fabkv: its access protocol (proto/registry.h); memcached: "text"; redis: "resp"; null: "none"
  virtual std::string protocol() const = 0;
  virtual size_t clients() const = 0;

  // Post one request for logical client c. False: it could not be sent (the connection
  // failed; error() says why) and `done` will not run.
  virtual bool get(size_t c, std::string_view key, Completion done) = 0;
  virtual bool put(size_t c, std::string_view key, std::string_view value, Completion done) = 0;
  // Drives client c's connection once; returns the completions it ran.
  virtual size_t poll(size_t c) = 0;

  // Largest value the system accepts (the fabkv layout's max_value; memcached's item size).
  virtual uint64_t max_value() const = 0;
  // Client-side verb counters summed over the logical clients (fabkv only).
  virtual std::optional<fabric::VerbSnapshot> client_verbs() const { return std::nullopt; }
  virtual ProtocolCounters protocol_counters() const { return {}; }
  virtual ServerSample sample_server() = 0;
  // The first failure seen (connection lost, protocol error), empty when none.
  virtual std::string error() const = 0;
};

// Connection parameters the runner hands to every driver factory.
struct DriverOptions {
  std::string address;    // HOST:PORT of the server (control channel for fabkv)
  std::string protocol;   // fabkv access protocol, a name of proto/registry.h
  std::string provider;   // fabkv provider
  std::string secret;     // fabkv control secret
  size_t clients = 1;     // logical clients (connections)
  uint32_t window = 1;    // outstanding requests per client (sizes buffers)
  int timeout_ms = 5000;  // per-request bound
  bool pilaf_parallel_probes = false;  // fabkv:pilaf: READ the three entries at once
  pid_t server_pid = 0;   // when we started the server: for its CPU accounting (0: unknown)
  size_t load_threads = 1;  // load threads that will drive the clients (runner.h)
};

// Each throws std::runtime_error with a one-line reason when it cannot connect.
std::unique_ptr<Driver> make_fabkv_driver(const DriverOptions& o);
std::unique_ptr<Driver> make_memcached_driver(const DriverOptions& o);
std::unique_ptr<Driver> make_redis_driver(const DriverOptions& o);
// The null target (null_driver.cc): no server; every request completes at the client's next
// poll() against an in-process table. For measuring the load generator itself.
std::unique_ptr<Driver> make_null_driver(const DriverOptions& o);

// utime+stime of a process in seconds from /proc/<pid>/stat; nullopt when unreadable.
std::optional<double> process_cpu_seconds(pid_t pid);

}  // namespace fabkv::bench
