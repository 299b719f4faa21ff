#include "proto/pilaf/reader.h"

#include <algorithm>
#include <cstring>

#include "proto/pilaf/layout.h"

namespace fabkv::pilaf {

namespace {
constexpr size_t kSlotAlign = 64;
}  // namespace

nlohmann::json PilafCounters::to_json() const {
  const double g = gets ? static_cast<double>(gets) : 1.0;
  nlohmann::json j = ReaderCounters::to_json();
  j.update({{"entry_reads", entry_reads},
            {"hit_entry_reads", hit_entry_reads},
            {"extent_reads", extent_reads},
            {"torn_entries", torn_entries},
            {"torn_extents", torn_extents},
            {"probes_per_get", static_cast<double>(entry_reads) / g},
            {"probes_per_hit",
             static_cast<double>(hit_entry_reads) / (hits ? static_cast<double>(hits) : 1.0)},
            {"extent_reads_per_get", static_cast<double>(extent_reads) / g},
            {"retries_per_get", static_cast<double>(torn_entries + torn_extents) / g}});
  return j;
}

// kEntries: entry READs of this round (one, or three in parallel); kRecord: the record of
// entry `probe`; kHeader: TableHeader.moves/state/clock after three misses; kClock: the same
// 16 bytes after our record, to judge its expire_at by the server's clock.
enum class PilafStep : uint8_t { kEntries, kRecord, kHeader, kClock };

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

struct PilafOp : read_table::GetOp<kRecordCtx + 1> {
  pilaf::KeySlots slots{};
  pilaf::Entry entry{};
  uint32_t probe = 0;
  uint32_t entry_reads = 0;  // this GET's, for hit_entry_reads
  uint8_t have = 0;          // bit i: entry i of this round is in the buffer
  PilafStep step = PilafStep::kEntries;
  void reset() { entry_reads = 0; }
};

PilafReader::PilafReader(proto::ClientHost& host, const Options& o, std::vector<PilafMap> maps,
                         Refresh refresh)
    : Reader(host, o, std::move(maps), std::move(refresh)),
      parallel_probes_(o.parallel_probes),
      clock_skew_s_(o.clock_skew_s) {
  clocks_.assign(maps_.size(), ServerClock{});
  allocate((kRecordAt + std::max(o_.max_record, sizeof(pilaf::TableHeader)) + kSlotAlign - 1) &
           ~(kSlotAlign - 1));
}

PilafReader::~PilafReader() = default;

// (Re)starts the probes with the current map of the key's worker.
void PilafReader::begin(PilafOp& op) {
  op.slots = pilaf::key_slots(op.key, maps_[op.worker].entries);
  op.have = 0;
  if (parallel_probes_) {
    op.step = PilafStep::kEntries;
    op.probe = 0;
    for (uint32_t i = 0; i < pilaf::kWays; ++i) post_entry(op, i);
    return;
  }
  evaluate(op, 0);
}

void PilafReader::landed(PilafOp& op, uint32_t k) {
  if (k < kRecordCtx) op.have |= static_cast<uint8_t>(1u << k);
}

void PilafReader::post_entry(PilafOp& op, uint32_t i) {
  const PilafMap& m = maps_[op.worker];
  counters_.entry_reads++;
  op.entry_reads++;
  post(op, i, i * sizeof(pilaf::Entry), m.table.at(pilaf::entry_offset(op.slots.slot[i])),
       sizeof(pilaf::Entry), m.table.key);
}

// Walks the key's slots from `from` on with the entries in the buffer, READing those that are
// not (one at a time), until a READ is outstanding or the GET is decided.
void PilafReader::evaluate(PilafOp& op, uint32_t from) {
  const PilafMap& m = maps_[op.worker];
  const char* buf = copy(op, 0);
  for (uint32_t i = from; i < pilaf::kWays; ++i) {
    op.step = PilafStep::kEntries;
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
        restart_after_refresh(op);
        return;
      case pilaf::EntryState::kEmpty: continue;
      case pilaf::EntryState::kUsed:
        if (!pilaf::may_hold(e, op.key, op.slots.tag)) continue;
        if (kRecordAt + e.kv_size > slot_bytes_ || e.extent_offset + e.kv_size > m.extents.length) {
          // A sealed entry that cannot be right for this layout: count it, skip it.
          if (retry(op, &counters_.torn_entries) != 0) return;
          continue;
        }
        op.entry = e;
        op.step = PilafStep::kRecord;
        counters_.extent_reads++;
        post(op, kRecordCtx, kRecordAt, m.extents.at(e.extent_offset), e.kv_size, m.extents.key);
        return;
    }
  }
  // Three misses: confirm that no cuckoo move ran during the probes (layout.h's rules).
  op.step = PilafStep::kHeader;
  counters_.header_reads++;
  post(op, kRecordCtx, kRecordAt, m.table.at(pilaf::kMovesOffset), 16, m.table.key);
}

size_t PilafReader::found(PilafOp& op, const pilaf::Record& rec) {
  counters_.hit_entry_reads += op.entry_reads;
  return finish(op, Status::kOk, rec.value, rec.header.version);
}

size_t PilafReader::advance(PilafOp& op) {
  const char* rec_buf = copy(op, kRecordAt);
  switch (op.step) {
    case PilafStep::kEntries: evaluate(op, op.probe); break;
    case PilafStep::kRecord: {
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
    case PilafStep::kClock: {
      const pilaf::HeaderWord w = pilaf::load_header_word(copy(op, kClockAt));
      if (w.state == pilaf::kStateRetired) {
        // A retired table's clock has stopped: learn the new layout and look again.
        return restart_after_refresh(op);
      }
      learn_clock(op.worker, w);
      pilaf::Record rec;  // the record READ before, still in the buffer
      if (!pilaf::check_record(op.entry, rec_buf, op.entry.kv_size, &rec))
        return finish(op, Status::kError);
      const uint32_t now = w.clock != 0 ? w.clock : read_table::local_seconds(clock_skew_s_);
      const bool gone = pilaf::expired(rec.header.expire_at, now);
      if (gone) {
        counters_.expired++;
        return finish(op, Status::kNotFound);
      }
      return found(op, rec);
    }
    case PilafStep::kHeader: {
      const pilaf::HeaderWord w = pilaf::load_header_word(rec_buf);
      if (w.state == pilaf::kStateRetired) return restart_after_refresh(op);
      learn_clock(op.worker, w);
      return confirm_miss(op, w.moves);
    }
  }
  return 0;
}

size_t PilafReader::on_record(PilafOp& op, const pilaf::Record& rec) {
  switch (judge(op.worker, rec.header.expire_at)) {
    case Expiry::kLive: return found(op, rec);
    case Expiry::kExpired: counters_.expired++; return finish(op, Status::kNotFound);
    case Expiry::kUnsure: break;
  }
  // Too close to call from what we know: READ the server's clock (moves, state, clock), then
  // answer (PilafStep::kClock). A READ that cannot be posted ends the GET with kError.
  const PilafMap& m = maps_[op.worker];
  op.step = PilafStep::kClock;
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
    return pilaf::expired(expire_at, read_table::local_seconds(clock_skew_s_)) ? Expiry::kExpired
                                                                               : Expiry::kLive;
  }
  const double low = c.seconds + std::chrono::duration<double>(age).count();
  if (low >= expire_at) return Expiry::kExpired;
  if (low + 1.0 + kClockSlackS <= expire_at) return Expiry::kLive;
  return Expiry::kUnsure;
}

void PilafReader::learn_clock(uint32_t worker, const pilaf::HeaderWord& w) {
  clocks_[worker] = ServerClock{true, w.clock, Clock::now()};
}

}  // namespace fabkv::pilaf

namespace fabkv {
template class read_table::Reader<pilaf::PilafMap, pilaf::PilafOp, pilaf::PilafCounters>;
}  // namespace fabkv
