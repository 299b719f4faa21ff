// fabkv-bench as users run it: a short real run whose JSON validates; bad input of every kind
// is one line on stderr, a non-zero exit and an untouched results file; the report renders
// from a small recorded results file (data/sample.jsonl).
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/metrics.h"
#include "bench/servers.h"
#include "perf/process.h"

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
    dir_ = fs::temp_directory_path() / ("fabkv-bench-test-" + std::to_string(::getpid()) + "-" +
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
  fs::path dir_;
};

// Small and quick: what every bad-input case adds to an otherwise valid command.
const std::string kQuick = " --provider shm --keys 1000 --duration 0.3 --warmup 0.1 --clients 2 "
                           "--client-core -1 --server-core -1 --server-memory 32M --quiet";

}  // namespace

TEST_F(BenchCli, ARunWritesOneValidJsonLinePerSystemAndRun) {
  fs::path json = dir_ / "r.jsonl";
  Ran r = run("--systems fabkv:herd --read-ratio 0.95,0.5 --json " + json.string() + kQuick);
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream f(json);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(validate_record(j), std::vector<std::string>{}) << line;
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
  std::ifstream f(json);
  std::string line;
  std::vector<std::string> systems;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(validate_record(j), std::vector<std::string>{}) << line;
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
      {"--distribution pareto", "unknown distribution"},
      {"--systems cassandra", "unknown system"},
      {"--systems fabkv:nonsense", "unknown fabkv protocol"},
      {"--value-size 4", "--value-size"},
      {"--value-size 100000", "max_value"},  // over the started fabkv-server's 64 KiB
      {"--systems memcached --memcached-bin /bin/false", "memcached failed to start"},
      {"--systems redis --redis-bin /bin/false", "redis failed to start"},
      {"--systems fabkv:herd --server " + gone, "fabkv server at"},
      {"--frobnicate", "frobnicate"},
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

TEST_F(BenchCli, ReportRendersFromARecordedResultsFile) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "matplotlib is missing for /usr/bin/python3 (apt-get install python3-matplotlib)";
  fs::path out = dir_ / "report";
  Ran r = run(std::string("report --input ") + FABKV_BENCH_DATA + "/sample.jsonl --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* png : {"throughput_vs_clients.png", "throughput_vs_read_ratio.png",
                          "latency_vs_clients.png", "throughput_vs_value_size.png",
                          "uniformity_ratio.png"}) {
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
  std::vector<std::string> argv = {FABKV_BENCH_BIN, "--systems", "fabkv:herd", "--duration", "60",
                                   "--keys", "1000", "--clients", "2", "--client-core", "-1",
                                   "--server-core", "-1", "--server-memory", "32M", "--quiet",
                                   "--json", json.string()};
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
