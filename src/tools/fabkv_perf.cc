// fabkv-perf: the papers' verb microbenchmarks over libfabric. See docs/fabric.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "fabric/fabric.h"
#include "perf/perf.h"

using namespace fabkv;
using namespace fabkv::perf;

namespace {

template <class T>
std::vector<T> or_default(const std::vector<T>& v, std::vector<T> d) {
  return v.empty() ? d : v;
}

// Expands the command line into runs; `mode` "all" is the default suite.
std::vector<RunSpec> plan(const std::string& mode, const std::vector<std::string>& verbs,
                          const std::vector<uint32_t>& sizes, const std::vector<uint32_t>& clients,
                          const std::vector<uint32_t>& windows, const std::vector<uint32_t>& zs,
                          const std::vector<std::string>& echoes, bool inlined,
                          uint32_t signal_every, double duration, double warmup) {
  std::vector<RunSpec> runs;
  auto base = [&](Mode m) {
    RunSpec s;
    s.mode = m;
    s.inlined = inlined;
    s.signal_every = signal_every;
    s.duration_s = duration;
    s.warmup_s = warmup;
    return s;
  };
  bool all = mode == "all";
  if (all || mode == "latency") {
    for (uint32_t size : or_default(sizes, {8, 64, 512, 4096})) {
      for (auto [verb, inl] : {std::pair{fabric::Verb::kRead, false},
                               {fabric::Verb::kWrite, false},
                               {fabric::Verb::kWrite, true}}) {
        RunSpec s = base(Mode::kInbound);
        s.verb = verb;
        s.inlined = inl;
        s.size = size;
        s.window = 1;
        s.signal_every = 1;
        runs.push_back(s);
      }
      if (size >= 16) {
        RunSpec s = base(Mode::kEcho);
        s.echo = EchoKind::kWriteSend;
        s.size = size;
        s.window = 1;
        s.signal_every = 1;
        runs.push_back(s);
      }
    }
  }
  for (Mode m : {Mode::kInbound, Mode::kOutbound}) {
    if (!all && mode != to_string(m)) continue;
    for (const auto& v : or_default(verbs, {"read", "write", "send"}))
      for (uint32_t size : or_default(sizes, {32}))
        for (uint32_t c :
             or_default(clients, all ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1}))
          for (uint32_t w : or_default(windows, {16})) {
            RunSpec s = base(m);
            s.verb = verb_from_string(v);
            s.size = size;
            s.clients = c;
            s.window = w;
            runs.push_back(s);
          }
  }
  if (all || mode == "echo") {
    for (const auto& e : or_default(echoes, {"write-write", "write-send", "send-send"}))
      for (uint32_t size : or_default(sizes, {32}))
        for (uint32_t c : or_default(clients, {1}))
          for (uint32_t w : or_default(windows, {4})) {
            RunSpec s = base(Mode::kEcho);
            s.echo = echo_from_string(e);
            s.size = size;
            s.clients = c;
            s.window = w;
            runs.push_back(s);
            if (all) {  // HERD fig. 5: the same echo with inlining and selective signaling
              s.inlined = true;
              s.signal_every = std::min<uint32_t>(w, 4);
              runs.push_back(s);
            }
          }
  }
  if (all || mode == "atomic") {
    for (uint32_t z : or_default(zs, {1, 16, 256, 4096}))
      for (uint32_t c : or_default(clients, {2}))
        for (uint32_t w : or_default(windows, {16})) {
          RunSpec s = base(Mode::kAtomic);
          s.z = z;
          s.size = 8;
          s.clients = c;
          s.window = w;
          runs.push_back(s);
        }
  }
  if (runs.empty()) throw std::invalid_argument("unknown mode '" + mode + "'");
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  init_logging("fabkv-perf");
  CLI::App app{
      "fabkv-perf: RDMA verb microbenchmarks (HERD sec. 3, Guidelines sec. 5) over libfabric"};
  app.require_subcommand(0, 1);
  app.set_version_flag(
      "--version", [] { return fabric::version_line(); },
      "print fabkv's version and the libfabric loaded, then exit");

  CoordinatorOptions co;
  std::string mode = "all", log_level;
  std::vector<std::string> verbs, echoes;
  std::vector<uint32_t> sizes, clients, windows, zs;
  bool inlined = false;
  uint32_t signal_every = 1;
  double duration = 1.0, warmup = 0.2;
  app.add_option("--provider", co.provider, "auto|shm|tcp|verbs (FI_PROVIDER is honoured by auto)")
      ->capture_default_str();
  app.add_option("--mode", mode, "all|latency|inbound|outbound|echo|atomic")->capture_default_str();
  app.add_option("--verbs", verbs, "inbound/outbound verbs: read,write,send (default all three)")
      ->delimiter(',');
  app.add_option("--sizes", sizes, "payload sizes in bytes (default 32; latency 8,64,512,4096)")
      ->delimiter(',');
  app.add_option("--clients", clients, "client processes per run (list sweeps)")->delimiter(',');
  app.add_option("--window", windows, "outstanding operations per client (default 16; echo 4)")
      ->delimiter(',');
  app.add_option("--z", zs, "atomic: distinct counters (default 1,16,256,4096)")->delimiter(',');
  app.add_option("--echo", echoes, "echo kinds: write-write,write-send,send-send")->delimiter(',');
  app.add_flag("--inline", inlined, "inline payloads (fi_inject / FI_INJECT)");
  app.add_option("--signal-every", signal_every, "selective signaling: every k-th op signaled")
      ->capture_default_str();
  app.add_option("--duration", duration, "seconds measured per run")->capture_default_str();
  app.add_option("--warmup", warmup, "seconds of warm-up per run")->capture_default_str();
  app.add_option("--json", co.json_path, "append one JSON object per run to this file");
  app.add_option("--server", co.server, "use a running `fabkv-perf serve` at HOST:PORT");
  app.add_option("--listen", co.listen, "where the spawned server listens")->capture_default_str();
  app.add_option("--server-core", co.server_core, "core for the server (-1: no pinning)")
      ->capture_default_str();
  app.add_option("--client-core", co.client_core, "core for clients (-1: no pinning)")
      ->capture_default_str();
  app.add_option("--secret", co.secret, "shared secret for the control channel");
  app.add_option("--timeout-ms", co.timeout_ms, "deadline for any wait on a peer")
      ->capture_default_str();
  app.add_option("--log", log_level, "log level: trace|debug|info|warn|error|off");

  ServerRoleOptions so;
  auto* serve = app.add_subcommand("serve", "run a perf server until Ctrl-C or STOP on stdin");
  serve->add_option("--provider", so.provider, "auto|shm|tcp|verbs")->capture_default_str();
  serve->add_option("--listen", so.listen, "control channel HOST:PORT")->capture_default_str();
  serve->add_option("--secret", so.secret, "shared secret clients must present");
  serve->add_option("--core", so.core, "core to pin to (-1: none)")->capture_default_str();
  serve->add_flag("--stdin-control", so.stdin_control, "stop at stdin EOF or a STOP line")
      ->group("");

  ClientRoleOptions cl;
  std::string spec_json;
  auto* client = app.add_subcommand("client", "one client process (spawned by the coordinator)");
  client->group("");  // hidden: an internal role
  client->add_option("--provider", cl.provider)->capture_default_str();
  client->add_option("--server", cl.server)->required();
  client->add_option("--secret", cl.secret);
  client->add_option("--core", cl.core);
  client->add_option("--timeout-ms", cl.timeout_ms);
  client->add_option("--spec-json", spec_json)->required();

  CLI11_PARSE(app, argc, argv);
  if (!log_level.empty() && !set_log_level(log_level)) {
    fmt::print(stderr, "fabkv-perf: unknown log level '{}'\n", log_level);
    return 2;
  }
  try {
    if (*serve) return run_server(so);
    if (*client) {
      cl.spec = spec_from_json(nlohmann::json::parse(spec_json));
      return run_client(cl);
    }
    co.runs = plan(mode, verbs, sizes, clients, windows, zs, echoes, inlined, signal_every,
                   duration, warmup);
    return run_coordinator(co);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-perf: {}\n", e.what());
    return 2;
  }
}
