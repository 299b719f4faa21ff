// The op log behind the memcached front end (docs/durability.md) on the paths other than PUTs
// of fresh keys (tests/client/durability_test.cc kills servers under those): expiry, deletes of
// evicted keys, flush_all now and later, CAS versions across a rewrite, a corrupt record in the
// middle of the log. Each test crashes (SIGKILL) or stops a real fabkv-server and starts it again
// on the same log, then reads what it says through the text protocol.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "mc_support.h"

namespace fabkv::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class McDurability : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/fabkv-mc-durability-" + std::to_string(::getpid()) + "-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = (dir_ / "log").string();
  }
  void TearDown() override {
    if (mounted_) ::umount2((dir_ / "disk").c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // The log on a 1 MiB tmpfs of its own (a disk to fill); false where none can be mounted.
  bool mount_small_disk() {
    const fs::path disk = dir_ / "disk";
    fs::create_directory(disk);
    if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=1m") != 0) return false;
    mounted_ = true;
    log_ = (disk / "log").string();
    return true;
  }
  // Fills what is left of that disk; the file to remove for room again.
  fs::path fill_disk() const {
    const fs::path ballast = dir_ / "disk" / "ballast";
    std::ofstream f(ballast, std::ios::binary);
    const std::string chunk(4096, 'b');
    while (f.write(chunk.data(), chunk.size())) f.flush();
    return ballast;
  }
  // A server on the test's log, with `flags` after the log's.
  std::unique_ptr<McServer> start(std::vector<std::string> flags) {
    std::vector<std::string> argv = {"--oplog", log_, "--oplog-sync", "always"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<McServer>(argv);
  }
  bool has_base() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().string().ends_with(".base")) return true;
    return false;
  }
  static std::string set(McConn& c, const std::string& k, const std::string& v, int ttl = 0) {
    return c.cmd("set " + k + " 0 " + std::to_string(ttl) + " " + std::to_string(v.size()) +
                 "\r\n" + v + "\r\n");
  }
  // The value of k, or "<miss>".
  static std::string get(McConn& c, const std::string& k) {
    const std::string head = c.cmd("get " + k + "\r\n");
    if (head == "END") return "<miss>";
    const size_t n = std::stoul(head.substr(head.rfind(' ') + 1));
    std::string v = c.bytes(n + 2).substr(0, n);
    EXPECT_EQ(c.line(), "END");
    return v;
  }
  static uint64_t cas_of(McConn& c, const std::string& k) {
    const std::string head = c.cmd("gets " + k + "\r\n");  // VALUE <key> <flags> <bytes> <cas>
    std::istringstream in(head);
    std::string word, key;
    uint64_t flags = 0, n = 0, cas = 0;
    in >> word >> key >> flags >> n >> cas;
    EXPECT_EQ(word, "VALUE") << head;
    c.bytes(n + 2);
    EXPECT_EQ(c.line(), "END");
    return cas;
  }

  fs::path dir_;
  std::string log_;
  bool mounted_ = false;
};

// Replay rebuilds what the running server had: items that expired are not stored again.
// Stored, they took the memory (--engine store does not evict) that the key's last PUT needed,
// the engine refused that PUT, and the key came back with its older value.
TEST_F(McDurability, ReplayNeverBringsBackAnOlderValue) {
  const std::vector<std::string> flags = {
      "--engine", "store", "--memory", "4M", "--workers", "1", "--memcached-item-size", "64K"};
  {
    auto server = start(flags);
    McConn c(server->port());
    ASSERT_EQ(set(c, "K", "v1"), "STORED");
    // Fill the memory with items that live a second (the premise: it is full).
    const std::string filler(16 << 10, 'f');
    int n = 0;
    std::string last;
    for (; n < 2000; n++) {
      last = set(c, "f" + std::to_string(n), filler, 1);
      if (last != "STORED") break;
    }
    ASSERT_EQ(last, "SERVER_ERROR out of memory storing object");
    ASSERT_GT(n, 20);
    std::this_thread::sleep_for(2100ms);
    for (int i = 0; i < n; i++) ASSERT_EQ(get(c, "f" + std::to_string(i)), "<miss>");
    ASSERT_EQ(set(c, "K", std::string(16 << 10, '2')), "STORED");  // the expired items' memory
    server->kill();
  }
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "K"), std::string(16 << 10, '2'));
}

// The whole history replayed in order does not always fit where the running server's data did:
// the store engine's heap lays items out in the order they come, and replay leaves out the
// expired item whose hole the last PUT used. The restart then loads only the live items (as a
// rewrite would keep them) instead of refusing to start.
TEST_F(McDurability, AnOrdinaryCrashAlwaysRestartsWithTheSameMemory) {
  const std::vector<std::string> flags = {
      "--engine", "store", "--memory", "24M", "--workers", "1", "--memcached-item-size", "2M"};
  const std::string big(900000, 'b');
  {
    auto server = start(flags);
    McConn c(server->port());
    ASSERT_EQ(set(c, "E", big, 2), "STORED");
    ASSERT_EQ(set(c, "A", big), "STORED");
    int n = 0;
    while (n < 100 && set(c, "F" + std::to_string(n), big) == "STORED") n++;
    int m = 0;
    while (m < 100000 && set(c, "s" + std::to_string(m), std::string(1000, 's')) == "STORED") m++;
    ASSERT_GT(n, 10);
    std::this_thread::sleep_for(2100ms);
    ASSERT_EQ(get(c, "E"), "<miss>");
    ASSERT_EQ(c.cmd("delete A\r\n"), "DELETED");
    ASSERT_EQ(set(c, "D", std::string(1750000, 'd')), "STORED");
    server->kill();
  }
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "D"), std::string(1750000, 'd'));
  EXPECT_EQ(get(c, "F0"), big);
  EXPECT_EQ(get(c, "A"), "<miss>");
}

// flush_all's OK comes once its CLEAR is in the log, like every write's answer: killed right
// after the OK (the log's writer is slow here), the restarted server still has nothing. The OK
// used to leave before the record was written, and the keys came back. Text, noreply and binary.
TEST_F(McDurability, FlushAllIsAnsweredOnlyOnceItsClearIsLogged) {
  for (const char* workers : {"1", "2"}) {
    for (const std::string flush : {"flush_all\r\n", "flush_all noreply\r\nmn\r\n", "binary"}) {
      SCOPED_TRACE(std::string("workers ") + workers + ", " + flush);
      const std::vector<std::string> flags = {"--engine", "store", "--workers", workers};
      {
        std::vector<std::string> slow = flags;
        slow.insert(slow.end(), {"--test-oplog-write-delay-ms", "300"});
        auto server = start(slow);
        McConn c(server->port());
        std::string sets;  // one batch of the slow log, not eight
        for (int i = 0; i < 8; i++) sets += "set k" + std::to_string(i) + " 0 0 1\r\nv\r\n";
        ASSERT_TRUE(c.send(sets));
        for (int i = 0; i < 8; i++) ASSERT_EQ(c.line(), "STORED");
        if (flush == "binary") {
          // Header only: magic 0x80, opcode 0x08 (flush), no extras, key or body.
          std::string req(24, '\0');
          req[0] = static_cast<char>(0x80);
          req[1] = 0x08;
          ASSERT_TRUE(c.send(req));
          const std::string res = c.bytes(24);
          ASSERT_EQ(res.size(), 24u);
          ASSERT_EQ(res[0], static_cast<char>(0x81));
          ASSERT_EQ(res[7], 0);  // status: success
        } else {
          ASSERT_EQ(c.cmd(flush), flush.starts_with("flush_all noreply") ? "MN" : "OK");
        }
        server->kill();
      }
      auto server = start(flags);
      McConn c(server->port());
      for (int i = 0; i < 8; i++) EXPECT_EQ(get(c, "k" + std::to_string(i)), "<miss>") << i;
      server->stop();
      fs::remove_all(dir_);
      fs::create_directory(dir_);
    }
  }
}

// A delayed flush_all is logged with its time: a restart before then keeps it armed, and one
// after it carries it out (everything written before the time goes, as memcached does).
TEST_F(McDurability, ADelayedFlushAllSurvivesARestart) {
  const std::vector<std::string> flags = {"--engine", "store", "--workers", "2"};
  {
    auto server = start(flags);
    McConn c(server->port());
    for (int i = 0; i < 8; i++) ASSERT_EQ(set(c, "a" + std::to_string(i), "v"), "STORED");
    const auto t = std::time(nullptr);
    ASSERT_EQ(c.cmd("flush_all 3\r\n"), "OK");
    server->kill();
    server = start(flags);
    McConn again(server->port());
    ASSERT_LT(std::time(nullptr), t + 2) << "the restart took too long for the premise";
    EXPECT_EQ(get(again, "a0"), "v");  // not yet
    ASSERT_EQ(set(again, "b", "written before the time"), "STORED");
    while (std::time(nullptr) <= t + 4) std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 8; i++) EXPECT_EQ(get(again, "a" + std::to_string(i)), "<miss>") << i;
    EXPECT_EQ(get(again, "b"), "<miss>");
    ASSERT_EQ(set(again, "c", "after"), "STORED");
    const auto t2 = std::time(nullptr);
    ASSERT_EQ(again.cmd("flush_all 2\r\n"), "OK");
    ASSERT_EQ(set(again, "d", "before the second time"), "STORED");
    server->kill();
    while (std::time(nullptr) <= t2 + 3) std::this_thread::sleep_for(100ms);
  }
  // Down while its time came: the restart carries it out.
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "c"), "<miss>");
  EXPECT_EQ(get(c, "d"), "<miss>");
  ASSERT_EQ(set(c, "e", "new"), "STORED");
  server->kill();
  server = start(flags);
  McConn again(server->port());
  EXPECT_EQ(get(again, "e"), "new");  // carried out once, not at every start
}

// The cache engine evicts: a DELETE of a key it evicted finds nothing, and was not logged; a
// rewrite then kept the key's last PUT (its overwritten neighbours shrank to one record each),
// and the restart brought the deleted key back.
TEST_F(McDurability, ADeleteOfAnEvictedKeyStaysDeleted) {
  const std::vector<std::string> flags = {"--engine",
                                          "cache",
                                          "--memory",
                                          "8M",
                                          "--workers",
                                          "1",
                                          "--oplog-rewrite-min-size",
                                          "256K",
                                          "--oplog-rewrite-percentage",
                                          "10"};
  {
    auto server = start(flags);
    McConn c(server->port());
    ASSERT_EQ(set(c, "K", "old"), "STORED");
    const std::string filler(32 << 10, 'f');
    int n = 0;
    for (; n < 5000 && get(c, "K") != "<miss>"; n++)
      ASSERT_EQ(set(c, "f" + std::to_string(n % 4), filler), "STORED");
    ASSERT_EQ(get(c, "K"), "<miss>") << "never evicted";
    ASSERT_EQ(c.cmd("delete K\r\n"), "NOT_FOUND");
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!has_base() && std::chrono::steady_clock::now() < until)
      ASSERT_EQ(set(c, "f" + std::to_string(n++ % 4), filler), "STORED");
    ASSERT_TRUE(has_base()) << "no rewrite";
    server->kill();
  }
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "K"), "<miss>");
}

// A rewrite leaves out deleted items and the versions they had; the base's VERSION record
// keeps the counter past them, so a CAS version is never handed out twice.
TEST_F(McDurability, CasVersionsNeverRepeatAfterARewrite) {
  const std::vector<std::string> flags = {"--engine",
                                          "store",
                                          "--workers",
                                          "1",
                                          "--oplog-rewrite-min-size",
                                          "16K",
                                          "--oplog-rewrite-percentage",
                                          "10"};
  uint64_t highest = 0;
  {
    auto server = start(flags);
    McConn c(server->port());
    for (int i = 0; i < 8; i++) ASSERT_EQ(set(c, "f", std::string(1000, 'f')), "STORED");
    ASSERT_EQ(set(c, "x", "highest"), "STORED");
    highest = cas_of(c, "x");
    ASSERT_EQ(c.cmd("delete x\r\n"), "DELETED");
    ASSERT_EQ(c.cmd("delete f\r\n"), "DELETED");
    // Grow the log with what hands out no version, until a rewrite ran.
    const auto until = std::chrono::steady_clock::now() + 20s;
    for (int i = 0; !has_base() && std::chrono::steady_clock::now() < until; i++)
      ASSERT_EQ(c.cmd("delete nothing-" + std::to_string(i) + "\r\n"), "NOT_FOUND");
    ASSERT_TRUE(has_base()) << "no rewrite";
    server->kill();
  }
  auto server = start(flags);
  McConn c(server->port());
  ASSERT_EQ(set(c, "y", "after"), "STORED");
  EXPECT_GT(cas_of(c, "y"), highest);
}

// A bad record with good ones after it is corruption, not a crash's torn tail: the server
// refuses to start, naming the file and the byte and saying how to keep what is before it
// (it used to cut the file there, deleting every later record).
TEST_F(McDurability, ACorruptRecordInTheMiddleRefusesToStartAndSaysHow) {
  const std::vector<std::string> flags = {"--engine", "store", "--workers", "1"};
  {
    auto server = start(flags);
    McConn c(server->port());
    for (int i = 10; i < 100; i++)
      ASSERT_EQ(set(c, "k" + std::to_string(i), "value-" + std::to_string(i)), "STORED");
    EXPECT_EQ(server->stop(), 0);
  }
  const std::string seg = log_ + ".0.1.incr";
  // Records of equal size: header 24, key 3, value 8, checksum 8.
  const uint64_t record = 24 + 3 + 8 + 8;
  ASSERT_EQ(fs::file_size(seg), 90 * record);
  const uint64_t at = 10 * record;
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at + 30));
    char b = 0;
    f.read(&b, 1);
    b ^= 0x01;
    f.seekp(static_cast<std::streamoff>(at + 30));
    f.write(&b, 1);
  }
  try {
    start(flags);
    FAIL() << "started on a log with a corrupt record in the middle";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(seg), std::string::npos) << what;
    EXPECT_NE(what.find("byte " + std::to_string(at)), std::string::npos) << what;
    EXPECT_NE(what.find("truncate -s " + std::to_string(at) + " " + seg), std::string::npos)
        << what;
  }
  EXPECT_EQ(fs::file_size(seg), 90 * record);  // nothing cut
  fs::resize_file(seg, at);                    // what the message says
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "k19"), "value-19");
  EXPECT_EQ(get(c, "k20"), "<miss>");
}

// A full disk (a 1 MiB tmpfs): the write whose record cannot be written waits (it is not kept
// yet), later writes are refused with SERVER_ERROR at once, reads of what is written go on,
// and once there is room again the waiting write is answered, writes are accepted, and all of
// it survives a crash. It used to hang every client of the worker, reads included.
TEST_F(McDurability, AFullDiskRefusesWritesServesReadsAndRecovers) {
  if (!mount_small_disk()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::vector<std::string> flags = {"--engine", "store", "--workers", "1"};
  auto server = start(flags);
  McConn a(server->port(), 1500);
  for (int i = 0; i < 10; i++) ASSERT_EQ(set(a, "k" + std::to_string(i), "kept"), "STORED");
  ASSERT_EQ(set(a, "n", "1"), "STORED");
  const fs::path ballast = fill_disk();  // what is left of the disk
  // This write's record does not fit: it waits for the disk, unanswered.
  ASSERT_TRUE(a.send("set big 0 0 20000\r\n" + std::string(20000, 'x') + "\r\n"));
  std::optional<McConn> b;
  std::string refused, refused_key;
  for (int attempt = 0; attempt < 10 && refused.empty(); attempt++) {
    std::this_thread::sleep_for(100ms);  // the log's writer meets the full disk
    b.emplace(server->port(), 1000);
    const std::string key = "new" + std::to_string(attempt);
    const std::string answer = set(*b, key, "v");  // a timeout: it came first, and waits too
    if (answer.starts_with("SERVER_ERROR")) refused = answer, refused_key = key;
  }
  EXPECT_EQ(refused, "SERVER_ERROR the op log cannot be written (disk full?): writes refused");
  EXPECT_EQ(b->cmd("delete k0\r\n"), refused);
  EXPECT_EQ(b->cmd("incr n 1\r\n"), refused);
  EXPECT_EQ(b->cmd("flush_all\r\n"), refused);
  // A new expiry is a write too (logged): refused, not answered as a miss.
  EXPECT_EQ(b->cmd("touch k1 100\r\n"), refused);
  EXPECT_EQ(b->cmd("gat 100 k1\r\n"), refused);
  EXPECT_EQ(b->line(), "END");
  // Reads of what is written are answered; k0 is still there (its DELETE was refused). A read
  // of the key whose write waits is refused too: its answer would wait as long as the disk
  // stays full (and with it, a copy of the value per read).
  for (int i = 0; i < 10; i++) EXPECT_EQ(get(*b, "k" + std::to_string(i)), "kept") << i;
  EXPECT_EQ(b->cmd("get big\r\n"), refused);
  EXPECT_EQ(b->line(), "END");
  EXPECT_EQ(b->cmd("set quiet 0 0 1 noreply\r\nq\r\nmn\r\n"), "MN");  // noreply: silent
  EXPECT_EQ(a.line(), "<timeout>") << "the write that could not be logged was answered";
  // Room again: the waiting write goes through and is answered; writes are accepted.
  fs::remove(ballast);
  McConn c(server->port());
  std::string stored = a.line();
  for (int i = 0; i < 10 && stored == "<timeout>"; i++) stored = a.line();
  EXPECT_EQ(stored, "STORED");
  EXPECT_EQ(set(c, "after", "v"), "STORED");
  server->kill();
  server = start(flags);
  McConn d(server->port());
  EXPECT_EQ(get(d, "big"), std::string(20000, 'x'));
  EXPECT_EQ(get(d, "after"), "v");
  EXPECT_EQ(get(d, "k0"), "kept");
  EXPECT_EQ(get(d, refused_key), "<miss>");
}

// A delayed flush_all whose time comes while the disk is full is carried out then (memcached's
// promise) and logged once there is room, before any write after it: it was dropped, and the
// next restart's replay of the delayed one emptied the writes acknowledged after its time.
TEST_F(McDurability, ADelayedFlushAllComingDueOnAFullDisk) {
  if (!mount_small_disk()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::vector<std::string> flags = {"--engine", "store", "--workers", "1"};
  auto server = start(flags);
  McConn c(server->port(), 1500);
  ASSERT_EQ(set(c, "a", "before"), "STORED");
  const auto t = std::time(nullptr);
  ASSERT_EQ(c.cmd("flush_all 2\r\n"), "OK");
  const fs::path ballast = fill_disk();
  ASSERT_TRUE(c.send("set b 0 0 20000\r\n" + std::string(20000, 'x') + "\r\n"));  // waits
  while (std::time(nullptr) <= t + 3) std::this_thread::sleep_for(100ms);
  McConn d(server->port(), 1500);
  EXPECT_EQ(d.cmd("get a\r\n").rfind("SERVER_ERROR", 0), 0u);  // the CLEAR waits for the disk
  EXPECT_EQ(d.line(), "END");
  fs::remove(ballast);
  std::string stored = c.line();
  for (int i = 0; i < 10 && stored == "<timeout>"; i++) stored = c.line();
  EXPECT_EQ(stored, "STORED");
  EXPECT_EQ(get(d, "a"), "<miss>");
  EXPECT_EQ(get(d, "b"), "<miss>");  // written before the flush's time
  ASSERT_EQ(set(d, "c", "after"), "STORED");
  server->kill();
  server = start(flags);
  McConn e(server->port());
  EXPECT_EQ(get(e, "c"), "after");
  EXPECT_EQ(get(e, "a"), "<miss>");
}

// A delayed flush_all is the worker's, not the memcached front end's: restarted without
// --memcached, the server still carries it out at its time, and the writes after it survive
// the next restart (a pending one used to wait for the front end, and the next restart after
// its time emptied them).
TEST_F(McDurability, ADelayedFlushAllIsCarriedOutWithoutTheFrontEnd) {
  const std::vector<std::string> flags = {"--engine", "store", "--workers", "1"};
  std::time_t t = 0;
  {
    auto server = start(flags);
    McConn c(server->port());
    ASSERT_EQ(set(c, "a", "before"), "STORED");
    t = std::time(nullptr);
    ASSERT_EQ(c.cmd("flush_all 2\r\n"), "OK");
    server->kill();
  }
  {
    perf::ChildProcess fabric({FABKV_SERVER_BIN, "--provider", "shm", "--listen", "127.0.0.1:0",
                               "--cores", "-1", "--log", "warn", "--engine", "store", "--workers",
                               "1", "--oplog", log_, "--oplog-sync", "always"});
    std::string line;
    ASSERT_TRUE(fabric.read_line(&line, Deadline::after_ms(20000)));
    ASSERT_EQ(line.rfind("READY ", 0), 0u) << line;
    ClientOptions o;
    o.server = line.substr(6);
    o.provider = "shm";
    auto client = Client::connect(o);
    while (std::time(nullptr) <= t + 3) std::this_thread::sleep_for(100ms);
    std::string v;
    EXPECT_EQ(client->get("a", &v), Status::kNotFound);
    ASSERT_EQ(client->put("k", "after"), Status::kOk);
    client.reset();
    fabric.kill(SIGKILL);
    fabric.wait(Deadline::after_ms(5000));
    perf::remove_shm_leftovers(fabric.pid());
  }
  auto server = start(flags);
  McConn c(server->port());
  EXPECT_EQ(get(c, "k"), "after");
}

}  // namespace
}  // namespace fabkv::testing
