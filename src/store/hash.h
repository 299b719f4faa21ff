// Key hashing: one 64-bit xxh3 hash per key, from which the partition, the index bucket and
// the tag are cut out of disjoint bit ranges so that they are independent of each other.
//
//   bits 63..48  tag        (16 bits; 0 marks an empty index entry, so tag 0 becomes 1)
//   bits 47..32  partition  (multiply-shift onto [0, n), n <= 65536)
//   bits 31..0   bucket     (masked to a power-of-two bucket count, at most 2^32 buckets)
//
// MICA (HERD sec. 4.1) shards by keyhash, then indexes a bucket and filters by a tag before
// touching the item; the full key is always compared afterwards, never trusted to the hash.
//
// The hash values are part of the wire contract (clients pick the partition with
// partition_of(hash_key(key))), pinned by tests/store/hash_test.cc: XXH3_64bits, seed 0.
#pragma once

#include <cstdint>
#include <string_view>

// xxHash's inline mode: XXH3_64bits compiled into each caller instead of a PLT call into
// libxxhash (25 instructions + the call per GET under callgrind, docs/results/
// store-absl-2026-11-23.md), and folded further where the key length is a constant. Same
// algorithm, same values. The inline mode prefixes its names (XXH_INLINE_*), so it coexists
// with a plain #include <xxhash.h> in the same unit, in either order. The RPC wire checks
// (proto/rpc/wire.h, proto/server_reply/wire.h) include this header for the same reason.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#define FABKV_STORE_HASH_INLINE_ALL
#endif
#include <xxhash.h>
#ifdef FABKV_STORE_HASH_INLINE_ALL
#undef XXH_INLINE_ALL
#undef FABKV_STORE_HASH_INLINE_ALL
#endif

namespace fabkv::store {

struct KeyHash {
  uint64_t h = 0;
  friend bool operator==(KeyHash, KeyHash) = default;
};

inline KeyHash hash_key(std::string_view key) {
  return KeyHash{XXH3_64bits(key.data(), key.size())};
}

inline uint32_t partition_of(KeyHash k, uint32_t n_partitions) {
  return static_cast<uint32_t>((((k.h >> 32) & 0xffff) * n_partitions) >> 16);
}

inline uint64_t bucket_of(KeyHash k, uint64_t bucket_mask) {
  return (k.h & 0xffffffffu) & bucket_mask;
}

inline uint16_t tag_of(KeyHash k) {
  auto t = static_cast<uint16_t>(k.h >> 48);
  return t == 0 ? 1 : t;
}

}  // namespace fabkv::store
