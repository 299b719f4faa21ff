// HydraDB's items as clients READ them (survey sec. 3.1): the bytes of one item in a worker's
// item arena, the region "hydradb.items.<w>" that the worker registers read-only for its
// clients, and the checks a client runs on what it READ. Shared by the server's engine
// (proto/hydradb/engine.h) and the client's cached-GET path (proto/hydradb/client.cc); nothing
// here touches the fabric.
//
// An item is written once, out of place, and never changed afterwards except for its `valid`
// word (survey sec. 3.1: values carry "a word-size flag ... to show the validity of the
// content"): a PUT writes the new version into fresh memory and then clears the old item's
// flag; a DELETE clears the flag. The old item's memory is reused only after every lease that
// could point at it has run out (engine.h, "Delayed reuse").
//
// A client that cached (offset, version) from a GET answer READs item_bytes(key, value) bytes
// at that offset and accepts them only when check_item says kCurrent: the flag is set, the
// version is the one it cached, lengths and layout agree, the key is its key, and the checksum
// over the copy matches. A READ's bytes may land in any order (docs/architecture.md), so the
// checksum guards against a READ that met memory being reused (a lease broken by a client
// clock far slower than the server's): such bytes fail it, or show another version or key.
//
// History:
//   v1  first version.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "store/hash.h"  // xxh3 compiled inline (XXH_INLINE_ALL)

namespace fabkv::hydradb {

inline constexpr uint32_t kLayoutVersion = 1;

// The flag of a current item ("HYDRAOK1" little-endian); 0 once replaced or deleted. A whole
// word rather than a bit, as HydraDB's: one aligned 8-byte store flips it, and a READ sees
// either value, never a mix.
inline constexpr uint64_t kValid = 0x314b4f4152445948ull;

// 40 bytes, then key bytes, then value bytes. 8-byte aligned in the arena.
struct ItemHeader {
  uint64_t valid;      // kValid, or 0 (replaced or deleted): the only word written twice
  uint64_t version;    // the item's CAS version (never 0)
  uint64_t check;      // item_check(): over the bytes from expire_at to the value's end
  uint32_t expire_at;  // absolute Unix seconds, 0 = never
  uint32_t value_len;
  uint16_t key_len;   // 1..250
  uint16_t layout;    // kLayoutVersion
  uint32_t reserved;  // 0
};
static_assert(sizeof(ItemHeader) == 40 && alignof(ItemHeader) == 8);
inline constexpr size_t kCheckedFrom = offsetof(ItemHeader, expire_at);
static_assert(kCheckedFrom == 24);

inline constexpr size_t item_bytes(size_t key_len, size_t value_len) {
  return sizeof(ItemHeader) + key_len + value_len;
}

// Over the header from expire_at on, the key and the value, seeded with the version: bytes of
// another version of the same key, or of another key at the same place, never match.
inline uint64_t item_check(const void* item, size_t n, uint64_t version) {
  return XXH3_64bits_withSeed(static_cast<const char*>(item) + kCheckedFrom, n - kCheckedFrom,
                              version);
}

// Writes a complete item (flag set) into `dst` (item_bytes(key, value) bytes).
inline void write_item(void* dst, std::string_view key, std::string_view value, uint64_t version,
                       uint32_t expire_at) {
  char* p = static_cast<char*>(dst);
  ItemHeader h{};
  h.valid = kValid;
  h.version = version;
  h.expire_at = expire_at;
  h.value_len = static_cast<uint32_t>(value.size());
  h.key_len = static_cast<uint16_t>(key.size());
  h.layout = kLayoutVersion;
  std::memcpy(p, &h, sizeof h);
  std::memmove(p + sizeof h, key.data(), key.size());
  // The value may be a view of this arena (an earlier get()); it is a different block.
  std::memmove(p + sizeof h + key.size(), value.data(), value.size());
  const uint64_t c = item_check(p, item_bytes(key.size(), value.size()), version);
  std::memcpy(p + offsetof(ItemHeader, check), &c, sizeof c);
}

// Clears an item's flag: one aligned 8-byte store a concurrent READ sees whole.
inline void invalidate(void* item) {
  std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(item)).store(0, std::memory_order_release);
}

// What a client's READ of a cached item found.
enum class ItemRead : uint8_t {
  kCurrent,   // the item it cached, still current: its value is the answer
  kReplaced,  // the item it cached, flag cleared: the key was replaced or deleted
  kForeign,   // not the item it cached (memory reused, or torn): counted, never trusted
};

// `bytes` is the client's copy of what it READ (n bytes at the cached offset). *value points
// into it when kCurrent.
inline ItemRead check_item(const char* bytes, size_t n, std::string_view key, uint64_t version,
                           std::string_view* value) {
  if (n < sizeof(ItemHeader)) return ItemRead::kForeign;
  ItemHeader h;
  std::memcpy(&h, bytes, sizeof h);
  if (h.layout != kLayoutVersion || h.version != version || h.key_len != key.size() ||
      item_bytes(h.key_len, h.value_len) != n || item_check(bytes, n, version) != h.check ||
      std::memcmp(bytes + sizeof h, key.data(), key.size()) != 0)
    return ItemRead::kForeign;
  if (h.valid != kValid) return h.valid == 0 ? ItemRead::kReplaced : ItemRead::kForeign;
  *value = std::string_view(bytes + sizeof h + h.key_len, h.value_len);
  return ItemRead::kCurrent;
}

}  // namespace fabkv::hydradb
