// RF-RPC's knobs (proto/rfrpc/wire.h): the fetch size F and retry count R (RF-RPC sec. 3.2),
// the paradigm a client starts in and may switch between, and a test hook that makes the
// worker's processing slower (the x axis of RF-RPC fig. 5 and fig. 9). The worker tells its
// clients F, R and the mode in the Welcome.
#pragma once

#include <cstdint>

namespace fabkv {
class Knobs;  // common/knobs.h
}

namespace fabkv::rfrpc {

// fetch: repeated remote fetching only; reply: server-reply from the start (the worker WRITEs
// every result into the client's ring); hybrid: fetch, switch to reply after R failed fetches
// in 2 consecutive calls, back when the recorded processing time falls (RF-RPC sec. 3.2).
enum class Mode : uint8_t { kHybrid, kFetch, kReply };

struct Options {
  // F: bytes a client READs at first (result header + payload); a result larger than F takes a
  // second READ. 256 is the paper's choice for 32-byte values (RF-RPC sec. 5.1).
  uint32_t fetch_size = 256;
  // R: failed fetches of one call that count it as slow (two slow calls in a row switch a
  // hybrid client to server-reply). RF-RPC sec. 3.2 picks N = 5.
  uint32_t retries = 5;
  Mode mode = Mode::kHybrid;
  // Test and benchmark hook: every request takes at least delay_ns of the worker's time
  // (busy-waiting, as RF-RPC sec. 5.3.2 mimics processing with a timed loop) plus
  // delay_ns_per_kib for each KiB of its result or request value.
  uint32_t delay_ns = 0;
  uint32_t delay_ns_per_kib = 0;
  // Test hook: the worker busy-waits batch_linger_ns right after publishing each result batch,
  // as a worker that loses its core there does (a loaded host); the client may then READ the
  // result and WRITE the slot's next batch before the worker goes on.
  uint32_t batch_linger_ns = 0;
  // Batching (RF-RPC sec. 4): N, the most entries of a batch (0 = no batching); L, the most
  // payload bytes of a request batch (the paper's 2048); T, how long a client holds a batch
  // that is not full (the paper's 5 ms is for 35 busy clients; ours default to 100 us).
  uint32_t batch_entries = 0;
  uint32_t batch_bytes = 2048;
  uint32_t batch_timeout_us = 100;
  // Eq. 3's tuning: with llimit > 0 the client moves its batch size in [1, N] so that at most
  // alpha percent of its calls take longer than llimit (0 = the batch size stays N).
  uint32_t batch_llimit_us = 0;
  uint32_t batch_alpha_pct = 5;
};

// Declares these knobs (TOML table [rfrpc]; flags --rfrpc-fetch-size, --rfrpc-retries,
// --rfrpc-mode, --rfrpc-delay-ns, --rfrpc-delay-ns-per-kib, --rfrpc-batch-*);
// proto/rfrpc/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::rfrpc
