// fabkv-server: serves the storage core over libfabric. See docs/server.md.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/log.h"
#include "fabric/fabric.h"
#include "server/server.h"

using namespace fabkv;

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  init_logging("fabkv-server");
  server::ServerOptions o;
  std::string config, memory = "256M", max_value = "64K", transport = "write", batching = "on";
  std::string cores, pilaf_entries = "64K", pilaf_extents = "8M";
  CLI::App app{"fabkv-server: an in-memory key-value store for RDMA fabrics (libfabric)"};
  app.set_version_flag("--version", [] { return fabric::version_line(); },
                       "print fabkv's version and the libfabric loaded, then exit");
  app.add_option("--config", config, "TOML file with the settings below (flags override it)");
  app.add_option("--provider", o.provider, "auto|shm|tcp|verbs: auto picks verbs with an RDMA "
                 "device, else shm for a loopback --listen, else tcp")->capture_default_str();
  app.add_option("--listen", o.listen, "control channel HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--secret", o.secret, "shared secret clients must present (sent in clear)");
  app.add_option("--workers", o.workers, "worker threads, one partition each (EREW)")
      ->capture_default_str();
  app.add_option("--cores", cores, "comma-separated cores for workers (default: worker i on core i; -1 unpinned)");
  app.add_option("--engine", o.engine, "cache (lossy, FIFO eviction) | store (lossless, kNoSpace "
                 "when full) | pilaf (lossless cuckoo table clients READ); default: pilaf when a "
                 "pilaf protocol is served, else cache");
  app.add_option("--memory", memory, "engine memory across all workers (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("--max-value", max_value, "largest value accepted")->capture_default_str();
  app.add_option("--protocols", o.protocols, "access protocols to serve, any of herd,pilaf,pilaf-vo "
                 "(all reach the same data)")->delimiter(',')->capture_default_str();
  app.add_option("--transport", transport, "how HERD requests arrive: write (into the request "
                 "region, HERD sec. 4.2) | send (to the worker, HERD sec. 5.5)")->capture_default_str();
  app.add_option("--window", o.rpc.window, "W: outstanding requests per client per worker")
      ->capture_default_str();
  app.add_option("--slot-size", o.rpc.slot_size, "request slot bytes; larger requests go indirect")
      ->capture_default_str();
  app.add_option("--max-clients", o.max_clients, "clients at once")->capture_default_str();
  app.add_option("--queues", o.rpc.queues, "multi-queue: response endpoints per worker")
      ->capture_default_str();
  app.add_option("--batching", batching, "response batching (FI_MORE): on|off")->capture_default_str();
  app.add_option("--pilaf-entries", pilaf_entries, "pilaf engine: starting table entries per "
                 "worker (doubles when full)")->capture_default_str();
  app.add_option("--pilaf-extents", pilaf_extents, "pilaf engine: starting extent bytes per "
                 "worker (doubles when full)")->capture_default_str();
  app.add_option("--oplog", o.oplog, "log every PUT/DELETE asynchronously to FILE.<worker> and "
                 "replay it at start (Pilaf sec. 4); off by default");
  app.add_flag("--oplog-fsync", o.oplog_fsync, "fdatasync every written batch of the log");
  app.add_option("--log", o.log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (!config.empty()) {
      // The file first, then every flag given on the command line again on top of it.
      server::ServerOptions from_file;
      server::load_toml(config, &from_file);
      auto given = [&](const char* name) { return app.count(name) > 0; };
      if (!given("--provider")) o.provider = from_file.provider;
      if (!given("--listen")) o.listen = from_file.listen;
      if (!given("--secret")) o.secret = from_file.secret;
      if (!given("--workers")) o.workers = from_file.workers;
      if (!given("--engine")) o.engine = from_file.engine;
      if (!given("--memory")) memory = std::to_string(from_file.memory);
      if (!given("--max-value")) max_value = std::to_string(from_file.max_value);
      if (!given("--protocols")) o.protocols = from_file.protocols;
      if (!given("--transport")) transport = rpc::to_string(from_file.herd.transport);
      if (!given("--window")) o.rpc.window = from_file.rpc.window;
      if (!given("--slot-size")) o.rpc.slot_size = from_file.rpc.slot_size;
      if (!given("--max-clients")) o.max_clients = from_file.max_clients;
      if (!given("--queues")) o.rpc.queues = from_file.rpc.queues;
      if (!given("--batching")) batching = from_file.rpc.batching ? "on" : "off";
      if (!given("--log")) o.log_level = from_file.log_level;
      if (!given("--cores")) o.cores = from_file.cores;
      if (!given("--pilaf-entries")) pilaf_entries = std::to_string(from_file.pilaf.entries);
      if (!given("--pilaf-extents")) pilaf_extents = std::to_string(from_file.pilaf.extents);
      if (!given("--oplog")) o.oplog = from_file.oplog;
      if (!given("--oplog-fsync")) o.oplog_fsync = from_file.oplog_fsync;
    }
    o.memory = server::parse_bytes(memory);
    o.max_value = server::parse_bytes(max_value);
    o.pilaf.entries = server::parse_bytes(pilaf_entries);
    o.pilaf.extents = server::parse_bytes(pilaf_extents);
    if (transport == "write") o.herd.transport = rpc::Transport::kWrite;
    else if (transport == "send") o.herd.transport = rpc::Transport::kSend;
    else throw std::invalid_argument("--transport must be write or send");
    if (batching != "on" && batching != "off") throw std::invalid_argument("--batching must be on or off");
    o.rpc.batching = batching == "on";
    if (!cores.empty()) {
      o.cores.clear();
      size_t pos = 0;
      while (pos <= cores.size()) {
        size_t comma = cores.find(',', pos);
        o.cores.push_back(std::stoi(cores.substr(pos, comma - pos)));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    }
    if (!set_log_level(o.log_level)) throw std::invalid_argument("unknown --log level " + o.log_level);
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
  try {
    srv = std::make_unique<server::Server>(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-server: {}\n", e.what());
    return 2;
  }
  srv->start();
  spdlog::info("serving {} on {} over {} with {} worker(s), engine {}, transport {}",
               fmt::join(o.protocols, ","), srv->address(), srv->provider(), o.workers, o.engine,
               rpc::to_string(o.herd.transport));
  fmt::print("READY {}\n", srv->address());
  std::fflush(stdout);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  spdlog::info("shutting down: answering requests in hand, releasing fabric resources");
  srv->stop();
  srv.reset();
  return 0;
}
