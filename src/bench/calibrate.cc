// `fabkv-bench calibrate` (bench/calibrate.h): RF-RPC sec. 3.2's parameter selection.
#include "bench/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "proto/rfrpc/wire.h"

namespace fabkv::bench {

std::optional<uint32_t> choose_retries(std::vector<DelayPoint> points, std::string* log) {
  std::sort(points.begin(), points.end(),
            [](const DelayPoint& a, const DelayPoint& b) { return a.delay_ns < b.delay_ns; });
  std::optional<uint32_t> n;
  for (const DelayPoint& p : points) {
    if (!(p.reply_ops > 0)) continue;
    const double ratio = p.fetch_ops / p.reply_ops;
    if (log)
      *log +=
          fmt::format("  P = {:>6.1f} us: fetch/reply throughput {:.2f}, READs per call {:.2f}\n",
                      double(p.delay_ns) / 1000, ratio, p.reads_per_call);
    // RF-RPC sec. 3.2: "not significantly larger than server-reply when P >= 7 us (within 10%)".
    if (!n && ratio <= 1.10) {
      n = static_cast<uint32_t>(std::max(1.0, std::round(p.reads_per_call - 1)));
      if (log)
        *log += fmt::format("    -> P* = {:.1f} us, N = R = {}\n", double(p.delay_ns) / 1000, *n);
    }
  }
  return n;
}

std::optional<uint32_t> choose_fetch_size(const std::map<uint32_t, double>& throughput,
                                          const std::vector<std::pair<double, uint32_t>>& sizes) {
  std::optional<uint32_t> best;
  double best_t = -1;
  for (const auto& [f, i] : throughput) {  // ascending F: a tie keeps the smaller
    double t = 0;
    for (const auto& [w, s] : sizes) t += w * (f >= s ? i : i / 2);  // eq. 2
    if (t > best_t) {
      best_t = t;
      best = f;
    }
  }
  return best;
}

std::vector<std::pair<double, uint32_t>> workload_result_sizes(uint32_t value_size,
                                                               double read_ratio) {
  const auto header = static_cast<uint32_t>(rfrpc::result_bytes(0));
  return {{read_ratio, header + value_size}, {1 - read_ratio, header}};
}

namespace {

// One fabkv:rfrpc run against a fresh server with `server_args`; its JSON record.
nlohmann::json one_run(const BenchOptions& base, uint32_t value_size,
                       const std::vector<std::string>& server_args, const std::string& what) {
  BenchOptions o = base;
  o.systems = {"fabkv:rfrpc"};
  o.value_sizes = {value_size};
  // The user's --server-arg (say, --config or --workers), then this run's rfrpc knobs;
  // fabkv-server refuses a flag given twice, and the run fails saying so.
  o.server_args.insert(o.server_args.end(), server_args.begin(), server_args.end());
  o.quiet = true;
  std::printf("  %s\n", what.c_str());
  std::fflush(stdout);
  const std::string tmp = fmt::format("/tmp/fabkv-calibrate-{}.jsonl", ::getpid());
  std::remove(tmp.c_str());
  o.json_path = tmp;
  run_bench(o);
  std::ifstream in(tmp);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  std::remove(tmp.c_str());
  if (last.empty()) throw std::runtime_error("calibrate: no result from the run " + what);
  nlohmann::json j = nlohmann::json::parse(last);
  j["calibrate"] = what;
  if (!base.json_path.empty()) {
    std::ofstream out(base.json_path, std::ios::app);
    out << j.dump() << "\n";
  }
  return j;
}

double reads_per_call(const nlohmann::json& run) {
  const nlohmann::json& p = run.value("protocol_counters", nlohmann::json());
  if (!p.is_object()) return 0;
  const double calls = p.value("calls", 0.0);
  return calls > 0 ? p.value("fetch_reads", 0.0) / calls : 0;
}

}  // namespace

int run_calibrate(const CalibrateOptions& o) {
  BenchOptions base = o.bench;
  base.clients = {base.clients.at(0)};
  base.read_ratios = {base.read_ratios.at(0)};
  base.distributions = {base.distributions.at(0)};
  const uint32_t value_size = base.value_sizes.at(0);
  if (!base.server.empty())
    throw std::invalid_argument(
        "calibrate starts its own servers (each run its rfrpc knobs): "
        "drop --server");
  if (o.delays_ns.empty() || o.fetch_sizes.empty())
    throw std::invalid_argument("calibrate: --delays-us and --fetch-sizes need a value each");
  for (uint32_t f : o.fetch_sizes)
    if (f < 64 || f % 8 != 0 || f > (1u << 20))
      throw std::invalid_argument(
          fmt::format("calibrate: fetch size {} is not a multiple of 8 "
                      "in 64..1 MiB",
                      f));
  std::printf("fabkv-bench calibrate: RF-RPC eq. 1-2 on %s, %zu clients, %g s per run\n",
              base.provider.c_str(), base.clients[0], base.duration_s);

  // Eq. 1's bound N (fig. 5): fetch-only against reply-only as the processing time grows.
  std::printf("delay sweep (%u-byte values):\n", value_size);
  std::vector<DelayPoint> points;
  for (uint64_t d : o.delays_ns) {
    if (base.stop && base.stop->load()) return 130;
    DelayPoint p;
    p.delay_ns = d;
    const std::string delay = std::to_string(d);
    const nlohmann::json f = one_run(base, value_size,
                                     {"--rfrpc-mode", "fetch", "--rfrpc-delay-ns", delay},
                                     "fetch, delay " + delay + " ns");
    const nlohmann::json r = one_run(base, value_size,
                                     {"--rfrpc-mode", "reply", "--rfrpc-delay-ns", delay},
                                     "reply, delay " + delay + " ns");
    p.fetch_ops = f.at("throughput_ops").get<double>();
    p.reply_ops = r.at("throughput_ops").get<double>();
    p.reads_per_call = reads_per_call(f);
    points.push_back(p);
  }
  // I(F) (eq. 2): fetch-only throughput with 8-byte values, which every F holds whole.
  std::printf("fetch-size sweep (8-byte values):\n");
  std::map<uint32_t, double> throughput;
  for (uint32_t f : o.fetch_sizes) {
    if (base.stop && base.stop->load()) return 130;
    const nlohmann::json j =
        one_run(base, 8, {"--rfrpc-mode", "fetch", "--rfrpc-fetch-size", std::to_string(f)},
                "fetch, F = " + std::to_string(f));
    throughput[f] = j.at("throughput_ops").get<double>();
  }

  std::string log;
  const std::optional<uint32_t> r = choose_retries(points, &log);
  std::printf("eq. 1, N from the delay sweep:\n%s", log.c_str());
  if (!r) std::printf("  fetching stays >10%% ahead at every delay measured: N is beyond them\n");
  const auto sizes = workload_result_sizes(value_size, base.read_ratios[0]);
  const std::optional<uint32_t> f = choose_fetch_size(throughput, sizes);
  std::printf("eq. 2, F for %u-byte values at %.0f%% GETs (results of %u and %u bytes):",
              value_size, base.read_ratios[0] * 100, sizes[0].second, sizes[1].second);
  for (const auto& [fs, t] : throughput) std::printf(" I(%u) = %.0f", fs, t);
  std::printf("\n  -> F = %u\n", *f);
  std::printf("fabkv-server flags: %s--rfrpc-fetch-size %u\n",
              r ? fmt::format("--rfrpc-retries {} ", *r).c_str() : "", *f);
  if (!o.toml_path.empty()) {
    std::ofstream out(o.toml_path);
    out << fmt::format("# RF-RPC eq. 1-2 on {} for {}-byte values ({})\n[rfrpc]\n", base.provider,
                       value_size, base.command.empty() ? "fabkv-bench calibrate" : base.command);
    if (r) out << "retries = " << *r << "\n";
    out << "fetch_size = " << *f << "\n";
    if (!out) throw std::runtime_error("calibrate: cannot write " + o.toml_path);
    std::printf("wrote %s: fabkv-server --provider %s --config %s ...\n", o.toml_path.c_str(),
                base.provider.c_str(), o.toml_path.c_str());
  }
  return 0;
}

}  // namespace fabkv::bench
