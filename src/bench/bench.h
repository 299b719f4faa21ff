// fabkv-bench's harness: expands the command line into runs (systems x value size x
// distribution x read ratio x clients), starts the servers it needs, loads each store, runs,
// and appends one JSON line per completed run. docs/bench.md is the user's guide.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "bench/workload.h"
#include "proto/registry.h"

namespace fabkv::bench {

struct BenchOptions {
  // "fabkv:<protocol>" (proto/registry.h), "fabkv-cluster:<protocol>", "memcached", "redis",
  // "null".
  std::vector<std::string> systems = {std::string("fabkv:") + proto::info(proto::kDefault).name};
  std::string provider = "shm";  // fabkv's libfabric provider
  std::string server;            // HOST:PORT of a running fabkv-server ("" = start one)
  std::string secret;            // its control secret
  // fabkv-cluster systems (client/cluster.h): the servers of a TOML cluster file, already
  // running, or else `cluster_servers` fabkv-servers it starts (0: 3), and the replicas
  // (0: the file's; 1 for the servers it starts).
  std::string cluster_file;
  size_t cluster_servers = 0;
  uint32_t replicas = 0;
  // Sweep dimensions (a plain run has one value in each).
  std::vector<double> read_ratios = {0.95};
  std::vector<std::string> distributions = {"uniform"};
  std::vector<uint32_t> value_sizes = {32};
  std::vector<size_t> clients = {8};
  std::string workload;  // YCSB core workload letter: sets the read ratio (and RMW for F)
  WorkloadSpec base;     // keys, fill, key_size, zipf_theta, seed
  uint32_t window = 1;
  double duration_s = 5;
  double warmup_s = 0.5;
  int client_core = 1, server_core = 0;
  // Load threads: the clients of a run are split over them, thread i pinned to client_core + i
  // (runner.h). At most the run's client count are used.
  size_t threads = 1;
  // Each run once per mode (runner.h): shared, or a load thread per client (independent),
  // spread over `threads` cores from client_core.
  std::vector<ClientMode> client_modes = {ClientMode::kShared};
  std::string server_memory = "256M";
  // More fabkv-server arguments for the servers it starts (e.g. a protocol's knobs:
  // --rfrpc-mode fetch); passed as they are, after fabkv-bench's own.
  std::vector<std::string> server_args;
  int timeout_ms = 5000;
  std::string json_path;                                   // append JSON Lines here ("" = none)
  std::string fabkv_server_bin, memcached_bin, redis_bin;  // "" = defaults
  std::string command;                                     // for the records
  bool quiet = false;                                      // no progress lines
  bool pilaf_parallel_probes = false;  // fabkv:pilaf clients READ h1, h2, h3 at once
  // Set by a signal handler: the current run is abandoned (no line written), servers stopped.
  const std::atomic<bool>* stop = nullptr;
};

// Runs everything. Throws std::invalid_argument (bad parameters, before anything runs) or
// std::runtime_error (a server that is not there or fails to start, a failed run) with a
// one-line message; lines of runs that completed before stay in the file, nothing partial is
// written. Returns 0, or 3 when a GET returned a wrong value or an unexplained miss.
int run_bench(const BenchOptions& o);

// The checks run_bench does first, exposed for tests.
void validate(const BenchOptions& o);

}  // namespace fabkv::bench
