// The memcached parsers without a server: every command's shape, the errors memcached gives,
// and every input cut at every byte (a prefix is "need more", never a wrong command).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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
  const std::string cmds[] = {"set k 5 100 3\r\nabc\r\n", "get a b c\r\n",
                              "cas k 0 0 1 99\r\nx\r\n",  "incr k 5\r\n",
                              "ms k 2 F3 T0\r\nhi\r\n",   "gat 10 a b\r\n",
                              "flush_all 0\r\n",          "mg k v c f\r\n"};
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

// A retrieval line longer than kMaxLineBytes: its head, then its keys one at a time, cut at
// any byte (what next_key has not seen whole it does not take). Any other long line: refused.
TEST(TextParser, LongRetrievalLinesAreReadKeyByKey) {
  TextCommand cmd;
  std::string keys;
  for (int i = 0; keys.size() <= kMaxLineBytes; ++i) keys += " k" + std::to_string(i);
  const std::string line = "gat 100" + keys + "  \r\n";
  ParseResult head = parse_text(line, 100, &cmd);
  ASSERT_EQ(head.status, Parse::kKeys);
  EXPECT_EQ(cmd.verb, Verb::kGat);
  EXPECT_EQ(cmd.exptime, 100);
  EXPECT_EQ(head.consumed, 7u);
  EXPECT_EQ(parse_text("get" + keys, 100, &cmd).status, Parse::kKeys);  // no end yet
  EXPECT_EQ(parse_text("gets" + keys, 100, &cmd).status, Parse::kKeys);
  EXPECT_EQ(parse_text("gat x" + keys, 100, &cmd).status, Parse::kClose);
  EXPECT_EQ(parse_text("mg" + keys, 100, &cmd).status, Parse::kClose);
  EXPECT_EQ(parse_text("set" + keys, 100, &cmd).status, Parse::kClose);
  // The keys, read from the whole rest and from every cut of a short stretch.
  std::vector<std::string> got;
  std::string_view rest = std::string_view(line).substr(head.consumed);
  for (;;) {
    NextKey k = next_key(rest);
    ASSERT_NE(k.status, KeyScan::kNeedMore);
    rest.remove_prefix(k.consumed);
    if (k.status == KeyScan::kEnd) break;
    ASSERT_EQ(k.status, KeyScan::kKey);
    got.emplace_back(k.key);
  }
  EXPECT_TRUE(rest.empty());
  ASSERT_EQ(got.size(), static_cast<size_t>(std::count(keys.begin(), keys.end(), ' ')));
  EXPECT_EQ(got.front(), "k0");
  const std::string tail = " ab  cd\r\n";
  for (size_t cut = 0; cut < tail.size(); ++cut) {
    std::string_view part = std::string_view(tail).substr(0, cut);
    std::vector<std::string> seen;
    size_t used = 0;
    for (NextKey k = next_key(part); k.status != KeyScan::kNeedMore; k = next_key(part)) {
      part.remove_prefix(k.consumed);
      used += k.consumed;
      if (k.status == KeyScan::kKey) seen.emplace_back(k.key);
    }
    used += next_key(part).consumed;
    std::string_view more = std::string_view(tail).substr(used);
    for (NextKey k = next_key(more); k.status != KeyScan::kNeedMore; k = next_key(more)) {
      more.remove_prefix(k.consumed);
      if (k.status == KeyScan::kKey) seen.emplace_back(k.key);
      if (k.status == KeyScan::kEnd) break;
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"ab", "cd"})) << "cut at " << cut;
  }
  // A key over 250 bytes, whole or still coming; only a "\r" before the end; an end alone.
  EXPECT_EQ(next_key(" " + std::string(251, 'k') + " x\r\n").status, KeyScan::kTooLong);
  EXPECT_EQ(next_key(" " + std::string(252, 'k')).status, KeyScan::kTooLong);
  EXPECT_EQ(next_key(" " + std::string(250, 'k') + "\r").status, KeyScan::kNeedMore);
  EXPECT_EQ(next_key("\r").status, KeyScan::kNeedMore);
  NextKey end = next_key("  \r\nget x\r\n");
  EXPECT_EQ(end.status, KeyScan::kEnd);
  EXPECT_EQ(end.consumed, 4u);
  EXPECT_EQ(next_key("\n").consumed, 1u);
}

// The meta flags decoded into what the engine is asked: the mode, numbers and ttl of each
// verb's flags; the flags that only shape the answer are left alone.
Request meta(const std::string& line, std::string* reply = nullptr, std::string* data = nullptr) {
  static TextCommand cmd;
  static std::string in;
  in = line;
  ParseResult r = parse_text(in, 1024, &cmd);
  EXPECT_EQ(r.status, Parse::kCommand) << line;
  if (data != nullptr) *data = std::string(cmd.data);
  Request req;
  std::string_view why = parse_meta(cmd, 1000, &req);
  if (reply != nullptr) *reply = std::string(why);
  else EXPECT_EQ(why, "") << line;
  return req;
}

TEST(MetaFlags, EachVerbAsksTheEngine) {
  Request g = meta("mg k v c f T30 O123\r\n");
  EXPECT_EQ(g.kind, Kind::kGet);
  EXPECT_EQ(g.key, "k");
  EXPECT_TRUE(g.touch);
  EXPECT_EQ(g.expire_at, 1030u);
  EXPECT_FALSE(meta("me k\r\n").touch);

  Request s = meta("ms k 2 F7 T0 ME\r\nhi\r\n");
  EXPECT_EQ(s.kind, Kind::kAdd);
  EXPECT_EQ(s.flags, 7u);
  EXPECT_EQ(s.expire_at, 0u);
  EXPECT_EQ(s.value, "hi");
  EXPECT_EQ(meta("ms k 1 C42\r\nx\r\n").kind, Kind::kCas);
  EXPECT_EQ(meta("ms k 1 C42\r\nx\r\n").cas, 42u);
  EXPECT_EQ(meta("ms k 1 MA\r\nx\r\n").kind, Kind::kAppend);
  EXPECT_EQ(meta("ms k 1 Mp\r\nx\r\n").kind, Kind::kPrepend);
  EXPECT_EQ(meta("ms k 1 MR\r\nx\r\n").kind, Kind::kReplace);
  EXPECT_EQ(meta("ms k 1 MS q\r\nx\r\n").kind, Kind::kSet);

  Request d = meta("md k C9 q\r\n");
  EXPECT_EQ(d.kind, Kind::kDelete);
  EXPECT_EQ(d.cas, 9u);

  Request a = meta("ma k\r\n");
  EXPECT_EQ(a.kind, Kind::kIncr);
  EXPECT_EQ(a.delta, 1u);
  EXPECT_FALSE(a.create);
  Request b = meta("ma k N0 J5 D2 MD v\r\n");
  EXPECT_EQ(b.kind, Kind::kDecr);
  EXPECT_TRUE(b.create);
  EXPECT_EQ(b.initial, 5u);
  EXPECT_EQ(b.delta, 2u);
  EXPECT_EQ(meta("ma k M+\r\n").kind, Kind::kIncr);
  EXPECT_EQ(meta("ma k M-\r\n").kind, Kind::kDecr);
}

TEST(MetaFlags, MalformedFlagsAsMemcachedAnswersThem) {
  auto reply = [](const std::string& line) {
    std::string why;
    meta(line, &why);
    return why;
  };
  const std::string bad_token = "CLIENT_ERROR bad token in command line format\r\n";
  EXPECT_EQ(reply("mg k T\r\n"), bad_token);
  EXPECT_EQ(reply("mg k Tx\r\n"), bad_token);
  EXPECT_EQ(reply("mg k T5x\r\n"), bad_token);
  EXPECT_EQ(reply("ms k 1 F-1\r\nx\r\n"), bad_token);
  EXPECT_EQ(reply("ms k 1 F99999999999\r\nx\r\n"), bad_token);  // above 32 bits
  EXPECT_EQ(reply("ms k 1 MZ\r\nx\r\n"), "CLIENT_ERROR invalid mode for ms M token\r\n");
  EXPECT_EQ(reply("ms k 1 MEE\r\nx\r\n"), "CLIENT_ERROR incorrect length for M token\r\n");
  EXPECT_EQ(reply("ms k 1 C\r\nx\r\n"), bad_token);
  EXPECT_EQ(reply("md k Cabc\r\n"), bad_token);
  EXPECT_EQ(reply("ma k Dx\r\n"), bad_token);
  EXPECT_EQ(reply("ma k J\r\n"), bad_token);
  EXPECT_EQ(reply("ma k N-\r\n"), bad_token);
  EXPECT_EQ(reply("ma k MX\r\n"), "CLIENT_ERROR invalid mode for ma M token\r\n");
  EXPECT_EQ(reply("ma k M\r\n"), "CLIENT_ERROR incorrect length for M token\r\n");
  EXPECT_EQ(reply("mg k b\r\n"), "CLIENT_ERROR base64 keys are not supported\r\n");
  // A key the text protocol does not take (a control character) is a bad chunk.
  EXPECT_EQ(reply("mg k\x01 v\r\n"), "CLIENT_ERROR bad data chunk\r\n");
  // Flags no verb decodes are left to the answer, not refused.
  EXPECT_EQ(reply("md k T5 Zq\r\n"), "");
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
    EXPECT_EQ(binary::parse(std::string_view(p).substr(0, n), 100, &pk).status,
              binary::Parse::kNeedMore)
        << n;
  binary::ParseResult r = binary::parse(p, 100, &pk);
  ASSERT_EQ(r.status, binary::Parse::kPacket);
  EXPECT_EQ(pk.key, "key");
  p[11] = 2;  // key longer than the body
  EXPECT_EQ(binary::parse(p, 100, &pk).status, binary::Parse::kError);
}

// A packet decoded into the request its key's owner runs: each opcode's extras, and the
// shapes memcached refuses as invalid arguments.
TEST(BinaryParser, PacketsBecomeRequests) {
  auto packet = [](uint8_t opcode, std::string extras, std::string key, std::string value,
                   uint64_t cas) {
    binary::Packet pk;
    pk.h.magic = binary::kRequestMagic;
    pk.h.opcode = opcode;
    pk.h.extlen = static_cast<uint8_t>(extras.size());
    pk.h.keylen = static_cast<uint16_t>(key.size());
    pk.h.cas = cas;
    static std::string store[3];
    store[0] = std::move(extras);
    store[1] = std::move(key);
    store[2] = std::move(value);
    pk.extras = store[0];
    pk.key = store[1];
    pk.value = store[2];
    return pk;
  };
  const std::string be = std::string("\0\0\0\7", 4) + std::string("\0\0\0\x0a", 4);
  Request r;
  ASSERT_TRUE(binary::to_request(packet(binary::kSet, be, "k", "v", 0), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kSet);
  EXPECT_EQ(r.flags, 7u);
  EXPECT_EQ(r.expire_at, 1010u);
  EXPECT_EQ(r.value, "v");
  ASSERT_TRUE(binary::to_request(packet(binary::kSet, be, "k", "v", 5), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kCas);
  EXPECT_EQ(r.cas, 5u);
  ASSERT_TRUE(binary::to_request(packet(binary::kReplaceQ, be, "k", "v", 5), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kCas);
  // memcached 1.6: ADD with a CAS is a cas too (Not found when the key is missing).
  ASSERT_TRUE(binary::to_request(packet(binary::kAdd, be, "k", "v", 5), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kCas);
  EXPECT_EQ(r.cas, 5u);
  EXPECT_FALSE(binary::to_request(packet(binary::kSet, "", "k", "v", 0), 1000, &r));
  EXPECT_FALSE(binary::to_request(packet(binary::kGet, "", "k", "v", 0), 1000, &r));
  EXPECT_FALSE(binary::to_request(packet(binary::kGet, "", "", "", 0), 1000, &r));
  ASSERT_TRUE(binary::to_request(packet(binary::kTouch, be.substr(4), "k", "", 9), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kGat);
  EXPECT_EQ(r.cas, 0u);
  const std::string arith = std::string(7, '\0') + "\2" + std::string(7, '\0') + "\3" +
                            std::string(4, '\xff');
  ASSERT_TRUE(binary::to_request(packet(binary::kDecrement, arith, "k", "", 0), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kDecr);
  EXPECT_EQ(r.delta, 2u);
  EXPECT_EQ(r.initial, 3u);
  EXPECT_FALSE(r.create);  // expiry all ones: a miss is not created
  ASSERT_TRUE(binary::to_request(packet(binary::kFlushQ, "", "", "", 0), 1000, &r));
  EXPECT_EQ(r.kind, Kind::kFlush);
  EXPECT_FALSE(binary::to_request(packet(binary::kNoop, "", "", "", 0), 1000, &r));
}

}  // namespace
}  // namespace fabkv::memcached
