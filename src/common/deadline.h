// Deadlines for every blocking wait: a peer that fails or goes silent must never hang the
// caller forever (docs/architecture.md, principle 5).
#pragma once

#include <chrono>
#include <cstdint>

namespace fabkv {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(std::chrono::nanoseconds budget) : at_(Clock::now() + budget) {}
  static Deadline after_ms(int64_t ms) { return Deadline(std::chrono::milliseconds(ms)); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  std::chrono::milliseconds remaining() const {
    auto now = Clock::now();
    if (now >= at_) return std::chrono::milliseconds(0);
    return std::chrono::duration_cast<std::chrono::milliseconds>(at_ - now);
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace fabkv
