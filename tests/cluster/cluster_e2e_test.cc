// fabkv::Cluster (client/cluster.h) against real fabkv-server processes on this host (shm):
// placement read back server by server, a model map under random operations, herd and pilaf
// clusters agreeing, a server that stops answering (SIGSTOP) or dies (SIGKILL) with and
// without auto-ejection and with replicas, and a server whose ring name differs from the
// list's. The multi-host tests (tcp, network namespaces, pylibmc, nutcracker) are
// tests/cluster/netns_cluster_test.py's.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "client/cluster.h"
#include "server_fixture.h"
#include "support/run_tool.h"

namespace fabkv::testing {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class ClusterE2E : public ::testing::Test {
 protected:
  // n servers serving `protocols` (herd and pilaf need the pilaf engine; herd runs on it too).
  void start(size_t n, const std::string& protocols = "herd,pilaf",
             const std::vector<std::string>& extra = {}) {
    for (size_t i = 0; i < n; ++i)
      servers_.push_back(std::make_unique<KvServer>("shm", protocols, extra));
  }
  ClusterOptions options(const std::string& protocol = "herd") const {
    ClusterOptions o;
    for (const auto& s : servers_) o.servers.push_back(parse_cluster_server(s->address()));
    o.client.provider = "shm";
    o.client.protocol = protocol;
    o.client.timeout_ms = 10000;  // two cores shared with busy-polling workers and the rest of CI
    return o;
  }
  // A direct client of server i (not through any ring).
  std::unique_ptr<Client> direct(size_t i, const std::string& protocol = "herd") const {
    ClientOptions o;
    o.server = servers_[i]->address();
    o.provider = "shm";
    o.protocol = protocol;
    o.timeout_ms = 10000;
    return Client::connect(o);
  }
  // Keys that the cluster c places on server `on` (and, with `off`, not on server off).
  static std::vector<std::string> keys_on(Cluster& c, size_t on, size_t n,
                                          const std::string& prefix) {
    std::vector<std::string> out;
    for (size_t k = 0; out.size() < n && k < 100000; ++k) {
      std::string key = fmt::format("{}{}", prefix, k);
      if (c.server_for_key(key) == on) out.push_back(key);
    }
    return out;
  }
  std::vector<std::unique_ptr<KvServer>> servers_;
};

TEST_F(ClusterE2E, EveryKeyIsOnTheServerTheRingGivesAndNowhereElse) {
  start(3);
  Cluster c(options());
  std::vector<size_t> per(3);
  const size_t n = 3000;
  for (size_t k = 0; k < n; ++k)
    ASSERT_EQ(c.put(fmt::format("p{}", k), fmt::format("v{}", k)), Status::kOk);
  for (size_t s = 0; s < 3; ++s) {
    auto d = direct(s);
    for (size_t k = 0; k < n; ++k) {
      std::string key = fmt::format("p{}", k), v;
      Status st = d->get(key, &v);
      if (c.server_for_key(key) == s) {
        ASSERT_EQ(st, Status::kOk) << key << " missing on its server " << s;
        EXPECT_EQ(v, fmt::format("v{}", k));
        ++per[s];
      } else {
        ASSERT_EQ(st, Status::kNotFound) << key << " also on server " << s;
      }
    }
  }
  for (size_t s = 0; s < 3; ++s) EXPECT_GT(per[s], n / 6) << "server " << s << " holds too few";
  auto st = c.stats();
  uint64_t requests = 0;
  for (const auto& s : st.at("servers")) requests += s.at("requests").get<uint64_t>();
  EXPECT_EQ(requests, n);
}

// Random puts, gets, deletes, multi-puts, multi-gets and multi-deletes through a cluster, against a
// std::map (keys of their own per seed: the clusters of one test share servers).
void run_against_model(Cluster& c, uint32_t seed, size_t ops) {
  std::mt19937 rng(seed);
  std::map<std::string, std::string> model;
  for (size_t i = 0; i < ops; ++i) {
    std::string key = fmt::format("m{}-{}", seed, rng() % 500);
    switch (rng() % 6) {
      case 0: {
        std::string v = fmt::format("{}-{}", key, rng());
        ASSERT_EQ(c.put(key, v), Status::kOk);
        model[key] = v;
        break;
      }
      case 1: {
        std::string v;
        Status s = c.get(key, &v);
        auto it = model.find(key);
        ASSERT_EQ(s, it == model.end() ? Status::kNotFound : Status::kOk) << key;
        if (it != model.end()) {
          ASSERT_EQ(v, it->second);
        }
        break;
      }
      case 2:
        ASSERT_EQ(c.del(key), model.erase(key) ? Status::kOk : Status::kNotFound) << key;
        break;
      case 3: {
        std::vector<std::pair<std::string, std::string>> items;
        for (int j = 0; j < 20; ++j) {
          std::string k = fmt::format("m{}-{}", seed, rng() % 500);
          items.emplace_back(k, fmt::format("{}-{}", k, rng()));
        }
        auto r = c.put_multi(items);
        ASSERT_EQ(r.size(), items.size());
        for (size_t j = 0; j < items.size(); ++j) {
          ASSERT_EQ(r[j], Status::kOk) << items[j].first;
          model[items[j].first] = items[j].second;  // a key twice in one call: the last wins
        }
        break;
      }
      case 4: {
        std::set<std::string> distinct;  // one delete per key: both would be in flight at once
        for (int j = 0; j < 20; ++j) distinct.insert(fmt::format("m{}-{}", seed, rng() % 500));
        std::vector<std::string> keys(distinct.begin(), distinct.end());
        auto r = c.del_multi(keys);
        ASSERT_EQ(r.size(), keys.size());
        for (size_t j = 0; j < keys.size(); ++j)
          ASSERT_EQ(r[j], model.erase(keys[j]) ? Status::kOk : Status::kNotFound) << keys[j];
        break;
      }
      default: {
        std::vector<std::string> keys;
        for (int j = 0; j < 20; ++j) keys.push_back(fmt::format("m{}-{}", seed, rng() % 500));
        auto r = c.get_multi(keys);
        ASSERT_EQ(r.size(), keys.size());
        for (size_t j = 0; j < keys.size(); ++j) {
          auto it = model.find(keys[j]);
          ASSERT_EQ(r[j].status, it == model.end() ? Status::kNotFound : Status::kOk) << keys[j];
          if (it != model.end()) {
            ASSERT_EQ(r[j].value, it->second);
          }
        }
      }
    }
  }
}

TEST_F(ClusterE2E, RandomOperationsMatchAModelMap) {
  start(3);
  Cluster one(options());
  run_against_model(one, 1, 4000);
  auto o = options();
  o.replicas = 2;
  Cluster two(o);
  run_against_model(two, 2, 4000);
}

TEST_F(ClusterE2E, HerdAndPilafClustersAgreeOnEveryKey) {
  start(3);
  Cluster herd(options("herd")), pilaf(options("pilaf"));
  for (size_t k = 0; k < 1000; ++k) {
    std::string key = fmt::format("x{}", k);
    ASSERT_EQ(herd.server_for_key(key), pilaf.server_for_key(key));
    Cluster& writer = k % 2 ? herd : pilaf;
    Cluster& reader = k % 2 ? pilaf : herd;
    ASSERT_EQ(writer.put(key, key + "!"), Status::kOk);
    std::string v;
    ASSERT_EQ(reader.get(key, &v), Status::kOk) << key;
    EXPECT_EQ(v, key + "!");
  }
}

TEST_F(ClusterE2E, AStoppedServerFailsOnlyItsKeysWithinTheTimeoutThenIsEjectedAndComesBack) {
  start(3);
  auto o = options();
  o.client.timeout_ms = 400;
  o.retry_timeout_ms = 1500;
  Cluster c(o);
  auto on1 = keys_on(c, 1, 20, "s");
  auto on0 = keys_on(c, 0, 20, "s");
  for (const auto& k : on1) ASSERT_EQ(c.put(k, "before"), Status::kOk);
  for (const auto& k : on0) ASSERT_EQ(c.put(k, "other"), Status::kOk);
  ASSERT_TRUE(servers_[1]->suspend());
  // Its keys fail, each within the timeout (and a little scheduling slack); the others' keys
  // are served meanwhile.
  double worst = 0;
  for (size_t i = 0; i < o.server_failure_limit; ++i) {
    auto t = Clock::now();
    std::string v;
    EXPECT_EQ(c.get(on1[i], &v), Status::kTimeout);
    worst = std::max(worst, ms_since(t));
    ASSERT_EQ(c.get(on0[i], &v), Status::kOk);
  }
  EXPECT_LT(worst, o.client.timeout_ms + 300.0);
  auto k1 = c.counters(1);
  EXPECT_EQ(k1.failures, o.server_failure_limit);
  EXPECT_EQ(k1.ejections, 1u);
  EXPECT_TRUE(k1.ejected);
  // Ejected: its keys now go to the others, which do not have them (a cache's miss) and take
  // new writes at once.
  for (const auto& k : on1) {
    size_t now = c.server_for_key(k);
    ASSERT_NE(now, 1u);
    auto t = Clock::now();
    std::string v;
    EXPECT_EQ(c.get(k, &v), Status::kNotFound);
    ASSERT_EQ(c.put(k, "during"), Status::kOk);
    EXPECT_LT(ms_since(t), 1000.0);
  }
  for (const auto& k : on0) EXPECT_EQ(c.server_for_key(k), 0u) << "a key of a live server moved";
  servers_[1]->resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.retry_timeout_ms + 100));
  // Back on the ring after retry_timeout_ms, with what it held before the stop.
  std::string v;
  ASSERT_EQ(c.get(on1[0], &v), Status::kOk);
  EXPECT_EQ(v, "before");
  EXPECT_EQ(c.counters(1).retries, 1u);
  EXPECT_FALSE(c.counters(1).ejected);
  EXPECT_EQ(c.server_for_key(on1[0]), 1u);
}

TEST_F(ClusterE2E, AMultiGetOverAStoppedServerCostsItsKeysOneTimeoutAndNothingMore) {
  start(3);
  auto o = options();
  o.client.timeout_ms = 500;
  o.server_failure_limit = 1000;  // stays on the ring: every one of its keys must time out
  Cluster c(o);
  std::vector<std::string> keys;
  for (size_t k = 0; k < 300; ++k) {
    keys.push_back(fmt::format("g{}", k));
    ASSERT_EQ(c.put(keys.back(), keys.back()), Status::kOk);
  }
  ASSERT_TRUE(servers_[2]->suspend());
  auto t = Clock::now();
  auto r = c.get_multi(keys);
  double took = ms_since(t);
  size_t timed_out = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (c.server_for_key(keys[k]) == 2) {
      EXPECT_EQ(r[k].status, Status::kTimeout) << keys[k];
      ++timed_out;
    } else {
      EXPECT_EQ(r[k].status, Status::kOk) << keys[k];
      EXPECT_EQ(r[k].value, keys[k]);
    }
  }
  EXPECT_GT(timed_out, 30u);  // the premise: the stopped server held a share of the keys
  // One timeout for all its keys, not one each (plus slack for two loaded cores).
  EXPECT_LT(took, 2.0 * o.client.timeout_ms + 500) << timed_out << " keys timed out";
  servers_[2]->resume();
}

TEST_F(ClusterE2E, WithoutAutoEjectADeadServersKeysFailAtOnceAndStayPut) {
  start(3);
  auto o = options();
  o.client.timeout_ms = 400;
  o.auto_eject_hosts = false;
  o.retry_timeout_ms = 60000;
  Cluster c(o);
  auto on2 = keys_on(c, 2, 10, "d");
  for (const auto& k : on2) ASSERT_EQ(c.put(k, "v"), Status::kOk);
  servers_[2]->kill();
  std::string v;
  for (uint32_t i = 0; i < o.server_failure_limit; ++i)
    EXPECT_EQ(c.get(on2[i], &v), Status::kServerGone);
  EXPECT_TRUE(c.counters(2).ejected);
  for (const auto& k : on2) {
    EXPECT_EQ(c.server_for_key(k), 2u);  // still its key: nothing moves
    auto t = Clock::now();
    EXPECT_EQ(c.get(k, &v), Status::kServerGone);
    EXPECT_LT(ms_since(t), 50.0) << "a key of a server marked dead must fail at once";
  }
  EXPECT_EQ(c.counters(2).failures, o.server_failure_limit);  // no more attempts
}

TEST_F(ClusterE2E, WithTwoReplicasEveryAcknowledgedPutSurvivesAnyOneServersDeath) {
  for (size_t victim = 0; victim < 3; ++victim) {
    SCOPED_TRACE(fmt::format("victim {}", victim));
    servers_.clear();
    start(3);
    auto o = options();
    o.replicas = 2;
    o.client.timeout_ms = 1000;
    Cluster c(o);
    std::vector<std::string> keys;
    size_t on_victim = 0;
    for (size_t k = 0; k < 600; ++k) {
      keys.push_back(fmt::format("r{}-{}", victim, k));
      ASSERT_EQ(c.put(keys.back(), keys.back()), Status::kOk);
      auto rs = c.servers_for_key(keys.back());
      ASSERT_EQ(rs.size(), 2u);
      on_victim += rs[0] == victim;
    }
    EXPECT_GT(on_victim, 100u);  // the premise: the dead server was the first replica of many
    servers_[victim]->kill();
    for (const auto& k : keys) {
      std::string v;
      ASSERT_EQ(c.get(k, &v), Status::kOk) << k;
      EXPECT_EQ(v, k);
    }
    EXPECT_GE(c.counters(victim).failures, 1u);
  }
}

// replicas = 2 acknowledges a write only when two live servers hold it: the key's next two
// servers on the ring, ejected ones skipped. With one server left a write fails with
// kServerGone and nothing is sent, while what was acknowledged is still read.
TEST_F(ClusterE2E, WithTwoReplicasAWriteIsAcknowledgedOnlyWhenTwoLiveServersHoldIt) {
  start(3);
  auto o = options();
  o.replicas = 2;
  o.client.timeout_ms = 1000;
  o.server_failure_limit = 1;
  o.retry_timeout_ms = 60000;  // no server comes back during the test
  Cluster c(o);
  auto d0 = direct(0), d1 = direct(1);
  servers_[2]->kill();
  // Its first call ejects it: one failure is the limit.
  std::string v;
  c.get(keys_on(c, 2, 1, "q").at(0), &v);
  ASSERT_TRUE(c.counters(2).ejected);
  // Every key's two replicas are now servers 0 and 1, and an acknowledged write is on both.
  std::vector<std::string> acked;
  for (size_t k = 0; k < 40; ++k) {
    acked.push_back(fmt::format("w{}", k));
    ASSERT_EQ(c.put(acked.back(), acked.back()), Status::kOk);
    auto rs = c.servers_for_key(acked.back());
    ASSERT_EQ(std::set<size_t>(rs.begin(), rs.end()), (std::set<size_t>{0, 1}));
    for (Client* s : {d0.get(), d1.get()}) {
      ASSERT_EQ(s->get(acked.back(), &v), Status::kOk) << acked.back();
      EXPECT_EQ(v, acked.back());
    }
  }
  servers_[1]->kill();
  // Reading them ejects server 1 and finds each on server 0.
  for (const auto& k : acked) {
    ASSERT_EQ(c.get(k, &v), Status::kOk) << k;
    EXPECT_EQ(v, k);
  }
  ASSERT_TRUE(c.counters(1).ejected);
  // One server on the ring, two replicas wanted: no write is acknowledged, and none is made.
  for (size_t k = 0; k < 20; ++k) {
    std::string key = fmt::format("x{}", k);
    ASSERT_EQ(c.servers_for_key(key), (std::vector<size_t>{0}));
    ASSERT_EQ(c.put(key, "alone"), Status::kServerGone) << key;
    EXPECT_EQ(d0->get(key, &v), Status::kNotFound) << key << " written to one server";
  }
  auto many = c.put_multi({{"y1", "alone"}, {"y2", "alone"}});
  EXPECT_EQ(many, (std::vector<Status>{Status::kServerGone, Status::kServerGone}));
  EXPECT_EQ(c.del(acked[0]), Status::kServerGone);
  EXPECT_EQ(c.del_multi({acked[1]}), std::vector<Status>{Status::kServerGone});
  EXPECT_EQ(c.put_async("x0", "alone",
                        [](Status, std::string_view, uint64_t) {
                          ADD_FAILURE() << "a callback for a write that was not sent";
                        }),
            Status::kServerGone);
  for (const auto& k : {acked[0], acked[1]}) {
    ASSERT_EQ(c.get(k, &v), Status::kOk) << k << ": a refused delete deleted it";
    EXPECT_EQ(v, k);
  }
}

// A replica back on the ring after an ejection lacks the writes made meanwhile (they went to
// the next live servers): a miss there hands the read on to the key's next replica, which has
// them, and a DELETE answers ok when any replica had the key. A GET answers not found only
// when every replica does, and a replica's failure outweighs the others' misses. What the
// returning replica held before its ejection it still serves (no repair: docs/cluster.md).
TEST_F(ClusterE2E, WithTwoReplicasAReplicaBackFromEjectionDoesNotHideTheWritesItMissed) {
  start(3);
  auto o = options();
  o.replicas = 2;
  o.client.timeout_ms = 1000;
  o.server_failure_limit = 1;
  o.retry_timeout_ms = 800;
  Cluster c(o);
  auto first0 = keys_on(c, 0, 10, "e");  // keys whose first replica is server 0
  ASSERT_EQ(c.put(first0[0], "before"), Status::kOk);
  ASSERT_TRUE(servers_[0]->suspend());
  std::string v;
  ASSERT_EQ(c.get(first0[0], &v), Status::kOk);  // server 0 times out, the second answers
  EXPECT_EQ(v, "before");
  ASSERT_TRUE(c.counters(0).ejected);
  for (const auto& k : first0) ASSERT_EQ(c.put(k, "during"), Status::kOk) << k;
  servers_[0]->resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.retry_timeout_ms + 100));
  for (const auto& k : first0) ASSERT_EQ(c.servers_for_key(k).at(0), 0u) << k;
  EXPECT_EQ(c.counters(0).retries, 1u);
  for (size_t j = 1; j < first0.size(); ++j) {
    ASSERT_EQ(c.get(first0[j], &v), Status::kOk) << first0[j] << ": server 0's miss answered";
    EXPECT_EQ(v, "during");
  }
  auto got = c.get_multi({first0[1], first0[2]});
  for (const auto& g : got) {
    EXPECT_EQ(g.status, Status::kOk);
    EXPECT_EQ(g.value, "during");
  }
  ASSERT_EQ(c.get(first0[0], &v), Status::kOk);
  EXPECT_EQ(v, "before");  // stale: server 0 had it before its ejection and was not repaired
  EXPECT_EQ(c.del(first0[1]), Status::kOk);
  EXPECT_EQ(c.get(first0[1], &v), Status::kNotFound);
  EXPECT_EQ(c.get("never-written", &v), Status::kNotFound);
  // Server 0 misses first0[2], its second replica does not answer: not a "not found".
  size_t second = c.servers_for_key(first0[2]).at(1);
  ASSERT_TRUE(servers_[second]->suspend());
  EXPECT_EQ(c.get(first0[2], &v), Status::kTimeout);
}

// Cluster::client(i), the direct way to one server (fabkv-cli stats, fabkv-bench), fails to
// connect often enough to eject the server: it is then ejected as through the ring, counted
// and marked, and put back after retry_timeout_ms like any other (not left off the ring for
// good).
TEST_F(ClusterE2E, AServerEjectedByADirectConnectComesBackAfterTheRetryTimeout) {
  start(3);
  auto o = options();
  o.client.timeout_ms = 500;
  o.server_failure_limit = 1;
  o.retry_timeout_ms = 800;
  Cluster c(o);
  auto on2 = keys_on(c, 2, 5, "b");
  ASSERT_TRUE(servers_[2]->suspend());  // its handshake is never answered: a timeout
  std::string why;
  EXPECT_EQ(c.client(2, &why), nullptr);
  EXPECT_FALSE(why.empty());
  auto k2 = c.counters(2);
  EXPECT_EQ(k2.failures, 1u);
  EXPECT_EQ(k2.ejections, 1u);
  EXPECT_TRUE(k2.ejected) << "off the ring but not marked ejected: no retry brings it back";
  EXPECT_EQ(c.stats().at("servers").at(2).at("ring_points").get<size_t>(), 0u);
  for (const auto& k : on2) EXPECT_NE(c.server_for_key(k), 2u);
  servers_[2]->resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.retry_timeout_ms + 100));
  // Back on the ring, with its keys.
  for (const auto& k : on2) ASSERT_EQ(c.server_for_key(k), 2u) << k;
  EXPECT_EQ(c.counters(2).retries, 1u);
  EXPECT_FALSE(c.counters(2).ejected);
  ASSERT_EQ(c.put(on2[0], "home"), Status::kOk);
  std::string v;
  ASSERT_EQ(direct(2)->get(on2[0], &v), Status::kOk);
  EXPECT_EQ(v, "home");
}

TEST_F(ClusterE2E, AServerNamedOtherwiseThanTheListIsRefusedWithBothNames) {
  servers_.push_back(std::make_unique<KvServer>("shm", "herd",
                                                std::vector<std::string>{"--name", "cache-a"}));
  auto o = options();
  Cluster wrong(o);
  EXPECT_EQ(wrong.put("k", "v"), Status::kError);
  std::string why = wrong.counters(0).last_error;
  EXPECT_NE(why.find("'cache-a'"), std::string::npos) << why;
  EXPECT_NE(why.find(servers_[0]->address()), std::string::npos) << why;
  o.servers[0].name = "cache-a";
  Cluster right(o);
  EXPECT_EQ(right.put("k", "v"), Status::kOk);
}

// fabkv-cli --servers: put and get through the ring, `locate` as the library places keys (one
// key a line from stdin too), a bad list refused with exit 2 and the reason.
TEST_F(ClusterE2E, CliPutsGetsAndLocatesThroughTheRing) {
  start(3);
  std::string list;
  for (const auto& s : servers_) list += (list.empty() ? "" : ",") + s->address();
  auto cli = [&](std::vector<std::string> rest, std::string* out = nullptr,
                 const std::string* in = nullptr) {
    std::vector<std::string> a = {FABKV_CLI_BIN, "--servers", list, "--provider", "shm"};
    a.insert(a.end(), rest.begin(), rest.end());
    return run_tool(a, out, in);
  };
  Cluster c(options());
  std::string out;
  for (int k = 0; k < 12; ++k) {
    std::string key = fmt::format("cli{}", k);
    ASSERT_EQ(cli({"put", key, key + "-v\n"}), 0);  // a last line without '\n' is not read
    ASSERT_EQ(cli({"locate", key}, &out), 0);
    size_t s = c.server_for_key(key);
    EXPECT_EQ(out, fmt::format("{}\t{}\t{}\t{}", key, s, c.server(s).name, c.server(s).address));
    std::string v;
    ASSERT_EQ(direct(s)->get(key, &v), Status::kOk) << key;  // on that server itself
    EXPECT_EQ(v, key + "-v\n");
    ASSERT_EQ(cli({"get", key}, &out), 0);
    EXPECT_EQ(out, key + "-v");
  }
  std::string keys = "cli1\ncli2";
  ASSERT_EQ(cli({"--replicas", "2", "locate", "-"}, &out, &keys), 0);
  auto r = c.servers_for_key("cli1");  // replicas 1: the first of them
  EXPECT_EQ(out.substr(0, out.find('\n')).find(fmt::format("cli1\t{}\t", r[0])), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\t'), 12) << out;  // 2 keys x 2 replicas x 3
  EXPECT_EQ(cli({"del", "cli3"}), 0);
  EXPECT_EQ(cli({"get", "cli3"}), 1);
  EXPECT_EQ(run_tool({FABKV_CLI_BIN, "--servers", "nonsense", "get", "k"}), 2);
}

}  // namespace
}  // namespace fabkv::testing
