// The memcached front end against a real fabkv-server process over real TCP sockets: the text,
// meta and binary commands, flags, CAS and expiry; the same data through herd; bad input and
// connection limits (docs/memcached.md).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "client/client.h"
#include "mc_support.h"

namespace fabkv {
namespace {

using testing::McConn;
using testing::McServer;

uint64_t field(const std::string& line, size_t i) {
  size_t pos = 0;
  for (size_t k = 0; k < i; ++k) pos = line.find(' ', pos) + 1;
  return std::stoull(line.substr(pos, line.find(' ', pos) - pos));
}

// Both a partition of its own and forwarded keys: 1 and 2 workers.
class TextProtocol : public ::testing::TestWithParam<int> {};

TEST_P(TextProtocol, StorageRetrievalAndArithmetic) {
  McServer server({"--workers", std::to_string(GetParam())});
  McConn c(server.port());
  EXPECT_EQ(c.cmd("set a 42 0 5\r\nhello\r\n"), "STORED");
  EXPECT_EQ(c.cmd("get a\r\n"), "VALUE a 42 5");
  EXPECT_EQ(c.line(), "hello");
  EXPECT_EQ(c.line(), "END");
  EXPECT_EQ(c.cmd("get nothing\r\n"), "END");
  EXPECT_EQ(c.cmd("add a 0 0 1\r\nx\r\n"), "NOT_STORED");
  EXPECT_EQ(c.cmd("add b 7 0 1\r\nx\r\n"), "STORED");
  EXPECT_EQ(c.cmd("replace nothing 0 0 1\r\nx\r\n"), "NOT_STORED");
  EXPECT_EQ(c.cmd("replace b 8 0 2\r\nyy\r\n"), "STORED");
  EXPECT_EQ(c.cmd("append a 0 0 3\r\n!!!\r\n"), "STORED");
  EXPECT_EQ(c.cmd("prepend a 0 0 2\r\n>>\r\n"), "STORED");
  EXPECT_EQ(c.cmd("append nothing 0 0 1\r\nx\r\n"), "NOT_STORED");
  // gets: the CAS value; cas with it stores once, then the value has moved on.
  std::string v = c.cmd("gets a\r\n");
  ASSERT_EQ(v.rfind("VALUE a 42 10 ", 0), 0u) << v;  // flags kept by append/prepend
  const uint64_t cas = field(v, 4);
  EXPECT_EQ(c.line(), ">>hello!!!");
  EXPECT_EQ(c.line(), "END");
  EXPECT_EQ(c.cmd(fmt::format("cas a 1 0 1 {}\r\nz\r\n", cas)), "STORED");
  EXPECT_EQ(c.cmd(fmt::format("cas a 1 0 1 {}\r\nw\r\n", cas)), "EXISTS");
  EXPECT_EQ(c.cmd("cas nothing 1 0 1 5\r\nw\r\n"), "NOT_FOUND");
  // Multi-get, in the order asked, misses left out.
  c.send("get a b nothing a\r\n");
  EXPECT_EQ(c.line(), "VALUE a 1 1");
  EXPECT_EQ(c.line(), "z");
  EXPECT_EQ(c.line(), "VALUE b 8 2");
  EXPECT_EQ(c.line(), "yy");
  EXPECT_EQ(c.line(), "VALUE a 1 1");
  EXPECT_EQ(c.line(), "z");
  EXPECT_EQ(c.line(), "END");
  // incr/decr: decimal values, wrap at 2^64 up, stop at 0 down.
  EXPECT_EQ(c.cmd("set n 0 0 2\r\n10\r\n"), "STORED");
  EXPECT_EQ(c.cmd("incr n 5\r\n"), "15");
  EXPECT_EQ(c.cmd("decr n 100\r\n"), "0");
  EXPECT_EQ(c.cmd("set n 0 0 20\r\n18446744073709551615\r\n"), "STORED");
  EXPECT_EQ(c.cmd("incr n 2\r\n"), "1");
  EXPECT_EQ(c.cmd("incr nothing 1\r\n"), "NOT_FOUND");
  EXPECT_EQ(c.cmd("incr b 1\r\n"), "CLIENT_ERROR cannot increment or decrement non-numeric value");
  EXPECT_EQ(c.cmd("incr n x\r\n"), "CLIENT_ERROR invalid numeric delta argument");
  EXPECT_EQ(c.cmd("delete b\r\n"), "DELETED");
  EXPECT_EQ(c.cmd("delete b\r\n"), "NOT_FOUND");
  EXPECT_EQ(c.cmd("touch a 100\r\n"), "TOUCHED");
  EXPECT_EQ(c.cmd("touch b 100\r\n"), "NOT_FOUND");
  // noreply: nothing comes back; the next answer is the next command's.
  c.send("set q 0 0 1 noreply\r\nq\r\ndelete nothing noreply\r\n");
  EXPECT_EQ(c.cmd("get q\r\n"), "VALUE q 0 1");
  EXPECT_EQ(c.line(), "q");
  EXPECT_EQ(c.line(), "END");
  EXPECT_EQ(c.cmd("version\r\n").rfind("VERSION ", 0), 0u);
  EXPECT_EQ(c.cmd("verbosity 1\r\n"), "OK");
  // flush_all empties every partition.
  for (int i = 0; i < 50; ++i) c.send(fmt::format("set f{} 0 0 1 noreply\r\nx\r\n", i));
  EXPECT_EQ(c.cmd("flush_all\r\n"), "OK");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.cmd(fmt::format("get f{}\r\n", i)), "END") << i;
  // stats: memcached's usual fields.
  c.send("stats\r\n");
  std::vector<std::string> names;
  for (std::string l = c.line(); l != "END" && l[0] != '<'; l = c.line())
    names.push_back(l.substr(5, l.find(' ', 5) - 5));
  for (const char* want :
       {"pid", "uptime", "curr_connections", "curr_items", "get_hits", "get_misses", "evictions",
        "cmd_get", "cmd_set", "total_items", "bytes", "threads", "rejected_connections"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  c.send("quit\r\n");
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_TRUE(server.running());
}

TEST_P(TextProtocol, ExpiryRelativeAbsoluteAndPast) {
  McServer server({"--workers", std::to_string(GetParam())});
  McConn c(server.port());
  const long now = static_cast<long>(time(nullptr));
  EXPECT_EQ(c.cmd("set rel 0 100 1\r\nx\r\n"), "STORED");
  EXPECT_EQ(c.cmd(fmt::format("set abs 0 {} 1\r\nx\r\n", now + 100)), "STORED");
  EXPECT_EQ(c.cmd("set neg 0 -1 1\r\nx\r\n"), "STORED");
  // more than 30 days is an absolute time: this one is in 2001, long past.
  EXPECT_EQ(c.cmd("set past 0 1000000000 1\r\nx\r\n"), "STORED");
  EXPECT_EQ(c.cmd("get rel\r\n"), "VALUE rel 0 1");
  c.line();
  c.line();
  EXPECT_EQ(c.cmd("get abs\r\n"), "VALUE abs 0 1");
  c.line();
  c.line();
  EXPECT_EQ(c.cmd("get neg\r\n"), "END");
  EXPECT_EQ(c.cmd("get past\r\n"), "END");
  // touch and gat move the expiry: into the past removes it.
  EXPECT_EQ(c.cmd("touch rel -1\r\n"), "TOUCHED");
  EXPECT_EQ(c.cmd("get rel\r\n"), "END");
  EXPECT_EQ(c.cmd("gat 100 abs\r\n"), "VALUE abs 0 1");
  c.line();
  c.line();
  EXPECT_EQ(c.cmd("gats -1 abs\r\n").rfind("VALUE abs 0 1 ", 0), 0u);
  c.line();
  c.line();
  EXPECT_EQ(c.cmd("get abs\r\n"), "END");
  // mg t: the seconds left.
  EXPECT_EQ(c.cmd("set t 0 1000 1\r\nx\r\n"), "STORED");
  std::string mg = c.cmd("mg t t\r\n");
  ASSERT_EQ(mg.rfind("HD t", 0), 0u) << mg;
  const long left = std::stol(mg.substr(4));
  EXPECT_GE(left, 990);
  EXPECT_LE(left, 1000);
}

TEST_P(TextProtocol, MetaCommands) {
  McServer server({"--workers", std::to_string(GetParam())});
  McConn c(server.port());
  EXPECT_EQ(c.cmd("ms m 3 F5 T0\r\nabc\r\n"), "HD");
  EXPECT_EQ(c.cmd("mg m v f k\r\n"), "VA 3 f5 km");
  EXPECT_EQ(c.line(), "abc");
  std::string hd = c.cmd("mg m c s O123\r\n");
  ASSERT_EQ(hd.rfind("HD c", 0), 0u) << hd;
  const uint64_t cas = std::stoull(hd.substr(4));
  EXPECT_EQ(hd, fmt::format("HD c{} s3 O123", cas));
  EXPECT_EQ(c.cmd("mg nothing v\r\n"), "EN");
  EXPECT_EQ(c.cmd(fmt::format("ms m 1 C{}\r\nz\r\n", cas + 1000)), "EX");
  EXPECT_EQ(c.cmd(fmt::format("ms m 1 C{}\r\nz\r\n", cas)), "HD");
  EXPECT_EQ(c.cmd("ms m 1 ME\r\ny\r\n"), "NS");  // add mode on a present key
  EXPECT_EQ(c.cmd("ms m 1 MA\r\ny\r\n"), "HD");  // append
  EXPECT_EQ(c.cmd("mg m v\r\n"), "VA 2");
  EXPECT_EQ(c.line(), "zy");
  EXPECT_EQ(c.cmd("ma cnt\r\n"), "NF");
  EXPECT_EQ(c.cmd("ma cnt N0 J10 v\r\n"), "VA 2");  // created with J
  EXPECT_EQ(c.line(), "10");
  EXPECT_EQ(c.cmd("ma cnt D5 v\r\n"), "VA 2");
  EXPECT_EQ(c.line(), "15");
  EXPECT_EQ(c.cmd("ma cnt MD D20 v\r\n"), "VA 1");
  EXPECT_EQ(c.line(), "0");
  EXPECT_EQ(c.cmd("md m q\r\nmn\r\n"), "MN");  // quiet: success says nothing
  EXPECT_EQ(c.cmd("md m\r\n"), "NF");
  // quiet misses say nothing; mn marks the end of a pipeline
  EXPECT_EQ(c.cmd("mg a q v\r\nmg b q v\r\nmn\r\n"), "MN");
}

INSTANTIATE_TEST_SUITE_P(Workers, TextProtocol, ::testing::Values(1, 2));

// The same keys through memcached and through herd (the fabric), both ways, on both providers.
class SameData : public ::testing::TestWithParam<std::string> {};

TEST_P(SameData, MemcachedAndHerdSeeEachOthersWrites) {
  McServer server({"--workers", "2", "--provider", GetParam(), "--protocols", "herd"});
  ClientOptions o;
  o.server = server.address();
  o.provider = GetParam();
  o.protocol = "herd";
  o.timeout_ms = 10000;
  auto herd = Client::connect(o);
  McConn c(server.port());
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(c.cmd(fmt::format("set m{} 3 0 {}\r\n{}\r\n", i, 4 + i / 10,
                                std::string(4 + i / 10, 'a' + i % 26))),
              "STORED");
  for (int i = 0; i < 100; ++i) {
    std::string v;
    ASSERT_EQ(herd->get(fmt::format("m{}", i), &v), Status::kOk) << i;
    EXPECT_EQ(v, std::string(4 + i / 10, 'a' + i % 26));
  }
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(herd->put(fmt::format("h{}", i), fmt::format("herd-{}", i)), Status::kOk);
  for (int i = 0; i < 100; ++i) {
    const std::string v = fmt::format("herd-{}", i);
    ASSERT_EQ(c.cmd(fmt::format("get h{}\r\n", i)), fmt::format("VALUE h{} 0 {}", i, v.size()));
    EXPECT_EQ(c.line(), v);
    EXPECT_EQ(c.line(), "END");
  }
  // A delete on one side is a miss on the other; a herd PUT changes the CAS memcached saw.
  ASSERT_EQ(herd->del("m0"), Status::kOk);
  EXPECT_EQ(c.cmd("get m0\r\n"), "END");
  EXPECT_EQ(c.cmd("delete h0\r\n"), "DELETED");
  std::string v;
  EXPECT_EQ(herd->get("h0", &v), Status::kNotFound);
  std::string g = c.cmd("gets m1\r\n");
  const uint64_t cas = field(g, 4);
  c.line();
  c.line();
  ASSERT_EQ(herd->put("m1", "changed"), Status::kOk);
  EXPECT_EQ(c.cmd(fmt::format("cas m1 0 0 1 {}\r\nx\r\n", cas)), "EXISTS");
  uint64_t version = 0;
  ASSERT_EQ(herd->get("m1", &v, &version), Status::kOk);
  EXPECT_EQ(c.cmd(fmt::format("cas m1 0 0 1 {}\r\nx\r\n", version)), "STORED");
}

// A memcached item above --max-value (64 KiB) is stored (--memcached-item-size, 1 MiB), but a
// fabric client's buffers hold --max-value: its GET is refused as too large, and the server and
// the client serve on.
TEST_P(SameData, ItemAboveMaxValueIsTooLargeForHerd) {
  McServer server({"--workers", "2", "--provider", GetParam(), "--protocols", "herd"});
  ClientOptions o;
  o.server = server.address();
  o.provider = GetParam();
  o.protocol = "herd";
  o.timeout_ms = 10000;
  auto herd = Client::connect(o);
  McConn c(server.port());
  const std::string big((64 << 10) + 1, 'b');
  ASSERT_EQ(c.cmd(fmt::format("set big 0 0 {}\r\n{}\r\n", big.size(), big)), "STORED");
  ASSERT_EQ(c.cmd(fmt::format("set fits 0 0 {}\r\n{}\r\n", 64 << 10, big.substr(1))), "STORED");
  std::string v;
  EXPECT_EQ(herd->get("big", &v), Status::kTooLarge);
  ASSERT_EQ(herd->get("fits", &v), Status::kOk);
  EXPECT_EQ(v, big.substr(1));
  EXPECT_EQ(herd->put("big2", big), Status::kTooLarge);
  EXPECT_EQ(c.cmd("get big\r\n"), fmt::format("VALUE big 0 {}", big.size()));
  EXPECT_EQ(c.bytes(big.size() + 2), big + "\r\n");
  EXPECT_EQ(c.line(), "END");
}

INSTANTIATE_TEST_SUITE_P(Providers, SameData, ::testing::Values("shm", "tcp"));

// ---- bad input ----------------------------------------------------------------------------

TEST(BadInput, GarbageAndBadLinesGetErrorsAndTheConnectionServesOn) {
  McServer server({"--workers", "2"});
  McConn c(server.port());
  EXPECT_EQ(c.cmd("hello world\r\n"), "ERROR");
  EXPECT_EQ(c.cmd("\r\n"), "ERROR");
  EXPECT_EQ(c.cmd(std::string("\x01\x02\xff garbage\r\n", 13)), "ERROR");
  EXPECT_EQ(c.cmd("set k 0 0\r\n"), "ERROR");
  EXPECT_EQ(c.cmd("set k x 0 1\r\n"), "CLIENT_ERROR bad command line format");
  EXPECT_EQ(c.cmd("set k 0 0 -1\r\n"), "CLIENT_ERROR bad command line format");
  EXPECT_EQ(c.cmd("get " + std::string(251, 'k') + "\r\n"), "CLIENT_ERROR bad command line format");
  // A key of 251 bytes in a set: refused, and its data block is not taken for a command.
  EXPECT_EQ(c.cmd("set " + std::string(251, 'k') + " 0 0 3\r\nget\r\n"),
            "CLIENT_ERROR bad command line format");
  EXPECT_EQ(c.cmd("set " + std::string(250, 'k') + " 0 0 3\r\nabc\r\n"), "STORED");
  EXPECT_EQ(c.cmd("delete k 5\r\n"),
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
  // The data block is shorter than declared: what follows is taken as data ("abc\r\nget s"),
  // the block's end is not "\r\n" ("ho"), and the rest of the line ("rt") is a line of its own,
  // as memcached reads it.
  EXPECT_EQ(c.cmd("set short 0 0 10\r\nabc\r\nget short\r\n"), "CLIENT_ERROR bad data chunk");
  EXPECT_EQ(c.line(), "ERROR");
  EXPECT_EQ(c.cmd("get short\r\n"), "END");
  EXPECT_EQ(c.cmd("set ok 0 0 2\r\nok\r\n"), "STORED");
  EXPECT_EQ(c.cmd("stats\r\n").rfind("STAT ", 0), 0u);
  while (c.line() != "END") {
  }
  EXPECT_TRUE(server.running());
}

TEST(BadInput, OverLongLineIsRefusedAndClosedOthersServed) {
  McServer server({});
  McConn other(server.port());
  McConn c(server.port());
  std::string big(100 << 10, 'x');  // no newline in 100 KiB
  c.send(big);
  EXPECT_EQ(c.line(), "CLIENT_ERROR line too long");
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(other.cmd("set a 0 0 1\r\na\r\n"), "STORED");
}

// memcached's default item size (-I 1m) with fabkv-server's default flags (--memcached-item-size).
TEST(BadInput, TooLargeValueIsSwallowedAndOneMebibyteWorks) {
  McServer server({"--memory", "64M"});
  McConn c(server.port());
  const std::string mib(1 << 20, 'v');
  ASSERT_EQ(c.cmd("set big 5 0 1048576\r\n" + mib + "\r\n"), "STORED");
  ASSERT_EQ(c.cmd("get big\r\n"), "VALUE big 5 1048576");
  EXPECT_EQ(c.bytes(mib.size() + 2), mib + "\r\n");
  EXPECT_EQ(c.line(), "END");
  // One byte more: refused, the block skipped, and (as memcached) the old value dropped.
  EXPECT_EQ(c.cmd("set big 0 0 1048577\r\n" + mib + "v\r\n"),
            "SERVER_ERROR object too large for cache");
  EXPECT_EQ(c.cmd("get big\r\n"), "END");
  // A huge declared size: refused at once; the bytes that follow are skipped as they come.
  EXPECT_EQ(c.cmd("set huge 0 0 3000000\r\n"), "SERVER_ERROR object too large for cache");
  c.send(std::string(3000000, 'h') + "\r\n");
  EXPECT_EQ(c.cmd("append big 0 0 1\r\nx\r\n"), "NOT_STORED");
  EXPECT_EQ(c.cmd("set small 0 0 1\r\ns\r\n"), "STORED");
}

TEST(BadInput, HalfACommandWaitsWithoutBlockingOthersAndIsNeverStored) {
  McServer server({"--workers", "2"});
  McConn half(server.port());
  half.send("set half 0 0 10\r\nabc");  // 3 of 10 bytes, then silence
  McConn half_line(server.port());
  half_line.send("get hal");  // no end of line
  McConn other(server.port());
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(other.cmd(fmt::format("set o{} 0 0 1\r\no\r\n", i)), "STORED");
  EXPECT_EQ(other.cmd("get half\r\n"), "END");
  // The rest arrives: stored.
  half.send("defghij\r\n");
  EXPECT_EQ(half.line(), "STORED");
  half_line.send("f\r\n");
  EXPECT_EQ(half_line.line(), "VALUE half 0 10");
  // A client that leaves mid-value stores nothing.
  {
    McConn gone(server.port());
    gone.send("set gone 0 0 100\r\nxyz");
  }
  EXPECT_EQ(other.cmd("get gone\r\n"), "END");
}

TEST(BadInput, PipelinedCommandsSplitAtEveryByteAnswerTheSame) {
  McServer server({"--workers", "2"});
  const std::string script =
      "set a 1 0 3\r\nabc\r\nget a b\r\nincr a 1\r\nset n 0 0 1\r\n5\r\nincr n 2\r\n"
      "delete a\r\nmg n v\r\nbogus\r\nget n\r\n";
  const std::string expect =
      "STORED\r\nVALUE a 1 3\r\nabc\r\nEND\r\n"
      "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n7\r\n"
      "DELETED\r\nVA 1\r\n7\r\nERROR\r\nVALUE n 0 1\r\n7\r\nEND\r\n";
  for (size_t cut = 1; cut < script.size(); cut += 3) {
    McConn c(server.port());
    c.send(script.substr(0, cut));
    usleep(200);  // let the first part arrive alone (not required for correctness)
    c.send(script.substr(cut));
    EXPECT_EQ(c.bytes(expect.size()), expect) << "cut at " << cut;
  }
}

TEST(Connections, ThousandsServedAndTheLimitAnswersAsMemcached) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  const size_t want = std::min<size_t>(2000, rl.rlim_cur > 200 ? rl.rlim_cur - 200 : 0);
  ASSERT_GE(want, 1000u) << "descriptor limit " << rl.rlim_cur << " too low for this test";
  McServer server({"--workers", "2", "--memcached-max-conns", std::to_string(want)});
  std::vector<std::unique_ptr<McConn>> conns;
  for (size_t i = 0; i < want; ++i) conns.push_back(std::make_unique<McConn>(server.port()));
  for (size_t i = 0; i < want; ++i) conns[i]->send(fmt::format("set c{} 0 0 1\r\nx\r\n", i));
  for (size_t i = 0; i < want; ++i) ASSERT_EQ(conns[i]->line(), "STORED") << i;
  // One past the limit: memcached's answer, then closed.
  McConn extra(server.port());
  EXPECT_EQ(extra.line(), "ERROR Too many open connections");
  EXPECT_TRUE(extra.closed_by_peer());
  // Those already in still work; after some leave, new ones are taken.
  EXPECT_EQ(conns[0]->cmd("get c1\r\n"), "VALUE c1 0 1");
  conns.resize(want - 10);
  bool served = false;
  for (int attempt = 0; attempt < 100 && !served; ++attempt) {  // the closes reach the server
    McConn again(server.port());
    served = again.cmd("version\r\n").rfind("VERSION", 0) == 0;
  }
  EXPECT_TRUE(served);
  McConn probe(server.port());
  probe.send("stats\r\n");
  uint64_t rejected = 0;
  for (std::string l = probe.line(); l != "END" && l[0] != '<'; l = probe.line())
    if (l.rfind("STAT rejected_connections ", 0) == 0) rejected = std::stoull(l.substr(26));
  EXPECT_GE(rejected, 1u);
}

// ---- touch --------------------------------------------------------------------------------

// A 64 MB cache holding 40 items of 500 KB; 200 touches of one of them (and gats, mg T). Each
// used to write the whole item into the cache's log again, which evicted the other 39 while
// stats still said 40 items. The new expiry is in the op log: a restart replays it.
TEST(Touch, ChangesOnlyTheExpiryAndEvictsNothing) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    fmt::format("fabkv-touch-{}", getpid());
  std::filesystem::create_directories(dir);
  const std::vector<std::string> flags = {"--workers", "1",       "--memory",
                                          "64M",       "--oplog", (dir / "log").string()};
  constexpr size_t kValue = 500000;
  uint64_t cas = 0;
  {
    McServer server(flags);
    McConn c(server.port());
    for (int i = 0; i < 40; ++i)
      ASSERT_EQ(c.cmd(fmt::format("set k{} 0 0 {}\r\n{}\r\n", i, kValue,
                                  std::string(kValue, char('a' + i % 26)))),
                "STORED");
    const std::string hd = c.cmd("mg k0 c\r\n");
    ASSERT_EQ(hd.rfind("HD c", 0), 0u) << hd;
    cas = std::stoull(hd.substr(4));
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(c.cmd("touch k0 1000\r\n"), "TOUCHED") << i;
      if (i % 50 == 0) {
        ASSERT_EQ(c.cmd("gat 1000 k0\r\n"), fmt::format("VALUE k0 0 {}", kValue));
        ASSERT_EQ(c.bytes(kValue + 2), std::string(kValue, 'a') + "\r\n");
        ASSERT_EQ(c.line(), "END");
        ASSERT_EQ(c.cmd("mg k0 T1000\r\n"), "HD");
      }
    }
    for (int i = 0; i < 40; ++i)
      EXPECT_EQ(c.cmd(fmt::format("mg k{} s\r\n", i)), fmt::format("HD s{}", kValue)) << i;
    c.send("stats\r\n");
    std::map<std::string, std::string> st;
    for (std::string l = c.line(); l.rfind("STAT ", 0) == 0; l = c.line())
      st[l.substr(5, l.find(' ', 5) - 5)] = l.substr(l.find(' ', 5) + 1);
    EXPECT_EQ(st["curr_items"], "40");
    EXPECT_EQ(st["evictions"], "0");
    EXPECT_EQ(c.cmd("mg k0 c\r\n"), fmt::format("HD c{}", cas));  // the cas is kept
  }
  {
    McServer again(flags);  // the op log replayed
    McConn c(again.port());
    const std::string mg = c.cmd("mg k0 t c v\r\n");
    ASSERT_EQ(mg.rfind(fmt::format("VA {} t", kValue), 0), 0u) << mg;
    const int ttl = std::stoi(mg.substr(mg.find(" t") + 2));
    EXPECT_GE(ttl, 980);
    EXPECT_LE(ttl, 1000);
    EXPECT_NE(mg.find(fmt::format(" c{}", cas)), std::string::npos) << mg;
    EXPECT_EQ(c.bytes(kValue + 2), std::string(kValue, 'a') + "\r\n");
    EXPECT_EQ(c.cmd("mg k39 s\r\n"), fmt::format("HD s{}", kValue));
  }
  std::filesystem::remove_all(dir);
}

// ---- binary protocol ----------------------------------------------------------------------

std::string bin_request(uint8_t op, std::string_view key, std::string_view extras,
                        std::string_view value, uint64_t cas = 0, uint32_t opaque = 0x11223344) {
  std::string p(24, '\0');
  p[0] = static_cast<char>(0x80);
  p[1] = static_cast<char>(op);
  p[2] = static_cast<char>(key.size() >> 8);
  p[3] = static_cast<char>(key.size());
  p[4] = static_cast<char>(extras.size());
  const uint32_t body = static_cast<uint32_t>(extras.size() + key.size() + value.size());
  for (int i = 0; i < 4; ++i) p[8 + i] = static_cast<char>(body >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i) p[12 + i] = static_cast<char>(opaque >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) p[16 + i] = static_cast<char>(cas >> (56 - 8 * i));
  return p.append(extras).append(key).append(value);
}

struct BinResponse {
  uint8_t opcode = 0;
  uint16_t status = 0xffff;
  uint64_t cas = 0;
  std::string extras, key, value;
};

BinResponse bin_read(McConn& c) {
  BinResponse r;
  std::string h = c.bytes(24);
  if (h.size() != 24 || static_cast<uint8_t>(h[0]) != 0x81) return r;
  auto u = [&](int i) { return static_cast<uint8_t>(h[i]); };
  r.opcode = u(1);
  const uint16_t keylen = static_cast<uint16_t>(u(2) << 8 | u(3));
  const uint8_t extlen = u(4);
  r.status = static_cast<uint16_t>(u(6) << 8 | u(7));
  const uint32_t body = uint32_t{u(8)} << 24 | uint32_t{u(9)} << 16 | uint32_t{u(10)} << 8 | u(11);
  for (int i = 0; i < 8; ++i) r.cas = r.cas << 8 | u(16 + i);
  std::string b = c.bytes(body);
  r.extras = b.substr(0, extlen);
  r.key = b.substr(extlen, keylen);
  r.value = b.substr(extlen + keylen);
  return r;
}

TEST(BinaryProtocol, SetGetQuietAndArithmetic) {
  McServer server({"--workers", "2"});
  McConn c(server.port());
  const std::string flags_exp("\x00\x00\x00\x2a\x00\x00\x00\x00", 8);
  c.send(bin_request(0x01, "bk", flags_exp, "value"));  // SET
  BinResponse r = bin_read(c);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.cas, 0u);
  c.send(bin_request(0x0c, "bk", "", ""));  // GETK
  r = bin_read(c);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.key, "bk");
  EXPECT_EQ(r.value, "value");
  EXPECT_EQ(r.extras, std::string("\x00\x00\x00\x2a", 4));
  // Quiet GETs of misses say nothing; NOOP ends the pipeline.
  c.send(bin_request(0x09, "nothing", "", "") + bin_request(0x0d, "bk", "", "") +
         bin_request(0x0a, "", "", ""));
  r = bin_read(c);
  EXPECT_EQ(r.opcode, 0x0d);
  EXPECT_EQ(r.value, "value");
  EXPECT_EQ(bin_read(c).opcode, 0x0a);
  // The text side sees it.
  EXPECT_EQ(c.cmd("get bk\r\n"), "VALUE bk 42 5");
  c.line();
  c.line();
  // INCR with an initial value creates the key.
  std::string incr_extras(20, '\0');
  incr_extras[7] = 3;    // delta 3
  incr_extras[15] = 10;  // initial 10
  c.send(bin_request(0x05, "cnt", incr_extras, ""));
  r = bin_read(c);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.value, std::string("\0\0\0\0\0\0\0\x0a", 8));
  c.send(bin_request(0x05, "cnt", incr_extras, ""));
  r = bin_read(c);
  EXPECT_EQ(r.value, std::string("\0\0\0\0\0\0\0\x0d", 8));
  // An unknown opcode and a bad key length: errors, and the connection goes on.
  c.send(bin_request(0x7f, "", "", ""));
  EXPECT_EQ(bin_read(c).status, 0x81);
  c.send(bin_request(0x00, std::string(300, 'k'), "", ""));
  EXPECT_EQ(bin_read(c).status, 0x04);
  c.send(bin_request(0x04, "bk", "", ""));  // DELETE
  EXPECT_EQ(bin_read(c).status, 0);
  c.send(bin_request(0x00, "bk", "", ""));
  EXPECT_EQ(bin_read(c).status, 0x01);
}

}  // namespace
}  // namespace fabkv
