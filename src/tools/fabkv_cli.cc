// fabkv-cli: get, put, del, next (sequencers) and stats against a fabkv-server, or against
// many as one store (--servers, --cluster: client/cluster.h, docs/cluster.md) where `locate`
// tells which server holds a key; for people and scripts.
// Exit status: 0 success, 1 not found, 2 any error (with a one-line message on stderr).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "client/client.h"
#include "client/cluster.h"
#include "proto/registry.h"

namespace {

constexpr int kExitOk = 0, kExitNotFound = 1, kExitError = 2;

int fail(const std::string& what) {
  std::fprintf(stderr, "fabkv-cli: %s\n", what.c_str());
  return kExitError;
}

int from_status(fabkv::Status s, const std::string& op, const std::string& key) {
  if (s == fabkv::Status::kOk) return kExitOk;
  std::fprintf(stderr, "fabkv-cli: %s %s: %s\n", op.c_str(), key.c_str(), fabkv::to_string(s));
  return s == fabkv::Status::kNotFound ? kExitNotFound : kExitError;
}

// The sequencers of proto/registry.h (no engine), joined by `sep`.
std::string sequencers(const char* sep) {
  std::string s;
  for (const fabkv::proto::Info& p : fabkv::proto::protocols())
    if (p.engine == fabkv::proto::EngineNeed::kNone)
      s += (s.empty() ? "" : sep) + std::string(p.name);
  return s;
}

// The subcommands and their arguments.
struct Commands {
  CLI::App *get = nullptr, *put = nullptr, *del = nullptr, *stats = nullptr, *locate = nullptr,
           *next = nullptr;
  CLI::Option* value_opt = nullptr;
  std::string key, value;
  std::vector<std::string> locate_keys;
};

// The subcommands against many servers (client/cluster.h).
int run_cluster(fabkv::ClusterOptions co, const Commands& cmd) {
  const std::string& key = cmd.key;
  std::unique_ptr<fabkv::Cluster> cluster;
  try {
    cluster = std::make_unique<fabkv::Cluster>(std::move(co));
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  // Why a server failed, when it did: the cluster's statuses alone do not say which one.
  auto explain = [&](fabkv::Status s, const std::string& op) {
    int rc = from_status(s, op, key);
    if (s != fabkv::Status::kOk && s != fabkv::Status::kNotFound) {
      for (size_t i = 0; i < cluster->size(); ++i) {
        auto c = cluster->counters(i);
        if (c.failures > 0)
          std::fprintf(stderr, "fabkv-cli: server %s (%s): %s\n",
                       cluster->server(i).address.c_str(), cluster->server(i).name.c_str(),
                       c.last_error.c_str());
      }
    }
    return rc;
  };
  if (cmd.locate->parsed()) {
    std::vector<std::string> locate_keys = cmd.locate_keys;
    if (locate_keys == std::vector<std::string>{"-"}) {
      locate_keys.clear();
      for (std::string line; std::getline(std::cin, line);) locate_keys.push_back(line);
    }
    for (const std::string& k : locate_keys) {
      std::string line = k;
      for (size_t i : cluster->servers_for_key(k))
        line += fmt::format("\t{}\t{}\t{}", i, cluster->server(i).name, cluster->server(i).address);
      std::printf("%s\n", line.c_str());
    }
    return std::fflush(stdout) == 0 ? kExitOk : fail("cannot write to stdout");
  }
  if (cmd.get->parsed()) {
    std::string v;
    fabkv::Status s = cluster->get(key, &v);
    if (s != fabkv::Status::kOk) return explain(s, "get");
    std::fwrite(v.data(), 1, v.size(), stdout);
    if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    return std::fflush(stdout) == 0 ? kExitOk : fail("cannot write to stdout");
  }
  if (cmd.put->parsed()) return explain(cluster->put(key, cmd.value), "put");
  if (cmd.del->parsed()) return explain(cluster->del(key), "del");
  if (cmd.stats->parsed()) {
    // The cluster's view of each server, with the server's own statistics beside it.
    std::vector<nlohmann::json> each;
    for (size_t i = 0; i < cluster->size(); ++i) {
      std::string why;
      fabkv::Client* c = cluster->client(i, &why);
      try {
        each.push_back(c ? c->stats() : nlohmann::json{{"error", why}});
      } catch (const std::exception& e) {
        each.push_back({{"error", e.what()}});
      }
    }
    nlohmann::json j = cluster->stats();
    for (size_t i = 0; i < each.size(); ++i) j["servers"][i]["stats"] = std::move(each[i]);
    std::printf("%s\n", j.dump(2).c_str());
    return std::fflush(stdout) == 0 ? kExitOk : fail("cannot write to stdout");
  }
  return fail("no command");
}

// The options that say which server(s) to reach and how.
struct Flags {
  fabkv::ClientOptions o;
  std::string servers, cluster_file;
  uint32_t replicas = 1;
  CLI::Option *server_opt = nullptr, *servers_opt = nullptr, *cluster_opt = nullptr,
              *replicas_opt = nullptr, *protocol_opt = nullptr, *provider_opt = nullptr,
              *secret_opt = nullptr, *timeout_opt = nullptr;
};

void add_server_options(CLI::App& app, Flags& f) {
  f.server_opt = app.add_option("--server", f.o.server, "control channel HOST:PORT of the server")
                     ->capture_default_str();
  f.servers_opt =
      app.add_option("--servers", f.servers,
                     "many servers as one store, keys placed by memcached's ketama ring: "
                     "comma-separated HOST:PORT[:WEIGHT][ NAME] control addresses "
                     "(docs/cluster.md)")
          ->excludes(f.server_opt);
  f.cluster_opt = app.add_option("--cluster", f.cluster_file,
                                 "a TOML cluster file: servers, protocol, replicas, ... "
                                 "(docs/cluster.md); flags given as well override it")
                      ->excludes(f.server_opt)
                      ->excludes(f.servers_opt)
                      ->check(CLI::ExistingFile);
  f.replicas_opt =
      app.add_option("--replicas", f.replicas,
                     "with --servers/--cluster: write each key to this many servers, read the "
                     "first that answers")
          ->check(CLI::PositiveNumber);
}

void add_client_options(CLI::App& app, Flags& f) {
  // The protocols of proto/registry.h, each with its summary.
  std::string protocols_help = "access protocol:";
  for (const fabkv::proto::Info& p : fabkv::proto::protocols())
    protocols_help += fmt::format("\n  {}: {}", p.name, p.summary);
  f.protocol_opt = app.add_option("--protocol", f.o.protocol, protocols_help)
                       ->capture_default_str()
                       ->type_name(fabkv::proto::names("|"))
                       ->check(CLI::Validator(
                           [](std::string& name) -> std::string {
                             if (fabkv::proto::find(name)) return "";
                             return "unknown protocol '" + name + "' (one of " +
                                    fabkv::proto::names() + ")";
                           },
                           "", "PROTOCOL"));
  f.provider_opt = app.add_option("--provider", f.o.provider,
                                  "libfabric provider: auto|shm|tcp|verbs; auto follows the "
                                  "server's, any other must be the server's")
                       ->capture_default_str();
  app.add_option("--transport", f.o.transport,
                 "request transport: write (HERD's WRITE into the request region) or send; "
                 "default: the server's")
      ->check(CLI::IsMember({"write", "send"}));
  f.secret_opt = app.add_option("--secret", f.o.secret,
                                "control-channel shared secret (default: none)");
  f.timeout_opt = app.add_option("--timeout-ms", f.o.timeout_ms, "bound on every wait, in ms")
                      ->capture_default_str()
                      ->check(CLI::PositiveNumber);
}

void add_commands(CLI::App& app, Commands& c) {
  c.get = app.add_subcommand("get", "print KEY's value to stdout (raw bytes)");
  c.get->add_option("KEY", c.key, "key (1..250 bytes)")->required();
  c.put = app.add_subcommand("put", "store VALUE (or stdin when omitted) under KEY");
  c.put->add_option("KEY", c.key, "key (1..250 bytes)")->required();
  c.value_opt = c.put->add_option("VALUE", c.value, "value; read from stdin when omitted");
  c.del = app.add_subcommand("del", "delete KEY");
  c.del->add_option("KEY", c.key, "key (1..250 bytes)")->required();
  c.stats = app.add_subcommand("stats", "print the server's statistics as JSON");
  c.locate = app.add_subcommand(
      "locate",
      "with --servers/--cluster: print, for each KEY, the server it is on now (index, "
      "ring name, address; its replicas after it), tab-separated; '-' reads keys from "
      "stdin, one a line. Connects to nothing");
  c.locate->add_option("KEY", c.locate_keys, "keys")->required();
  c.next = app.add_subcommand("next", "print a sequencer's next value (--protocol " +
                                          sequencers("|") + "; docs/sequencer.md)");
}

// A sequencer keeps no key-value data and a key-value protocol hands out no values: says so
// rather than as the client's bare kError. Empty when the command fits the protocol.
std::string misfit(const std::string& protocol, const Commands& c) {
  const bool sequencer = fabkv::proto::find(protocol)->engine == fabkv::proto::EngineNeed::kNone;
  for (const CLI::App* kv : {c.get, c.put, c.del})
    if (sequencer && kv->parsed())
      return fmt::format(
          "{}: protocol '{}' is a sequencer: it serves `next` only "
          "(docs/sequencer.md)",
          kv->get_name(), protocol);
  if (!sequencer && c.next->parsed())
    return fmt::format(
        "next: protocol '{}' keeps key-value data; `next` needs a "
        "sequencer: --protocol {}",
        protocol, sequencers("|"));
  return "";
}

// --servers or --cluster: the cluster file's settings with the flags given on the command line
// over them. Throws when the file or the list cannot be read.
fabkv::ClusterOptions cluster_options(const Flags& f) {
  fabkv::ClusterOptions co;
  if (f.cluster_opt->count()) co = fabkv::load_cluster_file(f.cluster_file);
  else co.servers = fabkv::parse_cluster_servers(f.servers);
  auto take = [](const CLI::Option* opt, auto& to, const auto& from) {
    if (opt->count()) to = from;
  };
  if (f.servers_opt->count()) co.client = f.o;  // nothing from a file: all flags
  take(f.protocol_opt, co.client.protocol, f.o.protocol);
  take(f.provider_opt, co.client.provider, f.o.provider);
  take(f.secret_opt, co.client.secret, f.o.secret);
  take(f.timeout_opt, co.client.timeout_ms, f.o.timeout_ms);
  co.client.transport = f.o.transport;
  if (f.replicas_opt->count() || f.servers_opt->count()) co.replicas = f.replicas;
  return co;
}

// The subcommands against one server.
int run_server(fabkv::ClientOptions o, const Commands& cmd) {
  std::unique_ptr<fabkv::Client> client;
  try {
    o.connect_timeout_ms = std::max(o.timeout_ms, 1000);
    client = fabkv::Client::connect(o);
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  if (cmd.get->parsed()) {
    std::string v;
    fabkv::Status s = client->get(cmd.key, &v);
    if (s != fabkv::Status::kOk) return from_status(s, "get", cmd.key);
    std::fwrite(v.data(), 1, v.size(), stdout);
    if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    if (std::fflush(stdout) != 0) return fail("cannot write to stdout");
    return kExitOk;
  }
  if (cmd.put->parsed()) return from_status(client->put(cmd.key, cmd.value), "put", cmd.key);
  if (cmd.del->parsed()) return from_status(client->del(cmd.key), "del", cmd.key);
  if (cmd.next->parsed()) {
    uint64_t v = 0;
    fabkv::Status s = client->next(&v);
    if (s != fabkv::Status::kOk) return from_status(s, "next", "");
    std::printf("%llu\n", static_cast<unsigned long long>(v));
    if (std::fflush(stdout) != 0) return fail("cannot write to stdout");
    return kExitOk;
  }
  if (cmd.stats->parsed()) {
    try {
      std::printf("%s\n", client->stats().dump(2).c_str());
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    return kExitOk;
  }
  return fail("no command");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabkv-cli: talk to a fabkv-server"};
  Flags f;
  Commands cmd;
  add_server_options(app, f);
  add_client_options(app, f);
  app.require_subcommand(1);
  add_commands(app, cmd);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitError;
  }
  if (cmd.put->parsed() && cmd.value_opt->count() == 0) {
    cmd.value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) return fail("cannot read the value from stdin");
  }
  if (std::string why = misfit(f.o.protocol, cmd); !why.empty()) return fail(why);

  if (f.servers_opt->count() || f.cluster_opt->count()) {
    fabkv::ClusterOptions co;
    try {
      co = cluster_options(f);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    if (cmd.next->parsed()) return fail("next: a sequencer is one server: use --server");
    return run_cluster(std::move(co), cmd);
  }
  if (cmd.locate->parsed()) return fail("locate: needs --servers or --cluster");
  return run_server(f.o, cmd);
}
