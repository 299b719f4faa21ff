// RF-RPC's hybrid switch (RF-RPC sec. 3.2, "Discussion"), one per (client, worker): when to
// stop fetching results and ask the worker to WRITE them (server-reply), and when to go back.
// Pure logic, no fabric: proto/rfrpc/client.cc feeds it what each call saw, and
// tests/client/rfrpc_wire_test.cc tests it without a peer.
//
// - A call is slow when R of its fetches failed (the paper's test), or when it took as long as R
//   fetches take (what R fetches "cover"). The second matters on tcp, where a READ waits
//   in the worker's progress and the worker makes none while it processes: the READ arrives
//   late instead of failing.
// - Two slow calls in a row switch to server-reply ("a pre-defined number (e.g., two) of
//   continuous RPC calls", RF-RPC sec. 3.2, so that one unexpectedly long call does not).
// - In server-reply mode every result carries the worker's processing time; two results in a
//   row whose time is under half of what R fetches cover switch back: fetching would again find
//   them within R READs.
// - Hysteresis (fabkv's, not the paper's): the processing time does not see the queue, so with
//   several clients queueing on one worker the switch flipped every second call (measured:
//   docs/results/rpc-family-2026-11-23.md), each flip a flag WRITE. A switch back to fetching
//   that lasts fewer than kShortStay calls doubles the quick results needed for the next switch
//   back (up to kMaxCalm); a stay of kShortStay calls or more resets it to two.
//
// What one fetch costs is measured: the quickest round trip of a first READ seen (it waited for
// nothing; the mean would count the waits of READs that tcp holds in the worker's progress, and
// a failed READ alone is rare on tcp and may be one of the first, which wait for the connection:
// ms). RF-RPC maps its R = 5 to P = 7 us on the curve of
// its fig. 5 (NIC READs); here a fetch is ~0.1 us on shm (the READ is a system call by
// the client) and 15-100 us on tcp, so the same R covers very different times: R is the
// provider's to choose (docs/rfrpc.md, "Choosing R and F").
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "proto/rfrpc/wire.h"

namespace fabkv::rfrpc {

class HybridSwitch {
 public:
  // `retries`: R; `hybrid`: false keeps the starting mode for good (--rfrpc-mode fetch|reply).
  HybridSwitch(uint32_t retries, bool hybrid, uint8_t start_mode)
      : retries_(retries), hybrid_(hybrid), mode_(start_mode) {}

  uint8_t mode() const { return mode_; }
  uint64_t fetch_rtt_ns() const { return fetch_rtt_ns_; }
  // The processing time R fetches cover (0 until a fetch was seen).
  uint64_t covered_ns() const { return uint64_t{retries_} * fetch_rtt_ns_; }

  // A first READ of a call completed after `rtt_ns` (whatever it found).
  void on_fetch(uint64_t rtt_ns) {
    if (fetch_rtt_ns_ == 0 || rtt_ns < fetch_rtt_ns_) fetch_rtt_ns_ = rtt_ns;
  }

  // A call's result arrived: `fails` failed fetches, `elapsed_ns` since the call was first seen,
  // `proc_ns` the worker's recorded processing time, `from_ring` WRITTen by the worker (else
  // fetched). Returns the new mode when the call makes the client switch.
  std::optional<uint8_t> on_result(uint32_t fails, uint64_t elapsed_ns, uint64_t proc_ns,
                                   bool from_ring) {
    if (!hybrid_) return std::nullopt;
    if (mode_ == kModeFetch) {
      if (from_ring) return std::nullopt;  // WRITten before our flip back landed: no signal
      fetch_calls_++;
      const bool slow = fails >= retries_ || (fetch_rtt_ns_ != 0 && elapsed_ns >= covered_ns());
      slow_ = slow ? slow_ + 1 : 0;
      if (slow_ < kInARow) return std::nullopt;
      // Back in reply mode soon after leaving it: ask for longer calm before leaving again.
      calm_needed_ = flipped_back_ && fetch_calls_ < kShortStay
                         ? std::min(calm_needed_ * 2, kMaxCalm)
                         : kInARow;
      return flip(kModeReply);
    }
    calm_ = proc_ns < covered_ns() / 2 ? calm_ + 1 : 0;
    if (calm_ < calm_needed_) return std::nullopt;
    flipped_back_ = true;
    fetch_calls_ = 0;
    return flip(kModeFetch);
  }

  // Quick results in a row that the next switch back to fetching needs.
  uint32_t calm_needed() const { return calm_needed_; }

  static constexpr uint32_t kInARow = 2;      // RF-RPC sec. 3.2: "(e.g., two)"
  static constexpr uint32_t kShortStay = 64;  // calls in fetch mode that count as a short stay
  static constexpr uint32_t kMaxCalm = 1024;  // at most one round trip of flips per ~1000 calls

 private:
  uint8_t flip(uint8_t to) {
    slow_ = calm_ = 0;
    mode_ = to;
    return to;
  }

  const uint32_t retries_;
  const bool hybrid_;
  uint8_t mode_;
  uint32_t slow_ = 0, calm_ = 0;  // slow calls (fetch mode) / quick results (reply) in a row
  uint32_t calm_needed_ = kInARow;
  uint32_t fetch_calls_ = 0;   // calls fetched since the last switch back
  bool flipped_back_ = false;  // a switch back to fetching has happened
  uint64_t fetch_rtt_ns_ = 0;  // quickest first READ seen
};

}  // namespace fabkv::rfrpc
