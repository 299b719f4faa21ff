// `fabkv-bench calibrate`: RF-RPC's selection of R (failed fetches before a call is slow) and F
// (bytes a client READs first) by enumeration (RF-RPC sec. 3.2, eq. 1-2), from runs it makes on
// this machine's fabric. docs/rfrpc.md, "Choosing R and F", is the user's guide.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace fabkv::bench {

// One processing time of the `delay` sweep: rfrpc in fetch-only and in reply-only mode.
struct DelayPoint {
  uint64_t delay_ns = 0;
  double fetch_ops = 0, reply_ops = 0;  // throughput
  double reads_per_call = 0;            // fetch mode: fetch READs per call
};

// N, the bound of R (RF-RPC sec. 3.2, fig. 5): at the smallest processing time where remote
// fetching is no more than 10% faster than server-reply, the failed fetches a call needed there
// (READs per call - 1, at least 1). None when fetching stays ahead at every point. Points in
// any order. `log` (if given) gets one line per point.
std::optional<uint32_t> choose_retries(std::vector<DelayPoint> points, std::string* log = nullptr);

// Eq. 2: with I(F) the measured throughput for each fetch size F (results that always fit),
// and results of sizes S_i with weights w_i, F maximises sum_i w_i (I(F) if F >= S_i else
// I(F) / 2); ties go to the smaller F. None when `throughput` is empty.
std::optional<uint32_t> choose_fetch_size(const std::map<uint32_t, double>& throughput,
                                          const std::vector<std::pair<double, uint32_t>>& sizes);

// The result sizes of fabkv-bench's workload at `value_size` and `read_ratio` (GET hits carry the
// value after rfrpc's 48 bytes of headers; PUTs and misses the headers alone).
std::vector<std::pair<double, uint32_t>> workload_result_sizes(uint32_t value_size,
                                                               double read_ratio);

struct CalibrateOptions {
  BenchOptions bench;  // provider, clients, duration, cores, ... (the first of each list)
  std::vector<uint64_t> delays_ns = {0, 1000, 2000, 4000, 8000, 16000, 32000};
  std::vector<uint32_t> fetch_sizes = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::string toml_path;  // write the choice as an [rfrpc] table for fabkv-server --config
};

// Runs the two sweeps (each run its own fabkv-server, as fabkv-bench starts one), prints the
// enumeration and the choice, writes --toml. Returns 0; throws as run_bench does.
int run_calibrate(const CalibrateOptions& o);

}  // namespace fabkv::bench
