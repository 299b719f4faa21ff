#include "proto/rpc/server.h"

#include <cstring>

#include <fmt/format.h>

#include "common/log.h"
#include "fabric/error.h"
#include "proto/herd/options.h"
#include "proto/json.h"
#include "proto/rpc/handshake.h"
#include "store/hash.h"
#include "store/limits.h"
#include "store/stats.h"

namespace fabkv::rpc {

namespace {

using store::add_st;

// How long (in polls of one slot) a slot may look torn or wrong before it is declared
// malformed: a WRITE that is still landing is done within a few microseconds; garbage stays.
constexpr uint32_t kStallPolls = 20000;

// WireStatus starts with store::Status's values, in its order (proto/rpc/wire.h), so an engine
// status goes on the wire as it is (to_wire, proto/rpc/server.h).
constexpr bool same(WireStatus w, store::Status s) {
  return static_cast<uint8_t>(w) == static_cast<uint8_t>(s);
}
static_assert(same(WireStatus::kOk, store::Status::kOk) &&
              same(WireStatus::kNotFound, store::Status::kNotFound) &&
              same(WireStatus::kTooLarge, store::Status::kTooLarge) &&
              same(WireStatus::kInvalidKey, store::Status::kInvalidKey) &&
              same(WireStatus::kNoSpace, store::Status::kNoSpace) &&
              same(WireStatus::kVersionMismatch, store::Status::kVersionMismatch));

OpCode to_opcode(store::Op op) {
  return op == store::Op::kGet ? OpCode::kGet : op == store::Op::kPut ? OpCode::kPut : OpCode::kDel;
}

}  // namespace

struct RpcServer::ClientState {
  bool active = false;
  uint16_t epoch = 0;
  bool slots = false;            // it WRITEs requests into its slots (else it only SENDs)
  fabric::RemoteRegion staging;  // client memory the worker READs indirect bodies from
  uint32_t exp = 1;              // next expected seq (slots: requests are in order; wire.h)
  uint32_t stall = 0;            // polls the expected slot has looked wrong
  uint32_t in_flight = 0;        // indirect READs outstanding for this epoch
};

struct RpcServer::Pending {
  uint32_t client;
  uint16_t epoch;  // the client incarnation it came from: answered only if still current
  uint32_t seq;
  store::Request req;
};

RpcServer::RpcServer(proto::ServerHost& w, const proto::Info& p, Config cfg)
    : worker_(w),
      protocol_(p),
      cfg_(cfg),
      window_(w.settings().rpc.window),
      slot_size_(w.settings().rpc.slot_size),
      max_clients_(w.settings().max_clients),
      max_value_(w.settings().max_value),
      staging_slot_(store::kMaxKeySize + w.settings().max_value),
      batching_(w.settings().rpc.batching) {}

RpcServer::~RpcServer() {
  for (fabric::OpContext& ctx : read_ctx_) delete static_cast<Pending*>(ctx.user);
}

// A whole request as a message: header, key and value, then the trailer at the next 4-byte
// boundary (trailer_offset: at most 3 bytes of padding and 4 of trailer).
size_t RpcServer::max_request_bytes(size_t max_value) const {
  return sizeof(RequestHeader) + store::kMaxKeySize + max_value + 8;
}

size_t RpcServer::max_answer_bytes(size_t max_value) const {
  return sizeof(ResponseHeader) + max_value;
}

void RpcServer::open() {
  const size_t slots = size_t{max_clients_} * window_;
  const size_t answer_bytes = cfg_.answer_bytes != 0 ? cfg_.answer_bytes : worker_.recv_size();
  stride_ = (answer_bytes + 7) & ~size_t{7};
  tx_ = std::make_unique<fabric::RegisteredBuffer>(answer_fabric(), slots * stride_,
                                                   fabric::Access::kLocalOnly);
  if (cfg_.slots) {
    region_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(), slots * slot_size_,
                                                         fabric::Access::kRemoteWrite);
    staging_ = std::make_unique<fabric::RegisteredBuffer>(worker_.fabric(), slots * staging_slot_,
                                                          fabric::Access::kLocalOnly);
    read_ctx_.resize(slots);
    for (size_t i = 0; i < slots; ++i) {
      read_ctx_[i].tag = i;
      read_ctx_[i].owner = static_cast<proto::ServerProtocol*>(this);
    }
  }
  clients_.resize(max_clients_);
}

void RpcServer::welcome(Transport transport, proto::WelcomeParts* out) const {
  const proto::ServerSettings& o = worker_.settings();
  RpcLayout l;
  l.window = window_;
  l.slot_size = slot_size_;
  l.queues = worker_.isolated() ? 1u : o.rpc.queues;
  l.transport = to_string(transport);
  l.recv_size = worker_.recv_size();
  out->layout.update(nlohmann::json(l));
  if (region_) {
    fabric::RemoteRegion r = region_->remote();
    out->regions.push_back({fmt::format("{}.requests.{}", protocol_.name, worker_.index()), r.addr,
                            r.length, r.key, static_cast<uint32_t>(r.access)});
  }
}

void RpcServer::add_client_st(uint32_t c, uint16_t epoch, const proto::Info&,
                              const nlohmann::json& hello) {
  ClientState& s = clients_[c];
  s = ClientState{};
  s.active = true;
  s.epoch = epoch;
  s.slots = region_ != nullptr && hello.value("transport", std::string("write")) == "write";
  // TEST ONLY (proto::ClientTestHooks::first_seq): the client numbers its requests from here.
  if (const auto it = hello.find("first_seq"); it != hello.end() && it->is_number_unsigned())
    s.exp = first_seq(it->get<uint64_t>(), window_);
  std::erase(slot_clients_, c);
  if (s.slots) slot_clients_.push_back(c);
  if (hello.contains("region")) {
    try {
      s.staging = proto::region_from_json(hello.at("region"));
    } catch (const std::exception&) {
      s.staging = {};  // admit() checked it
    }
  }
  learn_client_st(c, hello);
}

// The client is gone: stop serving its slots and clear them, so nothing it left there is taken
// for the next client of this index; READs of its bodies die with its endpoint or are ignored
// by epoch when they complete.
void RpcServer::remove_client_st(uint32_t c) {
  ClientState& s = clients_[c];
  s.active = false;
  std::erase(slot_clients_, c);
  if (region_) {
    std::memset(region_->data() + slot_offset(c, window_, slot_size_, 0), 0,
                size_t{window_} * slot_size_);
    if (worker_.isolated()) {
      for (uint32_t r = 0; r < window_; ++r) {
        fabric::OpContext& ctx = read_ctx_[size_t{c} * window_ + r];
        delete static_cast<Pending*>(ctx.user);  // its READ dies with the endpoint
        ctx.user = nullptr;
      }
    }
  }
}

char* RpcServer::answer_slot(uint32_t c, uint32_t seq) const {
  return tx_->data() + (size_t{c} * window_ + seq_slot(seq, window_)) * stride_;
}

fabric::LocalBuffer RpcServer::answer_buffer(uint32_t c, uint32_t seq, size_t len) const {
  return tx_->local((size_t{c} * window_ + seq_slot(seq, window_)) * stride_, len);
}

void RpcServer::answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char*, size_t len) {
  worker_.reply_st(c, epoch, answer_buffer(c, seq, len));
}

// HERD sec. 4.2: poll the request region round-robin, one request per client per round
// (Guidelines sec. 4.1: a round's answers then leave as one batch).
void RpcServer::poll_st() {
  stalled_ = false;
  for (size_t i = 0; i < slot_clients_.size(); ++i) {
    const uint32_t c = slot_clients_[i];
    if (worker_.dropped_st(c)) continue;
    scan_st(c);
    if (!batching_ && !batch_.empty()) {
      flush_st();
      worker_.send_replies_st();
    }
  }
}

void RpcServer::scan_st(uint32_t c) {
  ClientState& s = clients_[c];
  if (s.in_flight > 0) return;  // an indirect body is being fetched for this client
  const uint32_t exp = s.exp;
  // A READ of an earlier client of this index may still hold this slot's context.
  if (read_ctx_[size_t{c} * window_ + seq_slot(exp, window_)].user != nullptr) return;
  char* slot = region_->data() + slot_offset(c, window_, slot_size_, seq_slot(exp, window_));
  RequestHeader h;
  const SlotRead r = read_request(slot, exp, window_, slot_size_, &h);
  if (r == SlotRead::kEmpty) {
    s.stall = 0;
    return;
  }
  if (r == SlotRead::kWhole) {
    s.stall = 0;
    if (h.epoch != s.epoch) {
      // A whole request of an earlier client of this index that landed after its slots were
      // cleared (tcp places data at our progress): not ours to answer or to call garbage.
      return;
    }
    // Not taken (the provider refused the indirect READ): it stays in its slot for the next
    // round.
    if (!accept_st(c, h, slot)) return;
    s.exp = next_seq(exp, window_);
    return;
  }
  // Landing, garbage, or lengths no slot holds (which a landing header can show for a
  // moment): give a landing WRITE time, then declare it malformed and tell the owner its
  // request `exp` failed, so that it is never stuck behind garbage.
  stalled_ = true;
  if (++s.stall < kStallPolls) return;
  s.stall = 0;
  if (r != SlotRead::kTooLong) add_st(counters_.garbage);
  add_st(counters_.malformed);
  s.exp = next_seq(exp, window_);
  reply_error_st(c, s.epoch, exp, r == SlotRead::kTooLong ? h.op : kOpUnknown,
                 WireStatus::kMalformed);
}

// A request that arrived as a message (HERD sec. 5.5); the worker checked its prefix.
void RpcServer::on_message_st(uint32_t c, const char* buf, size_t len) {
  ClientState& s = clients_[c];
  if (len < sizeof(RequestHeader)) {
    add_st(counters_.malformed);
    return;
  }
  RequestHeader h = load<RequestHeader>(buf);
  size_t body = request_body_bytes(h.flags, h.key_len, h.value_len);
  if (h.seq == 0 || sizeof(RequestHeader) + body > len ||
      request_check(h, buf + sizeof(RequestHeader), body) != h.check) {
    add_st(counters_.malformed);
    reply_error_st(c, s.epoch, h.seq, h.op, WireStatus::kMalformed);
    return;
  }
  if (!accept_st(c, h, buf)) {
    // Only an indirect body can be refused, and messages carry theirs inline.
    add_st(counters_.malformed);
    reply_error_st(c, s.epoch, h.seq, h.op, WireStatus::kMalformed);
  }
}

// `h` is the checked header of the whole request in `msg` (header, then body); build the
// engine request. Returns false only when an indirect body's READ could not be posted now
// (nothing was counted).
bool RpcServer::accept_st(uint32_t c, const RequestHeader& h, const char* msg) {
  const uint32_t seq = h.seq;
  ClientState& s = clients_[c];
  if (h.client != c || h.epoch != s.epoch) {
    add_st(counters_.requests);
    add_st(counters_.malformed);
    reply_error_st(c, s.epoch, seq, h.op, WireStatus::kMalformed);
    return true;
  }
  if (cfg_.next && static_cast<OpCode>(h.op) == OpCode::kNext) {
    add_st(counters_.requests);
    add_st(counters_.nexts);
    if (h.key_len != 0 || h.value_len != 0 || (h.flags & kFlagIndirect) != 0) {
      add_st(counters_.malformed);
      reply_error_st(c, s.epoch, seq, h.op, WireStatus::kMalformed);
    } else {
      nexts_.push_back({c, h.epoch, seq});
    }
    return true;
  }
  if (!cfg_.kv) {
    add_st(counters_.requests);
    add_st(counters_.malformed);
    reply_error_st(c, s.epoch, seq, h.op, WireStatus::kMalformed);
    return true;
  }
  Pending p;
  p.client = c;
  p.epoch = h.epoch;
  p.seq = seq;
  std::atomic<uint64_t>* op_counter = nullptr;
  switch (static_cast<OpCode>(h.op)) {
    case OpCode::kGet:
      p.req.op = store::Op::kGet;
      op_counter = &counters_.gets;
      break;
    case OpCode::kPut:
      p.req.op = store::Op::kPut;
      op_counter = &counters_.puts;
      break;
    case OpCode::kDel:
      p.req.op = store::Op::kDel;
      op_counter = &counters_.dels;
      break;
    default: break;
  }
  WireStatus refuse = WireStatus::kOk;
  if (op_counter == nullptr) refuse = WireStatus::kMalformed;
  else if (h.key_len == 0) refuse = WireStatus::kInvalidKey;
  else if (h.key_len > store::kMaxKeySize || h.value_len > max_value_ ||
           (p.req.op != store::Op::kPut && h.value_len != 0))
    refuse = WireStatus::kTooLarge;
  const char* body = msg + sizeof(RequestHeader);
  const bool indirect = (h.flags & kFlagIndirect) != 0;
  IndirectBody ib{};
  if (refuse == WireStatus::kOk && indirect) {
    ib = load<IndirectBody>(body);
    if (!staging_ || ib.length != size_t{h.key_len} + h.value_len || ib.length > staging_slot_)
      refuse = WireStatus::kMalformed;
  }
  p.req.put.expected_version = h.expected_version;
  p.req.put.expire_at = h.expire_at;
  if (refuse == WireStatus::kOk && indirect) {
    // The body lives in client memory: one READ fetches it (the slot only carries where).
    uint32_t slot_index = c * window_ + seq_slot(seq, window_);
    p.req.key = std::string_view(body, h.key_len);  // lengths only; rebased on arrival
    p.req.value = std::string_view(body, h.value_len);
    fabric::OpContext& ctx = read_ctx_[slot_index];
    fabric::LocalBuffer dst = staging_->local(size_t{slot_index} * staging_slot_, ib.length);
    long ret = worker_.read_st(c, dst, ib.addr, ib.rkey, &ctx);
    if (ret == fabric::kAgain) return false;
    add_st(counters_.requests);
    add_st(*op_counter);
    if (ret != 0) {
      add_st(counters_.read_errors);
      reply_error_st(c, s.epoch, seq, h.op, WireStatus::kInternal);
      return true;
    }
    add_st(counters_.indirect);
    ctx.user = new Pending(p);  // set-up path of a large request; freed on completion
    s.in_flight++;
    return true;
  }
  add_st(counters_.requests);
  if (op_counter != nullptr) add_st(*op_counter);
  if (refuse != WireStatus::kOk) {
    if (refuse == WireStatus::kMalformed) add_st(counters_.malformed);
    reply_error_st(c, s.epoch, seq, h.op, refuse);
    return true;
  }
  p.req.key = std::string_view(body, h.key_len);
  p.req.value = std::string_view(body + h.key_len, h.value_len);
  p.req.hash = store::hash_key(p.req.key);
  batch_.push_back(p);
  return true;
}

// An indirect body's READ completed (or failed).
void RpcServer::on_completion_st(fabric::Completion& c) {
  fabric::OpContext* ctx = c.context;
  Pending* p = static_cast<Pending*>(ctx->user);
  if (p == nullptr) return;
  ctx->user = nullptr;
  ClientState& s = clients_[p->client];
  const bool current = s.active && s.epoch == p->epoch;
  if (current && s.in_flight > 0) s.in_flight--;
  if (c.error != 0) {
    // The client died or gave a bad descriptor.
    add_st(counters_.read_errors);
    reply_error_st(p->client, p->epoch, p->seq, static_cast<uint8_t>(OpCode::kPut),
                   WireStatus::kInternal);
  } else if (current) {
    // The body arrived in staging: the request is ready for the engine.
    const char* body = staging_->data() + size_t{static_cast<uint32_t>(ctx->tag)} * staging_slot_;
    p->req.key = std::string_view(body, p->req.key.size());
    p->req.value = std::string_view(body + p->req.key.size(), p->req.value.size());
    p->req.hash = store::hash_key(p->req.key);
    batch_.push_back(*p);
  } else {
    // Its client left while the body was fetched (over tcp the bytes may already have been on
    // their way at the kill): dropped, and counted.
    add_st(counters_.reads_dropped);
  }
  delete p;
}

void RpcServer::reply_error_st(uint32_t c, uint16_t epoch, uint32_t seq, uint8_t op,
                               WireStatus st) {
  if (c >= max_clients_ || !clients_[c].active || clients_[c].epoch != epoch || seq == 0) return;
  ResponseHeader r{};
  r.seq = seq;
  r.status = static_cast<uint8_t>(st);
  r.op = op;
  r.worker = static_cast<uint16_t>(worker_.index());
  r.client = static_cast<uint16_t>(c);
  r.epoch = epoch;
  char* slot = answer_slot(c, seq);
  store(slot, r);
  answer_st(c, epoch, seq, slot, sizeof(ResponseHeader));
}

// Runs the round's requests through the engine's prefetch pipeline (HERD sec. 4.1.1: bucket,
// then item, prefetched while other requests advance) and answers every one.
void RpcServer::flush_st() {
  if (!nexts_.empty()) flush_nexts_st();
  if (batch_.empty()) return;
  add_st(counters_.batches);
  reqs_.clear();
  for (const Pending& p : batch_) reqs_.push_back(p.req);
  worker_.execute_st(reqs_, [&](size_t i, const store::Response& r) {
    const Pending& p = batch_[i];
    char* out = answer_slot(p.client, p.seq);
    ResponseHeader h{};
    h.seq = p.seq;
    h.status = static_cast<uint8_t>(to_wire(r.status));
    h.op = static_cast<uint8_t>(to_opcode(p.req.op));
    h.worker = static_cast<uint16_t>(worker_.index());
    h.client = static_cast<uint16_t>(p.client);
    h.epoch = p.epoch;
    h.version = r.version;
    size_t len = sizeof(ResponseHeader);
    if (p.req.op == store::Op::kGet && r.status == store::Status::kOk) {
      h.value_len = static_cast<uint32_t>(r.value.size());
      h.expire_at = r.expire_at;
      // Copy now: the view is only valid until the next mutation in this batch.
      std::memcpy(out + sizeof(ResponseHeader), r.value.data(), r.value.size());
      len += r.value.size();
    }
    len = extend_answer_st(p.req, r, out, len);
    store(out, h);
    // With an op log (every --oplog-sync mode: Worker::open_oplog), the answer waits in its
    // buffer (the client sends this slot's next request only after it) until the log has what
    // came before it: synced (always) or written (everysec, no) (docs/durability.md).
    // A refusal for a failing log shows nothing: it leaves at once.
    const bool refused = r.status == store::Status::kLogFailed;
    if (const uint64_t barrier = refused ? 0 : worker_.log_barrier_st(p.req.key); barrier != 0) {
      worker_.when_durable_st(barrier, [this, c = p.client, e = p.epoch, seq = p.seq, out, len] {
        if (clients_[c].active && clients_[c].epoch == e) answer_st(c, e, seq, out, len);
      });
      return;
    }
    answer_st(p.client, p.epoch, p.seq, out, len);
  });
  batch_.clear();
}

// Guidelines sec. 4.2: the round's N "next" requests claim N values with one atomic add on the
// shared counter and get them in the order they were collected, so a client's values increase
// with its sequence numbers (a client talks to one worker: proto/rpc/client.cc).
void RpcServer::flush_nexts_st() {
  add_st(counters_.batches);
  // Only for clients still here: a value claimed for a departed one would be a gap.
  std::erase_if(nexts_, [&](const Next& n) {
    return !clients_[n.client].active || clients_[n.client].epoch != n.epoch;
  });
  if (nexts_.empty()) return;
  const uint64_t first = claim_st(nexts_.size());
  if (first == 0) add_st(counters_.next_errors);
  for (size_t i = 0; i < nexts_.size(); ++i) {
    const Next& n = nexts_[i];
    char* out = answer_slot(n.client, n.seq);
    ResponseHeader h{};
    h.seq = n.seq;
    h.status = static_cast<uint8_t>(first == 0 ? WireStatus::kInternal : WireStatus::kOk);
    h.op = static_cast<uint8_t>(OpCode::kNext);
    h.worker = static_cast<uint16_t>(worker_.index());
    h.client = static_cast<uint16_t>(n.client);
    h.epoch = n.epoch;
    h.version = first == 0 ? 0 : first + i;
    store(out, h);
    answer_st(n.client, n.epoch, n.seq, out, sizeof(ResponseHeader));
  }
  nexts_.clear();
}

nlohmann::json RpcServer::stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  nlohmann::json j = {{"requests", r(counters_.requests)},
                      {"gets", r(counters_.gets)},
                      {"puts", r(counters_.puts)},
                      {"dels", r(counters_.dels)},
                      {"malformed", r(counters_.malformed)},
                      {"garbage_slots", r(counters_.garbage)},
                      {"indirect", r(counters_.indirect)},
                      {"read_errors", r(counters_.read_errors)},
                      {"reads_dropped", r(counters_.reads_dropped)},
                      {"batches", r(counters_.batches)}};
  if (cfg_.next) {
    j["nexts"] = r(counters_.nexts);
    j["next_errors"] = r(counters_.next_errors);
  }
  return j;
}

namespace {

Transport configured_transport(const proto::ServerHost& w) {
  return herd::resolve(w.settings().herd.transport, w.provider());
}

RpcServer::Config by_transport(Transport t, RpcServer::Config c) {
  c.slots = t == Transport::kWrite;
  c.messages = !c.slots;
  return c;
}

}  // namespace

TransportServer::TransportServer(proto::ServerHost& w, const proto::Info& p, Config cfg)
    : RpcServer(w, p, by_transport(configured_transport(w), cfg)),
      transport_(configured_transport(w)) {}

std::string check_transport(const nlohmann::json& hello, std::string_view protocol,
                            Transport served, bool fixed) {
  if (!hello.contains("transport")) return "";
  if (!hello.at("transport").is_string()) return "transport must be a string";
  const std::string asked = hello.at("transport").get<std::string>();
  if (asked == to_string(served)) return "";
  if (fixed)
    return fmt::format(
        "the server takes {} requests by {} only; this client asked for {}: "
        "start the client without --transport",
        protocol, to_string(served), asked);
  return fmt::format(
      "the server takes {} requests by {} (its --transport); this client asked "
      "for {}: start the client with --transport {}, or without it to follow "
      "the server",
      protocol, to_string(served), asked, to_string(served));
}

std::string TransportServer::admit(const proto::Info& p, const nlohmann::json& hello, uint32_t,
                                   uint16_t, proto::WelcomeParts* out) {
  if (std::string why = check_transport(hello, p.name, transport_, false); !why.empty()) return why;
  welcome(transport_, out);
  return "";
}

nlohmann::json TransportServer::stats() const {
  nlohmann::json j = RpcServer::stats();
  j["transport"] = to_string(transport_);
  return j;
}

}  // namespace fabkv::rpc
