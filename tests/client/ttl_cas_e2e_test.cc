// What a restart and a clock must not break, end to end: fabkv::Client against real
// fabkv-server processes on shm and tcp.
//   - CAS and expiry (expire_at, absolute Unix seconds) on every protocol: herd with requests by
//     WRITE and by SEND, pilaf (GETs by READ) and pilaf-vo.
//   - Expiry follows the server's clock: pilaf clients whose own clock is an hour off
//     (testing::ClientHooks::clock_skew_s) judge records READ from the table exactly as the
//     server does, up to the second the item expires.
//   - The op log (--oplog) restores CAS versions: after a restart every item has the version a
//     client saw before, a CAS with it succeeds, a stale one is a mismatch, and new versions
//     never repeat an old one, even when the restarted server refuses one of the logged PUTs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/testing.h"
#include "support/ready_process.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;
using namespace std::chrono_literals;

class Server : public ReadyProcess {
 public:
  Server(const std::string& provider, const std::vector<std::string>& extra)
      : ReadyProcess(argv(provider, extra), Stop::kSigterm) {}

 private:
  static std::vector<std::string> argv(const std::string& provider,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> a = {
        FABKV_SERVER_BIN, "--provider", provider, "--listen", "127.0.0.1:0", "--cores", "-1",
        "--memory",       "64M",        "--log",  "warn"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

// Wall-clock seconds, fractional: what the server's CLOCK_REALTIME_COARSE follows on this host.
double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
uint32_t now_s() { return static_cast<uint32_t>(wall_now()); }

// Sleeps until the wall clock has passed `t` (Unix seconds) by `margin`.
void sleep_until_past(uint32_t t, double margin = 0.15) {
  while (wall_now() < t + margin) std::this_thread::sleep_for(20ms);
}

ClientOptions client_options(const std::string& address, const std::string& provider,
                             const std::string& protocol, const std::string& transport = "") {
  ClientOptions o;
  o.server = address;
  o.provider = provider;
  o.protocol = protocol;
  o.transport = transport;
  o.timeout_ms = 10000;  // two cores shared with busy-polling workers and the rest of CI
  return o;
}

uint64_t counter(const Client& c, const char* name) {
  return c.protocol_counters().value(name, uint64_t{0});
}

// ---- CAS and expiry on every protocol --------------------------------------------------------

struct Mode {
  const char* name;
  const char* protocol;   // what the client speaks
  const char* transport;  // the client's (and for herd the server's) request transport
  const char* engine;
};
void PrintTo(const Mode& m, std::ostream* os) { *os << m.name; }  // not its bytes (addresses)
const Mode kModes[] = {
    {"herd_write", "herd", "write", "cache"},
    {"herd_send", "herd", "send", "store"},
    {"pilaf", "pilaf", "send", "pilaf"},
    {"pilaf_vo", "pilaf-vo", "send", "pilaf"},
};

class TtlCas : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {
 protected:
  const std::string& provider() const { return std::get<0>(GetParam()); }
  const Mode& mode() const { return std::get<1>(GetParam()); }
  bool by_read() const { return std::string(mode().protocol) == "pilaf"; }

  void SetUp() override {
    const bool pilaf = std::string(mode().engine) == "pilaf";
    std::vector<std::string> extra = {"--engine", mode().engine, "--workers", "2"};
    if (pilaf) {
      extra.insert(extra.end(), {"--protocols", "herd,pilaf,pilaf-vo"});
    } else {
      extra.insert(extra.end(), {"--protocols", "herd", "--transport", mode().transport});
    }
    server_ = std::make_unique<Server>(provider(), extra);
    client_ = Client::connect(
        client_options(server_->address(), provider(), mode().protocol,
                       std::string(mode().protocol) == "herd" ? mode().transport : ""));
    ASSERT_EQ(client_->layout().at("protocol"), mode().protocol);
    ASSERT_EQ(client_->layout().at("transport"), mode().transport);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(TtlCas, CasSucceedsOnTheCurrentVersionAndMismatchesOnAStaleOne) {
  Client& c = *client_;
  std::string v;
  uint64_t v1 = 0, v2 = 0, got = 0;
  EXPECT_EQ(c.put("absent", "x", 12345), Status::kNotFound) << "CAS on a missing key";
  ASSERT_EQ(c.put("k", "one", 0, 0, &v1), Status::kOk);
  ASSERT_NE(v1, 0u);
  ASSERT_EQ(c.get("k", &v, &got), Status::kOk);
  EXPECT_EQ(got, v1) << "GET returns the version PUT handed out";
  ASSERT_EQ(c.put("k", "two", v1, 0, &v2), Status::kOk);
  EXPECT_NE(v2, v1);
  EXPECT_EQ(c.put("k", "three", v1), Status::kVersionMismatch) << "v1 is stale now";
  EXPECT_EQ(c.put("k", "three", v2 + 1000), Status::kVersionMismatch);
  ASSERT_EQ(c.get("k", &v, &got), Status::kOk);
  EXPECT_EQ(v, "two");
  EXPECT_EQ(got, v2);
  // A CAS keeps its expiry argument; a CAS after a DELETE finds nothing.
  uint64_t v3 = 0;
  ASSERT_EQ(c.put("k", "four", v2, now_s() + 3600, &v3), Status::kOk);
  ASSERT_EQ(c.get("k", &v, &got), Status::kOk);
  EXPECT_EQ(v, "four");
  EXPECT_EQ(got, v3);
  ASSERT_EQ(c.del("k"), Status::kOk);
  EXPECT_EQ(c.put("k", "five", v3), Status::kNotFound);
  EXPECT_EQ(c.get("k", &v), Status::kNotFound);
  // Many keys over both workers: each CAS chain stays consistent.
  std::map<std::string, uint64_t> versions;
  for (int i = 0; i < 40; ++i) {
    const std::string k = "chain-" + std::to_string(i);
    ASSERT_EQ(c.put(k, "0", 0, 0, &versions[k]), Status::kOk);
  }
  for (int round = 1; round <= 3; ++round) {
    for (auto& [k, ver] : versions) {
      uint64_t nv = 0;
      ASSERT_EQ(c.put(k, std::to_string(round), ver, 0, &nv), Status::kOk) << k;
      EXPECT_EQ(c.put(k, "stale", ver), Status::kVersionMismatch) << k;
      ver = nv;
    }
  }
  for (const auto& [k, ver] : versions) {
    ASSERT_EQ(c.get(k, &v, &got), Status::kOk);
    EXPECT_EQ(v, "3");
    EXPECT_EQ(got, ver);
  }
}

TEST_P(TtlCas, ItemsExpireByTheServersClock) {
  Client& c = *client_;
  std::string v;
  const uint32_t t0 = now_s();
  const uint32_t near = t0 + 3;
  uint64_t near_version = 0;
  ASSERT_EQ(c.put("past", "p", 0, t0 - 10), Status::kOk);
  ASSERT_EQ(c.put("epoch", "e", 0, 1), Status::kOk);  // 1970-01-01 00:00:01
  ASSERT_EQ(c.put("near", "n", 0, near), Status::kOk);
  ASSERT_EQ(c.put("near-cas", "n", 0, near, &near_version), Status::kOk);
  ASSERT_EQ(c.put("far", "f", 0, t0 + 3600), Status::kOk);
  ASSERT_EQ(c.put("never", "x"), Status::kOk);

  const uint64_t expired_before = counter(c, "expired");
  EXPECT_EQ(c.get("past", &v), Status::kNotFound);
  EXPECT_EQ(c.get("epoch", &v), Status::kNotFound);
  if (by_read()) {
    // Decided by the client: the records are in the table (lazy expiry) and were READ.
    EXPECT_EQ(counter(c, "expired"), expired_before + 2);
  }
  ASSERT_EQ(c.get("near", &v), Status::kOk) << "expires at " << near << ", now " << wall_now();
  EXPECT_EQ(v, "n");
  ASSERT_EQ(c.get("far", &v), Status::kOk);
  ASSERT_EQ(c.get("never", &v), Status::kOk);
  EXPECT_EQ(c.put("past", "p2", 1), Status::kNotFound) << "CAS on an expired item";

  sleep_until_past(near);
  EXPECT_EQ(c.get("near", &v), Status::kNotFound);
  EXPECT_EQ(c.put("near-cas", "again", near_version), Status::kNotFound);
  EXPECT_EQ(c.get("far", &v), Status::kOk);
  EXPECT_EQ(c.get("never", &v), Status::kOk);
  EXPECT_EQ(c.del("near"), Status::kNotFound) << "DELETE of an expired item";
  // A plain PUT over an expired item makes a fresh, live one.
  ASSERT_EQ(c.put("past", "back"), Status::kOk);
  ASSERT_EQ(c.get("past", &v), Status::kOk);
  EXPECT_EQ(v, "back");
  if (by_read()) {
    const nlohmann::json pc = c.protocol_counters();
    EXPECT_EQ(pc.at("gave_up").get<uint64_t>(), 0u);
    EXPECT_GE(pc.at("clock_reads").get<uint64_t>(), 1u) << "the server's clock was READ";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Protocols, TtlCas,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::ValuesIn(kModes)),
    [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param).name; });

// ---- a client whose clock is wrong -------------------------------------------------------------

class SkewedClock : public ::testing::TestWithParam<std::string> {};

// Two pilaf clients, one an hour behind and one an hour ahead: judged by their own clocks, the
// first would return items the server has expired and the second would hide live ones. Their
// GETs by READ must agree with the server (pilaf-vo GETs, decided by the worker) at every
// instant, across the second an item expires.
TEST_P(SkewedClock, GetsByReadAgreeWithTheServerOnWhatHasExpired) {
  Server server(GetParam(), {"--protocols", "pilaf,pilaf-vo", "--workers", "2"});
  std::vector<std::unique_ptr<Client>> skewed;
  std::vector<fabric::VerbSnapshot> verbs_at_start;
  for (int skew : {-3600, 3600}) {
    testing::ClientHooks hooks;
    hooks.clock_skew_s = skew;
    skewed.push_back(testing::connect(client_options(server.address(), GetParam(), "pilaf"),
                                      hooks));
    verbs_at_start.push_back(skewed.back()->counters());
  }
  auto referee = Client::connect(client_options(server.address(), GetParam(), "pilaf-vo"));

  const uint32_t t0 = now_s();
  const uint32_t near = t0 + 3;
  std::vector<std::string> near_keys;
  for (int i = 0; i < 8; ++i) near_keys.push_back("near-" + std::to_string(i));  // both workers
  ASSERT_EQ(referee->put("expired", "e", 0, t0 - 30), Status::kOk);
  ASSERT_EQ(referee->put("live", "l", 0, t0 + 600), Status::kOk);
  for (const auto& k : near_keys) ASSERT_EQ(referee->put(k, k, 0, near), Status::kOk);

  std::string v;
  for (auto& c : skewed) {
    EXPECT_EQ(c->get("expired", &v), Status::kNotFound);
    ASSERT_EQ(c->get("live", &v), Status::kOk);
    EXPECT_EQ(v, "l");
  }

  // Across the expiry of the near keys: each answer by READ must be what the server's clock
  // says at that instant. The server's clock (CLOCK_REALTIME_COARSE) never runs ahead of the
  // wall clock, so "expired" before `near` would be wrong; "live" well after it too (the
  // tolerance covers a worker thread descheduled on a loaded host, which delays the table's
  // clock).
  constexpr double kLate = 0.5;
  size_t reads_live = 0, reads_gone = 0;
  while (wall_now() < near + 1.5) {
    for (auto& c : skewed) {
      for (const auto& k : near_keys) {
        const double before = wall_now();
        const Status s = c->get(k, &v);
        const double after = wall_now();
        if (s == Status::kOk) {
          EXPECT_LT(before, near + kLate) << k << " still returned after it expired";
          reads_live++;
        } else {
          ASSERT_EQ(s, Status::kNotFound) << k;
          EXPECT_GE(after, static_cast<double>(near)) << k << " expired before its time";
          reads_gone++;
        }
      }
    }
  }
  EXPECT_GT(reads_live, 0u);
  EXPECT_GT(reads_gone, 0u);

  // Every GET above was a READ: the records are still in the table, and the clients say
  // expired by themselves; then the server (pilaf-vo GETs) agrees on every key.
  for (size_t i = 0; i < skewed.size(); ++i) {
    Client& c = *skewed[i];
    EXPECT_EQ(c.get("expired", &v), Status::kNotFound);
    EXPECT_EQ(c.get("live", &v), Status::kOk);
    for (const auto& k : near_keys) EXPECT_EQ(c.get(k, &v), Status::kNotFound) << k;
    const nlohmann::json pc = c.protocol_counters();
    EXPECT_GE(pc.at("expired").get<uint64_t>(), near_keys.size() + 2);
    EXPECT_GE(pc.at("clock_reads").get<uint64_t>(), 1u);
    EXPECT_EQ(pc.at("gave_up").get<uint64_t>(), 0u);
    const fabric::VerbSnapshot d = c.counters() - verbs_at_start[i];
    EXPECT_EQ(d[fabric::Verb::kSend].posted, 0u) << "GETs by READ only: no message sent";
    EXPECT_GT(d[fabric::Verb::kRead].posted, 0u);
  }
  EXPECT_EQ(referee->get("expired", &v), Status::kNotFound);
  EXPECT_EQ(referee->get("live", &v), Status::kOk);
  for (const auto& k : near_keys) EXPECT_EQ(referee->get(k, &v), Status::kNotFound) << k;
}

INSTANTIATE_TEST_SUITE_P(Providers, SkewedClock, ::testing::Values("shm", "tcp"),
                         [](const auto& p) { return p.param; });

// ---- versions across a restart -----------------------------------------------------------------

class RestartVersions : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  const std::string& provider() const { return std::get<0>(GetParam()); }
  const std::string& protocol() const { return std::get<1>(GetParam()); }

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fabkv-restart-" + std::to_string(::getpid()) + "-" + provider() + "-" + protocol());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    log_ = (dir_ / "kv.log").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // herd: the default engine (cache); pilaf: the pilaf engine, whose versions clients READ.
  std::unique_ptr<Server> start(const std::vector<std::string>& more = {}) {
    std::vector<std::string> extra = {"--oplog",     log_,
                                      "--workers",   "2",
                                      "--protocols", protocol() == "herd" ? "herd" : "herd,pilaf"};
    extra.insert(extra.end(), more.begin(), more.end());
    return std::make_unique<Server>(provider(), extra);
  }
  std::unique_ptr<Client> connect(const Server& s) {
    return Client::connect(client_options(s.address(), provider(), protocol()));
  }

  std::filesystem::path dir_;
  std::string log_;
};

TEST_P(RestartVersions, ARestartKeepsEveryVersionAndCasWorksAcrossIt) {
  struct Seen {
    std::string value;
    uint64_t version = 0;
    uint64_t stale = 0;      // the version before the last update (0: none)
    std::set<uint64_t> all;  // every version this key had
  };
  std::map<std::string, Seen> seen;
  {
    auto server = start();
    auto c = connect(*server);
    // A big value early in worker logs: the second restart below refuses it.
    for (int i = 0; i < 60; ++i) {
      const std::string k = "key-" + std::to_string(i);
      const std::string val = k + (i < 4 ? std::string(2000, 'B') : "=v0");
      Seen& s = seen[k];
      ASSERT_EQ(c->put(k, val, 0, 0, &s.version), Status::kOk);
      s.value = val;
      s.all.insert(s.version);
    }
    for (int round = 1; round <= 3; ++round) {
      for (int i = 4; i < 60; i += round) {
        const std::string k = "key-" + std::to_string(i);
        Seen& s = seen[k];
        const std::string val = k + "=v" + std::to_string(round);
        uint64_t nv = 0;
        ASSERT_EQ(c->put(k, val, s.version, round == 3 ? now_s() + 3600 : 0, &nv), Status::kOk);
        s.stale = s.version;
        s.version = nv;
        s.value = val;
        s.all.insert(nv);
      }
    }
    for (int i = 5; i < 60; i += 7) {
      ASSERT_EQ(c->del("key-" + std::to_string(i)), Status::kOk);
      seen.erase("key-" + std::to_string(i));
    }
    // What GET says is what PUT said.
    for (const auto& [k, s] : seen) {
      std::string v;
      uint64_t ver = 0;
      ASSERT_EQ(c->get(k, &v, &ver), Status::kOk) << k;
      ASSERT_EQ(ver, s.version) << k;
    }
    c.reset();
    ASSERT_EQ(server->stop(), 0);
  }

  // Restart: every item comes back with the version the client saw.
  auto check_restored = [&](Client& c, bool big_lost) {
    for (const auto& [k, s] : seen) {
      std::string v;
      uint64_t ver = 0;
      const bool big = s.value.size() > 1000;
      const Status st = c.get(k, &v, &ver);
      if (big && big_lost) {
        EXPECT_EQ(st, Status::kNotFound) << k;
        continue;
      }
      ASSERT_EQ(st, Status::kOk) << k;
      EXPECT_EQ(v, s.value) << k;
      EXPECT_EQ(ver, s.version) << k << ": the version before the restart";
    }
  };
  {
    auto server = start();
    auto c = connect(*server);
    check_restored(*c, false);
    // A stale version is still stale; the current one still matches; the new versions are new.
    size_t n = 0;
    for (auto& [k, s] : seen) {
      if (s.stale != 0) {
        EXPECT_EQ(c->put(k, "stale", s.stale), Status::kVersionMismatch) << k;
      }
      if (++n % 2 == 0) continue;  // half of them change now, half stay as logged
      uint64_t nv = 0;
      const std::string val = k + "=after-restart";
      ASSERT_EQ(c->put(k, val, s.version, 0, &nv), Status::kOk) << k;
      EXPECT_EQ(s.all.count(nv), 0u) << k << ": version " << nv << " was handed out before";
      EXPECT_GT(nv, s.version) << k;
      s.stale = s.version;
      s.version = nv;
      s.value = val;
      s.all.insert(nv);
    }
    c.reset();
    ASSERT_EQ(server->stop(), 0);
  }

  // A second restart by a server whose --max-value no longer admits the first big values: those
  // items are lost (refused on replay), but no other version moves. (Replay that re-stamped
  // versions shifted every later version of the worker by one here.)
  auto server = start({"--max-value", "1024"});
  auto c = connect(*server);
  check_restored(*c, true);
  for (auto& [k, s] : seen) {
    if (s.value.size() > 1000) continue;
    if (s.stale != 0) {
      EXPECT_EQ(c->put(k, "stale", s.stale), Status::kVersionMismatch) << k;
    }
    uint64_t nv = 0;
    ASSERT_EQ(c->put(k, "last", s.version, 0, &nv), Status::kOk) << k;
    EXPECT_EQ(s.all.count(nv), 0u) << k << ": version " << nv << " was handed out before";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Providers, RestartVersions,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values("herd", "pilaf")),
    [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace
}  // namespace fabkv
