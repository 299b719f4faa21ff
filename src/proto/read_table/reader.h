// The client half of a READ table: a table that a worker publishes for clients to READ (Pilaf's
// cuckoo table, FaRM-KV's hopscotch buckets), replaced by a larger generation as it fills and
// kept registered for a grace time after that, read without the server's CPU. What every such
// reader does, whatever the table's shape, is here once:
//   - a pool of `ops` GETs in flight, each with its slice of one registered buffer, its
//     deadline and its bound on retries (torn READs, re-reads, layout refreshes: kContended);
//   - the stale-generation rules: a table not READ for half the grace time may be released, so
//     the next GET there fetches the layout first; a retired table, or a READ the server's NIC
//     refused, fetches it once and starts the GET over;
//   - a miss confirmed by TableHeader.moves (even and unchanged since before the GET's READs);
//   - the callback run with a copy of the value, since the op's buffer is free once it runs.
// A protocol's reader derives from Reader and says how one GET READs its table: begin() posts
// the first READs, advance() judges what they brought. pilaf/reader.h and farm/reader.h.
//
// Driven by the session's poll loop: completions whose context owns() says are ours go to
// on_completion(). Owner thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.h"
#include "fabric/endpoint.h"
#include "fabric/memory_region.h"
#include "fabric/retry.h"
#include "proto/client_protocol.h"
#include "proto/read_table/handshake.h"
#include "proto/status.h"

namespace fabkv::read_table {

// Where one worker's table is, as the server's layout says; a protocol's map adds its shape.
struct TableMap {
  fabric::PeerAddr peer = fabric::kNoPeer;
  uint32_t generation = 0;
  fabric::RemoteRegion table, extents;
};

// What every reader counts; a protocol's counters add what its READs are.
struct ReaderCounters {
  uint64_t gets = 0;  // GETs finished by READs
  uint64_t hits = 0;
  uint64_t header_reads = 0;      // miss confirmations (TableHeader.moves)
  uint64_t clock_reads = 0;       // TableHeader.clock READs to judge an expiry
  uint64_t expired = 0;           // found but expired by the server's clock: not found
  uint64_t reprobes = 0;          // a displacement during a miss's READs: READ again
  uint64_t layout_refreshes = 0;  // retired table or failed READ: layout fetched again
  uint64_t read_errors = 0;       // READ error completions
  uint64_t gave_up = 0;           // GETs that hit the retry bound (kContended)
  // These counters as JSON keys (named as the fields); a protocol's to_json() adds its own.
  nlohmann::json to_json() const;
};

struct ReaderOptions {
  uint32_t ops = 4;       // GETs in flight at most
  size_t max_record = 0;  // largest record the table can point to
  int timeout_ms = 2000;
  uint32_t max_retries = 64;  // torn READs + re-reads + layout refreshes per GET
  // How long the server keeps a replaced generation registered (the layout's "<p>_grace_ms").
  // A client that has not READ a worker's table for half of it fetches the layout before its
  // next GET there, so it never READs a generation the server has released (on tcp such a
  // READ fails and takes the connection down with it).
  uint32_t grace_ms = 5000;
};

// This client's wall clock in seconds, plus `skew_s` (a test's), for a server that publishes
// no clock of its own.
uint32_t local_seconds(int64_t skew_s = 0);

// One GET's state; a protocol's op adds its steps. kReads: READs it may have outstanding at
// once (each with its own context: the completion's tag says which).
template <uint32_t kReads>
struct GetOp {
  static constexpr uint32_t kContexts = kReads;
  fabric::OpContext ctx[kReads];
  Callback cb;
  std::string key;
  uint32_t worker = 0, retries = 0;
  uint32_t pending = 0;                  // READs into our buffer not yet completed
  uint64_t moves_before = ~uint64_t{0};  // TableHeader.moves seen before this GET's READs
  bool busy = false;                     // a GET is using this op
  bool zombie = false;     // the callback ran (timeout); waiting for its READs to come back
  bool failed = false;     // a READ of the current step failed
  bool refreshed = false;  // already fetched the layout once after a READ error
  Clock::time_point deadline{};
  size_t buf_off = 0;
  // Per-GET state of the protocol's own: its op redefines reset() (called when a GET takes it).
  void reset() {}
};

// A protocol client's Refresh: asks the server for its workers' live tables (the control
// request {"op": op}, answered with handshake.h's LiveTables) and moves each map to its
// worker's table; fits(map, table) checks and takes the protocol's shape (false: this client
// cannot read that table). False when the server is gone or the answer is not as expected.
template <class Shape, class Map, class Fits>
bool refresh_maps(proto::ClientHost& host, const char* op, std::vector<Map>* maps, Fits&& fits) {
  if (host.gone()) return false;
  try {
    nlohmann::json j = host.control_request({{"op", op}});
    const auto& ws = j.at("workers");
    if (ws.size() != maps->size()) return false;
    for (size_t i = 0; i < maps->size(); ++i) {
      const auto t = ws.at(i).get<LiveTable<Shape>>();
      Map& m = (*maps)[i];
      if (!fits(m, t)) return false;
      m.generation = t.generation;
      m.table = t.table;
      m.extents = t.extents;
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

template <class Map, class Op, class Counters>
class Reader {
 public:
  // Fetches every worker's map again (a control request), starting from the maps in use;
  // false when that failed.
  using Refresh = std::function<bool(std::vector<Map>*)>;

  // kOk once the first READ is posted (the callback then runs exactly once), or the reason
  // nothing was started (kTimeout: no free op within timeout_ms; kError: READ not postable).
  Status get(std::string_view key, uint32_t worker, Callback cb);

  bool owns(const fabric::OpContext* ctx) const { return ctx != nullptr && ctx->user == &marker_; }
  size_t on_completion(fabric::Completion& c);  // callbacks run
  // An error completion without its context (shm reports failed READs so, libfabric 1.17):
  // counted; the GET it belonged to ends by its deadline.
  void on_orphan_error() { counters_.read_errors++; }
  // A completion from the session's poll loop: true when it is the reader's (an owned context,
  // or none: our READs all carry one, and shm drops it, and the flags, from a failed READ),
  // adding the callbacks run to `ran`.
  bool take(fabric::Completion& c, size_t& ran) {
    if (c.context == nullptr) {
      if (c.error != 0 && !c.inbound) on_orphan_error();
      return true;
    }
    if (!owns(c.context)) return false;
    ran += on_completion(c);
    return true;
  }
  // Times out GETs past their deadline (all = every GET: the server is gone).
  size_t expire(bool all, Status why);
  size_t in_flight() const { return in_flight_; }
  const Counters& counters() const { return counters_; }

 protected:
  // The host drives progress (reap() while a READ waits to be posted, drive() while waiting
  // for a free op) and knows liveness: once alive() is false a READ that the provider keeps
  // refusing is given up at once (shm refuses every READ of a dead process's memory with
  // -FI_EAGAIN) and the GET ends with kServerGone.
  Reader(proto::ClientHost& host, const ReaderOptions& o, std::vector<Map> maps, Refresh refresh)
      : ep_(host.endpoint()),
        host_(host),
        o_(o),
        maps_(std::move(maps)),
        moves_(maps_.size(), ~uint64_t{0}),
        last_read_(maps_.size(), Clock::now()),
        refresh_(std::move(refresh)) {}
  virtual ~Reader() = default;
  // Registers the buffer: `slot_bytes` per op (a multiple of 64). From the protocol's
  // constructor, which knows what one GET READs.
  void allocate(size_t slot_bytes);

  // Posts the GET's first READs with the current map of its worker (moves_before is set).
  virtual void begin(Op& op) = 0;
  // READ k of `op` completed without error.
  virtual void landed(Op& /*op*/, uint32_t /*k*/) {}
  // Every READ of the op's step is in: judge them and go on. Returns the callbacks run when
  // it ended the GET itself, else 0 (then a GET left with nothing outstanding ends kError).
  virtual size_t advance(Op& op) = 0;

  // (Re)starts the GET: fetches the layout first when the worker's table has been idle.
  void start(Op& op);
  // Posts READ k of `op` into its slice at `local_off` (counted in pending); false when it
  // could not be posted.
  bool post(Op& op, uint32_t k, size_t local_off, uint64_t raddr, size_t len, uint64_t rkey);
  // The op's slice of the buffer, from `off` on.
  const char* copy(const Op& op, size_t off) const { return buf_->data() + op.buf_off + off; }
  size_t finish(Op& op, Status st, std::string_view value = {}, uint64_t version = 0);
  // A READ showed a race: count it, and end the GET with kContended once it has used up its
  // retries. Returns callbacks run.
  size_t retry(Op& op, uint64_t* counter);
  // The table was retired: learn the new layout and start over (a retry).
  size_t restart_after_refresh(Op& op);
  // The key is in none of the places READ: not found when no displacement began or ended
  // since before the READs (`moves` is TableHeader.moves now); else READ again with this
  // value as the reference (the key may have moved from a place not yet READ to one READ).
  size_t confirm_miss(Op& op, uint64_t moves);
  bool refresh();

  fabric::Endpoint& ep_;  // host_.endpoint() when constructed (after the Welcome)
  proto::ClientHost& host_;
  ReaderOptions o_;
  std::vector<Map> maps_;
  std::vector<uint64_t> moves_;  // per worker: TableHeader.moves last seen (even), or ~0
  std::vector<Clock::time_point> last_read_;  // per worker: when a READ of its table returned
  Refresh refresh_;
  size_t slot_bytes_ = 0;
  std::unique_ptr<fabric::RegisteredBuffer> buf_;
  std::vector<Op> ops_;
  size_t in_flight_ = 0;
  Counters counters_;

 private:
  static inline char marker_;  // OpContext::user of our READs (one per kind of reader)
  // The value a callback gets: a copy, because the op (and its READ buffer) is free for the
  // next GET once the callback runs. Nested callbacks (a callback waiting for another GET) copy
  // into their own string.
  std::string value_;
  uint32_t depth_ = 0;
};

// ---- the template's members (instantiated once, in each protocol's reader.cc) --------------

template <class Map, class Op, class Counters>
void Reader<Map, Op, Counters>::allocate(size_t slot_bytes) {
  slot_bytes_ = slot_bytes;
  buf_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), slot_bytes_ * o_.ops,
                                                    fabric::Access::kLocalOnly);
  ops_ = std::vector<Op>(o_.ops);
  for (size_t i = 0; i < ops_.size(); ++i) {
    for (uint32_t k = 0; k < Op::kContexts; ++k) {
      ops_[i].ctx[k].user = &marker_;
      ops_[i].ctx[k].tag = i * Op::kContexts + k;
    }
    ops_[i].buf_off = i * slot_bytes_;
  }
}

template <class Map, class Op, class Counters>
Status Reader<Map, Op, Counters>::get(std::string_view key, uint32_t worker, Callback cb) {
  if (worker >= maps_.size()) return Status::kError;
  Deadline d = Deadline::after_ms(o_.timeout_ms);
  Op* op = nullptr;
  if (Status s = host_.free_op(ops_, d, &op); s != Status::kOk) return s;
  op->busy = true;
  op->zombie = false;
  op->failed = false;
  op->refreshed = false;
  op->cb = std::move(cb);
  op->key.assign(key.data(), key.size());
  op->worker = worker;
  op->retries = 0;
  op->reset();
  op->deadline = d.at();
  in_flight_++;
  start(*op);
  if (op->pending == 0 && op->busy && !op->zombie) {
    // Not even the first READ could be posted: nothing started, no callback.
    op->busy = false;
    op->cb = nullptr;
    in_flight_--;
    return host_.alive() ? Status::kError : Status::kServerGone;
  }
  return Status::kOk;
}

template <class Map, class Op, class Counters>
void Reader<Map, Op, Counters>::start(Op& op) {
  if (Clock::now() - last_read_[op.worker] > std::chrono::milliseconds(o_.grace_ms / 2)) {
    // Idle for a while: the generation we know may be released by now (ReaderOptions::grace_ms).
    if (refresh()) last_read_.assign(maps_.size(), Clock::now());
  }
  op.moves_before = moves_[op.worker];  // seen before any READ that begin() posts
  begin(op);
}

template <class Map, class Op, class Counters>
bool Reader<Map, Op, Counters>::post(Op& op, uint32_t k, size_t local_off, uint64_t raddr,
                                     size_t len, uint64_t rkey) {
  // -FI_EAGAIN: a full queue, or (shm, tcp) the first operation to a peer: progress, retry.
  long ret = fabric::post_with_retry(
      [&] {
        return ep_.read(buf_->local(op.buf_off + local_off, len), maps_[op.worker].peer, raddr,
                        rkey, &op.ctx[k]);
      },
      [&] { host_.reap(); }, Deadline::after_ms(o_.timeout_ms), [&] { return host_.alive(); });
  if (ret != 0) return false;
  op.pending++;
  return true;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::finish(Op& op, Status st, std::string_view value,
                                         uint64_t version) {
  if (op.zombie || !op.busy) return 0;
  counters_.gets++;
  if (st == Status::kOk) counters_.hits++;
  in_flight_--;
  Callback cb = std::move(op.cb);
  op.cb = nullptr;
  // The value is in this op's READ buffer, which the next GET may take as soon as the op is
  // free, also one the callback starts and waits for: the callback reads a copy.
  std::string nested;
  std::string& copy = depth_ == 0 ? value_ : nested;
  copy.assign(value.data(), value.size());
  if (op.pending > 0) op.zombie = true;  // keep the buffer until its READs return
  else op.busy = false;
  depth_++;
  struct Leave {
    uint32_t& d;
    ~Leave() { d--; }
  } leave{depth_};
  if (cb) cb(st, copy, version);
  return 1;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::retry(Op& op, uint64_t* counter) {
  if (counter) (*counter)++;
  if (++op.retries > o_.max_retries) {
    counters_.gave_up++;
    return finish(op, Status::kContended);
  }
  return 0;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::restart_after_refresh(Op& op) {
  if (size_t ran = retry(op, nullptr)) return ran;
  if (!refresh()) return finish(op, Status::kServerGone);
  start(op);
  return 0;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::confirm_miss(Op& op, uint64_t moves) {
  if ((moves & 1) == 0 && moves == op.moves_before) return finish(op, Status::kNotFound);
  if (retry(op, &counters_.reprobes) == 0) {
    moves_[op.worker] = moves;  // start() takes it as this GET's reference
    start(op);
  }
  return 0;
}

template <class Map, class Op, class Counters>
bool Reader<Map, Op, Counters>::refresh() {
  counters_.layout_refreshes++;
  std::vector<Map> maps = maps_;
  if (!refresh_ || !refresh_(&maps) || maps.size() != maps_.size()) return false;
  for (size_t w = 0; w < maps.size(); ++w) {
    if (maps[w].generation != maps_[w].generation) moves_[w] = ~uint64_t{0};
    maps_[w] = maps[w];
  }
  return true;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::on_completion(fabric::Completion& c) {
  const size_t index = c.context->tag / Op::kContexts;
  const uint32_t k = static_cast<uint32_t>(c.context->tag % Op::kContexts);
  if (index >= ops_.size()) return 0;
  Op& op = ops_[index];
  if (op.pending > 0) op.pending--;
  if (c.error == 0) {
    last_read_[op.worker] = Clock::now();
    landed(op, k);
  } else {
    // A READ the server's NIC refused: the region went away (a generation released after its
    // grace) or the server is gone.
    counters_.read_errors++;
    op.failed = true;
  }
  if (op.zombie) {
    if (op.pending == 0) {
      op.zombie = false;
      op.busy = false;
    }
    return 0;
  }
  if (!op.busy || op.pending > 0) return 0;  // the rest of this step is still on its way
  const size_t gets_before = counters_.gets;
  if (op.failed) {
    // Fetch the layout once and start over; a second failure ends the GET.
    op.failed = false;
    if (op.refreshed || !refresh()) return finish(op, Status::kServerGone);
    op.refreshed = true;
    start(op);
  } else if (size_t ran = advance(op)) {
    return ran;
  }
  size_t ran = counters_.gets - gets_before;
  // Still ours, nothing outstanding: a READ could not be posted.
  if (op.busy && !op.zombie && op.pending == 0)
    ran += finish(op, host_.alive() ? Status::kError : Status::kServerGone);
  return ran;
}

template <class Map, class Op, class Counters>
size_t Reader<Map, Op, Counters>::expire(bool all, Status why) {
  size_t ran = 0;
  auto now = Clock::now();
  for (Op& op : ops_) {
    if (op.zombie && (all || now >= op.deadline + std::chrono::milliseconds(o_.timeout_ms))) {
      // Its READs never came back (an error completion that lost its context): free the op.
      op.zombie = false;
      op.busy = false;
      op.pending = 0;
      continue;
    }
    if (!op.busy || op.zombie) continue;
    if (!all && now < op.deadline) continue;
    ran += finish(op, why);
    if (all) {
      op.zombie = false;
      op.busy = false;
      op.pending = 0;
    }
  }
  return ran;
}

}  // namespace fabkv::read_table
