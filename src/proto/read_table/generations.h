// The server half of a table that clients READ while its owner thread changes it (Pilaf sec.
// 3.3; FaRM-KV, HERD sec. 5.1.2): when the table must grow, the owner builds a complete new
// generation, makes it live and announces it, marks the old one retired (so that a client whose
// READ lands there knows it is stale and asks for the live one), and keeps the old memory mapped
// for a grace time, so that READs in flight finish on valid memory. The live table's header
// carries the server's clock, so that a client judges expiry as the server does.
//
// pilaf's and farm's engines keep their generations here; drtm keeps its retired items in a
// GraceQueue for the same reason. The client half (a READ that meets a retired table asks for
// the live one and retries) is in read_table/reader.h.
//
// Threads: everything on the engine's owner thread, except retired_live() (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "store/engine.h"
#include "store/stats.h"

namespace fabkv::read_table {

// Orders every store before it ahead of every store after it, for the NIC as for the compiler
// (x86-TSO keeps store order; the fence keeps the compiler from moving stores across it).
inline void publish() { std::atomic_thread_fence(std::memory_order_release); }

// Things clients may still READ after the owner let go of them, each released once its grace
// is over. One grace for all, so the queue is in release order.
template <class T>
class GraceQueue {
 public:
  explicit GraceQueue(uint32_t grace_ms) : grace_(grace_ms) {}

  void push(T t) {
    queue_.push_back(Entry{std::move(t), std::chrono::steady_clock::now()});
    store::add_st(live_);
  }
  // Calls release(T&) for every entry whose grace is over, oldest first, then drops it.
  template <class Release>
  void reap(Release&& release) {
    const auto now = std::chrono::steady_clock::now();
    while (!queue_.empty() && now - queue_.front().since >= grace_) {
      release(queue_.front().item);
      queue_.pop_front();
      store::sub_st(live_);
    }
  }
  uint64_t size() const { return live_.load(std::memory_order_relaxed); }  // any thread

 private:
  struct Entry {
    T item;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<Entry> queue_;
  std::chrono::milliseconds grace_;
  std::atomic<uint64_t> live_{0};
};

// What the server side is told of generations (it registers each with the NIC).
template <class Info>
struct Hooks {
  // A generation became live (its table is complete); called before the old one is retired.
  std::function<void(const Info&)> on_live;
  // A retired generation is about to be unmapped (reap(), after its grace).
  std::function<void(const Info&)> on_release;
};

// The live generation and the retired ones still mapped. Gen owns one generation's memory and
// has `info` (an Info: what the hooks see) and header(), the table header whose `clock` clients
// READ. Gen may be incomplete where this is declared.
template <class Gen, class Info>
class Generations {
 public:
  Generations(uint32_t grace_ms, store::ClockFn clock, void* clock_ctx)
      : retired_(grace_ms), clock_(clock), clock_ctx_(clock_ctx) {}
  ~Generations() = default;  // unmaps everything; calls no hook

  // The first generation (no hook: set_hooks announces it).
  void start(std::unique_ptr<Gen> first) { live_ = std::move(first); }
  // The reference is valid until the next replace().
  Gen& live() const { return *live_; }

  // Installs the hooks and announces the live generation at once.
  void set_hooks(Hooks<Info> h) {
    hooks_ = std::move(h);
    if (hooks_.on_live) hooks_.on_live(live_->info);
  }

  // Makes `next`, complete, the live generation and announces it; then retires the previous
  // one: retire(prev) marks it so that a reader knows it is stale (its header's state, then
  // every entry), each step published before the next. The previous one stays mapped for the
  // grace.
  template <class Retire>
  void replace(std::unique_ptr<Gen> next, Retire&& retire) {
    std::unique_ptr<Gen> prev = std::move(live_);
    live_ = std::move(next);
    publish();
    if (hooks_.on_live) hooks_.on_live(live_->info);
    retire(*prev);
    publish();
    retired_.push(std::move(prev));
  }

  // Housekeeping the owner runs every so often (a worker: every 1024 poll rounds): publishes
  // the clock, then releases the retired generations whose grace is over (on_release, then
  // unmap).
  void reap() {
    publish_clock();
    retired_.reap([&](std::unique_ptr<Gen>& g) {
      if (hooks_.on_release) hooks_.on_release(g->info);
      g.reset();  // munmap
    });
  }

  // Writes the expiry clock into the live header, where clients READ it to judge expire_at by
  // the server's clock. One aligned 4-byte store, never torn.
  void publish_clock() {
    std::atomic_ref<uint32_t>(live_->header()->clock)
        .store(clock_(clock_ctx_), std::memory_order_relaxed);
  }

  uint64_t retired_live() const { return retired_.size(); }  // any thread

 private:
  std::unique_ptr<Gen> live_;
  GraceQueue<std::unique_ptr<Gen>> retired_;
  Hooks<Info> hooks_;
  store::ClockFn clock_;
  void* clock_ctx_;
};

}  // namespace fabkv::read_table
