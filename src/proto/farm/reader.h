// FarmReader: the client half of FaRM-KV's GET (HERD sec. 5.1.2; survey sec. 3.4): one READ of
// the key's H = 6 buckets, then, for an item kept out of line (farm-var, or an item larger than
// the inline room), one READ of its record, without the server's CPU. The rules are in
// proto/farm/layout.h (bottom); this class runs them as a state machine per GET so that up to
// `ops` GETs are in flight at once, each with one READ outstanding.
//
// Every READ lands in the op's own slice of a local buffer and is judged only after its
// completion, on that copy (search_neighbourhood, check_record): nothing is read twice.
//
// Expiry: an item with expire_at is judged by the worker's clock (TableHeader.clock, one more
// 16-byte READ per GET of such an item; items without expiry never pay it).
//
// Owned by the farm client (proto/farm/client.cc) and driven by the session's poll loop.
// Owner thread only.
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
#include "proto/farm/layout.h"

namespace fabkv::farm {

// Where one worker's farm engine is, as the server's layout says.
struct FarmMap {
  fabric::PeerAddr peer = fabric::kNoPeer;
  uint32_t generation = 0;
  uint64_t homes = 0;
  size_t bucket_bytes = 0;
  fabric::RemoteRegion table, extents;
};

struct FarmCounters {
  uint64_t gets = 0;                // GETs finished by READs
  uint64_t hits = 0;
  uint64_t neighbourhood_reads = 0; // READs of H buckets (one range each: no wrap-around)
  uint64_t record_reads = 0;        // READs of an out-of-line record
  uint64_t header_reads = 0;        // miss confirmations (TableHeader.moves)
  uint64_t clock_reads = 0;         // TableHeader.clock READs to judge an expiry
  uint64_t expired = 0;
  uint64_t torn_buckets = 0;        // a neighbourhood with a torn bucket and no match: READ again
  uint64_t torn_records = 0;        // a record that failed its check: neighbourhood again
  uint64_t reprobes = 0;            // a displacement during the READ of a miss: READ again
  uint64_t layout_refreshes = 0;
  uint64_t read_errors = 0;
  uint64_t gave_up = 0;             // GETs that hit the retry bound (kContended)
  nlohmann::json to_json() const;
};

class FarmReader {
 public:
  struct Options {
    uint32_t ops = 4;           // GETs in flight at most
    size_t max_record = 0;      // largest record: RecordHeader + 250 + max_value
    int timeout_ms = 2000;
    uint32_t max_retries = 64;  // torn READs + re-reads + layout refreshes per GET
    // How long the server keeps a replaced generation registered (layout "farm_grace_ms"): a
    // client that has not READ a worker's table for half of it fetches the layout first.
    uint32_t grace_ms = 5000;
  };
  using Refresh = std::function<bool(std::vector<FarmMap>*)>;

  FarmReader(proto::ClientHost& host, const Options& o, std::vector<FarmMap> maps,
             Refresh refresh);
  ~FarmReader();

  // kOk once the first READ is posted (the callback then runs exactly once), or why not.
  Status get(std::string_view key, uint32_t worker, Callback cb);

  bool owns(const fabric::OpContext* ctx) const;
  size_t on_completion(fabric::Completion& c);  // callbacks run
  void on_orphan_error() { counters_.read_errors++; }
  size_t expire(bool all, Status why);
  size_t in_flight() const { return in_flight_; }
  const FarmCounters& counters() const { return counters_; }

 private:
  struct Op;
  enum class Step : uint8_t;
  void start(Op& op);
  bool post(Op& op, size_t local_off, uint64_t raddr, size_t len, uint64_t rkey);
  void read_neighbourhood(Op& op);
  void read_header(Op& op, Step step);
  // Looks at the neighbourhood copy and goes on (READ a record, the header, or finish).
  size_t search(Op& op);
  size_t finish(Op& op, Status st, std::string_view value = {}, uint64_t version = 0);
  size_t answer(Op& op, std::string_view value, uint64_t version, uint32_t expire_at);
  size_t retry(Op& op, uint64_t* counter);
  size_t restart_after_refresh(Op& op);
  bool refresh();
  uint32_t local_seconds() const;

  fabric::Endpoint& ep_;
  Options o_;
  std::vector<FarmMap> maps_;
  std::vector<uint64_t> moves_;  // per worker: TableHeader.moves last seen, or ~0
  std::vector<Clock::time_point> last_read_;
  proto::ClientHost& host_;
  Refresh refresh_;
  size_t slot_bytes_ = 0, nb_bytes_ = 0;
  std::unique_ptr<fabric::RegisteredBuffer> buf_;
  std::vector<Op> ops_;
  size_t in_flight_ = 0;
  FarmCounters counters_;
  // The value a callback gets: a copy, because the op (and its READ buffer) is free for the
  // next GET once the callback runs. Nested callbacks (a callback waiting for another GET) copy
  // into their own string.
  std::string value_;
  uint32_t depth_ = 0;
};

}  // namespace fabkv::farm
