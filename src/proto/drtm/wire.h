// DrTM-KV's memory layout (survey sec. 3.5; Guidelines sec. 4.3.2): what clients READ, CAS and
// WRITE in a worker's memory, byte for byte, and the pure functions that judge a copy of it.
// The engine (proto/drtm/engine.h) writes it, the client (proto/drtm/client.cc) reads and
// locks it; docs/drtm.md has the design and the reasons.
//
// Two regions per worker, both registered once (no growth):
//   table  [ Bucket 0 ] [ Bucket 1 ] ... [ Bucket main-1 ] [ overflow buckets ... ]  (128 B each)
//          read-only for clients; only the worker writes it.
//   items  [ Item ] [ free ] [ Item ] ...  (heap.h's TLSF heap)
//          read, WRITE and atomics by clients, under each item's lock word.
//
// Cluster hashing (DrTM's main and indirect headers, survey fig. 6): a key's home bucket is
// picked by a 64-bit xxh3 of the key (seed kHashSeed, independent of the partition hash); a
// bucket holds 7 slots {item offset, 16-bit tag, item bytes, incarnation} and the index of
// an overflow ("indirect") bucket when its slots are used up.
//
// Item: ItemHead (lock word, incarnation, capacity, key length, head check), the key, then two
// Records of `capacity` value bytes each. The lock word (version, incarnation, locked bit) says
// which record is current:
//   unlocked, version v   unlocked(v, i)  record v & 1 is current
//   locked by a writer    locked(v, i)    record v & 1 is still current; the writer fills
//                                         record (v + 1) & 1, then releases to unlocked(v + 1, i)
//   retired               kRetired        the item left the table (DELETE, superseded)
// A writer never touches the current record, so a reader racing it reads the old value whole,
// and a writer that dies holding the lock leaves the current value intact (docs/drtm.md,
// "A dead lock holder").
//
// Every copy is judged as a copy: a READ's bytes may land in any order and while the memory
// changes, so a bucket is whole only when its check (xxh3 over the copy, seeded with its index)
// matches, and a record only when its version is the lock word's (in the same copy) and its
// check (over the copy, seeded with the item's head check, so it binds key and incarnation)
// matches. read_item() decides on the one copy it was given.
//
// History:
//   v1  first version.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "store/hash.h"  // xxh3 compiled inline

namespace fabkv::drtm {

inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint64_t kHashSeed = 0x4d54724d54724d44ull;  // "DrTMDrTM"-ish: not the partition's
inline constexpr uint64_t kHeadSeed = 0x6b76647274;           // seeds the item head's check

// ---- lock word -----------------------------------------------------------------------------
// [ version: 40 bits ][ incarnation: 23 bits ][ locked: 1 bit ]. The item's incarnation is in
// the word so that a CAS through a stale cached location never succeeds on another item that
// reused the memory (DrTM's incarnation check, made part of the compare).

inline constexpr uint64_t kRetired = ~uint64_t{0};
inline constexpr int kIncarnationBits = 23;
inline constexpr uint64_t kIncarnationMask = (uint64_t{1} << kIncarnationBits) - 1;
// Versions stay below 2^40 - 1, so that no word of a live item equals kRetired.
inline constexpr uint64_t kMaxVersion = (uint64_t{1} << 40) - 2;
inline constexpr uint64_t unlocked(uint64_t version, uint32_t incarnation) {
  return (version << (kIncarnationBits + 1)) | ((incarnation & kIncarnationMask) << 1);
}
inline constexpr uint64_t locked(uint64_t version, uint32_t incarnation) {
  return unlocked(version, incarnation) | 1;
}
inline constexpr bool is_locked(uint64_t word) { return (word & 1) != 0; }
inline constexpr uint64_t version_of(uint64_t word) { return word >> (kIncarnationBits + 1); }
inline constexpr uint32_t incarnation_of(uint64_t word) {
  return static_cast<uint32_t>((word >> 1) & kIncarnationMask);
}
inline constexpr bool same_incarnation(uint64_t word, uint32_t incarnation) {
  return incarnation_of(word) == (incarnation & kIncarnationMask);
}

// ---- table ---------------------------------------------------------------------------------

inline constexpr uint32_t kSlotsPerBucket = 7;

struct BucketSlot {
  uint64_t item;         // offset in the items region (bits 0..47) | tag << 48
  uint32_t bytes;        // the item's size (what a client READs); 0 = empty slot
  uint32_t incarnation;  // the item's incarnation (DrTM: detects a reused location)
};
static_assert(sizeof(BucketSlot) == 16 && alignof(BucketSlot) == 8);

struct Bucket {
  BucketSlot slots[kSlotsPerBucket];
  uint32_t next;  // index of the overflow bucket that continues this chain; 0 = none
  uint32_t reserved;
  uint64_t check;  // bucket_check(): over the 120 bytes above, seeded with the bucket's index
};
static_assert(sizeof(Bucket) == 128 && alignof(Bucket) == 8);

inline uint64_t slot_offset(const BucketSlot& s) { return s.item & ((uint64_t{1} << 48) - 1); }
inline uint16_t slot_tag(const BucketSlot& s) { return static_cast<uint16_t>(s.item >> 48); }
inline uint64_t slot_word(uint64_t offset, uint16_t tag) { return offset | (uint64_t{tag} << 48); }

inline uint64_t bucket_check(const Bucket& b, uint64_t index) {
  return XXH3_64bits_withSeed(&b, offsetof(Bucket, check), index);
}

struct KeyPlace {
  uint64_t bucket;  // home bucket in [0, main_buckets)
  uint16_t tag;
};
inline KeyPlace key_place(std::string_view key, uint64_t main_buckets) {
  const uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), kHashSeed);
  // Multiply-shift onto [0, main_buckets): any bucket count works, not only powers of two.
  const uint64_t b =
      static_cast<uint64_t>((static_cast<unsigned __int128>(h & 0xffffffffu) * main_buckets) >> 32);
  return {b, static_cast<uint16_t>(h >> 48)};
}

// The one copy of a bucket, judged: false when torn (READ it again).
inline bool read_bucket(const void* copy, uint64_t index, Bucket* out) {
  std::memcpy(out, copy, sizeof(Bucket));
  return bucket_check(*out, index) == out->check;
}

// ---- items ---------------------------------------------------------------------------------

struct ItemHead {
  uint64_t lock;         // the lock word (above); the only field that changes after creation
  uint32_t incarnation;  // nonzero, new for every item the worker creates
  uint32_t capacity;     // value bytes in each record (a multiple of 8)
  uint16_t key_len;      // 1..250
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t head_check;  // head_check(): over incarnation..reserved1 and the key
};
static_assert(sizeof(ItemHead) == 32 && alignof(ItemHead) == 8);

struct RecordHead {
  uint64_t version;    // the lock word's version when this record is current
  uint32_t expire_at;  // absolute Unix seconds, 0 = never (judged by the worker, docs/drtm.md)
  uint32_t value_len;  // <= capacity
  uint64_t check;      // record_check(): over the 16 bytes above and the value, seeded with
                       // the item's head check
};
static_assert(sizeof(RecordHead) == 24 && alignof(RecordHead) == 8);

inline constexpr size_t pad8(size_t n) { return (n + 7) & ~size_t{7}; }
inline constexpr size_t record_bytes(uint32_t capacity) { return sizeof(RecordHead) + capacity; }
inline constexpr size_t record_offset(uint16_t key_len, uint32_t capacity, uint32_t which) {
  return sizeof(ItemHead) + pad8(key_len) + which * record_bytes(capacity);
}
inline constexpr size_t item_bytes(uint16_t key_len, uint32_t capacity) {
  return record_offset(key_len, capacity, 2);
}
// The capacity an item gets for a value of n bytes.
inline constexpr uint32_t capacity_for(size_t n) {
  return static_cast<uint32_t>(n < 8 ? 8 : pad8(n));
}
// The capacity of an item of `bytes` bytes with a key of key_len (its inverse), or 0.
inline constexpr uint32_t capacity_of(size_t bytes, uint16_t key_len) {
  const size_t fixed = sizeof(ItemHead) + pad8(key_len) + 2 * sizeof(RecordHead);
  return bytes > fixed && (bytes - fixed) % 2 == 0 ? static_cast<uint32_t>((bytes - fixed) / 2) : 0;
}

inline uint64_t head_check(const ItemHead& h, std::string_view key) {
  constexpr size_t kFrom = offsetof(ItemHead, incarnation), kTo = offsetof(ItemHead, head_check);
  const uint64_t fields = XXH3_64bits_withSeed(reinterpret_cast<const char*>(&h) + kFrom,
                                               kTo - kFrom, kHeadSeed);
  return XXH3_64bits_withSeed(key.data(), key.size(), fields);
}
inline uint64_t record_check(const RecordHead& r, const void* value, uint64_t head) {
  const uint64_t fields = XXH3_64bits_withSeed(&r, offsetof(RecordHead, check), head);
  return XXH3_64bits_withSeed(value, r.value_len, fields);
}

// What a copy of an item says to a reader who expects `key` at incarnation `incarnation`.
enum class ItemRead {
  kValue,    // *out holds the current record, whole (its value points into the copy)
  kTorn,     // bytes from different moments (a writer or the worker was at work): READ again
  kRetired,  // the item left the table: look the key up again
  kMoved,    // another key or another incarnation lives here: look the key up again
};

struct ItemValue {
  uint64_t version = 0;
  uint32_t expire_at = 0;
  uint32_t capacity = 0;
  bool locked = false;  // a writer held the lock (the value is the one before its PUT)
  std::string_view value;
};

// The lock word at the start of an item (8-byte aligned), loaded once.
inline uint64_t load_lock(const char* item) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<char*>(item)))
      .load(std::memory_order_acquire);
}

struct NothingLands {
  void operator()() const {}
};

// Judges `len` bytes of an item at `copy` for `key` (incarnation 0 = any). Each field is
// loaded once and judged on that load; `landing` runs between the loads (tests land bytes
// there: tests/store/drtm_test.cc). The worker calls it on live memory, where on shm and tcp
// nothing changes between its loads (docs/drtm.md, "Who applies the atomics").
template <class Landing = NothingLands>
inline ItemRead read_item(const char* copy, size_t len, std::string_view key, uint32_t incarnation,
                          ItemValue* out, Landing&& landing = {}) {
  if (len < sizeof(ItemHead)) return ItemRead::kTorn;
  const uint64_t word = load_lock(copy);
  if (word == kRetired) return ItemRead::kRetired;
  landing();
  ItemHead h;
  std::memcpy(&h, copy, sizeof(h));
  // Checked before anything is compared with it: a head torn by a reuse of this memory, or a
  // location that holds another item now.
  if (h.key_len != key.size() || (incarnation != 0 && h.incarnation != incarnation) ||
      item_bytes(h.key_len, h.capacity) > len || h.capacity % 8 != 0 ||
      std::memcmp(copy + sizeof(ItemHead), key.data(), key.size()) != 0 ||
      head_check(h, key) != h.head_check)
    return ItemRead::kMoved;
  if (!same_incarnation(word, h.incarnation)) return ItemRead::kTorn;
  landing();
  const uint64_t v = version_of(word);
  const char* rec = copy + record_offset(h.key_len, h.capacity, static_cast<uint32_t>(v & 1));
  RecordHead r;
  std::memcpy(&r, rec, sizeof(r));
  if (r.version != v || r.value_len > h.capacity) return ItemRead::kTorn;
  landing();
  if (record_check(r, rec + sizeof(RecordHead), h.head_check) != r.check) return ItemRead::kTorn;
  landing();
  // Live memory (the worker's own reads on verbs, where the NIC may move the lock meanwhile):
  // the record is current only if the lock word still says so.
  if (load_lock(copy) != word) return ItemRead::kTorn;
  out->version = v;
  out->expire_at = r.expire_at;
  out->capacity = h.capacity;
  out->locked = is_locked(word);
  out->value = std::string_view(rec + sizeof(RecordHead), r.value_len);
  return ItemRead::kValue;
}

// Builds the record a PUT writes (head + value) at `out` (record_bytes(value.size()) bytes
// at least); returns its length.
inline size_t build_record(char* out, uint64_t version, uint32_t expire_at, std::string_view value,
                           uint64_t head) {
  RecordHead r{};
  r.version = version;
  r.expire_at = expire_at;
  r.value_len = static_cast<uint32_t>(value.size());
  r.check = record_check(r, value.data(), head);
  std::memcpy(out, &r, sizeof(r));
  std::memcpy(out + sizeof(r), value.data(), value.size());
  return sizeof(r) + value.size();
}

// The layout a client learns at connect (Welcome payload, next to the RPC keys): handshake.h.

}  // namespace fabkv::drtm
