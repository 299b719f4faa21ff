// The one counter behind a server's sequencers (Guidelines sec. 4.2), shared by its workers,
// and its high-water mark on disk. docs/sequencer.md.
//
// Values start at 1 (0 is "no value"). A value is handed out only below the persisted
// high-water mark: the mark is reserved ahead in blocks of kBlock values and written to
// "<data_dir>/sequence.hwm" (write a temporary file, fsync it, rename it over the old one, fsync
// the directory, as server/oplog.cc makes its files durable) before any value of the new block
// leaves. A restart starts at the persisted mark, so it never hands out a value it gave before;
// it skips at most one block (the values reserved but not handed out before the stop).
//
// kBlock = 2^24: a reservation costs one or two fsyncs (~1-10 ms here); at Table 3's best rate
// (122 Mrps) a block lasts ~137 ms, so the stall of the worker that crosses a block is a few
// per cent at worst, and a restart skips at most 2^24 of 2^64 values (2^40 restarts to run out).
//
// Threads: claim() from any worker thread (lock-free except when it crosses a block);
// ensure_ahead() from the worker that owns an atomics counter (proto/seq_atomic/server.cc).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "store/hash.h"

namespace fabkv::seq {

class Counter {
 public:
  static constexpr uint64_t kBlock = uint64_t{1} << 24;

  // The counter of the server whose data directory is `dir`: one per directory and process, so
  // every worker (and every sequencer protocol) of a server shares it. Throws
  // std::runtime_error when the mark on disk is unreadable (never guesses a start).
  static std::shared_ptr<Counter> open(const std::string& dir) {
    static std::mutex mu;
    static std::map<std::string, std::weak_ptr<Counter>> open_counters;
    std::lock_guard lock(mu);
    if (auto c = open_counters[dir].lock()) return c;
    auto c = std::shared_ptr<Counter>(new Counter(dir));
    open_counters[dir] = c;
    return c;
  }

  // The first value this run hands out (the persisted mark, or 1).
  uint64_t start() const { return start_; }
  // The next value a claim would get (a hint: others may claim meanwhile).
  uint64_t peek() const { return next_.load(std::memory_order_relaxed); }
  // The persisted mark: no value at or above it has been handed out, in any run.
  uint64_t mark() const { return limit_.load(std::memory_order_acquire); }

  // Claims n consecutive values with one atomic add (Guidelines sec. 4.2's batching) and
  // returns the first; 0 when the mark could not be persisted (the n values are then skipped,
  // never handed out).
  uint64_t claim(uint64_t n) {
    const uint64_t first = next_.fetch_add(n, std::memory_order_relaxed);
    return ensure(first + n) ? first : 0;
  }

  // For a counter that clients move themselves (seq-atomic): makes sure the mark stays at
  // least half a block above `seen`, the counter's current value. False when it could not be
  // persisted.
  bool ensure_ahead(uint64_t seen) { return ensure(seen + kBlock / 2); }

  // The file's one line for `mark`: "fabkv-seq <mark> <xxh3 of the mark, hex>\n".
  static std::string format(uint64_t mark) {
    return fmt::format("fabkv-seq {} {:016x}\n", mark, XXH3_64bits(&mark, sizeof(mark)));
  }

  uint64_t reservations() const { return reservations_.load(std::memory_order_relaxed); }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

 private:
  explicit Counter(const std::string& dir) : dir_(dir), path_(dir + "/sequence.hwm") {
    start_ = load();
    next_.store(start_);
    limit_.store(start_);
  }

  // Values below `end` may leave once this returns true.
  bool ensure(uint64_t end) {
    if (end <= limit_.load(std::memory_order_acquire)) return true;
    std::lock_guard lock(mu_);
    uint64_t limit = limit_.load(std::memory_order_relaxed);
    if (end <= limit) return true;
    const uint64_t next = (end / kBlock + 1) * kBlock;
    if (!persist(next)) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    reservations_.fetch_add(1, std::memory_order_relaxed);
    limit_.store(next, std::memory_order_release);
    return true;
  }

  uint64_t load() const {
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return 1;  // a new data directory: the first value is 1
      throw std::runtime_error(fmt::format("{}: {}", path_, std::strerror(errno)));
    }
    char buf[128] = {};
    ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    unsigned long long mark = 0, check = 0;
    if (n <= 0 || std::sscanf(buf, "fabkv-seq %llu %llx", &mark, &check) != 2 ||
        format(mark) != std::string(buf, static_cast<size_t>(n)) || mark == 0)
      throw std::runtime_error(fmt::format(
          "{}: not a sequencer high-water mark; refusing to guess where to start (move it "
          "away only if no value it covered was ever used)",
          path_));
    return mark;
  }

  bool persist(uint64_t mark) {
    const std::string tmp = path_ + ".tmp";
    const std::string text = format(mark);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
              ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) return false;
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return false;
    ok = ::fsync(dfd) == 0;
    ::close(dfd);
    return ok;
  }

  const std::string dir_, path_;
  uint64_t start_ = 1;
  std::atomic<uint64_t> next_{1};
  std::atomic<uint64_t> limit_{1};
  std::atomic<uint64_t> reservations_{0}, errors_{0};
  std::mutex mu_;
};

}  // namespace fabkv::seq
