#include "proto/pilaf/reader.h"

#include <algorithm>
#include <cstring>
#include <ctime>

#include "fabric/retry.h"
#include "proto/pilaf/layout.h"

namespace fabkv::pilaf {

namespace {
char kPilafMarker;  // OpContext::user of our READs
constexpr size_t kSlotAlign = 64;
}  // namespace

nlohmann::json PilafCounters::to_json() const {
  const double g = gets ? static_cast<double>(gets) : 1.0;
  return {{"gets", gets},
          {"hits", hits},
          {"entry_reads", entry_reads},
          {"hit_entry_reads", hit_entry_reads},
          {"extent_reads", extent_reads},
          {"header_reads", header_reads},
          {"clock_reads", clock_reads},
          {"expired", expired},
          {"torn_entries", torn_entries},
          {"torn_extents", torn_extents},
          {"reprobes", reprobes},
          {"layout_refreshes", layout_refreshes},
          {"read_errors", read_errors},
          {"gave_up", gave_up},
          {"probes_per_get", static_cast<double>(entry_reads) / g},
          {"probes_per_hit", static_cast<double>(hit_entry_reads) / (hits ? static_cast<double>(hits) : 1.0)},
          {"extent_reads_per_get", static_cast<double>(extent_reads) / g},
          {"retries_per_get", static_cast<double>(torn_entries + torn_extents) / g}};
}

// kEntries: entry READs of this round (one, or three in parallel); kRecord: the record of
// entry `probe`; kHeader: TableHeader.moves/state/clock after three misses; kClock: the same
// 16 bytes after our record, to judge its expire_at by the server's clock.
enum class PilafReader::Step : uint8_t { kEntries, kRecord, kHeader, kClock };

// Per op, its slice of the buffer: the three entries at 0, 32, 64, the header's 16 bytes for
// kClock at kClockAt (the record stays where it is meanwhile), the record (or the header's 16
// bytes for kHeader) at kRecordAt. READ k uses ctx[k]: 0..2 the entries, 3 the record or header.
namespace {
constexpr size_t kClockAt = 96;
constexpr size_t kRecordAt = 128;
constexpr uint32_t kRecordCtx = 3;
static_assert(kClockAt >= pilaf::kWays * sizeof(pilaf::Entry) && kClockAt + 16 <= kRecordAt);

// How long a READ of a worker's clock may stand in for it (then the next GET of an item with
// an expiry READs it again: a server's clock may be stepped).
constexpr auto kClockMaxAge = std::chrono::seconds(1);
// How far TableHeader.clock may lag the server's clock when READ: the owner refreshes it every
// 1024 poll rounds (well under a millisecond while idle), plus the READ's own round trip.
constexpr double kClockSlackS = 0.5;
}  // namespace

struct PilafReader::Op {
  fabric::OpContext ctx[4];
  Callback cb;
  std::string key;
  pilaf::KeySlots slots{};
  pilaf::Entry entry{};
  uint32_t worker = 0, generation = 0, probe = 0, retries = 0;
  uint32_t entry_reads = 0;  // this GET's, for hit_entry_reads
  uint32_t pending = 0;      // READs into our buffer not yet completed
  uint8_t have = 0;          // bit i: entry i of this round is in the buffer
  uint64_t moves_before = ~uint64_t{0};  // TableHeader.moves seen before these probes began
  Step step = Step::kEntries;
  bool busy = false;       // a GET is using this op
  bool zombie = false;     // the callback ran (timeout); waiting for its READs to come back
  bool failed = false;     // a READ of the current step failed
  bool refreshed = false;  // already fetched the layout once after a READ error
  Clock::time_point deadline{};
  size_t buf_off = 0;
};

PilafReader::PilafReader(proto::ClientHost& host, const Options& o,
                         std::vector<PilafMap> maps, Refresh refresh)
    : ep_(host.endpoint()),
      o_(o),
      maps_(std::move(maps)),
      host_(host),
      refresh_(std::move(refresh)) {
  moves_.assign(maps_.size(), ~uint64_t{0});
  last_read_.assign(maps_.size(), Clock::now());
  clocks_.assign(maps_.size(), ServerClock{});
  slot_bytes_ = (kRecordAt + std::max(o_.max_record, sizeof(pilaf::TableHeader)) + kSlotAlign - 1) &
                ~(kSlotAlign - 1);
  buf_ = std::make_unique<fabric::RegisteredBuffer>(host.fabric(), slot_bytes_ * o_.ops,
                                                    fabric::Access::kLocalOnly);
  ops_ = std::vector<Op>(o_.ops);
  for (size_t i = 0; i < ops_.size(); ++i) {
    for (uint32_t k = 0; k < 4; ++k) {
      ops_[i].ctx[k].user = &kPilafMarker;
      ops_[i].ctx[k].tag = i * 4 + k;
    }
    ops_[i].buf_off = i * slot_bytes_;
  }
}

PilafReader::~PilafReader() = default;

bool PilafReader::owns(const fabric::OpContext* ctx) const {
  return ctx != nullptr && ctx->user == &kPilafMarker;
}

Status PilafReader::get(std::string_view key, uint32_t worker, Callback cb) {
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
  op->entry_reads = 0;
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

// (Re)starts the probes with the current map of the key's worker.
void PilafReader::start(Op& op) {
  if (Clock::now() - last_read_[op.worker] > std::chrono::milliseconds(o_.grace_ms / 2)) {
    // Idle for a while: the generation we know may be gone by now (see Options::grace_ms).
    if (refresh()) last_read_.assign(maps_.size(), Clock::now());
  }
  const PilafMap& m = maps_[op.worker];
  op.generation = m.generation;
  op.slots = pilaf::key_slots(op.key, m.entries);
  op.moves_before = moves_[op.worker];  // read before any of the probes below
  op.have = 0;
  if (o_.parallel_probes) {
    op.step = Step::kEntries;
    op.probe = 0;
    for (uint32_t i = 0; i < pilaf::kWays; ++i) post_entry(op, i);
    return;
  }
  evaluate(op, 0);
}

// Posts READ k of `op` (counted); false when it could not be posted.
bool PilafReader::post(Op& op, uint32_t k, size_t local_off, uint64_t raddr, size_t len,
                       uint64_t rkey) {
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

void PilafReader::post_entry(Op& op, uint32_t i) {
  const PilafMap& m = maps_[op.worker];
  counters_.entry_reads++;
  op.entry_reads++;
  post(op, i, i * sizeof(pilaf::Entry), m.table.at(pilaf::entry_offset(op.slots.slot[i])),
       sizeof(pilaf::Entry), m.table.key);
}

// Walks the key's slots from `from` on with the entries in the buffer, READing those that are
// not (one at a time), until a READ is outstanding or the GET is decided.
void PilafReader::evaluate(Op& op, uint32_t from) {
  const PilafMap& m = maps_[op.worker];
  const char* buf = buf_->data() + op.buf_off;
  for (uint32_t i = from; i < pilaf::kWays; ++i) {
    op.step = Step::kEntries;
    op.probe = i;
    if (!(op.have & (1u << i))) {
      post_entry(op, i);
      return;
    }
    pilaf::Entry e;
    std::memcpy(&e, buf + i * sizeof(pilaf::Entry), sizeof(e));
    switch (pilaf::check_entry(e)) {
      case pilaf::EntryState::kTorn:
        // The worker was writing this entry: READ it again (Pilaf sec. 3.3).
        if (retry(op, &counters_.torn_entries) == 0) {
          op.have &= static_cast<uint8_t>(~(1u << i));
          post_entry(op, i);
        }
        return;
      case pilaf::EntryState::kRetired:
        // The table was replaced by a larger generation: learn it and start over.
        if (retry(op, nullptr) == 0) {
          if (!refresh()) {
            finish(op, Status::kServerGone);
            return;
          }
          start(op);
        }
        return;
      case pilaf::EntryState::kEmpty:
        continue;
      case pilaf::EntryState::kUsed:
        if (!pilaf::may_hold(e, op.key, op.slots.tag)) continue;
        if (kRecordAt + e.kv_size > slot_bytes_ || e.extent_offset + e.kv_size > m.extents.length) {
          // A sealed entry that cannot be right for this layout: count it, skip it.
          if (retry(op, &counters_.torn_entries) != 0) return;
          continue;
        }
        op.entry = e;
        op.step = Step::kRecord;
        counters_.extent_reads++;
        post(op, kRecordCtx, kRecordAt, m.extents.at(e.extent_offset), e.kv_size, m.extents.key);
        return;
    }
  }
  // Three misses: confirm that no cuckoo move ran during the probes (layout.h's rules).
  op.step = Step::kHeader;
  counters_.header_reads++;
  post(op, kRecordCtx, kRecordAt, m.table.at(pilaf::kMovesOffset), 16, m.table.key);
}

size_t PilafReader::finish(Op& op, Status st, std::string_view value, uint64_t version) {
  if (op.zombie || !op.busy) return 0;
  counters_.gets++;
  if (st == Status::kOk) {
    counters_.hits++;
    counters_.hit_entry_reads += op.entry_reads;
  }
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

// A READ showed a race (or the layout moved on): try the key again unless it has used up its
// retries. Returns callbacks run.
size_t PilafReader::retry(Op& op, uint64_t* counter) {
  if (counter) (*counter)++;
  if (++op.retries > o_.max_retries) {
    counters_.gave_up++;
    return finish(op, Status::kContended);
  }
  return 0;
}

bool PilafReader::refresh() {
  counters_.layout_refreshes++;
  std::vector<PilafMap> maps = maps_;
  if (!refresh_ || !refresh_(&maps) || maps.size() != maps_.size()) return false;
  for (size_t w = 0; w < maps.size(); ++w) {
    if (maps[w].generation != maps_[w].generation) moves_[w] = ~uint64_t{0};
    maps_[w] = maps[w];
  }
  return true;
}

size_t PilafReader::on_completion(fabric::Completion& c) {
  const size_t index = c.context->tag / 4;
  const uint32_t k = static_cast<uint32_t>(c.context->tag % 4);
  if (index >= ops_.size()) return 0;
  Op& op = ops_[index];
  if (op.pending > 0) op.pending--;
  if (c.error == 0) {
    last_read_[op.worker] = Clock::now();
    if (k < kRecordCtx) op.have |= static_cast<uint8_t>(1u << k);
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
  if (!op.busy || op.pending > 0) return 0;  // the rest of this round is still on its way
  const size_t gets_before = counters_.gets;
  if (op.failed) {
    // Fetch the layout once and start over; a second failure ends the GET.
    op.failed = false;
    if (op.refreshed || !refresh()) return finish(op, Status::kServerGone);
    op.refreshed = true;
    start(op);
  } else {
    const char* rec_buf = buf_->data() + op.buf_off + kRecordAt;
    switch (op.step) {
      case Step::kEntries:
        evaluate(op, op.probe);
        break;
      case Step::kRecord: {
        pilaf::Record rec;
        if (!pilaf::check_record(op.entry, rec_buf, op.entry.kv_size, &rec)) {
          // The record was freed and reused under us: READ the entry again.
          if (retry(op, &counters_.torn_extents) == 0) {
            op.have &= static_cast<uint8_t>(~(1u << op.probe));
            evaluate(op, op.probe);
          }
          break;
        }
        if (rec.key != op.key) {
          evaluate(op, op.probe + 1);
          break;
        }
        on_record(op, rec);
        break;
      }
      case Step::kClock: {
        const pilaf::HeaderWord w =
            pilaf::load_header_word(buf_->data() + op.buf_off + kClockAt);
        if (w.state == pilaf::kStateRetired) {
          // A retired table's clock has stopped: learn the new layout and look again.
          if (retry(op, nullptr) == 0) {
            if (!refresh()) return finish(op, Status::kServerGone);
            start(op);
          }
          break;
        }
        learn_clock(op.worker, w);
        pilaf::Record rec;  // the record READ before, still in the buffer
        if (!pilaf::check_record(op.entry, rec_buf, op.entry.kv_size, &rec))
          return finish(op, Status::kError);
        const bool gone = w.clock != 0 ? pilaf::expired(rec.header.expire_at, w.clock)
                                       : pilaf::expired(rec.header.expire_at, local_seconds());
        if (gone) {
          counters_.expired++;
          return finish(op, Status::kNotFound);
        }
        return finish(op, Status::kOk, rec.value, rec.header.version);
      }
      case Step::kHeader: {
        const pilaf::HeaderWord w = pilaf::load_header_word(rec_buf);
        const uint64_t moves = w.moves;
        const uint32_t state = w.state;
        if (state != pilaf::kStateRetired) learn_clock(op.worker, w);
        if (state == pilaf::kStateRetired) {
          if (retry(op, nullptr) == 0) {
            if (!refresh()) return finish(op, Status::kServerGone);
            start(op);
          }
          break;
        }
        if ((moves & 1) == 0 && moves == op.moves_before) return finish(op, Status::kNotFound);
        // A move began or ended since before our probes: the key may have gone from a slot we
        // had not READ yet to one we had. Probe again with this value as the reference.
        if (retry(op, &counters_.reprobes) == 0) {
          moves_[op.worker] = moves;  // start() takes it as this GET's reference
          start(op);
        }
        break;
      }
    }
  }
  size_t ran = counters_.gets - gets_before;
  // Still ours, nothing outstanding: a READ could not be posted.
  if (op.busy && !op.zombie && op.pending == 0)
    ran += finish(op, host_.alive() ? Status::kError : Status::kServerGone);
  return ran;
}

size_t PilafReader::on_record(Op& op, const pilaf::Record& rec) {
  switch (judge(op.worker, rec.header.expire_at)) {
    case Expiry::kLive:
      return finish(op, Status::kOk, rec.value, rec.header.version);
    case Expiry::kExpired:
      counters_.expired++;
      return finish(op, Status::kNotFound);
    case Expiry::kUnsure:
      break;
  }
  // Too close to call from what we know: READ the server's clock (moves, state, clock), then
  // answer (Step::kClock). A READ that cannot be posted ends the GET with kError.
  const PilafMap& m = maps_[op.worker];
  op.step = Step::kClock;
  counters_.clock_reads++;
  post(op, kRecordCtx, kClockAt, m.table.at(pilaf::kMovesOffset), 16, m.table.key);
  return 0;
}

// The server's clock now lies in [seconds + age, seconds + 1 + age + slack): the header value
// was written before our READ completed (age counts from the completion) and lags the true
// clock by less than a second plus the refresh period and the READ's round trip (slack).
PilafReader::Expiry PilafReader::judge(uint32_t worker, uint32_t expire_at) const {
  if (expire_at == 0) return Expiry::kLive;
  const ServerClock& c = clocks_[worker];
  const auto age = Clock::now() - c.at;
  if (!c.known || age > kClockMaxAge) return Expiry::kUnsure;
  if (c.seconds == 0) {
    // The server publishes no clock (layout v1): our own is all there is.
    return pilaf::expired(expire_at, local_seconds()) ? Expiry::kExpired : Expiry::kLive;
  }
  const double low = c.seconds + std::chrono::duration<double>(age).count();
  if (low >= expire_at) return Expiry::kExpired;
  if (low + 1.0 + kClockSlackS <= expire_at) return Expiry::kLive;
  return Expiry::kUnsure;
}

void PilafReader::learn_clock(uint32_t worker, const pilaf::HeaderWord& w) {
  clocks_[worker] = ServerClock{true, w.clock, Clock::now()};
}

uint32_t PilafReader::local_seconds() const {
  const int64_t t = static_cast<int64_t>(std::time(nullptr)) + o_.clock_skew_s;
  return static_cast<uint32_t>(std::clamp<int64_t>(t, 0, UINT32_MAX));
}

size_t PilafReader::expire(bool all, Status why) {
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

}  // namespace fabkv::pilaf
