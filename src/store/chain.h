// The chained index of 64-byte StoreBuckets (layout.h) that the `store` engine and the `hydradb`
// engine share: a main bucket per hash, each with 7 tagged entries and a link to an overflow
// bucket. The two differ only in where overflow buckets live (store: its heap; hydradb: a pool
// beside the index) and in how an item's key is read, so those are the caller's functions.
#pragma once

#include <cstdint>

#include "store/layout.h"

namespace fabkv::store::layout {

// Where a key's entry is (or would go): the bucket and slot, and the bucket before it in the
// chain (nullptr for the main bucket), so that an emptied overflow bucket can be unlinked.
struct ChainSlot {
  StoreBucket* bucket = nullptr;
  StoreBucket* prev = nullptr;
  int index = -1;
};

// Walks the chain from `b` for the entry tagged `tag` whose item `matches(entry)`. On a miss,
// *free_slot (if given) is the first empty slot met or, when there is none, the chain's last
// bucket with index -1 (where a new overflow bucket gets linked). `next(link)` is the bucket a
// non-zero link names.
template <class Next, class Matches>
inline bool find_in_chain(StoreBucket* b, uint16_t tag, Next next, Matches matches,
                          ChainSlot* found, ChainSlot* free_slot) {
  StoreBucket* prev = nullptr;
  if (free_slot != nullptr) *free_slot = ChainSlot{};
  for (;;) {
    for (uint32_t m = match_tags8(b->entries, tag) & kMatchStoreEntries; m != 0; m &= m - 1) {
      const int i = match_index(m);
      if (matches(b->entries[i])) {
        *found = ChainSlot{b, prev, i};
        return true;
      }
    }
    if (free_slot != nullptr && free_slot->index < 0) {
      // Tag 0 matches exactly the empty entries (tags are never 0).
      const uint32_t empty = match_tags8(b->entries, 0) & kMatchStoreEntries;
      if (empty != 0) *free_slot = ChainSlot{b, prev, match_index(empty)};
    }
    if (b->next == 0) break;
    prev = b;
    b = next(b->next);
  }
  if (free_slot != nullptr && free_slot->index < 0) *free_slot = ChainSlot{b, prev, -1};
  return false;
}

// Called after s's entry was cleared: an overflow bucket left empty is taken out of its chain,
// so that a burst of colliding keys does not keep its chain after the keys are gone. Returns
// the link that named it (for the caller to free), or 0 when it stays.
inline uint64_t unlink_if_empty(const ChainSlot& s) {
  if (s.prev == nullptr) return 0;
  for (uint64_t e : s.bucket->entries)
    if (e != 0) return 0;
  const uint64_t link = s.prev->next;
  s.prev->next = s.bucket->next;
  return link;
}

}  // namespace fabkv::store::layout
