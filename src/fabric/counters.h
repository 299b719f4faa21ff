// VerbCounters: every operation an endpoint posts, by kind, with bytes, signaling and
// completions, plus what it observes arriving (docs/architecture.md principle 3, "count the
// verbs"). The counts are exact and hardware-independent, so "Pilaf needs 2.6 READs per GET"
// can be shown on any machine.
//
// Threading: one writer (the thread that owns the endpoint) and any number of readers. Each
// field is a relaxed atomic that the writer bumps with load+store (no locked instruction), so
// the counters cost a few plain adds per operation and stay on in production; readers see a
// value that is at most a few operations old.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fabkv::fabric {

enum class Verb : uint8_t { kRead = 0, kWrite, kSend, kRecv, kAtomic };
inline constexpr size_t kVerbKinds = 5;
const char* to_string(Verb v);

// Plain numbers for one verb kind; also the unit of snapshots and diffs.
struct VerbStats {
  uint64_t posted = 0;         // outbound: operations posted by this process
  uint64_t bytes = 0;          // outbound payload bytes (for RECV: buffer bytes posted)
  uint64_t signaled = 0;       // posted with a completion requested
  uint64_t inlined = 0;        // posted with the payload inlined (fi_inject*, FI_INJECT)
  uint64_t with_imm = 0;       // carried immediate data (fi_*data)
  uint64_t completed = 0;      // local completions reaped for this kind
  uint64_t errors = 0;         // failed posts and error completions
  uint64_t inbound = 0;        // observed arriving here (RECVs matched, WRITE-with-imm landed)
  uint64_t inbound_bytes = 0;  // payload bytes of those

  VerbStats& operator+=(const VerbStats& o);
  VerbStats& operator-=(const VerbStats& o);
  bool operator==(const VerbStats&) const = default;
};

struct VerbSnapshot {
  std::array<VerbStats, kVerbKinds> verbs{};

  const VerbStats& operator[](Verb v) const { return verbs[static_cast<size_t>(v)]; }
  VerbStats& operator[](Verb v) { return verbs[static_cast<size_t>(v)]; }
  VerbSnapshot operator-(const VerbSnapshot& earlier) const;
  VerbSnapshot& operator+=(const VerbSnapshot& o);
  uint64_t total_posted() const;
  nlohmann::json to_json() const;
};

class VerbCounters {
 public:
  // Writer side (owning thread only, "_st" in eRPC's terms).
  void on_post(Verb v, size_t bytes, bool signaled, bool inlined, bool imm) {
    Cell& c = cell(v);
    bump(c.posted, 1);
    bump(c.bytes, bytes);
    if (signaled) bump(c.signaled, 1);
    if (inlined) bump(c.inlined, 1);
    if (imm) bump(c.with_imm, 1);
  }
  void on_complete(Verb v) { bump(cell(v).completed, 1); }
  void on_error(Verb v) { bump(cell(v).errors, 1); }
  void on_inbound(Verb v, size_t bytes) {
    Cell& c = cell(v);
    bump(c.inbound, 1);
    bump(c.inbound_bytes, bytes);
  }

  // Reader side (any thread).
  VerbSnapshot snapshot() const;

 private:
  struct Cell {
    std::atomic<uint64_t> posted{0}, bytes{0}, signaled{0}, inlined{0}, with_imm{0}, completed{0},
        errors{0}, inbound{0}, inbound_bytes{0};
  };
  static void bump(std::atomic<uint64_t>& a, uint64_t n) {
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  Cell& cell(Verb v) { return cells_[static_cast<size_t>(v)]; }
  std::array<Cell, kVerbKinds> cells_;
};

}  // namespace fabkv::fabric
