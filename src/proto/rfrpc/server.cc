// RF-RPC's server side (wire.h in this folder). Requests arrive in the client's slots of the
// worker's request region ("rfrpc.requests.<w>") exactly as HERD's and server-reply's do (the
// shared RPC piece, proto/rpc/server.h, polls, checks and runs them); each result is written
// into the worker's own response region, which clients READ (RF-RPC sec. 3.1: the server only
// handles inbound operations). A client that flipped its mode flag to server-reply also gets the
// result WRITten into its ring (RF-RPC sec. 3.2).
//
// Batches (RF-RPC sec. 4, wire.h): when --rfrpc-batch-entries is set the worker also scans each
// client's W batch slots ("rfrpc.batches.<w>") every round, takes a whole request batch (a copy)
// and clears its status (the paper: "the server will clear its local buffer"), runs its entries
// through the engine and writes one result batch into "rfrpc.bresults.<w>" for the client to
// READ. The clear comes before the result: once the result is there the client may WRITE the
// slot's next batch (on shm by its own cross-memory copy, while this thread runs), and a clear
// after the result erased that batch's status now and then (it was never taken).
//
// The 2-byte processing time in each result header is the time from the start of the round in
// which the worker took the request to the moment its result is written: the engine's work, the
// round's other requests before it and the test delay (--rfrpc-delay-ns), i.e. how long a
// client fetching right after its WRITE would have found the result not ready.

#include <fmt/format.h>

#include <atomic>
#include <chrono>

#include "common/deadline.h"
#include "proto/json.h"
#include "proto/rfrpc/handshake.h"
#include "proto/rfrpc/wire.h"
#include "proto/rpc/handshake.h"
#include "proto/rpc/request.h"
#include "proto/rpc/server.h"
#include "store/hash.h"
#include "store/limits.h"

namespace fabkv::rfrpc {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

class RfrpcServer final : public rpc::RpcServer {
 public:
  explicit RfrpcServer(proto::ServerHost& w)
      : RpcServer(w, proto::info(proto::Id::rfrpc), config(w)),
        o_(w.settings().rfrpc),
        slot_bytes_(result_slot_bytes(w.settings().max_value)),
        rings_(w.settings().max_clients) {}

  void open() override {
    RpcServer::open();
    if (o_.batch_entries > 0) {
      bslot_ = batch_slot_bytes(o_.batch_bytes);
      rslot_ = batch_slot_bytes(result_batch_payload(o_.batch_bytes));
      batches_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(),
                                                            size_t{max_clients_} * window_ * bslot_,
                                                            fabric::Access::kRemoteWrite);
      bresults_ = std::make_unique<fabric::RegisteredBuffer>(
          worker_.fabric(), size_t{max_clients_} * window_ * rslot_, fabric::Access::kRemoteRead);
      bstate_.resize(size_t{max_clients_} * window_);
      epochs_.resize(max_clients_);
    }
    results_ = std::make_unique<fabric::RegisteredBuffer>(
        worker_.fabric(), size_t{max_clients_} * window_ * slot_bytes_,
        fabric::Access::kRemoteRead);
    modes_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(),
                                                        size_t{max_clients_} * sizeof(ModeFlag),
                                                        fabric::Access::kRemoteWrite);
  }

  // The client must offer a ring it lets us WRITE (for server-reply mode), large enough for
  // every worker's W results of the largest value; one too small is told the size and comes
  // back (as server-reply's, proto/server_reply/server.cc).
  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t, uint16_t,
                    proto::WelcomeParts* out) override {
    if (std::string why = rpc::check_transport(hello, p.name, rpc::Transport::kWrite, true);
        !why.empty())
      return why;
    try {
      (void)proto::region_from_json(hello.at("ring"));
    } catch (const std::exception& e) {
      return std::string("rfrpc needs a ring in the Hello: ") + e.what();
    }
    welcome(rpc::Transport::kWrite, out);
    const size_t ring_size = ring_bytes(worker_.settings().workers, window_, max_value_);
    out->layout.update(nlohmann::json(rpc::RingLayout{ring_size}));
    RfrpcLayout l;
    l.rfrpc_wire = kWireVersion;
    l.fetch_size = o_.fetch_size;
    l.retries = o_.retries;
    l.mode = o_.mode == Mode::kFetch ? "fetch" : o_.mode == Mode::kReply ? "reply" : "hybrid";
    l.batch_entries = o_.batch_entries;
    l.batch_bytes = o_.batch_bytes;
    l.batch_timeout_us = o_.batch_timeout_us;
    l.batch_llimit_us = o_.batch_llimit_us;
    l.batch_alpha_pct = o_.batch_alpha_pct;
    out->layout.update(nlohmann::json(l));
    for (const auto& [name, buf] :
         {std::pair{"results", results_.get()}, std::pair{"modes", modes_.get()},
          std::pair{"batches", batches_.get()}, std::pair{"bresults", bresults_.get()}}) {
      if (buf == nullptr) continue;
      fabric::RemoteRegion r = buf->remote();
      out->regions.push_back({fmt::format("{}.{}.{}", protocol_.name, name, worker_.index()),
                              r.addr, r.length, r.key, static_cast<uint32_t>(r.access)});
    }
    return "";
  }

  void add_client_st(uint32_t c, uint16_t epoch, const proto::Info& p,
                     const nlohmann::json& hello) override {
    RpcServer::add_client_st(c, epoch, p, hello);
    if (!batches_) return;
    epochs_[c] = epoch;
    std::erase(batch_clients_, c);
    batch_clients_.push_back(c);
  }

  void remove_client_st(uint32_t c) override {
    RpcServer::remove_client_st(c);
    clear_client_st(c);
    if (batches_) std::erase(batch_clients_, c);
  }

  void poll_st() override {
    round_start_ns_ = now_ns();
    RpcServer::poll_st();
    batch_stalled_ = false;
    for (size_t i = 0; i < batch_clients_.size(); ++i)
      if (!worker_.dropped_st(batch_clients_[i])) scan_batches_st(batch_clients_[i]);
  }
  bool busy_st() const override { return RpcServer::busy_st() || batch_stalled_; }

  nlohmann::json stats() const override {
    nlohmann::json j = RpcServer::stats();
    auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    j["results"] = r(results_written_);
    j["reply_writes"] = r(reply_writes_);
    j["bad_mode_flags"] = r(bad_mode_flags_);
    j["ring_too_small"] = r(ring_too_small_);
    j["request_batches"] = r(batches_taken_);
    j["batched_requests"] = r(batched_);
    j["bad_batches"] = r(bad_batches_);
    j["bad_batch_entries"] = r(bad_entries_);
    j["result_overflows"] = r(overflows_);
    // A gauge (the last request batch's aux: the batch size its client runs with, eq. 3),
    // as an object so that it is not summed over workers.
    j["client_batch_size"] = {{"last", r(client_batch_size_)}};
    return j;
  }

 private:
  static Config config(const proto::ServerHost& w) {
    Config c;
    c.slots = true;
    c.messages = false;
    c.answer_bytes = sizeof(rpc::ResponseHeader) + w.settings().max_value;
    return c;
  }

  // How long (polls of one batch slot) a batch may look torn before it is declared garbage: as
  // proto/rpc/server.cc's kStallPolls for request slots.
  static constexpr uint32_t kBatchStallPolls = 20000;

  struct BatchSlot {
    uint32_t last = 0;   // the number of the batch last taken from this slot (0: none yet)
    uint32_t stall = 0;  // polls it has looked torn
  };

  // A batch is new when its status is set and its number is not the one taken last. The worker
  // follows the number the client wrote rather than expecting last + 1: a client that gave up a
  // batch (two timeouts, client_batch.cc) writes the slot's next one over it, and a worker
  // waiting for the given-up number would never answer that slot again.
  void scan_batches_st(uint32_t c) {
    for (uint32_t b = 0; b < window_; ++b) {
      BatchSlot& st = bstate_[size_t{c} * window_ + b];
      char* slot = batches_->data() + batch_offset(c, window_, b, bslot_);
      std::atomic_ref<uint32_t> status(*reinterpret_cast<uint32_t*>(slot));
      uint32_t seq;
      std::memcpy(&seq, slot + offsetof(BatchHeader, seq), sizeof(seq));
      if ((status.load(std::memory_order_acquire) & kStatusBit) == 0 || seq == st.last ||
          seq == 0) {
        st.stall = 0;  // nothing new (or a WRITE whose number has not landed yet)
        continue;
      }
      size_t total = 0;
      const BatchRead r = read_batch(slot, bslot_, seq, bslot_ - sizeof(BatchHeader) - 8, true,
                                     &bcopy_, &total);
      if (r == BatchRead::kEmpty) {
        st.stall = 0;
        continue;
      }
      if (r != BatchRead::kWhole) {
        // Landing, torn, or sizes no slot holds: give a landing WRITE time, then answer the
        // batch with no entries (the client fails them) and go on.
        batch_stalled_ = true;
        if (++st.stall < kBatchStallPolls) continue;
      }
      // Taken (bcopy_ holds it, or it is answered empty): the status goes now, before the
      // result batch is written. After the result the client may already have written the
      // slot's next batch, whose status a later clear would erase.
      status.store(0, std::memory_order_relaxed);
      st.last = seq;
      st.stall = 0;
      if (r == BatchRead::kWhole) {
        run_batch_st(c, b, seq);
      } else {
        bad_batches_.fetch_add(1, std::memory_order_relaxed);
        write_result_batch_st(c, b, seq, 0, {});
      }
    }
  }

  // Every entry of the whole batch in bcopy_ (header and payload): checked one by one as a
  // request slot is (proto/rpc/server.cc), the good ones run through the engine together.
  void run_batch_st(uint32_t c, uint32_t b, uint32_t seq) {
    BatchHeader bh;
    std::memcpy(&bh, bcopy_.data(), sizeof(bh));
    client_batch_size_.store(bh.aux, std::memory_order_relaxed);
    const char* payload = bcopy_.data() + sizeof(bh);
    const size_t n = bh.status_size & ~kStatusBit;
    bres_.clear();
    breqs_.clear();
    bmap_.clear();
    const bool ok = for_each_entry(payload, n, bh.entries, [&](const char* e, uint32_t size) {
      Result res;
      if (size == kEntryOverflow || size < sizeof(rpc::RequestHeader)) {
        res.status = rpc::WireStatus::kMalformed;
        bres_.push_back(std::move(res));
        return;
      }
      const rpc::RequestHeader h = rpc::load<rpc::RequestHeader>(e);
      res.seq = h.seq;
      res.op = h.op;
      const size_t body = size_t{h.key_len} + h.value_len;
      store::Request q;
      const auto op = static_cast<rpc::OpCode>(h.op);
      if ((h.flags & rpc::kFlagIndirect) != 0 || sizeof(h) + body > size ||
          rpc::request_check(h, e + sizeof(h), body) != h.check || h.client != c ||
          h.epoch != epochs_[c] ||
          (op != rpc::OpCode::kGet && op != rpc::OpCode::kPut && op != rpc::OpCode::kDel)) {
        res.status = rpc::WireStatus::kMalformed;
      } else if (h.key_len == 0) {
        res.status = rpc::WireStatus::kInvalidKey;
      } else if (h.key_len > store::kMaxKeySize || h.value_len > max_value_ ||
                 (op != rpc::OpCode::kPut && h.value_len != 0)) {
        res.status = rpc::WireStatus::kTooLarge;
      } else {
        q.op = op == rpc::OpCode::kGet   ? store::Op::kGet
               : op == rpc::OpCode::kPut ? store::Op::kPut
                                         : store::Op::kDel;
        q.key = std::string_view(e + sizeof(h), h.key_len);
        q.value = std::string_view(e + sizeof(h) + h.key_len, h.value_len);
        q.hash = store::hash_key(q.key);
        q.put.expected_version = h.expected_version;
        q.put.expire_at = h.expire_at;
        res.run = true;
        bmap_.push_back(bres_.size());
        breqs_.push_back(q);
      }
      if (res.status == rpc::WireStatus::kMalformed)
        bad_entries_.fetch_add(1, std::memory_order_relaxed);
      bres_.push_back(std::move(res));
    });
    if (!ok) {
      // Entries that do not add up to the payload (a client bug or garbage that passed the
      // check): every one fails.
      bad_batches_.fetch_add(1, std::memory_order_relaxed);
      write_result_batch_st(c, b, seq, 0, {});
      return;
    }
    batches_taken_.fetch_add(1, std::memory_order_relaxed);
    batched_.fetch_add(bres_.size(), std::memory_order_relaxed);
    if (!breqs_.empty()) {
      worker_.execute_st(breqs_, [&](size_t i, const store::Response& r) {
        Result& res = bres_[bmap_[i]];
        res.status = rpc::to_wire(r.status);
        res.version = r.version;
        if (breqs_[i].op == store::Op::kGet && r.status == store::Status::kOk) {
          res.value.assign(r.value.data(), r.value.size());  // valid only until the next write
          res.expire_at = r.expire_at;
        }
      });
    }
    // --oplog-sync always: the result batch is published only once the log has what came
    // before it (docs/durability.md); the client reuses this batch slot only after reading it.
    // The batch waits for the latest record any of its keys needs (all of them, normally).
    uint64_t barrier = breqs_.empty() ? worker_.log_barrier_st({}) : 0;
    for (size_t i = 0; i < breqs_.size(); ++i)  // a refusal for a failing log waits for nothing
      if (bres_[bmap_[i]].status != rpc::to_wire(store::Status::kLogFailed))
        barrier = std::max(barrier, worker_.log_barrier_st(breqs_[i].key));
    if (barrier != 0) {
      worker_.when_durable_st(barrier, [this, c, b, seq, e = epochs_[c], res = bres_] {
        if (worker_.serving_st(c, e))
          write_result_batch_st(c, b, seq, static_cast<uint16_t>(res.size()), res);
      });
      return;
    }
    write_result_batch_st(c, b, seq, static_cast<uint16_t>(bres_.size()), bres_);
  }

  struct Result {
    uint32_t seq = 0;
    uint8_t op = 0;
    bool run = false;
    rpc::WireStatus status = rpc::WireStatus::kOk;
    uint64_t version = 0;
    uint32_t expire_at = 0;
    std::string value;
  };

  // One result batch into the client's slot b: status cleared first, then entries, then the
  // header with the status bit stored last.
  void write_result_batch_st(uint32_t c, uint32_t b, uint32_t seq, uint16_t entries,
                             const std::vector<Result>& results) {
    if (o_.delay_ns != 0) spin_ns(uint64_t{o_.delay_ns} * entries);
    char* dst = bresults_->data() + batch_offset(c, window_, b, rslot_);
    std::atomic_ref<uint32_t> status(*reinterpret_cast<uint32_t*>(dst));
    status.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    const size_t cap = result_batch_payload(o_.batch_bytes);
    char* payload = dst + sizeof(BatchHeader);
    size_t off = 0;
    for (uint32_t i = 0; i < entries; ++i) {
      const Result& r = results[i];
      const size_t len = sizeof(rpc::ResponseHeader) + r.value.size();
      // Room is kept for an overflow marker of every entry after this one.
      const size_t rest = size_t{entries - i - 1} * entry_bytes(0);
      uint32_t size = static_cast<uint32_t>(len);
      if (off + entry_bytes(len) + rest > cap) {
        size = kEntryOverflow;
        overflows_.fetch_add(1, std::memory_order_relaxed);
      }
      std::memset(payload + off, 0, entry_bytes(size == kEntryOverflow ? 0 : len));
      std::memcpy(payload + off, &size, sizeof(size));
      if (size != kEntryOverflow) {
        rpc::ResponseHeader h{};
        h.seq = r.seq;
        h.status = static_cast<uint8_t>(r.status);
        h.op = r.op;
        h.worker = static_cast<uint16_t>(worker_.index());
        h.value_len = static_cast<uint32_t>(r.value.size());
        h.expire_at = r.expire_at;
        h.version = r.version;
        h.client = static_cast<uint16_t>(c);
        h.epoch = epochs_[c];
        std::memcpy(payload + off + sizeof(uint32_t), &h, sizeof(h));
        std::memcpy(payload + off + sizeof(uint32_t) + sizeof(h), r.value.data(), r.value.size());
        off += entry_bytes(len);
      } else {
        off += entry_bytes(0);
      }
    }
    BatchHeader h{};
    h.status_size = static_cast<uint32_t>(off) | kStatusBit;
    h.aux = encode_proc_time(now_ns() - round_start_ns_);
    h.entries = entries;
    h.seq = seq;
    h.check = batch_check(h, payload, off);
    std::memcpy(dst + sizeof(uint32_t), reinterpret_cast<const char*>(&h) + sizeof(uint32_t),
                sizeof(h) - sizeof(uint32_t));
    status.store(h.status_size, std::memory_order_release);
    if (o_.batch_linger_ns != 0) spin_ns(o_.batch_linger_ns);  // test hook (options.h)
  }

  static void spin_ns(uint64_t ns) {
    const uint64_t until = now_ns() + ns;
    while (now_ns() < until) {
    }
  }

  // A client index starts with empty result slots (a new client's seq 1 must not find its
  // predecessor's result) and the mode the server was told to start clients in.
  void clear_client_st(uint32_t c) {
    std::memset(results_->data() + result_offset(c, window_, max_value_, 1), 0,
                size_t{window_} * slot_bytes_);
    ModeFlag f{};
    f.mode = o_.mode == Mode::kReply ? kModeReply : kModeFetch;
    std::memcpy(modes_->data() + size_t{c} * sizeof(ModeFlag), &f, sizeof(f));
    if (batches_) {
      std::memset(batches_->data() + batch_offset(c, window_, 0, bslot_), 0, window_ * bslot_);
      std::memset(bresults_->data() + batch_offset(c, window_, 0, rslot_), 0, window_ * rslot_);
      for (uint32_t b = 0; b < window_; ++b) bstate_[size_t{c} * window_ + b] = {};
    }
  }

  void learn_client_st(uint32_t c, const nlohmann::json& hello) override {
    clear_client_st(c);
    rings_[c] = proto::region_from_json(hello.at("ring"));  // admit() checked it
    if (rings_[c].length < ring_bytes(worker_.settings().workers, window_, max_value_))
      rings_[c] = {};  // too small (see admit): the client comes back with one that fits
  }

  // The client's flag, as its last WRITE left it; anything but the two modes is counted and
  // read as fetch (the result is in our buffer either way).
  uint8_t mode_of(uint32_t c) {
    const uint8_t m = std::atomic_ref<uint8_t>(*reinterpret_cast<uint8_t*>(
                                                   modes_->data() + size_t{c} * sizeof(ModeFlag)))
                          .load(std::memory_order_acquire);
    if (m == kModeReply) return kModeReply;
    if (m != kModeFetch) bad_mode_flags_.fetch_add(1, std::memory_order_relaxed);
    return kModeFetch;
  }

  // The result (rpc::ResponseHeader and value, `len` bytes in `slot`) goes into our response
  // region behind its ResultHeader; the status (seq) is written last.
  void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char* slot, size_t len) override {
    if (o_.delay_ns != 0 || o_.delay_ns_per_kib != 0) {
      // RF-RPC sec. 5.3.2 mimics processing with a loop timed by the clock: so do we.
      const size_t value = len - sizeof(rpc::ResponseHeader);
      spin_ns(o_.delay_ns + uint64_t{o_.delay_ns_per_kib} * value / 1024);
    }
    const size_t off = result_offset(c, window_, max_value_, seq);
    char* dst = results_->data() + off;
    ResultHeader h{};
    h.seq = seq;
    h.size = static_cast<uint32_t>(len);
    h.proc_time = encode_proc_time(now_ns() - round_start_ns_);
    h.mode = mode_of(c);
    h.check = result_check(h, slot);
    std::atomic_ref<uint32_t> status(*reinterpret_cast<uint32_t*>(dst));
    status.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(dst + sizeof(h), slot, len);
    std::memcpy(dst + sizeof(uint32_t), reinterpret_cast<const char*>(&h) + sizeof(uint32_t),
                sizeof(h) - sizeof(uint32_t));
    status.store(seq, std::memory_order_release);
    results_written_.fetch_add(1, std::memory_order_relaxed);
    if (h.mode != kModeReply) return;
    const fabric::RemoteRegion& ring = rings_[c];
    if (ring.length == 0) {
      ring_too_small_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Server-reply mode: the same bytes, one WRITE into the client's ring. The slot stays as it
    // is until the client has its result (it sends the slot's next request only then).
    reply_writes_.fetch_add(1, std::memory_order_relaxed);
    worker_.reply_write_st(c, epoch, results_->local(off, sizeof(h) + len),
                           ring.at(ring_offset(worker_.index(), window_, max_value_, seq)),
                           ring.key);
  }

  const Options o_;
  const size_t slot_bytes_;
  std::unique_ptr<fabric::RegisteredBuffer> results_;  // clients READ their results here
  std::unique_ptr<fabric::RegisteredBuffer> modes_;    // clients WRITE their mode flag here
  std::vector<fabric::RemoteRegion> rings_;            // by client index
  uint64_t round_start_ns_ = 0;
  // Batches (nullptr when off).
  size_t bslot_ = 0, rslot_ = 0;
  std::unique_ptr<fabric::RegisteredBuffer> batches_;   // clients WRITE request batches here
  std::unique_ptr<fabric::RegisteredBuffer> bresults_;  // ... and READ result batches here
  std::vector<BatchSlot> bstate_;                       // by (client, batch slot)
  std::vector<uint16_t> epochs_;                        // by client
  std::vector<uint32_t> batch_clients_;
  bool batch_stalled_ = false;
  std::string bcopy_;
  std::vector<Result> bres_;
  std::vector<store::Request> breqs_;
  std::vector<size_t> bmap_;  // breqs_[i] is entry bmap_[i]
  std::atomic<uint64_t> batches_taken_{0}, batched_{0}, bad_batches_{0}, bad_entries_{0},
      overflows_{0}, client_batch_size_{0};
  std::atomic<uint64_t> results_written_{0}, reply_writes_{0}, bad_mode_flags_{0},
      ring_too_small_{0};
};

}  // namespace

std::unique_ptr<proto::ServerProtocol> make_server(proto::ServerHost& w) {
  return std::make_unique<RfrpcServer>(w);
}

}  // namespace fabkv::rfrpc
