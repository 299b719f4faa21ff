// The sequencers (docs/sequencer.md; Guidelines sec. 4.2) end to end against real
// `fabkv-server --protocols <seq>` processes on shm and tcp, with real client processes
// (fabkv-seq-client, tests/client/seq_client.cc):
//   - many client processes with windows > 1: every value unique, each client's values
//     increasing in request order, no gap in the union over the run;
//   - exact verb counts per request, by counter;
//   - a client SIGKILLed mid-request: nobody gets a value twice, at most its in-flight values
//     are lost;
//   - restarts (SIGTERM and SIGKILL) never hand out a value already given (the high-water mark
//     in --data-dir);
//   - fabkv-cli next; refusals (no --data-dir; key-value calls on a sequencer and next on a
//     key-value protocol).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "client/client.h"
#include "perf/process.h"
#include "proto/seq/counter.h"
#include "support/child.h"
#include "support/ready_process.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;

struct Param {
  std::string provider;
  std::string protocol;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.provider << "/" << p.protocol; }
std::string name(const ::testing::TestParamInfo<Param>& p) {
  std::string n = p.param.provider + "_" + p.param.protocol;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fabkv-seq-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class SeqE2E : public ::testing::TestWithParam<Param> {
 protected:
  const std::string& provider() const { return GetParam().provider; }
  const std::string& protocol() const { return GetParam().protocol; }
  bool tcp() const { return provider() == "tcp"; }

  std::vector<std::string> server_argv(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {FABKV_SERVER_BIN, "--provider",  provider(), "--listen",
                                  "127.0.0.1:0",    "--protocols", protocol(), "--data-dir",
                                  dir_.path(),      "--cores",     "-1",       "--log",
                                  "warn",           "--window",    "16"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  void start(std::vector<std::string> extra = {}) {
    server_ = std::make_unique<ReadyProcess>(server_argv(extra), ReadyProcess::Stop::kSigterm);
  }
  ClientOptions options() const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = provider();
    o.protocol = protocol();
    o.timeout_ms = 10000;
    return o;
  }
  // The values of a client process that runs to its end: by request number.
  struct Run {
    std::vector<uint64_t> values;
    size_t ok = 0, failed = 0;
    bool done = false;
  };
  std::unique_ptr<testing::Child> spawn(size_t window, size_t count) const {
    auto p = std::make_unique<testing::Child>(
        std::vector<std::string>{FABKV_SEQ_CLIENT_BIN, server_->address(), provider(), protocol(),
                                 std::to_string(window), std::to_string(count)});
    std::string line;
    if (!p->proc().read_line(&line, Deadline::after_ms(20000)) || line.rfind("READY ", 0) != 0)
      throw std::runtime_error("fabkv-seq-client did not start: " + line + "\n" +
                               p->stderr_excerpt());
    return p;
  }
  // Reads the client's values until its DONE line; it must then exit 0 (no failed request).
  static Run collect(testing::Child& c, size_t count) {
    perf::ChildProcess& p = c.proc();
    Run r;
    r.values.assign(count, 0);
    std::string line;
    while (p.read_line(&line, Deadline::after_ms(120000))) {
      std::istringstream in(line);
      std::string tag;
      in >> tag;
      if (tag == "v") {
        size_t i;
        unsigned long long v;
        in >> i >> v;
        if (i < count) r.values[i] = v;
      } else if (tag == "DONE") {
        in >> r.ok >> r.failed;
        r.done = true;
        break;
      }
    }
    EXPECT_TRUE(c.ends_as(0, 10000));
    return r;
  }

  TempDir dir_;
  std::unique_ptr<ReadyProcess> server_;
};

// Every value unique across four client processes of different windows (1, 4, 8, 16) against
// two workers; each client's values increase with its request numbers; the union is a range
// without a gap starting at the server's first value.
TEST_P(SeqE2E, ManyClientProcessesGetUniqueIncreasingValuesWithoutGaps) {
  start({"--workers", "2"});
  const size_t count = tcp() ? 400 : 3000;
  const std::vector<size_t> windows = {1, 4, 8, 16};
  std::vector<std::unique_ptr<testing::Child>> procs;
  for (size_t w : windows) procs.push_back(spawn(w, count));
  std::vector<Run> runs;
  for (auto& p : procs) runs.push_back(collect(*p, count));
  std::set<uint64_t> all;
  size_t total = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Run& r = runs[k];
    ASSERT_TRUE(r.done) << "client " << k;
    EXPECT_EQ(r.ok, count) << "client " << k;
    EXPECT_EQ(r.failed, 0u) << "client " << k;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NE(r.values[i], 0u) << "client " << k << " request " << i;
      if (i > 0) {
        EXPECT_LT(r.values[i - 1], r.values[i]) << "client " << k << " request " << i;
      }
      all.insert(r.values[i]);
      total++;
    }
  }
  EXPECT_EQ(all.size(), total) << "a value was handed out twice";
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(*all.begin(), 1u) << "a new data directory starts at 1";
  EXPECT_EQ(*all.rbegin() - *all.begin() + 1, all.size()) << "gaps in the union";
}

// Verb counts per next(), by the client's and the server's counters.
TEST_P(SeqE2E, VerbsPerRequest) {
  start();
  auto c = Client::connect(options());
  uint64_t v = 0;
  ASSERT_EQ(c->next(&v), Status::kOk);  // warm: the first operation to a peer
  const nlohmann::json s0 = c->stats();
  const auto before = c->counters();
  const uint64_t n = 200;
  uint64_t last = v;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(c->next(&v), Status::kOk);
    EXPECT_GT(v, last);
    last = v;
  }
  const auto d = c->counters() - before;
  if (protocol() == "seq-atomic") {
    EXPECT_EQ(d[fabric::Verb::kAtomic].posted, n);
    EXPECT_EQ(d.total_posted(), n);  // nothing else
  } else if (protocol() == "seq-spec") {
    // A header-only SEND (0 bytes) and one receive buffer reposted for the answer.
    EXPECT_EQ(d[fabric::Verb::kSend].posted, n);
    EXPECT_EQ(d[fabric::Verb::kSend].bytes, 0u);
    EXPECT_EQ(d[fabric::Verb::kRecv].posted, n);
    EXPECT_EQ(d.total_posted(), 2 * n);
  } else {
    // One request (WRITE into the slot, or SEND, as the server's transport says); the answers
    // land in the multi-recv buffers posted at connect (src/proto/rpc/client.h), of which 200
    // answers of 32 bytes fill none: no receive is posted.
    const bool send = c->layout().at("transport") == "send";
    EXPECT_EQ(d[send ? fabric::Verb::kSend : fabric::Verb::kWrite].posted, n);
    EXPECT_EQ(d[send ? fabric::Verb::kWrite : fabric::Verb::kSend].posted, 0u);
    EXPECT_EQ(d[fabric::Verb::kRecv].posted, 0u);
    EXPECT_EQ(d[fabric::Verb::kRecv].inbound, n);
    EXPECT_EQ(d[fabric::Verb::kAtomic].posted, 0u);
    EXPECT_EQ(d.total_posted(), n);
  }
  // The server: one SEND per answer for seq-rpc and seq-spec, nothing at all for seq-atomic.
  const nlohmann::json s1 = c->stats();
  auto server_posted = [](const nlohmann::json& s, const char* verb) {
    uint64_t sum = 0;
    for (const auto& w : s.at("workers"))
      sum += w.at("verbs").at(verb).value("posted", uint64_t{0});
    return sum;
  };
  const uint64_t sends = server_posted(s1, "send") - server_posted(s0, "send");
  if (protocol() == "seq-atomic") {
    EXPECT_EQ(sends, 0u);
    EXPECT_EQ(server_posted(s1, "write") - server_posted(s0, "write"), 0u);
  } else {
    EXPECT_EQ(sends, n);
  }
}

// A client SIGKILLed with a full window in flight: the others never get one of its values, and
// the run loses at most its in-flight values (the values it was handed but had not printed
// are bounded by its window too).
TEST_P(SeqE2E, AKilledClientLosesOnlyItsInFlightValues) {
  start();
  const size_t window = 8;
  auto victim = spawn(window, 0);
  std::set<uint64_t> victim_values;
  std::string line;
  while (victim_values.size() < (tcp() ? 100u : 2000u) &&
         victim->proc().read_line(&line, Deadline::after_ms(30000))) {
    std::istringstream in(line);
    std::string tag;
    size_t i;
    unsigned long long v;
    if (in >> tag >> i >> v && tag == "v") victim_values.insert(v);
  }
  ASSERT_GE(victim_values.size(), tcp() ? 100u : 2000u);
  auto other = Client::connect(options());  // its requests race the victim's
  std::vector<uint64_t> mine;
  uint64_t v = 0;
  ASSERT_EQ(other->next(&v), Status::kOk);
  mine.push_back(v);
  EXPECT_TRUE(victim->kill());
  // Whatever the victim flushed before it died.
  while (victim->proc().read_line(&line, Deadline::after_ms(1000))) {
    std::istringstream in(line);
    std::string tag;
    size_t i;
    unsigned long long x;
    if (in >> tag >> i >> x && tag == "v") victim_values.insert(x);
  }
  perf::remove_shm_leftovers(victim->pid());
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(other->next(&v), Status::kOk) << i;
    ASSERT_GT(v, mine.back());
    mine.push_back(v);
  }
  std::set<uint64_t> all(victim_values);
  for (uint64_t x : mine) EXPECT_TRUE(all.insert(x).second) << x << " handed out twice";
  const uint64_t span = *all.rbegin() - *all.begin() + 1;
  EXPECT_LE(span - all.size(), 2 * window) << "more lost than the victim had in flight";
}

// The high-water mark: a restart (clean or SIGKILL) hands out only values above every value
// handed out before.
TEST_P(SeqE2E, ARestartNeverHandsOutAValueAgain) {
  uint64_t highest = 0;
  for (int round = 0; round < 3; ++round) {
    start();
    auto c = Client::connect(options());
    uint64_t v = 0;
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(c->next(&v), Status::kOk);
      ASSERT_GT(v, highest) << "round " << round << ": " << v << " was handed out before";
      highest = v;
    }
    const nlohmann::json s = c->stats();
    const nlohmann::json& seq = s.at("workers").at(0).at("protocols").at(protocol()).at("sequence");
    EXPECT_GT(seq.at("mark").get<uint64_t>(), highest);
    c.reset();
    if (round == 1) server_->kill();  // a crash: no chance to write anything on the way out
    else EXPECT_EQ(server_->stop(), 0);
    server_.reset();
  }
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/sequence.hwm"));
}

// fabkv-cli --protocol <seq> next prints one value and exits 0; the next one is larger.
TEST_P(SeqE2E, CliNextPrintsOneValue) {
  start();
  uint64_t prev = 0;
  for (int i = 0; i < 2; ++i) {
    perf::ChildProcess cli({FABKV_CLI_BIN, "--server", server_->address(), "--provider", provider(),
                            "--protocol", protocol(), "next"});
    std::string line;
    ASSERT_TRUE(cli.read_line(&line, Deadline::after_ms(20000)));
    EXPECT_EQ(cli.wait(Deadline::after_ms(20000)), 0);
    const uint64_t v = std::stoull(line);
    EXPECT_GT(v, prev);
    prev = v;
  }
}

// fabkv-cli refuses get/put/del with a sequencer, before it connects, and says why.
TEST_P(SeqE2E, CliRefusesKeyValueCommandsWithAReason) {
  start();
  const std::string cmd = fmt::format("{} --server {} --provider {} --protocol {} get k 2>&1",
                                      FABKV_CLI_BIN, server_->address(), provider(), protocol());
  perf::ChildProcess cli({"/bin/sh", "-c", cmd});
  std::string line;
  ASSERT_TRUE(cli.read_line(&line, Deadline::after_ms(20000)));
  EXPECT_EQ(cli.wait(Deadline::after_ms(20000)), 2);
  EXPECT_NE(line.find("is a sequencer: it serves `next` only"), std::string::npos) << line;
}

// Key-value calls on a sequencer and next on a key-value protocol are refused without a send.
TEST_P(SeqE2E, WrongCallsAreRefused) {
  start();
  auto c = Client::connect(options());
  std::string v;
  const auto before = c->counters();
  EXPECT_EQ(c->get("k", &v), Status::kError);
  EXPECT_EQ(c->put("k", "v"), Status::kError);
  EXPECT_EQ(c->del("k"), Status::kError);
  EXPECT_EQ((c->counters() - before).total_posted(), 0u);
  // The server runs no engine: its stats say so (all zero).
  const nlohmann::json s = c->stats();
  EXPECT_EQ(s.at("workers").at(0).at("engine").at("items"), 0);
}

// Spec-S0's speculation: a data directory whose mark sits just below 2^32 makes the values
// cross into new high bits. Every value is still the right one (one client, window 8: the
// values are consecutive), the crossing is answered by full 8-byte SENDs (misspeculated, by
// the client's and the server's counters), and the rest by header-only answers.
class SeqSpecE2E : public SeqE2E {};

TEST_P(SeqSpecE2E, SpeculationAcrossTheHigh32Bits) {
  const uint64_t mark = (uint64_t{1} << 32) - 100;
  {
    std::ofstream f(dir_.path() + "/sequence.hwm");
    f << seq::Counter::format(mark);
  }
  start();
  auto c = Client::connect(options());
  std::vector<uint64_t> values;
  const size_t n = 400;
  for (size_t i = 0; i < n; ++i) {
    while (c->in_flight() >= 8) c->poll();
    ASSERT_EQ(c->next_async([&](Status s, std::string_view, uint64_t v) {
      EXPECT_EQ(s, Status::kOk);
      values.push_back(v);
    }),
              Status::kOk);
  }
  ASSERT_EQ(c->flush(), Status::kOk);
  ASSERT_EQ(values.size(), n);
  EXPECT_EQ(values.front(), mark);
  for (size_t i = 1; i < n; ++i) ASSERT_EQ(values[i], values[i - 1] + 1) << i;
  EXPECT_GT(values.back(), uint64_t{1} << 32);
  const nlohmann::json pc = c->protocol_counters();
  const uint64_t miss = pc.at("misspeculated").get<uint64_t>();
  EXPECT_GE(miss, 1u);  // the crossing
  EXPECT_LE(miss, 8u);  // at most the window in flight when the high bits changed
  EXPECT_EQ(pc.at("speculated").get<uint64_t>() + miss, n);
  const nlohmann::json s = c->stats();
  EXPECT_EQ(s.at("workers").at(0).at("protocols").at("seq-spec").at("misspeculated"), miss);
}

INSTANTIATE_TEST_SUITE_P(Sequencers, SeqE2E,
                         ::testing::Values(Param{"shm", "seq-rpc"}, Param{"tcp", "seq-rpc"},
                                           Param{"shm", "seq-spec"}, Param{"tcp", "seq-spec"},
                                           Param{"shm", "seq-atomic"}, Param{"tcp", "seq-atomic"}),
                         name);
INSTANTIATE_TEST_SUITE_P(Sequencers, SeqSpecE2E,
                         ::testing::Values(Param{"shm", "seq-spec"}, Param{"tcp", "seq-spec"}),
                         name);

// A sequencer needs --data-dir (its high-water mark); a key-value protocol refuses next().
TEST(SeqRefusals, NoDataDirNoStart) {
  perf::ChildProcess p({FABKV_SERVER_BIN, "--provider", "shm", "--listen", "127.0.0.1:0",
                        "--protocols", "seq-rpc", "--log", "warn"});
  std::string line;
  EXPECT_FALSE(p.read_line(&line, Deadline::after_ms(20000)) && line.rfind("READY ", 0) == 0);
  EXPECT_NE(p.wait(Deadline::after_ms(20000)), 0);
}

// seq-spec matches answers in order: a tcp server that sends them in turn over two queues
// refuses its clients, with the reason.
TEST(SeqRefusals, SpecRefusesQueuesThatReorderAnswers) {
  TempDir dir;
  ReadyProcess server({FABKV_SERVER_BIN, "--provider", "tcp", "--listen", "127.0.0.1:0",
                       "--protocols", "seq-spec", "--data-dir", dir.path(), "--queues", "2",
                       "--cores", "-1", "--log", "warn"},
                      ReadyProcess::Stop::kSigterm);
  ClientOptions o;
  o.server = server.address();
  o.provider = "tcp";
  o.protocol = "seq-spec";
  try {
    Client::connect(o);
    ADD_FAILURE() << "connected";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("--queues 1"), std::string::npos) << e.what();
  }
}

TEST(SeqRefusals, CliRefusesNextOnAKeyValueProtocol) {
  perf::ChildProcess cli({"/bin/sh", "-c",
                          std::string(FABKV_CLI_BIN) + " --protocol herd next 2>&1"});
  std::string line;
  ASSERT_TRUE(cli.read_line(&line, Deadline::after_ms(20000)));
  EXPECT_EQ(cli.wait(Deadline::after_ms(20000)), 2);
  EXPECT_NE(line.find("`next` needs a sequencer: --protocol seq-rpc|seq-spec|seq-atomic"),
            std::string::npos)
      << line;
}

TEST(SeqRefusals, HerdRefusesNext) {
  ReadyProcess server({FABKV_SERVER_BIN, "--provider", "shm", "--listen", "127.0.0.1:0",
                       "--protocols", "herd", "--cores", "-1", "--log", "warn"},
                      ReadyProcess::Stop::kSigterm);
  ClientOptions o;
  o.server = server.address();
  o.provider = "shm";
  o.protocol = "herd";
  auto c = Client::connect(o);
  uint64_t v = 0;
  const auto before = c->counters();  // the receive buffers posted at connect
  EXPECT_EQ(c->next(&v), Status::kError);
  EXPECT_EQ((c->counters() - before).total_posted(), 0u);
}

}  // namespace
}  // namespace fabkv
