// rpc::read_request (src/proto/rpc/wire.h) against requests that land byte by byte in random
// orders over the slot's previous request, also between the reads it makes, as a client's
// WRITE may land while the worker scans: whenever it says kWhole, the header it hands out is
// exactly the new request's, and once every byte has landed it says kWhole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/rpc/request.h"
#include "proto/rpc/wire.h"
#include "support/landing.h"

namespace fabkv::rpc {
namespace {

constexpr uint32_t kWindow = 4;
constexpr size_t kSlot = 256;

std::vector<char> build_request(std::mt19937_64& rng, uint32_t seq) {
  RequestFields f;
  f.seq = seq;
  f.client = static_cast<uint16_t>(rng() % 3);
  f.epoch = static_cast<uint16_t>(rng() % 3);
  f.op = static_cast<OpCode>(1 + rng() % 3);
  f.expected_version = rng() % 2 ? rng() : 0;
  f.expire_at = static_cast<uint32_t>(rng() % 2 ? rng() : 0);
  std::string key(1 + rng() % 40, 'k'), value(f.op == OpCode::kPut ? rng() % 100 : 0, 'v');
  for (char& ch : key) ch = static_cast<char>('a' + rng() % 26);
  std::vector<char> out(kSlot, 0);
  if (rng() % 4 == 0) {
    IndirectBody ib{rng(), rng(), key.size() + value.size()};
    out.resize(encode_indirect(out.data(), f, static_cast<uint16_t>(key.size()),
                               static_cast<uint32_t>(value.size()), ib));
  } else {
    out.resize(encode_inline(out.data(), f, key, value));
  }
  return out;
}

using fabkv::testing::Landing;

TEST(RequestWire, ARequestLandingInAnyByteOrderIsWholeOnlyWhenItIs) {
  std::mt19937_64 rng(1123);
  alignas(8) char slot[kSlot];
  size_t landing_seen = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const uint32_t seq = kWindow + 1 + static_cast<uint32_t>(rng() % 1000);
    std::memset(slot, 0, sizeof(slot));
    const std::vector<char> prev = build_request(rng, seq - kWindow);
    std::memcpy(slot, prev.data(), prev.size());
    const std::vector<char> a = build_request(rng, seq);
    RequestHeader want;
    std::memcpy(&want, a.data(), sizeof(want));
    Landing landing(rng, a, slot);
    for (;;) {
      const bool was_done = landing.done();
      RequestHeader h;
      SlotRead r = read_request(slot, seq, kWindow, kSlot, &h, landing);
      if (r == SlotRead::kWhole) {
        ASSERT_EQ(0, std::memcmp(&h, &want, sizeof(h))) << "trial " << trial;
        const size_t body = request_body_bytes(h.flags, h.key_len, h.value_len);
        ASSERT_EQ(0, std::memcmp(slot + sizeof(h), a.data() + sizeof(h), body))
            << "trial " << trial;
        break;
      }
      ASSERT_FALSE(was_done) << "trial " << trial << ": whole, yet read as " << static_cast<int>(r);
      landing_seen += r != SlotRead::kEmpty;
      landing.land_one();
    }
  }
  EXPECT_GT(landing_seen, 5000u);
}

TEST(RequestWire, EmptyPreviousGarbageAndImpossibleLengths) {
  alignas(8) char slot[kSlot] = {};
  RequestHeader h;
  EXPECT_EQ(read_request(slot, 9, kWindow, kSlot, &h), SlotRead::kEmpty);
  std::mt19937_64 rng(3);
  std::vector<char> prev = build_request(rng, 5);
  std::memcpy(slot, prev.data(), prev.size());
  EXPECT_EQ(read_request(slot, 9, kWindow, kSlot, &h), SlotRead::kEmpty);  // still seq 5
  std::memset(slot, 0x5A, sizeof(slot));
  EXPECT_EQ(read_request(slot, 9, kWindow, kSlot, &h), SlotRead::kLanding);  // garbage
  std::vector<char> a = build_request(rng, 9);
  std::memcpy(slot, a.data(), a.size());
  EXPECT_EQ(read_request(slot, 9, kWindow, kSlot, &h), SlotRead::kWhole);
  RequestHeader big;
  std::memcpy(&big, slot, sizeof(big));
  big.flags = 0;
  big.value_len = kSlot;  // more than the slot holds
  std::memcpy(slot, &big, sizeof(big));
  EXPECT_EQ(read_request(slot, 9, kWindow, kSlot, &h), SlotRead::kTooLong);
}

// After the wrap, a slot still holds the last request of the previous cycle: that is an empty
// slot, not garbage to be answered kMalformed once it has sat there long enough.
TEST(RequestWire, TheSlotsPreviousRequestAcrossTheWrapIsEmpty) {
  alignas(8) char slot[kSlot] = {};
  RequestHeader h;
  std::mt19937_64 rng(5);
  for (uint32_t seq = 1; seq <= kWindow; ++seq) {
    const uint32_t prev = seq_cycle(kWindow) - kWindow + seq;
    ASSERT_EQ(seq_slot(prev, kWindow), seq_slot(seq, kWindow));
    const std::vector<char> p = build_request(rng, prev);
    std::memset(slot, 0, sizeof(slot));
    std::memcpy(slot, p.data(), p.size());
    EXPECT_EQ(read_request(slot, seq, kWindow, kSlot, &h), SlotRead::kEmpty) << "seq " << seq;
    const std::vector<char> a = build_request(rng, seq);
    std::memcpy(slot, a.data(), a.size());
    EXPECT_EQ(read_request(slot, seq, kWindow, kSlot, &h), SlotRead::kWhole) << "seq " << seq;
  }
}

}  // namespace
}  // namespace fabkv::rpc
