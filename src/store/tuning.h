// Internal tuning knobs of the storage core. Not part of the contract with clients (those are
// in limits.h); each constant says where it comes from.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabkv::store::tuning {

// HERD sec. 4.1 / MICA: an index bucket is one cache line, so a lookup costs one random
// memory access for the bucket and one for the item.
inline constexpr size_t kCacheLine = 64;

// Cache engine: 8 tagged offsets per bucket. MICA keeps 7 and spends the 8th slot on a
// version for concurrent readers; fabkv partitions are EREW (one thread reads and writes), so
// the slot is free for one more entry.
inline constexpr size_t kCacheBucketEntries = 8;

// Store engine: 7 entries plus a link to an overflow bucket (MICA store mode's chaining).
inline constexpr size_t kStoreBucketEntries = 7;

// Batch pipeline: how many requests separate two stages (index prefetch -> item prefetch ->
// execute). HERD sec. 4.1.1 uses a 2-stage pipeline with one request per stage because
// post_send() hides the latency; without a NIC call between requests a wider gap is needed to
// cover ~100 ns of DRAM latency. Measured with fabkv-store-bench --gap (docs/results/).
inline constexpr size_t kDefaultStageGap = 4;

// Items in the log and the heap start on 8-byte boundaries.
inline constexpr size_t kItemAlign = 8;

}  // namespace fabkv::store::tuning
