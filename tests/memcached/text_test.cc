// The memcached parsers without a server: every command's shape, the errors memcached gives,
// and every input cut at every byte (a prefix is "need more", never a wrong command).
#include <gtest/gtest.h>

#include <string>

#include "memcached/binary.h"
#include "memcached/exec.h"
#include "memcached/text.h"

namespace fabkv::memcached {
namespace {

TEST(TextParser, StorageCommandWithDataBlock) {
  TextCommand cmd;
  const std::string in = "set k 5 100 3 noreply\r\nabc\r\nget k\r\n";
  ParseResult r = parse_text(in, 1024, &cmd);
  ASSERT_EQ(r.status, Parse::kCommand);
  EXPECT_EQ(cmd.verb, Verb::kSet);
  EXPECT_EQ(cmd.key(), "k");
  EXPECT_EQ(cmd.flags, 5u);
  EXPECT_EQ(cmd.exptime, 100);
  EXPECT_TRUE(cmd.noreply);
  EXPECT_EQ(cmd.data, "abc");
  EXPECT_EQ(r.consumed, in.find("get"));
}

TEST(TextParser, EveryPrefixNeedsMore) {
  const std::string cmds[] = {"set k 5 100 3\r\nabc\r\n", "get a b c\r\n", "cas k 0 0 1 99\r\nx\r\n",
                              "incr k 5\r\n", "ms k 2 F3 T0\r\nhi\r\n", "gat 10 a b\r\n",
                              "flush_all 0\r\n", "mg k v c f\r\n"};
  for (const std::string& full : cmds) {
    TextCommand cmd;
    for (size_t n = 0; n < full.size(); ++n) {
      ParseResult r = parse_text(std::string_view(full).substr(0, n), 1024, &cmd);
      EXPECT_EQ(r.status, Parse::kNeedMore) << full << " cut at " << n;
    }
    ParseResult r = parse_text(full, 1024, &cmd);
    EXPECT_EQ(r.status, Parse::kCommand) << full;
    EXPECT_EQ(r.consumed, full.size()) << full;
  }
}

TEST(TextParser, ErrorsAsMemcachedGivesThem) {
  TextCommand cmd;
  auto reply = [&](std::string in) {
    ParseResult r = parse_text(in, 100, &cmd);
    return std::string(r.reply);
  };
  EXPECT_EQ(reply("bogus\r\n"), "ERROR\r\n");
  EXPECT_EQ(reply("set k 0 0\r\n"), "ERROR\r\n");
  EXPECT_EQ(reply("set k z 0 1\r\n"), "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(reply("set k 0 0 1\r\nxyz\r\n"), "CLIENT_ERROR bad data chunk\r\n");
  EXPECT_EQ(reply("set k 0 0 101\r\n"), "SERVER_ERROR object too large for cache\r\n");
  EXPECT_EQ(reply("incr k -1\r\n"), "CLIENT_ERROR invalid numeric delta argument\r\n");
  EXPECT_EQ(reply("touch k x\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
  ParseResult big = parse_text(std::string(kMaxLineBytes + 1, 'a'), 100, &cmd);
  EXPECT_EQ(big.status, Parse::kClose);
  ParseResult swallow = parse_text("set k 0 0 5000000\r\n", 100, &cmd);
  EXPECT_EQ(swallow.status, Parse::kSwallow);
  EXPECT_EQ(swallow.swallow, 5000002u);
}

TEST(Expiry, RelativeAbsoluteNegative) {
  EXPECT_EQ(to_expire_at(0, 1000), 0u);
  EXPECT_EQ(to_expire_at(-5, 1000), 1u);
  EXPECT_EQ(to_expire_at(10, 1000), 1010u);
  EXPECT_EQ(to_expire_at(kMaxRelativeExptime, 1000), 1000u + kMaxRelativeExptime);
  EXPECT_EQ(to_expire_at(kMaxRelativeExptime + 1, 1000), uint32_t(kMaxRelativeExptime + 1));
  EXPECT_EQ(to_expire_at(1700000000, 1000), 1700000000u);
}

TEST(BinaryParser, PrefixesNeedMoreAndBadKeysAreInvalid) {
  std::string p(24, '\0');
  p[0] = static_cast<char>(0x80);
  p[1] = 0x00;  // GET
  p[3] = 3;     // keylen
  p[11] = 3;    // bodylen
  p += "key";
  binary::Packet pk;
  for (size_t n = 1; n < p.size(); ++n)
    EXPECT_EQ(binary::parse(std::string_view(p).substr(0, n), 100, &pk).status, binary::Parse::kNeedMore) << n;
  binary::ParseResult r = binary::parse(p, 100, &pk);
  ASSERT_EQ(r.status, binary::Parse::kPacket);
  EXPECT_EQ(pk.key, "key");
  p[11] = 2;  // key longer than the body
  EXPECT_EQ(binary::parse(p, 100, &pk).status, binary::Parse::kError);
}

}  // namespace
}  // namespace fabkv::memcached
