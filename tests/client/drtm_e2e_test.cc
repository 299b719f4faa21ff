// DrTM-KV end to end: fabkv::Client speaking drtm (GETs by READ of cached item locations, PUTs
// of existing keys by CAS + WRITE + CAS, the rest by message) against one real fabkv-server
// process on shm and tcp, next to herd and server-reply clients on the same drtm engine.
// The verb counts by counter, a model map with windows, several processes writing shared keys
// with GETs racing them (never a torn or mixed value; the final state is the last
// acknowledged PUT), a client that dies holding a lock, the refusals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/testing.h"
#include "e2e_checks.h"
#include "server_fixture.h"

namespace fabkv {
namespace {

using fabkv::testing::KvServer;
using fabkv::testing::value_for;
using fabkv::testing::value_ok;

class DrtmE2E : public fabkv::testing::ProviderE2E {
 protected:
  void start(const std::vector<std::string>& extra = {}) {
    start_server("herd,server-reply,drtm", extra);
  }
  static uint64_t drtm_sum(const nlohmann::json& stats, const char* name) {
    uint64_t n = 0;
    for (const auto& w : stats.at("workers"))
      n += w.at("protocols").at("drtm").at("drtm").value(name, uint64_t{0});
    return n;
  }
};

TEST_P(DrtmE2E, VerbCountsByCounter) {
  start();
  auto c = Client::connect(options("drtm"));
  EXPECT_EQ(c->layout().at("protocol"), "drtm");
  EXPECT_EQ(c->layout().at("drtm").size(), 1u);
  std::string v;
  uint64_t ver = 0, got = 0;
  // A new key: by message (the worker allocates its item).
  auto before = c->counters();
  ASSERT_EQ(c->put("k", "value-1", 0, 0, &ver), Status::kOk);
  auto d = c->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kSend].posted, 1u);
  EXPECT_EQ(d[fabric::Verb::kAtomic].posted, 0u);
  // First GET: the bucket, then the item (and the location is cached).
  before = c->counters();
  ASSERT_EQ(c->get("k", &v, &got), Status::kOk);
  EXPECT_EQ(v, "value-1");
  EXPECT_EQ(got, ver);
  d = c->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kRead].posted, 2u);
  EXPECT_EQ(d[fabric::Verb::kSend].posted, 0u);

  // Repeat GET = 1 READ, nothing else; the worker never hears of it.
  const uint64_t worker_gets = worker_sum(c->stats(), "gets");
  before = c->counters();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(c->get("k", &v), Status::kOk);
    ASSERT_EQ(v, "value-1");
  }
  d = c->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kRead].posted, 100u);
  EXPECT_EQ(d[fabric::Verb::kAtomic].posted, 0u);
  EXPECT_EQ(d[fabric::Verb::kWrite].posted, 0u);
  EXPECT_EQ(d[fabric::Verb::kSend].posted, 0u);
  EXPECT_EQ(worker_sum(c->stats(), "gets"), worker_gets);

  // PUT of an existing key = 2 atomics + 1 WRITE; the worker's puts stay flat.
  const uint64_t worker_puts = worker_sum(c->stats(), "puts");
  const uint64_t late_before = counter(*c, "late_holds");
  before = c->counters();
  uint64_t last = got;
  for (int i = 0; i < 50; ++i) {
    uint64_t nv = 0;
    // Values that fit the item (8 bytes): a larger one goes to the worker (below).
    ASSERT_EQ(c->put("k", "v2-" + std::to_string(i), 0, 0, &nv), Status::kOk);
    ASSERT_EQ(nv, last + 1) << "a client PUT adds one to the item's version";
    last = nv;
  }
  d = c->counters() - before;
  // A holder whose acquire CAS completed later than it may still WRITE (40 ms after posting
  // it: docs/drtm.md, "A late holder"; seen 2 times in 50 on tcp on a loaded machine) gives the
  // lock back and sends its PUT to the worker; the next PUT then looks the key up (2 READs).
  // On a quiet machine `late` is 0 and the counts are the paper's.
  const uint64_t late = counter(*c, "late_holds") - late_before;
  EXPECT_EQ(d[fabric::Verb::kAtomic].posted, 100u);
  EXPECT_EQ(d[fabric::Verb::kWrite].posted, 50u - late);
  EXPECT_LE(d[fabric::Verb::kRead].posted, 2 * late);
  EXPECT_EQ(d[fabric::Verb::kSend].posted, late);
  EXPECT_EQ(worker_sum(c->stats(), "puts"), worker_puts + late);
  ASSERT_EQ(c->get("k", &v, &got), Status::kOk);
  EXPECT_EQ(v, "v2-49");
  EXPECT_EQ(got, last);
  EXPECT_EQ(counter(*c, "cas_puts"), 50u - late);
  EXPECT_EQ(counter(*c, "cas_failures"), 0u);

  // memcached cas through the lock word: the right version wins, a stale one loses.
  EXPECT_EQ(c->put("k", "stale", last - 1), Status::kVersionMismatch);
  ASSERT_EQ(c->put("k", "cas-ok", last, 0, &ver), Status::kOk);
  EXPECT_EQ(ver, last + 1);
  // A value that outgrows the item goes to the worker, which makes a bigger one.
  ASSERT_EQ(c->put("k", std::string(3000, 'x')), Status::kOk);
  ASSERT_EQ(c->get("k", &v), Status::kOk);
  EXPECT_EQ(v, std::string(3000, 'x'));
  ASSERT_EQ(c->del("k"), Status::kOk);
  EXPECT_EQ(c->get("k", &v), Status::kNotFound);
  EXPECT_EQ(c->put("k", "v", 5), Status::kNotFound) << "cas on a missing key";
}

TEST_P(DrtmE2E, AllProtocolsOnTheEngineSeeTheSameData) {
  start({"--workers", "2"});
  auto drtm = Client::connect(options("drtm"));
  auto herd = Client::connect(options("herd"));
  auto sr = Client::connect(options("server-reply"));
  std::string v;
  uint64_t ver = 0, got = 0;
  ASSERT_EQ(herd->put("shared", "from-herd", 0, 0, &ver), Status::kOk);
  ASSERT_EQ(drtm->get("shared", &v, &got), Status::kOk);
  EXPECT_EQ(v, "from-herd");
  EXPECT_EQ(got, ver);
  ASSERT_EQ(drtm->put("shared", "from-drtm", 0, 0, &ver), Status::kOk);  // by CAS (cached)
  ASSERT_EQ(herd->get("shared", &v, &got), Status::kOk);
  EXPECT_EQ(v, "from-drtm");
  EXPECT_EQ(got, ver) << "the worker reads the version the client's CAS released";
  ASSERT_EQ(sr->get("shared", &v), Status::kOk);
  EXPECT_EQ(v, "from-drtm");
  // herd's PUT in place under the lock; drtm's cached location still holds.
  ASSERT_EQ(herd->put("shared", "herd-again", ver, 0, &ver), Status::kOk);
  ASSERT_EQ(drtm->get("shared", &v, &got), Status::kOk);
  EXPECT_EQ(v, "herd-again");
  EXPECT_EQ(got, ver);
  // A DELETE by another protocol: drtm's cached location is found retired.
  ASSERT_EQ(sr->del("shared"), Status::kOk);
  EXPECT_EQ(drtm->get("shared", &v), Status::kNotFound);
  EXPECT_GE(counter(*drtm, "stale_locations"), 1u);
  // Expiry is the worker's: a GET of an item with expire_at goes by message.
  const uint32_t past = static_cast<uint32_t>(::time(nullptr)) - 10;
  ASSERT_EQ(herd->put("ttl", "gone", 0, past), Status::kOk);
  EXPECT_EQ(drtm->get("ttl", &v), Status::kNotFound);
  ASSERT_EQ(herd->put("ttl2", "live", 0, past + 3600), Status::kOk);
  ASSERT_EQ(drtm->get("ttl2", &v), Status::kOk);
  EXPECT_EQ(v, "live");
  EXPECT_GE(counter(*drtm, "message_gets"), 2u);
}

TEST_P(DrtmE2E, ModelMapWithManyRequestsInFlight) {
  start({"--workers", "2"});
  auto c = Client::connect(options("drtm"));
  fabkv::testing::async_ops_match_model(c.get(), 200, 4000);
  EXPECT_GT(counter(*c, "cas_puts"), 0u);
  EXPECT_GT(counter(*c, "cached_gets"), 0u);
  // And blocking operations from several clients of three protocols on shared keys.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Client::connect(options("drtm")));
  clients.push_back(Client::connect(options("herd")));
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(GetParam() == "shm" ? 3 : 4);
  for (int i = 0; i < 3000; ++i) {
    Client& cl = *clients[rng() % clients.size()];
    std::string key = "m-" + std::to_string(rng() % 200), v;
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      Status s = cl.get(key, &v);
      auto it = model.find(key);
      if (it == model.end()) ASSERT_EQ(s, Status::kNotFound) << i << " " << key;
      else {
        ASSERT_EQ(s, Status::kOk) << i << " " << key;
        ASSERT_EQ(v, it->second) << i << " " << key;
      }
    } else if (op < 9) {
      std::string val = value_for(key, static_cast<uint64_t>(i), 8 + rng() % 120);
      ASSERT_EQ(cl.put(key, val), Status::kOk) << i;
      model[key] = val;
    } else {
      Status s = cl.del(key);
      ASSERT_EQ(s, model.erase(key) ? Status::kOk : Status::kNotFound) << i;
    }
  }
}

// Several processes (two drtm, one herd), each with a window of requests in flight, PUT and GET
// the same few keys.
// Every GET must see a whole value some PUT wrote (self-describing: a torn or mixed one fails
// value_ok), and at the end each key holds the value of the PUT that was acknowledged with its
// highest version (a key's versions only grow, so that PUT came last).
TEST_P(DrtmE2E, ProcessesRacingOnSharedKeys) {
  start({"--workers", "2"});
  const int kProcs = 3, kKeys = 6, kOps = 1500;
  // The children fork before this process opens any fabric (a forked copy of an open
  // libfabric, its threads gone, is not something to rely on).
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int p = 0; p < kProcs; ++p) {
    int fd[2];
    ASSERT_EQ(pipe(fd), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fd[0]);
      int rc = 0;
      std::string out;
      try {
        // The last process speaks herd: its PUTs are the worker's, under the same locks.
        auto c = Client::connect(options(p == kProcs - 1 ? "herd" : "drtm"));
        std::mt19937_64 rng(100 + p);
        std::map<std::string, uint64_t> max_acked, max_read;
        std::map<std::string, std::string> acked_value;
        int bad = 0, outstanding = 0;
        for (int i = 0; i < kOps; ++i) {
          std::string key = "hot-" + std::to_string(rng() % kKeys);
          while (outstanding >= 4) c->poll();
          ++outstanding;
          if (rng() % 2) {
            std::string val = value_for(key, uint64_t(p + 1) * 1000000 + i, 20 + rng() % 40);
            Status s = c->put_async(key, val,
                                    [&, key, val](Status st, std::string_view, uint64_t ver) {
                                      --outstanding;
                                      if (st != Status::kOk) {
                                        ++bad;
                                        return;
                                      }
                                      if (ver > max_acked[key]) {
                                        max_acked[key] = ver;
                                        acked_value[key] = val;
                                      }
                                    });
            if (s != Status::kOk) ++bad, --outstanding;
          } else {
            Status s = c->get_async(key, [&, key](Status st, std::string_view v, uint64_t ver) {
              --outstanding;
              if (st == Status::kContended) return;  // allowed under this much contention
              if (st == Status::kNotFound && max_read[key] == 0 && max_acked[key] == 0) return;
              if (st != Status::kOk || !value_ok(key, std::string(v))) {
                ++bad;
                return;
              }
              max_read[key] = std::max(max_read[key], ver);
            });
            if (s != Status::kOk) ++bad, --outstanding;
          }
        }
        c->flush();
        out += "bad " + std::to_string(bad) + "\n";
        for (auto& [k, v] : max_acked)
          out += k + " " + std::to_string(v) + " " + acked_value[k] + "\n";
        out += "counters " + c->protocol_counters().dump() + "\n";
      } catch (const std::exception& e) {
        out += std::string("error ") + e.what() + "\n";
        rc = 1;
      }
      (void)!write(fd[1], out.data(), out.size());
      close(fd[1]);
      _exit(rc);
    }
    close(fd[1]);
    pids.push_back(pid);
    fds.push_back(fd[0]);
  }
  std::map<std::string, std::pair<uint64_t, std::string>> final_put;
  uint64_t cas_failures = 0;
  for (int p = 0; p < kProcs; ++p) {
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[p], buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
    close(fds[p]);
    int status = 0;
    waitpid(pids[p], &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << all;
    std::istringstream in(all);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string first;
      ls >> first;
      if (first == "bad") {
        int bad = -1;
        ls >> bad;
        EXPECT_EQ(bad, 0) << "process " << p << ": a failed request or a torn value\n" << all;
      } else if (first == "counters") {
        auto j = nlohmann::json::parse(line.substr(9));
        cas_failures += j.value("cas_failures", uint64_t{0});
      } else {
        uint64_t ver = 0;
        std::string val;
        ls >> ver >> val;
        if (ver > final_put[first].first) final_put[first] = {ver, val};
      }
    }
  }
  EXPECT_GT(cas_failures, 0u) << "the writers contended for the locks";
  auto c = Client::connect(options("herd"));
  // The worker's own lock-word CASes never lost to a client's atomic: on shm and tcp it
  // applies those itself, between its own accesses.
  EXPECT_EQ(drtm_sum(c->stats(), "own_cas_failures"), 0u);
  EXPECT_GT(drtm_sum(c->stats(), "in_place") + drtm_sum(c->stats(), "superseded"), 0u)
      << "the herd process's PUTs went through the worker";
  for (const auto& [key, vv] : final_put) {
    std::string got;
    uint64_t ver = 0;
    ASSERT_EQ(c->get(key, &got, &ver), Status::kOk) << key;
    EXPECT_EQ(ver, vv.first) << key << ": the highest acknowledged version is the last";
    EXPECT_EQ(got, vv.second) << key;
  }
}

// A client killed between its two atomics leaves the item locked. Readers still get the value
// before its PUT, whole; the next writer waits out the lease, hands its PUT to the worker,
// which replaces the item; nothing acknowledged is lost.
// A GET by READ hands its callback a view into the op's READ buffer: a callback that starts
// another GET and waits for it must keep its own value (the op stays taken while the callback
// runs; farm's and pilaf's readers hand a copy instead).
TEST_P(DrtmE2E, ACallbackThatStartsAnotherGetKeepsItsValue) {
  start();
  auto c = Client::connect(options("drtm"));
  const std::string a = value_for("first", 1, 100), b = value_for("second", 2, 100);
  ASSERT_EQ(c->put("first", a), Status::kOk);
  ASSERT_EQ(c->put("second", b), Status::kOk);
  {
    for (int i = 0; i < 50; ++i) {
      bool done = false;
      std::string seen, other;
      Status st = c->get_async("first", [&](Status s, std::string_view v, uint64_t) {
        ASSERT_EQ(s, Status::kOk);
        EXPECT_EQ(c->get("second", &other), Status::kOk);  // nested, to completion
        seen.assign(v.data(), v.size());
        done = true;
      });
      ASSERT_EQ(st, Status::kOk);
      ASSERT_EQ(c->flush(), Status::kOk);
      ASSERT_TRUE(done);
      EXPECT_EQ(other, b);
      ASSERT_EQ(seen, a) << "the callback's value was overwritten by the nested GET (round " << i
                         << ")";
    }
  }
  // Every GET but the first of each key READs a cached location.
  EXPECT_GE(counter(*c, "cached_gets"), 98u) << "the GETs went by message, not by READ";
}

TEST_P(DrtmE2E, AClientThatDiesHoldingALockWedgesNobody) {
  start();
  // The victim forks before this process opens any fabric.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = 1;
    try {
      testing::ClientHooks hooks;
      hooks.drtm_exit_holding_lock = true;
      auto victim = testing::connect(options("drtm"), hooks);
      std::string got;
      if (victim->put("held", "before") == Status::kOk &&  // a message: a new key
          victim->get("held", &got) == Status::kOk)        // caches the location
        victim->put("held", "never");  // fits the item: CAS, and it exits holding the lock
    } catch (...) {
    }
    _exit(rc);  // not reached when the lock was taken: the client exits with 3 there
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 3) << "the victim took the lock and died holding it";
  auto c = Client::connect(options("drtm"));
  std::string v;
  ASSERT_EQ(c->get("held", &v), Status::kOk);
  EXPECT_EQ(v, "before") << "the current record stays whole under a dead holder's lock";
  auto t0 = std::chrono::steady_clock::now();
  uint64_t ver = 0;
  ASSERT_EQ(c->put("held", "after", 0, 0, &ver), Status::kOk);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50))
      << "the lease ran out first";
  EXPECT_EQ(counter(*c, "lease_breaks"), 1u);
  ASSERT_EQ(c->get("held", &v), Status::kOk);
  EXPECT_EQ(v, "after");
  EXPECT_GE(drtm_sum(c->stats(), "locked_seen"), 1u);
  // The new item is free for CAS PUTs again.
  const auto before = c->counters();
  ASSERT_EQ(c->put("held", "after-2"), Status::kOk);
  const auto d = c->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kSend].posted, 0u);
  ASSERT_EQ(c->get("held", &v), Status::kOk);
  EXPECT_EQ(v, "after-2");
}

// A holder stalled between its lock and its WRITE for longer than the lease may have lost the
// lock to a writer that broke it (the worker then replaces the item and frees its memory after
// the retire grace): it must not WRITE, only give the lock back and have the worker apply its
// PUT (docs/drtm.md, "A late holder"). The stall is a test hook of the client.
TEST_P(DrtmE2E, AHolderPastItsLeaseDoesNotWrite) {
  start();
  testing::ClientHooks hooks;
  hooks.drtm_stall_holding_lock_ms = 120;  // > the 50 ms lease
  std::unique_ptr<Client> late = testing::connect(options("drtm"), hooks);
  std::string v;
  ASSERT_EQ(late->put("stalled", "before"), Status::kOk);  // a new key: by message
  ASSERT_EQ(late->get("stalled", &v), Status::kOk);        // caches the location
  const uint64_t writes = counter(*late, "writes");
  const auto before = late->counters();
  uint64_t ver = 0;
  ASSERT_EQ(late->put("stalled", "late", 0, 0, &ver), Status::kOk);  // CAS, stall, then?
  const auto d = late->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kWrite].posted, 0u) << "the late holder wrote the record";
  EXPECT_EQ(counter(*late, "writes"), writes);
  EXPECT_EQ(counter(*late, "late_holds"), 1u);
  EXPECT_GE(d[fabric::Verb::kSend].posted, 1u) << "the PUT went to the worker";
  // The lock was given back: another client PUTs by CAS at once, no lease to wait out.
  auto c = Client::connect(options("drtm"));
  ASSERT_EQ(c->get("stalled", &v), Status::kOk);
  EXPECT_EQ(v, "late");
  ASSERT_EQ(c->put("stalled", "next"), Status::kOk);
  EXPECT_EQ(counter(*c, "lease_breaks"), 0u);
  EXPECT_EQ(counter(*c, "cas_puts"), 1u);
  ASSERT_EQ(late->get("stalled", &v), Status::kOk);
  EXPECT_EQ(v, "next");
}

TEST_P(DrtmE2E, RefusesWhatCannotWork) {
  // One engine per server: pilaf's and drtm's clients reach different ones.
  EXPECT_THROW(KvServer(GetParam(), "drtm,pilaf"), std::runtime_error);
  // The op log cannot see PUTs made by CAS and WRITE.
  EXPECT_THROW(KvServer(GetParam(), "drtm", {"--oplog", "/tmp/fabkv-drtm-never"}),
               std::runtime_error);
  // A server without drtm, and a drtm client that asks for the write transport.
  start_server("herd");
  EXPECT_THROW(Client::connect(options("drtm")), ClientError);
  start_server("drtm");
  ClientOptions o = options("drtm");
  o.transport = "write";
  EXPECT_THROW(Client::connect(o), ClientError);
  EXPECT_NO_THROW(Client::connect(options("drtm")));
}

TEST_P(DrtmE2E, CliSpeaksDrtm) {
  start();
  auto run = [&](const std::string& args) {
    std::string out;
    std::string cmd = std::string(FABKV_CLI_BIN) + " --server " + server_->address() +
                      " --provider " + GetParam() + " --protocol drtm " + args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    int rc = ::pclose(f);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  EXPECT_EQ(run("put cli-key cli-value").first, 0);    // new key: by message
  EXPECT_EQ(run("put cli-key cli-value-2").first, 0);  // looked up, then CAS + WRITE + CAS
  auto [rc, out] = run("get cli-key");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "cli-value-2");
  EXPECT_EQ(run("del cli-key").first, 0);
  EXPECT_EQ(run("get cli-key").first, 1) << "not found exits 1";
}

INSTANTIATE_TEST_SUITE_P(Providers, DrtmE2E, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv
