#include "proto/hydradb/client.h"

#include <time.h>

#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "common/deadline.h"
#include "fabric/retry.h"
#include "proto/hydradb/handshake.h"
#include "proto/hydradb/layout.h"
#include "proto/hydradb/wire.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "proto/rpc/answer_ring.h"
#include "proto/rpc/client.h"
#include "proto/rpc/request.h"
#include "store/limits.h"

namespace fabkv::hydradb {

namespace {

char kReadMarker;  // OpContext::user of our READs

struct Counters {
  uint64_t gets = 0, cache_hits = 0, cache_misses = 0, lease_expired = 0, stale_replaced = 0,
           stale_foreign = 0, late_reads = 0, reads = 0, read_errors = 0, read_timeouts = 0,
           rpc_gets = 0, leases = 0, deferred_gets = 0;
};

// Heterogeneous lookup: find a std::string key by string_view without building one.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
};

class HydraClient final : public proto::ClientProtocol {
 public:
  HydraClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : host_(host),
        options_(o),
        rpc_(host, rpc::ClientConfig{"hydradb.requests", false}),
        clock_base_ns_(steady_ns()),
        ring_(host, rpc_, proto::Id::hydradb, &ring_bytes) {}

  ~HydraClient() override {
    read_buf_.reset();  // before the RPC client's registrations
  }

  void hello(nlohmann::json* payload) override { ring_.hello(payload); }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    const Opened r = ring_.open(w, layout);
    if (r != Opened::kReady) return r;
    const auto l = rpc::RpcClient::read_layout<HydradbLayout>(layout);
    if (l.hydradb_wire != kWireVersion || l.hydradb_layout != kLayoutVersion)
      rpc::RpcClient::bad_layout("the server speaks another hydradb wire or item layout");
    window_ = rpc_.window();
    max_value_ = rpc_.max_value();
    items_.clear();
    for (uint32_t i = 0; i < rpc_.workers(); ++i)
      items_.push_back(rpc::RpcClient::region_of(w, fmt::format("hydradb.items.{}", i)));
    copy_.reserve(trailer_offset(max_value_));
    // One READ buffer per op: room for the largest item.
    op_bytes_ = (item_bytes(store::kMaxKeySize, max_value_) + 63) & ~size_t{63};
    ops_ = std::vector<ReadOp>(size_t{window_} * rpc_.workers());
    read_buf_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), op_bytes_ * ops_.size(),
                                                           fabric::Access::kLocalOnly);
    for (size_t i = 0; i < ops_.size(); ++i) {
      ops_[i].ctx.user = &kReadMarker;
      ops_[i].ctx.tag = i;
    }
    cache_.clear();
    return r;
  }
  bool polls_memory() const override { return true; }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (r.op != proto::ClientOp::kGet) {
      drop(r.key);  // ours is about to change: never READ the old one again
      return rpc_.submit(r, std::move(cb));
    }
    if (host_.gone()) return Status::kServerGone;
    if (Status v = rpc::validate(r.key, 0, max_value_); v != Status::kOk) return v;
    counters_.gets++;
    auto it = cache_.find(r.key);
    if (it == cache_.end()) {
      counters_.cache_misses++;
      return rpc_get(r, std::move(cb));
    }
    if (now_ns() >= it->second.lease_end_ns) {
      counters_.lease_expired++;
      cache_.erase(it);
      return rpc_get(r, std::move(cb));
    }
    ReadOp* op = free_op();
    if (op == nullptr || !post_read(*op, r.key, it->second)) {
      // Every op busy (a window of cached GETs in flight), or the READ could not be posted:
      // the RPC answers it.
      return rpc_get(r, std::move(cb));
    }
    op->cb = std::move(cb);
    return Status::kOk;
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    for (fabric::Completion& c : cs) {
      if (c.context != nullptr && c.context->user == &kReadMarker) {
        ran += on_read(c);
      } else if (rpc_.owns(c.context)) {
        ran += rpc_.complete(c);
      } else if (c.context == nullptr && c.error != 0 && !c.inbound) {
        counters_.read_errors++;  // shm drops a failed READ's context; its GET times out
      }
    }
    return ran;
  }

  size_t poll() override {
    size_t ran = retries_.empty() ? 0 : send_retries();
    if (rpc_.waiting() == 0) return ran;
    rpc_.for_each_waiting([&](uint32_t w, uint32_t seq) { ran += take(w, seq); });
    return ran;
  }

  size_t expire(bool all) override {
    size_t ran = all || rpc_.in_flight() > 0 ? rpc_.expire(all) : 0;
    if (!retries_.empty()) ran += expire_retries(all);
    if (reads_in_flight_ == 0) return ran;
    const Clock::time_point now = Clock::now();
    for (ReadOp& op : ops_) {
      if (!op.busy || op.zombie || !(all || now >= op.deadline)) continue;
      op.zombie = true;  // its READ may still land in the buffer
      reads_in_flight_--;
      counters_.read_timeouts++;
      Callback cb = std::move(op.cb);
      op.cb = nullptr;
      cb(all ? Status::kServerGone : Status::kTimeout, {}, 0);
      ++ran;
    }
    return ran;
  }
  size_t in_flight() const override {
    return rpc_.in_flight() + reads_in_flight_ + retries_.size();
  }

  nlohmann::json counters() const override {
    const Counters& c = counters_;
    nlohmann::json j = {{"gets", c.gets},
                        {"cache_hits", c.cache_hits},
                        {"cache_misses", c.cache_misses},
                        {"lease_expired", c.lease_expired},
                        {"stale_replaced", c.stale_replaced},
                        {"stale_foreign", c.stale_foreign},
                        {"late_reads", c.late_reads},
                        {"reads", c.reads},
                        {"read_errors", c.read_errors},
                        {"read_timeouts", c.read_timeouts},
                        {"rpc_gets", c.rpc_gets},
                        {"leases", c.leases},
                        {"deferred_gets", c.deferred_gets},
                        {"cache_entries", static_cast<uint64_t>(cache_.size())},
                        {"hit_rate",
                         c.gets ? static_cast<double>(c.cache_hits) / static_cast<double>(c.gets)
                                : 0.0}};
    rpc_.counters(&j);
    return j;
  }

 private:
  struct Cached {
    uint32_t worker = 0;
    uint32_t value_len = 0;
    uint64_t offset = 0;
    uint64_t version = 0;
    uint64_t lease_end_ns = 0;  // on now_ns()
  };
  struct Retry {  // a GET to finish by RPC (its READ found the item stale)
    std::string key;
    Callback cb;
    Clock::time_point deadline;
    bool waited = false;  // found no free slot once (counted in deferred_gets)
  };
  struct ReadOp {
    fabric::OpContext ctx;
    Callback cb;
    std::string key;
    Cached entry;
    Clock::time_point deadline{};
    bool busy = false;    // a GET uses it (or its READ is still out: zombie)
    bool zombie = false;  // the callback ran (timeout); waiting for the READ to come back
  };

  static uint64_t steady_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
  }
  // The lease clock: this client's monotonic clock, skewed in tests (proto::ClientTestHooks).
  uint64_t now_ns() const {
    const uint64_t t = steady_ns() - clock_base_ns_;
    const double scaled = static_cast<double>(t) * options_.test.lease_clock_rate;
    return clock_base_ns_ + static_cast<uint64_t>(scaled) +
           static_cast<uint64_t>(int64_t{options_.test.clock_skew_s} * 1'000'000'000);
  }

  void drop(std::string_view key) {
    if (cache_.empty()) return;
    if (auto it = cache_.find(key); it != cache_.end()) cache_.erase(it);
  }

  ReadOp* free_op() {
    for (ReadOp& op : ops_)
      if (!op.busy) return &op;
    return nullptr;
  }

  // One READ of the cached item (survey sec. 3.1: "it exploits the READ based on the cached
  // address").
  bool post_read(ReadOp& op, std::string_view key, const Cached& e) {
    const size_t n = item_bytes(key.size(), e.value_len);
    const fabric::RemoteRegion& items = items_[e.worker];
    if (e.offset > items.length || n > items.length - e.offset || n > op_bytes_) return false;
    const size_t off = static_cast<size_t>(op.ctx.tag) * op_bytes_;
    long ret = fabric::post_with_retry(
        [&] {
          return host_.endpoint().read(read_buf_->local(off, n), rpc_.peer(e.worker),
                                       items.at(e.offset), items.key, &op.ctx);
        },
        [&] { host_.reap(); }, Deadline::after_ms(options_.timeout_ms),
        [&] { return host_.alive(); });
    if (ret != 0) return false;
    counters_.reads++;
    op.busy = true;
    op.zombie = false;
    op.key.assign(key.data(), key.size());
    op.entry = e;
    op.deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
    reads_in_flight_++;
    return true;
  }

  size_t on_read(fabric::Completion& c) {
    ReadOp& op = ops_[static_cast<size_t>(c.context->tag)];
    if (op.zombie) {
      op.busy = op.zombie = false;
      return 0;
    }
    if (!op.busy) return 0;
    reads_in_flight_--;
    std::string_view value;
    ItemRead r = ItemRead::kForeign;
    const size_t n = item_bytes(op.key.size(), op.entry.value_len);
    if (c.error != 0) {
      counters_.read_errors++;
    } else {
      r = check_item(read_buf_->data() + static_cast<size_t>(op.ctx.tag) * op_bytes_, n, op.key,
                     op.entry.version, &value);
    }
    if (r == ItemRead::kCurrent && now_ns() >= op.entry.lease_end_ns) {
      counters_.late_reads++;
      r = ItemRead::kReplaced;  // not trusted after its lease: ask again
    } else if (r == ItemRead::kCurrent) {
      counters_.cache_hits++;
      Callback cb = std::move(op.cb);
      op.cb = nullptr;
      // The value stays in this op's buffer while the callback runs: the op is freed after.
      cb(Status::kOk, value, op.entry.version);
      op.busy = false;
      return 1;
    } else if (c.error == 0) {
      (r == ItemRead::kReplaced ? counters_.stale_replaced : counters_.stale_foreign)++;
    }
    // Stale or failed: forget the address and ask the worker, from poll() (send_retries):
    // never from here. A GET submitted here would wait for a free slot inside complete(),
    // i.e. inside the session's reaping of a batch of completions; the WRITE completion that
    // frees the slot may be queued behind this one, and on tcp (requests over the inject
    // size are signaled WRITEs) that wait stalled until its deadline (docs/hydradb.md,
    // "Never wait inside complete()").
    drop(op.key);
    retries_.push_back({std::move(op.key), std::move(op.cb),
                        Clock::now() + std::chrono::milliseconds(options_.timeout_ms), false});
    op.cb = nullptr;
    op.key.clear();
    op.busy = false;
    return 0;
  }

  // The GETs whose READ found the item stale, by RPC: each as soon as its worker has a free
  // slot (submit() then waits for nothing), oldest first; the rest wait for a later poll().
  size_t send_retries() {
    if (sending_retries_) return 0;  // a post below drives progress, which polls again
    sending_retries_ = true;
    size_t ran = 0;
    for (size_t n = retries_.size(); n > 0 && !retries_.empty(); --n) {
      Retry r = std::move(retries_.front());
      retries_.pop_front();
      if (!rpc_.slot_free(rpc_.worker_of(r.key))) {
        if (!r.waited) counters_.deferred_gets++;
        r.waited = true;
        retries_.push_back(std::move(r));
        continue;
      }
      proto::ClientRequest req;
      req.op = proto::ClientOp::kGet;
      req.key = r.key;
      Callback held = r.cb;  // submit() consumes it only when it returns kOk
      const Status st = rpc_get(req, std::move(r.cb));
      if (st != Status::kOk) {
        held(st, {}, 0);
        ++ran;
      }
    }
    sending_retries_ = false;
    return ran;
  }

  size_t expire_retries(bool all) {
    size_t ran = 0;
    const Clock::time_point now = Clock::now();
    for (size_t n = retries_.size(); n > 0 && !retries_.empty(); --n) {
      Retry r = std::move(retries_.front());
      retries_.pop_front();
      if (!all && now < r.deadline) {
        retries_.push_back(std::move(r));
        continue;
      }
      r.cb(all ? Status::kServerGone : Status::kTimeout, {}, 0);
      ++ran;
    }
    return ran;
  }

  // A GET by RPC; its answer caches the item's address (learn()).
  Status rpc_get(const proto::ClientRequest& r, Callback&& cb) {
    counters_.rpc_gets++;
    Callback wrapped = [this, key = std::string(r.key), sent = now_ns(),
                        cb = std::move(cb)](Status st, std::string_view v, uint64_t version) {
      if (st == Status::kOk) learn(key, sent, v.size(), version);
      cb(st, v, version);
    };
    return rpc_.submit(r, std::move(wrapped));
  }

  // The answer take() is handing to the RPC client carried ref_ (its GET's callback runs inside
  // that call, before anything else can take another answer).
  void learn(const std::string& key, uint64_t sent_ns, size_t value_len, uint64_t version) {
    if (!ref_valid_ || ref_.offset == kNoItem || ref_.lease_us == 0) return;
    ref_valid_ = false;
    Cached e;
    e.worker = ref_worker_;
    e.value_len = static_cast<uint32_t>(value_len);
    e.offset = ref_.offset;
    e.version = version;
    // Counted from when the GET was sent: the worker read the item after that (wire.h).
    e.lease_end_ns = sent_ns + uint64_t{ref_.lease_us} * 1000u;
    if (cache_.size() >= kMaxCached) cache_.erase(cache_.begin());
    cache_.insert_or_assign(key, e);
    counters_.leases++;
  }

  // The answer to (w, seq) if it has landed whole: callbacks run (0 or 1).
  size_t take(uint32_t w, uint32_t seq) {
    char* slot = ring_.data() + ring_offset(w, window_, max_value_, seq);
    std::string nested;
    std::string& copy = depth_ == 0 ? copy_ : nested;
    if (!read_answer(slot, seq, max_value_, &copy)) return 0;
    const rpc::ResponseHeader h = rpc::load<rpc::ResponseHeader>(copy.data());
    std::memset(slot + trailer_offset(h.value_len), 0, sizeof(ResponseTrailer));
    std::memset(slot, 0, sizeof(rpc::ResponseHeader));
    if (h.worker != w) return 0;
    depth_++;
    struct Leave {
      uint32_t& d;
      bool& v;
      ~Leave() {
        d--;
        v = false;
      }
    } leave{depth_, ref_valid_};
    ref_ = rpc::load<ItemRef>(copy.data() + ref_offset(h.value_len));
    ref_worker_ = w;
    ref_valid_ = h.op == static_cast<uint8_t>(rpc::OpCode::kGet) &&
                 h.status == static_cast<uint8_t>(rpc::WireStatus::kOk);
    return rpc_.answer(h, std::string_view(copy).substr(sizeof(rpc::ResponseHeader), h.value_len));
  }

  static constexpr size_t kMaxCached = size_t{1} << 20;

  proto::ClientHost& host_;
  proto::ClientSettings options_;
  rpc::RpcClient rpc_;
  const uint64_t clock_base_ns_;
  rpc::AnswerRing ring_;  // the worker WRITEs answers here
  uint32_t window_ = 0;
  size_t max_value_ = 0;
  std::vector<fabric::RemoteRegion> items_;  // by worker
  size_t op_bytes_ = 0;
  std::vector<ReadOp> ops_;
  std::unique_ptr<fabric::RegisteredBuffer> read_buf_;
  size_t reads_in_flight_ = 0;
  std::unordered_map<std::string, Cached, KeyHash, std::equal_to<>> cache_;
  Counters counters_;
  std::deque<Retry> retries_;
  bool sending_retries_ = false;
  std::string copy_;
  uint32_t depth_ = 0;
  ItemRef ref_{};
  uint32_t ref_worker_ = 0;
  bool ref_valid_ = false;
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "write")
    throw ClientError(Status::kError,
                      "fabkv: hydradb WRITEs its requests: transport must be write, not '" +
                          options.transport + "'");
  return std::make_unique<HydraClient>(host, options);
}

}  // namespace fabkv::hydradb
