#include "store/store_engine.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "store/pipeline.h"

namespace fabkv::store {

using layout::ItemHeader;
using layout::StoreBucket;

StoreEngine::StoreEngine(const EngineOptions& opts)
    : mem_(opts.memory_bytes, opts.huge_pages, opts.prefault),
      version_(opts.first_version == 0 ? 1 : opts.first_version),
      max_value_(opts.max_value_size),
      clock_(opts.clock != nullptr ? opts.clock : &realtime_seconds),
      clock_ctx_(opts.clock_ctx) {
  const size_t bytes = opts.memory_bytes;
  const size_t nb = checked_index_buckets(opts, sizeof(StoreBucket));
  const size_t index_bytes = nb * sizeof(StoreBucket);
  if (index_bytes + 64 > bytes) {
    throw std::runtime_error("store: store memory of " + std::to_string(bytes) + " bytes with " +
                             std::to_string(nb) + " index buckets leaves no heap");
  }
  if (bytes - index_bytes >= (uint64_t{1} << (layout::kLocationBits + 3))) {
    throw std::runtime_error("store: store heap larger than 2^51 bytes; use more partitions");
  }
  buckets_ = reinterpret_cast<StoreBucket*>(mem_.base());
  bucket_mask_ = nb - 1;
  heap_ = Heap(mem_.base() + index_bytes, bytes - index_bytes);
}

void StoreEngine::prefetch_index(KeyHash h) const { __builtin_prefetch(&main_bucket(h), 0, 3); }

void StoreEngine::prefetch_item(KeyHash h) const {
  // Only the main bucket is cached by now; chains are rare at sane load factors and are
  // followed at execution time.
  const StoreBucket& b = main_bucket(h);
  for (uint32_t m = layout::match_tags8(b.entries, tag_of(h)) & layout::kMatchStoreEntries; m != 0;
       m &= m - 1) {
    const std::byte* it = item(b.entries[layout::match_index(m)]);
    __builtin_prefetch(it, 0, 3);
    __builtin_prefetch(it + 63, 0, 3);
  }
}

bool StoreEngine::find(KeyHash h, std::string_view key, Slot* found, Slot* free_slot) const {
  return layout::find_in_chain(
      &main_bucket(h), tag_of(h), [this](uint64_t link) { return overflow(link); },
      [&](uint64_t e) {
        const std::byte* it = item(e);
        return layout::key_matches(it, layout::load_header(it), key);
      },
      found, free_slot);
}

void StoreEngine::remove(const Slot& s) {
  uint64_t& e = s.bucket->entries[s.index];
  heap_.free(layout::entry_location(e) << 3);
  e = 0;
  sub_st(stats_.items);
  if (const uint64_t link = layout::unlink_if_empty(s); link != 0) {
    heap_.free(link);
    sub_st(stats_.overflow_buckets);
  }
  stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
}

Status StoreEngine::get(KeyHash h, std::string_view key, ItemView& out) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  Slot s;
  if (find(h, key, &s, nullptr)) {
    const std::byte* it = item(s.bucket->entries[s.index]);
    const ItemHeader hdr = layout::load_header(it);
    if (!expired(hdr)) {
      out = layout::item_view(it, hdr);
      add_st(stats_.hits);
      return Status::kOk;
    }
    remove(s);
    add_st(stats_.expired);
  }
  add_st(stats_.misses);
  return Status::kNotFound;
}

// In place: the item keeps its heap block.
Status StoreEngine::touch(KeyHash h, std::string_view key, uint32_t expire_at, ItemView* out) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  Slot s;
  if (find(h, key, &s, nullptr)) {
    std::byte* it = item(s.bucket->entries[s.index]);
    ItemHeader hdr = layout::load_header(it);
    if (!expired(hdr)) {
      hdr.expire_at = expire_at;
      layout::store_header(it, hdr);
      add_st(stats_.hits);
      if (out != nullptr) *out = layout::item_view(it, hdr);
      return Status::kOk;
    }
    remove(s);
    add_st(stats_.expired);
  }
  add_st(stats_.misses);
  return Status::kNotFound;
}

// Not inlined into the flattened run_batch: inlined there (with the heap's alloc and free),
// pipelined store PUTs ran at half speed on the 8 M-key benchmark (4.4 against 7.1 Mops per
// core at 1 M keys), although callgrind counted fewer instructions; not understood.
[[gnu::noinline]] Status StoreEngine::put(KeyHash h, std::string_view key, std::string_view value,
                                          const PutOptions& opts, uint64_t* new_version) {
  if (Status st = check_key(key, stats_, value.size(), max_value_); st != Status::kOk) return st;
  Slot found, free_slot;
  bool exists = find(h, key, &found, &free_slot);
  ItemHeader old{};
  if (exists) {
    old = layout::load_header(item(found.bucket->entries[found.index]));
    if (expired(old)) {
      remove(found);
      add_st(stats_.expired);
      // The removal may have unlinked a bucket; look again for a free slot (rare path).
      exists = find(h, key, &found, &free_slot);
    }
  }
  if (opts.expected_version != 0) {
    if (!exists) return Status::kNotFound;
    if (old.version != opts.expected_version) {
      add_st(stats_.version_mismatches);
      return Status::kVersionMismatch;
    }
  }

  // Take all the memory first, so that a failure leaves the partition unchanged.
  const uint64_t payload = heap_.alloc(layout::item_size(key.size(), value.size()));
  if (payload == Heap::kNil) {
    add_st(stats_.no_space);
    return Status::kNoSpace;
  }
  if (!exists && free_slot.index < 0) {
    const uint64_t ob = heap_.alloc(sizeof(StoreBucket));
    if (ob == Heap::kNil) {
      heap_.free(payload);
      add_st(stats_.no_space);
      return Status::kNoSpace;
    }
    std::memset(heap_.at(ob), 0, sizeof(StoreBucket));
    free_slot.bucket->next = ob;
    free_slot = Slot{overflow(ob), free_slot.bucket, 0};
    add_st(stats_.overflow_buckets);
  }

  ItemHeader hdr{};
  hdr.version = stamp_version(version_, opts);
  hdr.expire_at = opts.expire_at;
  hdr.flags = opts.flags;
  hdr.value_size = static_cast<uint32_t>(value.size());
  hdr.key_size = static_cast<uint8_t>(key.size());
  std::byte* p = heap_.at(payload);
  layout::store_header(p, hdr);
  layout::move_bytes(p + layout::kItemHeaderSize, key.data(), key.size());
  // The value may be a view of this engine's memory (an earlier get()); the new block is
  // disjoint from every live block, and the old item is freed only after this copy.
  layout::move_bytes(p + layout::kItemHeaderSize + key.size(), value.data(), value.size());

  const uint64_t entry = layout::make_entry(tag_of(h), payload >> 3);
  if (exists) {
    uint64_t& e = found.bucket->entries[found.index];
    const uint64_t old_payload = layout::entry_location(e) << 3;
    e = entry;
    heap_.free(old_payload);
  } else {
    free_slot.bucket->entries[free_slot.index] = entry;
    add_st(stats_.items);
  }
  add_st(stats_.puts);
  stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
  if (new_version != nullptr) *new_version = hdr.version;
  return Status::kOk;
}

Status StoreEngine::del(KeyHash h, std::string_view key) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  Slot s;
  if (!find(h, key, &s, nullptr)) return Status::kNotFound;
  const bool was_expired = expired(layout::load_header(item(s.bucket->entries[s.index])));
  remove(s);
  if (was_expired) {
    add_st(stats_.expired);
    return Status::kNotFound;
  }
  add_st(stats_.dels);
  return Status::kOk;
}

// Flattened: get/put/del inline into the pipeline loop. As out-of-line calls (the compiler
// declined to inline them) they cost ~16 instructions of register saves and restores per
// GET, plus the ItemView passed through memory (callgrind, docs/results/store-absl-2026-11-23.md).
[[gnu::flatten]] void StoreEngine::run_batch(std::span<const Request> reqs, CompletionFn done,
                                             size_t gap) {
  run_pipeline(*this, reqs, done, gap);
}

// Every item's block and every overflow bucket go back to the heap; the main buckets are
// zeroed.
bool StoreEngine::clear() {
  for (uint64_t i = 0; i <= bucket_mask_; ++i) {
    StoreBucket* b = &buckets_[i];
    uint64_t next = b->next;
    for (uint64_t e : b->entries)
      if (e != 0) heap_.free(layout::entry_location(e) << 3);
    std::memset(static_cast<void*>(b), 0, sizeof(StoreBucket));
    while (next != 0) {
      StoreBucket* o = overflow(next);
      for (uint64_t e : o->entries)
        if (e != 0) heap_.free(layout::entry_location(e) << 3);
      const uint64_t payload = next;
      next = o->next;
      heap_.free(payload);
    }
  }
  stats_.items.store(0, std::memory_order_relaxed);
  stats_.overflow_buckets.store(0, std::memory_order_relaxed);
  stats_.bytes.store(heap_.used_bytes(), std::memory_order_relaxed);
  return true;
}

std::string StoreEngine::check() const {
  std::string err = heap_.check();
  if (!err.empty()) return "heap: " + err;
  uint64_t items = 0, overflow_buckets = 0;
  for (uint64_t i = 0; i <= bucket_mask_; ++i) {
    for (const StoreBucket* b = &buckets_[i];; b = overflow(b->next)) {
      for (uint64_t e : b->entries) {
        if (e == 0) continue;
        ++items;
        const ItemHeader hdr = layout::load_header(item(e));
        if (hdr.key_size == 0 || hdr.key_size > kMaxKeySize) return "item with a bad key size";
        const KeyHash kh = hash_key(std::string_view(
            reinterpret_cast<const char*>(layout::item_key(item(e))), hdr.key_size));
        if (bucket_of(kh, bucket_mask_) != i || tag_of(kh) != layout::entry_tag(e)) {
          return "entry in the wrong bucket or with the wrong tag";
        }
      }
      if (b->next == 0) break;
      ++overflow_buckets;
    }
  }
  const StatsSnapshot st = stats();
  if (st.items != items)
    return "stats.items " + std::to_string(st.items) + " != " + std::to_string(items);
  if (st.overflow_buckets != overflow_buckets) return "stats.overflow_buckets wrong";
  return "";
}

uint64_t StoreEngine::scan(uint64_t cursor, uint64_t buckets, ScanFn fn) const {
  const uint64_t end = std::min(cursor + buckets, bucket_mask_ + 1);
  for (uint64_t i = cursor; i < end; ++i) {
    for (const StoreBucket* b = &buckets_[i];; b = overflow(b->next)) {
      for (uint64_t e : b->entries) {
        if (e == 0) continue;
        const std::byte* it = item(e);
        const ItemHeader h = layout::load_header(it);
        if (!expired(h)) fn(layout::scan_item(it, h));
      }
      if (b->next == 0) break;
    }
  }
  return end > bucket_mask_ ? 0 : end;
}

}  // namespace fabkv::store
