// Helpers shared by the store tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/engine.h"
#include "store/hash.h"

namespace fabkv::store::testing {

#ifdef FABKV_SANITIZED
inline constexpr int kScale =
    4;  // ASan/UBSan: several times slower; keep the suite well under 3 min
#else
inline constexpr int kScale = 20;
#endif

// A clock the test moves by hand (EngineOptions::clock).
struct FakeClock {
  uint32_t now = 1'000'000;
  static uint32_t read(void* self) { return static_cast<FakeClock*>(self)->now; }
};

inline EngineOptions small_options(size_t memory, size_t buckets, FakeClock* clock = nullptr) {
  EngineOptions o;
  o.memory_bytes = memory;
  o.index_buckets = buckets;
  o.huge_pages = false;  // tests make many engines; skip the doomed MAP_HUGETLB attempt
  if (clock != nullptr) {
    o.clock = &FakeClock::read;
    o.clock_ctx = clock;
  }
  return o;
}

// Keys whose hash lands in bucket `bucket` of an index with `buckets` buckets.
inline std::vector<std::string> keys_in_bucket(size_t n, uint64_t buckets, uint64_t bucket,
                                               const std::string& prefix = "k") {
  std::vector<std::string> out;
  for (uint64_t i = 0; out.size() < n; ++i) {
    std::string k = prefix + std::to_string(i);
    if (bucket_of(hash_key(k), buckets - 1) == bucket) out.push_back(std::move(k));
  }
  return out;
}

}  // namespace fabkv::store::testing
