// Admission against real fabkv-server processes, on shm and tcp (issue #24: one bad handshake
// must never cost other clients anything). A client of another fabric, and Hellos whose fabric
// address the server cannot use (garbage, empty, oversized, another provider's), are refused
// in the handshake with a message that says why; the slot and the address vector they would
// have used come back clean, and the next correct client is served. Also the control
// channel's secret through fabkv-cli.
#include <chrono>
#include <random>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/deadline.h"
#include "fabric/rxm.h"
#include "raw_client.h"

namespace fabkv::testing {
namespace {

std::string other_provider(const std::string& p) { return p == "shm" ? "tcp" : "shm"; }

// A refusal comes in the handshake: a refused client exits well before the data path's timeout
// (kWrongClientTimeoutMs, twice this) could pass, as it did when an unusable fabric was found
// only on the data path. A refused fabkv-cli takes 0.05-0.5 s here, but opening tcp alone is
// ~0.6 s of CPU (tests/client/fault_test.cc), stretched on a loaded host, several times more
// in sanitizer builds: the bound leaves room for that.
#ifdef FABKV_SANITIZED
constexpr int kRefusedWithinMs = 5000;
#else
constexpr int kRefusedWithinMs = 3000;
#endif
constexpr int kWrongClientTimeoutMs = 2 * kRefusedWithinMs;

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr
};

// fabkv-cli through /bin/sh, so that its stderr is read too (ChildProcess pipes stdout only),
// and a newline after it, so that a value printed without one (get) is read as a line.
// `env`: an assignment for the environment of fabkv-cli alone ("NAME=value"), or "".
CliRun run_cli(const std::vector<std::string>& args, const std::string& env = "") {
  std::string cmd = (env.empty() ? "" : env + " ") + "'" + FABKV_CLI_BIN + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1; rc=$?; echo; exit $rc";
  perf::ChildProcess p({"/bin/sh", "-c", cmd});
  p.close_stdin();
  CliRun r;
  std::string line;
  while (p.read_line(&line, Deadline::after_ms(20000))) r.out += line + "\n";
  r.rc = p.wait(Deadline::after_ms(20000));
  return r;
}

class Admission : public ::testing::TestWithParam<std::string> {
 protected:
  // Two client slots: a refused client that kept one would show as the second good client
  // being turned away.
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(GetParam(),
                                              std::vector<std::string>{"--max-clients", "2"});
  }

  CliRun cli(const std::string& provider, const std::vector<std::string>& command) {
    std::vector<std::string> a = {"--server",     server_->address(),
                                  "--provider",   provider,
                                  "--timeout-ms", std::to_string(kWrongClientTimeoutMs)};
    a.insert(a.end(), command.begin(), command.end());
    return run_cli(a);
  }

  std::unique_ptr<Client> good_client() {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam();
    o.connect_timeout_ms = 5000;
    return Client::connect(o);
  }

  // A correct client connects, writes and reads back.
  void expect_served(const std::string& key) {
    std::unique_ptr<Client> c;
    ASSERT_NO_THROW(c = good_client()) << "a correct client was not admitted";
    ASSERT_EQ(c->put(key, "value-of-" + key), Status::kOk) << key;
    std::string v;
    ASSERT_EQ(c->get(key, &v), Status::kOk) << key;
    EXPECT_EQ(v, "value-of-" + key);
  }

  // A Hello as fabkv's client sends it, with the server's own provider name and `address`.
  control::Hello hello_with(std::span<const uint8_t> address) {
    control::Hello h;
    h.service = proto::kService;
    h.provider = own_provider_name();
    h.fabric_address.assign(address.begin(), address.end());
    std::string p = R"({"protocol":"herd"})";
    h.payload.assign(p.begin(), p.end());
    return h;
  }

  std::string own_provider_name() {
    if (!own_) {
      fabric::FabricOptions fo;
      fo.provider = GetParam();
      fo.quiet = true;
      own_ = fabric::Fabric::open(fo);
    }
    return own_->provider_name();
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<fabric::Fabric> own_;
};

// A client that asks for another fabric than the server's (shm against tcp, tcp against shm)
// is refused at once, in the handshake, with both named and the flag to use, and exit code 2;
// the correct client right after is served, round after round (issue #24: before, one wrong
// client on tcp made every later client time out).
TEST_P(Admission, AClientOfAnotherFabricIsRefusedAndTheNextOneIsServed) {
  const std::string server = GetParam(), wrong = other_provider(server);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("client --provider " + wrong + ", round " + std::to_string(round));
    const auto t0 = Clock::now();
    CliRun r = cli(wrong, {"put", "x", "y"});
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("the server serves " + server + "; this client asked for " + wrong),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("start the client with --provider " + server), std::string::npos) << r.out;
    EXPECT_LT(took.count(), kRefusedWithinMs) << r.out;
    CliRun ok = cli(server, {"put", "x", "y" + std::to_string(round)});
    EXPECT_EQ(ok.rc, 0) << "the correct client after it: " << ok.out;
  }
  expect_served("after-wrong-fabrics");
  // Nobody refused is counted as a client.
  std::unique_ptr<Client> c = good_client();
  nlohmann::json st = c->stats();
  EXPECT_EQ(st.at("clients").at("active").get<uint64_t>(), 1u) << st.dump();
}

// Fabric addresses that no client of this server could have: each is refused in the handshake
// with the reason, and the server serves on.
TEST_P(Admission, GarbageAddressesAreRefusedAndTheServerServesOn) {
  std::mt19937_64 rng(24);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
  };
  // A real endpoint's name of the other provider (a process may open both).
  fabric::FabricOptions fo;
  fo.provider = other_provider(GetParam());
  fo.quiet = true;
  auto other = fabric::Fabric::open(fo);
  fabric::Endpoint other_ep(*other);

  std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"empty", {}},
      {"one byte", {0x02}},
      {"16 random bytes", random_bytes(16)},
      {"300 random bytes", random_bytes(300)},
      {"oversized", std::vector<uint8_t>(control::kMaxAddressSize, 'a')},
      {"another provider's", other_ep.name()},
  };
  for (const auto& [what, address] : cases) {
    SCOPED_TRACE(what);
    try {
      control::ControlClient::connect(server_->address(), hello_with(address), 5000);
      ADD_FAILURE() << "a Hello with an address that is " << what << " was admitted";
    } catch (const control::ControlError& e) {
      EXPECT_EQ(e.status(), control::Status::kRejected) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot use this client's fabric address"),
                std::string::npos)
          << e.what();
    }
    expect_served("after " + what);
  }
}

// The slots of refused clients come back: after a run of refusals both slots take a client
// at once, and a third is turned away because they are full, not because of the refusals.
TEST_P(Admission, RefusedClientsLeaveTheirSlotsFree) {
  fabric::FabricOptions fo;
  fo.provider = other_provider(GetParam());
  fo.quiet = true;
  auto other = fabric::Fabric::open(fo);
  fabric::Endpoint other_ep(*other);
  for (int i = 0; i < 5; ++i)
    EXPECT_THROW(control::ControlClient::connect(server_->address(), hello_with(other_ep.name()),
                                                 5000),
                 control::ControlError);
  std::unique_ptr<Client> a, b;
  ASSERT_NO_THROW(a = good_client());
  ASSERT_NO_THROW(b = good_client());
  try {
    good_client();
    ADD_FAILURE() << "a third client got one of two slots";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("all 2 client slots are taken"), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(a->put("a", "1"), Status::kOk);
  ASSERT_EQ(b->put("b", "2"), Status::kOk);
}

// The control channel's secret through the real binaries (docs/control-channel.md, "The
// handshake"): fabkv-cli with the right secret is served; a wrong, a missing and an unexpected
// one are refused with their reasons and exit 2.
TEST(AdmissionSecret, FabkvCliProvesTheSecretOrIsToldWhy) {
  ServerProcess with_secret("shm", {"--secret", "open sesame"});
  ServerProcess without("shm");
  auto cli = [](const ServerProcess& s, std::vector<std::string> secret) {
    std::vector<std::string> a = {"--server", s.address(), "--provider", "shm"};
    a.insert(a.end(), secret.begin(), secret.end());
    a.insert(a.end(), {"put", "k", "v"});
    return run_cli(a);
  };
  CliRun ok = cli(with_secret, {"--secret", "open sesame"});
  EXPECT_EQ(ok.rc, 0) << ok.out;
  for (const auto& [secret, reason] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--secret", "open sesamE"}, "wrong secret"},
           {{}, "this server requires a secret and none was sent"}}) {
    CliRun r = cli(with_secret, secret);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(reason), std::string::npos) << r.out;
  }
  CliRun r = cli(without, {"--secret", "open sesame"});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("this server has no secret, but the client has one"), std::string::npos)
      << r.out;
  EXPECT_EQ(cli(without, {}).rc, 0);
}

// provider "auto" (the default of fabkv-cli, the C++, C and Python clients) guesses shm for a
// server on this host. A tcp server's refusal names tcp; the client opens tcp, says hello
// again and is served (issue #27: before, it was refused). Not a provider-parameterised test:
// on a shm server the guess is right and there is nothing to follow, and this one also runs in
// the sanitizer builds (which leave out the tests named .../tcp), where the client drops its
// first fabric and opens another.
TEST(AdmissionAuto, AnAutoClientOpensATcpServersFabric) {
  ServerProcess server("tcp");
  // fabkv-cli with its default flags writes, and reads back.
  CliRun put = run_cli({"--server", server.address(), "put", "by-cli", "from fabkv-cli"});
  EXPECT_EQ(put.rc, 0) << put.out;
  CliRun get = run_cli({"--server", server.address(), "get", "by-cli"});
  EXPECT_EQ(get.rc, 0) << get.out;
  EXPECT_EQ(get.out, "from fabkv-cli\n");
  // The C++ client with its default options.
  ClientOptions o;
  o.server = server.address();
  ASSERT_EQ(o.provider, "auto");
  std::unique_ptr<Client> c;
  ASSERT_NO_THROW(c = Client::connect(o));
  EXPECT_EQ(c->provider().substr(0, 4), "tcp;") << c->provider();
  std::string v;
  ASSERT_EQ(c->get("by-cli", &v), Status::kOk);
  EXPECT_EQ(v, "from fabkv-cli");
  ASSERT_EQ(c->put("by-client", "from C++"), Status::kOk);
  ASSERT_EQ(c->get("by-client", &v), Status::kOk);
  EXPECT_EQ(v, "from C++");
}

// Over tcp, ofi_rxm drops a connection between endpoints of different eager sizes
// (FI_OFI_RXM_BUFFER_SIZE, fabric/rxm.h), and a client then only saw its requests time out.
// The handshake compares the two sizes: a client given another one is refused at once with
// both named, and the server serves the next client on. tcp only: shm has no rxm.
TEST(AdmissionRxm, AClientOfAnotherRxmEagerSizeIsRefusedWithBothNamed) {
  ServerProcess server("tcp");
  const std::string ours = std::to_string(fabric::kRxmEagerBytes);
  const std::string theirs = std::to_string(4 * fabric::kRxmEagerBytes);
  auto t0 = std::chrono::steady_clock::now();
  CliRun bad = run_cli({"--server", server.address(), "--timeout-ms",
                        std::to_string(kWrongClientTimeoutMs), "put", "k", "v"},
                       "FI_OFI_RXM_BUFFER_SIZE=" + theirs);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("the server's ofi_rxm eager size is " + ours +
                         " bytes; this client's is " + theirs),
            std::string::npos)
      << bad.out;
  EXPECT_LT(ms, kRefusedWithinMs) << bad.out;
  CliRun good = run_cli({"--server", server.address(), "put", "k", "v"});
  EXPECT_EQ(good.rc, 0) << good.out;
}

// A client that asks for another request transport than the server takes (--transport on
// both sides, herd) is refused at once with both named; one that leaves it unset gets the
// server's. On shm only: the check is the same on every fabric, and python/tests/
// test_provider.py makes it on both.
TEST(AdmissionTransport, AWrongTransportIsRefusedWithBothNamed) {
  for (const std::string served : {"write", "send"}) {
    const std::string asked = served == "write" ? "send" : "write";
    SCOPED_TRACE("server --transport " + served + ", client --transport " + asked);
    ServerProcess s("shm", {"--transport", served});
    auto cli_to = [&](std::vector<std::string> args) {
      std::vector<std::string> a = {"--server",     s.address(),
                                    "--provider",   "shm",
                                    "--timeout-ms", std::to_string(kWrongClientTimeoutMs)};
      a.insert(a.end(), args.begin(), args.end());
      return run_cli(a);
    };
    const auto t0 = Clock::now();
    CliRun r = cli_to({"--transport", asked, "put", "x", "y"});
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("the server takes herd requests by " + served +
                         " (its --transport); this client asked for " + asked),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("start the client with --transport " + served), std::string::npos)
        << r.out;
    EXPECT_LT(took.count(), kRefusedWithinMs) << r.out;
    CliRun ok = cli_to({"put", "x", "y"});
    EXPECT_EQ(ok.rc, 0) << ok.out;
  }
}

// HERD's answers by datagram (docs/server.md): a Hello that does not say it takes them (an
// older client, here a raw one) is refused by a dgram server, naming both sides; a datagram
// address the fabric cannot use is refused in the handshake; a client asking an rdm server for
// datagrams is refused too. The next correct client is served each time.
TEST(AdmissionResponses, HelloesThatDoNotMatchTheServersAnswersAreRefusedWithBothNamed) {
  auto refusal = [](const std::string& provider, const std::string& address,
                    const nlohmann::json& extra) -> std::string {
    try {
      RawClient c(provider, address, "", "herd", extra);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  ServerProcess dgram("tcp", {"--herd-responses", "dgram"});
  std::string why = refusal("tcp", dgram.address(), {});
  EXPECT_NE(why.find("the server answers herd requests by datagram (its --herd-responses "
                     "dgram, udp endpoints); this client takes answers by rdm only"),
            std::string::npos)
      << why;
  why = refusal("tcp", dgram.address(),
                {{"responses", "dgram"}, {"dgram_address", std::vector<uint8_t>{1, 2, 3}}});
  EXPECT_NE(why.find("cannot use this client's datagram address (udp)"), std::string::npos) << why;
  ServerProcess rdm("tcp");
  why = refusal("tcp", rdm.address(), {{"responses", "dgram"}});
  EXPECT_NE(why.find("the server answers herd requests by rdm (its --herd-responses rdm); this "
                     "client asked for datagram answers"),
            std::string::npos)
      << why;
  for (ServerProcess* s : {&dgram, &rdm}) {
    ClientOptions o;
    o.server = s->address();
    o.provider = "tcp";
    auto c = Client::connect(o);
    EXPECT_EQ(c->put("k", "v"), Status::kOk);
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, Admission, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fabkv::testing
