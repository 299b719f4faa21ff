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
// The pool of GETs, the stale-generation retry and the miss confirmation are every READ
// table's (proto/read_table/reader.h). Owned by pilaf's client (proto/pilaf/client.cc).
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "proto/pilaf/layout.h"
#include "proto/read_table/reader.h"

namespace fabkv::pilaf {

// Where one worker's pilaf engine is, as the server's layout says.
struct PilafMap : read_table::TableMap {
  uint64_t entries = 0;
};

struct PilafCounters : read_table::ReaderCounters {
  uint64_t entry_reads = 0;      // probes: 32-byte entry READs
  uint64_t hit_entry_reads = 0;  // ... of GETs that found their key (Pilaf fig. 6's measure)
  uint64_t extent_reads = 0;     // record READs
  uint64_t torn_entries = 0;     // entry CRC mismatch: READ again (Pilaf fig. 9)
  uint64_t torn_extents = 0;     // record CRC mismatch: entry READ again (Pilaf fig. 9)
  nlohmann::json to_json() const;
};

struct PilafOp;  // one GET (reader.cc)

class PilafReader final : public read_table::Reader<PilafMap, PilafOp, PilafCounters> {
 public:
  struct Options : read_table::ReaderOptions {
    bool parallel_probes = false;  // READ h1, h2, h3 at once
    // TEST ONLY (proto::ClientTestHooks::clock_skew_s): seconds added to this client's wall clock.
    // The reader judges expire_at by the server's clock (TableHeader.clock) and reads its own wall
    // clock only for a server that does not publish one (layout v1).
    int64_t clock_skew_s = 0;
  };

  PilafReader(proto::ClientHost& host, const Options& o, std::vector<PilafMap> maps,
              Refresh refresh);
  ~PilafReader() override;

 private:
  void begin(PilafOp& op) override;
  void landed(PilafOp& op, uint32_t k) override;
  size_t advance(PilafOp& op) override;
  void post_entry(PilafOp& op, uint32_t i);
  void evaluate(PilafOp& op, uint32_t from);
  size_t found(PilafOp& op, const pilaf::Record& rec);
  // Our key's record is in: answer by its expiry, or READ the server's clock first.
  size_t on_record(PilafOp& op, const pilaf::Record& rec);
  enum class Expiry : uint8_t { kLive, kExpired, kUnsure };
  Expiry judge(uint32_t worker, uint32_t expire_at) const;
  void learn_clock(uint32_t worker, const pilaf::HeaderWord& w);

  bool parallel_probes_;
  int64_t clock_skew_s_;
  // Per worker: TableHeader.clock as last READ, and when that READ completed.
  struct ServerClock {
    bool known = false;      // READ at least once
    uint32_t seconds = 0;    // 0 = the server does not publish its clock (layout v1)
    Clock::time_point at{};  // completion of that READ (steady clock)
  };
  std::vector<ServerClock> clocks_;
};

}  // namespace fabkv::pilaf

namespace fabkv {
extern template class read_table::Reader<pilaf::PilafMap, pilaf::PilafOp, pilaf::PilafCounters>;
}  // namespace fabkv
