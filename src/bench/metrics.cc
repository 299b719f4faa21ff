#include "bench/metrics.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace fabkv::bench {

using fabric::Verb;
using nlohmann::json;

double uniformity_ratio(const std::vector<uint64_t>& v) {
  if (v.empty()) return -1;
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  if (*mn == 0) return -1;
  return static_cast<double>(*mx) / static_cast<double>(*mn);
}

json machine_info() {
  json m;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  m["hostname"] = host;
  m["cpus"] = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  m["model"] = nullptr;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) m["model"] = line.substr(colon + 2);
      break;
    }
  utsname u{};
  if (::uname(&u) == 0) m["kernel"] = std::string(u.release);
  // The 1-minute load average when the run ended: on a shared machine, how much else ran.
  std::ifstream la("/proc/loadavg");
  double one = 0;
  m["loadavg_1m"] = (la >> one) ? nlohmann::json(one) : nlohmann::json(nullptr);
  return m;
}

namespace {

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

json workload_json(const WorkloadSpec& w) {
  return {{"name", w.name},
          {"read_ratio", w.read_ratio},
          {"read_modify_write", w.read_modify_write},
          {"distribution", to_string(w.distribution)},
          {"zipf_theta",
           w.distribution == Distribution::kZipfian ? json(w.zipf_theta) : json(nullptr)},
          {"keys", w.keys},
          {"fill", w.fill},
          {"key_size", w.key_size},
          {"value_size", w.value_size},
          {"value_size_max",
           w.value_size_max > w.value_size ? json(w.value_size_max) : json(nullptr)},
          {"seed", w.seed},
          {"multiget", w.multiget}};
}

json latency_json(const RunResult& r) {
  return {{"mean", r.latency.mean_ns() / 1000.0},     {"p50", us(r.latency.quantile_ns(0.50))},
          {"p90", us(r.latency.quantile_ns(0.90))},   {"p99", us(r.latency.quantile_ns(0.99))},
          {"p999", us(r.latency.quantile_ns(0.999))}, {"max", us(r.latency.max_ns())}};
}

// Verbs per request: what the client and the server posted together (read, write, send,
// atomic), and for recv the messages that arrived (a posted multi-receive buffer serves many,
// so posts would say nothing). Bytes: payload of the posted read/write/send/atomic ops.
void add_fabric_fields(const RunResult& r, json& j) {
  if (!r.client_verbs && !r.server_verbs) {
    j["fabric_ops_per_request"] = nullptr;
    j["fabric_bytes_per_request"] = nullptr;
    return;
  }
  fabric::VerbSnapshot all;
  if (r.client_verbs) all += *r.client_verbs;
  if (r.server_verbs) all += *r.server_verbs;
  const double n = r.requests ? static_cast<double>(r.requests) : 1.0;
  auto per = [&](uint64_t x) { return static_cast<double>(x) / n; };
  j["fabric_ops_per_request"] = {{"read", per(all[Verb::kRead].posted)},
                                 {"write", per(all[Verb::kWrite].posted)},
                                 {"send", per(all[Verb::kSend].posted)},
                                 {"recv", per(all[Verb::kRecv].inbound)},
                                 {"atomic", per(all[Verb::kAtomic].posted)}};
  j["fabric_bytes_per_request"] = per(all[Verb::kRead].bytes + all[Verb::kWrite].bytes +
                                      all[Verb::kSend].bytes + all[Verb::kAtomic].bytes);
  j["fabric_verbs"] = {{"client", r.client_verbs ? r.client_verbs->to_json() : json(nullptr)},
                       {"server", r.server_verbs ? r.server_verbs->to_json() : json(nullptr)}};
}

// fabkv workers busy-poll, so their CPU time is the wall time whatever the load. What a run
// costs them is the share of poll rounds it took away: 1 - (rounds/s under load) / (rounds/s
// idle). Per million GETs, that share of the interval is the server time GETs cost (pilaf:
// only what the provider's progress spends serving READs; herd: the whole request).
json server_busy(const RunContext& ctx, const RunResult& r) {
  if (!(r.server_rounds && ctx.server_idle_rounds_per_s && *ctx.server_idle_rounds_per_s > 0 &&
        r.elapsed_s > 0))
    return nullptr;
  double rate = static_cast<double>(*r.server_rounds) / r.elapsed_s;
  double busy = std::clamp(1.0 - rate / *ctx.server_idle_rounds_per_s, 0.0, 1.0);
  return {{"idle_rounds_per_s", *ctx.server_idle_rounds_per_s},
          {"rounds_per_s", rate},
          {"fraction", busy},
          {"s_per_million_gets",
           r.gets ? json(busy * r.elapsed_s / (static_cast<double>(r.gets) / 1e6))
                  : json(nullptr)}};
}

// The protocol's own counters, and per GET the probes, extent READs and retries they add up to.
json protocol_counters(const RunResult& r) {
  if (r.protocol.empty()) return nullptr;
  json p = json::object();
  for (const auto& [k, v] : r.protocol) p[k] = v;
  const double g = r.protocol.count("gets") && r.protocol.at("gets")
                       ? static_cast<double>(r.protocol.at("gets"))
                       : 0.0;
  auto per_get = [&](std::initializer_list<const char*> keys) -> json {
    if (g == 0) return nullptr;
    uint64_t n = 0;
    for (const char* k : keys) n += r.protocol.count(k) ? r.protocol.at(k) : 0;
    return static_cast<double>(n) / g;
  };
  p["probes_per_get"] = per_get({"entry_reads"});
  const double hits = r.protocol.count("hits") ? static_cast<double>(r.protocol.at("hits")) : 0.0;
  p["probes_per_hit"] = hits > 0 && r.protocol.count("hit_entry_reads")
                            ? json(static_cast<double>(r.protocol.at("hit_entry_reads")) / hits)
                            : json(nullptr);
  p["extent_reads_per_get"] = per_get({"extent_reads"});
  p["retries_per_get"] = per_get({"torn_entries", "torn_extents"});
  return p;
}

}  // namespace

json make_record(const RunContext& ctx, const RunResult& r) {
  json j;
  j["system"] = ctx.system;
  j["protocol"] = ctx.protocol;
  j["provider"] = ctx.provider;
  j["workload"] = workload_json(ctx.spec.workload);
  j["clients"] = ctx.spec.clients;
  j["window"] = ctx.spec.window;
  j["duration_s"] = r.elapsed_s;
  j["warmup_s"] = ctx.spec.warmup_s;
  j["ops"] = r.ops;
  j["requests"] = r.requests;
  j["gets"] = r.gets;
  j["puts"] = r.puts;
  j["throughput_ops"] = r.elapsed_s > 0 ? static_cast<double>(r.ops) / r.elapsed_s : 0.0;
  // Keys read or written per second: a multi-get is one op of `multiget` keys.
  j["throughput_keys"] = r.elapsed_s > 0 ? static_cast<double>(r.gets + r.puts) / r.elapsed_s : 0.0;
  j["latency_us"] = latency_json(r);
  j["per_client_ops"] = r.per_client_ops;
  double u = uniformity_ratio(r.per_client_ops);
  j["uniformity_ratio"] = u < 0 ? json(nullptr) : json(u);
  add_fabric_fields(r, j);
  j["server_cpu_s"] = r.server_cpu_s ? json(*r.server_cpu_s) : json(nullptr);
  j["server_busy"] = server_busy(ctx, r);
  j["protocol_counters"] = protocol_counters(r);
  j["server_evictions"] = r.evictions;
  // The load generator's own CPU (docs/bench.md): all load threads over the interval, per
  // request. Against a real system the threads busy-poll, so this is an upper bound that
  // includes waiting; against the null target it is the generator's cost.
  j["load_threads"] = r.load_threads;
  // shared: load threads round-robin over their clients; independent: a thread per client
  // (runner.h), whose per_client_ops measure fairness.
  j["client_mode"] = to_string(r.mode);
  j["load_cpu_s"] = r.load_cpu_s;
  j["load_cpu_us_per_request"] = r.requests
                                     ? json(r.load_cpu_s * 1e6 / static_cast<double>(r.requests))
                                     : json(nullptr);
  j["check"] = {{"gets_checked", r.check.checked},
                {"mismatches", r.check.mismatches},
                {"misses", r.check.misses},
                {"unexpected_misses", r.check.unexpected_misses}};
  j["client_core"] = ctx.client_core;
  j["server_core"] = ctx.server_core;
  j["machine"] = machine_info();
  j["command"] = ctx.command;
  j["timestamp"] = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
  return j;
}

std::vector<std::string> validate_record(const json& j) {
  std::vector<std::string> bad;
  auto need = [&](const json& o, const std::string& path, const char* key, auto pred,
                  const char* type, bool nullable) {
    if (!o.is_object() || !o.contains(key)) {
      bad.push_back(path + key + ": missing");
      return;
    }
    const json& v = o[key];
    if (v.is_null() && nullable) return;
    if (!pred(v)) bad.push_back(path + key + ": not " + type);
  };
  auto str = [](const json& v) { return v.is_string(); };
  auto num = [](const json& v) { return v.is_number(); };
  auto uint = [](const json& v) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  };
  auto obj = [](const json& v) { return v.is_object(); };
  auto arr = [](const json& v) { return v.is_array(); };
  need(j, "", "system", str, "a string", false);
  need(j, "", "protocol", str, "a string", false);
  need(j, "", "provider", str, "a string", true);
  need(j, "", "workload", obj, "an object", false);
  if (j.contains("workload") && j["workload"].is_object()) {
    const json& w = j["workload"];
    need(w, "workload.", "name", str, "a string", false);
    need(w, "workload.", "read_ratio", num, "a number", false);
    need(w, "workload.", "distribution", str, "a string", false);
    need(w, "workload.", "zipf_theta", num, "a number", true);
    need(w, "workload.", "keys", uint, "a count", false);
    need(w, "workload.", "key_size", uint, "a count", false);
    need(w, "workload.", "value_size", uint, "a count", false);
  }
  need(j, "", "clients", uint, "a count", false);
  need(j, "", "window", uint, "a count", false);
  need(j, "", "duration_s", num, "a number", false);
  need(j, "", "ops", uint, "a count", false);
  need(j, "", "throughput_ops", num, "a number", false);
  need(j, "", "latency_us", obj, "an object", false);
  if (j.contains("latency_us") && j["latency_us"].is_object())
    for (const char* k : {"mean", "p50", "p90", "p99", "p999"})
      need(j["latency_us"], "latency_us.", k, num, "a number", false);
  need(j, "", "per_client_ops", arr, "an array", false);
  if (j.contains("per_client_ops") && j["per_client_ops"].is_array()) {
    for (const auto& v : j["per_client_ops"])
      if (!uint(v)) bad.push_back("per_client_ops: not all counts");
    if (j.contains("clients") && j["clients"].is_number() &&
        j["per_client_ops"].size() != j["clients"].get<size_t>())
      bad.push_back("per_client_ops: not one entry per client");
  }
  need(j, "", "uniformity_ratio", num, "a number", true);
  need(j, "", "fabric_ops_per_request", obj, "an object", true);
  if (j.contains("fabric_ops_per_request") && j["fabric_ops_per_request"].is_object())
    for (const char* k : {"read", "write", "send", "recv", "atomic"})
      need(j["fabric_ops_per_request"], "fabric_ops_per_request.", k, num, "a number", true);
  need(j, "", "fabric_bytes_per_request", num, "a number", true);
  need(j, "", "server_cpu_s", num, "a number", true);
  return bad;
}

}  // namespace fabkv::bench
