// The farm client's checks (src/proto/farm/layout.h) against READs that copy server memory while
// the worker writes it: the worker's stores land byte by byte in a random order, the READ
// copies bytes in its own random order, and the two interleave at random. Whatever the copy
// holds, check_bucket accepts it only when it is byte for byte a bucket the worker wrote whole
// (before or after), check_record likewise for records, and the client's rules over a
// neighbourhood never return a wrong value and never return "not found" for a key that was
// present throughout, even while a hopscotch displacement moves it (the moves seqlock).
// No fabric: pure functions over local memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "proto/farm/layout.h"

namespace fabkv::farm {
namespace {

constexpr size_t kInlineBytes = 48;
const size_t kBucket = bucket_bytes(kInlineBytes);

// A bucket as the worker builds it (proto/farm/engine.cc): sealed, inline or indirect.
std::vector<char> make_bucket(std::mt19937_64& rng, const std::string& key, bool indirect) {
  std::vector<char> b(kBucket, 0);
  BucketHeader h{};
  h.version = rng() | 1;
  h.key_len = static_cast<uint8_t>(key.size());
  h.tag = key_home(key, 1024).tag;
  if (indirect) {
    h.value_len = static_cast<uint32_t>(1 + rng() % 500);
    h.flags = kIndirect;
    Pointer p{(rng() % 1000) * 8, static_cast<uint32_t>(record_bytes(key.size(), h.value_len)), 0};
    std::memcpy(b.data() + sizeof h, &p, sizeof p);
  } else {
    h.value_len = static_cast<uint32_t>(rng() % (kInlineBytes - key.size() + 1));
    h.flags = kInline;
    std::memcpy(b.data() + sizeof h, key.data(), key.size());
    for (size_t i = 0; i < h.value_len; ++i)
      b[sizeof h + key.size() + i] = static_cast<char>('a' + rng() % 26);
  }
  std::memcpy(b.data(), &h, sizeof h);
  seal(b.data(), kBucket);
  return b;
}

std::vector<char> make_retired() {
  std::vector<char> b(kBucket, 0);
  BucketHeader h{};
  h.flags = kRetired;
  std::memcpy(b.data(), &h, sizeof h);
  seal(b.data(), kBucket);
  return b;
}

// Memory the worker writes and a READ copies: a list of pending single-byte stores (in the
// order they land) and a copy made byte by byte in its own order, interleaved at random.
struct Race {
  std::vector<char> memory;
  std::vector<std::pair<size_t, char>> stores;  // lands front to back
  size_t landed = 0;

  // Queues the bytes of `bytes` at `at`, in a random order.
  void write(std::mt19937_64& rng, size_t at, const std::vector<char>& bytes) {
    std::vector<size_t> order(bytes.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) stores.emplace_back(at + i, bytes[i]);
  }
  void land_one() {
    if (landed < stores.size()) {
      memory[stores[landed].first] = stores[landed].second;
      ++landed;
    }
  }
  // Copies [at, at + n) while stores land: none, all, or a random number first and a random
  // number spread over the copy; the copy goes up or down the range (as a NIC or memcpy
  // would), or byte by byte or word by word in a random order.
  std::vector<char> read(std::mt19937_64& rng, size_t at, size_t n) {
    const size_t remaining = stores.size() - landed;
    size_t before = 0, during = 0, burst_at = n;  // burst_at < n: `during` lands at once there
    switch (rng() % 4) {
      case 0: break;  // the copy is what was there
      case 1: before = remaining; break;
      case 2:  // the writer runs in one go in the middle of the copy (preempted reader)
        before = rng() % 2 ? 0 : rng() % (remaining + 1);
        during = remaining - before;
        burst_at = rng() % n;
        break;
      default:  // both at once, interleaved evenly
        before = rng() % (remaining + 1);
        during = rng() % (remaining - before + 1);
    }
    for (size_t k = 0; k < before; ++k) land_one();
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    switch (rng() % 4) {
      case 0: break;
      case 1: std::reverse(order.begin(), order.end()); break;
      case 2: std::shuffle(order.begin(), order.end(), rng); break;
      default: {
        std::vector<size_t> words(n / 8);
        std::iota(words.begin(), words.end(), size_t{0});
        std::shuffle(words.begin(), words.end(), rng);
        order.clear();
        for (size_t w : words)
          for (size_t b = 0; b < 8; ++b) order.push_back(w * 8 + b);
        for (size_t i = words.size() * 8; i < n; ++i) order.push_back(i);
      }
    }
    std::vector<char> copy(n);
    const size_t start = landed;
    for (size_t i = 0; i < n; ++i) {
      if (burst_at < n) {
        if (i == burst_at)
          while (landed - start < during) land_one();
      } else {
        while (landed - start < during * (i + 1) / n) land_one();
      }
      copy[order[i]] = memory[at + order[i]];
    }
    return copy;
  }
};

TEST(FarmWire, ATornBucketIsNeverAccepted) {
  std::mt19937_64 rng(1);
  uint64_t accepted = 0, torn = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string key = "key-" + std::to_string(rng() % 1000);
    std::vector<char> before;
    switch (rng() % 4) {
      case 0: before.assign(kBucket, 0); break;  // empty
      case 1: before = make_retired(); break;
      default: before = make_bucket(rng, key, rng() % 2); break;
    }
    // After: another item, the same key updated, or a DELETE (zeroes).
    std::vector<char> after = rng() % 5 == 0 ? std::vector<char>(kBucket, 0)
                                             : make_bucket(rng, key, rng() % 2);
    Race r;
    r.memory = before;
    r.write(rng, 0, after);
    const std::vector<char> copy = r.read(rng, 0, kBucket);
    Bucket b;
    const BucketState st = check_bucket(copy.data(), kBucket, &b);
    if (st == BucketState::kTorn) {
      ++torn;
      continue;
    }
    ++accepted;
    ASSERT_TRUE(copy == before || copy == after) << "trial " << trial << " accepted a mix";
    if (st == BucketState::kInline) {
      EXPECT_EQ(b.key, key);
      EXPECT_LE(b.key.size() + b.value.size(), kInlineBytes);
    }
  }
  // Both outcomes happen: the test can fail either way.
  EXPECT_GT(accepted, 1000u);
  EXPECT_GT(torn, 1000u);
  // Once every byte has landed the copy is accepted.
  Race r;
  r.memory.assign(kBucket, 0);
  r.write(rng, 0, make_bucket(rng, "whole", false));
  while (r.landed < r.stores.size()) r.land_one();
  Bucket b;  // its key and value point into `whole`
  const std::vector<char> whole = r.read(rng, 0, kBucket);
  EXPECT_EQ(check_bucket(whole.data(), kBucket, &b), BucketState::kInline);
  EXPECT_EQ(b.key, "whole");
}

TEST(FarmWire, ARecordReusedUnderTheReaderIsNeverAccepted) {
  std::mt19937_64 rng(2);
  uint64_t accepted = 0, rejected = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const std::string key = "rec-" + std::to_string(trial % 7);
    auto build = [&](uint64_t version, size_t vlen) {
      std::vector<char> rec(record_bytes(key.size(), vlen));
      RecordHeader h{0, version, static_cast<uint32_t>(key.size()), static_cast<uint32_t>(vlen)};
      std::memcpy(rec.data() + sizeof h, key.data(), key.size());
      for (size_t i = 0; i < vlen; ++i)
        rec[sizeof h + key.size() + i] = static_cast<char>('a' + rng() % 26);
      std::memcpy(rec.data(), &h, sizeof h);
      h.check = record_check(rec.data(), rec.size(), version);
      std::memcpy(rec.data(), &h.check, 8);
      return rec;
    };
    const size_t vlen = 1 + rng() % 100;
    std::vector<char> mine = build(1000 + trial, vlen);
    // The bucket the reader found points at `mine`; the worker frees it and another record of
    // the same size (another version) or heap links take its place while the READ copies.
    std::vector<char> other = rng() % 2 ? build(5000 + trial, vlen)
                                        : std::vector<char>(mine.size());
    if (other[0] == 0)
      for (char& c : other) c = static_cast<char>(rng());
    Bucket b;
    b.header.version = 1000 + trial;
    b.header.key_len = static_cast<uint8_t>(key.size());
    b.header.value_len = static_cast<uint32_t>(vlen);
    b.pointer.record_bytes = static_cast<uint32_t>(mine.size());
    Race r;
    r.memory = mine;
    r.write(rng, 0, other);
    const std::vector<char> copy = r.read(rng, 0, mine.size());
    std::string_view k, v;
    if (check_record(b, copy.data(), copy.size(), &k, &v)) {
      ++accepted;
      ASSERT_TRUE(copy == mine) << "trial " << trial;
      EXPECT_EQ(k, key);
    } else {
      ++rejected;
    }
  }
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(rejected, 100u);
}

// A neighbourhood of H buckets behind a table header, and the worker applying a hopscotch
// displacement chain exactly as farm::Engine::apply_chain orders it (moves odd; each key copied
// into the free bucket, then its old bucket overwritten by the next; the new key; moves even),
// every store landing byte by byte. A client following layout.h's rules with READs that race
// it must find the key that was present throughout, with its value, or retry; never "not
// found" and never another value.
TEST(FarmWire, ADisplacementNeverHidesAKeyFromTheRules) {
  std::mt19937_64 rng(3);
  const size_t kHeader = 16;  // the moves/state/clock word, then the buckets
  const size_t nb = neighbourhood_bytes(kBucket);
  uint64_t found = 0, reprobes = 0, torn = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    // Buckets 0..5; the watched key sits at bucket `j` and moves to the free bucket `f` > j, then
    // bucket j takes another key (which came from a bucket after it, or is the new key).
    const uint32_t j = static_cast<uint32_t>(rng() % (kNeighbourhood - 1));
    const uint32_t f = j + 1 + static_cast<uint32_t>(rng() % (kNeighbourhood - 1 - j));
    const std::string key = "watched";
    const std::vector<char> watched = make_bucket(rng, key, false);
    Race r;
    r.memory.assign(kHeader + nb, 0);
    uint64_t moves = 2 * (rng() % 100);
    std::memcpy(r.memory.data(), &moves, 8);
    for (uint32_t i = 0; i < kNeighbourhood; ++i)
      if (i != f) {
        const std::vector<char> b = i == j
                                        ? watched
                                        : make_bucket(rng, "other" + std::to_string(i), rng() % 2);
        std::memcpy(r.memory.data() + kHeader + i * kBucket, b.data(), kBucket);
      }
    auto word = [&](uint64_t m) {
      std::vector<char> w(8);
      std::memcpy(w.data(), &m, 8);
      return w;
    };
    r.write(rng, 0, word(moves + 1));
    r.write(rng, kHeader + f * kBucket, watched);
    r.write(rng, kHeader + j * kBucket, make_bucket(rng, "newcomer", rng() % 2));
    r.write(rng, 0, word(moves + 2));
    // The client: moves_before as learnt by an earlier miss (the rules' reference), then READs.
    uint64_t reference = moves;
    bool done = false;
    for (int attempt = 0; attempt < 64 && !done; ++attempt) {
      const std::vector<char> copy = r.read(rng, kHeader, nb);
      Bucket b;
      switch (search_neighbourhood(copy.data(), kBucket, key, key_home(key, 1024).tag, &b)) {
        case Search::kInline: {
          Bucket want;
          ASSERT_EQ(check_bucket(watched.data(), kBucket, &want), BucketState::kInline);
          ASSERT_EQ(b.value, want.value) << "trial " << trial;
          ++found;
          done = true;
          break;
        }
        case Search::kTorn: ++torn; break;
        case Search::kMiss: {
          const std::vector<char> h = r.read(rng, 0, 16);
          const HeaderWord w = load_header_word(h.data());
          ASSERT_FALSE(w.moves % 2 == 0 && w.moves == reference)
              << "trial " << trial << ": not found while the key was present";
          reference = w.moves;
          ++reprobes;
          break;
        }
        default: FAIL() << "trial " << trial;
      }
    }
    ASSERT_TRUE(done) << "trial " << trial << " never settled";
  }
  EXPECT_EQ(found, 4000u);
  // The races the rules caught: both kinds happen, so the test exercises both paths.
  EXPECT_GT(reprobes, 0u);
  EXPECT_GT(torn, 0u);
}

TEST(FarmWire, KeysFindTheirHomesAndNeighbourhoodsNeverWrap) {
  // The table has H - 1 buckets past the last home: a neighbourhood READ is one range.
  const uint64_t homes = 1000;
  for (int i = 0; i < 10000; ++i) {
    const KeyHome kh = key_home("k" + std::to_string(i), homes);
    ASSERT_LT(kh.home, homes);
    EXPECT_LE(bucket_offset(kh.home, kBucket) + neighbourhood_bytes(kBucket),
              table_bytes(homes, kBucket));
  }
  EXPECT_EQ(neighbourhood_bytes(bucket_bytes(48)), 480u);             // farm at 48-byte items
  EXPECT_EQ(neighbourhood_bytes(bucket_bytes(kPointerBytes)), 288u);  // farm-var
}

}  // namespace
}  // namespace fabkv::farm
