// fabkv-cli: get, put, del, next (sequencers) and stats against a fabkv-server, for people and
// scripts.
// Exit status: 0 success, 1 not found, 2 any error (with a one-line message on stderr).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "client/client.h"
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabkv-cli: talk to a fabkv-server"};
  fabkv::ClientOptions o;
  app.add_option("--server", o.server, "control channel HOST:PORT of the server")
      ->capture_default_str();
  // The protocols of proto/registry.h, each with its summary.
  std::string protocols_help = "access protocol:";
  for (const fabkv::proto::Info& p : fabkv::proto::protocols())
    protocols_help += fmt::format("\n  {}: {}", p.name, p.summary);
  app.add_option("--protocol", o.protocol, protocols_help)
      ->capture_default_str()
      ->type_name(fabkv::proto::names("|"))
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            if (fabkv::proto::find(name)) return "";
            return "unknown protocol '" + name + "' (one of " + fabkv::proto::names() + ")";
          },
          "", "PROTOCOL"));
  app.add_option("--provider", o.provider,
                 "libfabric provider: auto|shm|tcp|verbs; must match the server's "
                 "(auto: shm for a local server, tcp otherwise)")
      ->capture_default_str();
  app.add_option("--transport", o.transport,
                 "request transport: write (HERD's WRITE into the request region) or send; "
                 "default: the server's")
      ->check(CLI::IsMember({"write", "send"}));
  app.add_option("--secret", o.secret, "control-channel shared secret (default: none)");
  app.add_option("--timeout-ms", o.timeout_ms, "bound on every wait, in ms")
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
