// RF-RPC's client side (RF-RPC sec. 3; the contract is proto/rfrpc/wire.h). Requests are
// WRITten into the client's slots of worker w's request region "rfrpc.requests.<w>" by the
// shared RPC client (proto/rpc/client.h, as server-reply's). The result is fetched: the client
// READs F bytes of its result slot in the worker's response region (header and payload in one
// READ) and READs again, at once, while the result is not there (RF-RPC sec. 3.2's repeated
// remote fetching); a second READ of the rest only when the header says the result is larger
// than F. Per call at best: 1 WRITE and 1 READ, and nothing for the server to post.
//
// Hybrid (RF-RPC sec. 3.2, "Discussion"), per worker: when proto/rfrpc/hybrid.h says so, the
// client flips its mode flag to server-reply, locally and by one WRITE into the worker's copy
// ("rfrpc.modes.<w>"), and from then on waits for the worker to WRITE results into its ring;
// it flips back the same way. The worker always writes its own response buffer too, so a call
// posted around a flip is found either way: every waiting call's ring slot is looked at on each
// poll, and a call in server-reply mode whose result has not come for a while is fetched by
// READ (kReplyPatienceNs).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "fabric/error.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "proto/rfrpc/client_batch.h"
#include "proto/rfrpc/handshake.h"
#include "proto/rfrpc/hybrid.h"
#include "proto/rfrpc/wire.h"
#include "proto/rpc/answer_ring.h"
#include "proto/rpc/client.h"

namespace fabkv::rfrpc {

namespace {

// A call in server-reply mode whose result has not been WRITten to us after this long (or 4x
// the last recorded processing time, if longer) is fetched by READ: the worker may have
// answered before our flag's WRITE landed. Rare; a safety net, not the path.
// 20 ms: on a loaded 2-core host a 640 us result was seen to take over 1 ms to arrive.
constexpr uint64_t kReplyPatienceNs = 20'000'000;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

class RfrpcClient final : public proto::ClientProtocol {
 public:
  explicit RfrpcClient(proto::ClientHost& host)
      : host_(host),
        rpc_(host, rpc::ClientConfig{"rfrpc.requests", false}),
        ring_(host, rpc_, proto::Id::rfrpc, &ring_bytes) {}

  void hello(nlohmann::json* payload) override { ring_.hello(payload); }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    const Opened r = ring_.open(w, layout);
    if (r != Opened::kReady) return r;
    workers_ = rpc_.workers();
    window_ = rpc_.window();
    max_value_ = rpc_.max_value();
    slot_bytes_ = result_slot_bytes(max_value_);
    const auto l = rpc::RpcClient::read_layout<RfrpcLayout>(layout);
    if (l.rfrpc_wire != kWireVersion)
      rpc::RpcClient::bad_layout(fmt::format("rfrpc wire version {} (this client speaks {})",
                                             l.rfrpc_wire, kWireVersion));
    fetch_size_ = l.fetch_size;
    retries_ = l.retries;
    const std::string& mode = l.mode;
    if (mode != "hybrid" && mode != "fetch" && mode != "reply")
      rpc::RpcClient::bad_layout("rfrpc mode " + mode);
    if (fetch_size_ < sizeof(ResultHeader) + sizeof(rpc::ResponseHeader) || retries_ == 0)
      rpc::RpcClient::bad_layout("rfrpc fetch_size or retries out of range");
    // F never reaches past a slot (a server with small values has small slots).
    fetch_size_ = static_cast<uint32_t>(std::min<size_t>(fetch_size_, slot_bytes_));
    ep_ = &host_.endpoint();
    results_.clear();
    modes_.clear();
    for (uint32_t i = 0; i < workers_; ++i) {
      results_.push_back(rpc::RpcClient::region_of(w, fmt::format("rfrpc.results.{}", i)));
      modes_.push_back(rpc::RpcClient::region_of(w, fmt::format("rfrpc.modes.{}", i)));
      if (result_offset(rpc_.client(), window_, max_value_, window_) + slot_bytes_ >
              results_.back().length ||
          (size_t{rpc_.client()} + 1) * sizeof(ModeFlag) > modes_.back().length)
        rpc::RpcClient::bad_layout(
            fmt::format("rfrpc regions of worker {} have no room for "
                        "client {}",
                        i, rpc_.client()));
    }
    fetch_buf_ = std::make_unique<fabric::RegisteredBuffer>(
        host_.fabric(), size_t{workers_} * window_ * slot_bytes_, fabric::Access::kLocalOnly);
    mode_buf_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(),
                                                           size_t{workers_} * sizeof(ModeFlag),
                                                           fabric::Access::kLocalOnly);
    fetches_ = std::vector<Fetch>(size_t{workers_} * window_);
    for (size_t i = 0; i < fetches_.size(); ++i) {
      fetches_[i].ctx.user = &kFetchMarker;
      fetches_[i].ctx.tag = i;
    }
    // The worker starts each client in the mode it was told (its flag is set at admission).
    paths_.clear();
    for (uint32_t i = 0; i < workers_; ++i)
      paths_.emplace_back(retries_, mode == "hybrid", mode == "reply" ? kModeReply : kModeFetch);
    dirty_.assign(workers_, false);
    last_proc_.assign(workers_, 0);
    copy_.reserve(result_bytes(max_value_));  // the copy never allocates
    batcher_.reset();
    Batcher::Config bc;
    bc.entries = l.batch_entries;
    bc.bytes = l.batch_bytes;
    bc.timeout_us = l.batch_timeout_us;
    bc.llimit_us = l.batch_llimit_us;
    bc.alpha_pct = l.batch_alpha_pct;
    if (bc.entries > 0) {
      if (bc.entries > 0xffff || bc.bytes < 256 || bc.bytes % 8 != 0 || bc.timeout_us == 0 ||
          bc.alpha_pct == 0)
        rpc::RpcClient::bad_layout("rfrpc batch settings out of range");
      batcher_ = std::make_unique<Batcher>(host_, rpc_, bc, w);
    }
    return r;
  }
  bool polls_memory() const override { return true; }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (batcher_ && batcher_->takes(r)) return batcher_->submit(r, std::move(cb));
    const Status st = rpc_.submit(r, std::move(cb));
    // Whether the call waits for the ring is decided now, right after its request was posted:
    // the worker WRITEs it to us only if our flag's WRITE went before the request's (a flag
    // still to be posted, or posted later by poll(), was not seen).
    if (st == Status::kOk) rpc_.for_each_waiting([&](uint32_t w, uint32_t seq) { begin(w, seq); });
    return st;
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    for (fabric::Completion& c : cs) {
      if (c.context == nullptr) {
        // Our posts all carry a context; shm drops it (and the flags) from a failed READ: we
        // cannot tell which fetch failed, so every READ in flight is posted again.
        if (c.error != 0 && !c.inbound) orphan_error();
      } else if (c.context->user == &kFetchMarker) {
        ran += on_fetch(c);
      } else if (batcher_ && batcher_->owns(c.context)) {
        ran += batcher_->complete(c);
      } else if (rpc_.owns(c.context)) {
        ran += rpc_.complete(c);
      }
    }
    return ran;
  }

  size_t poll() override {
    if (modes_dirty_) flush_modes();
    size_t ran = batcher_ ? batcher_->poll() : 0;
    if (rpc_.waiting() == 0) return ran;
    rpc_.for_each_waiting([&](uint32_t w, uint32_t seq) { ran += step(w, seq); });
    return ran;
  }
  size_t expire(bool all) override {
    size_t ran = batcher_ ? batcher_->expire(all) : 0;
    return ran + (all || rpc_.in_flight() > 0 ? rpc_.expire(all) : 0);
  }
  size_t in_flight() const override {
    return rpc_.in_flight() + (batcher_ ? batcher_->in_flight() : 0);
  }

  nlohmann::json counters() const override {
    const Counters& k = counters_;
    uint32_t in_reply = 0;
    for (const HybridSwitch& p : paths_) in_reply += p.mode() == kModeReply;
    nlohmann::json j = {
        {"calls", k.calls},
        {"fetch_reads", k.reads},
        {"failed_fetches", k.failed},
        {"second_reads", k.second_reads},
        {"torn_fetches", k.torn},
        {"bad_results", k.bad},
        {"ring_results", k.ring},
        {"switches_to_reply", k.to_reply},
        {"switches_to_fetch", k.to_fetch},
        {"patience_reads", k.patience},
        {"fetch_errors", k.errors},
        {"workers_in_reply_mode", in_reply},
        // Gauges, as doubles (summing tools add up only the unsigned counters above).
        {"fetch_rtt_us", paths_.empty() ? 0.0 : double(paths_[0].fetch_rtt_ns()) / 1000.0},
        // Quick results in a row the next switch back to fetching needs (worker 0; hybrid.h's
        // hysteresis doubles it after each short stay).
        {"calm_needed", paths_.empty() ? 0.0 : double(paths_[0].calm_needed())},
        {"last_proc_us",
         last_proc_.empty() ? 0.0 : double(decode_proc_time(last_proc_[0])) / 1000.0}};
    rpc_.counters(&j);
    if (batcher_) batcher_->counters(&j);
    return j;
  }

 private:
  static inline char kFetchMarker, kModeMarker;  // OpContext::user of our posts

  // One per (worker, request slot): the fetch of the call in that slot.
  struct Fetch {
    fabric::OpContext ctx;
    uint32_t seq = 0;         // the call being fetched (0: none yet)
    uint32_t read_seq = 0;    // the call the READ in flight was posted for
    bool reading = false;     // a READ is in flight (into this slot's fetch buffer)
    bool done = false;        // the call's result was taken
    bool reply_wait = false;  // started in server-reply mode: wait for the ring first
    uint32_t fails = 0;       // fetches that found the result not ready
    size_t have = 0;          // bytes of the slot fetched so far
    size_t read_end = 0;      // where the READ in flight ends
    uint64_t started_ns = 0, posted_ns = 0;
  };
  struct Counters {
    uint64_t calls = 0, reads = 0, failed = 0, second_reads = 0, torn = 0, bad = 0, ring = 0,
             to_reply = 0, to_fetch = 0, patience = 0, errors = 0;
  };

  // A call (w, seq) seen for the first time: a new fetch in its slot (a READ of the slot's
  // previous call may still be in flight: it is ignored when it completes, and the next READ
  // waits for it). Called right after submit (so the flag's state is what the worker will see),
  // or by step() for a call posted otherwise, which then fetches.
  Fetch& begin(uint32_t w, uint32_t seq, bool at_submit = true) {
    Fetch& f = fetches_[size_t{w} * window_ + rpc::seq_slot(seq, window_)];
    if (f.seq == seq) return f;
    f.seq = seq;
    f.done = false;
    f.fails = 0;
    f.have = 0;
    f.started_ns = now_ns();
    f.reply_wait = at_submit && paths_[w].mode() == kModeReply && !dirty_[w];
    return f;
  }

  size_t step(uint32_t w, uint32_t seq) {
    const size_t i = size_t{w} * window_ + rpc::seq_slot(seq, window_);
    Fetch& f = begin(w, seq, false);
    if (f.done) return 0;
    const char* slot = ring_.data() + ring_offset(w, window_, max_value_, seq);
    // The ring first: one load unless the worker WRITEs results to us (server-reply mode).
    if (std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(slot)))
            .load(std::memory_order_acquire) == seq) {
      size_t total = 0;
      const ResultRead r = read_result(slot, slot_bytes_, seq, max_value_, &copy_for_take(),
                                       &total);
      if (r == ResultRead::kWhole) return take(w, f, true);
      // Still landing, or garbage: the result is in the worker's buffer as well.
    }
    if (f.reading) return 0;
    if (f.reply_wait) {
      const uint64_t patience = std::max<uint64_t>(kReplyPatienceNs,
                                                   4 * decode_proc_time(last_proc_[w]));
      if (now_ns() - f.started_ns < patience) return 0;
      f.reply_wait = false;
      counters_.patience++;
    }
    post_fetch(i, 0, fetch_size_);
    return 0;
  }

  // READs [off, off + len) of fetch i's result slot into its fetch buffer.
  void post_fetch(size_t i, size_t off, size_t len) {
    Fetch& f = fetches_[i];
    const uint32_t w = static_cast<uint32_t>(i / window_);
    fabric::LocalBuffer dst = fetch_buf_->local(i * slot_bytes_ + off, len);
    const uint64_t raddr = results_[w].at(result_offset(rpc_.client(), window_, max_value_, f.seq) +
                                          off);
    const long ret = ep_->read(dst, rpc_.peer(w), raddr, results_[w].key, &f.ctx);
    if (ret != 0) {
      // Full queue (kAgain) or an error: the next poll() starts this fetch again.
      if (ret != fabric::kAgain) counters_.errors++;
      f.have = 0;
      return;
    }
    counters_.reads++;
    f.reading = true;
    f.read_seq = f.seq;
    f.read_end = off + len;
    f.posted_ns = now_ns();
  }

  size_t on_fetch(fabric::Completion& c) {
    const size_t i = c.context->tag;
    if (i >= fetches_.size()) return 0;
    Fetch& f = fetches_[i];
    f.reading = false;
    if (c.error != 0) {
      counters_.errors++;
      f.have = 0;
      host_.alive(true);
      return 0;  // poll() fetches again (or expiry ends the call)
    }
    if (f.read_seq != f.seq || f.done) return 0;  // a READ for an earlier call
    const uint32_t w = static_cast<uint32_t>(i / window_);
    if (f.read_end == fetch_size_) paths_[w].on_fetch(now_ns() - f.posted_ns);
    f.have = f.read_end;
    const char* buf = fetch_buf_->data() + i * slot_bytes_;
    size_t total = 0;
    switch (read_result(buf, f.have, f.seq, max_value_, &copy_for_take(), &total)) {
      case ResultRead::kWhole: return take(w, f, false);
      case ResultRead::kNeedMore:
        // RF-RPC sec. 3.2: the result is larger than F; one more READ for the rest.
        counters_.second_reads++;
        post_fetch(i, f.have, total - f.have);
        return 0;
      case ResultRead::kNotReady:
        counters_.failed++;
        f.fails++;
        break;
      case ResultRead::kBadSize:
        counters_.bad++;
        f.fails++;
        break;
      case ResultRead::kTorn:
        // The worker was writing the slot while we READ it (or a second READ found a result
        // other than the first READ's header promised): start over.
        counters_.torn++;
        f.fails++;
        break;
    }
    f.have = 0;
    post_fetch(i, 0, fetch_size_);  // repeated remote fetching: no pause (RF-RPC sec. 3.2)
    return 0;
  }

  // A nested take (a callback that posts and polls) copies into its own string.
  std::string& copy_for_take() { return depth_ == 0 ? copy_ : nested_copy_; }

  // copy_for_take() holds a checked result of f.seq: hand it to the RPC client.
  size_t take(uint32_t w, Fetch& f, bool from_ring) {
    std::string copy = std::move(copy_for_take());
    copy_for_take().clear();
    ResultHeader h;
    std::memcpy(&h, copy.data(), sizeof(h));
    const rpc::ResponseHeader r = rpc::load<rpc::ResponseHeader>(copy.data() + sizeof(h));
    if (r.worker != w || r.client != rpc_.client() || r.epoch != rpc_.epoch()) {
      // Not ours (a predecessor of our index, or garbage that passed the check): keep waiting.
      counters_.bad++;
      restore(std::move(copy));
      return 0;
    }
    if (from_ring) {
      counters_.ring++;
      // Cleared: the slot's next result (seq + W) can never be confused with this one anyway,
      // but a cleared status costs the next poll one load.
      std::atomic_ref<uint32_t>(
          *reinterpret_cast<uint32_t*>(ring_.data() + ring_offset(w, window_, max_value_, f.seq)))
          .store(0, std::memory_order_relaxed);
    }
    f.done = true;
    counters_.calls++;
    note(w, f, h.proc_time, from_ring);
    depth_++;
    struct Leave {
      uint32_t& d;
      ~Leave() { d--; }
    } leave{depth_};
    const size_t ran =
        rpc_.answer(r, std::string_view(copy).substr(sizeof(h) + sizeof(rpc::ResponseHeader)));
    restore(std::move(copy));
    return ran;
  }
  // Gives the outer string its capacity back (copy_ then never allocates again).
  void restore(std::string&& s) {
    if (depth_ == 0) copy_ = std::move(s);
  }

  // RF-RPC sec. 3.2's switch, per worker (proto/rfrpc/hybrid.h).
  void note(uint32_t w, const Fetch& f, uint16_t proc, bool from_ring) {
    last_proc_[w] = proc;
    const std::optional<uint8_t> flip = paths_[w].on_result(f.fails, now_ns() - f.started_ns,
                                                            decode_proc_time(proc), from_ring);
    if (!flip) return;
    set_mode(w, *flip);
    if (*flip == kModeReply) counters_.to_reply++;
    else counters_.to_fetch++;
  }

  // The flag, locally and by one WRITE into the worker's copy (flush_modes).
  void set_mode(uint32_t w, uint8_t mode) {
    ModeFlag fl{};
    fl.mode = mode;
    std::memcpy(mode_buf_->data() + size_t{w} * sizeof(ModeFlag), &fl, sizeof(fl));
    dirty_[w] = true;
    modes_dirty_ = true;
    flush_modes();
  }
  // Posts the flags not yet WRITten; a refused post is tried again on the next poll(). Inlined
  // and unsignaled where the provider injects 8 bytes (it does on shm and tcp).
  void flush_modes() {
    modes_dirty_ = false;
    for (uint32_t w = 0; w < workers_; ++w) {
      if (!dirty_[w]) continue;
      fabric::PostOptions po;
      po.inlined = sizeof(ModeFlag) <= ep_->inject_size();
      po.signaled = !po.inlined;
      const long ret = ep_->write(mode_buf_->local(size_t{w} * sizeof(ModeFlag), sizeof(ModeFlag)),
                                  rpc_.peer(w),
                                  modes_[w].at(size_t{rpc_.client()} * sizeof(ModeFlag)),
                                  modes_[w].key, po.signaled ? &mode_ctx_ : nullptr, po);
      if (ret == 0) {
        dirty_[w] = false;
      } else {
        if (ret != fabric::kAgain) counters_.errors++;
        modes_dirty_ = true;
      }
    }
  }

  static fabric::OpContext mode_context() {
    fabric::OpContext c;
    c.user = &kModeMarker;
    return c;
  }

  void orphan_error() {
    counters_.errors++;
    for (Fetch& f : fetches_) {
      f.reading = false;
      f.have = 0;
    }
  }

  proto::ClientHost& host_;
  rpc::RpcClient rpc_;
  fabric::Endpoint* ep_ = nullptr;
  rpc::AnswerRing ring_;                                 // the worker WRITEs answers here
  std::unique_ptr<fabric::RegisteredBuffer> fetch_buf_;  // READs land here, a slot per fetch
  std::unique_ptr<fabric::RegisteredBuffer> mode_buf_;   // the flags we WRITE
  std::vector<fabric::RemoteRegion> results_, modes_;    // by worker
  std::vector<Fetch> fetches_;
  std::vector<HybridSwitch> paths_;  // by worker
  std::vector<uint16_t> last_proc_;  // by worker: the last result's processing time
  std::vector<bool> dirty_;
  bool modes_dirty_ = false;
  fabric::OpContext mode_ctx_ = mode_context();
  uint32_t workers_ = 0, window_ = 0, fetch_size_ = 0, retries_ = 0;
  size_t max_value_ = 0, slot_bytes_ = 0;
  std::string copy_, nested_copy_;
  uint32_t depth_ = 0;
  Counters counters_;
  std::unique_ptr<Batcher> batcher_;  // RF-RPC sec. 4, when the server batches
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "write")
    throw ClientError(Status::kError,
                      "fabkv: rfrpc WRITEs its requests: transport must be write, not '" +
                          options.transport + "'");
  return std::make_unique<RfrpcClient>(host);
}

}  // namespace fabkv::rfrpc
