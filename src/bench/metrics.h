// A run's record: the Bench JSON of docs/architecture.md ("The stable interfaces"), one object per
// run and system, plus what fabkv-bench adds (machine, command, timestamp, GET checking, the
// request mix and the raw verb counts behind the per-request figures).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/runner.h"

namespace fabkv::bench {

struct RunContext {
  std::string system;  // "fabkv" | "memcached" | "redis"
  // fabkv: its protocol (proto/registry.h); "text" (memcached) | "resp" (redis)
  std::string protocol;
  std::string provider;  // fabkv's provider; "tcp" for the baselines (loopback sockets)
  RunSpec spec;
  std::string command;  // the fabkv-bench command line
  int client_core = 1, server_core = 0;
  // fabkv: the workers' poll rounds per second with no load (measured before loading); with
  // the rounds in the interval it gives the share of the worker's time the run took.
  std::optional<double> server_idle_rounds_per_s;
};

// Throughput, latency quantiles (us), per-client ops, uniformity ratio (max/min per-client
// ops; null when a client completed nothing), fabric ops and bytes per request (client and
// server verb counters together; null for the baselines), server CPU seconds.
nlohmann::json make_record(const RunContext& ctx, const RunResult& r);

// The docs/architecture.md fields and their types; returns what is missing or mistyped
// (empty: valid).
std::vector<std::string> validate_record(const nlohmann::json& j);

// {"hostname","cpus","model","kernel","loadavg_1m"} of this machine.
nlohmann::json machine_info();

// max/min of per-client ops; -1 when a client has 0 ops (written as null).
double uniformity_ratio(const std::vector<uint64_t>& per_client_ops);

}  // namespace fabkv::bench
