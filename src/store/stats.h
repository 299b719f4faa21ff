// Per-partition statistics. The owning worker thread is the only writer (EREW), so counters
// are relaxed atomics bumped with a plain load+store (no locked read-modify-write on the data
// path). Any other thread may call PartitionStats::snapshot() at any time; each field is read
// atomically, the fields together are not a consistent cut (a snapshot taken mid-PUT may show
// the new item in `items` before `puts`).
#pragma once

#include <atomic>
#include <cstdint>

namespace fabkv::store {

struct StatsSnapshot {
  uint64_t items = 0;        // items reachable from the index (cache: see docs/storage.md)
  uint64_t bytes = 0;        // cache: log bytes holding items; store: heap bytes allocated
  uint64_t hits = 0;         // GETs that returned a value
  uint64_t misses = 0;       // GETs that found nothing (includes expired)
  uint64_t expired = 0;      // items found expired on access and removed
  uint64_t puts = 0;         // successful PUTs
  uint64_t dels = 0;         // successful DELETEs
  uint64_t evictions = 0;    // cache: index entries found pointing at overwritten log space
  uint64_t index_drops = 0;  // cache: live entries dropped because their bucket was full
  uint64_t version_mismatches = 0;
  uint64_t too_large = 0;         // requests rejected with kTooLarge or kInvalidKey
  uint64_t no_space = 0;          // store: PUTs rejected with kNoSpace
  uint64_t overflow_buckets = 0;  // store: overflow index buckets in use
};

// Single writer only (the partition's owner thread): a relaxed load and store, which
// compiles to a plain add on x86 instead of a locked one.
inline void add_st(std::atomic<uint64_t>& a, uint64_t n = 1) {
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void sub_st(std::atomic<uint64_t>& a, uint64_t n = 1) {
  a.store(a.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
}

class PartitionStats {
 public:
  // Any thread.
  StatsSnapshot snapshot() const {
    auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return StatsSnapshot{r(items),
                         r(bytes),
                         r(hits),
                         r(misses),
                         r(expired),
                         r(puts),
                         r(dels),
                         r(evictions),
                         r(index_drops),
                         r(version_mismatches),
                         r(too_large),
                         r(no_space),
                         r(overflow_buckets)};
  }

  std::atomic<uint64_t> items{0}, bytes{0}, hits{0}, misses{0}, expired{0}, puts{0}, dels{0},
      evictions{0}, index_drops{0}, version_mismatches{0}, too_large{0}, no_space{0},
      overflow_buckets{0};
};

}  // namespace fabkv::store
