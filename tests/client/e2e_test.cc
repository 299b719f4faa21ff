// The client library against a real fabkv-server process, on shm and tcp, with both request
// transports, and on tcp with HERD's answers by datagram (udp, --herd-responses dgram): round
// trips, a model map under many requests in flight, oversized and large
// values, exact verb counts per request, a killed server, the C interface (fabkv_cluster too)
// and fabkv-cli.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/fabkv.h"
#include "e2e_checks.h"
#include "perf/process.h"
#include "store/hash.h"
#include "support/ready_process.h"
#include "support/run_tool.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;
using std::chrono::milliseconds;

struct Param {
  std::string provider;
  std::string transport;
  std::string responses = "rdm";  // --herd-responses
};
void PrintTo(const Param& p, std::ostream* os) {
  *os << p.provider << "/" << p.transport << "/" << p.responses;
}
std::string name(const ::testing::TestParamInfo<Param>& p) {
  return p.param.provider + "_" + p.param.transport +
         (p.param.responses == "rdm" ? "" : "_" + p.param.responses);
}

// One fabkv-server on an ephemeral port; the first stdout line says where.
class Server : public ReadyProcess {
 public:
  Server(const Param& p, const std::vector<std::string>& extra)
      : ReadyProcess(argv(p, extra), Stop::kSigterm) {}

 private:
  static std::vector<std::string> argv(const Param& p, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {FABKV_SERVER_BIN, "--provider",  p.provider,  "--listen",
                                  "127.0.0.1:0",    "--transport", p.transport, "--herd-responses",
                                  p.responses,      "--log",       "warn"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

class ClientE2E : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(GetParam(),
                                       std::vector<std::string>{"--engine", "store", "--workers",
                                                                "2", "--cores", "-1"});
  }
  // Generous: these hosts run the server's busy-polling workers, this test and the rest of CI
  // on two cores, and a starved worker answers late (the killed-server test sets its own).
  ClientOptions options(int timeout_ms = 10000) const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam().provider;
    o.transport = GetParam().transport;
    o.timeout_ms = timeout_ms;
    return o;
  }
  fabric::Verb request_verb() const {
    return GetParam().transport == "send" ? fabric::Verb::kSend : fabric::Verb::kWrite;
  }
  bool dgram() const { return GetParam().responses == "dgram"; }
  std::unique_ptr<Server> server_;
};

TEST_P(ClientE2E, PutGetDelRoundTrips) {
  auto c = Client::connect(options());
  EXPECT_EQ(c->layout().at("workers").get<uint32_t>(), 2u);
  EXPECT_EQ(c->layout().at("transport").get<std::string>(), GetParam().transport);
  EXPECT_EQ(c->layout().at("responses").get<std::string>(), GetParam().responses);
  std::string v;
  uint64_t ver = 0, ver2 = 0;
  EXPECT_EQ(c->get("missing", &v), Status::kNotFound);
  EXPECT_EQ(c->del("missing"), Status::kNotFound);
  EXPECT_EQ(c->put("alpha", "one", 0, 0, &ver), Status::kOk);
  EXPECT_NE(ver, 0u);
  EXPECT_EQ(c->get("alpha", &v, &ver2), Status::kOk);
  EXPECT_EQ(v, "one");
  EXPECT_EQ(ver2, ver);
  EXPECT_EQ(c->put("alpha", ""), Status::kOk);  // empty values are values
  EXPECT_EQ(c->get("alpha", &v), Status::kOk);
  EXPECT_EQ(v, "");
  std::string key250(250, 'K');
  EXPECT_EQ(c->put(key250, "long key"), Status::kOk);
  EXPECT_EQ(c->get(key250, &v), Status::kOk);
  EXPECT_EQ(v, "long key");
  EXPECT_EQ(c->del("alpha"), Status::kOk);
  EXPECT_EQ(c->get("alpha", &v), Status::kNotFound);
  auto s = c->stats();
  EXPECT_TRUE(s.contains("workers")) << s.dump();
}

TEST_P(ClientE2E, OversizedAndInvalidFailLocallyWithNothingSent) {
  auto c = Client::connect(options());
  size_t max_value = c->layout().at("max_value").get<size_t>();
  auto before = c->counters();
  std::string v;
  EXPECT_EQ(c->put("k", std::string(max_value + 1, 'x')), Status::kTooLarge);
  EXPECT_EQ(c->put(std::string(251, 'k'), "v"), Status::kTooLarge);
  EXPECT_EQ(c->get(std::string(251, 'k'), &v), Status::kTooLarge);
  EXPECT_EQ(c->del(std::string(300, 'k')), Status::kTooLarge);
  EXPECT_EQ(c->get("", &v), Status::kInvalidKey);
  EXPECT_EQ(c->put("", "v"), Status::kInvalidKey);
  bool called = false;
  EXPECT_EQ(c->get_async("", [&](Status, std::string_view, uint64_t) { called = true; }),
            Status::kInvalidKey);
  c->poll();
  EXPECT_FALSE(called);
  auto d = c->counters() - before;
  EXPECT_EQ(d.total_posted(), 0u);
  // The largest value the server takes does work.
  EXPECT_EQ(c->put("max", std::string(max_value, 'm')), Status::kOk);
  EXPECT_EQ(c->get("max", &v), Status::kOk);
  EXPECT_EQ(v.size(), max_value);
}

TEST_P(ClientE2E, LargeValuesRoundTrip) {
  auto c = Client::connect(options());
  // By datagram a GET's answer is one datagram: the layout's max_value says how large.
  const size_t max_value = c->layout().at("max_value").get<size_t>();
  EXPECT_EQ(max_value < 4096, dgram()) << max_value;
  std::mt19937_64 rng(7);
  for (size_t size : {size_t{900}, size_t{1000}, size_t{4096}, size_t{60} << 10}) {
    size = std::min(size, max_value);
    std::string value(size, '\0');
    for (auto& ch : value) ch = static_cast<char>(rng());
    std::string key = "large-" + std::to_string(size), got;
    auto before = c->counters();
    ASSERT_EQ(c->put(key, value), Status::kOk) << size;
    ASSERT_EQ(c->get(key, &got), Status::kOk) << size;
    EXPECT_EQ(got, value) << size;
    auto d = c->counters() - before;
    // Still one request verb each; the worker READs an indirect body itself.
    EXPECT_EQ(d[request_verb()].posted, 2u) << size;
    EXPECT_EQ(d[fabric::Verb::kRead].posted, 0u);
  }
  // Many large ones in flight at once share the staging region.
  std::map<std::string, std::string> model;
  int done = 0, bad = 0;
  for (int i = 0; i < 40; ++i) {
    std::string key = "big" + std::to_string(i);
    model[key] = std::string(std::min<size_t>(30000, max_value - 40) + i,
                             static_cast<char>('a' + i % 26));
    ASSERT_EQ(c->put_async(key, model[key],
                           [&](Status s, std::string_view, uint64_t) {
                             done++;
                             if (s != Status::kOk) bad++;
                           }),
              Status::kOk);
  }
  EXPECT_EQ(c->flush(), Status::kOk);
  EXPECT_EQ(done, 40);
  EXPECT_EQ(bad, 0);
  for (auto& [k, v] : model) {
    std::string got;
    ASSERT_EQ(c->get(k, &got), Status::kOk);
    EXPECT_EQ(got, v);
  }
}

// Random get/put/del with many requests in flight, checked against a model map. At most one
// request per key is in flight, so each answer is determined by the model at submit time.
TEST_P(ClientE2E, AsyncManyInFlightMatchesModel) {
  auto c = Client::connect(options());
  testing::async_ops_match_model(c.get(), 200);
}

// docs/architecture.md principle 3: count the verbs. One request verb (WRITE into the slot, or
// SEND) per operation and one inbound SEND (the response); nothing else. The answers land in
// multi-recv buffers posted at connect (src/proto/rpc/client.h), so a RECV is posted only when
// the provider releases one (rx_reposts); by datagram, one RECV is posted per answer.
TEST_P(ClientE2E, ExactlyOneRequestVerbPerOperation) {
  auto c = Client::connect(options());
  std::string v;
  ASSERT_EQ(c->put("warm", "up"), Status::kOk);  // the first post to a new peer may retry
  auto before = c->counters();
  const uint64_t answered_before = c->protocol_counters().value("dgram_answered", uint64_t{0});
  const uint64_t reposts_before = c->protocol_counters().value("rx_reposts", uint64_t{0});
  const uint64_t kEach = 100;
  for (uint64_t i = 0; i < kEach; ++i) {
    std::string k = "count" + std::to_string(i);
    ASSERT_EQ(c->put(k, "value"), Status::kOk);
    ASSERT_EQ(c->get(k, &v), Status::kOk);
    ASSERT_EQ(c->del(k), Status::kOk);
  }
  auto d = c->counters() - before;
  const uint64_t by_dgram = c->protocol_counters().value("dgram_answered", uint64_t{0}) -
                            answered_before;
  const fabric::Verb req = request_verb();
  const fabric::Verb other = req == fabric::Verb::kWrite ? fabric::Verb::kSend
                                                         : fabric::Verb::kWrite;
  EXPECT_EQ(d[req].posted, 3 * kEach);
  EXPECT_EQ(d[other].posted, 0u);
  EXPECT_EQ(d[fabric::Verb::kRead].posted, 0u);
  EXPECT_EQ(d[fabric::Verb::kAtomic].posted, 0u);
  // By datagram the answers arrive on the client's datagram endpoint: counted with the rest.
  const uint64_t answers = 3 * kEach;
  const uint64_t reposts = c->protocol_counters().value("rx_reposts", uint64_t{0}) - reposts_before;
  // 300 answers of under 40 bytes fill no buffer of 256 KiB.
  EXPECT_EQ(reposts, 0u);
  EXPECT_EQ(d[fabric::Verb::kRecv].posted, dgram() ? answers : 0u);
  EXPECT_EQ(d[fabric::Verb::kRecv].inbound, answers);
  EXPECT_EQ(d.total_posted(), 3 * kEach + d[fabric::Verb::kRecv].posted);
  EXPECT_EQ(by_dgram, dgram() ? 3 * kEach : 0);
}

// Callbacks may post new requests (client.h). Here the first answer's callback posts two, and
// the second needs the slot whose answer is the next completion of the same batch the session
// is handing out (W answers that arrived together): its submit waits for that slot inside the
// first callback. The session's batch is its own, not a local array, so the polls of that wait
// go on with the rest of it; a batch held in the caller's frame stalled the wait (and the
// answer behind it) until the deadline.
TEST_P(ClientE2E, ACallbackWaitingForASlotSeesTheRestOfItsBatch) {
  auto c = Client::connect(options(3000));
  const uint32_t workers = c->layout().at("workers").get<uint32_t>();
  const int window = c->layout().at("window").get<int>();
  std::vector<std::string> keys;  // worker 0's
  for (int i = 0; static_cast<int>(keys.size()) < window + 2; ++i) {
    std::string k = "slot" + std::to_string(i);
    if (store::partition_of(store::hash_key(k), workers) == 0) keys.push_back(k);
  }
  for (int round = 0; round < 3; ++round) {
    int done = 0, wrong = 0;
    Status posted_in_callback[2] = {Status::kError, Status::kError};
    auto check = [&](Status st, std::string_view, uint64_t) {
      done++;
      if (st != Status::kOk) wrong++;
    };
    for (int i = 0; i < window; ++i) {
      Client::Callback cb = check;
      if (i == 0) {
        cb = [&](Status st, std::string_view v, uint64_t ver) {
          check(st, v, ver);
          posted_in_callback[0] = c->put_async(keys[window], "x", check);  // the slot just freed
          posted_in_callback[1] = c->put_async(keys[window + 1], "y", check);  // waits for slot 1
        };
      }
      ASSERT_EQ(c->put_async(keys[i], "v" + std::to_string(round), cb), Status::kOk);
    }
    std::this_thread::sleep_for(milliseconds(100));  // all W answers arrive together
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(c->flush(), Status::kOk);
    const auto took =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(posted_in_callback[0], Status::kOk);
    EXPECT_EQ(posted_in_callback[1], Status::kOk) << "round " << round;
    EXPECT_EQ(done, window + 2);
    EXPECT_EQ(wrong, 0);
    EXPECT_LT(took, 1500) << "round " << round;
  }
}

TEST_P(ClientE2E, KilledServerGivesServerGoneOrTimeoutWithinTheTimeout) {
  const int kTimeout = 500;
  auto c = Client::connect(options(kTimeout));
  // Requests in flight when the server dies.
  testing::killed_server_ends_everything(c.get(), *server_, kTimeout);
}

TEST_P(ClientE2E, CInterface) {
  char err[256];
  fabkv_options o;
  fabkv_options_init(&o);
  o.server = server_->address().c_str();
  o.provider = GetParam().provider.c_str();
  o.secret = "";
  o.timeout_ms = 2000;
  fabkv_client* c = fabkv_connect(&o, err, sizeof err);
  ASSERT_NE(c, nullptr) << err;
  char buf[64];
  size_t vlen = 0;
  EXPECT_EQ(fabkv_put(c, "ck", 2, "cvalue", 6), FABKV_OK);
  EXPECT_EQ(fabkv_get(c, "ck", 2, buf, sizeof buf, &vlen), FABKV_OK);
  EXPECT_EQ(std::string(buf, vlen), "cvalue");
  EXPECT_EQ(fabkv_get(c, "ck", 2, buf, 3, &vlen), FABKV_BUFFER_TOO_SMALL);
  EXPECT_EQ(vlen, 6u);
  EXPECT_EQ(fabkv_del(c, "ck", 2), FABKV_OK);
  EXPECT_EQ(fabkv_get(c, "ck", 2, buf, sizeof buf, &vlen), FABKV_NOT_FOUND);
  EXPECT_EQ(fabkv_put(c, "", 0, "v", 1), FABKV_INVALID_KEY);
  std::string huge(fabkv_max_value(c) + 1, 'h');
  EXPECT_EQ(fabkv_put(c, "h", 1, huge.data(), huge.size()), FABKV_TOO_LARGE);
  fabkv_close(c);
}

// fabkv_cluster over this server and a second one: each key on exactly the server
// fabkv_cluster_server_for_key names (read from both directly), the statuses of fabkv_get, and
// a server listed under another name than its own refused with both names.
TEST_P(ClientE2E, CClusterInterface) {
  Server second(GetParam(), {"--engine", "store", "--workers", "2", "--cores", "-1"});
  // Without --name or --memcached a server's ring name is its --listen address's ketama name,
  // the list's default for it.
  const std::string list = server_->address() + "," + second.address();
  char err[256];
  fabkv_cluster_options o = {};
  o.servers = list.c_str();
  o.provider = GetParam().provider.c_str();
  o.timeout_ms = 10000;
  fabkv_cluster* c = fabkv_cluster_open(&o, err, sizeof err);
  ASSERT_NE(c, nullptr) << err;
  ASSERT_EQ(fabkv_cluster_size(c), 2u);
  std::vector<fabkv_client*> direct;
  for (const std::string* a : {&server_->address(), &second.address()}) {
    fabkv_options d;
    fabkv_options_init(&d);
    d.server = a->c_str();
    d.provider = GetParam().provider.c_str();
    d.timeout_ms = 10000;
    direct.push_back(fabkv_connect(&d, err, sizeof err));
    ASSERT_NE(direct.back(), nullptr) << err;
  }
  char buf[64];
  size_t vlen = 0;
  size_t on[2] = {0, 0};
  for (int i = 0; i < 200; ++i) {
    std::string k = "ck" + std::to_string(i), v = "value " + std::to_string(i);
    ASSERT_EQ(fabkv_cluster_put(c, k.data(), k.size(), v.data(), v.size()), FABKV_OK);
    size_t where = fabkv_cluster_server_for_key(c, k.data(), k.size());
    ASSERT_LT(where, 2u);
    ++on[where];
    for (size_t s = 0; s < 2; ++s)
      EXPECT_EQ(fabkv_get(direct[s], k.data(), k.size(), buf, sizeof buf, &vlen),
                s == where ? FABKV_OK : FABKV_NOT_FOUND)
          << k;
    ASSERT_EQ(fabkv_cluster_get(c, k.data(), k.size(), buf, sizeof buf, &vlen), FABKV_OK);
    EXPECT_EQ(std::string(buf, vlen), v);
  }
  EXPECT_GT(on[0], 40u);
  EXPECT_GT(on[1], 40u);
  EXPECT_EQ(fabkv_cluster_get(c, "ck1", 3, buf, 3, &vlen), FABKV_BUFFER_TOO_SMALL);
  EXPECT_EQ(vlen, 7u);
  EXPECT_EQ(fabkv_cluster_del(c, "ck1", 3), FABKV_OK);
  EXPECT_EQ(fabkv_cluster_del(c, "ck1", 3), FABKV_NOT_FOUND);
  EXPECT_EQ(fabkv_cluster_get(c, "ck1", 3, buf, sizeof buf, &vlen), FABKV_NOT_FOUND);
  EXPECT_EQ(fabkv_cluster_put(c, "", 0, "v", 1), FABKV_INVALID_KEY);
  EXPECT_STREQ(fabkv_cluster_server_error(c, 0), "");
  fabkv_cluster_close(c);
  for (fabkv_client* d : direct) fabkv_close(d);

  // The second server listed as "cache-b": its keys fail, and the reason has both names.
  const std::string misnamed = server_->address() + "," + second.address() + " cache-b";
  o.servers = misnamed.c_str();
  c = fabkv_cluster_open(&o, err, sizeof err);
  ASSERT_NE(c, nullptr) << err;
  std::string k;
  for (int i = 0; k.empty(); ++i) {
    std::string x = "m" + std::to_string(i);
    if (fabkv_cluster_server_for_key(c, x.data(), x.size()) == 1) k = x;
  }
  EXPECT_EQ(fabkv_cluster_put(c, k.data(), k.size(), "v", 1), FABKV_ERROR);
  std::string why = fabkv_cluster_server_error(c, 1);
  EXPECT_NE(why.find("'cache-b'"), std::string::npos) << why;
  EXPECT_NE(why.find("'" + second.address() + "'"), std::string::npos) << why;
  fabkv_cluster_close(c);
}

// fabkv-cli: exit 0 / 1 (not found) / 2 (error), value raw on stdout.
int run_cli(const std::vector<std::string>& args, std::string* out = nullptr,
            const std::string* stdin_text = nullptr) {
  std::vector<std::string> argv = {FABKV_CLI_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_tool(argv, out, stdin_text);
}

TEST_P(ClientE2E, Cli) {
  std::vector<std::string> common = {"--server",          server_->address(), "--provider",
                                     GetParam().provider, "--transport",      GetParam().transport};
  auto with = [&](std::vector<std::string> rest) {
    std::vector<std::string> a = common;
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  };
  std::string out;
  // ChildProcess reads whole lines, and get adds no newline when stdout is a pipe: store one.
  EXPECT_EQ(run_cli(with({"put", "cli-key", "cli value\n"})), 0);
  EXPECT_EQ(run_cli(with({"get", "cli-key"}), &out), 0);
  EXPECT_EQ(out, "cli value");
  EXPECT_EQ(run_cli(with({"get", "cli-missing"})), 1);
  std::string text = "from stdin";
  EXPECT_EQ(run_cli(with({"put", "cli-stdin"}), nullptr, &text), 0);
  EXPECT_EQ(run_cli(with({"get", "cli-stdin"}), &out), 0);
  EXPECT_EQ(out, "from stdin");  // write_line added a '\n'; read_line strips the last one
  EXPECT_EQ(run_cli(with({"del", "cli-key"})), 0);
  EXPECT_EQ(run_cli(with({"del", "cli-key"})), 1);
  EXPECT_EQ(run_cli(with({"stats"}), &out), 0);
  EXPECT_NE(out.find("\"workers\""), std::string::npos);
  EXPECT_EQ(run_cli(with({"put", std::string(251, 'k'), "v"})), 2);
  EXPECT_EQ(run_cli({"--server", "127.0.0.1:1", "--provider", "tcp", "get", "k"}), 2);
  EXPECT_EQ(run_cli({"get"}), 2);  // usage error
}

TEST_P(ClientE2E, ExampleProgram) {
  std::string out;
  std::vector<std::string> argv = {FABKV_EXAMPLE_BIN, server_->address(), GetParam().provider};
  perf::ChildProcess p(argv);
  std::string line;
  while (p.read_line(&line, Deadline::after_ms(10000))) out += line + "\n";
  EXPECT_EQ(p.wait(Deadline::after_ms(10000)), 0) << out;
  EXPECT_NE(out.find("hello -> world"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Providers, ClientE2E,
                         ::testing::Values(Param{"shm", "write"}, Param{"shm", "send"},
                                           Param{"tcp", "write"}, Param{"tcp", "send"},
                                           Param{"tcp", "write", "dgram"}),
                         name);

// A rejected Hello carries the server's reason to the user.
TEST(ClientE2EConnect, RejectionCarriesTheServersMessage) {
  Server server(Param{"shm", "write"}, {"--secret", "sesame", "--cores", "-1"});
  ClientOptions o;
  o.server = server.address();
  o.provider = "shm";
  o.secret = "wrong";
  try {
    Client::connect(o);
    FAIL() << "connected with a wrong secret";
  } catch (const ClientError& e) {
    EXPECT_EQ(e.status(), Status::kServerGone);
    std::printf("rejected: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  o.secret = "sesame";
  o.transport = "send";  // this server takes writes
  try {
    Client::connect(o);
    FAIL() << "connected with the wrong transport";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("write"), std::string::npos) << e.what();
  }
  o.transport = "";
  auto c = Client::connect(o);
  EXPECT_EQ(c->put("k", "v"), Status::kOk);
}

}  // namespace
}  // namespace fabkv
