// The drivers against real servers started by the test: fabkv-server over shm, memcached and
// redis from the Debian packages (skipped with the reason when a binary is missing), and the
// null target (no server, an in-process table). Each must
// return exactly the values it wrote, "not found" for keys never written, and a short measured
// run must check every GET clean and give a record that validates.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "bench/driver.h"
#include "bench/metrics.h"
#include "bench/runner.h"
#include "bench/servers.h"

using namespace fabkv;
using namespace fabkv::bench;

namespace {

struct Started {
  std::unique_ptr<LocalServer> server;
  std::unique_ptr<Driver> driver;
};

Started start(const std::string& system, size_t clients, uint32_t window, size_t threads = 1,
              uint32_t null_slow_client_us = 0) {
  ServerSpec ss;
  ss.core = -1;  // the test machine is shared: no pinning
  ss.memory = "64M";
  ss.fabkv_server_bin = FABKV_SERVER_BIN;
  ss.provider = "shm";
  ss.window = std::max<uint32_t>(4, window);
  DriverOptions d;
  d.clients = clients;
  d.window = window;
  d.load_threads = threads;
  d.null_slow_client_us = null_slow_client_us;
  d.protocol = "herd";
  d.provider = "shm";
  Started s;
  if (system == "fabkv") {
    s.server = LocalServer::start_fabkv(ss);
    d.address = s.server->address();
    d.server_pid = s.server->pid();
    s.driver = make_fabkv_driver(d);
  } else if (system == "fabkv-memcached") {  // fabkv-server's memcached front end
    ss.memcached = true;
    ss.max_value = "1M";
    s.server = LocalServer::start_fabkv(ss);
    d.address = s.server->memcached_address();
    d.server_pid = s.server->pid();
    s.driver = make_memcached_driver(d, "fabkv", "memcached");
  } else if (system == "null") {
    s.driver = make_null_driver(d);
  } else if (system == "memcached") {
    s.server = LocalServer::start_memcached(ss);
    d.address = s.server->address();
    d.server_pid = s.server->pid();
    s.driver = make_memcached_driver(d);
  } else {
    s.server = LocalServer::start_redis(ss);
    d.address = s.server->address();
    d.server_pid = s.server->pid();
    s.driver = make_redis_driver(d);
  }
  return s;
}

// Lets a test give each request a lambda: the Completion's tag indexes a table of them.
class Callbacks final : public CompletionSink {
 public:
  using Fn = std::function<void(OpStatus, std::string_view)>;
  Completion operator()(Fn fn) {
    fns_.push_back(std::move(fn));
    return Completion{this, fns_.size() - 1};
  }
  void complete(uint64_t tag, OpStatus s, std::string_view v) override {
    Fn fn = std::move(fns_.at(tag));
    ASSERT_TRUE(fn) << "request " << tag << " completed twice";
    fns_[tag] = nullptr;
    fn(s, v);
  }

 private:
  std::vector<Fn> fns_;
};

// Verbs counted over the measured interval against requests answered in it: each boundary
// can split up to clients x window requests (posted before the interval and answered in it, or
// posted in it and answered after), so a count may be off by that many requests' worth of
// verbs on each side, besides 5% for anything else. Under load (CI has shown 71 ops in 0.4 s)
// the boundaries are a large share of a short run.
void expect_per_request(double got, double want, uint64_t requests, size_t in_flight,
                        const char* what) {
  const double n = static_cast<double>(requests);
  const double slack = 0.05 * want * n + 2.0 * static_cast<double>(in_flight) * want;
  EXPECT_NEAR(got * n, want * n, slack) << what << ": " << got << " per request over " << requests;
}

// Posts everything in `ops` spread over the clients, `window` deep, and polls to the end.
void run_all(Driver& d, size_t n, uint32_t window,
             const std::function<bool(size_t c, size_t i, Callbacks::Fn)>& post) {
  std::vector<uint32_t> in_flight(d.clients(), 0);
  size_t next = 0, done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < n) {
    for (size_t c = 0; c < d.clients(); ++c) {
      while (in_flight[c] < window && next < n) {
        size_t i = next++;
        ASSERT_TRUE(post(c, i, [&, c](OpStatus, std::string_view) { in_flight[c]--, done++; }))
            << d.error();
        in_flight[c]++;
      }
      d.poll(c);
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "requests did not complete: " << d.error();
  }
}

}  // namespace

class DriverTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& s = GetParam();
    if (s == "memcached" && find_executable("memcached").empty())
      GTEST_SKIP() << "memcached is not installed (apt-get install memcached)";
    if (s == "redis" && find_executable("redis-server").empty())
      GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server)";
  }
};

TEST_P(DriverTest, ReturnsTheValuesItWroteAndNotFoundForOthers) {
  auto s = start(GetParam(), 4, 4);
  Driver& d = *s.driver;
  const uint32_t key_size = 16, value_size = 40;
  const size_t n = 400;
  // Every key written twice: version 0, then version i+1 for odd keys (pipelined in order on
  // one client, so the second write wins).
  Callbacks cb;
  run_all(d, 2 * n, 4, [&](size_t, size_t i, Callbacks::Fn done) {
    uint64_t id = i % n;
    uint32_t version = i < n ? 0 : (id % 2 ? static_cast<uint32_t>(id + 1) : 0);
    std::string v;
    make_value(id, version, value_size, &v);
    size_t c = id % d.clients();  // both writes of a key on the same connection, in order
    return d.put(c, make_key(id, key_size), v, cb([done, id](OpStatus st, std::string_view x) {
                   EXPECT_EQ(st, OpStatus::kOk) << "put " << id;
                   done(st, x);
                 }));
  });
  std::map<uint64_t, std::string> got;
  size_t missing = 0;
  run_all(d, n + 50, 4, [&](size_t c, size_t i, Callbacks::Fn done) {
    uint64_t id = i < n ? i : 1'000'000 + i;  // the last 50 were never written
    return d.get(c, make_key(id, key_size), cb([&, done, id](OpStatus st, std::string_view v) {
                   if (id < n) {
                     EXPECT_EQ(st, OpStatus::kOk) << "get " << id;
                     got[id] = std::string(v);
                   } else {
                     EXPECT_EQ(st, OpStatus::kNotFound) << "get of a key never written " << id;
                     missing += st == OpStatus::kNotFound;
                   }
                   done(st, v);
                 }));
  });
  ASSERT_EQ(got.size(), n);
  EXPECT_EQ(missing, 50u);
  for (uint64_t id = 0; id < n; ++id) {
    std::string expect;
    make_value(id, id % 2 ? static_cast<uint32_t>(id + 1) : 0, value_size, &expect);
    EXPECT_EQ(got[id], expect) << "key " << id;
  }
  EXPECT_EQ(d.error(), "");
}

TEST_P(DriverTest, MeasuredRunChecksEveryGetAndMakesAValidRecord) {
  auto s = start(GetParam(), 4, 2);
  Runner runner(*s.driver, -1);
  RunSpec spec;
  spec.workload.keys = 2000;
  spec.workload.read_ratio = 0.5;
  spec.workload.read_modify_write = true;  // YCSB F: GET then PUT per op, both checked
  spec.workload.name = "F";
  spec.clients = 3;  // fewer than the driver has: only those count
  spec.window = 2;
  spec.warmup_s = 0.1;
  spec.duration_s = 0.4;
  runner.load(spec.workload, 2, nullptr);
  RunResult r = runner.run(spec, nullptr);
  // How many ops fit in 0.4 s depends on the machine's load (71 seen in CI with load 12):
  // this test checks correctness, so it only needs some of each.
  EXPECT_GT(r.ops, 0u);
  EXPECT_GT(r.check.checked, 0u);
  EXPECT_EQ(r.check.mismatches, 0u);
  EXPECT_EQ(r.check.unexpected_misses, 0u);
  ASSERT_EQ(r.per_client_ops.size(), 3u);
  for (uint64_t o : r.per_client_ops) EXPECT_GT(o, 0u);
  EXPECT_GT(r.puts, 0u);
  EXPECT_GT(r.requests, r.ops) << "a read-modify-write is one op of two requests";
  if (GetParam() != "null") {
    ASSERT_TRUE(r.server_cpu_s.has_value()) << "we started the server: its CPU is known";
    EXPECT_GE(*r.server_cpu_s, 0.0);
  }
  EXPECT_GT(r.load_cpu_s, 0.0) << "the load thread's CPU over the interval";
  EXPECT_EQ(r.load_threads, 1u);

  RunContext ctx;
  ctx.system = s.driver->system();
  ctx.protocol = s.driver->protocol();
  ctx.provider = "shm";
  ctx.spec = spec;
  nlohmann::json rec = make_record(ctx, r);
  EXPECT_EQ(validate_record(rec), std::vector<std::string>{}) << rec.dump(2);
  ASSERT_TRUE(rec["load_cpu_us_per_request"].is_number());
  EXPECT_GT(rec["load_cpu_us_per_request"].get<double>(), 0.0);
  EXPECT_EQ(rec["load_threads"], 1);
  if (GetParam() == "fabkv") {
    // HERD with the send transport (what --transport auto takes on shm, HERD sec. 5.5): a
    // request is a SEND each way and a RECV on each side; no WRITEs, no READs.
    ASSERT_TRUE(rec["fabric_ops_per_request"].is_object());
    EXPECT_EQ(rec["fabric_ops_per_request"]["write"].get<double>(), 0.0);
    const size_t in_flight = spec.clients * spec.window;
    expect_per_request(rec["fabric_ops_per_request"]["send"].get<double>(), 2.0, r.requests,
                       in_flight, "send");
    expect_per_request(rec["fabric_ops_per_request"]["recv"].get<double>(), 2.0, r.requests,
                       in_flight, "recv");
    EXPECT_EQ(rec["fabric_ops_per_request"]["read"].get<double>(), 0.0);
  } else {
    EXPECT_TRUE(rec["fabric_ops_per_request"].is_null());
  }
}

INSTANTIATE_TEST_SUITE_P(Systems, DriverTest,
                         ::testing::Values("fabkv", "memcached", "redis", "null"),
                         [](const auto& info) { return info.param; });

// Multi-gets (fabkv-bench --multiget) against the real servers: each key's answer, in the keys'
// order, with hits, misses and a key asked twice in one request, pipelined on two connections.
class MultiGet : public DriverTest {};

// Records every key's answer of each multi-get (tag = the request's number).
class KeyAnswers final : public CompletionSink {
 public:
  void complete(uint64_t tag, OpStatus s, std::string_view v) override {
    got[tag].push_back({s, std::string(v)});
  }
  std::map<uint64_t, std::vector<std::pair<OpStatus, std::string>>> got;
};

TEST_P(MultiGet, AnswersEveryKeyInOrderWithHitsMissesAndRepeats) {
  auto s = start(GetParam(), 2, 4);
  Driver& d = *s.driver;
  ASSERT_TRUE(d.supports_multi_get());
  const uint32_t key_size = 16, value_size = 24;
  const uint64_t n = 64;  // even ids are written, odd ones never
  Callbacks cb;
  run_all(d, n / 2, 4, [&](size_t c, size_t i, Callbacks::Fn done) {
    std::string v;
    make_value(2 * i, 7, value_size, &v);
    return d.put(c, make_key(2 * i, key_size), v, cb([done](OpStatus st, std::string_view x) {
                   EXPECT_EQ(st, OpStatus::kOk);
                   done(st, x);
                 }));
  });
  // Request r asks for 16 keys: ids (r * 5 + j * 3) % n, and its first key again at the end;
  // 40 requests, up to 4 in flight on each of the two connections.
  const size_t requests = 40, per = 16;
  auto ids_of = [&](size_t r) {
    std::vector<uint64_t> ids;
    for (size_t j = 0; j + 1 < per; ++j) ids.push_back((r * 5 + j * 3) % n);
    ids.push_back(ids[0]);
    return ids;
  };
  KeyAnswers answers;
  std::vector<uint32_t> in_flight(d.clients(), 0);
  std::vector<std::vector<size_t>> mine(d.clients());  // requests posted on each client
  size_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto complete = [&] {
    return answers.got.size() == requests &&
           std::all_of(answers.got.begin(), answers.got.end(),
                       [&](const auto& a) { return a.second.size() >= per; });
  };
  while (!complete()) {
    for (size_t c = 0; c < d.clients(); ++c) {
      // Requests end in order per connection: a request's last answer frees its window slot.
      while (!mine[c].empty() && answers.got.count(mine[c].front()) &&
             answers.got[mine[c].front()].size() == per) {
        mine[c].erase(mine[c].begin());
        in_flight[c]--;
      }
      while (in_flight[c] < 4 && next < requests) {
        std::vector<std::string> keys;
        for (uint64_t id : ids_of(next)) keys.push_back(make_key(id, key_size));
        std::vector<std::string_view> views(keys.begin(), keys.end());
        ASSERT_TRUE(d.multi_get(c, views, Completion{&answers, next})) << d.error();
        mine[c].push_back(next++);
        in_flight[c]++;
      }
      d.poll(c);
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "multi-gets did not complete: " << d.error();
  }
  size_t hits = 0, misses = 0;
  for (size_t r = 0; r < requests; ++r) {
    const std::vector<uint64_t> ids = ids_of(r);
    const auto& got = answers.got.at(r);
    ASSERT_EQ(got.size(), per) << "request " << r;
    for (size_t j = 0; j < per; ++j) {
      if (ids[j] % 2 == 0) {
        std::string expect;
        make_value(ids[j], 7, value_size, &expect);
        EXPECT_EQ(got[j].first, OpStatus::kOk) << "request " << r << " key " << j;
        EXPECT_EQ(got[j].second, expect) << "request " << r << " key " << j;
        hits++;
      } else {
        EXPECT_EQ(got[j].first, OpStatus::kNotFound) << "request " << r << " key " << j;
        misses++;
      }
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(misses, 0u);
  EXPECT_EQ(d.error(), "");
}

INSTANTIATE_TEST_SUITE_P(Systems, MultiGet,
                         ::testing::Values("memcached", "fabkv-memcached", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// --threads: the clients split over load threads, each with its own slots, histogram and
// checks; the merged result must add up exactly and every GET must still be checked clean.
class ThreadedRun : public ::testing::TestWithParam<std::string> {};

TEST_P(ThreadedRun, TwoLoadThreadsMergeConsistentCountsAndCheckEveryGet) {
  const size_t clients = 5;  // split 2 + 3
  auto s = start(GetParam(), clients, 2, 2);
  Runner runner(*s.driver, -1);
  RunSpec spec;
  spec.workload.keys = 2000;
  spec.workload.read_ratio = 0.5;
  spec.workload.read_modify_write = true;  // GET then PUT per op: nested posts on each thread
  spec.workload.name = "F";
  spec.clients = clients;
  spec.window = 2;
  spec.threads = 2;
  spec.warmup_s = 0.1;
  spec.duration_s = 0.5;
  runner.load(spec.workload, 2, nullptr);
  RunResult r = runner.run(spec, nullptr);
  EXPECT_EQ(r.load_threads, 2u);
  ASSERT_EQ(r.per_client_ops.size(), clients);
  uint64_t sum = 0;
  for (uint64_t o : r.per_client_ops) {
    EXPECT_GT(o, 0u) << "every client of both slices ran";
    sum += o;
  }
  EXPECT_EQ(sum, r.ops) << "per-client ops of both threads add up to the ops";
  EXPECT_EQ(r.latency.count(), r.ops) << "one latency per op, histograms merged";
  EXPECT_EQ(r.requests, r.gets + r.puts);
  EXPECT_GT(r.requests, r.ops) << "a read-modify-write is one op of two requests";
  EXPECT_GE(r.check.checked + r.check.misses, r.gets) << "every GET answered is checked";
  EXPECT_GT(r.check.checked, 0u);
  EXPECT_EQ(r.check.mismatches, 0u);
  EXPECT_EQ(r.check.unexpected_misses, 0u);
  EXPECT_EQ(r.check.misses, 0u) << "every key was loaded";
  EXPECT_GT(r.load_cpu_s, 0.0);
  if (GetParam() == "fabkv") {
    ASSERT_TRUE(r.client_verbs.has_value()) << "the leader sampled the client verbs";
    ASSERT_TRUE(r.server_verbs.has_value()) << "the leader sampled the server over client 0";
    // HERD, send transport (auto on shm): one SEND per request from the clients of both
    // threads.
    expect_per_request(static_cast<double>((*r.client_verbs)[fabric::Verb::kSend].posted) /
                           static_cast<double>(r.requests),
                       1.0, r.requests, clients * spec.window, "client sends");
  }
  RunContext ctx;
  ctx.system = s.driver->system();
  ctx.protocol = s.driver->protocol();
  ctx.spec = spec;
  nlohmann::json rec = make_record(ctx, r);
  EXPECT_EQ(validate_record(rec), std::vector<std::string>{}) << rec.dump(2);
  EXPECT_EQ(rec["load_threads"], 2);

  // The same driver again with one thread: nothing left over from the threaded run.
  spec.threads = 1;
  RunResult one = runner.run(spec, nullptr);
  EXPECT_EQ(one.load_threads, 1u);
  EXPECT_EQ(one.check.mismatches, 0u);
  EXPECT_GT(one.ops, 0u);
}

INSTANTIATE_TEST_SUITE_P(Systems, ThreadedRun, ::testing::Values("null", "fabkv"),
                         [](const auto& info) { return info.param; });

// --client-mode independent: a load thread per client, each counting its own client's ops; the
// merged result must add up exactly, every client must have run, every GET checked clean.
class IndependentRun : public DriverTest {};

TEST_P(IndependentRun, EachClientOnItsOwnThreadCountsItsOwnOpsAndTheyAddUp) {
  const size_t clients = 4;
  auto s = start(GetParam(), clients, 2, clients);
  Runner runner(*s.driver, -1);
  RunSpec spec;
  spec.workload.keys = 2000;
  spec.workload.read_ratio = 0.5;
  spec.clients = clients;
  spec.window = 2;
  spec.mode = ClientMode::kIndependent;
  spec.warmup_s = 0.1;
  spec.duration_s = 0.5;
  runner.load(spec.workload, 2, nullptr);
  RunResult r = runner.run(spec, nullptr);
  EXPECT_EQ(r.mode, ClientMode::kIndependent);
  EXPECT_EQ(r.load_threads, clients) << "one load thread per client";
  ASSERT_EQ(r.per_client_ops.size(), clients);
  uint64_t sum = 0;
  for (uint64_t o : r.per_client_ops) {
    EXPECT_GT(o, 0u) << "every client ran on its own thread";
    sum += o;
  }
  EXPECT_EQ(sum, r.ops) << "the clients' own counts add up to the total";
  EXPECT_EQ(r.latency.count(), r.ops) << "one latency per op, histograms merged";
  EXPECT_EQ(r.requests, r.gets + r.puts);
  EXPECT_GT(r.check.checked, 0u);
  EXPECT_EQ(r.check.mismatches, 0u);
  EXPECT_EQ(r.check.unexpected_misses, 0u);
  RunContext ctx;
  ctx.system = s.driver->system();
  ctx.protocol = s.driver->protocol();
  ctx.spec = spec;
  nlohmann::json rec = make_record(ctx, r);
  EXPECT_EQ(validate_record(rec), std::vector<std::string>{}) << rec.dump(2);
  EXPECT_EQ(rec["client_mode"], "independent");
  EXPECT_EQ(rec["load_threads"], clients);
}

INSTANTIATE_TEST_SUITE_P(Systems, IndependentRun, ::testing::Values("null", "memcached", "fabkv"),
                         [](const auto& info) { return info.param; });

// The modes against a slow client (the null target's client 0 sleeps 300 us in each poll that
// completes something). Shared, one load thread: the sleep holds the round-robin over every
// client, so all complete one request per round and the ratio stays at 1 by construction.
// Independent: the sleep holds only client 0's thread; the others go on, so the ratio shows
// the imbalance. The bound is one the shared mode cannot reach.
TEST(ClientModes, ASlowClientHoldsEveryoneWhenSharedAndOnlyItselfWhenIndependent) {
  const size_t clients = 4;
  auto s = start("null", clients, 1, clients, 300);
  Runner runner(*s.driver, -1);
  RunSpec spec;
  spec.workload.keys = 400;  // the load phase sleeps for each of client 0's PUTs too
  spec.clients = clients;
  spec.window = 1;
  spec.warmup_s = 0.1;
  spec.duration_s = 0.5;
  runner.load(spec.workload, 1, nullptr);
  const RunResult shared = runner.run(spec, nullptr);
  spec.mode = ClientMode::kIndependent;
  const RunResult independent = runner.run(spec, nullptr);
  const double shared_ratio = uniformity_ratio(shared.per_client_ops);
  const double independent_ratio = uniformity_ratio(independent.per_client_ops);
  ASSERT_GT(shared.per_client_ops[0], 100u) << "the slow client ran";
  ASSERT_GT(independent.per_client_ops[0], 100u) << "the slow client ran";
  EXPECT_LT(shared_ratio, 1.05) << "shared: one round-robin paces every client alike";
  EXPECT_GT(independent_ratio, 5.0) << "independent: the fast clients do not wait for client 0";
  for (size_t c = 1; c < clients; ++c)
    EXPECT_GT(independent.per_client_ops[c], 5 * independent.per_client_ops[0]) << "client " << c;
}

TEST(Record, ValidationCatchesMissingAndMistypedFields) {
  RunContext ctx;
  ctx.system = "memcached";
  ctx.protocol = "text";
  RunResult r;
  r.per_client_ops = {10, 20};
  ctx.spec.clients = 2;
  r.ops = 30;
  r.elapsed_s = 1;
  nlohmann::json rec = make_record(ctx, r);
  EXPECT_TRUE(validate_record(rec).empty());
  EXPECT_DOUBLE_EQ(rec["uniformity_ratio"].get<double>(), 2.0);
  for (const char* k : {"system", "workload", "latency_us", "per_client_ops", "server_cpu_s",
                        "fabric_ops_per_request", "uniformity_ratio", "throughput_ops"}) {
    nlohmann::json bad = rec;
    bad.erase(k);
    EXPECT_FALSE(validate_record(bad).empty()) << k;
  }
  nlohmann::json bad = rec;
  bad["workload"].erase("read_ratio");
  EXPECT_FALSE(validate_record(bad).empty());
  bad = rec;
  bad["latency_us"]["p999"] = "fast";
  EXPECT_FALSE(validate_record(bad).empty());
  bad = rec;
  bad["per_client_ops"] = {1};
  EXPECT_FALSE(validate_record(bad).empty()) << "one entry per client";
  r.per_client_ops = {0, 5};
  EXPECT_TRUE(make_record(ctx, r)["uniformity_ratio"].is_null()) << "a starved client: no ratio";
}

TEST(Servers, ABaselineThatFailsToStartIsOneLine) {
  ServerSpec ss;
  ss.core = -1;
  ss.memcached_bin = "/bin/false";
  try {
    LocalServer::start_memcached(ss);
    FAIL() << "started /bin/false as memcached";
  } catch (const std::runtime_error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("memcached failed to start"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Servers, AFabkvServerThatIsNotThereIsAnError) {
  DriverOptions d;
  d.address = "127.0.0.1:" + std::to_string(free_loopback_port());
  d.protocol = "herd";
  d.provider = "shm";
  d.timeout_ms = 1000;
  EXPECT_THROW(make_fabkv_driver(d), std::runtime_error);
  EXPECT_THROW(make_memcached_driver(d), std::runtime_error);
}

// The null target is a real table: values of every size (inline and on the heap), overwritten
// with other sizes, through its growth, each GET returning exactly the last PUT.
TEST(NullTarget, StoresEveryValueItIsGivenAndOnlyThose) {
  DriverOptions o;
  o.clients = 2;
  auto d = make_null_driver(o);
  const size_t n = 5000;
  std::map<uint64_t, std::string> model;
  size_t done = 0;
  Callbacks cb;
  auto put = [&](uint64_t id, uint32_t version, uint32_t size) {
    std::string v;
    make_value(id, version, size, &v);
    model[id] = v;
    ASSERT_TRUE(d->put(id % 2, make_key(id, 16), v, cb([&](OpStatus st, std::string_view) {
                         EXPECT_EQ(st, OpStatus::kOk);
                         done++;
                       })));
  };
  for (uint64_t id = 0; id < n; ++id) put(id, 0, 8 + static_cast<uint32_t>(id % 200));
  for (uint64_t id = 0; id < n; id += 3) put(id, 7, 8 + static_cast<uint32_t>((id * 7) % 300));
  d->poll(0);
  d->poll(1);
  EXPECT_EQ(done, n + (n + 2) / 3);
  size_t checked = 0;
  for (uint64_t id = 0; id < n + 100; ++id) {
    ASSERT_TRUE(d->get(id % 2, make_key(id, 16), cb([&, id](OpStatus st, std::string_view v) {
                         if (id < n) {
                           EXPECT_EQ(st, OpStatus::kOk) << id;
                           EXPECT_EQ(v, model[id]) << id;
                         } else {
                           EXPECT_EQ(st, OpStatus::kNotFound) << id;
                         }
                         checked++;
                       })));
    if (id % 64 == 0) d->poll(id % 2);
  }
  d->poll(0);
  d->poll(1);
  EXPECT_EQ(checked, n + 100);
}
