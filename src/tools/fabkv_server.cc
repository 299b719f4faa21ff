// fabkv-server: serves the storage core over libfabric. See docs/server.md.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/knobs.h"
#include "common/log.h"
#include "fabric/fabric.h"
#include "memcached/service.h"
#include "server/options.h"
#include "server/server.h"

using namespace fabkv;

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  init_logging("fabkv-server");
  server::ServerOptions o;
  // Every setting is a knob declared once (server/options.cc and the protocols' options.cc):
  // its flag, TOML key, --help group and range.
  Knobs knobs;
  server::declare_knobs(knobs, &o);
  std::string config;
  CLI::App app{"fabkv-server: an in-memory key-value store for RDMA fabrics (libfabric)"};
  app.set_version_flag(
      "--version", [] { return fabric::version_line(); },
      "print fabkv's version and the libfabric loaded, then exit");
  app.add_option("--config", config,
                 "TOML file with the settings below: general ones at the "
                 "top level, each protocol's in its table ([rpc], [herd], [pilaf]); flags "
                 "override it (docs/server.md)");
  knobs.add_to(app);
  CLI11_PARSE(app, argc, argv);

  try {
    // The file first, then every flag given on the command line on top of it.
    if (!config.empty()) knobs.load_toml(config);
    knobs.apply_flags();
    if (!set_log_level(o.log_level))
      throw std::invalid_argument("unknown --log level " + o.log_level);
    server::resolve_defaults(&o);
    server::validate(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-server: {}\n", e.what());
    return 2;
  }

  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::unique_ptr<server::Server> srv;
  std::string memcached_address;  // the front end's "host:port" (--memcached), "" when off
  try {
    srv = std::make_unique<server::Server>(o);
    if (!o.memcached.empty()) {
      memcached::ServiceOptions mo;
      mo.listen = o.memcached;
      mo.max_conns = o.memcached_max_conns;
      mo.max_value = server::engine_max_value(o);
      mo.memory = o.memory;
      mo.conn_memory = o.memcached_conn_memory;
      auto front_end = std::make_unique<memcached::Service>(mo, srv->workers());
      memcached_address = front_end->address();
      srv->attach(std::move(front_end), memcached_address);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-server: {}\n", e.what());
    return 2;
  }
  srv->start();
  spdlog::info("serving {} on {} over {} with {} worker(s), engine {}, poll {}",
               fmt::join(o.protocols, ","), srv->address(), srv->provider(), o.workers, o.engine,
               o.poll.mode == PollMode::kSpin
                   ? std::string("spin")
                   : fmt::format("adaptive (spin {} us, sleep up to {} us)", o.poll.spin_us,
                                 o.poll.sleep_us));
  fmt::print("READY {}\n", srv->address());
  if (!memcached_address.empty()) {
    spdlog::info("memcached protocols on {}", memcached_address);
    fmt::print("MEMCACHED {}\n", memcached_address);
  }
  if (!srv->name().empty()) spdlog::info("ring name '{}' (docs/cluster.md)", srv->name());
  std::fflush(stdout);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  spdlog::info("shutting down: answering requests in hand, releasing fabric resources");
  srv->stop();
  srv.reset();
  return 0;
}
