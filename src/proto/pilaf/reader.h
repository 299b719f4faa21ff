// PilafReader: the client half of Pilaf (Pilaf sec. 3.2-3.4): GETs served by one-sided READs of
// a worker's self-verifying cuckoo table and extents, without the server's CPU. The lookup
// rules are in proto/pilaf/layout.h; this class runs them as a state machine per GET so that up
// to `ops` GETs are in flight at once. By default each GET waits for one READ before the next
// (as Pilaf-em-OPT, HERD sec. 5.1.1, does): entry h1, then h2, then h3, then the record. With
// Options::parallel_probes it READs the three entries at once (one round trip instead of up to
// three, for ~1.9 more entry READs per hit at 75% fill).
//
// Expiry: the server's clock is authoritative (it owns the data; memcached's rule). A record
// with expire_at is judged by the worker's TableHeader.clock: the reader keeps the last value
// it READ per worker and the steady-clock instant it arrived, which bound the server's clock
// now from both sides; only when that bound cannot decide (within ~1.5 s of expire_at, or
// older than 1 s) does the GET READ the 16 header bytes once more (counted clock_reads).
//
// Owned by pilaf's client (proto/pilaf/client.cc) and driven by the session's poll loop:
// completions whose context owns() says are ours go to on_completion(). Owner thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.h"
#include "fabric/endpoint.h"
#include "fabric/memory_region.h"
#include "proto/client_protocol.h"
#include "proto/pilaf/layout.h"

namespace fabkv::pilaf {

// Where one worker's pilaf engine is, as the server's layout says.
struct PilafMap {
  fabric::PeerAddr peer = fabric::kNoPeer;
  uint32_t generation = 0;
  uint64_t entries = 0;
  fabric::RemoteRegion table, extents;
};

struct PilafCounters {
  uint64_t gets = 0;            // GETs finished by READs
  uint64_t hits = 0;
  uint64_t entry_reads = 0;     // probes: 32-byte entry READs
  uint64_t hit_entry_reads = 0; // ... of GETs that found their key (Pilaf fig. 6's measure)
  uint64_t extent_reads = 0;    // record READs
  uint64_t header_reads = 0;    // "not found" confirmations (TableHeader.moves)
  uint64_t clock_reads = 0;     // TableHeader.clock READs to judge an expiry (docs/pilaf.md)
  uint64_t expired = 0;         // records found but expired by the server's clock: not found
  uint64_t torn_entries = 0;    // entry CRC mismatch: READ again (Pilaf fig. 9)
  uint64_t torn_extents = 0;    // record CRC mismatch: entry READ again (Pilaf fig. 9)
  uint64_t reprobes = 0;        // a cuckoo move during the probes: probe again
  uint64_t layout_refreshes = 0;  // retired table or failed READ: layout fetched again
  uint64_t read_errors = 0;     // READ error completions
  uint64_t gave_up = 0;         // GETs that hit the retry bound (kError)
  nlohmann::json to_json() const;
};

class PilafReader {
 public:
  struct Options {
    uint32_t ops = 4;          // GETs in flight at most
    size_t max_record = 0;     // largest record: ExtentHeader + 250 + max_value
    int timeout_ms = 2000;
    uint32_t max_retries = 64; // torn READs + re-probes + layout refreshes per GET
    // How long the server keeps a replaced generation registered (layout "pilaf_grace_ms"). A
    // client that has not READ a worker's table for half of it fetches the layout before its
    // next GET there, so it never READs a generation the server has released (on tcp such a
    // READ fails and takes the connection down with it).
    uint32_t grace_ms = 5000;
    bool parallel_probes = false;  // READ h1, h2, h3 at once
    // TEST ONLY (ClientTestHooks::clock_skew_s): seconds added to this client's wall clock. The
    // reader judges expire_at by the server's clock (TableHeader.clock) and reads its own
    // wall clock only for a server that does not publish one (layout v1).
    int64_t clock_skew_s = 0;
  };
  // Fetches every worker's map again (a control request); false when that failed.
  using Refresh = std::function<bool(std::vector<PilafMap>*)>;

  // The host drives progress (reap() while a READ waits to be posted, drive() while waiting
  // for a free op) and knows liveness: once alive() is false a READ that the provider keeps
  // refusing is given up at once (shm refuses every READ of a dead process's memory with
  // -FI_EAGAIN) and the GET ends with kServerGone.
  PilafReader(proto::ClientHost& host, const Options& o, std::vector<PilafMap> maps,
              Refresh refresh);
  ~PilafReader();

  // kOk once the first READ is posted (the callback then runs exactly once), or the reason
  // nothing was started (kTimeout: no free op within timeout_ms; kError: READ not postable).
  Status get(std::string_view key, uint32_t worker, Callback cb);

  bool owns(const fabric::OpContext* ctx) const;
  size_t on_completion(fabric::Completion& c);  // callbacks run
  // An error completion without its context (shm reports failed READs so, libfabric 1.17):
  // counted; the GET it belonged to ends by its deadline.
  void on_orphan_error() { counters_.read_errors++; }
  // Times out GETs past their deadline (all = every GET: the server is gone).
  size_t expire(bool all, Status why);
  size_t in_flight() const { return in_flight_; }
  const PilafCounters& counters() const { return counters_; }

 private:
  struct Op;
  enum class Step : uint8_t;
  void start(Op& op);
  bool post(Op& op, uint32_t k, size_t local_off, uint64_t raddr, size_t len, uint64_t rkey);
  void post_entry(Op& op, uint32_t i);
  void evaluate(Op& op, uint32_t from);
  size_t finish(Op& op, Status st, std::string_view value = {}, uint64_t version = 0);
  // Our key's record is in: answer by its expiry, or READ the server's clock first.
  size_t on_record(Op& op, const pilaf::Record& rec);
  enum class Expiry : uint8_t { kLive, kExpired, kUnsure };
  Expiry judge(uint32_t worker, uint32_t expire_at) const;
  void learn_clock(uint32_t worker, const pilaf::HeaderWord& w);
  uint32_t local_seconds() const;  // this client's wall clock (+ clock_skew_s)
  size_t retry(Op& op, uint64_t* counter);
  bool refresh();

  fabric::Endpoint& ep_;  // host_.endpoint() when constructed (after the Welcome)
  Options o_;
  std::vector<PilafMap> maps_;
  std::vector<uint64_t> moves_;  // per worker: TableHeader.moves last seen (even), or ~0
  std::vector<Clock::time_point> last_read_;  // per worker: when a READ of its table returned
  // Per worker: TableHeader.clock as last READ, and when that READ completed.
  struct ServerClock {
    bool known = false;      // READ at least once
    uint32_t seconds = 0;    // 0 = the server does not publish its clock (layout v1)
    Clock::time_point at{};  // completion of that READ (steady clock)
  };
  std::vector<ServerClock> clocks_;
  proto::ClientHost& host_;
  Refresh refresh_;
  size_t slot_bytes_;
  std::unique_ptr<fabric::RegisteredBuffer> buf_;
  std::vector<Op> ops_;
  size_t in_flight_ = 0;
  PilafCounters counters_;
  // The value a callback gets: a copy, because the op (and its READ buffer) is free for the
  // next GET once the callback runs. Nested callbacks (a callback waiting for another GET) copy
  // into their own string.
  std::string value_;
  uint32_t depth_ = 0;
};

}  // namespace fabkv::pilaf
