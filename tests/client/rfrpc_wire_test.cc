// rfrpc::read_result (src/proto/rfrpc/wire.h), the one parser of results a client fetches by
// READ or finds WRITten into its ring: results landing byte by byte in random orders over what
// the slot held before (also between the parser's reads, as a worker's WRITE may land while the
// client polls) are taken whole or not at all; garbage, torn headers and wrong sizes are
// refused; a result larger than what was fetched asks for the rest. And the hybrid switch's
// decisions (src/proto/rfrpc/hybrid.h), without a peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/rfrpc/hybrid.h"
#include "proto/rfrpc/wire.h"
#include "support/landing.h"

namespace fabkv::rfrpc {
namespace {

constexpr size_t kMaxValue = 64;

// One result as the worker writes it (proto/rfrpc/server.cc): ResultHeader, then the
// rpc::ResponseHeader and the value.
std::vector<char> build_result(std::mt19937_64& rng, uint32_t seq, size_t value_len) {
  rpc::ResponseHeader r{};
  r.seq = seq;
  r.status = static_cast<uint8_t>(rng() % 4);
  r.op = static_cast<uint8_t>(1 + rng() % 3);
  r.value_len = static_cast<uint32_t>(value_len);
  r.version = rng();
  r.client = static_cast<uint16_t>(rng() % 4);
  std::vector<char> a(result_bytes(value_len), 0);
  std::memcpy(a.data() + sizeof(ResultHeader), &r, sizeof(r));
  for (size_t i = 0; i < value_len; ++i)
    a[sizeof(ResultHeader) + sizeof(r) + i] = static_cast<char>('a' + rng() % 26);
  ResultHeader h{};
  h.seq = seq;
  h.size = static_cast<uint32_t>(sizeof(r) + value_len);
  h.proc_time = encode_proc_time(rng() % 100000);
  h.mode = static_cast<uint8_t>(rng() % 2);
  h.check = result_check(h, a.data() + sizeof(h));
  std::memcpy(a.data(), &h, sizeof(h));
  return a;
}

using fabkv::testing::Landing;

TEST(RfrpcWire, LayoutIsThePapers) {
  // RF-RPC sec. 3.1: status, size and a 2-byte processing time in the result header.
  EXPECT_EQ(sizeof(ResultHeader), 16u);
  EXPECT_EQ(offsetof(ResultHeader, proc_time), 8u);
  EXPECT_EQ(sizeof(ResultHeader::proc_time), 2u);
  // The processing time: exact under 2048 ns, within 1/1024 above, saturating far away.
  for (uint64_t ns : {0ull, 1ull, 300ull, 2047ull})
    EXPECT_EQ(decode_proc_time(encode_proc_time(ns)), ns);
  for (uint64_t ns = 2048; ns < (uint64_t{1} << 40); ns = ns * 3 + 7) {
    const uint64_t back = decode_proc_time(encode_proc_time(ns));
    EXPECT_LE(back, ns);
    EXPECT_GE(back, ns - ns / 1024) << ns;
  }
  EXPECT_EQ(encode_proc_time(~uint64_t{0}), 0xffffu);
  // Slots are disjoint per client and request slot, and hold the largest result.
  EXPECT_EQ(result_offset(0, 4, kMaxValue, 1), 0u);
  EXPECT_EQ(result_offset(0, 4, kMaxValue, 5), 0u);
  EXPECT_EQ(result_offset(1, 4, kMaxValue, 1), 4 * result_slot_bytes(kMaxValue));
  EXPECT_GE(result_slot_bytes(kMaxValue), result_bytes(kMaxValue));
  EXPECT_EQ(result_slot_bytes(kMaxValue) % 8, 0u);
}

TEST(RfrpcWire, AResultLandingInAnyByteOrderIsTakenWholeOrNotAtAll) {
  std::mt19937_64 rng(20261124);
  alignas(8) char slot[result_slot_bytes(kMaxValue)];
  std::string copy;
  size_t refusals = 0, accepted_early = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const uint32_t seq = 5 + static_cast<uint32_t>(rng() % 1000);
    // The slot's previous result (W = 4 requests ago), or zeros.
    std::memset(slot, 0, sizeof(slot));
    if (trial % 2 == 0) {
      std::vector<char> old = build_result(rng, seq - 4, rng() % (kMaxValue + 1));
      std::memcpy(slot, old.data(), old.size());
    }
    const std::vector<char> a = build_result(rng, seq, rng() % (kMaxValue + 1));
    Landing landing(rng, a, slot);
    for (;;) {
      const bool was_done = landing.done();
      size_t total = 0;
      if (read_result(slot, sizeof(slot), seq, kMaxValue, &copy, &total, landing) ==
          ResultRead::kWhole) {
        ASSERT_EQ(copy, std::string(a.data(), a.size())) << "trial " << trial;
        accepted_early += !landing.done();
        break;
      }
      ASSERT_FALSE(was_done) << "trial " << trial << ": every byte landed and it was refused";
      refusals++;
      landing.land_one();
    }
  }
  EXPECT_GT(refusals, 5000u);
  EXPECT_GT(accepted_early, 0u);
}

TEST(RfrpcWire, GarbageTornAndWrongSizesAreRefused) {
  std::mt19937_64 rng(7);
  alignas(8) char slot[result_slot_bytes(kMaxValue)] = {};
  std::string copy;
  size_t total = 0;
  const std::vector<char> a = build_result(rng, 9, 40);
  std::memcpy(slot, a.data(), a.size());
  ASSERT_EQ(read_result(slot, sizeof(slot), 9, kMaxValue, &copy, &total), ResultRead::kWhole);
  // Not our seq: the slot's next use, or nothing yet.
  EXPECT_EQ(read_result(slot, sizeof(slot), 13, kMaxValue, &copy, &total), ResultRead::kNotReady);
  // Sizes no result has: under a response header, over the largest value.
  for (uint32_t bad : {0u, 31u, uint32_t(sizeof(rpc::ResponseHeader) + kMaxValue + 1), ~0u}) {
    std::memcpy(slot, a.data(), a.size());
    std::memcpy(slot + offsetof(ResultHeader, size), &bad, sizeof(bad));
    EXPECT_EQ(read_result(slot, sizeof(slot), 9, kMaxValue, &copy, &total), ResultRead::kBadSize)
        << bad;
  }
  // A plausible but wrong size, a flipped byte anywhere after the status, a torn header (the
  // previous result's fields next to our seq): the check fails.
  for (size_t at = sizeof(uint32_t); at < a.size(); ++at) {
    std::memcpy(slot, a.data(), a.size());
    slot[at] ^= 0x10;
    const ResultRead r = read_result(slot, sizeof(slot), 9, kMaxValue, &copy, &total);
    EXPECT_TRUE(r == ResultRead::kTorn || r == ResultRead::kBadSize) << "byte " << at;
  }
  const std::vector<char> prev = build_result(rng, 5, 8);
  std::memcpy(slot, prev.data(), prev.size());
  rpc::store<uint32_t>(slot, 9);
  EXPECT_EQ(read_result(slot, sizeof(slot), 9, kMaxValue, &copy, &total), ResultRead::kTorn);
  // Random garbage carrying our seq is never taken.
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : slot) b = static_cast<char>(rng());
    rpc::store<uint32_t>(slot, 9);
    if (i % 2) rpc::store<uint32_t>(slot + 4, static_cast<uint32_t>(32 + rng() % kMaxValue));
    ASSERT_NE(read_result(slot, sizeof(slot), 9, kMaxValue, &copy, &total), ResultRead::kWhole);
  }
}

// RF-RPC sec. 3.2: a result larger than the F bytes fetched asks for the rest, and is whole once
// the rest is there.
TEST(RfrpcWire, AResultLargerThanTheFetchAsksForTheRest) {
  std::mt19937_64 rng(11);
  alignas(8) char slot[result_slot_bytes(kMaxValue)] = {};
  const std::vector<char> a = build_result(rng, 3, kMaxValue);
  std::memcpy(slot, a.data(), a.size());
  std::string copy;
  size_t total = 0;
  const size_t fetched = 64;
  ASSERT_LT(fetched, a.size());
  EXPECT_EQ(read_result(slot, fetched, 3, kMaxValue, &copy, &total), ResultRead::kNeedMore);
  EXPECT_EQ(total, a.size());
  EXPECT_EQ(read_result(slot, total, 3, kMaxValue, &copy, &total), ResultRead::kWhole);
  EXPECT_EQ(copy.size(), a.size());
}

// A request batch as a client WRITEs it (proto/rfrpc/client_batch.cc): header, entries, tail.
std::vector<char> build_batch(std::mt19937_64& rng, uint32_t seq, uint16_t entries) {
  std::string payload;
  for (uint16_t i = 0; i < entries; ++i) {
    const uint32_t n = static_cast<uint32_t>(rng() % 60);
    std::string e(entry_bytes(n), '\0');
    std::memcpy(e.data(), &n, sizeof(n));
    for (uint32_t k = 0; k < n; ++k) e[4 + k] = static_cast<char>('a' + rng() % 26);
    payload += e;
  }
  BatchHeader h{};
  h.status_size = static_cast<uint32_t>(payload.size()) | kStatusBit;
  h.aux = 7;
  h.entries = entries;
  h.seq = seq;
  h.check = batch_check(h, payload.data(), payload.size());
  std::vector<char> a(sizeof(h) + payload.size() + sizeof(BatchTail));
  std::memcpy(a.data(), &h, sizeof(h));
  std::memcpy(a.data() + sizeof(h), payload.data(), payload.size());
  const BatchTail t{seq | kStatusBit};
  std::memcpy(a.data() + sizeof(h) + payload.size(), &t, sizeof(t));
  return a;
}

// RF-RPC sec. 4.1: a request batch is taken once its head and tail status agree and it checks,
// whatever order its bytes land in; never a mix with the slot's previous batch.
TEST(RfrpcBatchWire, ABatchLandingInAnyByteOrderIsTakenWholeOrNotAtAll) {
  std::mt19937_64 rng(99);
  constexpr size_t kPayload = 1024;
  std::vector<char> slot(batch_slot_bytes(kPayload));
  std::string copy;
  size_t refusals = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const uint32_t seq = 2 + static_cast<uint32_t>(rng() % 1000);
    std::fill(slot.begin(), slot.end(), 0);
    if (trial % 2 == 0) {
      const std::vector<char> old = build_batch(rng, seq - 1, static_cast<uint16_t>(rng() % 9));
      std::memcpy(slot.data(), old.data(), old.size());
    }
    const std::vector<char> a = build_batch(rng, seq, static_cast<uint16_t>(1 + rng() % 8));
    Landing landing(rng, a, slot.data());
    for (;;) {
      const bool was_done = landing.done();
      size_t total = 0;
      const BatchRead r = read_batch(slot.data(), slot.size(), seq, kPayload, true, &copy, &total,
                                     landing);
      if (r == BatchRead::kWhole) {
        ASSERT_EQ(copy, std::string(a.data(), a.size() - sizeof(BatchTail))) << trial;
        BatchHeader h;
        std::memcpy(&h, copy.data(), sizeof(h));
        size_t seen = 0;
        EXPECT_TRUE(for_each_entry(copy.data() + sizeof(h), copy.size() - sizeof(h), h.entries,
                                   [&](const char*, uint32_t) { seen++; }));
        EXPECT_EQ(seen, h.entries);
        break;
      }
      ASSERT_FALSE(was_done) << "trial " << trial << ": whole and refused";
      refusals++;
      landing.land_one();
    }
  }
  EXPECT_GT(refusals, 3000u);
}

TEST(RfrpcBatchWire, WrongSizesAndCountsAreRefused) {
  std::mt19937_64 rng(3);
  std::vector<char> slot(batch_slot_bytes(256));
  std::string copy;
  size_t total = 0;
  const std::vector<char> a = build_batch(rng, 4, 3);
  std::memcpy(slot.data(), a.data(), a.size());
  ASSERT_EQ(read_batch(slot.data(), slot.size(), 4, 256, true, &copy, &total), BatchRead::kWhole);
  EXPECT_EQ(read_batch(slot.data(), slot.size(), 5, 256, true, &copy, &total), BatchRead::kEmpty);
  // A payload size over the slot, or not 8-aligned.
  for (uint32_t bad : {uint32_t{264}, uint32_t{12}, uint32_t{0x7ffffff8}}) {
    std::vector<char> b = a;
    const uint32_t ss = bad | kStatusBit;
    std::memcpy(b.data(), &ss, sizeof(ss));
    std::memcpy(slot.data(), b.data(), b.size());
    EXPECT_NE(read_batch(slot.data(), slot.size(), 4, 256, true, &copy, &total), BatchRead::kWhole);
  }
  // Entries that do not add up to the payload.
  std::memcpy(slot.data(), a.data(), a.size());
  ASSERT_EQ(read_batch(slot.data(), slot.size(), 4, 256, true, &copy, &total), BatchRead::kWhole);
  EXPECT_FALSE(for_each_entry(copy.data() + 16, copy.size() - 16, 4, [](const char*, uint32_t) {}));
  EXPECT_FALSE(for_each_entry(copy.data() + 16, copy.size() - 16, 2, [](const char*, uint32_t) {}));
}

// RF-RPC sec. 3.2: two calls in a row with R failed fetches switch to server-reply; one does
// not; a quick call in between resets the count.
TEST(RfrpcHybrid, TwoSlowCallsInARowSwitchToServerReply) {
  HybridSwitch h(5, true, kModeFetch);
  EXPECT_EQ(h.on_result(5, 0, 0, false), std::nullopt);
  EXPECT_EQ(h.on_result(0, 0, 0, false), std::nullopt);  // quick: the count starts over
  EXPECT_EQ(h.on_result(7, 0, 0, false), std::nullopt);
  EXPECT_EQ(h.on_result(4, 0, 0, false), std::nullopt);  // R - 1 failures is not slow
  EXPECT_EQ(h.on_result(5, 0, 0, false), std::nullopt);
  EXPECT_EQ(h.on_result(6, 0, 0, false), std::optional<uint8_t>(kModeReply));
  EXPECT_EQ(h.mode(), kModeReply);
}

// A call as long as R fetches is slow too (tcp: READs wait instead of failing); before any
// fetch was seen, time says nothing.
TEST(RfrpcHybrid, ACallAsLongAsRFailedFetchesIsSlow) {
  HybridSwitch h(5, true, kModeFetch);
  EXPECT_EQ(h.on_result(0, 1'000'000, 0, false), std::nullopt);
  EXPECT_EQ(h.on_result(0, 1'000'000, 0, false), std::nullopt);  // no fetch timed yet
  h.on_fetch(30'000);
  h.on_fetch(20'000);  // the quickest counts
  h.on_fetch(50'000);
  EXPECT_EQ(h.fetch_rtt_ns(), 20'000u);
  EXPECT_EQ(h.covered_ns(), 100'000u);
  EXPECT_EQ(h.on_result(1, 99'000, 0, false), std::nullopt);
  EXPECT_EQ(h.on_result(1, 100'000, 0, false), std::nullopt);  // the first slow one
  EXPECT_EQ(h.on_result(1, 640'000, 0, false), std::optional<uint8_t>(kModeReply));
}

// In server-reply mode the recorded processing time decides: two results in a row under half
// of what R fetches cover switch back; results WRITten while fetching are no signal.
TEST(RfrpcHybrid, FallingProcessingTimeSwitchesBack) {
  HybridSwitch h(5, true, kModeFetch);
  h.on_fetch(20'000);                                   // R fetches cover 100 us
  EXPECT_EQ(h.on_result(0, 0, 0, true), std::nullopt);  // from the ring while fetching
  h.on_result(9, 0, 0, false);
  ASSERT_EQ(h.on_result(9, 0, 0, false), std::optional<uint8_t>(kModeReply));
  EXPECT_EQ(h.on_result(0, 0, 640'000, true), std::nullopt);
  EXPECT_EQ(h.on_result(0, 0, 40'000, true), std::nullopt);  // one quick result
  EXPECT_EQ(h.on_result(0, 0, 60'000, true), std::nullopt);  // over 50 us: starts over
  EXPECT_EQ(h.on_result(0, 0, 49'000, true), std::nullopt);
  EXPECT_EQ(h.on_result(0, 0, 1'000, true), std::optional<uint8_t>(kModeFetch));
  EXPECT_EQ(h.mode(), kModeFetch);
}

// A queue on the worker fails fetches while each result's processing time stays short: without
// hysteresis the client flipped every other call (docs/results/rpc-family-2026-11-23.md). Short
// stays in fetch mode double the calm needed to switch back, so flips become rare; a long stay
// resets it, and a switch back still happens when the calm lasts.
TEST(RfrpcHybrid, ShortStaysInFetchModeMakeSwitchingBackHarder) {
  HybridSwitch h(5, true, kModeFetch);
  h.on_fetch(20'000);  // R fetches cover 100 us
  uint32_t flips = 0;
  for (int call = 0; call < 10'000; ++call) {
    // Queued: every fetch fails R times; answered quickly once in reply mode.
    const bool fetching = h.mode() == kModeFetch;
    if (h.on_result(fetching ? 5 : 0, 0, 1'000, !fetching)) flips++;
  }
  // Without the backoff: a flip every 2 calls (5 000). With it: 2 + 4 + ... + 1024 calls of calm
  // for the first ten round trips, then one round trip per ~1026 calls.
  EXPECT_LE(flips, 40u);
  EXPECT_GE(flips, 10u);  // it still tries fetching again now and then
  EXPECT_EQ(h.calm_needed(), HybridSwitch::kMaxCalm);

  // A calm stretch in fetch mode (no failed fetches for kShortStay calls) resets the need.
  while (h.mode() != kModeFetch) h.on_result(0, 0, 1'000, true);
  for (uint32_t i = 0; i < HybridSwitch::kShortStay; ++i)
    EXPECT_EQ(h.on_result(0, 0, 1'000, false), std::nullopt);
  h.on_result(5, 0, 1'000, false);
  ASSERT_EQ(h.on_result(5, 0, 1'000, false), std::optional<uint8_t>(kModeReply));
  EXPECT_EQ(h.calm_needed(), HybridSwitch::kInARow);
  h.on_result(0, 0, 1'000, true);
  EXPECT_EQ(h.on_result(0, 0, 1'000, true), std::optional<uint8_t>(kModeFetch));
}

// --rfrpc-mode fetch or reply: never switches.
TEST(RfrpcHybrid, FixedModesNeverSwitch) {
  for (uint8_t m : {kModeFetch, kModeReply}) {
    HybridSwitch h(1, false, m);
    h.on_fetch(1);
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(h.on_result(100, 1'000'000, i % 2 ? 0 : 1'000'000, false), std::nullopt);
    EXPECT_EQ(h.mode(), m);
  }
}

}  // namespace
}  // namespace fabkv::rfrpc
