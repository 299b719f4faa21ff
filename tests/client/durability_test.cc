// Acknowledged means kept (docs/durability.md): a fabkv-server with --oplog-sync always (and,
// for a process crash, everysec: the default) is SIGKILLed at a random instant while a separate
// client process PUTs fresh keys as fast as the server answers; the server restarts on its log and
// every PUT that was acknowledged must read back with its value and version (memcached: value and
// flags). Once for every protocol that writes through the worker, each over its engine; then, once
// per engine, a kill in the middle of a log rewrite and a torn last record.
//
// FABKV_DURABILITY_RUNS (default 2) sets the kills per case; docs/durability.md reports a
// longer loop.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/deadline.h"
#include "perf/process.h"
#include "values.h"

#ifndef FABKV_SERVER_BIN
#error "needs FABKV_SERVER_BIN"
#endif
#ifndef FABKV_WRITER_BIN
#error "needs FABKV_WRITER_BIN"
#endif
#include "../memcached/mc_support.h"

namespace fabkv::testing {
namespace {

namespace fs = std::filesystem;
constexpr size_t kValueBytes = 100;

struct Case {
  const char* name;
  std::string protocols;           // what the server serves
  std::vector<std::string> extra;  // more server flags
  std::string writer;              // the writer's protocol ("memcached": the front end)
  std::string sync = "always";     // --oplog-sync
};

std::vector<Case> cases() {
  return {
      {"cache_herd", "herd", {"--engine", "cache"}, "herd"},
      {"store_server_reply", "server-reply", {"--engine", "store"}, "server-reply"},
      {"store_rfrpc", "rfrpc", {"--engine", "store"}, "rfrpc"},
      {"pilaf", "pilaf,pilaf-vo", {}, "pilaf"},
      {"pilaf_vo", "pilaf,pilaf-vo", {}, "pilaf-vo"},
      {"farm", "farm", {}, "farm"},
      {"farm_var", "farm-var", {}, "farm-var"},
      {"hydradb", "hydradb", {}, "hydradb"},
      {"store_memcached", "herd", {"--engine", "store", "--memcached", "127.0.0.1:0"}, "memcached"},
      // everysec keeps every acknowledged write through a crash of the process too: an answer
      // waits until its record is written to the file (the page cache), not for the sync.
      // Without that, a SIGKILL lost the writes acknowledged while the log's writer thread was
      // behind (tests/cluster/netns_cluster_test.py lost 160 in one kill, during an fdatasync).
      {"cache_herd_everysec", "herd", {"--engine", "cache"}, "herd", "everysec"},
      {"pilaf_everysec", "pilaf,pilaf-vo", {}, "pilaf", "everysec"},
      {"store_memcached_everysec",
       "herd",
       {"--engine", "store", "--memcached", "127.0.0.1:0"},
       "memcached",
       "everysec"},
  };
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// One case per engine that takes --oplog, for what depends on the log and not the protocol.
std::vector<Case> engine_cases() {
  std::vector<Case> out;
  for (const Case& c : cases())
    if (c.sync == "always" && (c.writer == "herd" || c.writer == "pilaf" || c.writer == "farm" ||
                               c.writer == "hydradb" || c.writer == "memcached"))
      out.push_back(c);
  return out;
}

int runs() {
  const char* e = std::getenv("FABKV_DURABILITY_RUNS");
  return e != nullptr ? std::max(1, std::atoi(e)) : 2;
}

// A fabkv-server process: READY (and MEMCACHED) lines read, SIGKILL or SIGTERM to end it.
class Server {
 public:
  Server(const Case& c, const std::string& log, std::vector<std::string> more = {},
         std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {FABKV_SERVER_BIN, "--provider", "shm", "--listen", "127.0.0.1:0",
                             "--protocols", c.protocols, "--cores", "-1", "--memory", "64M",
                             "--log", "warn", "--oplog", log, "--oplog-sync", c.sync});
    argv.insert(argv.end(), c.extra.begin(), c.extra.end());
    argv.insert(argv.end(), more.begin(), more.end());
    proc_ = std::make_unique<perf::ChildProcess>(argv);
    std::string line;
    if (!proc_->read_line(&line, Deadline::after_ms(30000)) || line.rfind("READY ", 0) != 0)
      throw std::runtime_error("fabkv-server did not start: " + line);
    address_ = line.substr(6);
    if (c.writer == "memcached") {
      if (!proc_->read_line(&line, Deadline::after_ms(30000)) || line.rfind("MEMCACHED ", 0) != 0)
        throw std::runtime_error("no MEMCACHED line: " + line);
      memcached_ = line.substr(10);
    }
  }
  ~Server() {
    if (proc_) kill();
  }
  const std::string& address() const { return address_; }
  const std::string& memcached() const { return memcached_; }
  uint16_t memcached_port() const {
    return static_cast<uint16_t>(std::stoi(memcached_.substr(memcached_.rfind(':') + 1)));
  }
  void kill() {
    const pid_t pid = proc_->pid();
    proc_->kill(SIGKILL);
    proc_->wait(Deadline::after_ms(5000));
    proc_.reset();
    perf::remove_shm_leftovers(pid);
  }
  // SIGTERM; the exit status (0 for a clean stop).
  int stop() {
    proc_->kill(SIGTERM);
    int rc = proc_->wait(Deadline::after_ms(20000));
    if (rc < 0) kill();
    proc_.reset();
    return rc;
  }

 private:
  std::unique_ptr<perf::ChildProcess> proc_;
  std::string address_, memcached_;
};

struct Acked {
  uint64_t n = 0, version = 0;
  uint32_t flags = 0;
};

// The writer process and what it wrote down.
class Writer {
 public:
  Writer(const Case& c, const Server& s, uint64_t seed) {
    const std::string target = c.writer == "memcached" ? s.memcached() : s.address();
    proc_ = std::make_unique<perf::ChildProcess>(
        std::vector<std::string>{FABKV_WRITER_BIN, target, "shm", c.writer, std::to_string(seed),
                                 std::to_string(kValueBytes)});
    std::string line;
    if (!proc_->read_line(&line, Deadline::after_ms(20000)) || line != "READY")
      throw std::runtime_error("writer did not start: " + line);
  }
  // Reads what the writer prints until `deadline` (or its end); false at its end.
  bool read_until(Deadline deadline) {
    std::string line;
    while (proc_->read_line(&line, deadline)) {
      std::istringstream in(line);
      std::string word, key;
      in >> word;
      if (word == "STARTED") {
        started_ = true;
      } else if (word == "ACK") {
        Acked a;
        in >> key >> a.n >> a.version >> a.flags;
        acked_[key] = a;
      } else if (word == "GONE") {
        in >> unanswered_;
        std::getline(in, how_);
        gone_ = true;
        return false;
      }
    }
    return !gone_ && !deadline.expired();
  }
  // Everything the writer prints before it notices the server is gone (bounded).
  void drain() {
    const Deadline d = Deadline::after_ms(60000);
    while (!gone_ && !d.expired() && read_until(d)) {
    }
    proc_->wait(Deadline::after_ms(5000));
  }
  const std::map<std::string, Acked>& acked() const { return acked_; }
  bool gone() const { return gone_; }
  bool started() const { return started_; }
  const std::string& how() const { return how_; }  // how the writer saw the server go
  size_t unanswered() const { return unanswered_; }

 private:
  std::unique_ptr<perf::ChildProcess> proc_;
  std::map<std::string, Acked> acked_;
  bool gone_ = false, started_ = false;
  size_t unanswered_ = 0;
  std::string how_;
};

// Every acknowledged write, read back from the restarted server; returns those missing or
// wrong (with why).
std::vector<std::string> check_all(const Case& c, const Server& s,
                                   const std::map<std::string, Acked>& acked) {
  std::vector<std::string> bad;
  if (c.writer == "memcached") {
    McConn conn(s.memcached_port());
    for (const auto& [key, a] : acked) {
      conn.send("get " + key + "\r\n");
      const std::string head = conn.line();
      const std::string want = value_for(key, a.n, kValueBytes);
      const std::string expect_head = "VALUE " + key + " " + std::to_string(a.flags) + " " +
                                      std::to_string(want.size());
      if (head != expect_head) {
        bad.push_back(key + ": " + head);
        continue;
      }
      const std::string data = conn.bytes(want.size() + 2);
      conn.line();  // END
      if (data.substr(0, want.size()) != want) bad.push_back(key + ": wrong value");
    }
    return bad;
  }
  ClientOptions o;
  o.server = s.address();
  o.provider = "shm";
  o.protocol = c.writer;
  o.timeout_ms = 10000;
  std::unique_ptr<Client> client = Client::connect(o);
  for (const auto& [key, a] : acked) {
    std::string value;
    uint64_t version = 0;
    const Status st = client->get(key, &value, &version);
    if (st != Status::kOk) bad.push_back(key + ": " + to_string(st));
    else if (value != value_for(key, a.n, kValueBytes)) bad.push_back(key + ": wrong value");
    else if (version != a.version)
      bad.push_back(key + ": version " + std::to_string(version) + ", acknowledged " +
                    std::to_string(a.version));
  }
  return bad;
}

class Durability : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/fabkv-durability-" + std::to_string(::getpid()) + "-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = (dir_ / "log").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Files of the log whose names end in `suffix`.
  std::vector<std::string> files_ending(const std::string& suffix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.size() >= suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(e.path().string());
    }
    return out;
  }

  fs::path dir_;
  std::string log_;
};

// The server dies at a random instant with PUTs in flight; after a restart on its log, every
// acknowledged PUT is there. Several kills on the same log: each restart replays what every
// earlier incarnation acknowledged.
TEST_P(Durability, EveryAcknowledgedPutSurvivesASigkill) {
  const Case& c = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::map<std::string, Acked> all;
  size_t unanswered = 0;
  std::string hows;  // what each writer saw of the kill
  // A kill that lands while the writer, its answers all in, waits for a core finds nothing in
  // flight (seen on a loaded host): more runs, until one kill did, at most 8 more.
  for (int run = 0; run < runs() || (unanswered == 0 && run < runs() + 8); ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    auto server = std::make_unique<Server>(c, log_);
    if (!all.empty()) {
      // What every earlier incarnation acknowledged is still there after this restart.
      const std::vector<std::string> bad = check_all(c, *server, all);
      ASSERT_TRUE(bad.empty()) << bad.size() << " of " << all.size()
                               << " acknowledged writes lost, first: " << bad.front();
    }
    Writer writer(c, *server, rng());
    // Some acknowledged writes first (a sanitizer build is slow to start), then the kill at a
    // random instant.
    const Deadline started = Deadline::after_ms(30000);
    while (!writer.started() && !started.expired() && !writer.gone())
      writer.read_until(Deadline::after_ms(10));
    ASSERT_TRUE(writer.started()) << "no acknowledged write in 30 s";
    writer.read_until(Deadline::after_ms(static_cast<int>(rng() % 1000)));
    ASSERT_FALSE(writer.gone()) << "the writer stopped before the kill";
    server->kill();
    writer.drain();
    // The premise: the kill found writes in flight, and many had been acknowledged.
    ASSERT_TRUE(writer.gone()) << "the writer never noticed the server's death";
    EXPECT_GE(writer.acked().size(), 10u);
    unanswered += writer.unanswered();
    hows += " [" + std::to_string(writer.unanswered()) + writer.how() + "]";
    all.insert(writer.acked().begin(), writer.acked().end());
  }
  EXPECT_GT(unanswered, 0u) << "no kill landed with a write in flight:" << hows;
  Server last(c, log_);
  const std::vector<std::string> bad = check_all(c, last, all);
  EXPECT_TRUE(bad.empty()) << bad.size() << " of " << all.size()
                           << " acknowledged writes lost, first: " << bad.front();
  EXPECT_EQ(last.stop(), 0);
}

// A kill while the log is being rewritten: the rewriter is held right before it renames its
// new base into place (--test-rewrite-pause-ms), the server dies with the temporary file on
// disk, and the restart replays the old files.
class DurabilityPerEngine : public Durability {};

TEST_P(DurabilityPerEngine, AKillDuringARewriteLosesNothing) {
  const Case& c = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<std::string> small = {"--oplog-rewrite-min-size", "16K",
                                          "--oplog-rewrite-percentage", "10"};
  std::vector<std::string> paused = small;
  paused.insert(paused.end(), {"--test-rewrite-pause-ms", "60000"});
  std::map<std::string, Acked> all;
  {
    Server server(c, log_, paused);
    Writer writer(c, server, rng());
    const Deadline d = Deadline::after_ms(20000);
    while (files_ending(".base.tmp").empty() && !d.expired())
      writer.read_until(Deadline::after_ms(20));
    ASSERT_FALSE(files_ending(".base.tmp").empty()) << "no rewrite started";
    writer.read_until(Deadline::after_ms(static_cast<int>(rng() % 200)));
    server.kill();
    // The premise: the server died in the middle of the rewrite.
    ASSERT_FALSE(files_ending(".base.tmp").empty());
    writer.drain();
    all = writer.acked();
  }
  {
    // The restart removes the unfinished base and replays the segments; then a rewrite that
    // runs to its end, another kill, and the replay from the new base.
    Server server(c, log_, small);
    EXPECT_TRUE(files_ending(".base.tmp").empty());
    std::vector<std::string> bad = check_all(c, server, all);
    ASSERT_TRUE(bad.empty()) << bad.size() << " lost, first: " << bad.front();
    Writer writer(c, server, rng());
    const Deadline d = Deadline::after_ms(20000);
    while (files_ending(".base").empty() && !d.expired()) writer.read_until(Deadline::after_ms(20));
    ASSERT_FALSE(files_ending(".base").empty()) << "no rewrite finished";
    writer.read_until(Deadline::after_ms(100));
    server.kill();
    writer.drain();
    all.insert(writer.acked().begin(), writer.acked().end());
  }
  Server last(c, log_);
  std::vector<std::string> bad = check_all(c, last, all);
  EXPECT_TRUE(bad.empty()) << bad.size() << " lost, first: " << bad.front();
  EXPECT_EQ(last.stop(), 0);
}

// A crash in the middle of a write leaves a torn record at the end of the last segment: the
// restart cuts it off and keeps everything before it.
TEST_P(DurabilityPerEngine, ATornLastRecordIsCutAndTheRestKept) {
  const Case& c = GetParam();
  std::map<std::string, Acked> acked;
  {
    Server server(c, log_);
    Writer writer(c, server, 7);
    writer.read_until(Deadline::after_ms(300));
    server.kill();
    writer.drain();
    acked = writer.acked();
  }
  const std::vector<std::string> segs = files_ending(".incr");
  ASSERT_EQ(segs.size(), 1u);
  const uint64_t size = fs::file_size(segs[0]);
  {
    // Half a record: a plausible header (format 2, PUT, 5-byte key, 10-byte value) and no more.
    std::ofstream f(segs[0], std::ios::binary | std::ios::app);
    const char half[] = {'\xF2', 1, 5, 0, 10, 0, 0, 0, 1, 2, 3};
    f.write(half, sizeof half);
  }
  Server server(c, log_);
  EXPECT_EQ(fs::file_size(segs[0]), size);  // cut back to the last whole record
  std::vector<std::string> bad = check_all(c, server, acked);
  EXPECT_TRUE(bad.empty()) << bad.size() << " lost, first: " << bad.front();
  EXPECT_EQ(server.stop(), 0);
}

// Deletes and CAS versions across a rewrite and a crash, through the engine's own protocol
// (the memcached front end's paths: tests/memcached/durability_test.cc): what was deleted stays
// deleted, the survivors keep their versions, and a version dropped with a deleted item is
// never handed out again (the rewrite's VERSION record).
TEST_P(DurabilityPerEngine, DeletesAndVersionsSurviveARewriteAndACrash) {
  const Case& c = GetParam();
  if (c.writer == "memcached") GTEST_SKIP() << "tests/memcached/durability_test.cc";
  const std::vector<std::string> small = {"--oplog-rewrite-min-size", "16K",
                                          "--oplog-rewrite-percentage", "10"};
  auto connect = [&](const Server& s) {
    ClientOptions o;
    o.server = s.address();
    o.provider = "shm";
    o.protocol = c.writer;
    o.timeout_ms = 10000;
    return Client::connect(o);
  };
  std::map<std::string, uint64_t> kept;
  uint64_t highest = 0;
  {
    Server server(c, log_, small);
    auto client = connect(server);
    const std::string v(200, 'v');
    for (int i = 0; i < 40; i++) {
      uint64_t version = 0;
      const std::string k = "key-" + std::to_string(i);
      ASSERT_EQ(client->put(k, v, 0, 0, &version), Status::kOk);
      kept[k] = highest = version;
    }
    for (int i = 30; i < 40; i++) {  // the newest go, with the highest versions
      ASSERT_EQ(client->del("key-" + std::to_string(i)), Status::kOk);
      kept.erase("key-" + std::to_string(i));
    }
    // Grow the log with what hands out no version (a DELETE that finds nothing is logged too),
    // until a rewrite ran.
    const Deadline d = Deadline::after_ms(20000);
    for (int i = 0; files_ending(".base").empty() && !d.expired(); i++)
      ASSERT_EQ(client->del("absent-" + std::to_string(i)), Status::kNotFound);
    ASSERT_FALSE(files_ending(".base").empty()) << "no rewrite";
    client.reset();
    server.kill();
  }
  Server server(c, log_);
  auto client = connect(server);
  for (int i = 0; i < 40; i++) {
    const std::string k = "key-" + std::to_string(i);
    std::string value;
    uint64_t version = 0;
    const Status st = client->get(k, &value, &version);
    if (kept.contains(k)) {
      EXPECT_EQ(st, Status::kOk) << k;
      EXPECT_EQ(version, kept[k]) << k;
    } else {
      EXPECT_EQ(st, Status::kNotFound) << k;
    }
  }
  uint64_t fresh = 0;
  ASSERT_EQ(client->put("fresh", "x", 0, 0, &fresh), Status::kOk);
  EXPECT_GT(fresh, highest);
  client.reset();
  EXPECT_EQ(server.stop(), 0);
}

// A flipped byte in the middle of the last segment (valid records after it) is corruption,
// not a torn tail: the server refuses to start and cuts nothing.
TEST_P(DurabilityPerEngine, ACorruptRecordInTheMiddleIsRefusedNotCut) {
  const Case& c = GetParam();
  {
    Server server(c, log_);
    Writer writer(c, server, 11);
    writer.read_until(Deadline::after_ms(300));
    server.kill();
    writer.drain();
    ASSERT_GE(writer.acked().size(), 10u);
  }
  const std::vector<std::string> segs = files_ending(".incr");
  ASSERT_EQ(segs.size(), 1u);
  const uint64_t size = fs::file_size(segs[0]);
  {
    std::fstream f(segs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x10);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&b, 1);
  }
  EXPECT_THROW(Server(c, log_), std::runtime_error);
  EXPECT_EQ(fs::file_size(segs[0]), size);
}

INSTANTIATE_TEST_SUITE_P(Protocols, Durability, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(Engines, DurabilityPerEngine, ::testing::ValuesIn(engine_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fabkv::testing
