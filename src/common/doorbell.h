// Doorbell: how a client on the same host wakes a server worker that sleeps because nothing of
// the fabric can wake it (shm has no wait object; docs/fabric.md, "Blocking"), in the way of
// io_uring's SQPOLL: the worker publishes "I sleep" in a page its clients map, and a client
// that finds the flag set after posting a request wakes it with one system call. A client that
// finds it clear (the worker polls) pays a fence and a load of a line the worker writes only
// when it falls asleep or wakes (docs/server.md, "Polling").
//
// The contract:
// - The page is a memfd of the server; each worker has a 64-byte line and an eventfd (the
//   bell). Clients get both with pidfd_getfd(2) (the server's pid and descriptor numbers are in
//   the Welcome's layout, "doorbell"), which needs the same permission as shm's cross-memory
//   attach (ptrace access), and map the page read-only. The page's nonce, also in the layout,
//   proves that the pid named the server and not another process (pid namespaces).
// - Only the worker writes its flag: 1 right before it sleeps, 0 when it wakes. A client never
//   writes it, so a client killed at any instant cannot leave it wrong for the others; the
//   worst a client can leave is a rung bell (one wake-up for nothing). Every sleep is bounded
//   anyway (the worker's kMaxBlock), so a missed ring costs a sleep, never the request.
// - No lost wake-up (Dekker): the client posts, fences, then loads the flag; the worker stores
//   the flag, fences, then polls once more before it sleeps. Either the worker's last poll sees
//   the request, or the client sees the flag and rings.
//
// Memory layout (read by clients; a wire format):
//   offset size field
//        0    4 magic     "FKVD"
//        4    2 version   kDoorbellVersion
//        6    2 workers   lines that follow, one per worker
//        8    8 nonce     random, also in the Welcome's layout
//       64   64 line[w]   u32 asleep (1 while worker w sleeps with its flag published), padding
// History:
//   v1 (issue 39): the layout above.
//
// Threading: DoorbellServer's flags are written by their worker, the rest is set up before the
// workers run. A DoorbellClient belongs to its Session's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabkv {

inline constexpr uint32_t kDoorbellMagic = 0x44564B46u;  // "FKVD" read as a little-endian u32
inline constexpr uint16_t kDoorbellVersion = 1;
inline constexpr size_t kDoorbellPageBytes = 4096;

struct alignas(64) DoorbellLine {
  std::atomic<uint32_t> asleep{0};
  uint8_t pad[60];
};
static_assert(sizeof(DoorbellLine) == 64 && alignof(DoorbellLine) == 64);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct DoorbellPage {
  uint32_t magic;
  uint16_t version;
  uint16_t workers;
  uint64_t nonce;
  uint8_t pad[48];
  DoorbellLine line[kDoorbellPageBytes / 64 - 1];
};
static_assert(sizeof(DoorbellPage) == kDoorbellPageBytes && alignof(DoorbellPage) == 64);
inline constexpr uint32_t kDoorbellMaxWorkers = kDoorbellPageBytes / 64 - 1;

class DoorbellServer {
 public:
  // Throws std::system_error when no memfd or eventfd can be made.
  explicit DoorbellServer(uint32_t workers);
  ~DoorbellServer();
  DoorbellServer(const DoorbellServer&) = delete;
  DoorbellServer& operator=(const DoorbellServer&) = delete;

  // Worker w's flag (only it writes it) and bell (an eventfd, readable once a client rang).
  std::atomic<uint32_t>& asleep(uint32_t w) { return page_->line[w].asleep; }
  int bell(uint32_t w) const { return bells_[w]; }
  // What a client needs to open it, for the Welcome's layout:
  // {"pid", "page", "bells": [...], "nonce"}.
  nlohmann::json layout() const;

 private:
  void release();

  int page_fd_ = -1;
  DoorbellPage* page_ = nullptr;
  std::vector<int> bells_;
};

class DoorbellClient {
 public:
  // Opens the server's doorbell that `layout` (DoorbellServer::layout) names; nullptr, with
  // why in `*why`, when it cannot (another host, no permission, a pid that is not the server).
  static std::unique_ptr<DoorbellClient> open(const nlohmann::json& layout, std::string* why);
  ~DoorbellClient();
  DoorbellClient(const DoorbellClient&) = delete;
  DoorbellClient& operator=(const DoorbellClient&) = delete;

  // After posting a request to worker w: wakes it if it sleeps. The fence pairs with the
  // worker's between its flag and its last poll (see the contract above).
  void ring(uint32_t w) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (w < bells_.size() && page_->line[w].asleep.load(std::memory_order_relaxed) != 0)
      ring_now(w);
  }
  // Is any worker asleep? With the fence ring() has, for a caller that finds out which worker
  // only when one is (ring_if_asleep then).
  bool any_asleep() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (uint32_t w = 0; w < bells_.size(); ++w)
      if (page_->line[w].asleep.load(std::memory_order_relaxed) != 0) return true;
    return false;
  }
  // The same for every worker (a request whose worker the caller does not know).
  void ring_all() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (uint32_t w = 0; w < bells_.size(); ++w)
      if (page_->line[w].asleep.load(std::memory_order_relaxed) != 0) ring_now(w);
  }
  uint32_t workers() const { return static_cast<uint32_t>(bells_.size()); }
  uint64_t rings() const { return rings_; }  // bells rung (system calls made)

 private:
  DoorbellClient() = default;
  void ring_now(uint32_t w);

  const DoorbellPage* page_ = nullptr;
  std::vector<int> bells_;  // our duplicates of the workers' eventfds
  uint64_t rings_ = 0;
};

}  // namespace fabkv
