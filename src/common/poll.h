// How a thread that polls for completions waits when there is nothing to do: the server's
// workers (fabkv-server --poll) and the client library's blocking calls (ClientOptions::poll).
// docs/server.md ("Polling: spin or adaptive") has the measurements behind the defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fabkv {

enum class PollMode : uint8_t {
  kSpin,      // poll without pause: the lowest latency, one core per polling thread, always
  kAdaptive,  // poll for a bounded time, then block on the fabric's wait object (or sleep a
              // bounded time where the provider has none), always with a timeout
};

inline const char* to_string(PollMode m) { return m == PollMode::kSpin ? "spin" : "adaptive"; }
inline std::optional<PollMode> poll_mode_from_string(std::string_view s) {
  if (s == "spin") return PollMode::kSpin;
  if (s == "adaptive") return PollMode::kAdaptive;
  return std::nullopt;
}

struct PollOptions {
  PollMode mode = PollMode::kSpin;  // fabkv-server's default is adaptive (server/options.h)
  // adaptive: how long a thread keeps polling after its last sign of work before it blocks.
  // 100 us is 5-10x the longest turnaround of a closed-loop client measured here (tcp pilaf
  // ~17 us, herd ~10 us), so a busy client never finds the worker asleep; every further
  // 100 us costs a sparse request's worth of spinning (docs/results/poll-2026-11-23.md).
  uint32_t spin_us = 100;
  // adaptive, where nothing can wake a blocked thread (shm has no wait object; requests
  // WRITten into memory raise no completion on verbs): the longest sleep between two polls,
  // reached by doubling from kFirstSleepUs. The worst added latency of the first request after
  // an idle stretch; idle CPU falls as it grows.
  uint32_t sleep_us = 1000;
  static constexpr uint32_t kFirstSleepUs = 50;
};

}  // namespace fabkv
