// memcached's tools against a real fabkv-server --memcached: the stats groups memcstat and
// exporters read, and the key listings (lru_crawler metadump, stats cachedump and Debian's
// memcdump, which sends the latter) (docs/memcached.md).
#include <gtest/gtest.h>
#include <stdio.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mc_support.h"

namespace fabkv {
namespace {

using testing::McConn;
using testing::McServer;

// The lines of a multi-line answer up to its "END" (excluded); "<timeout>" ends it too.
std::vector<std::string> until_end(McConn& c, std::string_view command) {
  c.send(command);
  std::vector<std::string> lines;
  for (std::string l = c.line(); l != "END" && l != "<timeout>" && l != "<closed>"; l = c.line())
    lines.push_back(l);
  return lines;
}

// "STAT name value" lines as a map.
std::map<std::string, std::string> stat_map(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> m;
  for (const std::string& l : lines) {
    const size_t sp = l.find(' ', 5);
    if (l.rfind("STAT ", 0) == 0 && sp != std::string::npos)
      m[l.substr(5, sp - 5)] = l.substr(sp + 1);
  }
  return m;
}

TEST(StatsGroups, SettingsSlabsItemsAndSizesSayWhatFabkvHas) {
  McServer server({"--workers", "2", "--memory", "64M", "--memcached-max-conns", "77"});
  McConn c(server.port());
  auto settings = stat_map(until_end(c, "stats settings\r\n"));
  EXPECT_EQ(settings["item_size_max"], "1048576");
  EXPECT_EQ(settings["maxbytes"], std::to_string(64 << 20));
  EXPECT_EQ(settings["maxconns"], "77");
  EXPECT_EQ(settings["num_threads"], "2");
  EXPECT_EQ(settings["tcpport"], std::to_string(server.port()));
  EXPECT_EQ(settings["evictions"], "on");  // the cache engine
  EXPECT_EQ(settings["cas_enabled"], "yes");
  // No items: no class, as memcached.
  EXPECT_TRUE(until_end(c, "stats items\r\n").empty());
  auto slabs = stat_map(until_end(c, "stats slabs\r\n"));
  EXPECT_EQ(slabs["active_slabs"], "0");
  EXPECT_EQ(slabs.count("1:used_chunks"), 0u);
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(c.cmd(fmt::format("set k{} 0 0 10\r\n0123456789\r\n", i)), "STORED");
  ASSERT_EQ(c.cmd("get k1\r\n"), "VALUE k1 0 10");
  c.line();
  c.line();
  ASSERT_EQ(c.cmd("delete k19\r\n"), "DELETED");
  auto items = stat_map(until_end(c, "stats items\r\n"));
  EXPECT_EQ(items["items:1:number"], "19");
  EXPECT_EQ(items["items:1:evicted"], "0");
  slabs = stat_map(until_end(c, "stats slabs\r\n"));
  EXPECT_EQ(slabs["active_slabs"], "1");
  EXPECT_EQ(slabs["1:used_chunks"], "19");
  EXPECT_EQ(slabs["1:cmd_set"], "20");
  EXPECT_EQ(slabs["1:get_hits"], "1");
  EXPECT_EQ(slabs["1:delete_hits"], "1");
  EXPECT_EQ(until_end(c, "stats sizes\r\n"),
            std::vector<std::string>{"STAT sizes_status disabled"});
  EXPECT_EQ(c.cmd("stats nonsense\r\n"), "ERROR");
}

// Keys of 2 partitions with expiry, flags and a byte memcached's uriencode escapes.
class Listing : public ::testing::Test {
 protected:
  void SetUp() override {
    McConn c(server_.port());
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = fmt::format("key:{}", i);
      ASSERT_EQ(c.cmd(fmt::format("set {} {} {} {}\r\n{}\r\n", key, i, i % 2 ? 1000 : 0, key.size(),
                                  key)),
                "STORED");
      keys_.insert(key);
    }
  }
  static constexpr int kKeys = 500;
  McServer server_{{"--workers", "2"}};
  std::set<std::string> keys_;
};

TEST_F(Listing, MetadumpListsEveryKeyInMemcachedsFormat) {
  McConn c(server_.port());
  std::set<std::string> seen;
  for (const std::string& l : until_end(c, "lru_crawler metadump all\r\n")) {
    ASSERT_EQ(l.rfind("key=key%3A", 0), 0u) << l;  // ':' escaped as memcached does
    const std::string key = "key:" + l.substr(10, l.find(' ') - 10);
    EXPECT_NE(l.find(" cls=1 size="), std::string::npos) << l;
    const bool expires = std::stoi(key.substr(4)) % 2 == 1;
    EXPECT_EQ(l.find(" exp=-1 ") == std::string::npos, expires) << l;
    seen.insert(key);
  }
  EXPECT_EQ(seen, keys_);
  EXPECT_TRUE(until_end(c, "lru_crawler metadump 2,3\r\n").empty());
  EXPECT_EQ(c.cmd("lru_crawler metadump 0\r\n"), "BADCLASS invalid class id");
  EXPECT_EQ(c.cmd("lru_crawler crawl all\r\n"),
            "CLIENT_ERROR lru_crawler: only metadump is supported");
}

TEST_F(Listing, CachedumpListsEveryKeyOrItsLimit) {
  McConn c(server_.port());
  std::set<std::string> seen;
  for (const std::string& l : until_end(c, "stats cachedump 1 0\r\n")) {
    ASSERT_EQ(l.rfind("ITEM ", 0), 0u) << l;
    const std::string key = l.substr(5, l.find(' ', 5) - 5);
    EXPECT_EQ(l.substr(5 + key.size()).rfind(fmt::format(" [{} b; ", key.size()), 0), 0u) << l;
    seen.insert(key);
  }
  EXPECT_EQ(seen, keys_);
  EXPECT_EQ(until_end(c, "stats cachedump 1 7\r\n").size(), 7u);
  EXPECT_TRUE(until_end(c, "stats cachedump 2 0\r\n").empty());
  EXPECT_EQ(c.cmd("stats cachedump 64 0\r\n"), "CLIENT_ERROR Illegal slab id");
  EXPECT_EQ(c.cmd("stats cachedump 1\r\n"), "CLIENT_ERROR bad command line");
  EXPECT_EQ(c.cmd("get key:0\r\n"), "VALUE key:0 0 5");  // the connection serves on
}

// Debian's memcdump (libmemcached-tools) sends "stats cachedump <class> 0" for classes 0..199.
TEST_F(Listing, MemcdumpListsEveryKey) {
  const std::string cmd = fmt::format("timeout 30 memcdump --servers=127.0.0.1:{} 2>&1",
                                      server_.port());
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::set<std::string> seen;
  char line[512];
  while (fgets(line, sizeof line, p) != nullptr) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    seen.insert(l);
  }
  const int rc = pclose(p);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) GTEST_SKIP() << "memcdump is not installed";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(seen, keys_);
}

}  // namespace
}  // namespace fabkv
