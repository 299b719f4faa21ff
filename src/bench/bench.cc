#include "bench/bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "bench/driver.h"
#include "bench/metrics.h"
#include "bench/runner.h"
#include "bench/servers.h"
#include "client/cluster.h"
#include "common/cpu.h"
#include "proto/registry.h"

namespace fabkv::bench {
namespace {

struct SystemName {
  std::string system;    // fabkv | memcached | redis
  std::string protocol;  // fabkv's access protocol
  std::string label() const { return protocol.empty() ? system : system + ":" + protocol; }
};

SystemName parse_system(const std::string& s) {
  if (s == "memcached" || s == "redis" || s == "null") return {s, ""};
  // fabkv::Cluster (client/cluster.h) over many fabkv-servers, each key on its ketama server.
  if (s == "fabkv-cluster") return {s, proto::info(proto::kDefault).name};
  if (s.rfind("fabkv-cluster:", 0) == 0) {
    std::string p = s.substr(14);
    const proto::Info* info = proto::find(p);
    if (!info || info->engine == proto::EngineNeed::kNone)
      throw std::invalid_argument("fabkv-cluster:" + p +
                                  " in --systems: a cluster places keys "
                                  "with a key-value protocol (one of " +
                                  proto::names() + " but the sequencers)");
    return {"fabkv-cluster", p};
  }
  if (s.rfind("fabkv:", 0) == 0) {
    std::string p = s.substr(6);
    // fabkv-server's memcached front end (docs/memcached.md), driven as memcached is.
    if (p == "memcached") return {"fabkv", p};
    // The protocols of proto/registry.h; a client that cannot speak one says so when it connects.
    if (!proto::find(p))
      throw std::invalid_argument("unknown fabkv protocol '" + p +
                                  "' in --systems (fabkv:<protocol>, "
                                  "protocol one of " +
                                  proto::names() + ")");
    return {"fabkv", p};
  }
  if (s == "fabkv") return {"fabkv", proto::info(proto::kDefault).name};
  throw std::invalid_argument("unknown system '" + s +
                              "' in --systems (fabkv:<protocol>, "
                              "fabkv-cluster:<protocol>, memcached, redis, null)");
}

// The --protocols of the server started for `protocol`: it and every protocol served by the same
// server side (pilaf with pilaf-vo), so that the server runs as it would for any of them.
std::string served_with(const proto::Info& protocol) {
  std::string s;
  for (const proto::Info& p : proto::protocols())
    if (p.server == protocol.server) s += (s.empty() ? "" : ",") + std::string(p.name);
  return s;
}

std::vector<WorkloadSpec> expand(const BenchOptions& o, uint32_t value_size) {
  std::vector<WorkloadSpec> out;
  for (const auto& d : o.distributions) {
    std::vector<double> ratios = o.read_ratios;
    if (!o.workload.empty()) ratios = {0};  // the workload decides
    for (double rr : ratios) {
      WorkloadSpec w = o.base;
      w.value_size = value_size;
      w.distribution = distribution_from_string(d);
      w.read_ratio = rr;
      if (!o.workload.empty()) apply_core_workload(o.workload, &w);
      out.push_back(w);
    }
  }
  return out;
}

// Appends whole lines: each record goes out in one write() on an O_APPEND descriptor, so a
// reader never sees half a record and concurrent writers do not interleave.
class JsonLines {
 public:
  explicit JsonLines(std::string path) : path_(std::move(path)) {}
  ~JsonLines() {
    if (fd_ >= 0) ::close(fd_);
  }
  void append(const nlohmann::json& j) {
    if (path_.empty()) return;
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd_ < 0) throw std::runtime_error("cannot open " + path_ + ": " + std::strerror(errno));
    }
    std::string line = j.dump() + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

LoadProgress progress_printer(const std::string& label, bool quiet) {
  if (quiet) return nullptr;
  const bool tty = ::isatty(2);
  auto last_line = std::make_shared<double>(-1e9);
  return [label, tty, last_line](uint64_t done, uint64_t total, double secs) {
    double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    if (tty) {
      fmt::print(stderr, "\rload {}: {:5.1f}% {}/{} keys, {:.0f} K PUT/s   {}", label, pct, done,
                 total, rate / 1e3, done == total ? "\n" : "");
    } else if (done == total || secs - *last_line >= 2.0) {
      fmt::print(stderr, "load {}: {:.1f}% {}/{} keys, {:.0f} K PUT/s\n", label, pct, done, total,
                 rate / 1e3);
      *last_line = secs;
    }
  };
}

// The cluster of the fabkv-cluster systems, but for the servers fabkv-bench starts (their
// addresses are known once they run): a cluster file's servers and settings, --replicas.
ClusterOptions cluster_settings(const BenchOptions& o) {
  ClusterOptions c;
  if (!o.cluster_file.empty()) {
    try {
      c = load_cluster_file(o.cluster_file);
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(std::string("--cluster ") + e.what());
    }
  }
  if (o.replicas) c.replicas = o.replicas;
  return c;
}

// max / mean of per-server figures (1 = perfectly even); null when they sum to 0.
nlohmann::json max_over_mean(const std::vector<uint64_t>& v) {
  uint64_t sum = 0, mx = 0;
  for (uint64_t x : v) {
    sum += x;
    mx = std::max(mx, x);
  }
  if (sum == 0) return nullptr;
  return static_cast<double>(mx) * static_cast<double>(v.size()) / static_cast<double>(sum);
}

// Where the cluster puts the workload's keys: per server, the keys it is the first server of
// (Cluster::server_for_key) and the copies it holds with replicas (servers_for_key). A Cluster
// connects to nothing until a request, so this is the ring alone.
struct Placement {
  std::vector<uint64_t> keys, copies;
};
Placement place_keys(const ClusterOptions& co, const WorkloadSpec& w) {
  Cluster ring(co);
  Placement p;
  p.keys.assign(ring.size(), 0);
  p.copies.assign(ring.size(), 0);
  std::string key;
  for (uint64_t id = 0; id < w.keys; ++id) {
    make_key(id, w.key_size, &key);
    const std::vector<size_t> servers = ring.servers_for_key(key);
    p.keys.at(servers.at(0))++;
    for (size_t i : servers) p.copies.at(i)++;
  }
  return p;
}

// The record's "cluster": its servers with their keys, copies and requests in the interval,
// and max/mean of each (docs/bench.md).
nlohmann::json cluster_record(const ClusterOptions& co, const Placement& p,
                              const std::vector<uint64_t>& requests, bool started,
                              const std::string& poll) {
  nlohmann::json servers = nlohmann::json::array();
  for (size_t i = 0; i < co.servers.size(); ++i)
    servers.push_back({{"name", co.servers[i].name},
                       {"address", co.servers[i].address},
                       {"weight", co.servers[i].weight},
                       {"keys", p.keys.at(i)},
                       {"copies", p.copies.at(i)},
                       {"requests", i < requests.size() ? requests[i] : 0}});
  uint64_t total = 0;
  for (uint64_t r : requests) total += r;
  return {{"servers", servers},
          {"replicas", co.replicas},
          {"started", started},
          {"server_poll", started ? nlohmann::json(poll) : nlohmann::json(nullptr)},
          {"keys_max_over_mean", max_over_mean(p.keys)},
          {"copies_max_over_mean", max_over_mean(p.copies)},
          {"requests", total},
          {"requests_max_over_mean", max_over_mean(requests)}};
}

// The table's line under a cluster run: per server its keys and requests, and max/mean.
void print_cluster(const nlohmann::json& c) {
  std::string keys, requests;
  for (const auto& s : c["servers"]) {
    keys += fmt::format(" {}", s["keys"].get<uint64_t>());
    requests += fmt::format(" {}", s["requests"].get<uint64_t>());
  }
  auto ratio = [](const nlohmann::json& x) {
    return x.is_null() ? std::string("-") : fmt::format("{:.3f}", x.get<double>());
  };
  fmt::print("  {} servers, replicas {}: keys{} (max/mean {}); requests{} (max/mean {})\n",
             c["servers"].size(), c["replicas"].get<uint32_t>(), keys,
             ratio(c["keys_max_over_mean"]), requests, ratio(c["requests_max_over_mean"]));
}

}  // namespace

void validate(const BenchOptions& o) {
  if (o.systems.empty()) throw std::invalid_argument("--systems is empty");
  for (const auto& s : o.systems) parse_system(s);
  if (o.clients.empty()) throw std::invalid_argument("--clients is empty");
  for (size_t c : o.clients)
    if (c < 1 || c > 4096)
      throw std::invalid_argument(fmt::format("--clients {} is not in 1..4096", c));
  if (o.threads < 1 || o.threads > 1024)
    throw std::invalid_argument(fmt::format("--threads {} is not in 1..1024", o.threads));
  if (o.client_modes.empty()) throw std::invalid_argument("--client-mode is empty");
  const bool independent = std::find(o.client_modes.begin(), o.client_modes.end(),
                                     ClientMode::kIndependent) != o.client_modes.end();
  for (size_t c : o.clients)
    if (independent && c > 1024)
      throw std::invalid_argument(
          fmt::format("--clients {}: --client-mode independent runs a thread per client, at "
                      "most 1024",
                      c));
  if (o.window < 1 || o.window > 1024)
    throw std::invalid_argument(fmt::format("--window {} is not in 1..1024", o.window));
  if (!(o.duration_s > 0) || o.duration_s > 3600)
    throw std::invalid_argument(fmt::format("--duration {} is not in (0, 3600] seconds",
                                            o.duration_s));
  if (!(o.warmup_s >= 0) || o.warmup_s > 600)
    throw std::invalid_argument(fmt::format("--warmup {} is not in [0, 600] seconds", o.warmup_s));
  if (o.read_ratios.empty() || o.distributions.empty() || o.value_sizes.empty())
    throw std::invalid_argument("an empty sweep list");
  for (uint32_t vs : o.value_sizes)
    for (const auto& w : expand(o, vs)) validate(w);
  if (!o.server.empty() && o.server.find(':') == std::string::npos)
    throw std::invalid_argument("--server '" + o.server + "' is not HOST:PORT");
  if (o.base.multiget > 1)
    for (const auto& s : o.systems) {
      const SystemName n = parse_system(s);
      if (n.system != "memcached" && n.system != "redis" &&
          !(n.system == "fabkv" && n.protocol == "memcached"))
        throw std::invalid_argument("--multiget: " + s +
                                    " has no multi-get (memcached, "
                                    "fabkv:memcached and redis have)");
    }
  const bool cluster = std::any_of(o.systems.begin(), o.systems.end(), [](const std::string& s) {
    return parse_system(s).system == "fabkv-cluster";
  });
  if (!cluster && (!o.cluster_file.empty() || o.cluster_servers || o.replicas))
    throw std::invalid_argument(
        "--cluster, --cluster-servers and --replicas are for the "
        "fabkv-cluster systems (--systems fabkv-cluster:<protocol>)");
  if (!o.cluster_file.empty() && o.cluster_servers)
    throw std::invalid_argument(
        "--cluster-servers is for the servers fabkv-bench starts, not "
        "for a running cluster (--cluster)");
  if (o.cluster_servers > 64)
    throw std::invalid_argument(fmt::format("--cluster-servers {} is not in 1..64",
                                            o.cluster_servers));
  if (cluster) {
    const ClusterOptions c = cluster_settings(o);
    const size_t servers = !o.cluster_file.empty() ? c.servers.size()
                           : o.cluster_servers     ? o.cluster_servers
                                                   : 3;
    if (c.replicas < 1 || c.replicas > servers)
      throw std::invalid_argument(fmt::format(
          "--replicas {} is not in 1..{} (the cluster's servers)", c.replicas, servers));
  }
  if (!o.server.empty() && !o.server_args.empty())
    throw std::invalid_argument(
        "--server-arg is for the fabkv-server fabkv-bench starts, not "
        "for a running one (--server)");
  for (const auto& s : o.systems) {
    auto n = parse_system(s);
    uint64_t limit = n.system == "memcached" ? 1024 * 1024 - 512
                     : n.system == "redis"   ? 512ull << 20
                                             : 0;
    for (uint32_t vs : o.value_sizes)
      if (limit && vs > limit)
        throw std::invalid_argument(fmt::format("--value-size {} exceeds {}'s limit of {} bytes",
                                                vs, s, limit));
  }
}

namespace {

// The servers and the driver one system at one value size runs against, with what the runs
// need to know of them. Members in start order: the driver goes before the servers it reaches.
struct Target {
  SystemName name;
  uint32_t value_size = 0;
  const proto::Info* fabkv_protocol = nullptr;  // null for memcached, redis and null
  ServerSpec ss;                                // of the servers started for it
  std::unique_ptr<LocalServer> server;
  std::vector<std::unique_ptr<LocalServer>> cluster_servers;  // fabkv-cluster's, when started
  ClusterOptions cluster;
  Placement placement;
  std::unique_ptr<Driver> driver;
  // A sequencer has no keys to load: every operation is a next() (fabkv_driver.cc).
  bool sequencer = false;
  // The workers' idle poll rate (clients connected, nothing sent), the reference for how busy
  // a run keeps them.
  std::optional<double> idle_rounds_per_s;

  bool fabric() const { return name.system == "fabkv" || name.system == "fabkv-cluster"; }
  void stop() {
    driver.reset();
    if (server) server->stop();
    for (auto& cs : cluster_servers) cs->stop();
  }
};

ServerSpec server_spec(const BenchOptions& o, const proto::Info* fabkv_protocol,
                       uint32_t value_size, size_t max_clients) {
  ServerSpec ss;
  ss.core = o.server_core;
  ss.memory = o.server_memory;
  ss.fabkv_server_bin = o.fabkv_server_bin;
  ss.extra_args = o.server_args;
  ss.provider = o.provider;
  ss.window = std::max<uint32_t>(4, o.window);
  ss.max_clients = static_cast<uint32_t>(std::max<size_t>(64, max_clients + 1));
  ss.memcached_bin = o.memcached_bin;
  if (fabkv_protocol) ss.protocols = served_with(*fabkv_protocol);
  if (fabkv_protocol && fabkv_protocol->engine == "pilaf") {
    // The pilaf engine: the table has one entry per key of the key space, so --fill is the
    // table's fill ratio (Pilaf fig. 6: 75%), and the extents hold every record without growing.
    ss.pilaf_entries = std::max<size_t>(16, o.base.keys);
    const uint32_t largest_value = std::max(value_size, o.base.value_size_max);
    // A record: 16-byte header + key + value, plus the heap's 8-byte block header, in 16-byte
    // blocks; 25% on top for fragmentation (values change size with --value-size-max).
    const size_t record = (16 + o.base.key_size + largest_value + 8 + 15) & ~size_t{15};
    ss.pilaf_extents = std::max<size_t>(size_t{8} << 20, o.base.keys * record * 5 / 4);
  }
  ss.redis_bin = o.redis_bin;
  return ss;
}

DriverOptions driver_options(const BenchOptions& o, const SystemName& name, size_t max_clients) {
  DriverOptions d;
  d.protocol = name.protocol;
  d.provider = o.provider;
  d.secret = o.secret;
  d.clients = max_clients;
  d.window = o.window;
  d.timeout_ms = o.timeout_ms;
  d.pilaf_parallel_probes = o.pilaf_parallel_probes;
  // Independent mode: a load thread per client (the null target shards its table for them).
  const bool independent = std::find(o.client_modes.begin(), o.client_modes.end(),
                                     ClientMode::kIndependent) != o.client_modes.end();
  d.load_threads = independent ? max_clients : std::min(o.threads, max_clients);
  return d;
}

// fabkv-cluster: the cluster file's running servers, or servers it starts.
void start_cluster(const BenchOptions& o, Target& t, DriverOptions d) {
  t.cluster = cluster_settings(o);
  if (o.cluster_file.empty()) {
    // Each on its own port, all on the server core. Named on the ring, so that keys land
    // on the same servers in every run whatever ports they got. More than one busy-polling
    // server on one core would hold it for whole scheduler slices while the others' clients
    // wait: they poll adaptively then (docs/server.md, "Polling").
    const size_t n = o.cluster_servers ? o.cluster_servers : 3;
    if (n > 1) t.ss.poll = "adaptive";
    for (size_t i = 0; i < n; ++i) {
      t.ss.name = fmt::format("fabkv-bench-{}", i);
      t.cluster_servers.push_back(LocalServer::start_fabkv(t.ss));
      t.cluster.servers.push_back({t.cluster_servers.back()->address(), 1, t.ss.name});
      d.server_pids.push_back(t.cluster_servers.back()->pid());
    }
  } else if (d.secret.empty()) {
    d.secret = t.cluster.client.secret;
  }
  t.placement = place_keys(t.cluster, expand(o, t.value_size).front());
  d.cluster = t.cluster;
  t.driver = make_fabkv_driver(d);
}

// Starts the target's servers (a fresh one per system and value size: no values of another
// size linger) and its driver.
void start(const BenchOptions& o, Target& t, DriverOptions d) {
  if (t.name.system == "fabkv" && t.name.protocol == "memcached") {
    t.ss.memcached = true;
    t.ss.max_value = "1M";   // memcached's item size, so both take the same values
    t.ss.poll = "adaptive";  // blocks in epoll when idle, as memcached does (docs/memcached.md)
    t.server = LocalServer::start_fabkv(t.ss);
    d.address = t.server->memcached_address();
    d.server_pid = t.server->pid();
    t.driver = make_memcached_driver(d, "fabkv", "memcached");
  } else if (t.name.system == "fabkv") {
    if (o.server.empty()) t.server = LocalServer::start_fabkv(t.ss);
    d.address = o.server.empty() ? t.server->address() : o.server;
    d.server_pid = t.server ? t.server->pid() : 0;
    t.driver = make_fabkv_driver(d);
  } else if (t.name.system == "fabkv-cluster") {
    start_cluster(o, t, std::move(d));
  } else if (t.name.system == "null") {
    t.driver = make_null_driver(d);  // no server: requests complete in-process
  } else if (t.name.system == "memcached") {
    t.server = LocalServer::start_memcached(t.ss);
    d.address = t.server->address();
    d.server_pid = t.server->pid();
    t.driver = make_memcached_driver(d);
  } else {
    t.server = LocalServer::start_redis(t.ss);
    d.address = t.server->address();
    d.server_pid = t.server->pid();
    t.driver = make_redis_driver(d);
  }
}

std::optional<double> idle_rounds_per_s(Driver& driver) {
  ServerSample a = driver.sample_server();
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ServerSample b = driver.sample_server();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.rounds && b.rounds && dt > 0) return static_cast<double>(*b.rounds - *a.rounds) / dt;
  return std::nullopt;
}

Target start_target(const BenchOptions& o, const std::string& system, uint32_t value_size,
                    size_t max_clients) {
  Target t;
  t.name = parse_system(system);
  t.value_size = value_size;
  if (t.fabric()) t.fabkv_protocol = proto::find(t.name.protocol);
  t.ss = server_spec(o, t.fabkv_protocol, value_size, max_clients);
  start(o, t, driver_options(o, t.name, max_clients));
  const uint32_t largest = std::max(value_size, o.base.value_size_max);
  if (largest > t.driver->max_value())
    throw std::invalid_argument(
        fmt::format("values of {} bytes exceed the {} server's max_value {}", largest,
                    t.name.label(), t.driver->max_value()));
  if (t.name.system == "fabkv" || (t.name.system == "fabkv-cluster" && t.ss.poll == "spin"))
    t.idle_rounds_per_s = idle_rounds_per_s(*t.driver);
  t.sequencer = t.fabkv_protocol && t.fabkv_protocol->engine == proto::EngineNeed::kNone;
  return t;
}

// A miss of a stored key is legitimate only for a lossy cache that evicted. A sequencer stores
// nothing: its GETs "miss" by construction (fabkv_driver.cc); its check is the sequence check.
bool misses_explained(const Target& t, const RunResult& r) {
  return t.sequencer || r.check.unexpected_misses == 0 || (t.fabric() && r.evictions > 0);
}

RunContext run_context(const BenchOptions& o, const Target& t, const WorkloadSpec& w,
                       size_t clients, ClientMode mode) {
  RunContext ctx;
  ctx.system = t.name.system;
  ctx.protocol = t.driver->protocol();
  ctx.provider = t.fabric() ? o.provider : "";
  ctx.spec.workload = w;
  ctx.spec.clients = clients;
  ctx.spec.window = o.window;
  ctx.spec.threads = o.threads;
  ctx.spec.mode = mode;
  ctx.spec.warmup_s = o.warmup_s;
  ctx.spec.duration_s = o.duration_s;
  ctx.command = o.command;
  ctx.client_core = o.client_core;
  ctx.server_core = o.server_core;
  ctx.server_idle_rounds_per_s = t.idle_rounds_per_s;
  return ctx;
}

// The run's record (docs/bench.md) with its checks: "check.ok", and "sequence_check" and
// "cluster" where they apply.
nlohmann::json run_record(const RunContext& ctx, const Target& t, const RunResult& r) {
  nlohmann::json rec = make_record(ctx, r);
  if (ctx.provider.empty()) rec["provider"] = nullptr;
  rec["check"]["ok"] = r.check.mismatches == 0 && misses_explained(t, r);
  if (auto sc = t.driver->sequence_check()) {
    // Every value handed out since the clients connected (all runs so far, each
    // drained): unique, increasing per client, and without gaps.
    rec["sequence_check"] = *sc;
    rec["check"]["ok"] = (*sc)["unique"].get<bool>() &&
                         (*sc)["per_client_increasing"].get<bool>() &&
                         (*sc)["gaps"].get<uint64_t>() == 0 && (*sc)["failed"].get<uint64_t>() == 0;
  }
  if (t.name.system == "fabkv-cluster")
    rec["cluster"] = cluster_record(t.cluster, t.placement, r.server_requests,
                                    !t.cluster_servers.empty(), t.ss.poll);
  return rec;
}

using Zipfs = std::map<std::pair<uint64_t, double>, std::shared_ptr<const ScrambledZipfian>>;

// The workload's zipfian generator, made once per key count and theta (it takes a while).
std::shared_ptr<const ScrambledZipfian> zipf_for(const WorkloadSpec& w, Zipfs& zipfs) {
  if (w.distribution != Distribution::kZipfian) return nullptr;
  auto& z = zipfs[{w.keys, w.zipf_theta}];
  if (!z) z = make_zipf(w);
  return z;
}

// The table's line of a run.
void print_run(const BenchOptions& o, const Target& t, const WorkloadSpec& w, size_t clients,
               const RunResult& r, const nlohmann::json& rec) {
  const auto& lat = rec["latency_us"];
  auto figure = [&rec](const char* field, const char* format) {
    return rec[field].is_null() ? std::string("-")
                                : fmt::format(fmt::runtime(format), rec[field].get<double>());
  };
  fmt::print(
      "{:<11} {} {:<7} rr={:.2f} vs={} c={} w={}{}{}: {:>9.0f} ops/s{}  p50 {:.1f} us  "
      "p99 {:.1f} us  unif {}  cpu {}  load {} us/req\n",
      t.name.label(), w.name, to_string(w.distribution), w.read_ratio, t.value_size, clients,
      o.window,
      r.mode == ClientMode::kIndependent ? " indep"
      : r.load_threads > 1               ? fmt::format(" t={}", r.load_threads)
                                         : "",
      w.multiget > 1 ? fmt::format(" mget={}", w.multiget) : "",
      rec["throughput_ops"].get<double>(),
      w.multiget > 1 ? fmt::format(" ({:.0f} keys/s)", rec["throughput_keys"].get<double>()) : "",
      lat["p50"].get<double>(), lat["p99"].get<double>(), figure("uniformity_ratio", "{:.2f}"),
      figure("server_cpu_s", "{:.2f}s"), figure("load_cpu_us_per_request", "{:.3f}"));
  if (rec.contains("cluster")) print_cluster(rec["cluster"]);
  std::fflush(stdout);
}

// Says on stderr which of the run's checks failed; true when none did.
bool checks_passed(const Target& t, const RunResult& r, const nlohmann::json& rec) {
  bool ok = true;
  if (r.check.mismatches > 0) {
    fmt::print(stderr,
               "fabkv-bench: {}: {} of {} GETs returned a value the generator "
               "never wrote for the key\n",
               t.name.label(), r.check.mismatches, r.check.checked);
    ok = false;
  }
  if (t.sequencer && !rec["check"]["ok"].get<bool>()) {
    fmt::print(stderr, "fabkv-bench: {}: sequence check failed: {}\n", t.name.label(),
               rec["sequence_check"].dump());
    ok = false;
  }
  if (!misses_explained(t, r)) {
    fmt::print(stderr, "fabkv-bench: {}: {} GETs missed keys that were stored (no evictions)\n",
               t.name.label(), r.check.unexpected_misses);
    ok = false;
  }
  return ok;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  validate(o);
  JsonLines out(o.json_path);
  const size_t max_clients = *std::max_element(o.clients.begin(), o.clients.end());
  Zipfs zipfs;
  int rc = 0;
  for (const auto& s : o.systems) {
    for (uint32_t value_size : o.value_sizes) {
      Target t = start_target(o, s, value_size, max_clients);
      Runner runner(*t.driver, o.client_core);
      runner.set_stop_flag(o.stop);
      std::vector<WorkloadSpec> workloads = expand(o, value_size);
      if (!t.sequencer)
        runner.load(workloads.front(), o.window, progress_printer(t.name.label(), o.quiet));
      for (const WorkloadSpec& w : workloads) {
        std::shared_ptr<const ScrambledZipfian> zipf = zipf_for(w, zipfs);
        for (size_t clients : o.clients) {
          for (ClientMode mode : o.client_modes) {
            const RunContext ctx = run_context(o, t, w, clients, mode);
            const RunResult r = runner.run(ctx.spec, zipf);
            const nlohmann::json rec = run_record(ctx, t, r);
            out.append(rec);
            print_run(o, t, w, clients, r, rec);
            if (!checks_passed(t, r, rec)) rc = 3;
          }
        }
      }
      t.stop();
    }
  }
  return rc;
}

}  // namespace fabkv::bench
