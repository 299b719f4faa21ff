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
    if (p.engine == fabkv::proto::EngineNeed::kNone) s += (s.empty() ? "" : sep) + std::string(p.name);
  return s;
}

// The subcommands against many servers (client/cluster.h).
int run_cluster(fabkv::ClusterOptions co, const CLI::App* locate, const CLI::App* get,
                const CLI::App* put, const CLI::App* del, const CLI::App* stats,
                const std::string& key, const std::string& value,
                std::vector<std::string> locate_keys) {
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
  if (locate->parsed()) {
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
  if (get->parsed()) {
    std::string v;
    fabkv::Status s = cluster->get(key, &v);
    if (s != fabkv::Status::kOk) return explain(s, "get");
    std::fwrite(v.data(), 1, v.size(), stdout);
    if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    return std::fflush(stdout) == 0 ? kExitOk : fail("cannot write to stdout");
  }
  if (put->parsed()) return explain(cluster->put(key, value), "put");
  if (del->parsed()) return explain(cluster->del(key), "del");
  if (stats->parsed()) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabkv-cli: talk to a fabkv-server"};
  fabkv::ClientOptions o;
  auto* server_opt = app.add_option("--server", o.server, "control channel HOST:PORT of the server")
                         ->capture_default_str();
  std::string servers, cluster_file;
  uint32_t replicas = 1;
  auto* servers_opt =
      app.add_option("--servers", servers,
                     "many servers as one store, keys placed by memcached's ketama ring: "
                     "comma-separated HOST:PORT[:WEIGHT][ NAME] control addresses "
                     "(docs/cluster.md)")
          ->excludes(server_opt);
  auto* cluster_opt = app.add_option("--cluster", cluster_file,
                                     "a TOML cluster file: servers, protocol, replicas, ... "
                                     "(docs/cluster.md); flags given as well override it")
                          ->excludes(server_opt)
                          ->excludes(servers_opt)
                          ->check(CLI::ExistingFile);
  auto* replicas_opt =
      app.add_option("--replicas", replicas,
                     "with --servers/--cluster: write each key to this many servers, read the "
                     "first that answers")
          ->check(CLI::PositiveNumber);
  // The protocols of proto/registry.h, each with its summary.
  std::string protocols_help = "access protocol:";
  for (const fabkv::proto::Info& p : fabkv::proto::protocols())
    protocols_help += fmt::format("\n  {}: {}", p.name, p.summary);
  auto* protocol_opt = app.add_option("--protocol", o.protocol, protocols_help)
      ->capture_default_str()
      ->type_name(fabkv::proto::names("|"))
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            if (fabkv::proto::find(name)) return "";
            return "unknown protocol '" + name + "' (one of " + fabkv::proto::names() + ")";
          },
          "", "PROTOCOL"));
  auto* provider_opt = app.add_option("--provider", o.provider,
                 "libfabric provider: auto|shm|tcp|verbs; must match the server's "
                 "(auto: shm for a local server, tcp otherwise)")
      ->capture_default_str();
  app.add_option("--transport", o.transport,
                 "request transport: write (HERD's WRITE into the request region) or send; "
                 "default: the server's")
      ->check(CLI::IsMember({"write", "send"}));
  auto* secret_opt =
      app.add_option("--secret", o.secret, "control-channel shared secret (default: none)");
  auto* timeout_opt = app.add_option("--timeout-ms", o.timeout_ms, "bound on every wait, in ms")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.require_subcommand(1);

  std::string key, value;
  bool have_value = false;
  auto* get = app.add_subcommand("get", "print KEY's value to stdout (raw bytes)");
  get->add_option("KEY", key, "key (1..250 bytes)")->required();
  auto* put = app.add_subcommand("put", "store VALUE (or stdin when omitted) under KEY");
  put->add_option("KEY", key, "key (1..250 bytes)")->required();
  auto* value_opt = put->add_option("VALUE", value, "value; read from stdin when omitted");
  auto* del = app.add_subcommand("del", "delete KEY");
  del->add_option("KEY", key, "key (1..250 bytes)")->required();
  auto* stats = app.add_subcommand("stats", "print the server's statistics as JSON");
  std::vector<std::string> locate_keys;
  auto* locate = app.add_subcommand(
      "locate", "with --servers/--cluster: print, for each KEY, the server it is on now (index, "
                "ring name, address; its replicas after it), tab-separated; '-' reads keys from "
                "stdin, one a line. Connects to nothing");
  locate->add_option("KEY", locate_keys, "keys")->required();
  auto* next = app.add_subcommand(
      "next", "print a sequencer's next value (--protocol " + sequencers("|") + "; docs/sequencer.md)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitError;
  }
  have_value = value_opt->count() > 0;
  if (put->parsed() && !have_value) {
    value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) return fail("cannot read the value from stdin");
  }

  // A sequencer keeps no key-value data and a key-value protocol hands out no values: say so
  // here rather than as the client's bare kError.
  const bool sequencer = fabkv::proto::find(o.protocol)->engine == fabkv::proto::EngineNeed::kNone;
  for (const CLI::App* kv : {get, put, del})
    if (sequencer && kv->parsed())
      return fail(fmt::format("{}: protocol '{}' is a sequencer: it serves `next` only "
                              "(docs/sequencer.md)",
                              kv->get_name(), o.protocol));
  if (!sequencer && next->parsed())
    return fail(fmt::format("next: protocol '{}' keeps key-value data; `next` needs a "
                            "sequencer: --protocol {}",
                            o.protocol, sequencers("|")));

  if (servers_opt->count() || cluster_opt->count()) {
    fabkv::ClusterOptions co;
    try {
      if (cluster_opt->count()) co = fabkv::load_cluster_file(cluster_file);
      else co.servers = fabkv::parse_cluster_servers(servers);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    // Flags given on the command line win over the file's settings.
    auto take = [](const CLI::Option* opt, auto& to, const auto& from) {
      if (opt->count()) to = from;
    };
    if (servers_opt->count()) co.client = o;  // nothing from a file: all flags
    take(protocol_opt, co.client.protocol, o.protocol);
    take(provider_opt, co.client.provider, o.provider);
    take(secret_opt, co.client.secret, o.secret);
    take(timeout_opt, co.client.timeout_ms, o.timeout_ms);
    co.client.transport = o.transport;
    if (replicas_opt->count() || servers_opt->count()) co.replicas = replicas;
    if (next->parsed()) return fail("next: a sequencer is one server: use --server");
    return run_cluster(std::move(co), locate, get, put, del, stats, key, value, locate_keys);
  }
  if (locate->parsed()) return fail("locate: needs --servers or --cluster");

  std::unique_ptr<fabkv::Client> client;
  try {
    o.connect_timeout_ms = std::max(o.timeout_ms, 1000);
    client = fabkv::Client::connect(o);
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  if (get->parsed()) {
    std::string v;
    fabkv::Status s = client->get(key, &v);
    if (s != fabkv::Status::kOk) return from_status(s, "get", key);
    std::fwrite(v.data(), 1, v.size(), stdout);
    if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    if (std::fflush(stdout) != 0) return fail("cannot write to stdout");
    return kExitOk;
  }
  if (put->parsed()) return from_status(client->put(key, value), "put", key);
  if (del->parsed()) return from_status(client->del(key), "del", key);
  if (next->parsed()) {
    uint64_t v = 0;
    fabkv::Status s = client->next(&v);
    if (s != fabkv::Status::kOk) return from_status(s, "next", "");
    std::printf("%llu\n", static_cast<unsigned long long>(v));
    if (std::fflush(stdout) != 0) return fail("cannot write to stdout");
    return kExitOk;
  }
  if (stats->parsed()) {
    try {
      std::printf("%s\n", client->stats().dump(2).c_str());
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    return kExitOk;
  }
  return fail("no command");
}
