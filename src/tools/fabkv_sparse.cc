// fabkv-sparse: one client, one GET at a time, spaced --gap-us apart, against a running
// fabkv-server; prints the latency of those GETs. What fabkv-bench cannot show: a closed-loop
// load never leaves a server idle, so this is how the cost of waking an adaptive server
// (--poll adaptive, docs/server.md "Polling") is measured: the gap lets it fall asleep
// before each request. The client sleeps through the gap (--spin-gap: spins) and times each
// GET from after it woke, so its own wake-up is not in the figure; while it waits for the
// answer it spins (ClientOptions::poll, --client-poll), so only the server's waking is.
//
//   fabkv-sparse --server 127.0.0.1:7000 --gap-us 2000 --count 2000 [--protocol herd] [--core 1]
//   fabkv-sparse --server 127.0.0.1:7000 --gap-us 12000000 --count 1   # hold an idle client
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "client/client.h"
#include "common/cpu.h"
#include "common/histogram.h"

using Clock = std::chrono::steady_clock;
using Clock_t = Clock::time_point;

int main(int argc, char** argv) {
  CLI::App app{"fabkv-sparse: the latency of GETs spaced out so the server goes idle between them"};
  fabkv::ClientOptions o;
  int gap_us = 2000, count = 2000, core = 1;
  bool spin_gap = false;
  app.add_option("--server", o.server, "control channel HOST:PORT")->capture_default_str();
  app.add_option("--protocol", o.protocol, "access protocol")->capture_default_str();
  app.add_option("--provider", o.provider, "auto|shm|tcp|verbs")->capture_default_str();
  app.add_option("--transport", o.transport, "write|send (default: the server's)");
  app.add_option("--client-poll", o.poll, "how this client waits: spin|adaptive")
      ->capture_default_str();
  app.add_option("--gap-us", gap_us, "pause between two GETs")->capture_default_str();
  app.add_option("--count", count, "GETs measured")->capture_default_str();
  app.add_flag("--spin-gap", spin_gap,
               "spin through the gap instead of sleeping (on a busy host a spinning client is "
               "descheduled at random, inside GETs too)");
  app.add_option("--core", core, "core to pin this client to (-1: none)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (core >= 0 && !fabkv::pin_this_thread(core))
    std::fprintf(stderr, "fabkv-sparse: could not pin to core %d\n", core);
  std::unique_ptr<fabkv::Client> kv;
  try {
    kv = fabkv::Client::connect(o);
  } catch (const fabkv::ClientError& e) {
    std::fprintf(stderr, "fabkv-sparse: %s\n", e.what());
    return 2;
  }
  if (kv->put("sparse-key", std::string(32, 'v')) != fabkv::Status::kOk) {
    std::fprintf(stderr, "fabkv-sparse: put failed\n");
    return 2;
  }
  fabkv::LatencyHistogram h;
  double gap_sum_us = 0;  // between two GETs' starts, as it was (a sleep overshoots)
  Clock_t prev{};
  std::string value;
  const int warmup = count >= 100 ? 10 : 0;  // the first ones warm caches and connections up
  for (int i = 0; i < count + warmup; ++i) {
    // Through the gap: asleep (or spinning); the GET is timed from here either way.
    const auto until = Clock::now() + std::chrono::microseconds(gap_us);
    if (!spin_gap) std::this_thread::sleep_until(until);
    while (Clock::now() < until) {
    }
    const auto t0 = Clock::now();
    fabkv::Status s = kv->get("sparse-key", &value);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    if (s != fabkv::Status::kOk) {
      std::fprintf(stderr, "fabkv-sparse: get: %s\n", fabkv::to_string(s));
      return 1;
    }
    if (i >= warmup) {
      h.record(static_cast<uint64_t>(ns.count()));
      if (i > warmup) gap_sum_us += std::chrono::duration<double, std::micro>(t0 - prev).count();
    }
    prev = t0;
  }
  std::printf("%s\n", fmt::format("gap_us={} real_gap_us={:.0f} count={} mean_us={:.1f} "
                                  "p50_us={:.1f} p90_us={:.1f} p99_us={:.1f} max_us={:.1f}",
                                  gap_us, count > 1 ? gap_sum_us / (count - 1) : 0.0, h.count(),
                                  h.mean_ns() / 1e3, static_cast<double>(h.quantile_ns(0.5)) / 1e3,
                                  static_cast<double>(h.quantile_ns(0.9)) / 1e3,
                                  static_cast<double>(h.quantile_ns(0.99)) / 1e3,
                                  static_cast<double>(h.max_ns()) / 1e3)
                          .c_str());
  return 0;
}
