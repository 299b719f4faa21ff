#include "proto/drtm/engine.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace fabkv::drtm {

using store::add_st;
using store::kMaxKeySize;
using store::kMaxValueSizeLimit;
using store::sub_st;

namespace {

constexpr size_t kBucketBytes = sizeof(Bucket);
// A worker GET retries a record that changed under it (only the NIC can do that, on verbs)
// this many times before it counts a miss (torn_gets).
constexpr int kGetRetries = 64;

std::atomic_ref<uint64_t> lock_of(char* item) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(item));
}

}  // namespace

Engine::Engine(const store::EngineOptions& opts, const EngineConfig& dopts)
    : retired_(dopts.retire_grace_ms),
      max_value_(opts.max_value_size),
      clock_(opts.clock),
      clock_ctx_(opts.clock_ctx) {
  if (opts.max_value_size > kMaxValueSizeLimit)
    throw std::runtime_error(fmt::format("drtm: max_value_size {} exceeds the limit {}",
                                         opts.max_value_size, kMaxValueSizeLimit));
  size_t table = dopts.table_bytes != 0 ? dopts.table_bytes : opts.memory_bytes / 8;
  uint64_t buckets = std::max<uint64_t>(table / kBucketBytes, 20);
  const size_t largest = drtm::item_bytes(kMaxKeySize, drtm::capacity_for(max_value_)) + 64;
  if (opts.memory_bytes < buckets * kBucketBytes + 2 * largest)
    throw std::runtime_error(
        fmt::format("drtm: {} bytes hold no table of {} buckets and two largest items",
                    opts.memory_bytes, buckets));
  regions_.overflow_buckets = buckets / 4;
  regions_.main_buckets = buckets - regions_.overflow_buckets;
  regions_.table_bytes = buckets * kBucketBytes;
  table_mem_ = std::make_unique<store::PartitionMemory>(regions_.table_bytes, opts.huge_pages,
                                                        true);
  items_mem_ = std::make_unique<store::PartitionMemory>(opts.memory_bytes - regions_.table_bytes,
                                                        opts.huge_pages, opts.prefault);
  regions_.table = table_mem_->base();
  regions_.items = items_mem_->base();
  regions_.items_bytes = items_mem_->size();
  heap_ = store::Heap(regions_.items, regions_.items_bytes);
  // Every bucket sealed empty: a client judges every bucket it READs by its check.
  for (uint64_t i = 0; i < buckets; ++i) seal(i, Bucket{});
  version_ = std::max<uint64_t>(opts.first_version, 1);
}

Engine::~Engine() = default;

store::EngineMemory Engine::memory() const {
  return store::EngineMemory{regions_.items, regions_.items_bytes, items_mem_->huge_pages()};
}

void Engine::seal(uint64_t i, Bucket b) {
  b.check = drtm::bucket_check(b, i);
  // Readers judge their copy by the check; the fences keep the compiler from moving this copy
  // across the item writes before it and the retirement after it (on x86 stores already reach
  // memory in program order).
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(bucket(i), &b, sizeof(b));
  std::atomic_thread_fence(std::memory_order_release);
}

void Engine::set_slot(uint64_t i, uint32_t slot, const BucketSlot& s) {
  Bucket b;
  std::memcpy(&b, bucket(i), sizeof(b));
  b.slots[slot] = s;
  seal(i, b);
}

Engine::Where Engine::find(std::string_view key) const {
  const drtm::KeyPlace kp = drtm::key_place(key, regions_.main_buckets);
  uint64_t i = kp.bucket;
  for (uint64_t hops = 0; hops <= regions_.overflow_buckets; ++hops) {
    const Bucket* b = bucket(i);
    for (uint32_t s = 0; s < drtm::kSlotsPerBucket; ++s) {
      const BucketSlot& sl = b->slots[s];
      if (sl.bytes == 0 || drtm::slot_tag(sl) != kp.tag) continue;
      // The head and key never change while the item is in the table: plain reads.
      const char* it = item_at(drtm::slot_offset(sl));
      ItemHead h;
      std::memcpy(&h, it, sizeof(h));
      if (h.key_len == key.size() &&
          std::memcmp(it + sizeof(ItemHead), key.data(), key.size()) == 0)
        return Where{true, i, s, sl};
    }
    if (b->next == 0) break;
    i = b->next;
  }
  return Where{};
}

std::byte* Engine::item_of(std::string_view key) const {
  Where w = find(key);
  return w.ok ? reinterpret_cast<std::byte*>(item_at(drtm::slot_offset(w.s))) : nullptr;
}

uint64_t Engine::make_item(std::string_view key, std::string_view value, uint64_t version,
                           uint32_t expire_at, BucketSlot* slot, uint16_t tag) {
  const uint32_t cap = drtm::capacity_for(value.size());
  const size_t bytes = drtm::item_bytes(static_cast<uint16_t>(key.size()), cap);
  const uint64_t off = heap_.alloc(bytes);
  if (off == store::Heap::kNil) return 0;
  char* it = item_at(off);
  std::memset(it, 0, bytes);
  ItemHead h{};
  if (++incarnation_ == 0) incarnation_ = 1;
  h.incarnation = incarnation_;
  h.lock = drtm::unlocked(version, h.incarnation);
  h.capacity = cap;
  h.key_len = static_cast<uint16_t>(key.size());
  h.head_check = drtm::head_check(h, key);
  std::memcpy(it, &h, sizeof(h));
  std::memcpy(it + sizeof(ItemHead), key.data(), key.size());
  drtm::build_record(it + drtm::record_offset(h.key_len, cap, static_cast<uint32_t>(version & 1)),
                     version, expire_at, value, h.head_check);
  slot->item = drtm::slot_word(off, tag);
  slot->bytes = static_cast<uint32_t>(bytes);
  slot->incarnation = h.incarnation;
  add_st(stats_.items);
  add_st(stats_.bytes, heap_.block_size(off));
  return off;
}

uint64_t Engine::retire(uint64_t offset) {
  char* it = item_at(offset);
  auto word = lock_of(it);
  uint64_t w = word.load(std::memory_order_acquire);
  // On shm and tcp no remote atomic runs while the owner thread is here, so the first CAS
  // succeeds; on verbs the NIC may take the lock between the load and the CAS: try again with
  // what it found.
  while (!word.compare_exchange_strong(w, drtm::kRetired, std::memory_order_acq_rel))
    add_st(own_cas_failures_);
  // A holder's PUT counts as done before whatever retired its item (docs/drtm.md): the
  // version it was going to give must never be handed out again for this key.
  const uint64_t last = drtm::version_of(w) + (drtm::is_locked(w) ? 1 : 0);
  version_ = std::max(version_, last + 1);
  retired_.push(offset);
  sub_st(stats_.items);
  return last;
}

void Engine::housekeeping() {
  retired_.reap([&](uint64_t off) {
    sub_st(stats_.bytes, heap_.block_size(off));
    heap_.free(off);
  });
}

store::Status Engine::get(store::KeyHash, std::string_view key, store::ItemView& out) {
  store::Status st = check_key(key, stats_);
  if (st != store::Status::kOk) return st;
  Where w = find(key);
  if (!w.ok) {
    add_st(stats_.misses);
    return store::Status::kNotFound;
  }
  char* it = item_at(drtm::slot_offset(w.s));
  drtm::ItemValue v;
  drtm::ItemRead r = drtm::ItemRead::kTorn;
  for (int i = 0; i < kGetRetries && r == drtm::ItemRead::kTorn; ++i)
    r = drtm::read_item(it, w.s.bytes, key, w.s.incarnation, &v);
  if (r != drtm::ItemRead::kValue) {
    if (r == drtm::ItemRead::kTorn) add_st(torn_gets_);
    add_st(stats_.misses);
    return store::Status::kNotFound;
  }
  if (expired(v.expire_at)) {
    // Lazy expiry, as the other engines; a locked item is left to its holder, whose PUT sets
    // a new expiry (this GET then came first).
    if (!v.locked) {
      set_slot(w.bucket, w.slot, BucketSlot{});
      retire(drtm::slot_offset(w.s));
      add_st(stats_.expired);
    }
    add_st(stats_.misses);
    return store::Status::kNotFound;
  }
  add_st(stats_.hits);
  out.value = v.value;
  out.version = v.version;
  out.expire_at = v.expire_at;
  return store::Status::kOk;
}

Engine::Where Engine::free_slot(const drtm::KeyPlace& kp, uint64_t* last) const {
  Where free;
  uint64_t i = kp.bucket;
  for (uint64_t hops = 0; hops <= regions_.overflow_buckets; ++hops) {
    const Bucket* b = bucket(i);
    for (uint32_t s = 0; s < drtm::kSlotsPerBucket; ++s)
      if (b->slots[s].bytes == 0) {
        free.ok = true;
        free.bucket = i;
        free.slot = s;
        return free;
      }
    *last = i;
    if (b->next == 0) break;
    i = b->next;
  }
  return free;
}

store::Status Engine::put(store::KeyHash, std::string_view key, std::string_view value,
                          const store::PutOptions& opts, uint64_t* new_version) {
  store::Status st = check_key(key, stats_, value.size(), max_value_);
  if (st != store::Status::kOk) return st;
  Where w = find(key);
  uint64_t floor = version_;  // the new version is at least this
  if (w.ok) {
    char* it = item_at(drtm::slot_offset(w.s));
    auto word = lock_of(it);
    uint64_t lw = word.load(std::memory_order_acquire);
    ItemHead h;
    std::memcpy(&h, it, sizeof(h));
    // The version a CAS compares with: a holder's PUT counts as done first (see retire()).
    const uint64_t current = drtm::version_of(lw) + (drtm::is_locked(lw) ? 1 : 0);
    drtm::ItemValue cur;
    const bool live = drtm::read_item(it, w.s.bytes, key, w.s.incarnation, &cur) ==
                          drtm::ItemRead::kValue &&
                      !expired(cur.expire_at);
    if (opts.expected_version != 0) {
      if (!live && !drtm::is_locked(lw)) return store::Status::kNotFound;
      if (opts.expected_version != current) {
        add_st(stats_.version_mismatches);
        return store::Status::kVersionMismatch;
      }
    }
    if (!drtm::is_locked(lw) && value.size() <= h.capacity) {
      // In place, under the lock, as a client PUT: the current record stays whole for readers.
      if (word.compare_exchange_strong(lw, lw | 1, std::memory_order_acq_rel)) {
        const uint64_t v = drtm::version_of(lw) + 1;
        drtm::build_record(it + drtm::record_offset(h.key_len, h.capacity,
                                                    static_cast<uint32_t>(v & 1)),
                           v, opts.expire_at, value, h.head_check);
        word.store(drtm::unlocked(v, h.incarnation), std::memory_order_release);
        add_st(in_place_);
        add_st(stats_.puts);
        if (new_version) *new_version = v;
        return store::Status::kOk;
      }
      // verbs: a client took the lock between our load and the CAS; replace the item.
      add_st(own_cas_failures_);
    }
    if (drtm::is_locked(lw)) add_st(locked_seen_);
    // lw as last seen (the failed CAS above reloads it).
    floor = std::max(floor, drtm::version_of(lw) + (drtm::is_locked(lw) ? 1 : 0) + 1);
  } else if (opts.expected_version != 0) {
    return store::Status::kNotFound;
  }
  // A new item: for a new key, or to replace one that is locked or too small. All memory is
  // taken first, so that a failure changes nothing.
  const drtm::KeyPlace kp = drtm::key_place(key, regions_.main_buckets);
  uint64_t last = kp.bucket;
  Where free;
  if (!w.ok) {
    free = free_slot(kp, &last);
    if (!free.ok && next_overflow_ >= regions_.overflow_buckets) {
      add_st(stats_.no_space);
      return store::Status::kNoSpace;
    }
  }
  const uint64_t v = std::min(floor, drtm::kMaxVersion);
  BucketSlot ns{};
  if (make_item(key, value, v, opts.expire_at, &ns, kp.tag) == 0) {
    add_st(stats_.no_space);
    return store::Status::kNoSpace;
  }
  version_ = std::max(version_, v + 1);
  if (w.ok) {
    // The new item takes the slot, then the old one is retired: a reader that still finds the
    // old one sees kRetired and looks again.
    set_slot(w.bucket, w.slot, ns);
    retire(drtm::slot_offset(w.s));
    add_st(superseded_);
  } else if (free.ok) {
    set_slot(free.bucket, free.slot, ns);
  } else {
    // DrTM's indirect header: a sealed overflow bucket first, then the link to it.
    const uint64_t ob = regions_.main_buckets + next_overflow_++;
    Bucket b{};
    b.slots[0] = ns;
    seal(ob, b);
    Bucket prev;
    std::memcpy(&prev, bucket(last), sizeof(prev));
    prev.next = static_cast<uint32_t>(ob);
    seal(last, prev);
    add_st(overflow_used_);
    add_st(stats_.overflow_buckets);
  }
  add_st(stats_.puts);
  if (new_version) *new_version = v;
  return store::Status::kOk;
}

store::Status Engine::del(store::KeyHash, std::string_view key) {
  store::Status st = check_key(key, stats_);
  if (st != store::Status::kOk) return st;
  Where w = find(key);
  if (!w.ok) return store::Status::kNotFound;
  char* it = item_at(drtm::slot_offset(w.s));
  drtm::ItemValue cur;
  const uint64_t lw = drtm::load_lock(it);
  const bool live = drtm::is_locked(lw) || (drtm::read_item(it, w.s.bytes, key, w.s.incarnation,
                                                            &cur) == drtm::ItemRead::kValue &&
                                            !expired(cur.expire_at));
  if (drtm::is_locked(lw)) add_st(locked_seen_);
  set_slot(w.bucket, w.slot, BucketSlot{});
  retire(drtm::slot_offset(w.s));
  if (!live) return store::Status::kNotFound;  // expired: removed, but there was nothing to delete
  add_st(stats_.dels);
  return store::Status::kOk;
}

void Engine::run_batch(std::span<const store::Request> reqs, store::CompletionFn done, size_t) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    const store::Request& q = reqs[i];
    store::Response r;
    switch (q.op) {
      case store::Op::kGet: {
        store::ItemView v;
        r.status = get(q.hash, q.key, v);
        if (r.status == store::Status::kOk) {
          r.value = v.value;
          r.version = v.version;
          r.expire_at = v.expire_at;
        }
        break;
      }
      case store::Op::kPut: r.status = put(q.hash, q.key, q.value, q.put, &r.version); break;
      case store::Op::kDel: r.status = del(q.hash, q.key); break;
      case store::Op::kTouch: {
        store::ItemView v;
        r.status = touch(q.hash, q.key, q.put.expire_at, &v);
        r.value = v.value;
        r.version = v.version;
        r.expire_at = v.expire_at;
        break;
      }
    }
    done(i, r);
  }
}

Engine::DrtmStats Engine::drtm_stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return DrtmStats{r(in_place_),      r(superseded_), r(locked_seen_),     retired_.size(),
                   r(overflow_used_), r(torn_gets_),  r(own_cas_failures_)};
}

std::string Engine::check() const {
  const uint64_t n = regions_.main_buckets + regions_.overflow_buckets;
  uint64_t items = 0;
  for (uint64_t i = 0; i < n; ++i) {
    Bucket b;
    if (!drtm::read_bucket(bucket(i), i, &b)) return fmt::format("bucket {} is not sealed", i);
    if (b.next != 0 && (b.next < regions_.main_buckets || b.next >= n))
      return fmt::format("bucket {} links to {}", i, b.next);
    for (uint32_t s = 0; s < drtm::kSlotsPerBucket; ++s) {
      const BucketSlot& sl = b.slots[s];
      if (sl.bytes == 0) continue;
      ++items;
      const char* it = item_at(drtm::slot_offset(sl));
      ItemHead h;
      std::memcpy(&h, it, sizeof(h));
      std::string_view key(it + sizeof(ItemHead), h.key_len);
      drtm::ItemValue v;
      drtm::ItemRead r = drtm::read_item(it, sl.bytes, key, sl.incarnation, &v);
      if (r != drtm::ItemRead::kValue)
        return fmt::format("bucket {} slot {}: item '{}' reads as {}", i, s, key,
                           static_cast<int>(r));
      if (drtm::key_place(key, regions_.main_buckets).tag != drtm::slot_tag(sl))
        return fmt::format("bucket {} slot {}: tag of another key", i, s);
    }
  }
  if (items != stats_.snapshot().items)
    return fmt::format("{} items in the table, {} counted", items, stats_.snapshot().items);
  return heap_.check();
}

std::unique_ptr<store::Engine> make_engine(const proto::EngineSpec& spec) {
  return std::make_unique<Engine>(spec.store);
}

// proto/registry.h, clients_write_engine: DrTM-KV clients PUT by CAS and WRITE straight into the
// items (docs/drtm.md).
bool clients_write_items() { return true; }

}  // namespace fabkv::drtm
