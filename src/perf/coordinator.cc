// The coordinator: spawns the server (unless --server names one) and, for each run, its client
// processes; starts them together, merges what they report, and prints a table and JSON.
#include <csignal>
#include <fstream>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "common/histogram.h"
#include "common/log.h"
#include "control/client.h"
#include "perf/perf.h"
#include "perf/process.h"
#include "perf/wire.h"

namespace fabkv::perf {

namespace {

struct RunOutcome {
  bool ok = false;
  std::string error;
  nlohmann::json record;
};

fabric::VerbSnapshot snapshot_from_json(const nlohmann::json& j) {
  fabric::VerbSnapshot s;
  for (size_t i = 0; i < fabric::kVerbKinds; ++i) {
    const auto& o = j.at(fabric::to_string(static_cast<fabric::Verb>(i)));
    fabric::VerbStats& v = s.verbs[i];
    v.posted = o.at("posted");
    v.bytes = o.at("bytes");
    v.signaled = o.at("signaled");
    v.inlined = o.at("inlined");
    v.with_imm = o.at("with_imm");
    v.completed = o.at("completed");
    v.errors = o.at("errors");
    v.inbound = o.at("inbound");
    v.inbound_bytes = o.at("inbound_bytes");
  }
  return s;
}

class Coordinator {
 public:
  explicit Coordinator(const CoordinatorOptions& o) : o_(o), exe_(self_executable()) {}

  int run() {
    std::string address = o_.server;
    if (address.empty()) {
      std::vector<std::string> argv = {exe_,
                                       "serve",
                                       "--provider",
                                       o_.provider,
                                       "--listen",
                                       o_.listen,
                                       "--core",
                                       std::to_string(o_.server_core),
                                       "--stdin-control"};
      if (!o_.secret.empty()) argv.insert(argv.end(), {"--secret", o_.secret});
      server_.emplace(argv);
      std::string line;
      if (!server_->read_line(&line, Deadline::after_ms(15000)) || line.rfind("READY ", 0) != 0) {
        fmt::print(stderr, "fabkv-perf: the server did not start (see its log above)\n");
        return 2;
      }
      address = line.substr(6);
    }
    try {
      control::Hello hello;
      hello.service = kService;
      hello.payload = json_bytes({{"observer", true}});
      observer_.emplace(control::ControlClient::connect(address, hello, o_.timeout_ms, o_.secret));
    } catch (const std::exception& e) {
      fmt::print(stderr, "fabkv-perf: cannot reach the server at {}: {}\n", address, e.what());
      return 2;
    }
    std::string provider = observer_->welcome().provider;
    if (server_)
      fmt::print("fabkv-perf: provider {}, server {} (spawned, core {}), client core {}\n",
                 provider, address, o_.server_core, o_.client_core);
    else
      fmt::print("fabkv-perf: provider {}, server {} (running elsewhere), client core {}\n",
                 provider, address, o_.client_core);
    fmt::print("{:<38} {:>9} {:>8} {:>8} {:>8} {:>8}  {:<28} {}\n", "run", "Mops/s", "mean us",
               "p50 us", "p99 us", "p99.9", "client verbs/op (r w s a)", "server verbs/op");
    std::ofstream json;
    if (!o_.json_path.empty()) json.open(o_.json_path, std::ios::app);
    int failures = 0;
    for (const RunSpec& spec : o_.runs) {
      RunOutcome out = run_one(spec, address, provider);
      if (!out.ok) {
        failures++;
        fmt::print("{:<38} error: {}\n", spec.label(), out.error);
        continue;
      }
      if (json.is_open()) json << out.record.dump() << "\n";
    }
    std::cout.flush();
    observer_.reset();
    if (server_) {
      server_->write_line("STOP");
      if (server_->wait(Deadline::after_ms(5000)) < 0) server_->kill(SIGKILL);
    }
    return failures == 0 ? 0 : 1;
  }

 private:
  nlohmann::json server_counters() {
    auto reply = bytes_json(observer_->request(json_bytes({{"op", "counters"}}), o_.timeout_ms));
    return reply.at("counters");
  }

  // What a run's clients reported, summed.
  struct ClientTotals {
    uint64_t ops = 0, all_ops = 0;  // in the measured phase; since GO
    double rate = 0;                // ops/s, each client's over its own measured time
    LatencyHistogram hist;
    fabric::VerbSnapshot counters;
    nlohmann::json per_client = nlohmann::json::array();
  };

  // Adds one client's report line to `t`; returns what went wrong, if anything did.
  static std::optional<std::string> add_report(const std::string& line, ClientTotals& t) {
    nlohmann::json r;
    try {
      r = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      return "unreadable client report: " + line;
    }
    if (r.contains("error")) return r["error"].get<std::string>();
    uint64_t n = r.at("ops").get<uint64_t>();
    double secs = r.at("seconds").get<double>();
    t.ops += n;
    t.all_ops += r.at("all_ops").get<uint64_t>();
    t.rate += secs > 0 ? static_cast<double>(n) / secs : 0;
    t.per_client.push_back(n);
    t.hist.merge(LatencyHistogram::from_json(r.at("histogram")));
    t.counters += snapshot_from_json(r.at("counters"));
    return std::nullopt;
  }

  // Starts the run's client processes and waits until each is READY; returns what went wrong,
  // if anything did.
  std::optional<std::string> start_clients(const RunSpec& spec, const std::string& address,
                                           std::vector<std::unique_ptr<ChildProcess>>& clients) {
    for (uint32_t i = 0; i < spec.clients; ++i) {
      std::vector<std::string> argv = {exe_,           "client",
                                       "--provider",   o_.provider,
                                       "--server",     address,
                                       "--core",       std::to_string(o_.client_core),
                                       "--timeout-ms", std::to_string(o_.timeout_ms),
                                       "--spec-json",  to_json(spec).dump()};
      if (!o_.secret.empty()) argv.insert(argv.end(), {"--secret", o_.secret});
      clients.push_back(std::make_unique<ChildProcess>(argv));
    }
    std::string line;
    for (auto& c : clients) {
      if (!c->read_line(&line, Deadline::after_ms(15000))) return "a client did not start";
      if (line != "READY") return client_error(line);
    }
    return std::nullopt;
  }

  // The run's line of the table and its record.
  static nlohmann::json report(const RunSpec& spec, const std::string& provider,
                               const ClientTotals& t, const fabric::VerbSnapshot& server_diff) {
    // Client counters cover the measured phase; the server's cover everything since GO.
    auto per_op = [&](const fabric::VerbSnapshot& s, fabric::Verb v) {
      uint64_t n = &s == &server_diff ? t.all_ops : t.ops;
      return n ? static_cast<double>(s[v].posted) / static_cast<double>(n) : 0.0;
    };
    auto verbs = [&](const fabric::VerbSnapshot& s) {
      using fabric::Verb;
      return fmt::format("{:.2f} {:.2f} {:.2f} {:.2f}", per_op(s, Verb::kRead),
                         per_op(s, Verb::kWrite), per_op(s, Verb::kSend), per_op(s, Verb::kAtomic));
    };
    const LatencyHistogram& hist = t.hist;
    double us = 1e-3;
    fmt::print("{:<38} {:>9.3f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.2f}  {:<28} {}\n", spec.label(),
               t.rate / 1e6, hist.mean_ns() * us, hist.quantile_ns(0.5) * us,
               hist.quantile_ns(0.99) * us, hist.quantile_ns(0.999) * us, verbs(t.counters),
               verbs(server_diff));
    std::cout.flush();
    return {{"tool", "fabkv-perf"},
            {"provider", provider},
            {"spec", to_json(spec)},
            {"label", spec.label()},
            {"ops", t.ops},
            {"throughput_ops", t.rate},
            {"latency_us",
             {{"mean", hist.mean_ns() * us},
              {"p50", hist.quantile_ns(0.5) * us},
              {"p90", hist.quantile_ns(0.9) * us},
              {"p99", hist.quantile_ns(0.99) * us},
              {"p999", hist.quantile_ns(0.999) * us}}},
            {"per_client_ops", t.per_client},
            {"client_counters", t.counters.to_json()},
            {"server_counters", server_diff.to_json()}};
  }

  RunOutcome run_one(const RunSpec& spec, const std::string& address, const std::string& provider) {
    RunOutcome out;
    try {
      validate(spec);
    } catch (const std::exception& e) {
      out.error = e.what();
      return out;
    }
    std::vector<std::unique_ptr<ChildProcess>> clients;
    if (auto error = start_clients(spec, address, clients)) {
      out.error = *error;
      return out;
    }
    auto server_before = snapshot_from_json(server_counters());
    for (auto& c : clients) c->write_line("GO");
    int64_t budget_ms = static_cast<int64_t>((spec.duration_s + spec.warmup_s) * 1000) +
                        o_.timeout_ms + 5000;
    ClientTotals totals;
    std::string line;
    for (auto& c : clients) {
      if (!c->read_line(&line, Deadline::after_ms(budget_ms))) {
        out.error = "a client did not report in time";
        return out;
      }
      if (auto error = add_report(line, totals)) {
        out.error = *error;
        return out;
      }
    }
    for (auto& c : clients) c->wait(Deadline::after_ms(5000));
    auto server_diff = snapshot_from_json(server_counters()) - server_before;
    out.record = report(spec, provider, totals, server_diff);
    out.ok = true;
    return out;
  }

  static std::string client_error(const std::string& line) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.contains("error")) return j["error"].get<std::string>();
    } catch (const std::exception&) {
    }
    return "unexpected client output: " + line;
  }

  const CoordinatorOptions& o_;
  std::string exe_;
  std::optional<ChildProcess> server_;
  std::optional<control::ControlClient> observer_;
};

}  // namespace

int run_coordinator(const CoordinatorOptions& o) {
  signal(SIGPIPE, SIG_IGN);
  return Coordinator(o).run();
}

}  // namespace fabkv::perf
