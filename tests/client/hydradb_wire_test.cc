// What a hydradb client reads from memory others write, without a peer:
//   * hydradb::read_answer (src/proto/hydradb/wire.h) against answers landing byte by byte in
//     random orders over what the ring slot held before: whenever it accepts, it hands out
//     exactly the new answer (ItemRef included), and once every byte has landed it accepts;
//     wrong seq, impossible length, a flipped byte are refused;
//   * hydradb::check_item (src/proto/hydradb/layout.h) against an item READ while its memory
//     was being reused (bytes of the next item landing over it in any order), garbage, a torn
//     header and a wrong size: kCurrent only for the whole item it cached.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/hydradb/layout.h"
#include "proto/hydradb/wire.h"
#include "support/landing.h"

namespace fabkv::hydradb {
namespace {

using fabkv::testing::Landing;
constexpr size_t kMaxValue = 64;

std::vector<char> build_answer(std::mt19937_64& rng, uint32_t seq) {
  rpc::ResponseHeader h{};
  h.seq = seq;
  h.status = static_cast<uint8_t>(rng() % 4);
  h.op = static_cast<uint8_t>(rng() % 3);
  h.worker = static_cast<uint16_t>(rng() % 2);
  h.value_len = static_cast<uint32_t>(rng() % (kMaxValue + 1));
  h.version = rng();
  std::vector<char> a(response_bytes(h.value_len), 0);
  std::memcpy(a.data(), &h, sizeof(h));
  for (size_t i = 0; i < h.value_len; ++i) a[sizeof(h) + i] = static_cast<char>('a' + rng() % 26);
  ItemRef ref{rng() % 2 ? rng() % 100000 * 8 : kNoItem, static_cast<uint32_t>(rng()), 0};
  std::memcpy(a.data() + ref_offset(h.value_len), &ref, sizeof(ref));
  ResponseTrailer t{seq, response_check(a.data(), h.value_len, seq)};
  std::memcpy(a.data() + trailer_offset(h.value_len), &t, sizeof(t));
  return a;
}

TEST(HydraWire, AnAnswerLandingInAnyByteOrderIsTakenWholeOrNotAtAll) {
  std::mt19937_64 rng(20261123);
  alignas(8) char slot[ring_slot_bytes(kMaxValue)];
  std::string copy;
  size_t refusals = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const uint32_t seq = 5 + static_cast<uint32_t>(rng() % 1000);
    std::memset(slot, 0, sizeof(slot));
    const std::vector<char> old = build_answer(rng, seq - 4);
    std::memcpy(slot, old.data(), old.size());
    if (trial % 2 == 0) std::memset(slot, 0, sizeof(rpc::ResponseHeader));  // taken
    const std::vector<char> a = build_answer(rng, seq);
    rpc::ResponseHeader h;
    std::memcpy(&h, a.data(), sizeof(h));
    Landing landing(rng, a, slot);
    for (;;) {
      const bool was_done = landing.done();
      if (read_answer(slot, seq, kMaxValue, &copy, landing)) {
        ASSERT_EQ(copy.size(), trailer_offset(h.value_len)) << "trial " << trial;
        ASSERT_EQ(std::string(a.data(), copy.size()), copy) << "trial " << trial;
        break;
      }
      ASSERT_FALSE(was_done) << "trial " << trial << ": every byte landed and it was refused";
      refusals++;
      landing.land_one();
    }
  }
  EXPECT_GT(refusals, 5000u);
}

TEST(HydraWire, WrongSeqLengthOrByteIsRefused) {
  std::mt19937_64 rng(7);
  alignas(8) char slot[ring_slot_bytes(kMaxValue)] = {};
  std::string copy;
  std::vector<char> a;
  do a = build_answer(rng, 9);
  while (rpc::load<rpc::ResponseHeader>(a.data()).value_len == 0);
  std::memcpy(slot, a.data(), a.size());
  EXPECT_TRUE(read_answer(slot, 9, kMaxValue, &copy));
  EXPECT_FALSE(read_answer(slot, 13, kMaxValue, &copy));
  uint32_t huge = kMaxValue + 1;
  std::memcpy(slot + offsetof(rpc::ResponseHeader, value_len), &huge, sizeof(huge));
  EXPECT_FALSE(read_answer(slot, 9, kMaxValue, &copy));
  // A flipped value byte, or a flipped ItemRef byte (a forged address), fails the checksum.
  const uint32_t vlen = rpc::load<rpc::ResponseHeader>(a.data()).value_len;
  for (size_t at : {sizeof(rpc::ResponseHeader), ref_offset(vlen), ref_offset(vlen) + 9}) {
    std::memcpy(slot, a.data(), a.size());
    slot[at] ^= 1;
    EXPECT_FALSE(read_answer(slot, 9, kMaxValue, &copy)) << at;
  }
}

std::vector<char> item(std::string_view key, std::string_view value, uint64_t version) {
  std::vector<char> b(item_bytes(key.size(), value.size()));
  write_item(b.data(), key, value, version, 0);
  return b;
}

TEST(HydraItem, TheCachedItemIsCurrentAClearedFlagIsReplaced) {
  auto b = item("key", "value", 42);
  std::string_view v;
  ASSERT_EQ(check_item(b.data(), b.size(), "key", 42, &v), ItemRead::kCurrent);
  EXPECT_EQ(v, "value");
  invalidate(b.data());
  EXPECT_EQ(check_item(b.data(), b.size(), "key", 42, &v), ItemRead::kReplaced);
}

// Garbage, a torn header, a wrong size, another version or key: never current.
TEST(HydraItem, BadBytesAreForeign) {
  std::mt19937_64 rng(3);
  const auto good = item("key", "value", 42);
  std::string_view v;
  for (int i = 0; i < 2000; ++i) {
    std::vector<char> junk(good.size());
    for (auto& c : junk) c = static_cast<char>(rng());
    EXPECT_NE(check_item(junk.data(), junk.size(), "key", 42, &v), ItemRead::kCurrent);
  }
  // Every single-byte corruption outside the flag word.
  for (size_t at = sizeof(uint64_t); at < good.size(); ++at) {
    auto b = good;
    b[at] ^= 0x10;
    EXPECT_EQ(check_item(b.data(), b.size(), "key", 42, &v), ItemRead::kForeign) << at;
  }
  // A flag word that is neither set nor cleared.
  auto b = good;
  b[3] ^= 1;
  EXPECT_EQ(check_item(b.data(), b.size(), "key", 42, &v), ItemRead::kForeign);
  // Wrong sizes: too short, too long, shorter than a header.
  EXPECT_EQ(check_item(good.data(), good.size() - 1, "key", 42, &v), ItemRead::kForeign);
  auto longer = good;
  longer.push_back('x');
  EXPECT_EQ(check_item(longer.data(), longer.size(), "key", 42, &v), ItemRead::kForeign);
  EXPECT_EQ(check_item(good.data(), 16, "key", 42, &v), ItemRead::kForeign);
  EXPECT_EQ(check_item(good.data(), good.size(), "key", 43, &v), ItemRead::kForeign);
  EXPECT_EQ(check_item(good.data(), good.size(), "kez", 42, &v), ItemRead::kForeign);
}

// The memory of a cached item reused for another item (of the same key, or another key of
// the same size) whose bytes land over it in any order while the client's READ copies them:
// the copy is current only when it is exactly the cached item.
TEST(HydraItem, AReadOfMemoryBeingReusedIsNeverTakenForTheCachedItem) {
  std::mt19937_64 rng(11);
  size_t foreign = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const bool same_key = trial % 2 == 0;
    const auto cached = item("key", "old-value", 7);
    const auto next = item(same_key ? "key" : "kez", "new-value", 8);
    std::vector<char> mem = cached;
    Landing landing(rng, next, mem.data());
    const size_t stop = rng() % (next.size() + 1);
    for (size_t i = 0; i < stop; ++i) landing.land_one();
    std::string_view v;
    const ItemRead r = check_item(mem.data(), mem.size(), "key", 7, &v);
    if (r == ItemRead::kCurrent) {
      ASSERT_EQ(v, "old-value") << trial;
      ASSERT_EQ(std::memcmp(mem.data() + 8, cached.data() + 8, cached.size() - 8), 0) << trial;
    } else {
      ++foreign;
    }
  }
  EXPECT_GT(foreign, 2000u);
}

}  // namespace
}  // namespace fabkv::hydradb
