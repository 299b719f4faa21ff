#include "proto/farm/reader.h"

#include <algorithm>
#include <cstring>
#include <ctime>

#include "fabric/retry.h"

namespace fabkv::farm {

namespace {
char kFarmMarker;  // OpContext::user of our READs
constexpr size_t kAlign = 64;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

nlohmann::json FarmCounters::to_json() const {
  const double g = gets ? static_cast<double>(gets) : 1.0;
  return {{"gets", gets},
          {"hits", hits},
          {"neighbourhood_reads", neighbourhood_reads},
          {"record_reads", record_reads},
          {"header_reads", header_reads},
          {"clock_reads", clock_reads},
          {"expired", expired},
          {"torn_buckets", torn_buckets},
          {"torn_records", torn_records},
          {"reprobes", reprobes},
          {"layout_refreshes", layout_refreshes},
          {"read_errors", read_errors},
          {"gave_up", gave_up},
          {"reads_per_get",
           static_cast<double>(neighbourhood_reads + record_reads + header_reads + clock_reads) /
               g},
          {"retries_per_get", static_cast<double>(torn_buckets + torn_records + reprobes) / g}};
}

// kNeighbourhood: the H buckets; kRecord: the record of `bucket`; kHeader: moves/state/clock to
// confirm a miss; kClock: the same 16 bytes to judge the found item's expire_at.
enum class FarmReader::Step : uint8_t { kNeighbourhood, kRecord, kHeader, kClock };

struct FarmReader::Op {
  fabric::OpContext ctx;
  Callback cb;
  std::string key;
  KeyHome kh{};
  Bucket bucket{};      // the candidate: its views point into this op's neighbourhood copy
  uint32_t skip = 0;    // indirect candidates whose record held another key
  uint32_t worker = 0, retries = 0;
  uint32_t pending = 0;
  uint64_t moves_before = ~uint64_t{0};
  Step step = Step::kNeighbourhood;
  bool busy = false, zombie = false, failed = false, refreshed = false;
  // kClock: the answer waiting for the server's clock.
  std::string_view value;
  uint64_t version = 0;
  uint32_t expire_at = 0;
  Clock::time_point deadline{};
  size_t buf_off = 0;
};

FarmReader::FarmReader(proto::ClientHost& host, const Options& o, std::vector<FarmMap> maps,
                       Refresh refresh)
    : ep_(host.endpoint()),
      o_(o),
      maps_(std::move(maps)),
      host_(host),
      refresh_(std::move(refresh)) {
  moves_.assign(maps_.size(), ~uint64_t{0});
  last_read_.assign(maps_.size(), Clock::now());
  size_t bucket_bytes = 0;
  for (const FarmMap& m : maps_) bucket_bytes = std::max(bucket_bytes, m.bucket_bytes);
  nb_bytes_ = round_up(neighbourhood_bytes(bucket_bytes), kAlign);
  // [neighbourhood][header word, 64][record]
  slot_bytes_ = round_up(nb_bytes_ + kAlign + std::max<size_t>(o_.max_record, 16), kAlign);
  buf_ = std::make_unique<fabric::RegisteredBuffer>(host.fabric(), slot_bytes_ * o_.ops,
                                                    fabric::Access::kLocalOnly);
  ops_ = std::vector<Op>(o_.ops);
  for (size_t i = 0; i < ops_.size(); ++i) {
    ops_[i].ctx.user = &kFarmMarker;
    ops_[i].ctx.tag = i;
    ops_[i].buf_off = i * slot_bytes_;
  }
}

FarmReader::~FarmReader() = default;

bool FarmReader::owns(const fabric::OpContext* ctx) const {
  return ctx != nullptr && ctx->user == &kFarmMarker;
}

Status FarmReader::get(std::string_view key, uint32_t worker, Callback cb) {
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

// (Re)starts the GET with the current map of the key's worker.
void FarmReader::start(Op& op) {
  if (Clock::now() - last_read_[op.worker] > std::chrono::milliseconds(o_.grace_ms / 2)) {
    // Idle for a while: the generation we know may be released by now.
    if (refresh()) last_read_.assign(maps_.size(), Clock::now());
  }
  op.kh = key_home(op.key, maps_[op.worker].homes);
  op.moves_before = moves_[op.worker];  // seen before the READ below is posted
  op.skip = 0;
  read_neighbourhood(op);
}

bool FarmReader::post(Op& op, size_t local_off, uint64_t raddr, size_t len, uint64_t rkey) {
  // -FI_EAGAIN: a full queue, or (shm, tcp) the first operation to a peer: progress, retry.
  long ret = fabric::post_with_retry(
      [&] {
        return ep_.read(buf_->local(op.buf_off + local_off, len), maps_[op.worker].peer, raddr,
                        rkey, &op.ctx);
      },
      [&] { host_.reap(); }, Deadline::after_ms(o_.timeout_ms), [&] { return host_.alive(); });
  if (ret != 0) return false;
  op.pending++;
  return true;
}

void FarmReader::read_neighbourhood(Op& op) {
  const FarmMap& m = maps_[op.worker];
  op.step = Step::kNeighbourhood;
  counters_.neighbourhood_reads++;
  // HERD sec. 5.1.2: one READ of 6 x bucket bytes from the home bucket on.
  post(op, 0, m.table.at(bucket_offset(op.kh.home, m.bucket_bytes)),
       neighbourhood_bytes(m.bucket_bytes), m.table.key);
}

void FarmReader::read_header(Op& op, Step step) {
  const FarmMap& m = maps_[op.worker];
  op.step = step;
  (step == Step::kHeader ? counters_.header_reads : counters_.clock_reads)++;
  post(op, nb_bytes_, m.table.at(kMovesOffset), 16, m.table.key);
}

size_t FarmReader::search(Op& op) {
  const FarmMap& m = maps_[op.worker];
  const char* copy = buf_->data() + op.buf_off;
  switch (search_neighbourhood(copy, m.bucket_bytes, op.key, op.kh.tag, &op.bucket, op.skip)) {
    case Search::kInline:
      return answer(op, op.bucket.value, op.bucket.header.version, op.bucket.header.expire_at);
    case Search::kIndirect: {
      const Pointer& p = op.bucket.pointer;
      if (nb_bytes_ + kAlign + p.record_bytes > slot_bytes_ || p.extent_offset > m.extents.length ||
          p.record_bytes > m.extents.length - p.extent_offset) {
        // A sealed bucket that cannot be right for this layout: READ again.
        if (size_t ran = retry(op, &counters_.torn_buckets)) return ran;
        read_neighbourhood(op);
        return 0;
      }
      op.step = Step::kRecord;
      counters_.record_reads++;
      post(op, nb_bytes_ + kAlign, m.extents.at(p.extent_offset), p.record_bytes, m.extents.key);
      return 0;
    }
    case Search::kTorn:
      // The worker was writing a bucket of this neighbourhood: READ it again.
      if (size_t ran = retry(op, &counters_.torn_buckets)) return ran;
      read_neighbourhood(op);
      return 0;
    case Search::kRetired:
      return restart_after_refresh(op);
    case Search::kMiss:
      read_header(op, Step::kHeader);
      return 0;
  }
  return 0;
}

size_t FarmReader::answer(Op& op, std::string_view value, uint64_t version, uint32_t expire_at) {
  if (expire_at == 0) return finish(op, Status::kOk, value, version);
  // Judged by the server's clock: READ it (the value stays where it is meanwhile).
  op.value = value;
  op.version = version;
  op.expire_at = expire_at;
  read_header(op, Step::kClock);
  return 0;
}

size_t FarmReader::finish(Op& op, Status st, std::string_view value, uint64_t version) {
  if (op.zombie || !op.busy) return 0;
  counters_.gets++;
  if (st == Status::kOk) counters_.hits++;
  in_flight_--;
  Callback cb = std::move(op.cb);
  op.cb = nullptr;
  // The value is in this op's READ buffer (the neighbourhood or the record copy), which the
  // next GET may take as soon as the op is free, also one the callback starts and waits for:
  // the callback reads a copy (as pilaf's reader, proto/pilaf/reader.cc).
  std::string nested;
  std::string& copy = depth_ == 0 ? value_ : nested;
  copy.assign(value.data(), value.size());
  if (op.pending > 0) op.zombie = true;  // keep the buffer until its READ returns
  else op.busy = false;
  depth_++;
  struct Leave {
    uint32_t& d;
    ~Leave() { d--; }
  } leave{depth_};
  if (cb) cb(st, copy, version);
  return 1;
}

// A READ showed a race: the GET goes on unless it has used up its retries (then kContended,
// as Pilaf's reader). Returns callbacks run.
size_t FarmReader::retry(Op& op, uint64_t* counter) {
  if (counter) (*counter)++;
  if (++op.retries > o_.max_retries) {
    counters_.gave_up++;
    return finish(op, Status::kContended);
  }
  return 0;
}

size_t FarmReader::restart_after_refresh(Op& op) {
  if (size_t ran = retry(op, nullptr)) return ran;
  if (!refresh()) return finish(op, Status::kServerGone);
  start(op);
  return 0;
}

bool FarmReader::refresh() {
  counters_.layout_refreshes++;
  std::vector<FarmMap> maps = maps_;
  if (!refresh_ || !refresh_(&maps) || maps.size() != maps_.size()) return false;
  for (size_t w = 0; w < maps.size(); ++w) {
    if (maps[w].bucket_bytes != maps_[w].bucket_bytes || maps[w].homes == 0) return false;
    if (maps[w].generation != maps_[w].generation) moves_[w] = ~uint64_t{0};
    maps[w].peer = maps_[w].peer;
    maps_[w] = maps[w];
  }
  return true;
}

size_t FarmReader::on_completion(fabric::Completion& c) {
  const size_t index = c.context->tag;
  if (index >= ops_.size()) return 0;
  Op& op = ops_[index];
  if (op.pending > 0) op.pending--;
  if (c.error == 0) {
    last_read_[op.worker] = Clock::now();
  } else {
    // A READ the server refused: a generation released after its grace, or the server gone.
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
  if (!op.busy || op.pending > 0) return 0;
  const size_t gets_before = counters_.gets;
  if (op.failed) {
    // Fetch the layout once and start over; a second failure ends the GET.
    op.failed = false;
    if (op.refreshed || !refresh()) return finish(op, Status::kServerGone);
    op.refreshed = true;
    start(op);
  } else {
    switch (op.step) {
      case Step::kNeighbourhood:
        search(op);
        break;
      case Step::kRecord: {
        std::string_view k, v;
        const char* rec = buf_->data() + op.buf_off + nb_bytes_ + kAlign;
        if (!check_record(op.bucket, rec, op.bucket.pointer.record_bytes, &k, &v)) {
          // The record was freed and reused under us: READ the neighbourhood again.
          if (retry(op, &counters_.torn_records) == 0) start(op);
          break;
        }
        if (k != op.key) {
          // Same tag and length, another key: the next candidate of the same copy.
          op.skip++;
          search(op);
          break;
        }
        answer(op, v, op.bucket.header.version, op.bucket.header.expire_at);
        break;
      }
      case Step::kHeader: {
        const HeaderWord w = load_header_word(buf_->data() + op.buf_off + nb_bytes_);
        if (w.state == kStateRetired) {
          restart_after_refresh(op);
          break;
        }
        if ((w.moves & 1) == 0 && w.moves == op.moves_before) return finish(op, Status::kNotFound);
        // A displacement began or ended since before our READ: the key may have moved between
        // buckets while they were copied. READ again with this value as the reference.
        if (retry(op, &counters_.reprobes) == 0) {
          moves_[op.worker] = w.moves;
          start(op);
        }
        break;
      }
      case Step::kClock: {
        const HeaderWord w = load_header_word(buf_->data() + op.buf_off + nb_bytes_);
        if (w.state == kStateRetired) {
          restart_after_refresh(op);
          break;
        }
        if (expired(op.expire_at, w.clock != 0 ? w.clock : local_seconds())) {
          counters_.expired++;
          return finish(op, Status::kNotFound);
        }
        return finish(op, Status::kOk, op.value, op.version);
      }
    }
  }
  size_t ran = counters_.gets - gets_before;
  // Still ours, nothing outstanding: a READ could not be posted.
  if (op.busy && !op.zombie && op.pending == 0)
    ran += finish(op, host_.alive() ? Status::kError : Status::kServerGone);
  return ran;
}

uint32_t FarmReader::local_seconds() const {
  return static_cast<uint32_t>(std::max<int64_t>(0, static_cast<int64_t>(std::time(nullptr))));
}

size_t FarmReader::expire(bool all, Status why) {
  size_t ran = 0;
  auto now = Clock::now();
  for (Op& op : ops_) {
    if (op.zombie && (all || now >= op.deadline + std::chrono::milliseconds(o_.timeout_ms))) {
      // Its READ never came back (an error completion that lost its context): free the op.
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

}  // namespace fabkv::farm
