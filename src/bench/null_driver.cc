// The null target (`--systems null`): a Driver whose every request completes at the next
// poll() of its client, with no server, no fabric and no socket behind it. It exists to
// measure the load generator's own CPU per request (docs/bench.md, issue #12 goal 4): against
// it, everything the load thread spends is the generator's (and this table's) cost.
//
// It is still a key-value store, so the runner's GET check stays real: PUTs are stored in a
// table keyed by the full key (compared in full, never trusted to the hash) and a GET returns
// what the last PUT of that key stored, or "not found". A run against it therefore checks
// every GET exactly as against fabkv, memcached or redis.
//
// The table is open addressing with linear probing over 64-byte slots that hold the key and
// the value inline when they fit (48 bytes: the bench's default 16-byte keys and 32-byte
// values), so a lookup touches one cache line; larger items go to the heap. Slot arrays of
// 2 MiB and more are backed by transparent huge pages where the kernel allows (madvise), to
// spare the lookups TLB misses on top of their cache misses (not measured apart): the first
// profile of this driver spent a third of the load thread's time on the load of a slot's
// hash in a 16 MiB table (docs/results/loadgen-2026-11-23.md). With more than one load thread
// (DriverOptions::load_threads) the table is split into shards by hash, each with its own
// spin lock; with one, there is one shard and no lock.
//
// DriverOptions::null_slow_client_us makes client 0 a slow one: it sleeps in each poll that
// completes something, holding up the thread that drives it and nobody else.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/driver.h"
#include "store/hash.h"

namespace fabkv::bench {
namespace {

class NullTable {
 public:
  explicit NullTable(bool shared) : shared_(shared) {}

  // Hash 0 marks an empty slot.
  static uint64_t hash_of(std::string_view key) {
    uint64_t h = store::hash_key(key).h;
    return h ? h : 1;
  }

  // Starts loading the line a lookup of `h` will read first (one thread only: a shared table
  // may be growing under another thread's lock).
  void prefetch(uint64_t h) const {
    if (shared_) return;
    const Shard& s = shards_[0];
    __builtin_prefetch(&s.slots[(h >> kShardBits) & (s.slots.size() - 1)]);
  }

  // Copies the value of `key` (hashing to h) into *out; false when there is none.
  bool get(uint64_t h, std::string_view key, std::string* out) {
    Shard& s = shard_of(h);
    Lock l(s, shared_);
    const Slot* slot = s.find(h, key);
    if (!slot) return false;
    std::string_view v = slot->value();
    out->assign(v.data(), v.size());
    return true;
  }

  void put(uint64_t h, std::string_view key, std::string_view value) {
    Shard& s = shard_of(h);
    Lock l(s, shared_);
    s.upsert(h, key, value);
  }

 private:
  static constexpr size_t kInline = 48;
  static constexpr int kShardBits = 4;  // 16 shards when shared

  // All zeroes is an empty slot (the arrays come zeroed from SlotArray).
  struct alignas(64) Slot {
    uint64_t hash;  // 0: empty
    uint32_t value_len;
    uint32_t key_len;
    // key then value, inline when they fit; else a heap block of `capacity` bytes
    union {
      char inline_data[kInline];
      struct {
        char* data;
        size_t capacity;
      } heap;
    };

    bool on_heap() const { return key_len + value_len > kInline; }
    const char* bytes() const { return on_heap() ? heap.data : inline_data; }
    std::string_view key() const { return {bytes(), key_len}; }
    std::string_view value() const { return {bytes() + key_len, value_len}; }
    void release() {
      if (hash && on_heap()) delete[] heap.data;
    }
    // Stores key+value in this (empty or same-key) slot.
    void assign(uint64_t h, std::string_view k, std::string_view v) {
      const size_t n = k.size() + v.size();
      if (n > kInline) {
        if (!(hash && on_heap() && heap.capacity >= n)) {
          release();
          heap.data = new char[n];
          heap.capacity = n;
        }
      } else {
        release();
      }
      hash = h;
      key_len = static_cast<uint32_t>(k.size());
      value_len = static_cast<uint32_t>(v.size());
      char* d = n > kInline ? heap.data : inline_data;
      std::memcpy(d, k.data(), k.size());
      if (!v.empty()) std::memcpy(d + k.size(), v.data(), v.size());
    }
  };
  static_assert(sizeof(Slot) == 64 && std::is_trivially_copyable_v<Slot>);

  // A zeroed array of slots; 2 MiB-aligned and advised to huge pages from 2 MiB on.
  class SlotArray {
   public:
    explicit SlotArray(size_t n) : n_(n) {
      static constexpr size_t kHuge = size_t{2} << 20;
      size_t bytes = n * sizeof(Slot);
      const size_t align = bytes >= kHuge ? kHuge : alignof(Slot);
      bytes = (bytes + align - 1) / align * align;
      void* p = std::aligned_alloc(align, bytes);
      if (!p) throw std::bad_alloc();
      if (align == kHuge) ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: fine if refused
      std::memset(p, 0, bytes);
      slots_ = static_cast<Slot*>(p);
    }
    ~SlotArray() { std::free(slots_); }
    SlotArray(const SlotArray&) = delete;
    SlotArray& operator=(const SlotArray&) = delete;
    void swap(SlotArray& o) {
      std::swap(slots_, o.slots_);
      std::swap(n_, o.n_);
    }
    size_t size() const { return n_; }
    Slot& operator[](size_t i) { return slots_[i]; }
    const Slot& operator[](size_t i) const { return slots_[i]; }

   private:
    Slot* slots_ = nullptr;
    size_t n_ = 0;
  };

  struct Shard {
    SlotArray slots{64};
    size_t used = 0;
    std::atomic<bool> locked{false};

    ~Shard() {
      for (size_t i = 0; i < slots.size(); ++i) slots[i].release();
    }
    const Slot* find(uint64_t h, std::string_view key) const {
      const size_t mask = slots.size() - 1;
      for (size_t i = (h >> kShardBits) & mask;; i = (i + 1) & mask) {
        const Slot& s = slots[i];
        if (s.hash == 0) return nullptr;
        if (s.hash == h && s.key() == key) return &s;
      }
    }
    void upsert(uint64_t h, std::string_view key, std::string_view value) {
      if (2 * (used + 1) > slots.size()) grow();
      const size_t mask = slots.size() - 1;
      for (size_t i = (h >> kShardBits) & mask;; i = (i + 1) & mask) {
        Slot& s = slots[i];
        if (s.hash == 0) {
          s.assign(h, key, value);
          used++;
          return;
        }
        if (s.hash == h && s.key() == key) {
          s.assign(h, key, value);
          return;
        }
      }
    }
    // Slots move bitwise: a heap block changes owner, nothing is copied or freed.
    void grow() {
      SlotArray bigger(slots.size() * 2);
      const size_t mask = bigger.size() - 1;
      for (size_t j = 0; j < slots.size(); ++j) {
        const Slot& o = slots[j];
        if (o.hash == 0) continue;
        size_t i = (o.hash >> kShardBits) & mask;
        while (bigger[i].hash != 0) i = (i + 1) & mask;
        bigger[i] = o;
      }
      slots.swap(bigger);  // the old array is freed without releasing the moved blocks
    }
  };

  class Lock {
   public:
    Lock(Shard& s, bool on) : s_(on ? &s : nullptr) {
      if (!s_) return;
      while (s_->locked.exchange(true, std::memory_order_acquire))
        while (s_->locked.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
    ~Lock() {
      if (s_) s_->locked.store(false, std::memory_order_release);
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    Shard* s_;
  };

  Shard& shard_of(uint64_t h) { return shards_[h & shard_mask_]; }

  const bool shared_;
  const size_t shard_mask_ = shared_ ? (size_t{1} << kShardBits) - 1 : 0;
  std::unique_ptr<Shard[]> shards_ = std::make_unique<Shard[]>(shard_mask_ + 1);
};

class NullDriver final : public Driver {
 public:
  explicit NullDriver(const DriverOptions& o)
      : table_(o.load_threads > 1), conns_(o.clients), slow_us_(o.null_slow_client_us) {}

  std::string system() const override { return "null"; }
  std::string protocol() const override { return "none"; }
  size_t clients() const override { return conns_.size(); }

  // A request is queued with its key's hash, and the line its lookup reads first is
  // prefetched; it takes effect (a PUT stores, a GET copies the value out) and completes at
  // the client's next poll(), in the order posted. With several requests in flight their
  // cache misses overlap, as a server's would.
  bool get(size_t c, std::string_view key, Completion done) override {
    queue(c, key, done).is_put = false;
    return true;
  }
  bool put(size_t c, std::string_view key, std::string_view value, Completion done) override {
    Pending& p = queue(c, key, done);
    p.is_put = true;
    p.value.assign(value.data(), value.size());
    return true;
  }
  // Completes what was pending when it was called; completions may post again (into the
  // other list, so the entry whose callback runs is never moved or reused meanwhile).
  size_t poll(size_t c) override {
    Conn& k = conns_[c];
    std::swap(k.pending, k.completing);
    const size_t n = std::exchange(k.n_pending, 0);
    if (c == 0 && slow_us_ && n) std::this_thread::sleep_for(std::chrono::microseconds(slow_us_));
    for (size_t i = 0; i < n; ++i) {
      Pending& p = k.completing[i];
      if (p.is_put) {
        table_.put(p.hash, p.key, p.value);
        p.done(OpStatus::kOk, {});
      } else {
        const bool found = table_.get(p.hash, p.key, &p.value);
        p.done(found ? OpStatus::kOk : OpStatus::kNotFound, found ? p.value : std::string_view());
      }
    }
    return n;
  }

  uint64_t max_value() const override { return 64ull << 20; }
  ServerSample sample_server() override { return {}; }
  std::string error() const override { return {}; }

 private:
  struct Pending {
    Completion done;
    bool is_put = false;
    uint64_t hash = 0;
    std::string key, value;  // value: the PUT's, or the GET's answer
  };
  Pending& queue(size_t c, std::string_view key, Completion done) {
    Pending& p = conns_[c].push();
    p.done = done;
    p.hash = NullTable::hash_of(key);
    table_.prefetch(p.hash);
    p.key.assign(key.data(), key.size());
    return p;
  }
  // Two lists per client, swapped by poll(); entries (and their value buffers) are reused.
  struct Conn {
    std::vector<Pending> pending, completing;
    size_t n_pending = 0;

    Pending& push() {
      if (n_pending == pending.size()) pending.emplace_back();
      return pending[n_pending++];
    }
  };

  NullTable table_;
  std::vector<Conn> conns_;
  const uint32_t slow_us_;
};

}  // namespace

std::unique_ptr<Driver> make_null_driver(const DriverOptions& o) {
  return std::make_unique<NullDriver>(o);
}

}  // namespace fabkv::bench
