// fabkv-bench: fabkv against memcached and redis on one workload generator. See docs/bench.md.
//   fabkv-bench --systems fabkv:herd,memcached,redis --read-ratio 0.95 --clients 8 --json r.jsonl
//   fabkv-bench matrix --json r.jsonl        (clients x read ratio x distribution x value size)
//   fabkv-bench report --input r.jsonl --out reports/x
//   fabkv-bench calibrate --provider shm --toml rfrpc.toml   (RF-RPC's R and F, eq. 1-2)
#include <signal.h>

#include <atomic>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench.h"
#include "bench/calibrate.h"
#include "bench/report.h"
#include "common/log.h"
#include "proto/registry.h"

using namespace fabkv;
using namespace fabkv::bench;

namespace {
// Ctrl-C / SIGTERM: finish the request in flight, stop the servers, write nothing partial.
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// The sweep dimensions as given on the command line: empty when not given, for the defaults
// that depend on the subcommand (sweep_defaults).
struct Sweeps {
  std::vector<std::string> distributions;
  std::vector<double> read_ratios;
  std::vector<size_t> clients;
  std::vector<uint32_t> value_sizes;
  std::vector<std::string> client_modes;
};

// The options of a run (and of matrix and calibrate, which fall through to them).
void add_run_options(CLI::App& app, BenchOptions& o, Sweeps& s) {
  app.add_option("--systems", o.systems,
                 "systems to run: fabkv:<protocol> (protocol: " + proto::names() +
                     "), fabkv-cluster:<protocol> (fabkv::Cluster over several "
                     "servers), memcached, redis, null (no server: measures the load generator)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--provider", o.provider, "fabkv's libfabric provider (shm, tcp, verbs)")
      ->capture_default_str();
  app.add_option("--server", o.server,
                 "HOST:PORT of a running fabkv-server (default: start one "
                 "next to this executable, pinned to --server-core)");
  app.add_option("--secret", o.secret, "the fabkv-server's control secret");
  app.add_option("--cluster", o.cluster_file,
                 "fabkv-cluster systems: a TOML cluster file "
                 "(docs/cluster.md) of running fabkv-servers (default: start --cluster-servers)");
  app.add_option("--cluster-servers", o.cluster_servers,
                 "fabkv-cluster systems: fabkv-servers "
                 "to start, each on its own port, all pinned to --server-core [3]")
      ->check(CLI::Range(size_t{1}, size_t{64}));
  app.add_option("--replicas", o.replicas,
                 "fabkv-cluster systems: servers each PUT goes to "
                 "(GETs read the first that answers) [the cluster file's, else 1]")
      ->check(CLI::Range(uint32_t{1}, uint32_t{64}));
  app.add_option("--workload", o.workload,
                 "YCSB core workload A (50% GET), B (95%), C (100%), "
                 "F (50% GET, 50% read-modify-write); overrides --read-ratio");
  app.add_option("--read-ratio", s.read_ratios, "fraction of GETs in [0,1] (list: a sweep) [0.95]")
      ->delimiter(',');
  app.add_option("--distribution", s.distributions,
                 "key choice: uniform | zipf (YCSB scrambled "
                 "Zipfian) (list: a sweep) [uniform]")
      ->delimiter(',');
  app.add_option("--zipf-theta", o.base.zipf_theta, "Zipfian constant")->capture_default_str();
  app.add_option("--keys", o.base.keys, "key space")->capture_default_str();
  app.add_option("--fill", o.base.fill, "fraction of the key space loaded before measuring")
      ->capture_default_str();
  app.add_option("--key-size", o.base.key_size, "bytes per key")->capture_default_str();
  app.add_option("--value-size", s.value_sizes, "bytes per value, >= 8 (list: a sweep) [32]")
      ->delimiter(',');
  app.add_option(
         "--value-size-max", o.base.value_size_max,
         "value sizes uniform in [--value-size, this] (fixed per key and version); 0: fixed")
      ->capture_default_str();
  app.add_option("--multiget", o.base.multiget,
                 "keys per GET: every GET is one multi-get of N "
                 "keys (memcached, fabkv:memcached, redis)")
      ->capture_default_str();
  app.add_option("--seed", o.base.seed, "workload seed (client c uses seed+c)")
      ->capture_default_str();
  app.add_option("--clients", s.clients,
                 "logical clients, each its own connection/endpoint "
                 "(list: a sweep) [8]")
      ->delimiter(',');
  app.add_option("--window", o.window, "outstanding requests per client")->capture_default_str();
  app.add_option("--duration", o.duration_s, "measured seconds per run")->capture_default_str();
  app.add_option("--warmup", o.warmup_s, "seconds of load before measuring")->capture_default_str();
  app.add_option("--client-core", o.client_core,
                 "core of the (first) load-generator thread (-1: unpinned)")
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "load-generator threads: the clients are split over them, "
                 "thread i pinned to --client-core + i (more threads than clients: one per "
                 "client); --client-mode independent: the cores its threads are spread over")
      ->capture_default_str();
  app.add_option("--client-mode", s.client_modes,
                 "shared: load threads round-robin over their clients (the generator's cost, "
                 "the server's capacity); independent: a thread per client with its own pacing, "
                 "spread over --threads cores (fairness between clients) (list: a sweep) "
                 "[shared]")
      ->delimiter(',')
      ->check(CLI::IsMember({"shared", "independent"}));
  app.add_option("--server-core", o.server_core,
                 "core of the servers fabkv-bench starts (-1: unpinned)")
      ->capture_default_str();
  app.add_option("--server-memory", o.server_memory, "memory of the servers it starts")
      ->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "bound on each request")->capture_default_str();
  app.add_option("--json", o.json_path, "append one JSON line per completed run to this file");
  app.add_option("--fabkv-server-bin", o.fabkv_server_bin,
                 "fabkv-server to start (default: next to fabkv-bench)");
  app.add_option("--memcached-bin", o.memcached_bin, "memcached binary (default: on PATH)");
  app.add_option("--redis-bin", o.redis_bin, "redis-server binary (default: on PATH)");
  app.add_flag("--quiet", o.quiet, "no load-phase progress");
  app.add_flag("--pilaf-parallel-probes", o.pilaf_parallel_probes,
               "fabkv:pilaf clients READ a key's three table entries at once");
}

// The sweep a plain run, matrix and calibrate make of what the command line left out.
void sweep_defaults(const Sweeps& s, bool matrix, bool calibrate, BenchOptions& o) {
  o.read_ratios = !s.read_ratios.empty() ? s.read_ratios
                  : matrix               ? std::vector<double>{0.95, 0.5}
                                         : std::vector<double>{0.95};
  o.distributions = !s.distributions.empty() ? s.distributions
                    : matrix                 ? std::vector<std::string>{"uniform", "zipf"}
                                             : std::vector<std::string>{"uniform"};
  o.clients = !s.clients.empty() ? s.clients
              : matrix           ? std::vector<size_t>{1, 4, 8}
                                 : std::vector<size_t>{8};
  o.value_sizes = !s.value_sizes.empty() ? s.value_sizes : std::vector<uint32_t>{32};
  o.client_modes.clear();
  for (const auto& m : s.client_modes) o.client_modes.push_back(parse_client_mode(m));
  if (o.client_modes.empty()) o.client_modes = {ClientMode::kShared};
  if (calibrate && s.clients.empty()) o.clients = {4};
}

void stop_on_signals(BenchOptions& o) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  o.stop = &g_stop;
}

// calibrate's own options; what it measures with is the run's (CalibrateOptions::bench).
struct Calibration {
  CalibrateOptions options;
  std::vector<double> delays_us;

  int run(const CLI::App& app, const BenchOptions& o) {
    options.bench = o;
    if (!app.get_option("--duration")->count()) options.bench.duration_s = 1;
    if (!delays_us.empty()) options.delays_ns.clear();
    for (double d : delays_us) {
      if (!(d >= 0) || d > 1e6)
        throw std::invalid_argument(fmt::format("--delays-us {} is not in 0..1e6", d));
      options.delays_ns.push_back(static_cast<uint64_t>(d * 1000));
    }
    return run_calibrate(options);
  }
};

CLI::App* add_calibrate(CLI::App& app, Calibration& cal) {
  auto* calibrate = app.add_subcommand(
      "calibrate",
      "choose fabkv:rfrpc's R (--rfrpc-retries) and F (--rfrpc-fetch-size) for this "
      "fabric by RF-RPC's enumeration (eq. 1-2): a processing-time sweep and a fetch-size sweep, "
      "each run its own fabkv-server (defaults: 4 clients, 1 s per run)");
  calibrate->add_option("--toml", cal.options.toml_path,
                        "write the choice as an [rfrpc] table "
                        "for fabkv-server --config");
  calibrate
      ->add_option("--delays-us", cal.delays_us,
                   "processing times of the delay sweep "
                   "[0,1,2,4,8,16,32]")
      ->delimiter(',');
  calibrate->add_option("--fetch-sizes", cal.options.fetch_sizes, "fetch sizes F of the I(F) sweep")
      ->delimiter(',')
      ->capture_default_str();
  return calibrate;
}

}  // namespace

int main(int argc, char** argv) {
  init_logging("fabkv-bench");
  set_log_level("warn");
  BenchOptions o;
  Sweeps sweeps;
  std::string report_input, report_out;
  Calibration cal;

  CLI::App app{"fabkv-bench: fabkv vs memcached vs redis on one YCSB-style workload generator"};
  app.fallthrough();
  add_run_options(app, o, sweeps);
  auto* matrix =
      app.add_subcommand("matrix",
                         "sweep clients x read ratio x distribution x value "
                         "size (defaults: clients 1,4,8; read ratio 0.95,0.5; uniform,zipf; 32 B)");
  auto* report = app.add_subcommand("report", "PNG plots and summary.md from JSON Lines results");
  report->add_option("--input", report_input, "results file (JSON Lines)")->required();
  report->add_option("--out", report_out, "output folder")->required();
  auto* calibrate = add_calibrate(app, cal);
  app.add_option("--server-arg", o.server_args,
                 "one more argument for the fabkv-servers it "
                 "starts, for a flag it does not set itself (repeat it: --server-arg=--rfrpc-mode "
                 "--server-arg=fetch)");
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "fabkv-bench: {}\n", e.what());
    return 2;
  }

  try {
    if (*report) return render_report(report_input, report_out);
    sweep_defaults(sweeps, static_cast<bool>(*matrix), static_cast<bool>(*calibrate), o);
    stop_on_signals(o);
    for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
    if (*calibrate) return cal.run(app, o);
    return run_bench(o);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "fabkv-bench: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-bench: {}\n", e.what());
    return g_stop.load() ? 130 : 1;
  }
}
