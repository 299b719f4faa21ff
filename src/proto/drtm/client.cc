// DrTM-KV's client side (survey sec. 3.5; Guidelines sec. 4.3.2): GETs and PUTs of existing
// keys by one-sided operations on the worker's memory (proto/drtm/wire.h), without its CPU on
// a NIC:
//   GET, location cached     1 READ of the item, judged by its lock word and record check
//   GET, not cached          READ the key's bucket (and its overflow chain), READ the item its
//                            tag names; the location is cached (DrTM caches the index)
//   PUT of an existing key   CAS the lock word (version v -> locked), WRITE the other record
//                            (version v+1), CAS the lock word (locked -> v+1): 2 atomics and 1
//                            WRITE when the location and version are cached
// and by RPC message (proto/rpc/client.h, SEND both ways) what needs the worker: a PUT of a new
// key (the worker allocates the item), of a value the item cannot hold, or of an item whose
// lock stayed held past kLockLease (its holder died or stalled: the worker replaces the item),
// or of a PUT whose own lock was held too long to WRITE (kHoldMargin); DELETE; and a GET of an
// item with an expiry (judged by the worker's clock).
//
// Each op is a small state machine driven by its completions; up to W x workers are in flight.
// Owner thread only.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/deadline.h"
#include "fabric/memory_region.h"
#include "fabric/retry.h"
#include "proto/client_protocol.h"
#include "proto/drtm/handshake.h"
#include "proto/drtm/wire.h"
#include "proto/registry.h"
#include "proto/rpc/client.h"
#include "store/limits.h"

namespace fabkv::drtm {

namespace {

char kDrtmMarker;  // OpContext::user of our posts

// Torn READs and stale locations per op before it gives up with kContended (as pilaf's 64).
constexpr uint32_t kMaxRetries = 64;
// A lock word that stays locked at the same value this long belongs to a holder that died or
// stalled: the PUT goes to the worker, which replaces the item (docs/drtm.md, "A dead lock
// holder"). A live holder keeps it for 3 round trips (microseconds on shm, ~40 us on tcp).
constexpr auto kLockLease = std::chrono::milliseconds(50);
// A holder WRITEs its record only if less than kLockLease - kHoldMargin has passed since it
// posted its acquire CAS: past that, a writer may have broken the lease and the worker replaced
// the item, whose memory is reused retire_grace_ms later (docs/drtm.md, "A late holder"). The
// margin covers the time from the check to the WRITE's landing.
constexpr auto kHoldMargin = std::chrono::milliseconds(10);
static_assert(kHoldMargin < kLockLease);
// Cached locations at most (then the cache starts over).
constexpr size_t kCacheMax = size_t{1} << 20;
constexpr size_t kAlign = 64;

struct Map {
  fabric::PeerAddr peer = fabric::kNoPeer;
  fabric::RemoteRegion table, items;
  uint64_t main = 0, overflow = 0;
};

// Where a key's item was, as last READ (DrTM's cached index entry).
struct Loc {
  uint64_t offset = 0;
  uint32_t bytes = 0;
  uint32_t incarnation = 0;
  uint32_t capacity = 0;
  uint64_t head = 0;     // the item's head check: seeds the record check of our WRITE
  uint64_t version = 0;  // the version last seen (the next CAS compares with it)
};

struct Hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

enum class Step : uint8_t { kBucket, kItem, kAcquire, kWrite, kRelease, kAbandon, kMessage };

struct Counters {
  uint64_t gets = 0, hits = 0, cached_gets = 0, puts = 0, cas_puts = 0, bucket_reads = 0,
           item_reads = 0, torn_buckets = 0, torn_items = 0, stale_locations = 0, atomics = 0,
           cas_failures = 0, locked_seen = 0, writes = 0, superseded = 0, lease_breaks = 0,
           message_puts = 0, message_gets = 0, gave_up = 0, errors = 0, late_holds = 0;
  nlohmann::json to_json() const {
    const double g = gets ? static_cast<double>(gets) : 1.0;
    const double p = cas_puts ? static_cast<double>(cas_puts) : 1.0;
    return {{"gets", gets},
            {"hits", hits},
            {"cached_gets", cached_gets},
            {"puts", puts},
            {"cas_puts", cas_puts},
            {"bucket_reads", bucket_reads},
            {"item_reads", item_reads},
            {"torn_buckets", torn_buckets},
            {"torn_items", torn_items},
            {"stale_locations", stale_locations},
            {"atomics", atomics},
            {"cas_failures", cas_failures},
            {"locked_seen", locked_seen},
            {"writes", writes},
            {"superseded", superseded},
            {"lease_breaks", lease_breaks},
            {"late_holds", late_holds},
            {"message_puts", message_puts},
            {"message_gets", message_gets},
            {"gave_up", gave_up},
            {"errors", errors},
            {"reads_per_get", static_cast<double>(bucket_reads + item_reads) / g},
            {"atomics_per_cas_put", static_cast<double>(atomics) / p}};
  }
};

struct Op {
  fabric::OpContext ctx;
  Callback cb;
  proto::ClientOp kind = proto::ClientOp::kGet;
  std::string key, value;
  uint64_t expected = 0;
  uint32_t expire_at = 0;
  uint32_t worker = 0;
  Step step = Step::kBucket;
  bool busy = false;     // a request is using this op
  bool zombie = false;   // its callback ran (timeout); waiting for its last post to return
  bool pending = false;  // one post outstanding
  bool cached = false;   // kItem: the location came from the cache (else from a bucket)
  uint64_t bucket = 0;   // kBucket / lookup: the bucket READ
  uint32_t next_slot = 0, hops = 0;
  Loc loc;
  uint64_t compare = 0;  // kAcquire: the unlocked word expected; kRelease: our locked word
  uint64_t last_locked = 0;
  Clock::time_point locked_since{};
  Clock::time_point acquire_posted{};  // our last acquire CAS: the lease runs from here
  uint32_t retries = 0;
  Clock::time_point deadline{};
  size_t buf = 0;  // offset of this op's slice
};

class DrtmClient final : public proto::ClientProtocol {
 public:
  DrtmClient(proto::ClientHost& host, const proto::ClientSettings& o)
      : host_(host),
        options_(o),
        rpc_(host, rpc::ClientConfig{"drtm.requests", true}),
        die_holding_lock_(o.test.drtm_exit_holding_lock),
        stall_holding_lock_(o.test.drtm_stall_holding_lock_ms) {}
  ~DrtmClient() override { buf_.reset(); }

  void hello(nlohmann::json* payload) override {
    (*payload)["protocol"] = proto::info(proto::Id::drtm).name;
    (*payload)["transport"] = "send";
    rpc_.hello(payload);
  }

  Opened open(const control::Welcome& w, const nlohmann::json& layout) override {
    Opened r = rpc_.open(w, layout);
    if (r != Opened::kReady) return r;
    const uint32_t n = rpc_.workers();
    const auto l = rpc::RpcClient::read_layout<DrtmLayout>(layout);
    if (l.drtm.size() != n)
      rpc::RpcClient::bad_layout("the server runs no drtm engine for these workers");
    if (l.drtm_layout != kLayoutVersion)
      rpc::RpcClient::bad_layout("the server's drtm layout is not version " +
                                 std::to_string(kLayoutVersion));
    maps_.assign(n, Map{});
    for (uint32_t i = 0; i < n; ++i) {
      Map& m = maps_[i];
      m.peer = rpc_.peer(i);
      m.table = rpc::RpcClient::region_of(w, fmt::format("drtm.table.{}", i));
      m.items = rpc::RpcClient::region_of(w, fmt::format("drtm.items.{}", i));
      m.main = l.drtm[i].buckets;
      m.overflow = l.drtm[i].overflow;
      if (m.main == 0 || (m.main + m.overflow) * sizeof(Bucket) > m.table.length)
        rpc::RpcClient::bad_layout(fmt::format("drtm.table.{} is smaller than its buckets", i));
    }
    ep_ = &host_.endpoint();
    max_item_ = item_bytes(static_cast<uint16_t>(store::kMaxKeySize),
                           capacity_for(rpc_.max_value()));
    record_at_ = sizeof(Bucket) + pad8(max_item_);
    atomics_at_ = record_at_ + pad8(record_bytes(capacity_for(rpc_.max_value())));
    slot_bytes_ = (atomics_at_ + 3 * sizeof(uint64_t) + kAlign - 1) & ~(kAlign - 1);
    ops_ = std::vector<Op>(size_t{rpc_.window()} * n);
    buf_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), slot_bytes_ * ops_.size(),
                                                      fabric::Access::kLocalOnly);
    for (size_t i = 0; i < ops_.size(); ++i) {
      ops_[i].ctx.user = &kDrtmMarker;
      ops_[i].ctx.tag = i;
      ops_[i].buf = i * slot_bytes_;
    }
    return r;
  }
  size_t min_multi_recv() const override { return rpc_.min_multi_recv(); }

  Status submit(const proto::ClientRequest& r, Callback&& cb) override {
    if (host_.gone()) return Status::kServerGone;
    Status v = rpc::validate(r.key, r.op == proto::ClientOp::kPut ? r.value.size() : 0,
                             rpc_.max_value());
    if (v != Status::kOk) return v;
    Deadline d = Deadline::after_ms(options_.timeout_ms);
    Op* op = nullptr;
    if (Status s = host_.free_op(ops_, d, &op); s != Status::kOk) return s;
    op->busy = true;
    op->zombie = false;
    op->pending = false;
    op->cb = std::move(cb);
    op->kind = r.op;
    op->key.assign(r.key);
    op->value.assign(r.op == proto::ClientOp::kPut ? r.value : std::string_view());
    op->expected = r.expected_version;
    op->expire_at = r.expire_at;
    op->worker = rpc_.worker_of(r.key);
    op->retries = 0;
    op->last_locked = 0;
    op->deadline = d.at();
    in_flight_++;
    if (op->kind == proto::ClientOp::kGet) counters_.gets++;
    else if (op->kind == proto::ClientOp::kPut) counters_.puts++;
    if (op->kind == proto::ClientOp::kDel) {
      // Always the worker's (docs/drtm.md).
      forget(op->key);
      by_message(*op);
    } else {
      start(*op);
    }
    return Status::kOk;
  }

  size_t complete(std::span<fabric::Completion> cs) override {
    size_t ran = 0;
    completing_++;
    for (fabric::Completion& c : cs) {
      if (c.context == nullptr) {
        // shm drops the context (and flags) of a failed READ: that op ends by its deadline.
        if (c.error != 0 && !c.inbound) counters_.errors++;
      } else if (c.context->user == &kDrtmMarker) {
        ran += on_completion(c);
      } else if (rpc_.owns(c.context)) {
        ran += rpc_.complete(c);
      }
    }
    completing_--;
    send_messages();
    return ran;
  }

  size_t expire(bool all) override {
    size_t ran = 0;
    if (all || rpc_.in_flight() > 0) ran += rpc_.expire(all);
    const auto now = Clock::now();
    for (Op& op : ops_) {
      if (op.zombie &&
          (all || now >= op.deadline + std::chrono::milliseconds(options_.timeout_ms))) {
        // Its last post never came back: free it.
        op = reset(op);
        continue;
      }
      if (!op.busy || op.zombie || op.step == Step::kMessage) continue;  // kMessage: rpc_'s
      if (!all && now < op.deadline) continue;
      ran += finish(op, all ? Status::kServerGone : Status::kTimeout);
      if (all) op = reset(op);
    }
    if (all) {
      // Messages not handed over yet: the server is gone.
      for (uint32_t index : deferred_) {
        Op& op = ops_[index];
        Callback cb = std::move(op.cb);
        in_flight_--;
        op = reset(op);
        if (cb) cb(Status::kServerGone, {}, 0);
        ran++;
      }
      deferred_.clear();
    }
    send_messages();
    return ran;
  }

  // Every request holds an op; those handed to the RPC client are counted there too.
  size_t in_flight() const override { return in_flight_; }
  nlohmann::json counters() const override {
    nlohmann::json j = counters_.to_json();
    rpc_.counters(&j);
    return j;
  }

 private:
  static Op reset(Op& op) {
    Op fresh;
    fresh.ctx = op.ctx;
    fresh.ctx.provider_scratch[0] = nullptr;
    fresh.buf = op.buf;
    return fresh;
  }

  char* at(const Op& op, size_t off) { return buf_->data() + op.buf + off; }
  uint64_t& word(const Op& op, int i) {  // 0 swap, 1 compare, 2 result
    return *reinterpret_cast<uint64_t*>(at(op, atomics_at_ + 8 * static_cast<size_t>(i)));
  }

  void forget(std::string_view key) {
    auto it = cache_.find(key);
    if (it != cache_.end()) cache_.erase(it);
  }
  void remember(const Op& op) {
    if (cache_.size() >= kCacheMax) cache_.clear();
    auto [it, fresh] = cache_.try_emplace(op.key, op.loc);
    if (!fresh) it->second = op.loc;
  }

  // Starts (or restarts) an op from what the cache knows.
  void start(Op& op) {
    auto it = cache_.find(op.key);
    if (it != cache_.end()) {
      op.loc = it->second;
      if (op.kind == proto::ClientOp::kPut) {
        if (op.value.size() <= op.loc.capacity) acquire(op, expected_word(op, op.loc.version));
        else by_message(op);
        return;
      }
      op.cached = true;
      counters_.cached_gets++;
      read_item(op);
      return;
    }
    lookup(op);
  }

  void lookup(Op& op) {
    op.bucket = key_place(op.key, maps_[op.worker].main).bucket;
    op.hops = 0;
    read_bucket(op);
  }

  template <class Post>
  bool post(Op& op, Post&& p) {
    long ret = fabric::post_with_retry(
        p, [&] { host_.reap(); }, Deadline::after_ms(options_.timeout_ms),
        [&] { return host_.alive(); });
    if (ret != 0) {
      finish(op, host_.alive(true) ? Status::kError : Status::kServerGone);
      return false;
    }
    op.pending = true;
    return true;
  }

  void read_bucket(Op& op) {
    op.step = Step::kBucket;
    counters_.bucket_reads++;
    const Map& m = maps_[op.worker];
    post(op, [&] {
      return ep_->read(buf_->local(op.buf, sizeof(Bucket)), m.peer,
                       m.table.at(op.bucket * sizeof(Bucket)), m.table.key, &op.ctx);
    });
  }

  void read_item(Op& op) {
    op.step = Step::kItem;
    counters_.item_reads++;
    const Map& m = maps_[op.worker];
    post(op, [&] {
      return ep_->read(buf_->local(op.buf + sizeof(Bucket), op.loc.bytes), m.peer,
                       m.items.at(op.loc.offset), m.items.key, &op.ctx);
    });
  }

  // CAS of the item's lock word: `expect` (unlocked) -> locked at the same version.
  void acquire(Op& op, uint64_t expect) {
    op.step = Step::kAcquire;
    op.compare = expect;
    op.acquire_posted = Clock::now();
    cas(op, expect, expect | 1);
  }
  // The unlocked word a PUT expects: the user's version (memcached cas) or `version`.
  static uint64_t expected_word(const Op& op, uint64_t version) {
    return unlocked(op.expected != 0 ? op.expected : version, op.loc.incarnation);
  }

  void cas(Op& op, uint64_t compare, uint64_t swap) {
    counters_.atomics++;
    word(op, 0) = swap;
    word(op, 1) = compare;
    word(op, 2) = 0;
    const Map& m = maps_[op.worker];
    const size_t a = op.buf + atomics_at_;
    post(op, [&] {
      return ep_->compare_swap(buf_->local(a, 8), buf_->local(a + 8, 8), buf_->local(a + 16, 8),
                               m.peer, m.items.at(op.loc.offset), m.items.key, &op.ctx);
    });
  }

  // What needs the worker goes as a message. The op stays taken until the answer (so that a
  // client has at most W requests per worker in flight, whichever way they travel), and is
  // freed by the answer's callback.
  void by_message(Op& op) {
    if (op.kind == proto::ClientOp::kPut) {
      counters_.message_puts++;
      forget(op.key);  // the worker may put the key into another item
    } else if (op.kind == proto::ClientOp::kGet) {
      counters_.message_gets++;
    }
    op.step = Step::kMessage;
    deferred_.push_back(static_cast<uint32_t>(op.ctx.tag));
    send_messages();
  }

  // Hands the waiting messages to the RPC client, but never from inside complete() or one of
  // the RPC client's submits: a submit waits (driving progress) for its worker's next slot in
  // order, which frees on completions that an outer complete() may hold in its batch, not yet
  // handed on, or on the SEND an outer submit has not posted yet. The outermost one sends
  // them when it is done.
  void send_messages() {
    while (!deferred_.empty() && !submitting_ && completing_ == 0) {
      const uint32_t index = deferred_.front();
      deferred_.erase(deferred_.begin());
      Op& op = ops_[index];
      proto::ClientRequest r;
      r.op = op.kind;
      r.key = op.key;
      r.value = op.value;
      r.expected_version = op.expected;
      r.expire_at = op.expire_at;
      Callback user = std::move(op.cb);
      op.cb = nullptr;
      Callback if_refused = user;  // rpc_.submit drops what it refuses
      submitting_ = true;
      Status st = rpc_.submit(r, [this, index, user = std::move(user)](Status s, std::string_view v,
                                                                       uint64_t ver) {
        Op& o = ops_[index];
        in_flight_--;
        o = reset(o);
        if (user) user(s, v, ver);
      });
      submitting_ = false;
      if (st != Status::kOk) {
        // Not sent: we said kOk for this request already, so its callback runs now.
        in_flight_--;
        op = reset(op);
        if (if_refused) if_refused(st, {}, 0);
      }
    }
  }

  size_t finish(Op& op, Status st, std::string_view value = {}, uint64_t version = 0) {
    if (op.zombie || !op.busy) return 0;
    if (st == Status::kOk && op.kind == proto::ClientOp::kGet) counters_.hits++;
    in_flight_--;
    Callback cb = std::move(op.cb);
    op.cb = nullptr;
    if (op.pending) {
      op.zombie = true;  // keep the buffer until its post returns
      if (cb) cb(st, value, version);
      return 1;
    }
    // `value` points into this op's buffer: the op stays taken while the callback reads it.
    if (cb) cb(st, value, version);
    op.busy = false;
    return 1;
  }

  // A race seen (torn copy, stale location): true when the op used up its retries (finished).
  bool give_up(Op& op) {
    if (++op.retries <= kMaxRetries) return false;
    counters_.gave_up++;
    finish(op, Status::kContended);
    return true;
  }

  size_t on_completion(fabric::Completion& c) {
    const size_t index = c.context->tag;
    if (index >= ops_.size()) return 0;
    Op& op = ops_[index];
    op.pending = false;
    if (c.error != 0) {
      counters_.errors++;
      if (op.zombie || !op.busy) {
        op = reset(op);
        return 0;
      }
      return finish(op, host_.alive(true) ? Status::kError : Status::kServerGone);
    }
    if (op.zombie) {
      zombie_step(op);
      return 0;
    }
    if (!op.busy) return 0;
    size_t ran = 0;
    switch (op.step) {
      case Step::kBucket: ran = on_bucket(op); break;
      case Step::kItem: ran = on_item(op); break;
      case Step::kAcquire: ran = on_acquire(op); break;
      case Step::kWrite: ran = on_write(op); break;
      case Step::kRelease: ran = on_release(op); break;
      case Step::kAbandon: ran = on_abandon(op); break;
      case Step::kMessage: break;  // the RPC client's
    }
    return ran;
  }

  // An op whose caller was told kTimeout still gives back a lock it took.
  void zombie_step(Op& op) {
    if (op.step == Step::kAcquire && word(op, 2) == op.compare) {
      const uint64_t mine = op.compare | 1;
      op.step = Step::kRelease;
      op.busy = true;
      if (!post_quiet(op, mine, op.compare)) op = reset(op);
      return;
    }
    if (op.step == Step::kWrite) {
      op.step = Step::kRelease;
      if (!post_quiet(op, op.compare, unlocked(version_of(op.compare) + 1, op.loc.incarnation)))
        op = reset(op);
      return;
    }
    op = reset(op);
  }
  bool post_quiet(Op& op, uint64_t compare, uint64_t swap) {
    counters_.atomics++;
    word(op, 0) = swap;
    word(op, 1) = compare;
    const Map& m = maps_[op.worker];
    const size_t a = op.buf + atomics_at_;
    long ret = ep_->compare_swap(buf_->local(a, 8), buf_->local(a + 8, 8), buf_->local(a + 16, 8),
                                 m.peer, m.items.at(op.loc.offset), m.items.key, &op.ctx);
    op.pending = ret == 0;
    return ret == 0;
  }

  size_t on_bucket(Op& op) {
    Bucket b;
    if (!drtm::read_bucket(at(op, 0), op.bucket, &b)) {
      counters_.torn_buckets++;
      if (give_up(op)) return 1;
      read_bucket(op);
      return op.busy ? 0 : 1;
    }
    op.next_slot = 0;
    return scan(op);
  }

  // Walks the bucket copy in our buffer from op.next_slot: READs the next item whose tag is
  // the key's; at the end follows the chain; then "not found".
  size_t scan(Op& op) {
    Bucket b;
    std::memcpy(&b, at(op, 0), sizeof(b));
    const Map& m = maps_[op.worker];
    const uint16_t tag = key_place(op.key, m.main).tag;
    for (uint32_t s = op.next_slot; s < kSlotsPerBucket; ++s) {
      const BucketSlot& sl = b.slots[s];
      if (sl.bytes == 0 || slot_tag(sl) != tag) continue;
      if (sl.bytes > max_item_ || slot_offset(sl) + sl.bytes > m.items.length) continue;
      op.next_slot = s + 1;
      op.loc = Loc{slot_offset(sl), sl.bytes, sl.incarnation, 0, 0, 0};
      op.cached = false;
      read_item(op);
      return op.busy ? 0 : 1;
    }
    if (b.next != 0 && op.hops < m.overflow && b.next < m.main + m.overflow) {
      op.bucket = b.next;
      op.hops++;
      read_bucket(op);
      return op.busy ? 0 : 1;
    }
    // Not in the table at the moment of our READs.
    if (op.kind == proto::ClientOp::kGet) return finish(op, Status::kNotFound);
    by_message(op);  // a new key: the worker allocates its item
    return 0;
  }

  size_t on_item(Op& op) {
    ItemValue v;
    switch (drtm::read_item(at(op, sizeof(Bucket)), op.loc.bytes, op.key, op.loc.incarnation, &v)) {
      case ItemRead::kValue: {
        ItemHead h;
        std::memcpy(&h, at(op, sizeof(Bucket)), sizeof(h));
        op.loc.capacity = v.capacity;
        op.loc.head = h.head_check;
        op.loc.version = v.version;
        remember(op);
        if (op.kind == proto::ClientOp::kPut) {
          if (op.value.size() > op.loc.capacity) {
            by_message(op);
            return 0;
          }
          acquire(op, expected_word(op, v.version));
          return op.busy ? 0 : 1;
        }
        if (v.expire_at != 0) {
          // Expiry is the worker's to judge, by its clock (docs/drtm.md).
          by_message(op);
          return 0;
        }
        return finish(op, Status::kOk, v.value, v.version);
      }
      case ItemRead::kTorn:
        // A writer or the worker was at work on the bytes we READ: READ them again.
        counters_.torn_items++;
        if (give_up(op)) return 1;
        read_item(op);
        return op.busy ? 0 : 1;
      case ItemRead::kMoved:
        if (!op.cached) {
          ItemHead h;
          std::memcpy(&h, at(op, sizeof(Bucket)), sizeof(h));
          // The item the bucket named, holding another key: a shared tag, try the next slot.
          // Another incarnation: our bucket copy is stale (look again, below).
          if (h.incarnation == op.loc.incarnation) return scan(op);
        }
        [[fallthrough]];
      case ItemRead::kRetired:
        // The location is stale (DELETE, or the worker replaced the item): look again.
        counters_.stale_locations++;
        forget(op.key);
        if (give_up(op)) return 1;
        lookup(op);
        return op.busy ? 0 : 1;
    }
    return 0;
  }

  size_t on_acquire(Op& op) {
    const uint64_t found = word(op, 2);
    if (found == op.compare) {
      if (die_holding_lock_) _exit(3);  // TEST ONLY: a client killed holding the lock
      if (stall_holding_lock_.count() > 0)
        std::this_thread::sleep_for(stall_holding_lock_);  // TEST ONLY: a stalled holder
      if (Clock::now() - op.acquire_posted > kLockLease - kHoldMargin) {
        // Held too long to WRITE safely (the process was descheduled, or the completion came
        // late): give the lock back unchanged and let the worker apply the PUT.
        counters_.late_holds++;
        op.step = Step::kAbandon;
        cas(op, op.compare | 1, op.compare);
        return op.busy ? 0 : 1;
      }
      // Ours: fill the other record with the next version (the current one stays whole for
      // readers), then release.
      const uint64_t v = version_of(op.compare) + 1;
      const size_t len = build_record(at(op, record_at_), v, op.expire_at, op.value, op.loc.head);
      op.step = Step::kWrite;
      op.compare |= 1;  // our locked word, which the release expects
      counters_.writes++;
      const Map& m = maps_[op.worker];
      const uint64_t raddr =
          m.items.at(op.loc.offset + record_offset(static_cast<uint16_t>(op.key.size()),
                                                   op.loc.capacity, static_cast<uint32_t>(v & 1)));
      fabric::PostOptions po;
      // The release may only follow once the record is in the worker's memory (on tcp a WRITE
      // completes at its initiator before it lands).
      po.delivery_complete = true;
      post(op, [&] {
        return ep_->write(buf_->local(op.buf + record_at_, len), m.peer, raddr, m.items.key,
                          &op.ctx, po);
      });
      return op.busy ? 0 : 1;
    }
    counters_.cas_failures++;
    if (found == kRetired || !same_incarnation(found, op.loc.incarnation)) {
      // The item left the table (or its memory holds another item now): look again.
      counters_.stale_locations++;
      forget(op.key);
      if (give_up(op)) return 1;
      lookup(op);
      return op.busy ? 0 : 1;
    }
    if (!is_locked(found)) {
      // Another version than we thought.
      if (op.expected != 0) return finish(op, Status::kVersionMismatch);
      op.loc.version = version_of(found);
      acquire(op, found);
      return op.busy ? 0 : 1;
    }
    // Locked by another writer: try again for the version it will release to, unless the
    // same holder has kept it past the lease.
    counters_.locked_seen++;
    const auto now = Clock::now();
    if (found != op.last_locked) {
      op.last_locked = found;
      op.locked_since = now;
    } else if (now - op.locked_since > kLockLease) {
      counters_.lease_breaks++;
      by_message(op);
      return 0;
    }
    acquire(op, expected_word(op, version_of(found) + 1));
    return op.busy ? 0 : 1;
  }

  size_t on_write(Op& op) {
    op.step = Step::kRelease;
    cas(op, op.compare, unlocked(version_of(op.compare) + 1, op.loc.incarnation));
    return op.busy ? 0 : 1;
  }

  // The lock given back unwritten (past the lease): released, or already broken (kRetired: the
  // worker replaced the item), the PUT goes to the worker either way.
  size_t on_abandon(Op& op) {
    by_message(op);  // forgets the location
    return 0;
  }

  size_t on_release(Op& op) {
    const uint64_t found = word(op, 2);
    const uint64_t v = version_of(op.compare) + 1;
    counters_.cas_puts++;
    if (found == op.compare) {
      op.loc.version = v;
      remember(op);
      return finish(op, Status::kOk, {}, v);
    }
    if (found == kRetired) {
      // The worker replaced the item while we held its lock (our lease ran out, or a message
      // PUT/DELETE came): our PUT counts as done just before that (docs/drtm.md).
      counters_.superseded++;
      forget(op.key);
      return finish(op, Status::kOk, {}, v);
    }
    counters_.errors++;
    return finish(op, Status::kError);
  }

  proto::ClientHost& host_;
  proto::ClientSettings options_;
  rpc::RpcClient rpc_;
  fabric::Endpoint* ep_ = nullptr;
  std::vector<Map> maps_;
  std::unique_ptr<fabric::RegisteredBuffer> buf_;
  std::vector<Op> ops_;
  size_t max_item_ = 0, record_at_ = 0, atomics_at_ = 0, slot_bytes_ = 0;
  size_t in_flight_ = 0;
  std::vector<uint32_t> deferred_;  // ops whose message waits for send_messages()
  bool submitting_ = false;         // inside rpc_.submit
  uint32_t completing_ = 0;         // inside complete() (nested: a post's retry reaps)
  std::unordered_map<std::string, Loc, Hash, std::equal_to<>> cache_;
  Counters counters_;
  // TEST ONLY (proto::ClientTestHooks): exit right after taking a lock, or stall between the
  // lock and the WRITE (tests/client/drtm_e2e_test.cc).
  bool die_holding_lock_ = false;
  std::chrono::milliseconds stall_holding_lock_{0};
};

}  // namespace

std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options) {
  if (!options.transport.empty() && options.transport != "send")
    throw ClientError(Status::kError,
                      "fabkv: drtm sends what needs the worker as messages: "
                      "transport must be send");
  return std::make_unique<DrtmClient>(host, options);
}

}  // namespace fabkv::drtm
