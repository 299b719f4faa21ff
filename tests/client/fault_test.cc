// Fault isolation end to end (docs/fabric.md, "Fault isolation"): real fabkv-server processes on
// shm and tcp, real client processes SIGKILLed at random instants, and a survivor whose every
// answer is checked against a model map while they die around it.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "client/client.h"
#include "e2e_checks.h"
#include "perf/process.h"
#include "support/child.h"
#include "support/ready_process.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;
using Ms = std::chrono::milliseconds;

#ifdef FABKV_SANITIZED
// Sanitizer builds start and connect several times slower: a looser bound, and fewer victims
// so that `make test` stays within CI's time (the release build runs the full storm).
constexpr int kServeWithinMs = 5000;
constexpr int kKills = 30, kChurn = 100, kChurnTcp = 30;
#else
// A new client is served within 3 s of a kill: a wedged worker never serves it, and a stall
// on the dead peer ends after 250 ms (kPeerStallMs in src/server/worker.cc). The slowest of a
// storm took 67-68 ms on shm and 430-468 ms on tcp in a ctest run (the test prints it); tcp's
// endpoint set-up alone is ~0.6 s of CPU here, so under ctest -j2 next to other builds the
// old bound of 1 s was once missed by 28 ms.
constexpr int kServeWithinMs = 3000;
constexpr int kKills = 100, kChurn = 500, kChurnTcp = 100;
#endif

struct Param {
  std::string provider, transport;  // transport: herd's request transport on this server
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.provider << "/" << p.transport; }
std::string name_of(const ::testing::TestParamInfo<Param>& i) {
  return i.param.provider + "_" + i.param.transport;
}

class Server : public ReadyProcess {
 public:
  Server(const Param& p, const std::vector<std::string>& extra = {})
      : ReadyProcess(argv(p, extra), Stop::kSigterm) {}

 private:
  static std::vector<std::string> argv(const Param& p, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {FABKV_SERVER_BIN,
                                  "--provider",
                                  p.provider,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--protocols",
                                  "herd,pilaf,pilaf-vo",
                                  "--transport",
                                  p.transport,
                                  "--cores",
                                  "-1",
                                  "--memory",
                                  "128M",
                                  "--log",
                                  "warn"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

class Faults : public ::testing::TestWithParam<Param> {
 protected:
  ClientOptions options(const std::string& protocol, int timeout_ms = 10000) const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam().provider;
    o.protocol = protocol;
    if (protocol == "herd") o.transport = GetParam().transport;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    return o;
  }
  static uint64_t worker_max(const nlohmann::json& st, const char* name) {
    uint64_t n = 0;
    for (const auto& w : st.at("workers")) n = std::max<uint64_t>(n, w.value(name, uint64_t{0}));
    return n;
  }
  static uint64_t worker_sum(const nlohmann::json& st, const char* name) {
    uint64_t n = 0;
    for (const auto& w : st.at("workers")) n += w.value(name, uint64_t{0});
    return n;
  }
  // Waits (bounded) until the server holds exactly `n` clients everywhere.
  static nlohmann::json settle(Client& c, uint64_t n) {
    Deadline d = Deadline::after_ms(15000);
    nlohmann::json s;
    do {
      s = c.stats();
      if (s.at("clients").at("active").get<uint64_t>() == n && worker_max(s, "active_clients") == n)
        break;
      std::this_thread::sleep_for(Ms(20));
    } while (!d.expired());
    return s;
  }
  std::unique_ptr<Server> server_;
};

// A survivor thread: random GET/PUT/DEL on keys of its own against a model map, until stopped.
struct Survivor {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, wrong{0}, failed{0}, max_us{0};
  std::string first_error;
  void run(Client& c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::map<std::string, std::string> model;
    std::string v;
    while (!stop.load()) {
      std::string key = "survivor-" + std::to_string(rng() % 64);
      int what = static_cast<int>(rng() % 10);
      auto t0 = std::chrono::steady_clock::now();
      Status st;
      bool ok = true;
      if (what < 5) {
        st = c.get(key, &v);
        auto it = model.find(key);
        ok = it == model.end() ? st == Status::kNotFound : (st == Status::kOk && v == it->second);
      } else if (what < 9) {
        std::string value = key + "#" + std::to_string(ops.load()) + std::string(rng() % 2000, 'x');
        st = c.put(key, value);
        ok = st == Status::kOk;
        if (ok) model[key] = value;
      } else {
        st = c.del(key);
        ok = st == (model.count(key) ? Status::kOk : Status::kNotFound);
        model.erase(key);
      }
      auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
      if (static_cast<uint64_t>(us) > max_us.load()) max_us.store(static_cast<uint64_t>(us));
      if (!ok) {
        (st == Status::kOk || st == Status::kNotFound ? wrong : failed).fetch_add(1);
        if (first_error.empty())
          first_error = key + ": " + to_string(st) +
                        (what < 5   ? " (get)"
                         : what < 9 ? " (put)"
                                    : " (del)");
      }
      ops.fetch_add(1);
    }
  }
};

// 100 client processes, each SIGKILLed at a random instant (before, during or after its
// connect, mid-request), rotating herd, pilaf and pilaf-vo, while a survivor checks every
// answer and a fresh client connects after every 10th kill.
TEST_P(Faults, KillStormNeverStallsTheSurvivorOrNewClients) {
  server_ = std::make_unique<Server>(GetParam());
  auto survivor_client = Client::connect(options("herd"));
  Survivor survivor;
  std::thread t([&] { survivor.run(*survivor_client, 7); });
  const char* protocols[] = {"herd", "pilaf", "pilaf-vo"};
  std::mt19937_64 rng(2026);
  int killed_before_ready = 0, fresh = 0;
  int64_t fresh_max_ms = 0;
  for (int i = 0; i < kKills; ++i) {
    const std::string protocol = protocols[i % 3];
    testing::Child victim({FABKV_VICTIM_BIN, server_->address(), GetParam().provider, protocol,
                           protocol == "herd" ? GetParam().transport : "", std::to_string(i)});
    if (rng() % 4 == 0) {
      // During start-up or the handshake.
      std::this_thread::sleep_for(Ms(rng() % 40));
      killed_before_ready++;
    } else {
      std::string line;
      ASSERT_TRUE(victim.proc().read_line(&line, Deadline::after_ms(30000)))
          << "victim " << i << " never connected: " << victim.stderr_excerpt();
      ASSERT_EQ(line.rfind("READY", 0), 0u) << line;
      std::this_thread::sleep_for(Ms(rng() % 60));  // mid-request
    }
    ASSERT_TRUE(victim.kill()) << "victim " << i;
    auto killed_at = std::chrono::steady_clock::now();
    if (i % 10 == 9) {
      const std::string p = protocols[(i / 10) % 3];
      auto c = Client::connect(options(p, kServeWithinMs));
      std::string v;
      ASSERT_EQ(c->put("fresh-" + std::to_string(i), "ok"), Status::kOk)
          << p << " after kill " << i;
      ASSERT_EQ(c->get("fresh-" + std::to_string(i), &v), Status::kOk) << p << " after kill " << i;
      ASSERT_EQ(v, "ok");
      fresh_max_ms = std::max<int64_t>(
          fresh_max_ms,
          std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - killed_at).count());
      fresh++;
    }
    perf::remove_shm_leftovers(victim.pid());  // what the server could not reclaim (see below)
  }
  survivor.stop = true;
  t.join();
  EXPECT_EQ(survivor.wrong.load(), 0u) << survivor.first_error;
  EXPECT_EQ(survivor.failed.load(), 0u) << survivor.first_error;
  EXPECT_GT(survivor.ops.load(), 100u);
  EXPECT_LE(fresh_max_ms, kServeWithinMs);
  // Every victim's index is reclaimed: the survivor is the only client left.
  nlohmann::json s = settle(*survivor_client, 1);
  EXPECT_EQ(s.at("clients").at("active").get<uint64_t>(), 1u) << s.dump();
  EXPECT_EQ(worker_max(s, "active_clients"), 1u) << s.dump();
  std::printf(
      "kill-storm %s/%s: %d kills (%d before READY), survivor %lu ops, max %lu us; "
      "%d fresh clients served, slowest %ld ms after a kill; departed %lu, dropped %lu, "
      "endpoints closed %lu, shm regions reclaimed %lu, stale responses %lu\n",
      GetParam().provider.c_str(), GetParam().transport.c_str(), kKills, killed_before_ready,
      static_cast<unsigned long>(survivor.ops.load()),
      static_cast<unsigned long>(survivor.max_us.load()), fresh, static_cast<long>(fresh_max_ms),
      static_cast<unsigned long>(s.at("clients").at("departed").get<uint64_t>()),
      static_cast<unsigned long>(worker_sum(s, "dropped_peers")),
      static_cast<unsigned long>(worker_sum(s, "endpoints_closed")),
      static_cast<unsigned long>(worker_sum(s, "regions_reclaimed")),
      static_cast<unsigned long>(worker_sum(s, "stale_responses")));
}

// 500 short-lived clients (100 on tcp, where libfabric 2.1's rxm spends ~0.6 s of CPU setting
// up each client's endpoint here), then every slot taken at once: the 65th is refused with the
// reason, and once they leave a new client gets in and is served.
TEST_P(Faults, ConnectChurnThenEverySlotTaken) {
  server_ = std::make_unique<Server>(GetParam(), std::vector<std::string>{"--max-clients", "64"});
  const char* protocols[] = {"herd", "pilaf", "pilaf-vo"};
  const int churn = GetParam().provider == "tcp" ? kChurnTcp : kChurn;
  for (int i = 0; i < churn; ++i) {
    auto c = Client::connect(options(protocols[i % 3]));
    ASSERT_EQ(c->put("churn-" + std::to_string(i % 50), std::to_string(i)), Status::kOk) << i;
  }
  std::vector<std::unique_ptr<Client>> all;
  for (int i = 0; i < 64; ++i) all.push_back(Client::connect(options(protocols[i % 3])));
  try {
    Client::connect(options("herd"));
    FAIL() << "a 65th client was admitted";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("client slots are taken"), std::string::npos) << e.what();
  }
  // Key k holds the number of the last churn client that wrote it.
  auto last_writer = [&](int k) { return std::to_string((churn - 1 - k) / 50 * 50 + k); };
  const int last_key = (churn - 1) % 50;
  std::string v;
  ASSERT_EQ(all[63]->get("churn-" + std::to_string(last_key), &v), Status::kOk);
  EXPECT_EQ(v, last_writer(last_key));
  all.clear();
  auto late = Client::connect(options("pilaf"));
  ASSERT_EQ(late->get("churn-0", &v), Status::kOk);
  EXPECT_EQ(v, last_writer(0));
  nlohmann::json s = settle(*late, 1);
  EXPECT_EQ(s.at("clients").at("admitted").get<uint64_t>(), static_cast<uint64_t>(churn + 65));
  EXPECT_EQ(s.at("clients").at("active").get<uint64_t>(), 1u);
}

// A server SIGKILLed under load: a client with a full window on every protocol gets
// kServerGone or kTimeout for each request within its timeout, never a hang. The window is
// kept full for a while; then, its answers in, the server is stopped (SIGSTOP), the client
// fills its window again and the server is killed under it. The window: W requests per worker
// by message or WRITE (PUTs and GETs on herd and pilaf-vo, PUTs on pilaf), and on pilaf also W
// GETs per worker, READs, which on shm complete without the server (a cross-memory copy) and
// on tcp wait for its progress. That at least the W per worker were in flight at the kill is
// asserted, and that every request in flight then ended kServerGone or kTimeout.
TEST_P(Faults, ServerKilledUnderAFullWindowEndsEveryRequest) {
  for (const std::string protocol : {"herd", "pilaf", "pilaf-vo"}) {
    server_ = std::make_unique<Server>(GetParam());
    const int timeout_ms = 2000;
    auto c = Client::connect(options(protocol, timeout_ms));
    const uint32_t window = c->layout().at("window").get<uint32_t>();
    const uint32_t workers = c->layout().at("workers").get<uint32_t>();
    // One PUT to each worker first: the first operation to a peer waits for its progress.
    for (uint32_t w = 0; w < workers; ++w)
      ASSERT_EQ(c->put(testing::keys_of_worker("k", w, workers, 1)[0], "v"), Status::kOk);
    uint64_t load_ended = 0, ended = 0, other = 0, posted = 0, full_window = 0;
    bool full = false;  // the load is over, the window being filled for the kill
    auto cb = [&](Status st, std::string_view, uint64_t) {
      if (st == Status::kServerGone || st == Status::kTimeout) (full ? ended : load_ended)++;
      else if (st != Status::kOk && st != Status::kNotFound) other++;
    };
    // Keep the window full for a while.
    Deadline load = Deadline::after_ms(300);
    while (!load.expired()) {
      Status st = posted % 2 ? c->get_async("k" + std::to_string(posted % 16), cb)
                             : c->put_async("k" + std::to_string(posted % 16), "value", cb);
      if (st == Status::kOk) posted++;
      c->poll();
    }
    ASSERT_EQ(c->flush(), Status::kOk) << protocol;
    ASSERT_TRUE(server_->suspend()) << protocol << ": the server did not stop within 5 s";
    full = true;
    for (uint32_t w = 0; w < workers; ++w) {
      int i = 0;
      for (const std::string& key : testing::keys_of_worker("full-", w, workers, window)) {
        const Status st = protocol != "pilaf" && i++ % 2 ? c->get_async(key, cb)
                                                         : c->put_async(key, "value", cb);
        ASSERT_EQ(st, Status::kOk) << protocol << " " << key;
        full_window++;
      }
      if (protocol == "pilaf") {  // READs, in a window of their own (W x workers)
        for (const std::string& key : testing::keys_of_worker("read-", w, workers, window))
          ASSERT_EQ(c->get_async(key, cb), Status::kOk) << protocol << " " << key;
      }
    }
    // The READs that complete without the server do so now.
    for (Deadline d = Deadline::after_ms(100); !d.expired();) c->poll();
    const size_t at_kill = c->in_flight();
    ASSERT_GE(at_kill, full_window) << protocol << ": the full window at the kill";
    server_->kill();
    auto t0 = std::chrono::steady_clock::now();
    Status fl = c->flush();
    auto ms = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(c->in_flight(), 0u) << protocol;
    EXPECT_EQ(ended, at_kill) << protocol << ": a request in flight at the kill succeeded";
    EXPECT_TRUE(fl == Status::kServerGone || fl == Status::kOk)
        << protocol << ": " << to_string(fl);
    EXPECT_LE(ms, timeout_ms + 1000) << protocol;
    EXPECT_EQ(other, 0u) << protocol;
    EXPECT_EQ(c->get("k0", nullptr), Status::kServerGone) << protocol;
    std::printf(
        "%s: %llu requests of load (%llu timed out), then %zu in flight at the kill (W = "
        "%u, %u workers), all ended in %lld ms\n",
        protocol.c_str(), static_cast<unsigned long long>(posted),
        static_cast<unsigned long long>(load_ended), at_kill, window, workers,
        static_cast<long long>(ms));
    server_.reset();
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, Faults,
                         ::testing::Values(Param{"shm", "write"}, Param{"shm", "send"},
                                           Param{"tcp", "write"}, Param{"tcp", "send"}),
                         name_of);

}  // namespace
}  // namespace fabkv
