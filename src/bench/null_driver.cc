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
// values), so a lookup costs one cache line; larger items go to the heap. It is split into
// shards by hash, each with its own spin lock, taken only when more than one load thread
// shares the driver (DriverOptions::load_threads).
#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "bench/driver.h"
#include "store/hash.h"

namespace fabkv::bench {
namespace {

class NullTable {
 public:
  explicit NullTable(bool shared) : shared_(shared) {}

  // Copies the value of `key` into *out; false when there is none.
  bool get(std::string_view key, std::string* out) {
    const uint64_t h = hash_of(key);
    Shard& s = shard_of(h);
    Lock l(s, shared_);
    const Slot* slot = s.find(h, key);
    if (!slot) return false;
    std::string_view v = slot->value();
    out->assign(v.data(), v.size());
    return true;
  }

  void put(std::string_view key, std::string_view value) {
    const uint64_t h = hash_of(key);
    Shard& s = shard_of(h);
    Lock l(s, shared_);
    s.upsert(h, key, value);
  }

 private:
  static constexpr size_t kInline = 48;
  static constexpr int kShardBits = 6;

  // Hash 0 marks an empty slot.
  static uint64_t hash_of(std::string_view key) {
    uint64_t h = store::hash_key(key).h;
    return h ? h : 1;
  }

  struct alignas(64) Slot {
    uint64_t hash = 0;
    uint32_t value_len = 0;
    uint32_t key_len = 0;
    // key then value, inline when they fit; else a heap block (its capacity before the data)
    union {
      char inline_data[kInline];
      struct {
        char* data;
        size_t capacity;
      } heap;
    };

    Slot() { std::memset(inline_data, 0, sizeof(inline_data)); }
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
          char* d = new char[n];
          heap.data = d;
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
  static_assert(sizeof(Slot) == 64);

  struct Shard {
    std::vector<Slot> slots = std::vector<Slot>(64);
    size_t used = 0;
    std::atomic<bool> locked{false};

    ~Shard() {
      for (Slot& s : slots) s.release();
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
    void grow() {
      std::vector<Slot> old(slots.size() * 2);
      old.swap(slots);
      const size_t mask = slots.size() - 1;
      // Slots are moved bitwise: a heap block changes owner, nothing is copied or freed.
      for (Slot& o : old) {
        if (o.hash == 0) continue;
        size_t i = (o.hash >> kShardBits) & mask;
        while (slots[i].hash != 0) i = (i + 1) & mask;
        std::memcpy(static_cast<void*>(&slots[i]), &o, sizeof(Slot));
        o.hash = 0;
      }
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

  Shard& shard_of(uint64_t h) { return shards_[h & ((1u << kShardBits) - 1)]; }

  const bool shared_;
  std::unique_ptr<Shard[]> shards_ = std::make_unique<Shard[]>(size_t{1} << kShardBits);
};

class NullDriver final : public Driver {
 public:
  explicit NullDriver(const DriverOptions& o) : table_(o.load_threads > 1), conns_(o.clients) {}

  std::string system() const override { return "null"; }
  std::string protocol() const override { return "none"; }
  size_t clients() const override { return conns_.size(); }

  // Both apply at once (a GET copies the value out), and complete at the client's next poll().
  bool get(size_t c, std::string_view key, Completion done) override {
    Pending& p = conns_[c].push();
    p.status = table_.get(key, &p.value) ? OpStatus::kOk : OpStatus::kNotFound;
    p.done = std::move(done);
    return true;
  }
  bool put(size_t c, std::string_view key, std::string_view value, Completion done) override {
    table_.put(key, value);
    Pending& p = conns_[c].push();
    p.status = OpStatus::kOk;
    p.value.clear();
    p.done = std::move(done);
    return true;
  }
  // Completes what was pending when it was called; completions may post again (into the
  // other list, so the entry whose callback runs is never moved or reused meanwhile).
  size_t poll(size_t c) override {
    Conn& k = conns_[c];
    std::swap(k.pending, k.completing);
    const size_t n = std::exchange(k.n_pending, 0);
    for (size_t i = 0; i < n; ++i) {
      Pending& p = k.completing[i];
      p.done(p.status, p.value);
    }
    return n;
  }

  uint64_t max_value() const override { return 64ull << 20; }
  ServerSample sample_server() override { return {}; }
  std::string error() const override { return {}; }

 private:
  struct Pending {
    Completion done;
    OpStatus status = OpStatus::kOk;
    std::string value;
  };
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
};

}  // namespace

std::unique_ptr<Driver> make_null_driver(const DriverOptions& o) {
  return std::make_unique<NullDriver>(o);
}

}  // namespace fabkv::bench
