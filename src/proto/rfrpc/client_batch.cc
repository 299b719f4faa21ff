#include "proto/rfrpc/client_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/deadline.h"
#include "fabric/error.h"
#include "fabric/retry.h"
#include "proto/rfrpc/wire.h"
#include "proto/rpc/request.h"

namespace fabkv::rfrpc {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// Eq. 3 looks at the latencies of this many calls before each step.
constexpr uint64_t kTuneSample = 100;

}  // namespace

Batcher::Batcher(proto::ClientHost& host, rpc::RpcClient& rpc, const Config& config,
                 const control::Welcome& welcome)
    : host_(host), rpc_(rpc), config_(config) {
  ep_ = &host_.endpoint();
  workers_ = rpc_.workers();
  slots_ = rpc_.window();
  max_value_ = rpc_.max_value();
  timeout_ms_ = host_.settings().timeout_ms;
  bslot_ = batch_slot_bytes(config_.bytes);
  rslot_ = batch_slot_bytes(result_batch_payload(config_.bytes));
  for (uint32_t w = 0; w < workers_; ++w) {
    batches_.push_back(rpc::RpcClient::region_of(welcome, fmt::format("rfrpc.batches.{}", w)));
    bresults_.push_back(rpc::RpcClient::region_of(welcome, fmt::format("rfrpc.bresults.{}", w)));
    if (batch_offset(rpc_.client() + 1, slots_, 0, bslot_) > batches_.back().length ||
        batch_offset(rpc_.client() + 1, slots_, 0, rslot_) > bresults_.back().length)
      rpc::RpcClient::bad_layout(
          fmt::format("rfrpc batch regions of worker {} have no room "
                      "for client {}",
                      w, rpc_.client()));
  }
  tx_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(),
                                                   size_t{workers_} * slots_ * bslot_,
                                                   fabric::Access::kLocalOnly);
  rx_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(),
                                                   size_t{workers_} * slots_ * rslot_,
                                                   fabric::Access::kLocalOnly);
  workers_state_ = std::vector<WorkerState>(workers_);
  for (uint32_t w = 0; w < workers_; ++w) {
    workers_state_[w].flights = std::vector<Flight>(slots_);
    for (uint32_t b = 0; b < slots_; ++b) {
      Flight& f = workers_state_[w].flights[b];
      f.tx_ctx.user = &kTxMarker;
      f.rx_ctx.user = &kRxMarker;
      f.rx_ctx.tag = uint64_t{w} * slots_ + b;
    }
  }
  size_ = config_.llimit_us > 0 ? 1 : config_.entries;  // eq. 3 starts small and grows
  // TEST ONLY (ClientTestHooks::first_seq): batch and entry numbers start there too.
  if (const uint32_t first = rpc::first_seq(host_.settings().test.first_seq, 1); first > 1) {
    for (WorkerState& ws : workers_state_) {
      ws.entry_seq = first - 1;
      for (Flight& f : ws.flights) f.seq = first - 1;
    }
  }
}

Batcher::~Batcher() = default;

char* Batcher::tx_slot(uint32_t w, uint32_t b) const {
  return tx_->data() + (size_t{w} * slots_ + b) * bslot_;
}
char* Batcher::rx_slot(uint32_t w, uint32_t b) const {
  return rx_->data() + (size_t{w} * slots_ + b) * rslot_;
}

bool Batcher::takes(const proto::ClientRequest& r) const {
  return entry_bytes(rpc::request_bytes(r.key.size() + r.value.size())) <= config_.bytes;
}

Status Batcher::submit(const proto::ClientRequest& r, Callback&& cb) {
  if (host_.gone()) return Status::kServerGone;
  Status v = rpc::validate(r.key, r.value.size(), max_value_);
  if (v != Status::kOk) return v;
  const uint32_t w = rpc_.worker_of(r.key);
  WorkerState& ws = workers_state_[w];
  const size_t req = rpc::request_bytes(r.key.size() + r.value.size());
  const size_t e = entry_bytes(req);
  if (ws.open.payload.size() + e > config_.bytes) {
    send(w);  // L reached
    // Still full: a callback submitting while this worker's batch is being sent. Alone, then.
    if (ws.open.payload.size() + e > config_.bytes) return rpc_.submit(r, std::move(cb));
  }
  Open& o = ws.open;
  if (o.entries.empty()) o.opened_ns = now_ns();
  const size_t at = o.payload.size();
  o.payload.resize(at + e, '\0');
  const uint32_t size = static_cast<uint32_t>(req);
  std::memcpy(o.payload.data() + at, &size, sizeof(size));
  rpc::RequestFields f;
  // An entry's seq names no slot (its result comes back in the batch's): any cycle does.
  if (rpc::next_seq(ws.entry_seq, 1) < ws.entry_seq) counters_.seq_wraps++;
  ws.entry_seq = rpc::next_seq(ws.entry_seq, 1);
  f.seq = ws.entry_seq;
  f.client = rpc_.client();
  f.epoch = rpc_.epoch();
  f.op = rpc::to_opcode(r.op);
  f.expire_at = r.expire_at;
  f.expected_version = r.expected_version;
  rpc::encode_inline(o.payload.data() + at + sizeof(uint32_t), f, r.key, r.value);
  o.entries.push_back({std::move(cb), now_ns()});
  if (o.entries.size() >= size_) send(w);  // N reached
  return Status::kOk;
}

// Runs every callback of `entries` with `st` (each exactly once).
size_t Batcher::fail(std::vector<Entry>& entries, Status st) {
  std::vector<Entry> es = std::move(entries);
  entries.clear();
  for (Entry& e : es)
    if (e.cb) e.cb(st, {}, 0);
  return es.size();
}

size_t Batcher::send(uint32_t w) {
  WorkerState& ws = workers_state_[w];
  if (ws.open.entries.empty() || ws.sending) return 0;
  ws.sending = true;
  struct Done {
    bool& s;
    ~Done() { s = false; }
  } done{ws.sending};
  // A free batch slot (its previous batch's results taken). With fewer than W of our calls in
  // flight to this worker there is one; else (W calls in flight, or slots held by batches that
  // timed out) wait, bounded, polling.
  const Deadline d = Deadline::after_ms(timeout_ms_);
  uint32_t b = slots_;
  while (true) {
    for (uint32_t i = 0; i < slots_ && b == slots_; ++i)
      if (!ws.flights[(ws.next_b + i) % slots_].busy) b = (ws.next_b + i) % slots_;
    if (b != slots_) break;
    host_.drive();
    if (!host_.alive() || d.expired()) {
      Open o = std::move(ws.open);
      ws.open = Open{};
      return fail(o.entries, host_.gone() ? Status::kServerGone : Status::kTimeout);
    }
  }
  ws.next_b = (b + 1) % slots_;
  Flight& f = ws.flights[b];
  f.busy = true;
  f.dead = false;
  const uint32_t prev_seq = f.seq;
  // A batch number names no slot either (b does; the worker takes any number but the last).
  if (rpc::next_seq(f.seq, 1) < f.seq) counters_.seq_wraps++;
  f.seq = rpc::next_seq(f.seq, 1);
  f.entries = std::move(ws.open.entries);
  f.payload = std::move(ws.open.payload);
  ws.open = Open{};
  f.reading = false;
  f.have = 0;
  f.fails = 0;
  // Before the post: a post retried drives the session, whose expiry looks at this flight.
  f.deadline_ns = now_ns() + uint64_t(timeout_ms_) * 1'000'000;
  // Header, payload, tail (RF-RPC sec. 4.1: status bits at both ends).
  char* out = tx_slot(w, b);
  BatchHeader h{};
  h.status_size = static_cast<uint32_t>(f.payload.size()) | kStatusBit;
  h.aux = static_cast<uint16_t>(size_);
  h.entries = static_cast<uint16_t>(f.entries.size());
  h.seq = f.seq;
  h.check = batch_check(h, f.payload.data(), f.payload.size());
  std::memcpy(out, &h, sizeof(h));
  std::memcpy(out + sizeof(h), f.payload.data(), f.payload.size());
  const BatchTail tail{f.seq | kStatusBit};
  std::memcpy(out + sizeof(h) + f.payload.size(), &tail, sizeof(tail));
  const size_t len = sizeof(h) + f.payload.size() + sizeof(tail);
  fabric::PostOptions po;
  po.inlined = len <= ep_->inject_size();
  po.signaled = !po.inlined;
  const uint64_t raddr = batches_[w].at(batch_offset(rpc_.client(), slots_, b, bslot_));
  // Our tx slot is rewritten only once this batch's results are in, after the worker read it.
  // No READs of this worker's results while the WRITE is refused: on shm each READ takes a
  // place in the worker's command queue, and READs posted between the retries kept it full
  // (the WRITE starved until the deadline).
  ws.posting = true;
  const long ret = fabric::post_with_retry(
      [&] {
        return ep_->write(tx_->local((size_t{w} * slots_ + b) * bslot_, len), rpc_.peer(w), raddr,
                          batches_[w].key, po.signaled ? &f.tx_ctx : nullptr, po);
      },
      [&] { host_.drive(); }, d, [&] { return host_.alive(); });
  ws.posting = false;
  if (ret != 0) {
    // Never sent: the slot's number goes back (the worker never saw it).
    f.seq = prev_seq;
    f.busy = false;
    return fail(f.entries, host_.gone() ? Status::kServerGone : Status::kError);
  }
  counters_.batches++;
  counters_.batched += f.entries.size();
  post_read(w, b, 0, 0);
  return 0;
}

// READs [off, off + len) of result slot (w, b); len 0: the first READ, sized for the batch's
// entries with small values.
void Batcher::post_read(uint32_t w, uint32_t b, size_t off, size_t len) {
  Flight& f = workers_state_[w].flights[b];
  if (len == 0)
    len = std::min(rslot_, sizeof(BatchHeader) +
                               f.entries.size() * entry_bytes(sizeof(rpc::ResponseHeader) + 40));
  const long ret = ep_->read(rx_->local((size_t{w} * slots_ + b) * rslot_ + off, len), rpc_.peer(w),
                             bresults_[w].at(batch_offset(rpc_.client(), slots_, b, rslot_) + off),
                             bresults_[w].key, &f.rx_ctx);
  if (ret != 0) {
    if (ret != fabric::kAgain) counters_.errors++;
    f.have = 0;
    return;  // poll() tries again
  }
  counters_.reads++;
  f.reading = true;
  f.read_seq = f.seq;
  f.read_end = off + len;
}

size_t Batcher::complete(fabric::Completion& c) {
  if (c.context->user == &kTxMarker) return 0;
  const uint64_t i = c.context->tag;
  const uint32_t w = static_cast<uint32_t>(i / slots_), b = static_cast<uint32_t>(i % slots_);
  if (w >= workers_) return 0;
  Flight& f = workers_state_[w].flights[b];
  f.reading = false;
  if (c.error != 0) {
    counters_.errors++;
    f.have = 0;
    host_.alive(true);
    return 0;
  }
  if (!f.busy || f.read_seq != f.seq) return 0;
  f.have = f.read_end;
  size_t total = 0;
  switch (read_batch(rx_slot(w, b), f.have, f.seq, rslot_ - sizeof(BatchHeader) - 8, false, &copy_,
                     &total)) {
    case BatchRead::kWhole: return deliver(w, b);
    case BatchRead::kNeedMore:
      counters_.second_reads++;
      post_read(w, b, f.have, total - f.have);
      return 0;
    case BatchRead::kEmpty: counters_.failed++; break;
    case BatchRead::kLanding:
    case BatchRead::kBadSize: counters_.torn++; break;
  }
  f.fails++;
  f.have = 0;
  // Repeated remote fetching, as for single results (poll() does it while a WRITE is retried).
  if (!workers_state_[w].posting) post_read(w, b, 0, 0);
  return 0;
}

// copy_ holds the checked result batch of flight (w, b): every entry's callback runs, in order.
size_t Batcher::deliver(uint32_t w, uint32_t b) {
  Flight& f = workers_state_[w].flights[b];
  std::string batch = std::move(copy_);
  copy_.clear();
  std::vector<Entry> entries = std::move(f.entries);
  std::string payload = std::move(f.payload);
  const bool dead = f.dead;
  f.entries.clear();
  f.busy = false;  // callbacks may send the next batch into this slot
  f.dead = false;
  if (dead) return 0;  // its callbacks ran at the timeout
  BatchHeader h;
  std::memcpy(&h, batch.data(), sizeof(h));
  const char* results = batch.data() + sizeof(h);
  const size_t n = h.status_size & ~kStatusBit;
  struct Item {
    uint32_t size;
    const char* at;
  };
  std::vector<Item> items;
  const bool ok = h.entries == entries.size() &&
                  for_each_entry(results, n, h.entries, [&](const char* e, uint32_t size) {
                    items.push_back({size, e});
                  });
  if (!ok) {
    // The worker could not parse the batch (garbage, or an answer with no entries).
    counters_.bad++;
    return fail(entries, Status::kMalformed);
  }
  // The request entries, to send an overflowed one again alone.
  std::vector<const char*> requests;
  for_each_entry(payload.data(), payload.size(), static_cast<uint32_t>(entries.size()),
                 [&](const char* e, uint32_t) { requests.push_back(e); });
  const uint64_t now = now_ns();
  size_t ran = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    if (items[i].size == kEntryOverflow) {
      // RF-RPC sec. 4.1 splits large results over several result batches; we ask again alone.
      counters_.overflows++;
      const rpc::RequestHeader q = rpc::load<rpc::RequestHeader>(requests[i]);
      proto::ClientRequest r;
      r.op = q.op == static_cast<uint8_t>(rpc::OpCode::kGet)   ? proto::ClientOp::kGet
             : q.op == static_cast<uint8_t>(rpc::OpCode::kPut) ? proto::ClientOp::kPut
                                                               : proto::ClientOp::kDel;
      r.key = std::string_view(requests[i] + sizeof(q), q.key_len);
      r.value = std::string_view(requests[i] + sizeof(q) + q.key_len, q.value_len);
      r.expected_version = q.expected_version;
      r.expire_at = q.expire_at;
      // A copy: a submit that fails may have consumed the one it was given.
      Callback keep = e.cb;
      const Status st = rpc_.submit(r, std::move(e.cb));
      if (st != Status::kOk && keep) {
        keep(st, {}, 0);
        ran++;
      }
      continue;
    }
    const rpc::ResponseHeader r = rpc::load<rpc::ResponseHeader>(items[i].at);
    observe(now - e.t0_ns);
    Callback cb = std::move(e.cb);
    ran++;
    if (r.client != rpc_.client() || r.epoch != rpc_.epoch() ||
        sizeof(r) + size_t{r.value_len} != items[i].size) {
      counters_.bad++;
      if (cb) cb(Status::kMalformed, {}, 0);
      continue;
    }
    if (cb)
      cb(rpc::from_wire(r.status), std::string_view(items[i].at + sizeof(r), r.value_len),
         r.version);
  }
  return ran;
}

// RF-RPC eq. 3: s - 1 when more than alpha of the sample took longer than llimit, s + 1 when
// fewer than alpha / 10 did.
void Batcher::observe(uint64_t latency_ns) {
  if (config_.llimit_us == 0) return;
  seen_++;
  if (latency_ns > uint64_t{config_.llimit_us} * 1000) over_++;
  if (seen_ < kTuneSample) return;
  const double k = double(over_) / double(seen_), alpha = config_.alpha_pct / 100.0;
  const uint32_t before = size_;
  if (k > alpha && size_ > 1) size_--;
  else if (k < 0.1 * alpha && size_ < config_.entries) size_++;
  counters_.resized += size_ != before;
  seen_ = over_ = 0;
}

size_t Batcher::poll() {
  size_t ran = 0;
  const uint64_t now = now_ns();
  for (uint32_t w = 0; w < workers_; ++w) {
    WorkerState& ws = workers_state_[w];
    if (!ws.open.entries.empty() && !ws.sending &&
        now - ws.open.opened_ns >= uint64_t{config_.timeout_us} * 1000) {
      counters_.timeouts_sent++;  // T passed before N or L
      ran += send(w);
    }
    for (uint32_t b = 0; b < slots_; ++b) {
      Flight& f = ws.flights[b];
      if (f.busy && f.dead && !f.reading && now >= f.deadline_ns) {
        // Given up on twice: its results are not coming, the slot takes the next batch (the
        // worker takes that one whatever it did with this one, server.cc). Here, not only in
        // expire(): the session expires only while calls are in flight, and this one's calls
        // are not counted any more.
        f.busy = f.dead = false;
        continue;
      }
      if (f.busy && !f.reading && !ws.posting) post_read(w, b, 0, 0);
    }
  }
  return ran;
}

size_t Batcher::expire(bool all) {
  size_t ran = 0;
  const uint64_t now = now_ns();
  for (WorkerState& ws : workers_state_) {
    if (all && !ws.open.entries.empty()) {
      ran += fail(ws.open.entries, Status::kServerGone);
      ws.open = Open{};
    }
    for (Flight& f : ws.flights) {
      if (!f.busy) continue;
      if (all) {
        ran += fail(f.entries, Status::kServerGone);
        f.busy = f.dead = f.reading = false;
      } else if (now >= f.deadline_ns) {
        if (f.dead) {
          // A second timeout: its results are not coming (once its READ is back: the READ's
          // context is the slot's).
          if (!f.reading) f.busy = f.dead = false;
        } else {
          ran += fail(f.entries, Status::kTimeout);
          f.dead = true;  // the slot waits for its late results (or another timeout)
          f.deadline_ns = now + uint64_t(timeout_ms_) * 1'000'000;
        }
      }
    }
  }
  return ran;
}

size_t Batcher::in_flight() const {
  size_t n = 0;
  for (const WorkerState& ws : workers_state_) {
    n += ws.open.entries.size();
    for (const Flight& f : ws.flights)
      if (f.busy && !f.dead) n += f.entries.size();
  }
  return n;
}

void Batcher::counters(nlohmann::json* out) const {
  const Counters& k = counters_;
  (*out)["request_batches"] = k.batches;
  (*out)["batched_calls"] = k.batched;
  (*out)["batch_reads"] = k.reads;
  (*out)["batch_failed_fetches"] = k.failed;
  (*out)["batch_second_reads"] = k.second_reads;
  (*out)["batch_torn_fetches"] = k.torn;
  (*out)["batch_overflows"] = k.overflows;
  (*out)["bad_batches"] = k.bad;
  (*out)["batches_sent_by_timeout"] = k.timeouts_sent;
  (*out)["batch_resizes"] = k.resized;
  (*out)["batch_errors"] = k.errors;
  (*out)["batch_seq_wraps"] = k.seq_wraps;  // batch numbers and entry numbers back to 1
  (*out)["batch_size"] = double(size_);     // a gauge (a double: summing tools skip it)
}

}  // namespace fabkv::rfrpc
