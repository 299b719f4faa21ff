// The control wire format without a peer: round trips, every truncation, garbage, limits.
#include "control/wire.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "control/auth.h"
#include "control/client.h"
#include "support/hex.h"

namespace fabkv::control {
namespace {

Hello sample_hello() {
  Hello h;
  h.auth = AuthMethod::kHmacSha256;
  h.service = "perf";
  h.provider = "tcp;ofi_rxm";
  h.fabric_address = {1, 2, 3, 4, 5, 6, 7, 8, 0, 255};
  h.payload = {9, 8, 7};
  return h;
}

Welcome sample_welcome() {
  Welcome w;
  w.status = Status::kOk;
  w.message = "hi";
  w.session_id = 0x0102030405060708ull;
  w.provider = "shm";
  w.fabric_addresses = {{1, 2, 3}, {}, std::vector<uint8_t>(100, 0xab)};
  w.regions.push_back({"perf.target", 0x7f0000001000ull, 1 << 20, 0xdeadbeefull,
                       kRemoteRead | kRemoteWrite});
  w.regions.push_back({"atomics", 64, 4096, 7, kRemoteAtomic});
  w.payload = {0, 1, 2, 3, 4};
  return w;
}

Challenge sample_challenge() {
  Challenge c;
  for (size_t i = 0; i < kNonceSize; ++i) c.nonce.push_back(static_cast<uint8_t>(0xa0 + i));
  return c;
}

Proof sample_proof() {
  Proof p;
  for (size_t i = 0; i < kProofSize; ++i) p.mac.push_back(static_cast<uint8_t>(i * 7));
  return p;
}

void set_u32(std::vector<uint8_t>& f, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) f[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(ControlWire, HeaderLayoutIsLittleEndianFkvc) {
  auto f = encode(sample_hello());
  ASSERT_GE(f.size(), kFrameHeaderSize);
  EXPECT_EQ(std::string(f.begin(), f.begin() + 4), "FKVC");
  EXPECT_EQ(f[4], kProtocolVersion & 0xff);
  EXPECT_EQ(f[5], kProtocolVersion >> 8);
  EXPECT_EQ(f[6], static_cast<uint8_t>(FrameType::kHello));
  EXPECT_EQ(f[7], 0);
  uint32_t len = f[8] | f[9] << 8 | f[10] << 16 | f[11] << 24;
  EXPECT_EQ(len, f.size() - kFrameHeaderSize);
  // v2: the body starts with auth u16 (1, HMAC-SHA256) and reserved u16, then the service
  // as u32 length + bytes. No secret anywhere.
  EXPECT_EQ(f[12], 1);
  EXPECT_EQ(f[13], 0);
  EXPECT_EQ(f[14], 0);
  EXPECT_EQ(f[15], 0);
  EXPECT_EQ(f[16], 4);
  EXPECT_EQ(std::string(f.begin() + 20, f.begin() + 24), "perf");
  // An empty Hello is 32 bytes, as the docs say.
  EXPECT_EQ(encode(Hello{}).size(), 32u);
}

TEST(ControlWire, ChallengeAndProofLayouts) {
  auto c = encode(sample_challenge());
  ASSERT_EQ(c.size(), kFrameHeaderSize + 2 + 2 + 4 + kNonceSize);
  EXPECT_EQ(c[6], static_cast<uint8_t>(FrameType::kChallenge));
  EXPECT_EQ(c[12], 1);  // method: HMAC-SHA256
  EXPECT_EQ(c[16], kNonceSize);
  EXPECT_EQ(c[20], 0xa0);
  auto p = encode(sample_proof());
  ASSERT_EQ(p.size(), kFrameHeaderSize + 4 + kProofSize);
  EXPECT_EQ(p[6], static_cast<uint8_t>(FrameType::kProof));
  EXPECT_EQ(p[12], kProofSize);
}

TEST(ControlWire, ChallengeAndProofRoundTrip) {
  auto c = encode(sample_challenge());
  ChallengeParse cp = parse_challenge(c);
  ASSERT_EQ(cp.status, Status::kOk) << cp.error;
  EXPECT_EQ(cp.challenge, sample_challenge());
  EXPECT_EQ(encode(cp.challenge), c);
  EXPECT_TRUE(check_limits(cp.challenge).empty());
  auto p = encode(sample_proof());
  ProofParse pp = parse_proof(p);
  ASSERT_EQ(pp.status, Status::kOk) << pp.error;
  EXPECT_EQ(pp.proof, sample_proof());
  EXPECT_EQ(encode(pp.proof), p);
  EXPECT_TRUE(check_limits(pp.proof).empty());
}

TEST(ControlWire, ChallengeAndProofOfTheWrongSizeOrKindAreRejected) {
  for (size_t n : {size_t{0}, kNonceSize - 1, kNonceSize + 1}) {
    Challenge c = sample_challenge();
    c.nonce.resize(n, 1);
    ChallengeParse cp = parse_challenge(encode(c));
    EXPECT_EQ(cp.status, Status::kMalformed) << n;
    EXPECT_NE(cp.error.find("nonce"), std::string::npos) << cp.error;
    EXPECT_FALSE(check_limits(c).empty());
  }
  for (size_t n : {size_t{0}, kProofSize - 1, kProofSize + 1}) {
    Proof p = sample_proof();
    p.mac.resize(n, 1);
    ProofParse pp = parse_proof(encode(p));
    EXPECT_EQ(pp.status, Status::kMalformed) << n;
    EXPECT_NE(pp.error.find("mac"), std::string::npos) << pp.error;
    EXPECT_FALSE(check_limits(p).empty());
  }
  auto c = encode(sample_challenge());
  c[12] = 0;  // method none
  EXPECT_EQ(parse_challenge(c).status, Status::kMalformed);
  c = encode(sample_challenge());
  c[14] = 1;  // reserved
  EXPECT_EQ(parse_challenge(c).status, Status::kMalformed);
  // Each parser takes its own frame type only.
  EXPECT_EQ(parse_challenge(encode(sample_proof())).status, Status::kMalformed);
  EXPECT_EQ(parse_proof(encode(sample_challenge())).status, Status::kMalformed);
  EXPECT_EQ(parse_hello(encode(sample_proof())).status, Status::kMalformed);
  // Another version's: refused by version.
  auto p = encode(sample_proof());
  p[4] = 1;
  ProofParse pp = parse_proof(p);
  EXPECT_EQ(pp.status, Status::kBadVersion);
  EXPECT_NE(pp.error.find("version 1"), std::string::npos) << pp.error;
}

TEST(ControlWire, HelloRoundTrip) {
  Hello h = sample_hello();
  auto f = encode(h);
  HelloParse p = parse_hello(f);
  ASSERT_EQ(p.status, Status::kOk) << p.error;
  EXPECT_EQ(p.hello, h);
  EXPECT_EQ(encode(p.hello), f);

  Hello empty;
  p = parse_hello(encode(empty));
  ASSERT_EQ(p.status, Status::kOk) << p.error;
  EXPECT_EQ(p.hello, empty);
}

TEST(ControlWire, WelcomeRoundTrip) {
  Welcome w = sample_welcome();
  auto f = encode(w);
  WelcomeParse p = parse_welcome(f);
  ASSERT_EQ(p.status, Status::kOk) << p.error;
  EXPECT_EQ(p.welcome, w);
  EXPECT_EQ(encode(p.welcome), f);

  Welcome rej;
  rej.status = Status::kBadSecret;
  rej.message = "wrong secret";
  p = parse_welcome(encode(rej));
  ASSERT_EQ(p.status, Status::kOk) << p.error;
  EXPECT_EQ(p.welcome, rej);
}

TEST(ControlWire, ErrorAndOpaqueFramesRoundTrip) {
  auto e = encode_error(Status::kRejected, "no");
  ErrorParse ep = parse_error(e);
  ASSERT_EQ(ep.status, Status::kOk) << ep.error;
  EXPECT_EQ(ep.reported, Status::kRejected);
  EXPECT_EQ(ep.message, "no");

  std::vector<uint8_t> body = {1, 2, 3};
  auto f = encode_frame(FrameType::kRequest, body);
  HeaderParse hp = parse_header(f);
  ASSERT_EQ(hp.status, Status::kOk);
  EXPECT_EQ(hp.header.type, static_cast<uint16_t>(FrameType::kRequest));
  EXPECT_EQ(hp.header.body_length, 3u);
  EXPECT_EQ(std::vector<uint8_t>(f.begin() + kFrameHeaderSize, f.end()), body);
}

// Seastar-style: every valid frame cut at every byte boundary must be rejected, both as cut
// (header length disagrees) and with the header patched to the cut length (so the body
// parser itself meets the end of input inside a field).
template <typename Parse>
void expect_every_truncation_rejected(const std::vector<uint8_t>& frame, Parse parse) {
  for (size_t cut = 0; cut < frame.size(); ++cut) {
    std::vector<uint8_t> t(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(cut));
    auto r = parse(t);
    EXPECT_EQ(r.status, Status::kMalformed) << "cut at " << cut;
    EXPECT_FALSE(r.error.empty());
    if (cut >= kFrameHeaderSize) {
      set_u32(t, 8, static_cast<uint32_t>(cut - kFrameHeaderSize));
      auto r2 = parse(t);
      EXPECT_EQ(r2.status, Status::kMalformed) << "patched cut at " << cut;
      EXPECT_FALSE(r2.error.empty());
    }
  }
}

TEST(ControlWire, EveryTruncationIsRejected) {
  expect_every_truncation_rejected(encode(sample_hello()), [](auto s) { return parse_hello(s); });
  expect_every_truncation_rejected(encode(Hello{}), [](auto s) { return parse_hello(s); });
  expect_every_truncation_rejected(encode(sample_welcome()),
                                   [](auto s) { return parse_welcome(s); });
  expect_every_truncation_rejected(encode(Welcome{}), [](auto s) { return parse_welcome(s); });
  expect_every_truncation_rejected(encode_error(Status::kTimeout, "late"),
                                   [](auto s) { return parse_error(s); });
  expect_every_truncation_rejected(encode(sample_challenge()),
                                   [](auto s) { return parse_challenge(s); });
  expect_every_truncation_rejected(encode(sample_proof()), [](auto s) { return parse_proof(s); });
}

TEST(ControlWire, TrailingBytesAreRejected) {
  auto f = encode(sample_hello());
  f.push_back(0);
  set_u32(f, 8, static_cast<uint32_t>(f.size() - kFrameHeaderSize));
  HelloParse p = parse_hello(f);
  EXPECT_EQ(p.status, Status::kMalformed);
  EXPECT_NE(p.error.find("trailing"), std::string::npos) << p.error;
}

TEST(ControlWire, WrongMagicTypeAndOversizeAreRejected) {
  auto f = encode(sample_hello());
  auto bad = f;
  bad[0] = 'X';
  HelloParse p = parse_hello(bad);
  EXPECT_EQ(p.status, Status::kMalformed);
  EXPECT_NE(p.error.find("magic"), std::string::npos) << p.error;

  p = parse_hello(encode(sample_welcome()));
  EXPECT_EQ(p.status, Status::kMalformed);
  EXPECT_NE(p.error.find("expected a hello"), std::string::npos) << p.error;

  bad = f;
  set_u32(bad, 8, kMaxFrameSize + 1);
  HeaderParse hp = parse_header(bad);
  EXPECT_EQ(hp.status, Status::kMalformed);
  EXPECT_NE(hp.error.find("exceeds"), std::string::npos) << hp.error;
}

TEST(ControlWire, WrongVersionNamesBothVersions) {
  Hello h = sample_hello();
  h.version = 7;
  HelloParse p = parse_hello(encode(h));
  EXPECT_EQ(p.status, Status::kBadVersion);
  EXPECT_EQ(p.hello.version, 7);
  EXPECT_NE(p.error.find("version 7"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("version 2"), std::string::npos) << p.error;

  // A Welcome from a future server: only the frozen prefix is read, and its message shown.
  Welcome w;
  w.status = Status::kBadVersion;
  w.message = "server speaks 3";
  auto f = encode(w);
  f[4] = 3;
  WelcomeParse wp = parse_welcome(f);
  EXPECT_EQ(wp.status, Status::kBadVersion);
  EXPECT_EQ(wp.welcome.status, Status::kBadVersion);
  EXPECT_NE(wp.error.find("server speaks 3"), std::string::npos) << wp.error;

  // A v1 server's refusal of a v2 client keeps its frozen prefix: the client reads its reason.
  w.message = "client speaks control protocol version 2, server speaks version 1";
  f = encode(w);
  f[4] = 1;
  wp = parse_welcome(f);
  EXPECT_EQ(wp.status, Status::kBadVersion);
  EXPECT_NE(wp.error.find("server speaks version 1"), std::string::npos) << wp.error;
}

TEST(ControlWire, FieldLimitsAreEnforced) {
  Hello h;
  h.auth = static_cast<AuthMethod>(2);  // no such method
  HelloParse p = parse_hello(encode(h));
  EXPECT_EQ(p.status, Status::kMalformed);
  EXPECT_NE(p.error.find("auth"), std::string::npos) << p.error;
  EXPECT_FALSE(check_limits(h).empty());
  auto hf = encode(Hello{});
  hf[14] = 1;  // reserved
  p = parse_hello(hf);
  EXPECT_EQ(p.status, Status::kMalformed);
  EXPECT_NE(p.error.find("reserved"), std::string::npos) << p.error;

  h = Hello{};
  h.service.assign(kMaxServiceSize + 1, 's');
  EXPECT_EQ(parse_hello(encode(h)).status, Status::kMalformed);
  h = Hello{};
  h.fabric_address.assign(kMaxAddressSize + 1, 1);
  EXPECT_EQ(parse_hello(encode(h)).status, Status::kMalformed);

  Welcome w;
  w.regions.resize(kMaxRegions);
  EXPECT_EQ(parse_welcome(encode(w)).status, Status::kOk);
  EXPECT_TRUE(check_limits(w).empty());
  w.regions.resize(kMaxRegions + 1);
  EXPECT_EQ(parse_welcome(encode(w)).status, Status::kMalformed);
  EXPECT_FALSE(check_limits(w).empty());

  w = Welcome{};
  w.fabric_addresses.resize(kMaxAddresses + 1);
  EXPECT_EQ(parse_welcome(encode(w)).status, Status::kMalformed);

  w = Welcome{};
  w.regions.push_back({"r", 0, 0, 0, 8});
  WelcomeParse wp = parse_welcome(encode(w));
  EXPECT_EQ(wp.status, Status::kMalformed);
  EXPECT_NE(wp.error.find("access"), std::string::npos) << wp.error;
  EXPECT_FALSE(check_limits(w).empty());

  // A huge region count must be rejected before anything is allocated for it.
  auto f = encode(Welcome{});
  size_t count_off = f.size() - 8;  // region_count u32, then payload length u32
  set_u32(f, count_off, 0xffffffffu);
  EXPECT_EQ(parse_welcome(f).status, Status::kMalformed);

  // Status outside the wire range and a nonzero reserved field.
  f = encode(Welcome{});
  f[12] = 200;
  EXPECT_EQ(parse_welcome(f).status, Status::kMalformed);
  f = encode(Welcome{});
  f[14] = 1;
  EXPECT_EQ(parse_welcome(f).status, Status::kMalformed);

  // encode() cuts an over-long message so a server's reason always fits.
  w = Welcome{};
  w.status = Status::kRejected;
  w.message.assign(kMaxMessageSize + 100, 'm');
  wp = parse_welcome(encode(w));
  ASSERT_EQ(wp.status, Status::kOk) << wp.error;
  EXPECT_EQ(wp.welcome.message.size(), kMaxMessageSize);
}

// Random bytes, and random bytes behind a valid header, never crash the parsers; whatever
// parses must re-encode to the same bytes.
TEST(ControlWire, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(12345);
  const auto seeds = {encode(sample_hello()), encode(sample_welcome()), encode(sample_challenge()),
                      encode(sample_proof())};
  size_t parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> f;
    switch (iter % 3) {
      case 0: {  // pure garbage
        f.resize(rng() % 200);
        for (auto& b : f) b = static_cast<uint8_t>(rng());
        break;
      }
      case 1: {  // valid header, garbage body of the announced length
        const FrameType types[] = {FrameType::kHello, FrameType::kWelcome, FrameType::kChallenge,
                                   FrameType::kProof};
        f = encode_frame(types[rng() % 4], {});
        size_t n = rng() % 200;
        for (size_t i = 0; i < n; ++i) f.push_back(static_cast<uint8_t>(rng()));
        set_u32(f, 8, static_cast<uint32_t>(n));
        break;
      }
      default: {  // a valid frame with a few bytes mutated
        f = *(seeds.begin() + static_cast<std::ptrdiff_t>(rng() % seeds.size()));
        for (int k = 0; k < 3; ++k) f[rng() % f.size()] = static_cast<uint8_t>(rng());
        break;
      }
    }
    HelloParse hp = parse_hello(f);
    if (hp.status == Status::kOk) {
      ++parsed;
      EXPECT_EQ(encode(hp.hello), f);
    } else {
      EXPECT_FALSE(hp.error.empty());
    }
    WelcomeParse wp = parse_welcome(f);
    if (wp.status == Status::kOk) {
      ++parsed;
      EXPECT_EQ(encode(wp.welcome), f);
    } else {
      EXPECT_FALSE(wp.error.empty());
    }
    ChallengeParse cp = parse_challenge(f);
    if (cp.status == Status::kOk) {
      ++parsed;
      EXPECT_EQ(encode(cp.challenge), f);
    } else {
      EXPECT_FALSE(cp.error.empty());
    }
    ProofParse pp = parse_proof(f);
    if (pp.status == Status::kOk) {
      ++parsed;
      EXPECT_EQ(encode(pp.proof), f);
    } else {
      EXPECT_FALSE(pp.error.empty());
    }
  }
  // Mutating payload bytes leaves many frames valid: the round-trip check above ran.
  EXPECT_GT(parsed, 0u);
}

// The challenge-response's MAC is HMAC-SHA256(secret, label || nonce || Hello frame), as
// docs/control-channel.md says: checked against Python's hmac module on the same bytes.
TEST(ControlAuth, ProofIsHmacSha256OverLabelNonceAndHello) {
  std::vector<uint8_t> nonce(kNonceSize);
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(i);
  std::string hello = "FKVC a hello frame";
  std::vector<uint8_t> frame(hello.begin(), hello.end());
  // python3: hmac.new(b'open sesame', b'fabkv control proof v2 hmac' + bytes(range(32)) +
  //                   b'FKVC a hello frame', hashlib.sha256).hexdigest()
  EXPECT_EQ(fabkv::testing::to_hex(compute_proof("open sesame", nonce, frame)),
            "c275a0f8e1deda7f4b7c82414b5efc62564b4b105ddaeb61ed8a96ddfd2bb974");
  frame.push_back('!');
  EXPECT_EQ(fabkv::testing::to_hex(compute_proof("open sesame", nonce, frame)),
            "ee4361866b431b6d441ecdaee8be105a286c9210dbcefb22d19f8014300aef26");
}

TEST(ControlAuth, ProofsMatchOnlyWhenEqual) {
  std::vector<uint8_t> nonce(kNonceSize, 7), frame = {1, 2, 3};
  auto a = compute_proof("k", nonce, frame);
  EXPECT_TRUE(proof_matches(a, a));
  for (size_t i = 0; i < a.size(); ++i) {
    auto b = a;
    b[i] ^= 1;
    EXPECT_FALSE(proof_matches(a, b)) << i;
  }
  EXPECT_FALSE(proof_matches(a, std::span(a).first(a.size() - 1)));
  EXPECT_FALSE(proof_matches({}, {}));
  EXPECT_FALSE(proof_matches(a, compute_proof("K", nonce, frame)));
  nonce[0] = 8;
  EXPECT_FALSE(proof_matches(a, compute_proof("k", nonce, frame)));
}

TEST(ControlAuth, NoncesAreFreshAndFullSize) {
  std::set<std::vector<uint8_t>> seen;
  for (int i = 0; i < 100; ++i) {
    auto n = make_nonce();
    EXPECT_EQ(n.size(), kNonceSize);
    seen.insert(n);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(ControlWire, StatusNames) {
  EXPECT_STREQ(to_string(Status::kOk), "ok");
  EXPECT_STREQ(to_string(Status::kBadSecret), "bad secret");
  EXPECT_STREQ(to_string(static_cast<Status>(999)), "unknown status");
}

TEST(ControlSplitHostPort, AcceptsV4V6AndNames) {
  std::string h;
  uint16_t p = 0;
  ASSERT_TRUE(split_host_port("127.0.0.1:7000", &h, &p));
  EXPECT_EQ(h, "127.0.0.1");
  EXPECT_EQ(p, 7000);
  ASSERT_TRUE(split_host_port("[::1]:65535", &h, &p));
  EXPECT_EQ(h, "::1");
  EXPECT_EQ(p, 65535);
  ASSERT_TRUE(split_host_port("node-3.example:0", &h, &p));
  EXPECT_EQ(h, "node-3.example");
  EXPECT_EQ(p, 0);
}

TEST(ControlSplitHostPort, RejectsGarbage) {
  std::string h;
  uint16_t p = 0;
  for (const char* bad :
       {"", ":", "host", "host:", ":80", "host:65536", "host:8x", "host:-1", "::1:80", "[::1]",
        "[::1]80", "[::1]:", "[]:80", "[host]:80", "a:1:2", "host:123456", "[::1:80"}) {
    EXPECT_FALSE(split_host_port(bad, &h, &p)) << bad;
  }
}

}  // namespace
}  // namespace fabkv::control
