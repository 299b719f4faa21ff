#include "proto/rpc/client.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "fabric/error.h"
#include "fabric/isolation.h"
#include "fabric/retry.h"
#include "proto/handshake.h"
#include "proto/json.h"
#include "proto/rpc/handshake.h"
#include "store/hash.h"
#include "store/limits.h"

namespace fabkv::rpc {

namespace {
constexpr size_t kDefaultStaging = size_t{1} << 20;
constexpr size_t kStagingAlign = 64;
// A multi-recv buffer takes at least this many of the largest answers before it is released,
// and is at least kMinRxBuffer bytes (as a worker's buffers for one client, server/worker.cc).
constexpr size_t kRxAnswersPerBuffer = 4;
constexpr size_t kMinRxBuffer = size_t{256} << 10;
}  // namespace

// Holds a multi-recv buffer for the callback of an answer in it: while any runs (nested ones
// too), a release of the buffer waits (repost_released).
class RpcClient::ViewGuard {
 public:
  explicit ViewGuard(RxBuffer& b) : b_(b) { ++b_.views; }
  ~ViewGuard() { --b_.views; }
  ViewGuard(const ViewGuard&) = delete;
  ViewGuard& operator=(const ViewGuard&) = delete;

 private:
  RxBuffer& b_;
};

// The indirect path's client memory: a bump allocator that restarts at 0 whenever nothing is
// in use. Indirect requests are the rare, large ones, so simplicity beats packing.
class RpcClient::StagingArena {
 public:
  explicit StagingArena(size_t size) : size_(size) {}
  bool alloc(size_t len, size_t* off) {
    len = (len + kStagingAlign - 1) & ~(kStagingAlign - 1);
    if (in_use_ == 0) head_ = 0;
    if (len > size_ - head_) return false;
    *off = head_;
    head_ += len;
    in_use_++;
    return true;
  }
  void release() {
    if (in_use_ > 0 && --in_use_ == 0) head_ = 0;
  }

 private:
  size_t size_, head_ = 0, in_use_ = 0;
};

RpcClient::RpcClient(proto::ClientHost& host, const ClientConfig& config)
    : host_(host), config_(config) {
  const proto::ClientSettings& o = host.settings();
  staging_bytes_ = o.staging_bytes ? o.staging_bytes : kDefaultStaging;
  timeout_ms_ = o.timeout_ms;
  first_seq_ = o.test.first_seq;
  garbage_request_ = o.test.garbage_request;
}

RpcClient::~RpcClient() = default;

void RpcClient::bad_layout(const std::string& why) {
  throw ClientError(Status::kMalformed, "fabkv: unusable layout from the server: " + why);
}

fabric::RemoteRegion RpcClient::region_of(const control::Welcome& w, const std::string& name) {
  auto it = std::find_if(w.regions.begin(), w.regions.end(),
                         [&](const control::RegionDescriptor& r) { return r.name == name; });
  if (it == w.regions.end()) bad_layout("no region " + name);
  return {it->addr, it->length, it->key, static_cast<fabric::Access>(it->access & 3)};
}

void RpcClient::hello(nlohmann::json* payload) {
  staging_buf_.reset();
  staging_buf_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), staging_bytes_,
                                                            fabric::Access::kRemoteRead);
  staging_ = std::make_unique<StagingArena>(staging_bytes_);
  staging_remote_ = staging_buf_->remote();
  (*payload)["region"] = proto::region_to_json(staging_remote_);
  if (first_seq_ != 0) (*payload)["first_seq"] = first_seq_;  // TEST ONLY (ClientTestHooks)
}

size_t RpcClient::min_multi_recv() const {
  if (!config_.recv_answers) return 0;
  // The answer a server started with the default max_value sends at most
  // (RpcServer::max_answer_bytes, padded as Worker::open_endpoints pads it): one Hello then.
  const size_t guess = fabric::lock_free_capacity(host_.fabric(), sizeof(ResponseHeader) +
                                                                      store::kDefaultMaxValueSize);
  return std::max(guess, rx_min_);
}

void RpcClient::counters(nlohmann::json* out) const {
  (*out)["seq_wraps"] = seq_wraps_;
  if (!config_.recv_answers) return;
  (*out)["rx_reposts"] = rx_reposts_;
  (*out)["rx_reposts_deferred"] = rx_deferred_;
  (*out)["rx_min_raised"] = rx_min_raised_;
}

void RpcClient::parse(const control::Welcome& w, const nlohmann::json& layout) {
  const auto session = read_layout<proto::SessionLayout>(layout);
  const auto rpc = read_layout<RpcLayout>(layout);
  if (rpc.wire != kWireVersion)
    bad_layout(fmt::format("wire version {} (this client speaks {})", rpc.wire, kWireVersion));
  client_ = session.client;
  epoch_ = session.epoch;
  n_workers_ = session.workers;
  window_ = rpc.window;
  slot_size_ = rpc.slot_size;
  queues_ = rpc.queues;
  max_value_ = session.max_value;
  recv_size_ = rpc.recv_size;
  if (rpc.transport != "write" && rpc.transport != "send") bad_layout("transport " + rpc.transport);
  send_transport_ = rpc.transport == "send";
  if (n_workers_ == 0 || n_workers_ > 65536) bad_layout("workers out of range");
  if (window_ == 0 || window_ > 4096) bad_layout("window out of range");
  if (queues_ == 0) bad_layout("queues = 0");
  if (slot_size_ < request_bytes(sizeof(IndirectBody)))
    bad_layout(fmt::format("slot_size {} cannot hold an indirect request", slot_size_));
  if (max_value_ > store::kMaxValueSizeLimit) bad_layout("max_value over 16 MiB");
  if (config_.recv_answers && recv_size_ < sizeof(ResponseHeader))
    bad_layout("recv_size under a response header");
  if (w.fabric_addresses.size() != size_t{n_workers_} * queues_)
    bad_layout(fmt::format("{} fabric addresses for {} workers x {} queues",
                           w.fabric_addresses.size(), n_workers_, queues_));
}

proto::ClientProtocol::Opened RpcClient::open(const control::Welcome& w,
                                              const nlohmann::json& layout) {
  parse(w, layout);
  bool again = false;
  size_t needed = store::kMaxKeySize + max_value_ + kStagingAlign;
  if (needed > staging_bytes_) {
    // The server allows larger values than our staging region holds: the region travels in
    // the Hello, so the session says goodbye and comes back with one that fits (rare
    // configurations only).
    staging_bytes_ = needed;
    again = true;
  }
  // Answers larger than the endpoint's multi-recv minimum would overrun a buffer's end: the
  // next endpoint is made with the Welcome's recv_size (a server with a larger --max-value).
  const size_t largest = fabric::lock_free_capacity(host_.fabric(), recv_size_);
  if (config_.recv_answers && host_.endpoint().min_multi_recv() < largest) {
    rx_min_ = largest;
    rx_min_raised_++;
    again = true;
  }
  if (again) return proto::ClientProtocol::Opened::kHelloAgain;
  ep_ = &host_.endpoint();
  fabric::Fabric& fabric = host_.fabric();
  // Every response endpoint goes into the AV: answers come from any of a worker's k queues,
  // and on shm a receiver must know a sender.
  std::vector<fabric::PeerAddr> peers;
  peers.reserve(w.fabric_addresses.size());
  for (const auto& a : w.fabric_addresses) peers.push_back(ep_->insert_peer(a));
  workers_.clear();
  workers_.resize(n_workers_);
  for (uint32_t i = 0; i < n_workers_; ++i) {
    Worker& wk = workers_[i];
    wk.peer = peers[size_t{i} * queues_];
    // The seq before the first (0 for 1: next_seq(0) is 1).
    wk.last_seq = first_seq(first_seq_, window_) - 1;
    wk.slots = std::vector<Slot>(window_);
    for (uint32_t s = 0; s < window_; ++s) {
      wk.slots[s].tx_ctx.user = &kTxMarker;
      wk.slots[s].tx_ctx.tag = (uint64_t{i} << 32) | s;
    }
    if (!send_transport_) {
      std::string name = fmt::format("{}.{}", config_.requests_region, i);
      wk.region = region_of(w, name);
      size_t end = slot_offset(client_, window_, slot_size_, window_ - 1) + slot_size_;
      if (end > wk.region.length)
        bad_layout(fmt::format("{} ({} bytes) has no slots for client {}", name, wk.region.length,
                               client_));
    }
  }
  size_t slots_total = size_t{n_workers_} * window_;
  // Messages of a size the provider would carry under a process-shared lock are sent padded
  // (fabric/isolation.h): the send transport's slots and every receive buffer have room.
  tx_stride_ = send_transport_ ? fabric::lock_free_capacity(fabric, slot_size_) : slot_size_;
  tx_ = std::make_unique<fabric::RegisteredBuffer>(fabric, slots_total * tx_stride_,
                                                   fabric::Access::kLocalOnly);
  if (config_.recv_answers) open_receive_buffers();
  return proto::ClientProtocol::Opened::kReady;
}

// kRxBuffers multi-recv buffers, each of kRxAnswersPerBuffer largest answers at least.
void RpcClient::open_receive_buffers() {
  rx_per_ = std::max(kMinRxBuffer, kRxAnswersPerBuffer * ep_->min_multi_recv());
  rx_ = std::make_unique<fabric::RegisteredBuffer>(host_.fabric(), kRxBuffers * rx_per_,
                                                   fabric::Access::kLocalOnly);
  rx_bufs_ = std::vector<RxBuffer>(kRxBuffers);
  for (size_t b = 0; b < kRxBuffers; ++b) {
    rx_bufs_[b].ctx.user = &kRecvMarker;
    rx_bufs_[b].ctx.tag = b;
    fabric::check(ep_->recv_multi(rx_->local(b * rx_per_, rx_per_), &rx_bufs_[b].ctx),
                  "fi_recvmsg(multi)");
  }
}

uint32_t RpcClient::worker_of(std::string_view key) const {
  return store::partition_of(store::hash_key(key), n_workers_);
}

// Runs a request's callback once, then marks it finished (the callback may post more).
void RpcClient::finish(Slot& s, Status st, std::string_view value, uint64_t version) {
  Callback cb = std::move(s.cb);
  s.cb = nullptr;
  if (cb) cb(st, value, version);
}

void RpcClient::release_staging(Slot& s) {
  if (s.staging_off != kNoStaging) {
    staging_->release();
    s.staging_off = kNoStaging;
  }
}

void RpcClient::set_zombie(Slot& s, bool z) {
  if (s.zombie == z) return;
  s.zombie = z;
  if (z) zombies_++;
  else zombies_--;
}

size_t RpcClient::complete(fabric::Completion& c) {
  if (c.context->user == &kRecvMarker) return on_recv(c);
  return on_tx(c);
}

size_t RpcClient::on_tx(fabric::Completion& c) {
  uint32_t w = static_cast<uint32_t>(c.context->tag >> 32);
  uint32_t si = static_cast<uint32_t>(c.context->tag & 0xffffffffu);
  if (w >= workers_.size() || si >= window_) return 0;
  Slot& s = workers_[w].slots[si];
  s.tx_pending = false;
  if (c.error == 0) {
    // A SEND built in staging (send transport, large request) is done with its bytes once
    // the SEND completed; an indirect WRITE's staging waits for the worker's READ, i.e.
    // the answer.
    if (send_transport_ && s.staging_off != kNoStaging && !s.awaiting && !s.zombie)
      release_staging(s);
    return 0;
  }
  // The request never reached the server: the peer is gone (or unreachable).
  host_.alive(true);
  if (!s.awaiting) {
    if (!s.zombie) release_staging(s);
    return 0;
  }
  s.awaiting = false;
  set_zombie(s, false);
  in_flight_--;
  release_staging(s);
  finish(s, Status::kServerGone, {}, 0);
  return 1;
}

size_t RpcClient::answer(const ResponseHeader& h, std::string_view value, Fate* fate) {
  Fate ignored;
  if (fate == nullptr) fate = &ignored;
  // Only answers to this incarnation of our index: a response the server built for a
  // departed client whose index we took must never complete one of our requests.
  *fate = Fate::kForeign;
  if (h.worker >= workers_.size() || h.client != client_ || h.epoch != epoch_) return 0;
  *fate = Fate::kUnmatched;
  Worker& wk = workers_[h.worker];
  // A request the worker found as garbage is answered kMalformed without its op (wire.h).
  const bool any_op = h.op == kOpUnknown &&
                      h.status == static_cast<uint8_t>(WireStatus::kMalformed);
  for (Slot& s : wk.slots) {
    if ((s.awaiting || s.zombie) && s.seq == h.seq && (s.op == h.op || any_op)) {
      bool run = s.awaiting;
      if (s.awaiting) in_flight_--;
      s.awaiting = false;
      set_zombie(s, false);
      if (!send_transport_ || !s.tx_pending) release_staging(s);
      *fate = run ? Fate::kRan : Fate::kLate;
      if (!run) return 0;
      finish(s, from_wire(h.status), value, h.version);
      return 1;
    }
  }
  return 0;
}

// A completion of a multi-recv buffer: an answer in it, or its release by the provider (the
// shared receive queue of libfabric 2.1, which shm and tcp;ofi_rxm use, releases a buffer with a
// completion of its own, FI_MULTI_RECV and no message, once its last message has completed); a
// message that carries the flag itself is handled as both.
size_t RpcClient::on_recv(fabric::Completion& c) {
  RxBuffer& rb = rx_bufs_[c.context->tag];
  // A failed message leaves its buffer posted; a buffer cancelled (ECANCELED: the endpoint is
  // closing) is not posted again.
  if (c.error != 0 && (!c.multi_recv_done || c.error == 125 /* ECANCELED */)) return 0;
  if (c.multi_recv_done && !rb.released) {
    // Marked before the answer's callback runs: a callback that throws leaves it marked, and
    // the next completion or expire() posts it.
    rb.released = true;
    rx_released_++;
    if (rb.views > 0) rx_deferred_++;  // an outer callback reads it
  }
  const size_t ran = c.error == 0 && c.len > 0 && c.buf != nullptr ? on_answer(rb, c) : 0;
  if (rx_released_ > 0) repost_released();
  return ran;
}

// The answer that landed at c.buf in buffer rb, its callback run with the buffer held.
size_t RpcClient::on_answer(RxBuffer& rb, const fabric::Completion& c) {
  const char* base = rx_->data() + c.context->tag * rx_per_;
  const char* msg = static_cast<const char*>(c.buf);
  if (msg < base || msg >= base + rx_per_) return 0;  // not in this buffer: never ours
  ParsedResponse r;
  if (!parse_response(msg, std::min<size_t>(c.len, base + rx_per_ - msg), &r)) return 0;
  ViewGuard held(rb);
  return answer(r.header, r.value);
}

// Posts again every released buffer that no running callback reads. One the provider refuses
// (a full receive queue) waits for the next completion of ours or the next expire().
void RpcClient::repost_released() {
  for (size_t b = 0; b < rx_bufs_.size(); ++b) {
    RxBuffer& rb = rx_bufs_[b];
    if (!rb.released || rb.views > 0) continue;
    if (ep_->recv_multi(rx_->local(b * rx_per_, rx_per_), &rb.ctx) != 0) continue;
    rb.released = false;
    rx_released_--;
    rx_reposts_++;
  }
}

size_t RpcClient::expire(bool all) {
  if (rx_released_ > 0) repost_released();
  size_t ran = 0;
  auto now = Clock::now();
  for (Worker& wk : workers_) {
    for (Slot& s : wk.slots) {
      if (s.zombie && !s.awaiting && (all || now >= s.deadline)) {
        // Given up on for a second timeout: the answer is not coming.
        set_zombie(s, false);
        release_staging(s);
        if (all) s.tx_pending = false;
      }
      if (!s.awaiting || (!all && now < s.deadline)) continue;
      s.awaiting = false;
      in_flight_--;
      if (all) {
        s.tx_pending = false;
        release_staging(s);
      } else {
        // Keep the slot (and the staging bytes the worker may still READ) until the late
        // answer arrives or another timeout passes.
        set_zombie(s, true);
        s.deadline = now + std::chrono::milliseconds(timeout_ms_);
      }
      finish(s, all ? Status::kServerGone : Status::kTimeout, {}, 0);
      ran++;
    }
  }
  return ran;
}

// submit()'s first step: what the request carries, checked, and the worker it goes to.
// Nothing is claimed or sent.
Status RpcClient::route(const proto::ClientRequest& r, uint32_t* w) const {
  if (host_.gone()) return Status::kServerGone;
  if (r.op == proto::ClientOp::kNext) {
    if (!config_.next) return Status::kError;  // not a sequencer
    if (!r.key.empty() || !r.value.empty()) return Status::kInvalidKey;
    *w = client_ % n_workers_;
    return Status::kOk;
  }
  const Status v = validate(r.key, r.value.size(), max_value_);
  if (v == Status::kOk) *w = worker_of(r.key);
  return v;
}

RpcClient::Carriage RpcClient::carriage(size_t body) const {
  if (request_bytes(body) <= slot_size_) return Carriage::kInline;
  return send_transport_ ? Carriage::kStagedSend : Carriage::kIndirect;
}

// Waits for worker wk's next slot and `staging_len` staging bytes; callbacks run meanwhile may
// take slots, so both are re-checked on every round and nothing is claimed until both are
// there. kOk with *si (and *off when staging_len > 0) set.
Status RpcClient::wait_for_slot(const Worker& wk, size_t staging_len, const Deadline& d,
                                uint32_t* si, size_t* off) {
  while (true) {
    *si = seq_slot(next_seq(wk.last_seq, window_), window_);
    if (wk.slots[*si].free() && (staging_len == 0 || staging_->alloc(staging_len, off)))
      return Status::kOk;
    host_.drive();
    if (!host_.alive()) return Status::kServerGone;
    if (d.expired()) return Status::kTimeout;
  }
}

// Writes the request where it travels from (wire.h): inline in worker w's slot si of tx_; its
// key and value in staging and an IndirectBody in the slot; or, by SEND, whole in staging.
// Returns the bytes to post.
fabric::LocalBuffer RpcClient::encode(uint32_t w, uint32_t si, Carriage how, const RequestFields& f,
                                      const proto::ClientRequest& r, size_t off) {
  fabric::Fabric& fabric = host_.fabric();
  const std::string_view key = r.key, value = r.value;
  fabric::LocalBuffer src;
  char* header = tx_->data() + tx_offset(w, si);
  if (how == Carriage::kIndirect) {
    char* st = staging_buf_->data() + off;
    std::memcpy(st, key.data(), key.size());
    if (!value.empty()) std::memcpy(st + key.size(), value.data(), value.size());
    IndirectBody ib{staging_remote_.at(off), staging_remote_.key, key.size() + value.size()};
    size_t n = encode_indirect(header, f, static_cast<uint16_t>(key.size()),
                               static_cast<uint32_t>(value.size()), ib);
    src = tx_->local(tx_offset(w, si), n);
  } else if (how == Carriage::kStagedSend) {
    header = staging_buf_->data() + off;
    size_t n = encode_inline(header, f, key, value);
    src = staging_buf_->local(off, fabric::lock_free_len(fabric, n));
  } else {
    size_t n = encode_inline(header, f, key, value);
    src = tx_->local(tx_offset(w, si), send_transport_ ? fabric::lock_free_len(fabric, n) : n);
  }
  if (garbage_request_ != 0 && ++requests_ == garbage_request_)
    header[offsetof(RequestHeader, check)] ^= 1;  // TEST ONLY (ClientTestHooks)
  return src;
}

// Posts slot si's request to worker w (by WRITE into our slot of its region, or by SEND) and
// settles the slot: kOk once posted, the callback then runs exactly once; anything else,
// nothing reached the server and the slot and its staging are free again.
Status RpcClient::post(uint32_t w, uint32_t si, const fabric::LocalBuffer& src, Callback&& cb,
                       const Deadline& d) {
  Worker& wk = workers_[w];
  Slot& s = wk.slots[si];
  s.cb = std::move(cb);
  s.awaiting = true;
  s.tx_pending = true;
  // Not expirable until posted: the retry loop below polls, and an expiry there would run
  // the callback of a request that then reports "not sent".
  s.deadline = Clock::time_point::max();
  in_flight_++;
  fabric::PostOptions po;
  po.inlined = src.len <= ep_->inject_size();
  // An inlined request is copied out by the post itself (fi_inject, fi_inject_write): nothing
  // to wait for, no completion to reap, and its buffer is free again at once. HERD's clients
  // post their requests inlined and unsignaled too (HERD sec. 3.2, 4.2). callgrind, herd on
  // shm: ~230 instructions less in the provider's send path per request, and one completion
  // fewer to poll.
  po.signaled = !po.inlined;
  long ret = fabric::post_with_retry(
      [&] {
        return send_transport_
                   ? ep_->send(src, wk.peer, &s.tx_ctx, po)
                   : ep_->write(src, wk.peer,
                                wk.region.at(slot_offset(client_, window_, slot_size_, si)),
                                wk.region.key, &s.tx_ctx, po);
      },
      // The first operation to a new peer waits for its progress; a full queue for ours.
      [&] { host_.drive(); }, d, [&] { return host_.alive(); });
  if (ret == 0) {
    s.deadline = d.at();
    if (!po.signaled) s.tx_pending = false;
    return Status::kOk;
  }
  // Not posted: nothing reaches the server, the callback will not run.
  if (s.awaiting) in_flight_--;
  s.awaiting = false;
  s.tx_pending = false;
  s.cb = nullptr;
  release_staging(s);
  if (host_.gone()) return Status::kServerGone;
  return ret == fabric::kAgain ? Status::kTimeout : Status::kError;
}

// Route, wait for a slot, number, encode, post: HERD sec. 4.2's request path.
Status RpcClient::submit(const proto::ClientRequest& r, Callback&& cb) {
  uint32_t w = 0;
  if (const Status v = route(r, &w); v != Status::kOk) return v;
  Worker& wk = workers_[w];
  const Carriage how = carriage(r.key.size() + r.value.size());
  size_t staging_len = 0;
  if (how == Carriage::kIndirect) staging_len = r.key.size() + r.value.size();
  if (how == Carriage::kStagedSend)
    staging_len = fabric::lock_free_len(host_.fabric(),
                                        request_bytes(r.key.size() + r.value.size()));
  const Deadline d = Deadline::after_ms(timeout_ms_);
  uint32_t si = 0;
  size_t off = kNoStaging;
  if (const Status st = wait_for_slot(wk, staging_len, d, &si, &off); st != Status::kOk) return st;
  // The slot was derived from this seq, as the worker derives it (wire.h).
  const uint32_t seq = next_seq(wk.last_seq, window_);
  if (seq < wk.last_seq) seq_wraps_++;
  wk.last_seq = seq;
  Slot& s = wk.slots[si];
  s.seq = seq;
  s.op = static_cast<uint8_t>(to_opcode(r.op));
  s.staging_off = off;
  RequestFields f;
  f.seq = seq;
  f.client = client_;
  f.epoch = epoch_;
  f.op = to_opcode(r.op);
  f.expire_at = r.expire_at;
  f.expected_version = r.expected_version;
  return post(w, si, encode(w, si, how, f, r, off), std::move(cb), d);
}

}  // namespace fabkv::rpc
