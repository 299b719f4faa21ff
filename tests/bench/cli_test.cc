// fabkv-bench as users run it: a short real run whose JSON validates; bad input of every kind
// is one line on stderr, a non-zero exit and an untouched results file; the report renders
// from a small recorded results file (data/sample.jsonl).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/calibrate.h"
#include "bench/metrics.h"
#include "bench/servers.h"
#include "perf/process.h"
#include "server/options.h"

#include <signal.h>
#include <thread>

namespace fs = std::filesystem;
using fabkv::bench::validate_record;

namespace {

struct Ran {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fabkv-bench-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Ran run(const std::string& args) {
    std::string cmd = std::string(FABKV_BENCH_BIN) + " " + args + " >" + (dir_ / "out").string() +
                      " 2>" + (dir_ / "err").string();
    int st = std::system(cmd.c_str());
    Ran r;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    r.out = slurp(dir_ / "out");
    r.err = slurp(dir_ / "err");
    return r;
  }
  // A quick run (kQuick) that must succeed: its records, each checked against the schema.
  std::vector<nlohmann::json> run_ok(const std::string& args, Ran* ran = nullptr);
  fs::path dir_;
};

// The records of a results file, each checked against the record schema.
std::vector<nlohmann::json> valid_records(const fs::path& json) {
  std::ifstream f(json);
  std::string line;
  std::vector<nlohmann::json> out;
  while (std::getline(f, line)) {
    out.push_back(nlohmann::json::parse(line));
    EXPECT_EQ(validate_record(out.back()), std::vector<std::string>{}) << line;
  }
  return out;
}

// Small and quick: what every bad-input case adds to an otherwise valid command.
const std::string kQuick =
    " --provider shm --keys 1000 --duration 0.3 --warmup 0.1 --clients 2 "
    "--client-core -1 --server-core -1 --server-memory 32M --quiet";

std::vector<nlohmann::json> BenchCli::run_ok(const std::string& args, Ran* ran) {
  const fs::path json = dir_ / "r.jsonl";
  const Ran r = run(args + " --json " + json.string() + kQuick);
  if (ran != nullptr) *ran = r;
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  return r.status == 0 ? valid_records(json) : std::vector<nlohmann::json>{};
}

}  // namespace

TEST_F(BenchCli, ARunWritesOneValidJsonLinePerSystemAndRun) {
  fs::path json = dir_ / "r.jsonl";
  Ran r = run("--systems fabkv:herd --read-ratio 0.95,0.5 --json " + json.string() + kQuick);
  ASSERT_EQ(r.status, 0) << r.err;
  int n = 0;
  for (const nlohmann::json& j : valid_records(json)) {
    EXPECT_EQ(j["system"], "fabkv");
    EXPECT_EQ(j["protocol"], "herd");
    EXPECT_EQ(j["per_client_ops"].size(), 2u);
    EXPECT_EQ(j["check"]["mismatches"], 0);
    EXPECT_GT(j["ops"].get<uint64_t>(), 0u);
    EXPECT_TRUE(j["server_cpu_s"].is_number()) << "the server it started: CPU known";
    EXPECT_TRUE(j.contains("machine") && j.contains("command") && j.contains("timestamp"));
    ++n;
  }
  EXPECT_EQ(n, 2) << "one line per read ratio";
  EXPECT_NE(r.out.find("fabkv:herd"), std::string::npos) << "a summary line per run";
}

TEST_F(BenchCli, TwoLoadThreadsAgainstTheNullTargetAndFabkv) {
  fs::path json = dir_ / "r.jsonl";
  Ran r = run("--systems null,fabkv:herd --threads 2 --window 2 --json " + json.string() + kQuick);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> systems;
  for (const nlohmann::json& j : valid_records(json)) {
    const std::string line = j.dump();
    systems.push_back(j["system"]);
    EXPECT_EQ(j["load_threads"], 2);
    EXPECT_EQ(j["clients"], 2);  // kQuick's: one per thread
    uint64_t sum = 0;
    for (const auto& o : j["per_client_ops"]) {
      EXPECT_GT(o.get<uint64_t>(), 0u) << line;
      sum += o.get<uint64_t>();
    }
    EXPECT_EQ(sum, j["ops"].get<uint64_t>());
    EXPECT_EQ(j["requests"].get<uint64_t>(), j["gets"].get<uint64_t>() + j["puts"].get<uint64_t>());
    EXPECT_GT(j["check"]["gets_checked"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["check"]["mismatches"], 0);
    EXPECT_EQ(j["check"]["ok"], true);
    ASSERT_TRUE(j["load_cpu_us_per_request"].is_number()) << line;
    EXPECT_GT(j["load_cpu_us_per_request"].get<double>(), 0.0);
  }
  EXPECT_EQ(systems, (std::vector<std::string>{"null", "fabkv"}));
  EXPECT_NE(r.out.find("t=2"), std::string::npos) << r.out;
}

// --client-mode shared,independent: each configuration once per mode, the record saying which
// and the independent one driven by a thread per client.
TEST_F(BenchCli, BothClientModesAgainstTheNullTarget) {
  fs::path json = dir_ / "r.jsonl";
  Ran r = run("--systems null --client-mode shared,independent --json " + json.string() + kQuick);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> modes;
  for (const nlohmann::json& j : valid_records(json)) {
    modes.push_back(j["client_mode"]);
    EXPECT_EQ(j["load_threads"], j["client_mode"] == "independent" ? 2 : 1) << j.dump();
    uint64_t sum = 0;
    for (const auto& o : j["per_client_ops"]) sum += o.get<uint64_t>();
    EXPECT_EQ(sum, j["ops"].get<uint64_t>());
  }
  EXPECT_EQ(modes, (std::vector<std::string>{"shared", "independent"}));
  EXPECT_NE(r.out.find(" indep:"), std::string::npos) << r.out;
}

TEST_F(BenchCli, BadInputIsOneLineNonZeroAndLeavesTheResultsFileAlone) {
  fs::path json = dir_ / "r.jsonl";
  const std::string before = "{\"recorded\":\"earlier\"}\n";
  {
    std::ofstream f(json);
    f << before;
  }
  const std::string gone = "127.0.0.1:" + std::to_string(fabkv::bench::free_loopback_port());
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"--workload Z", "unknown workload"},
      {"--workload D", "unknown workload"},
      {"--read-ratio 1.2", "read ratio"},
      {"--clients 0", "--clients 0"},
      {"--window 0", "--window"},
      {"--threads 0", "--threads 0"},
      {"--client-mode fair", "--client-mode"},
      {"--client-mode independent --clients 1025", "a thread per client"},
      {"--distribution pareto", "unknown distribution"},
      {"--systems cassandra", "unknown system"},
      {"--systems fabkv:nonsense", "unknown fabkv protocol"},
      {"--value-size 4", "--value-size"},
      {"--value-size 100000", "max_value"},  // over the started fabkv-server's 64 KiB
      {"--systems memcached --memcached-bin /bin/false", "memcached failed to start"},
      {"--systems redis --redis-bin /bin/false", "redis failed to start"},
      {"--systems fabkv:herd --server " + gone, "fabkv server at"},
      {"--frobnicate", "frobnicate"},
      {"--systems fabkv:herd --server " + gone + " --server-arg=--window", "--server-arg"},
      {"--systems fabkv:herd --multiget 4", "has no multi-get"},
      {"--systems memcached --multiget 0", "--multiget 0"},
      {"--systems fabkv:herd --replicas 2", "fabkv-cluster systems"},
      {"--systems fabkv-cluster:herd --replicas 4", "--replicas 4"},
      {"--systems fabkv-cluster:seq-rpc", "a cluster places keys"},
      {"--systems fabkv-cluster:herd --cluster " + (dir_ / "none.toml").string(), "--cluster"},
      {"--systems fabkv-cluster:herd --cluster-servers 65", "--cluster-servers"},
      {"--systems fabkv-cluster:herd --replicas 0", "--replicas"},
      {"calibrate --fetch-sizes 60", "fetch size 60"},
      {"calibrate --delays-us -1", "--delays-us"},
      {"calibrate --server " + gone, "drop --server"},
  };
  for (const auto& c : cases) {
    Ran r = run(c.args + " --json " + json.string() + kQuick);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ":\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << c.args;
    EXPECT_EQ(slurp(json), before) << c.args << " touched the results file";
  }
}

// RF-RPC sec. 3.2's fig. 5 shape: fetching leads server-reply by far at short processing times
// and by under 10% from P = 7 us, where a call fails ~5 fetches (the paper's N = 5).
TEST(Calibrate, RetriesBoundIsTheFailedFetchesWhereFetchingStopsLeadingByTenPercent) {
  using fabkv::bench::DelayPoint;
  std::vector<DelayPoint> points = {{7000, 1.05e6, 1.0e6, 6.2},
                                    {0, 3.0e6, 1.5e6, 1.1},
                                    {3000, 2.0e6, 1.2e6, 3.0},
                                    {15000, 0.5e6, 0.52e6, 12.0}};  // out of order on purpose
  std::string log;
  EXPECT_EQ(fabkv::bench::choose_retries(points, &log), std::optional<uint32_t>(5)) << log;
  EXPECT_NE(log.find("P* = 7.0 us"), std::string::npos) << log;
  // Exactly 1.10 counts as "within 10%"; a point with no reply run is skipped.
  EXPECT_EQ(fabkv::bench::choose_retries({{0, 1.1e6, 1.0e6, 2.4}, {1, 1.0, 0.0, 9}}),
            std::optional<uint32_t>(1));
  // Fetching ahead everywhere: no bound from these points.
  EXPECT_EQ(fabkv::bench::choose_retries({{0, 2.0e6, 1.0e6, 1.0}, {9000, 1.5e6, 1.0e6, 8.0}}),
            std::nullopt);
  // Never below 1, however few READs a call took.
  EXPECT_EQ(fabkv::bench::choose_retries({{0, 1.0e6, 1.0e6, 1.0}}), std::optional<uint32_t>(1));
}

TEST(Calibrate, FetchSizeMaximisesEquationTwo) {
  using fabkv::bench::choose_fetch_size;
  using fabkv::bench::workload_result_sizes;
  // Results of 80 bytes (95%) and 48 (5%): F = 64 fetches most results twice.
  const auto sizes = workload_result_sizes(32, 0.95);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0].second, 80u);
  EXPECT_EQ(sizes[1].second, 48u);
  EXPECT_DOUBLE_EQ(sizes[0].first + sizes[1].first, 1.0);
  // I(64) = 1.9: 0.95 * 0.95 + 0.05 * 1.9 = 0.9975 < I(128) = 1.0.
  EXPECT_EQ(choose_fetch_size({{64, 1.9}, {128, 1.0}, {256, 0.9}}, sizes),
            std::optional<uint32_t>(128));
  // I(64) = 2.2 wins even though it halves: 0.95 * 1.1 + 0.05 * 2.2 = 1.155 > 1.0.
  EXPECT_EQ(choose_fetch_size({{64, 2.2}, {128, 1.0}}, sizes), std::optional<uint32_t>(64));
  // A tie goes to the smaller F; nothing measured, nothing chosen.
  EXPECT_EQ(choose_fetch_size({{512, 1.0}, {256, 1.0}}, sizes), std::optional<uint32_t>(256));
  EXPECT_EQ(choose_fetch_size({}, sizes), std::nullopt);
}

// The subcommand end to end on shm with short sweeps: it runs its servers, prints the
// enumeration, and writes a TOML table that fabkv-server's own loader takes, with one of the
// candidate F and the R it printed.
TEST_F(BenchCli, CalibrateWritesAnRfrpcTableTheServerLoads) {
  fs::path toml = dir_ / "rfrpc.toml", json = dir_ / "cal.jsonl";
  Ran r = run("calibrate --delays-us 0,16 --fetch-sizes 64,512 --toml " + toml.string() +
              " --json " + json.string() + kQuick);
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("eq. 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eq. 2"), std::string::npos) << r.out;
  fabkv::server::ServerOptions o;
  ASSERT_NO_THROW(fabkv::server::load_toml(toml.string(), &o)) << slurp(toml);
  EXPECT_TRUE(o.rfrpc.fetch_size == 64 || o.rfrpc.fetch_size == 512) << slurp(toml);
  EXPECT_NE(r.out.find("--rfrpc-fetch-size " + std::to_string(o.rfrpc.fetch_size)),
            std::string::npos)
      << r.out;
  if (slurp(toml).find("retries") != std::string::npos) {
    EXPECT_NE(r.out.find("--rfrpc-retries " + std::to_string(o.rfrpc.retries)), std::string::npos)
        << r.out;
  }
  // Every run is recorded: 2 delays x (fetch, reply) + 2 fetch sizes, each a valid record.
  const std::vector<nlohmann::json> records = valid_records(json);
  EXPECT_EQ(records.size(), 6u);
  for (const nlohmann::json& j : records) EXPECT_EQ(j["protocol"], "rfrpc") << j.dump();
}

// A cache whose index is far too small for the key space (16 buckets of 8 entries for kQuick's
// 1000 keys) gives up entries of full buckets: GETs of keys that were stored then miss, and that is
// the lossy cache's right, counted (index_drops) and reported as server_evictions, not a failure.
TEST_F(BenchCli, MissesFromACacheIndexThatDropsEntriesAreExplained) {
  const std::vector<nlohmann::json> records =
      run_ok("--systems fabkv:herd --server-arg=--index-buckets --server-arg=16");
  ASSERT_EQ(records.size(), 1u);
  const nlohmann::json& j = records[0];
  EXPECT_GT(j["check"]["unexpected_misses"].get<uint64_t>(), 0u) << j.dump();
  EXPECT_GT(j["server_evictions"].get<uint64_t>(), 0u) << j.dump();
  EXPECT_EQ(j["check"]["mismatches"], 0) << j.dump();
  EXPECT_EQ(j["check"]["ok"], true) << j.dump();
}

// Multi-gets of 4 keys against memcached and the front end: a request is one op of 4 checked
// keys, and the record's counts say so.
TEST_F(BenchCli, MultiGetRunsCountRequestsAndKeys) {
  Ran r;
  const std::vector<nlohmann::json> records =
      run_ok("--systems memcached,fabkv:memcached --multiget 4 --read-ratio 0.9", &r);
  ASSERT_EQ(records.size(), 2u);
  for (const nlohmann::json& j : records) {
    const std::string line = j.dump();
    EXPECT_EQ(j["workload"]["multiget"], 4) << line;
    const uint64_t gets = j["gets"], puts = j["puts"], ops = j["ops"];
    EXPECT_EQ(gets % 4, 0u) << line;
    EXPECT_EQ(ops, gets / 4 + puts) << line;
    EXPECT_EQ(j["requests"].get<uint64_t>(), ops) << line;
    EXPECT_GT(j["check"]["gets_checked"].get<uint64_t>(), 0u) << line;
    EXPECT_EQ(j["check"]["ok"], true) << line;
    EXPECT_NEAR(j["throughput_keys"].get<double>() * j["duration_s"].get<double>(),
                double(gets + puts), 1.0)
        << line;
  }
  EXPECT_NE(r.out.find("keys/s"), std::string::npos) << r.out;
}

// A cluster of 3 servers that fabkv-bench starts itself, without and with replicas: the
// record's keys per server add up to the key space (copies to replicas times it), and its
// requests per server to what the run sent: GETs once, PUTs once per replica. The servers
// count the requests sent in the interval, the run those completed in it; the two differ by
// what was in flight at its edges, at most clients x window logical requests.
TEST_F(BenchCli, AClusterItStartsReportsKeysAndRequestsPerServer) {
  for (uint64_t replicas : {1, 2}) {
    fs::remove(dir_ / "r.jsonl");  // run_ok's results file: this run's line only
    Ran r;
    const std::vector<nlohmann::json> records =
        run_ok("--systems fabkv-cluster:herd --cluster-servers 3 --read-ratio 0.5 --replicas " +
                   std::to_string(replicas),
               &r);
    ASSERT_EQ(records.size(), 1u);
    const nlohmann::json& j = records[0];
    const std::string line = j.dump();
    EXPECT_EQ(j["system"], "fabkv-cluster") << line;
    EXPECT_EQ(j["check"]["ok"], true) << line;
    const nlohmann::json& c = j["cluster"];
    ASSERT_EQ(c["servers"].size(), 3u) << line;
    EXPECT_EQ(c["replicas"], replicas) << line;
    uint64_t keys = 0, copies = 0, requests = 0;
    for (const nlohmann::json& s : c["servers"]) {
      EXPECT_GT(s["keys"].get<uint64_t>(), 0u) << line;
      EXPECT_GT(s["requests"].get<uint64_t>(), 0u) << line;
      keys += s["keys"].get<uint64_t>();
      copies += s["copies"].get<uint64_t>();
      requests += s["requests"].get<uint64_t>();
    }
    EXPECT_EQ(keys, 1000u) << "kQuick's key space: " << line;
    EXPECT_EQ(copies, replicas * 1000u) << line;
    EXPECT_EQ(c["requests"].get<uint64_t>(), requests) << line;
    const uint64_t sent = j["gets"].get<uint64_t>() + replicas * j["puts"].get<uint64_t>();
    const uint64_t edge = replicas * j["clients"].get<uint64_t>() * j["window"].get<uint64_t>();
    EXPECT_LE(requests, sent + edge) << line;
    EXPECT_GE(requests + edge, sent) << line;
    EXPECT_GE(c["keys_max_over_mean"].get<double>(), 1.0) << line;
    EXPECT_GE(c["requests_max_over_mean"].get<double>(), 1.0) << line;
    EXPECT_NE(r.out.find("3 servers, replicas " + std::to_string(replicas) + ": keys"),
              std::string::npos)
        << r.out;
  }
}

// Servers already running, from a cluster file with weights 1 and 2: fabkv-bench starts
// nothing, and the server of weight 2 (twice the ring points) gets the larger share of keys.
TEST_F(BenchCli, AClusterFileOfRunningServersIsDrivenAsItSays) {
  fabkv::bench::ServerSpec ss;
  ss.core = -1;
  ss.memory = "32M";
  ss.fabkv_server_bin = (fs::path(FABKV_BENCH_BIN).parent_path() / "fabkv-server").string();
  ss.protocols = "herd";
  ss.poll = "adaptive";  // two spinning servers would take both cores of a 2-core machine
  const auto a = fabkv::bench::LocalServer::start_fabkv(ss);
  const auto b = fabkv::bench::LocalServer::start_fabkv(ss);
  const fs::path toml = dir_ / "cluster.toml";
  {
    std::ofstream f(toml);
    f << "servers = [\"" << a->address() << "\", \"" << b->address() << ":2\"]\n";
  }
  const std::vector<nlohmann::json> records = run_ok("--systems fabkv-cluster:herd --cluster " +
                                                     toml.string());
  ASSERT_EQ(records.size(), 1u);
  const nlohmann::json& j = records[0];
  const nlohmann::json& c = j["cluster"];
  ASSERT_EQ(c["servers"].size(), 2u) << j.dump();
  EXPECT_EQ(c["started"], false) << j.dump();
  EXPECT_TRUE(j["server_cpu_s"].is_null()) << "no pids of servers it did not start";
  EXPECT_EQ(c["servers"][1]["address"], b->address());
  EXPECT_EQ(c["servers"][1]["weight"], 2);
  EXPECT_GT(c["servers"][1]["keys"].get<uint64_t>(), c["servers"][0]["keys"].get<uint64_t>())
      << j.dump();
  EXPECT_EQ(c["servers"][0]["keys"].get<uint64_t>() + c["servers"][1]["keys"].get<uint64_t>(),
            1000u);
  EXPECT_EQ(j["check"]["ok"], true) << j.dump();
}

TEST_F(BenchCli, ReportRendersFromARecordedResultsFile) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
    GTEST_SKIP()
        << "matplotlib is missing for /usr/bin/python3 (apt-get install python3-matplotlib)";
  fs::path out = dir_ / "report";
  Ran r = run(std::string("report --input ") + FABKV_BENCH_DATA + "/sample.jsonl --out " +
              out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* png :
       {"throughput_vs_clients.png", "throughput_vs_read_ratio.png", "latency_vs_clients.png",
        "throughput_vs_value_size.png", "uniformity_ratio.png"}) {
    std::string bytes = slurp(out / png);
    ASSERT_GT(bytes.size(), 1000u) << png;
    EXPECT_EQ(bytes.substr(1, 3), "PNG") << png;
  }
  std::string md = slurp(out / "summary.md");
  EXPECT_NE(md.find("| fabkv:herd | uniform | 95 |"), std::string::npos) << md;
  EXPECT_NE(md.find("## Ratios (fabkv / baseline"), std::string::npos);
  EXPECT_NE(md.find("| fabkv:herd | memcached |"), std::string::npos);
  EXPECT_NE(md.find("| fabkv:herd | redis |"), std::string::npos);
  EXPECT_NE(md.find("## Fabric verbs per request"), std::string::npos);

  Ran bad = run("report --input " + (dir_ / "nothing.jsonl").string() + " --out " + out.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  {
    std::ofstream f(dir_ / "broken.jsonl");
    f << "{\"system\":\"redis\"}\n";
  }
  bad = run("report --input " + (dir_ / "broken.jsonl").string() + " --out " + out.string());
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("missing"), std::string::npos) << bad.err;
}

TEST_F(BenchCli, InterruptStopsCleanlyAndWritesNothingPartial) {
  fs::path json = dir_ / "r.jsonl";
  std::vector<std::string> argv = {FABKV_BENCH_BIN,
                                   "--systems",
                                   "fabkv:herd",
                                   "--duration",
                                   "60",
                                   "--keys",
                                   "1000",
                                   "--clients",
                                   "2",
                                   "--client-core",
                                   "-1",
                                   "--server-core",
                                   "-1",
                                   "--server-memory",
                                   "32M",
                                   "--quiet",
                                   "--json",
                                   json.string()};
  fabkv::perf::ChildProcess bench(argv);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // inside the 60 s run
  bench.kill(SIGINT);
  int st = bench.wait(fabkv::Deadline::after_ms(20000));
  // 130 also when SIGINT simply killed it; the /dev/shm check below tells the two apart (a
  // killed process leaves its endpoints' regions behind).
  EXPECT_EQ(st, 130) << "interrupted runs exit 130 after stopping their servers";
  EXPECT_FALSE(fs::exists(json)) << "no line for a run that did not complete";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec))
    EXPECT_NE(e.path().filename().string().rfind(std::to_string(bench.pid()) + ":", 0), 0u)
        << "fabkv-bench left " << e.path() << " behind";
}
