// The client's request encoding without a peer: header/trailer/checksum, inline vs indirect,
// sequence wrap, status mapping, response parsing, local validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "client/client.h"
#include "proto/rpc/request.h"
#include "store/limits.h"

namespace fabkv::rpc {
namespace {

RequestFields fields(uint32_t seq, rpc::OpCode op) {
  RequestFields f;
  f.seq = seq;
  f.client = 7;
  f.epoch = 3;
  f.op = op;
  f.expire_at = 1234;
  f.expected_version = 99;
  return f;
}

TEST(Encoding, InlineRequestHasHeaderBodyTrailerAndCheck) {
  const std::string key = "hello", value = "world!!";  // 12 body bytes -> trailer at 44
  char buf[256];
  std::memset(buf, 0xAB, sizeof(buf));
  size_t n = encode_inline(buf, fields(42, rpc::OpCode::kPut), key, value);
  EXPECT_EQ(n, rpc::request_bytes(12));
  EXPECT_EQ(n, 48u);
  auto h = rpc::load<rpc::RequestHeader>(buf);
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.client, 7u);
  EXPECT_EQ(h.epoch, 3u);
  EXPECT_EQ(h.op, static_cast<uint8_t>(rpc::OpCode::kPut));
  EXPECT_EQ(h.flags, 0u);
  EXPECT_EQ(h.key_len, 5u);
  EXPECT_EQ(h.value_len, 7u);
  EXPECT_EQ(h.expire_at, 1234u);
  EXPECT_EQ(h.expected_version, 99u);
  EXPECT_EQ(std::string(buf + 32, 12), "helloworld!!");
  EXPECT_EQ(h.check, rpc::request_check(h, buf + 32, 12));
  EXPECT_EQ(rpc::load<rpc::RequestTrailer>(buf + rpc::trailer_offset(12)).seq, 42u);
  // Nothing written past the request.
  EXPECT_EQ(static_cast<unsigned char>(buf[n]), 0xABu);
}

TEST(Encoding, PaddingBeforeTrailerIsZeroed) {
  char buf[128];
  std::memset(buf, 0xFF, sizeof(buf));
  size_t n = encode_inline(buf, fields(1, rpc::OpCode::kGet), "abc", "");  // body 3, pad 1
  EXPECT_EQ(n, rpc::request_bytes(3));
  EXPECT_EQ(rpc::trailer_offset(3), 36u);
  EXPECT_EQ(buf[35], 0);
  EXPECT_EQ(rpc::load<rpc::RequestTrailer>(buf + 36).seq, 1u);
}

TEST(Encoding, CheckIsSeededWithSeq) {
  char a[128], b[128];
  encode_inline(a, fields(1, rpc::OpCode::kGet), "key", "");
  encode_inline(b, fields(2, rpc::OpCode::kGet), "key", "");
  EXPECT_NE(rpc::load<rpc::RequestHeader>(a).check, rpc::load<rpc::RequestHeader>(b).check);
}

// Wire v3: every header field a worker acts on is under the check, so a header that is half
// the previous request's can never pass (rpc::read_request).
TEST(Encoding, CheckCoversEveryHeaderField) {
  char buf[128];
  encode_inline(buf, fields(9, rpc::OpCode::kPut), "key", "v");
  const auto h = rpc::load<rpc::RequestHeader>(buf);
  ASSERT_EQ(h.check, rpc::request_check(h, buf + 32, 4));
  auto differs = [&](auto mutate) {
    rpc::RequestHeader m = h;
    mutate(m);
    return rpc::request_check(m, buf + 32, 4) != h.check;
  };
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) {
    m.op = static_cast<uint8_t>(rpc::OpCode::kDel);
  }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.flags ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.client ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.epoch ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.key_len ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.value_len ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.expected_version ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.expire_at ^= 1; }));
  EXPECT_TRUE(differs([](rpc::RequestHeader& m) { m.seq ^= 1; }));
  // The check itself is not under the check.
  EXPECT_FALSE(differs([](rpc::RequestHeader& m) { m.check ^= 1; }));
}

TEST(Encoding, IndirectRequestCarriesTheBodyDescriptor) {
  char buf[128];
  rpc::IndirectBody ib{0x1000, 77, 250 + 60000};
  size_t n = encode_indirect(buf, fields(5, rpc::OpCode::kPut), 250, 60000, ib);
  EXPECT_EQ(n, rpc::request_bytes(sizeof(rpc::IndirectBody)));
  EXPECT_EQ(n, 60u);
  auto h = rpc::load<rpc::RequestHeader>(buf);
  EXPECT_EQ(h.flags, rpc::kFlagIndirect);
  EXPECT_EQ(h.key_len, 250u);
  EXPECT_EQ(h.value_len, 60000u);
  EXPECT_EQ(rpc::request_body_bytes(h.flags, h.key_len, h.value_len), sizeof(rpc::IndirectBody));
  auto got = rpc::load<rpc::IndirectBody>(buf + 32);
  EXPECT_EQ(got.addr, 0x1000u);
  EXPECT_EQ(got.rkey, 77u);
  EXPECT_EQ(got.length, 60250u);
  EXPECT_EQ(h.check, rpc::request_check(h, buf + 32, sizeof(rpc::IndirectBody)));
  EXPECT_EQ(rpc::load<rpc::RequestTrailer>(buf + 56).seq, 5u);
}

TEST(Encoding, InlineOrIndirectByRequestSize) {
  // A 1024-byte slot: 32 header + body + pad + 4 trailer.
  EXPECT_TRUE(fits_inline(1024, 250, 1024 - 32 - 4 - 250));
  EXPECT_FALSE(fits_inline(1024, 250, 1024 - 32 - 4 - 250 + 1));
  EXPECT_TRUE(fits_inline(1024, 1, 0));
  EXPECT_FALSE(fits_inline(1024, 10, 60000));
  // Whatever the slot, an indirect request always fits one the client accepts.
  EXPECT_LE(rpc::request_bytes(sizeof(rpc::IndirectBody)), 64u);
}

TEST(Encoding, SeqStartsAtOneAndWrapsAtAMultipleOfTheWindow) {
  using rpc::next_seq;
  using rpc::seq_cycle;
  using rpc::seq_slot;
  EXPECT_EQ(next_seq(0, 4), 1u);  // the first request
  EXPECT_EQ(next_seq(1, 4), 2u);
  EXPECT_EQ(seq_cycle(4), 0xfffffffcu);
  EXPECT_EQ(next_seq(0xfffffffbu, 4), 0xfffffffcu);
  EXPECT_EQ(next_seq(0xfffffffcu, 4), 1u);
  EXPECT_EQ(next_seq(0xffffffffu, 1), 1u);  // W = 1: every non-zero number
  for (uint32_t window : {1u, 2u, 3u, 4u, 5u, 7u, 16u, 64u, 4096u}) {
    // Across the wrap, request number r (counted without end) and seq agree on the slot: a
    // client counting requests and a worker following seqs never point at different slots.
    // Every seq is non-zero, and a slot's previous seq is the one W requests earlier.
    uint32_t s = seq_cycle(window) - 200;
    uint64_t r = s;  // the request number of seq s + 1 (both count from 0 here)
    std::vector<uint32_t> seen;
    for (int i = 0; i < 600; ++i) {
      s = next_seq(s, window);
      ASSERT_NE(s, 0u);
      EXPECT_EQ(seq_slot(s, window), r % window) << "W " << window << " seq " << s;
      seen.push_back(s);
      if (seen.size() > window) {
        EXPECT_EQ(rpc::prev_in_slot(s, window), seen[seen.size() - 1 - window]) << s;
      }
      r++;
    }
    EXPECT_EQ(seq_slot(rpc::prev_in_slot(1, window), window), 0u);
    EXPECT_EQ(rpc::first_seq(0, window), 1u);
    EXPECT_EQ(rpc::first_seq(seq_cycle(window), window), seq_cycle(window));
    EXPECT_EQ(rpc::first_seq(uint64_t{seq_cycle(window)} + 1, window), 1u);
  }
  EXPECT_EQ(rpc::slot_offset(3, 4, 1024, 5), (3u * 4 + 1) * 1024);
}

TEST(Validation, EmptyAndOversizedKeysAndValues) {
  EXPECT_EQ(validate("", 0, 1000), Status::kInvalidKey);
  EXPECT_EQ(validate(std::string(store::kMaxKeySize, 'k'), 0, 1000), Status::kOk);
  EXPECT_EQ(validate(std::string(store::kMaxKeySize + 1, 'k'), 0, 1000), Status::kTooLarge);
  EXPECT_EQ(validate("k", 1000, 1000), Status::kOk);
  EXPECT_EQ(validate("k", 1001, 1000), Status::kTooLarge);
}

TEST(Responses, StatusMappingAndParsing) {
  EXPECT_EQ(from_wire(0), Status::kOk);
  EXPECT_EQ(from_wire(1), Status::kNotFound);
  EXPECT_EQ(from_wire(2), Status::kTooLarge);
  EXPECT_EQ(from_wire(3), Status::kInvalidKey);
  EXPECT_EQ(from_wire(4), Status::kNoSpace);
  EXPECT_EQ(from_wire(5), Status::kVersionMismatch);
  EXPECT_EQ(from_wire(6), Status::kMalformed);
  EXPECT_EQ(from_wire(7), Status::kError);
  EXPECT_EQ(from_wire(200), Status::kError);

  char buf[64] = {};
  rpc::ResponseHeader h{};
  h.seq = 9;
  h.value_len = 5;
  h.version = 17;
  rpc::store(buf, h);
  constexpr size_t kHeader = sizeof(rpc::ResponseHeader);
  std::memcpy(buf + kHeader, "value", 5);
  ParsedResponse r;
  ASSERT_TRUE(parse_response(buf, kHeader + 5, &r));
  EXPECT_EQ(r.header.seq, 9u);
  EXPECT_EQ(r.value, "value");
  ASSERT_TRUE(parse_response(buf, kHeader + 40 - 8, &r)) << "padding after the value is ignored";
  EXPECT_EQ(r.value, "value");
  EXPECT_FALSE(parse_response(buf, kHeader + 4, &r));  // value runs past the message
  EXPECT_FALSE(parse_response(buf, kHeader - 1, &r));  // shorter than a header
}

TEST(Client, StatusNames) {
  for (int s = 0; s <= static_cast<int>(Status::kContended); ++s)
    EXPECT_STRNE(to_string(static_cast<Status>(s)), "unknown status");
}

TEST(Client, ConnectFailuresThrowClientError) {
  ClientOptions o;
  o.server = "not-an-address";
  EXPECT_THROW(Client::connect(o), ClientError);
  o.server = "127.0.0.1:7000";
  o.protocol = "pilaf";
  EXPECT_THROW(Client::connect(o), ClientError);
  o.protocol = "herd";
  o.transport = "carrier-pigeon";
  EXPECT_THROW(Client::connect(o), ClientError);
  // Nothing listens on port 1: refused, quickly, as "server gone".
  o.transport = "";
  o.provider = "tcp";
  o.server = "127.0.0.1:1";
  o.connect_timeout_ms = 2000;
  auto t0 = std::chrono::steady_clock::now();
  try {
    Client::connect(o);
    FAIL() << "connected to nothing";
  } catch (const ClientError& e) {
    EXPECT_EQ(e.status(), Status::kServerGone) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

}  // namespace
}  // namespace fabkv::rpc
