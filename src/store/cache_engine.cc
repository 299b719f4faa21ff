#include "store/cache_engine.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "store/pipeline.h"

namespace fabkv::store {

using layout::CacheBucket;
using layout::ItemHeader;

namespace {

// Entries hold log offsets in 8-byte units truncated to 48 bits: they repeat every 2^51 bytes
// of appends. The log itself is capped well below that so that the sweep (sweep_st) has room
// to clear every dead entry before its offset could alias a live one.
constexpr uint64_t kOffsetRange = uint64_t{1} << (layout::kLocationBits + 3);
constexpr uint64_t kMaxLogSize = kOffsetRange >> 3;
constexpr uint64_t kSweepWindow = kOffsetRange >> 1;
static_assert(kMaxLogSize + kSweepWindow < kOffsetRange);

}  // namespace

CacheEngine::CacheEngine(const EngineOptions& opts)
    : mem_(opts.memory_bytes, opts.huge_pages, opts.prefault),
      version_(opts.first_version == 0 ? 1 : opts.first_version),
      max_value_(opts.max_value_size),
      clock_(opts.clock != nullptr ? opts.clock : &realtime_seconds),
      clock_ctx_(opts.clock_ctx) {
  const size_t bytes = opts.memory_bytes;
  const size_t nb = checked_index_buckets(opts, sizeof(CacheBucket));
  const size_t index_bytes = nb * sizeof(CacheBucket);
  const size_t max_item = layout::item_size(kMaxKeySize, max_value_);
  if (index_bytes >= bytes || (bytes - index_bytes) / 2 < max_item) {
    throw std::runtime_error("store: cache memory of " + std::to_string(bytes) + " bytes with " +
                             std::to_string(nb) + " index buckets leaves no log for two items of " +
                             std::to_string(max_item) +
                             " bytes; raise memory_bytes or lower "
                             "max_value_size");
  }
  log_size_ = (bytes - index_bytes) & ~uint64_t{tuning::kItemAlign - 1};
  if (log_size_ > kMaxLogSize) {
    throw std::runtime_error("store: cache log larger than 2^48 bytes; use more partitions");
  }
  buckets_ = reinterpret_cast<CacheBucket*>(mem_.base());
  bucket_mask_ = nb - 1;
  log_ = mem_.base() + index_bytes;
  // Visit every bucket at least once per kSweepWindow bytes of appends.
  sweep_interval_ = kSweepWindow / nb;
}

bool CacheEngine::live(uint64_t entry, uint64_t* abs) const {
  const uint64_t tail8 = tail_ >> 3;
  const uint64_t dist8 = (tail8 - layout::entry_location(entry)) & layout::kLocationMask;
  // dist8 == 0 would be an item that starts at the tail, i.e. not written yet: never valid.
  if (dist8 == 0 || dist8 > (log_size_ >> 3)) return false;
  *abs = tail_ - (dist8 << 3);
  return true;
}

void CacheEngine::prefetch_index(KeyHash h) const { __builtin_prefetch(&bucket(h), 0, 3); }

void CacheEngine::prefetch_item(KeyHash h) const {
  const CacheBucket& b = bucket(h);
  for (uint32_t m = layout::match_tags8(b.entries, tag_of(h)); m != 0; m &= m - 1) {
    uint64_t abs;
    if (!live(b.entries[layout::match_index(m)], &abs)) continue;
    const std::byte* item = item_at(abs);
    // Header and key are what the lookup reads; a 16-byte key and 32-byte value item is 72
    // bytes, so it may end in the next line.
    __builtin_prefetch(item, 0, 3);
    __builtin_prefetch(item + 63, 0, 3);
  }
}

// Forced inline: as an out-of-line call it cost the one-call GET ~25% (fabkv-store-bench
// GET/uniform/cache, 8.8 -> 6.5 M/s), the out-parameters then going through memory.
[[gnu::always_inline]] inline uint64_t* CacheEngine::find(KeyHash h, std::string_view key,
                                                          const std::byte** item, ItemHeader* hdr) {
  CacheBucket& b = bucket(h);
  // The mask is taken once: clearing a dead entry below cannot make another entry match.
  for (uint32_t m = layout::match_tags8(b.entries, tag_of(h)); m != 0; m &= m - 1) {
    uint64_t& e = b.entries[layout::match_index(m)];
    uint64_t abs;
    if (!live(e, &abs)) {
      // The log wrapped over this item: forget the entry now that we have noticed.
      e = 0;
      add_st(stats_.evictions);
      sub_st(stats_.items);
      continue;
    }
    const std::byte* it = item_at(abs);
    const ItemHeader ih = layout::load_header(it);
    if (!layout::key_matches(it, ih, key)) continue;  // tag collision
    *item = it;
    *hdr = ih;
    return &e;
  }
  return nullptr;
}

// The live item of `key` for a read: an expired one is dropped on the way (counted), a miss
// counted; hits are the caller's to count.
Status CacheEngine::find_live(KeyHash h, std::string_view key, const std::byte** item,
                              ItemHeader* hdr) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  uint64_t* e = find(h, key, item, hdr);
  if (e != nullptr && expired(*hdr)) {
    *e = 0;
    add_st(stats_.expired);
    sub_st(stats_.items);
    e = nullptr;
  }
  if (e == nullptr) {
    add_st(stats_.misses);
    return Status::kNotFound;
  }
  return Status::kOk;
}

Status CacheEngine::get(KeyHash h, std::string_view key, ItemView& out) {
  const std::byte* item = nullptr;
  ItemHeader hdr{};
  if (Status st = find_live(h, key, &item, &hdr); st != Status::kOk) return st;
  out = layout::item_view(item, hdr);
  add_st(stats_.hits);
  return Status::kOk;
}

// In place: the item keeps its place in the log, so a touch appends nothing and evicts nothing.
Status CacheEngine::touch(KeyHash h, std::string_view key, uint32_t expire_at, ItemView* out) {
  const std::byte* item = nullptr;
  ItemHeader hdr{};
  if (Status st = find_live(h, key, &item, &hdr); st != Status::kOk) return st;
  hdr.expire_at = expire_at;
  // find() hands out the item read-only; the log is this engine's own memory.
  layout::store_header(const_cast<std::byte*>(item), hdr);
  add_st(stats_.hits);
  if (out != nullptr) *out = layout::item_view(item, hdr);
  return Status::kOk;
}

uint64_t CacheEngine::append(std::string_view key, std::string_view value, const ItemHeader& h) {
  const uint64_t size = layout::item_size(key.size(), value.size());
  // Items never straddle the end of the log: skip the rest of the lap instead (the skipped
  // bytes count as appended, which keeps the liveness test a single subtraction).
  if (tail_ - lap_start_ + size > log_size_) {
    lap_start_ += log_size_;
    tail_ = lap_start_;
  }
  const uint64_t abs = tail_;
  std::byte* p = item_at(abs);
  // The value may be a view from an earlier get(), pointing into the log and possibly into
  // the bytes about to be overwritten. move_bytes copes with the overlap, and copying the value
  // before the header and key means those writes cannot clobber it first. (Keys are never
  // views into the log: they come from requests.)
  layout::move_bytes(p + layout::kItemHeaderSize + key.size(), value.data(), value.size());
  layout::move_bytes(p + layout::kItemHeaderSize, key.data(), key.size());
  layout::store_header(p, h);
  tail_ = abs + size;
  return abs;
}

void CacheEngine::sweep_st(uint64_t appended) {
  // Dead entries are normally cleared when a lookup in their bucket notices them. A bucket
  // nobody touches could keep one for 2^51 bytes of appends, after which its truncated offset
  // would look live again. So every kSweepWindow bytes the sweep visits all buckets once,
  // one bucket per sweep_interval_ bytes appended: cheap (one bucket per ~256 KiB or more).
  sweep_credit_ += appended;
  while (sweep_credit_ >= sweep_interval_) {
    sweep_credit_ -= sweep_interval_;
    CacheBucket& b = buckets_[sweep_bucket_];
    sweep_bucket_ = (sweep_bucket_ + 1) & bucket_mask_;
    for (uint64_t& e : b.entries) {
      uint64_t abs;
      if (e != 0 && !live(e, &abs)) {
        e = 0;
        add_st(stats_.evictions);
        sub_st(stats_.items);
      }
    }
  }
}

Status CacheEngine::put(KeyHash h, std::string_view key, std::string_view value,
                        const PutOptions& opts, uint64_t* new_version) {
  if (Status st = check_key(key, stats_, value.size(), max_value_); st != Status::kOk) return st;
  CacheBucket& b = bucket(h);
  const uint16_t tag = tag_of(h);
  int found = -1, oldest = -1;
  uint64_t oldest_abs = UINT64_MAX;
  ItemHeader old{};
  // Visit only the used entries, in index order; the empty ones come from one tag-0 match.
  // (A loop over all 8 that tested each for 0 cost ~30 instructions per PUT at the
  // benchmark's ~2 items per bucket, callgrind.)
  uint32_t empties = layout::match_tags8(b.entries, 0);
  for (uint32_t m = ~empties & layout::kMatchAll8; m != 0; m &= m - 1) {
    const int i = layout::match_index(m);
    uint64_t& e = b.entries[i];
    uint64_t abs;
    if (!live(e, &abs)) {
      e = 0;
      add_st(stats_.evictions);
      sub_st(stats_.items);
      empties |= 1u << (2 * i + 1);
      continue;
    }
    if (found < 0 && layout::entry_tag(e) == tag) {
      const std::byte* item = item_at(abs);
      const ItemHeader hdr = layout::load_header(item);
      if (layout::key_matches(item, hdr, key)) {
        found = i;
        old = hdr;
        continue;
      }
    }
    // MICA: a full bucket gives up the entry whose item is oldest in the log.
    if (abs < oldest_abs) {
      oldest_abs = abs;
      oldest = i;
    }
  }
  // The first slot that was empty or whose dead entry was just cleared.
  int empty = empties != 0 ? layout::match_index(empties) : -1;
  if (found >= 0 && expired(old)) {
    b.entries[found] = 0;
    add_st(stats_.expired);
    sub_st(stats_.items);
    if (empty < 0 || found < empty) empty = found;
    found = -1;
  }
  if (opts.expected_version != 0) {
    if (found < 0) return Status::kNotFound;
    if (old.version != opts.expected_version) {
      add_st(stats_.version_mismatches);
      return Status::kVersionMismatch;
    }
  }

  ItemHeader hdr{};
  hdr.version = stamp_version(version_, opts);
  hdr.expire_at = opts.expire_at;
  hdr.flags = opts.flags;
  hdr.value_size = static_cast<uint32_t>(value.size());
  hdr.key_size = static_cast<uint8_t>(key.size());
  const uint64_t tail_before = tail_;
  const uint64_t abs = append(key, value, hdr);
  const uint64_t entry = layout::make_entry(tag, abs >> 3);
  if (found >= 0) {
    b.entries[found] = entry;
  } else if (empty >= 0) {
    b.entries[empty] = entry;
    add_st(stats_.items);
  } else {
    b.entries[oldest] = entry;
    add_st(stats_.index_drops);
  }
  add_st(stats_.puts);
  stats_.bytes.store(tail_ < log_size_ ? tail_ : log_size_, std::memory_order_relaxed);
  sweep_st(tail_ - tail_before);
  if (new_version != nullptr) *new_version = hdr.version;
  return Status::kOk;
}

Status CacheEngine::del(KeyHash h, std::string_view key) {
  if (Status st = check_key(key, stats_); st != Status::kOk) return st;
  const std::byte* item = nullptr;
  ItemHeader hdr{};
  uint64_t* e = find(h, key, &item, &hdr);
  if (e == nullptr) return Status::kNotFound;
  // The log item stays where it is; without an index entry nothing can reach it.
  *e = 0;
  sub_st(stats_.items);
  if (expired(hdr)) {
    add_st(stats_.expired);
    return Status::kNotFound;
  }
  add_st(stats_.dels);
  return Status::kOk;
}

// Flattened: get/put/del inline into the pipeline loop. As out-of-line calls (the compiler
// declined to inline them) they cost ~16 instructions of register saves and restores per
// GET, plus the ItemView passed through memory (callgrind, docs/results/store-absl-2026-11-23.md).
[[gnu::flatten]] void CacheEngine::run_batch(std::span<const Request> reqs, CompletionFn done,
                                             size_t gap) {
  run_pipeline(*this, reqs, done, gap);
}

// Every index entry goes; the log's bytes stay where they are, unreachable, and are
// overwritten as the log wraps (as a DELETE leaves them).
bool CacheEngine::clear() {
  std::memset(static_cast<void*>(buckets_), 0, (bucket_mask_ + 1) * sizeof(layout::CacheBucket));
  stats_.items.store(0, std::memory_order_relaxed);
  return true;
}

uint64_t CacheEngine::scan(uint64_t cursor, uint64_t buckets, ScanFn fn) const {
  const uint64_t end = std::min(cursor + buckets, bucket_mask_ + 1);
  for (uint64_t i = cursor; i < end; ++i) {
    for (uint64_t e : buckets_[i].entries) {
      uint64_t abs;
      if (e == 0 || !live(e, &abs)) continue;
      const std::byte* it = item_at(abs);
      const ItemHeader h = layout::load_header(it);
      if (!expired(h)) fn(layout::scan_item(it, h));
    }
  }
  return end > bucket_mask_ ? 0 : end;
}

}  // namespace fabkv::store
