// The hydradb protocol (src/proto/hydradb/) end to end, against a real
// `fabkv-server --protocols hydradb` on shm and tcp: round trips; the verb counts by counter
// (first GET of a key: 1 WRITE from the client, 1 WRITE from the worker; a repeat GET: 1 READ
// and nothing else); a reader holding a cached address while another client replaces and
// deletes the key; leases on the client's monotonic clock (expiry, an offset clock, a fast
// clock, a slow clock that outlives the server's hold); model maps under several client
// processes with windows > 1; garbage in the request slots; a killed server.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/testing.h"
#include "e2e_checks.h"
#include "server/raw_client.h"
#include "store/hash.h"
#include "support/ready_process.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;
using std::chrono::milliseconds;

class Server : public ReadyProcess {
 public:
  Server(const std::string& provider, const std::vector<std::string>& extra)
      : ReadyProcess(argv(provider, extra), Stop::kSigterm) {}

 private:
  static std::vector<std::string> argv(const std::string& provider,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> a = {FABKV_SERVER_BIN,
                                  "--provider",
                                  provider,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--protocols",
                                  "hydradb",
                                  "--cores",
                                  "-1",
                                  "--memory",
                                  "64M",
                                  "--log",
                                  "warn"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

std::string value_for(const std::string& key, uint64_t n, size_t len) {
  // Self-describing: a torn or foreign value cannot pass value_ok().
  std::string v = key + "#" + std::to_string(n) + "#";
  std::mt19937_64 rng(std::hash<std::string>{}(v));
  while (v.size() < len) v.push_back(static_cast<char>('a' + rng() % 26));
  return v;
}
bool value_ok(const std::string& key, const std::string& v) {
  size_t a = v.find('#'), b = v.find('#', a + 1);
  if (a == std::string::npos || b == std::string::npos || v.substr(0, a) != key) return false;
  return v == value_for(key, std::stoull(v.substr(a + 1, b - a - 1)), v.size());
}
uint64_t generation_of(const std::string& v) {
  size_t a = v.find('#'), b = v.find('#', a + 1);
  return std::stoull(v.substr(a + 1, b - a - 1));
}

class HydraE2E : public ::testing::TestWithParam<std::string> {
 protected:
  void start(std::vector<std::string> extra = {"--workers", "2"}) {
    server_ = std::make_unique<Server>(GetParam(), extra);
  }
  ClientOptions options(int timeout_ms = 10000) const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam();
    o.protocol = "hydradb";
    o.timeout_ms = timeout_ms;  // two cores shared with busy-polling workers and the rest of CI
    return o;
  }
  static uint64_t counter(const Client& c, const char* name) {
    return c.protocol_counters().value(name, uint64_t{0});
  }
  // The server's WRITEs posted, summed over its workers.
  static uint64_t server_writes(Client& c) {
    uint64_t n = 0;
    const nlohmann::json st = c.stats();
    for (const auto& w : st.at("workers"))
      n += w.at("verbs").at("write").value("posted", uint64_t{0});
    return n;
  }
  static uint64_t worker_sum(const nlohmann::json& stats, const char* name) {
    uint64_t n = 0;
    for (const auto& w : stats.at("workers")) n += w.value(name, uint64_t{0});
    return n;
  }
  std::unique_ptr<Server> server_;
};

TEST_P(HydraE2E, PutGetDelCasAndLargeValuesRoundTrip) {
  start();
  auto c = Client::connect(options());
  EXPECT_EQ(c->layout().at("protocol"), "hydradb");
  EXPECT_EQ(c->layout().at("engine"), "hydradb");
  std::string v;
  uint64_t v1 = 0, v2 = 0, got = 0;
  EXPECT_EQ(c->get("missing", &v), Status::kNotFound);
  EXPECT_EQ(c->del("missing"), Status::kNotFound);
  ASSERT_EQ(c->put("alpha", "one", 0, 0, &v1), Status::kOk);
  for (int i = 0; i < 3; ++i) {  // an RPC, then READs
    ASSERT_EQ(c->get("alpha", &v, &got), Status::kOk);
    EXPECT_EQ(v, "one");
    EXPECT_EQ(got, v1);
  }
  EXPECT_EQ(c->put("alpha", "two", v1 + 1000), Status::kVersionMismatch);
  ASSERT_EQ(c->put("alpha", "two", v1, 0, &v2), Status::kOk);
  ASSERT_EQ(c->get("alpha", &v, &got), Status::kOk);
  EXPECT_EQ(v, "two");
  EXPECT_EQ(got, v2);
  std::string key250(250, 'K');
  ASSERT_EQ(c->put(key250, "long key"), Status::kOk);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(c->get(key250, &v), Status::kOk);
    EXPECT_EQ(v, "long key");
  }
  const size_t max_value = c->layout().at("max_value").get<size_t>();
  std::mt19937_64 rng(7);
  for (size_t size : {size_t{0}, size_t{1000}, size_t{60} << 10, max_value}) {
    std::string value(size, '\0');
    for (auto& ch : value) ch = static_cast<char>(rng());
    std::string key = "large-" + std::to_string(size);
    ASSERT_EQ(c->put(key, value), Status::kOk) << size;
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(c->get(key, &v), Status::kOk) << size;
      EXPECT_EQ(v, value) << size;
    }
  }
  EXPECT_EQ(c->del("alpha"), Status::kOk);
  EXPECT_EQ(c->get("alpha", &v), Status::kNotFound);
  EXPECT_EQ(c->get("", &v), Status::kInvalidKey);
  EXPECT_EQ(c->put("k", std::string(max_value + 1, 'x')), Status::kTooLarge);
  // An item with an expiry is never leased (its expiry is the server's to judge).
  ASSERT_EQ(c->put("ttl", "t", 0, static_cast<uint32_t>(std::time(nullptr)) + 3600), Status::kOk);
  const uint64_t reads = counter(*c, "reads");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c->get("ttl", &v), Status::kOk);
  EXPECT_EQ(counter(*c, "reads"), reads);
}

// Survey sec. 3.1: the first GET of a key is a WRITE request and a WRITE response (which
// carries the address); every repeat GET within the lease is one READ, no WRITE either way.
TEST_P(HydraE2E, FirstGetIsWriteWriteRepeatGetIsOneRead) {
  start({"--workers", "2", "--hydradb-lease-ms", "60000"});
  auto c = Client::connect(options());
  const uint64_t kKeys = 50, kRepeats = 4;
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_EQ(c->put("count" + std::to_string(i), "value-" + std::to_string(i)), Status::kOk);
  std::string v;
  auto before = c->counters();
  uint64_t sw0 = server_writes(*c);
  for (uint64_t i = 0; i < kKeys; ++i)
    ASSERT_EQ(c->get("count" + std::to_string(i), &v), Status::kOk);
  auto first = c->counters() - before;
  uint64_t sw1 = server_writes(*c);
  EXPECT_EQ(first[fabric::Verb::kWrite].posted, kKeys);
  EXPECT_EQ(first[fabric::Verb::kRead].posted, 0u);
  EXPECT_EQ(first.total_posted(), kKeys);
  // The worker's answers (stats() itself is a control request: no fabric verb).
  EXPECT_EQ(sw1 - sw0, kKeys);

  before = c->counters();
  for (uint64_t r = 0; r < kRepeats; ++r)
    for (uint64_t i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c->get("count" + std::to_string(i), &v), Status::kOk);
      ASSERT_EQ(v, "value-" + std::to_string(i));
    }
  auto repeat = c->counters() - before;
  EXPECT_EQ(repeat[fabric::Verb::kRead].posted, kRepeats * kKeys);
  EXPECT_EQ(repeat[fabric::Verb::kWrite].posted, 0u);
  EXPECT_EQ(repeat[fabric::Verb::kSend].posted, 0u);
  EXPECT_EQ(repeat[fabric::Verb::kRecv].posted, 0u);
  EXPECT_EQ(repeat.total_posted(), kRepeats * kKeys);
  EXPECT_EQ(server_writes(*c), sw1);  // the worker posted nothing for them
  EXPECT_EQ(counter(*c, "cache_hits"), kRepeats * kKeys);
  EXPECT_EQ(counter(*c, "cache_misses"), kKeys);
  EXPECT_EQ(counter(*c, "gets"), (kRepeats + 1) * kKeys);
  EXPECT_EQ(counter(*c, "stale_replaced") + counter(*c, "stale_foreign"), 0u);
  EXPECT_NEAR(c->protocol_counters().at("hit_rate").get<double>(),
              double(kRepeats) / double(kRepeats + 1), 1e-9);
  // PUT and DEL stay 1 WRITE each way.
  before = c->counters();
  ASSERT_EQ(c->put("count0", "changed"), Status::kOk);
  ASSERT_EQ(c->del("count1"), Status::kOk);
  auto mut = c->counters() - before;
  EXPECT_EQ(mut[fabric::Verb::kWrite].posted, 2u);
  EXPECT_EQ(mut.total_posted(), 2u);
}

// A reader holding a cached address while a writer (another client) replaces and deletes the
// key: every GET returns the value current when it ran, never the replaced one; the READs
// that found the flag cleared are counted as stale.
TEST_P(HydraE2E, AReaderHoldingAnAddressNeverReturnsTheReplacedValue) {
  start({"--workers", "1", "--hydradb-lease-ms", "60000"});
  auto reader = Client::connect(options());
  auto writer = Client::connect(options());
  std::string v;
  ASSERT_EQ(writer->put("k", "old"), Status::kOk);
  ASSERT_EQ(reader->get("k", &v), Status::kOk);  // RPC: caches the address
  ASSERT_EQ(reader->get("k", &v), Status::kOk);  // READ
  EXPECT_EQ(v, "old");
  EXPECT_EQ(counter(*reader, "cache_hits"), 1u);
  ASSERT_EQ(writer->put("k", "new"), Status::kOk);
  ASSERT_EQ(reader->get("k", &v), Status::kOk);  // READ finds the flag cleared, then RPC
  EXPECT_EQ(v, "new");
  EXPECT_EQ(counter(*reader, "stale_replaced"), 1u);
  ASSERT_EQ(reader->get("k", &v), Status::kOk);  // READ of the new item
  EXPECT_EQ(v, "new");
  EXPECT_EQ(counter(*reader, "cache_hits"), 2u);
  ASSERT_EQ(writer->del("k"), Status::kOk);
  EXPECT_EQ(reader->get("k", &v), Status::kNotFound);
  EXPECT_EQ(counter(*reader, "stale_replaced"), 2u);
  ASSERT_EQ(writer->put("k", "again"), Status::kOk);
  ASSERT_EQ(reader->get("k", &v), Status::kOk);
  EXPECT_EQ(v, "again");

  // The same under load: a writer thread rewrites a few keys as fast as it can; the reader's
  // GETs return only values whose generation never goes backwards for a key. The race must
  // have happened: the reader goes on (at least 2 s and 500 GETs, at most 60 s) until one of
  // its READs found the item at a cached address replaced by the writer (stale_replaced).
  const int kKeys = 4;
  for (int k = 0; k < kKeys; ++k) {
    std::string key = "hot" + std::to_string(k);
    ASSERT_EQ(writer->put(key, value_for(key, 0, 48)), Status::kOk);
  }
  const uint64_t stale_before = counter(*reader, "stale_replaced");
  const uint64_t hits_before = counter(*reader, "cache_hits");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::string writer_error;
  std::thread t([&] {
    std::mt19937_64 rng(3);
    for (uint64_t n = 1; !stop.load(); ++n) {
      std::string key = "hot" + std::to_string(rng() % kKeys);
      if (writer->put(key, value_for(key, n, 16 + rng() % 300)) != Status::kOk) {
        writer_error = "a PUT failed";
        return;
      }
      writes++;
    }
  });
  std::mt19937_64 rng(4);
  std::map<std::string, uint64_t> last;
  uint64_t gets = 0, bad = 0, raced = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto more = [&] {
    auto now = std::chrono::steady_clock::now();
    if (now >= t0 + std::chrono::seconds(60)) return false;
    if (now < t0 + std::chrono::seconds(2) || gets < 500) return true;
    if (gets % 64 == 0) raced = counter(*reader, "stale_replaced") - stale_before;
    return raced == 0;
  };
  while (more()) {
    std::string key = "hot" + std::to_string(rng() % kKeys);
    Status s = reader->get(key, &v);
    gets++;
    if (s != Status::kOk || !value_ok(key, v) || generation_of(v) < last[key]) {
      if (++bad < 5)
        ADD_FAILURE() << "GET " << key << ": " << to_string(s) << " '" << v.substr(0, 40) << "'";
      continue;
    }
    last[key] = generation_of(v);
  }
  stop = true;
  t.join();
  ASSERT_TRUE(writer_error.empty()) << writer_error;
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(writes.load(), 100u);
  auto pc = reader->protocol_counters();
  const uint64_t stale = pc.at("stale_replaced").get<uint64_t>() - stale_before;
  const uint64_t hits = pc.at("cache_hits").get<uint64_t>() - hits_before;
  EXPECT_GT(hits, 0u) << "no GET was a READ of a cached address: " << pc.dump();
  EXPECT_GT(stale, 0u) << "no READ met an item the writer had replaced in 60 s, so none was "
                          "tested against the race: "
                       << pc.dump();
  std::printf(
      "race: %llu GETs against %llu PUTs in %.1f s: %llu READ hits, %llu stale (flag "
      "cleared), %llu foreign\n",
      (unsigned long long)gets, (unsigned long long)writes.load(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      (unsigned long long)hits, (unsigned long long)stale,
      (unsigned long long)pc.at("stale_foreign").get<uint64_t>());
  EXPECT_EQ(pc.at("stale_foreign").get<uint64_t>(), 0u);  // memory held: never reused under a lease
}

// The lease is a duration on the client's monotonic clock from when it sent the GET: after
// it, a GET goes by RPC again (no READ), whatever the client's wall clock says.
// A GET answered by the cached READ hands its callback a view into that READ's buffer: a
// callback that starts another GET and waits for it must keep its own value (the op stays
// taken while the callback runs; farm's and pilaf's readers hand a copy instead).
TEST_P(HydraE2E, ACallbackThatStartsAnotherGetKeepsItsValue) {
  start({"--workers", "1", "--hydradb-lease-ms", "60000"});
  auto c = Client::connect(options());
  const std::string a = std::string(100, 'a') + "first", b = std::string(100, 'b') + "second";
  ASSERT_EQ(c->put("first", a), Status::kOk);
  ASSERT_EQ(c->put("second", b), Status::kOk);
  std::string v;
  ASSERT_EQ(c->get("first", &v), Status::kOk);  // the addresses, under a lease of a minute
  ASSERT_EQ(c->get("second", &v), Status::kOk);
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
  EXPECT_GE(counter(*c, "cache_hits"), 100u) << "the GETs went by RPC, not by the cached READ";
}

TEST_P(HydraE2E, LeaseRunsOutOnTheClientsMonotonicClock) {
  start({"--workers", "1", "--hydradb-lease-ms", "300"});
  for (int skew : {0, 3600, -3600}) {
    testing::ClientHooks hooks;
    hooks.clock_skew_s = skew;  // an offset changes nothing: only durations are measured
    auto c = testing::connect(options(), hooks);
    std::string v;
    ASSERT_EQ(c->put("lease", "x"), Status::kOk);
    ASSERT_EQ(c->get("lease", &v), Status::kOk);
    ASSERT_EQ(c->get("lease", &v), Status::kOk);
    EXPECT_EQ(counter(*c, "cache_hits"), 1u) << skew;
    std::this_thread::sleep_for(milliseconds(400));
    auto before = c->counters();
    ASSERT_EQ(c->get("lease", &v), Status::kOk);
    auto d = c->counters() - before;
    EXPECT_EQ(counter(*c, "lease_expired"), 1u) << skew;
    EXPECT_EQ(d[fabric::Verb::kRead].posted, 0u) << skew;
    EXPECT_EQ(d[fabric::Verb::kWrite].posted, 1u) << skew;
    ASSERT_EQ(c->get("lease", &v), Status::kOk);  // leased again
    EXPECT_EQ(counter(*c, "cache_hits"), 2u) << skew;
  }
}

// A client clock running 4x fast ends its leases after a quarter of the time (safe, more
// RPCs); one running at a quarter of the speed trusts addresses 4x longer than the server holds
// their memory: a writer churning the key gets the old item's memory reused under it, and the
// item checks (flag, version, key, checksum) must still never let the old value through.
TEST_P(HydraE2E, SkewedClockRatesEndLeasesEarlyOrAreCaughtByTheItemChecks) {
  start({"--workers", "1", "--hydradb-lease-ms", "1000", "--hydradb-margin-ms", "0"});
  {
    testing::ClientHooks hooks;
    hooks.lease_clock_rate = 4.0;
    auto c = testing::connect(options(), hooks);
    std::string v;
    ASSERT_EQ(c->put("fast", "x"), Status::kOk);
    ASSERT_EQ(c->get("fast", &v), Status::kOk);
    std::this_thread::sleep_for(milliseconds(400));  // 1.6 s on its clock
    ASSERT_EQ(c->get("fast", &v), Status::kOk);
    EXPECT_EQ(counter(*c, "lease_expired"), 1u);
    EXPECT_EQ(counter(*c, "reads"), 0u);
  }
  testing::ClientHooks hooks;
  hooks.lease_clock_rate = 0.25;
  auto reader = testing::connect(options(), hooks);
  auto writer = Client::connect(options());
  std::string v;
  uint64_t gen = 0, bad = 0;
  const int kRounds = 3;
  ASSERT_EQ(writer->put("slow", value_for("slow", gen, 64)), Status::kOk);
  for (int round = 0; round < kRounds; ++round) {
    // The reader takes an address (leased for 1 s on its clock: 4 s real) ...
    ASSERT_EQ(reader->get("slow", &v), Status::kOk);
    const uint64_t stale_before = counter(*reader, "stale_replaced") +
                                  counter(*reader, "stale_foreign");
    // ... and holds it for 1.6 s real while the key is rewritten: past the server's 1 s hold,
    // so the item's memory is given back and (same-size items) reused.
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < t0 + milliseconds(1600))
      ASSERT_EQ(writer->put("slow", value_for("slow", ++gen, 64)), Status::kOk);
    // 0.4 s on its clock: it READs the old address, and must see that it is not its item.
    ASSERT_EQ(reader->get("slow", &v), Status::kOk);
    if (!value_ok("slow", v) || generation_of(v) != gen) ++bad;
    EXPECT_EQ(counter(*reader, "stale_replaced") + counter(*reader, "stale_foreign"),
              stale_before + 1)
        << "round " << round;
  }
  EXPECT_EQ(bad, 0u);
  auto pc = reader->protocol_counters();
  std::printf(
      "slow clock: %d rounds, %llu generations: %llu stale (flag cleared), %llu foreign "
      "(memory reused), %llu hits\n",
      kRounds, (unsigned long long)gen, (unsigned long long)pc.at("stale_replaced").get<uint64_t>(),
      (unsigned long long)pc.at("stale_foreign").get<uint64_t>(),
      (unsigned long long)pc.at("cache_hits").get<uint64_t>());
  // Same-size items reuse a freed block at once (the heap splits the first fit from the
  // front), so the old address held another version by then: caught as foreign bytes.
  EXPECT_GE(pc.at("stale_foreign").get<uint64_t>(), 1u);
  EXPECT_GT(writer->stats().at("workers").at(0).at("hydradb").at("reclaimed").get<uint64_t>(), 0u);
}

// Random get/put/del with many requests in flight, checked against a model map.
// One worker: the check bounds what is in flight by 2 W, and a hydradb client has W RPC slots
// and W READ ops per worker.
TEST_P(HydraE2E, AsyncManyInFlightMatchesModel) {
  start({"--workers", "1"});
  auto c = Client::connect(options());
  testing::async_ops_match_model(c.get(), 2000);
  EXPECT_GT(counter(*c, "cache_hits"), 0u);
}

// Several client processes, each with W > 1 requests in flight on its own keys (checked
// against its own model map) while also reading keys the others write (checked to be whole
// and never older than what it saw before).
TEST_P(HydraE2E, SeveralClientProcessesMatchTheirModels) {
  start({"--workers", "2", "--window", "8"});
  const std::string address = server_->address(), provider = GetParam();
  const int kProcs = 3, kOps = 3000;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        ClientOptions o;
        o.server = address;
        o.provider = provider;
        o.protocol = "hydradb";
        o.timeout_ms = 20000;
        auto c = Client::connect(o);
        std::map<std::string, std::string> model;
        std::set<std::string> busy;
        std::map<std::string, uint64_t> seen;  // other processes' keys: generation seen
        std::mt19937_64 rng(100 + p);
        int wrong = 0, done = 0;
        for (int i = 0; i < kOps; ++i) {
          if (rng() % 4 == 0) {
            // Another process's key, read; its generation only moves forward for us.
            const int q = static_cast<int>(rng() % kProcs);
            std::string key = "p" + std::to_string(q) + "-k" + std::to_string(rng() % 20);
            Status s = c->get_async(key, [&, key](Status st, std::string_view v, uint64_t) {
              done++;
              if (st == Status::kNotFound) return;
              std::string val(v);
              if (st != Status::kOk || !value_ok(key, val)) {
                wrong++;
                std::fprintf(stderr, "process %d: foreign GET %s: %s, %zu bytes\n", p, key.c_str(),
                             to_string(st), val.size());
                return;
              }
              // Answers to GETs in flight together may arrive in any order: only a value
              // older than one seen by a GET that completed before this one was sent would
              // be wrong, which needs per-request bookkeeping; whole values suffice here.
              seen[key] = std::max(seen[key], generation_of(val));
            });
            if (s != Status::kOk) {  // not sent: no callback will run
              wrong++;
              std::fprintf(stderr, "process %d: foreign GET %s not sent: %s\n", p, key.c_str(),
                           to_string(s));
            }
            continue;
          }
          std::string key;
          do {
            key = "p" + std::to_string(p) + "-k" + std::to_string(rng() % 20);
            if (busy.count(key)) c->poll();
          } while (busy.count(key));
          busy.insert(key);
          auto it = model.find(key);
          std::optional<std::string> expect = it == model.end()
                                                  ? std::nullopt
                                                  : std::optional<std::string>(it->second);
          Status s;
          const int what = static_cast<int>(rng() % 3);
          if (what == 0) {
            s = c->get_async(key, [&, key, expect](Status st, std::string_view v, uint64_t) {
              done++;
              busy.erase(key);
              if (expect ? (st != Status::kOk || v != *expect) : st != Status::kNotFound) {
                wrong++;
                std::fprintf(stderr, "process %d: GET %s: %s, %zu bytes, expected %s\n", p,
                             key.c_str(), to_string(st), v.size(),
                             expect ? "the model's value" : "not found");
              }
            });
          } else if (what == 1) {
            std::string value = value_for(key, static_cast<uint64_t>(i) + 1, 16 + rng() % 500);
            s = c->put_async(key, value, [&, key, value](Status st, std::string_view, uint64_t) {
              done++;
              busy.erase(key);
              if (st != Status::kOk) {
                wrong++;
                std::fprintf(stderr, "process %d: PUT %s: %s\n", p, key.c_str(), to_string(st));
              }
              model[key] = value;
            });
          } else {
            s = c->del_async(key, [&, key, expect](Status st, std::string_view, uint64_t) {
              done++;
              busy.erase(key);
              if (st != (expect ? Status::kOk : Status::kNotFound)) {
                wrong++;
                std::fprintf(stderr, "process %d: DEL %s: %s\n", p, key.c_str(), to_string(st));
              }
              model.erase(key);
            });
          }
          if (s != Status::kOk) {  // not sent: no callback will run
            wrong++;
            busy.erase(key);
            std::fprintf(stderr, "process %d: op %d on %s not sent: %s\n", p, what, key.c_str(),
                         to_string(s));
          }
        }
        if (Status f = c->flush(); f != Status::kOk) {
          wrong++;
          std::fprintf(stderr, "process %d: flush: %s\n", p, to_string(f));
        }
        for (auto& [k, val] : model) {
          std::string got;
          if (Status g = c->get(k, &got); g != Status::kOk || got != val) {
            wrong++;
            std::fprintf(stderr, "process %d: final GET %s: %s, %zu bytes\n", p, k.c_str(),
                         to_string(g), got.size());
          }
        }
        const uint64_t hits = c->protocol_counters().value("cache_hits", uint64_t{0});
        std::printf("process %d: %d ops done, %d wrong, %llu cache hits\n", p, done, wrong,
                    (unsigned long long)hits);
        if (wrong != 0) std::printf("process %d: %s\n", p, c->protocol_counters().dump().c_str());
        std::fflush(stdout);
        code = wrong == 0 && done == kOps && hits > 0 ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "process %d: %s\n", p, e.what());
        code = 2;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    // Bounded: each child's requests time out after 20 s; poll its exit for at most 180 s.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    pid_t r = 0;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(20));
    if (r == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "client process " << pid << " did not finish";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "client process " << pid << " status " << status;
  }
  if (HasFailure()) {
    auto c = Client::connect(options());
    std::printf("server: %s\n", c->stats().dump().c_str());
  }
}

// A READ that finds its item replaced finishes its GET by RPC, which needs a free slot of the
// key's worker. Here that worker's slots are all held by PUTs whose WRITEs are signaled (on
// tcp, whose inject size is 64 bytes) and whose local completions sit in the completion queue
// right behind the stale READ's, so that the client reaps them in one batch: 16 PUTs fill both
// windows and one READ is posted after them; one poll() reaps the 16 PUT completions (a batch
// is 16) and leaves the READ's queued; then 8 more PUTs fill worker 0's window again. A client
// that submitted the RPC from inside its completion handler waited there for a slot while the
// completion that frees it sat in the batch behind, until the deadline (the lost GETs of
// SeveralClientProcessesMatchTheirModels on tcp; docs/hydradb.md, "Never wait inside
// complete()"). Every op must finish at once, and right. (On shm every request is inlined and
// its slot is free once its answer is in the ring, which a nested poll sees: the old client
// passed there.)
TEST_P(HydraE2E, StaleReadWhoseSlotIsFreedLaterInTheSameBatchDoesNotStall) {
  start({"--workers", "2", "--window", "8", "--hydradb-lease-ms", "60000"});
  auto reader = Client::connect(options(3000));
  auto writer = Client::connect(options());
  auto keys_of = [](uint32_t worker, const std::string& prefix, int n) {
    std::vector<std::string> out;
    for (int i = 0; static_cast<int>(out.size()) < n; ++i) {
      std::string k = prefix + std::to_string(i);
      if (store::partition_of(store::hash_key(k), 2) == worker) out.push_back(k);
    }
    return out;
  };
  const std::vector<std::string> stale = keys_of(0, "stale", 5), w0 = keys_of(0, "a", 8),
                                 w1 = keys_of(1, "b", 8);
  int done = 0, wrong = 0;
  auto put = [&](const std::string& key, int n) {
    ASSERT_EQ(reader->put_async(key, value_for(key, n, 200),
                                [&, key](Status st, std::string_view, uint64_t) {
                                  done++;
                                  if (st != Status::kOk) {
                                    wrong++;
                                    ADD_FAILURE() << "PUT " << key << ": " << to_string(st);
                                  }
                                }),
              Status::kOk);
  };
  for (size_t round = 0; round < stale.size(); ++round) {
    const std::string& key = stale[round];
    std::string v;
    ASSERT_EQ(writer->put(key, "old"), Status::kOk);
    ASSERT_EQ(reader->get(key, &v), Status::kOk);     // RPC: caches the address
    ASSERT_EQ(writer->put(key, "new"), Status::kOk);  // the cached item is now stale
    done = 0;
    for (int i = 0; i < 8; ++i) put(w0[i], 1);
    for (int i = 0; i < 8; ++i) put(w1[i], 1);
    Status get_st = Status::kError;
    std::string got;
    ASSERT_EQ(reader->get_async(key,
                                [&](Status st, std::string_view value, uint64_t) {
                                  done++;
                                  get_st = st;
                                  got.assign(value);
                                }),
              Status::kOk);  // a READ: needs no slot
    std::this_thread::sleep_for(milliseconds(100));
    const auto t0 = std::chrono::steady_clock::now();
    reader->poll();
    for (int i = 0; i < 8; ++i) put(w0[i], 2);
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_EQ(reader->flush(), Status::kOk);
    const auto took = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
    EXPECT_EQ(done, 8 + 8 + 1 + 8);
    EXPECT_EQ(get_st, Status::kOk) << "round " << round << ": " << to_string(get_st);
    EXPECT_EQ(got, "new");
    EXPECT_LT(took.count(), 1500) << "round " << round << ": " << took.count() << " ms";
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GE(counter(*reader, "stale_replaced"), stale.size());
  EXPECT_EQ(counter(*reader, "read_timeouts"), 0u);
  std::printf("reader: %s\n", reader->protocol_counters().dump().c_str());
  // The stale READs' GETs did find their worker's window full (4 of 5 on both providers).
  EXPECT_GE(counter(*reader, "deferred_gets"), 1u);
}

// Garbage, a torn header and impossible lengths WRITten into a hydradb request slot: the worker
// counts them as garbage / malformed and serves everyone else on.
TEST_P(HydraE2E, BadRequestsAreCountedAndTheServerServesOn) {
  start({"--workers", "1"});
  // A raw client whose ring is too small to be answered (the server admits it and never
  // WRITEs into it): only the server's counters tell what it did with the bytes.
  nlohmann::json ring = {{"addr", 4096}, {"length", 8}, {"key", 0}, {"access", 2}};
  testing::RawClient bad(GetParam(), server_->address(), "write", "hydradb", {{"ring", ring}});
  auto good = Client::connect(options());
  std::string v;
  ASSERT_EQ(good->put("served", "yes"), Status::kOk);
  auto malformed = [&] { return worker_sum(good->stats(), "malformed"); };
  auto garbage = [&] { return worker_sum(good->stats(), "garbage_slots"); };
  auto wait_for = [&](auto&& f, uint64_t n) {
    Deadline d = Deadline::after_ms(20000);
    while (f() < n && !d.expired()) std::this_thread::sleep_for(milliseconds(5));
    return f();
  };
  std::mt19937_64 rng(42);
  // 1: random bytes with a sequence number the worker does not expect.
  char junk[1024];
  for (auto& b : junk) b = static_cast<char>(rng());
  rpc::store<uint32_t>(junk, 0xdeadbeef);
  bad.write_slot(0, 0, junk, sizeof(junk));
  EXPECT_GE(wait_for(garbage, 1), 1u);
  EXPECT_GE(malformed(), 1u);
  ASSERT_EQ(good->get("served", &v), Status::kOk);
  // 2: a torn request: the right seq in header and trailer, a value byte changed after the
  // checksum (as if half of another WRITE had landed).
  char req[1024];
  size_t n = bad.build(2, rpc::OpCode::kPut, "torn", "xxxxxxxx", req);
  req[sizeof(rpc::RequestHeader) + 5] ^= 0x40;
  bad.write_slot(0, 1, req, n);
  EXPECT_GE(wait_for(malformed, 2), 2u);
  // 3: lengths no slot holds.
  rpc::RequestHeader h{};
  h.seq = 3;
  h.client = static_cast<uint16_t>(bad.client);
  h.epoch = static_cast<uint16_t>(bad.epoch);
  h.op = static_cast<uint8_t>(rpc::OpCode::kPut);
  h.key_len = 60000;
  h.value_len = 4000000;
  std::memset(req, 0, sizeof(req));
  rpc::store(req, h);
  bad.write_slot(0, 2, req, sizeof(req));
  EXPECT_GE(wait_for(malformed, 3), 3u);
  // 4: a well-formed GET with a wrong size field (a value on a GET): refused, not executed.
  auto requests = [&] { return worker_sum(good->stats(), "requests"); };
  const uint64_t before = requests();
  n = bad.build(4, rpc::OpCode::kGet, "served", "zz", req);
  bad.write_slot(0, 3, req, n);
  EXPECT_GE(wait_for(requests, before + 1), before + 1);
  // Nothing of it was executed, and the good client is served on, by RPC and by READ.
  EXPECT_EQ(good->get("torn", &v), Status::kNotFound);
  ASSERT_EQ(good->get("served", &v), Status::kOk);
  ASSERT_EQ(good->get("served", &v), Status::kOk);
  EXPECT_EQ(v, "yes");
  EXPECT_GT(counter(*good, "cache_hits"), 0u);
  auto st = good->stats();
  std::printf("bad input: %llu garbage slots, %llu malformed, %llu unanswered (ring too small)\n",
              (unsigned long long)worker_sum(st, "garbage_slots"),
              (unsigned long long)worker_sum(st, "malformed"),
              (unsigned long long)worker_sum(st, "ring_too_small"));
}

TEST_P(HydraE2E, KilledServerGivesServerGoneOrTimeout) {
  start();
  const int kTimeout = 500;
  auto c = Client::connect(options(kTimeout));
  testing::killed_server_ends_everything(c.get(), *server_, kTimeout);
}

TEST(HydraConnect, SendTransportIsRefused) { testing::send_transport_is_refused("hydradb"); }

INSTANTIATE_TEST_SUITE_P(Providers, HydraE2E, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace fabkv
