#include "server/herd_worker.h"

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/log.h"
#include "fabric/error.h"
#include "fabric/isolation.h"
#include "server/oplog.h"
#include "store/hash.h"
#include "store/limits.h"
#include "store/pilaf_engine.h"

namespace fabkv::server {

using rpc::RequestHeader;
using rpc::ResponseHeader;
using rpc::WireStatus;

namespace {

// How long (in polls of one slot) a slot may look torn or wrong before it is declared
// malformed: a WRITE that is still landing is done within a few microseconds; garbage stays.
constexpr uint32_t kStallPolls = 20000;
// Every k-th response is signaled so the transmit queue's credits keep flowing
// (Guidelines sec. 3.1: selective signaling).
constexpr uint64_t kSignalEvery = 16;
// SEND transport: multi-recv buffers per receiving endpoint.
constexpr size_t kRxBuffers = 2;
// A peer whose SENDs the provider has refused for this long is dropped (the client died inside
// the provider, or stopped draining its queue); meanwhile its responses wait in its backlog and
// the worker serves everyone else.
constexpr int64_t kPeerStallMs = 250;
// Isolated clients' endpoints: a client has at most W requests per worker in flight, so small
// queues do; the command queue (rx) also takes one notice per READ/WRITE the client posts, and
// the worker drains it every round.
constexpr size_t kClientTxDepth = 256, kClientRxDepth = 256;

WireStatus to_wire(store::Status s) {
  switch (s) {
    case store::Status::kOk: return WireStatus::kOk;
    case store::Status::kNotFound: return WireStatus::kNotFound;
    case store::Status::kTooLarge: return WireStatus::kTooLarge;
    case store::Status::kInvalidKey: return WireStatus::kInvalidKey;
    case store::Status::kNoSpace: return WireStatus::kNoSpace;
    case store::Status::kVersionMismatch: return WireStatus::kVersionMismatch;
  }
  return WireStatus::kInternal;
}

}  // namespace

struct HerdWorker::ClientSlotState {
  bool active = false;
  uint16_t epoch = 0;
  fabric::PeerAddr peer = fabric::kNoPeer;
  fabric::RemoteRegion staging;
  uint32_t exp = 1;         // next expected seq (WRITE transport: requests are in order)
  uint32_t stall = 0;       // polls the expected slot has looked wrong
  uint32_t in_flight = 0;   // indirect READs outstanding for this epoch
  bool slots = true;        // scan its request slots (a message-only client has none in use)
  bool dropped = false;     // dropped for refusing SENDs; no longer served
  uint64_t sent = 0;        // SENDs posted on its own endpoint (isolated)
  std::deque<Outgoing> backlog;   // responses the provider refused, oldest first
  Clock::time_point stuck_since{};  // when backlog's head was first refused
  std::vector<uint8_t> address;   // its endpoint name (to reclaim a dead shm peer's region)
};

struct HerdWorker::Pending {
  uint32_t client;
  uint16_t epoch;  // the client incarnation it came from: answered only if still current
  uint32_t seq;
  store::Request req;
};

HerdWorker::HerdWorker(uint32_t index, const ServerOptions& o, const fabric::FabricOptions& fo)
    : index_(index),
      window_(o.rpc.window),
      slot_size_(o.rpc.slot_size),
      max_clients_(o.max_clients),
      queues_(o.rpc.queues),
      max_value_(o.max_value),
      staging_slot_(store::kMaxKeySize + o.max_value),
      transport_(o.herd.transport),
      messages_(o.herd.transport == rpc::Transport::kSend || serves_pilaf(o)),
      batching_(o.rpc.batching),
      core_(o.cores.empty() ? static_cast<int>(index) : o.cores[index % o.cores.size()]) {
  fabric::FabricOptions f = fo;
  f.quiet = index > 0;  // one provider log line per server is enough
  fabric_ = fabric::Fabric::open(f);
  isolated_ = fabric::isolate_peers(*fabric_);
  // Responses (header + value) and requests are padded where the provider would otherwise
  // take a process-shared lock (fabric/isolation.h): size every buffer for that.
  recv_size_ = fabric::lock_free_capacity(*fabric_, sizeof(ResponseHeader) + max_value_);
  tx_stride_ = (recv_size_ + 7) & ~size_t{7};
  fabric::EndpointOptions eo;
  eo.tx_depth = 1024;
  eo.rx_depth = 1024;
  eo.cq_depth = 8192;
  eo.selective_completion = true;
  eo.av_size = max_clients_;
  eo.min_multi_recv = fabric::lock_free_capacity(*fabric_, sizeof(RequestHeader) + staging_slot_ + 8);
  if (!isolated_) {
    for (uint32_t q = 0; q < queues_; ++q)
      eps_.push_back(std::make_unique<fabric::Endpoint>(*fabric_, eo));
  }
  client_eo_ = eo;
  client_eo_.tx_depth = kClientTxDepth;
  client_eo_.rx_depth = kClientRxDepth;
  client_eo_.cq_depth = 2 * (kClientTxDepth + kClientRxDepth);
  client_eo_.av_size = 4;

  store::EngineOptions so;
  so.memory_bytes = o.memory / o.workers;
  so.max_value_size = o.max_value;
  auto kind = store::engine_kind_from_string(o.engine).value_or(store::EngineKind::kCache);
  if (kind == store::EngineKind::kPilaf) {
    store::PilafOptions po;
    po.initial_entries = o.pilaf.entries;
    po.initial_extent_bytes = o.pilaf.extents;
    po.retire_grace_ms = o.pilaf.grace_ms;
    auto engine = std::make_unique<store::PilafEngine>(so, po);
    pilaf_ = engine.get();
    engine_ = std::move(engine);
    // Every generation's table and extents are registered read-only for clients; a growth
    // registers the new one before the old one is marked retired (Pilaf sec. 3.3).
    store::PilafHooks hooks;
    hooks.on_live = [this](const store::PilafGeneration& g) { pilaf_live(g); };
    hooks.on_release = [this](const store::PilafGeneration& g) { pilaf_release(g); };
    pilaf_->set_hooks(std::move(hooks));
  } else {
    engine_ = store::make_engine(kind, so);
  }
  if (!o.oplog.empty()) {
    // Replay first (the engine starts with what the log says), then append to the same file.
    std::string path = fmt::format("{}.{}", o.oplog, index_);
    auto put = [&](std::string_view k, std::string_view v, uint64_t version, uint32_t expire_at) {
      store::PutOptions p;
      p.expire_at = expire_at;
      p.restore_version = version;  // the logged CAS version; the engine's counter moves past it
      engine_->put(k, v, p);
    };
    auto del = [&](std::string_view k) { engine_->del(k); };
    OpLog::ReplayResult rr = OpLog::replay(path, put, del);
    if (rr.records > 0 || rr.torn_tail)
      spdlog::info("worker {}: replayed {} records from {}{}", index_, rr.records, path,
                   rr.torn_tail ? fmt::format(" (ignored a torn tail after byte {})", rr.valid_bytes)
                                : std::string());
    oplog_ = std::make_unique<OpLog>(path, o.oplog_fsync);
  }

  const size_t slots = size_t{max_clients_} * window_;
  region_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, slots * slot_size_,
                                                       fabric::Access::kRemoteWrite);
  tx_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, slots * tx_stride_,
                                                   fabric::Access::kLocalOnly);
  staging_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, slots * staging_slot_,
                                                        fabric::Access::kLocalOnly);
  read_ctx_.resize(slots);
  for (size_t i = 0; i < slots; ++i) read_ctx_[i].tag = i;
  clients_.resize(max_clients_);
  idle_ = std::make_unique<std::atomic<bool>[]>(max_clients_);
  for (uint32_t c = 0; c < max_clients_; ++c) idle_[c].store(true);

  if (messages_) {
    // Shared: kRxBuffers on the first endpoint. Isolated: kRxBuffers on each client's own,
    // smaller (a client has at most W requests in flight to a worker).
    const size_t endpoints = isolated_ ? max_clients_ : 1;
    rx_per_ = isolated_ ? std::max<size_t>(size_t{256} << 10, 4 * eo.min_multi_recv)
                        : std::max<size_t>(size_t{4} << 20, 8 * eo.min_multi_recv);
    rx_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, rx_per_ * kRxBuffers * endpoints,
                                                     fabric::Access::kLocalOnly);
    rx_ctx_.resize(kRxBuffers * endpoints);
    rx_repost_.assign(kRxBuffers * endpoints, false);
    for (size_t b = 0; b < rx_ctx_.size(); ++b) {
      rx_ctx_[b].tag = b;
      rx_ctx_[b].user = rx_.get();
    }
    if (!isolated_)
      for (size_t b = 0; b < kRxBuffers; ++b)
        fabric::check(eps_[0]->recv_multi(rx_->local(b * rx_per_, rx_per_), &rx_ctx_[b]),
                      "fi_recvmsg(multi)");
  }
  if (isolated_) {
    // Opened on demand (open_endpoint), one shm region each: ~7 MiB resident with libfabric
    // 2.1, so memory follows the clients connected, not --max-clients.
    client_eps_.resize(max_clients_);
    client_names_.resize(max_clients_);
  }
}

bool HerdWorker::open_endpoint(uint32_t c, int timeout_ms) {
  if (!isolated_ || c >= max_clients_) return c < max_clients_;
  auto ready = [&] {
    std::lock_guard lock(names_mu_);
    return !client_names_[c].empty();
  };
  if (ready()) return true;
  ClientInfo info;
  info.index = c;
  post_event({Event::Kind::kOpenEndpoint, std::move(info)});
  Deadline d = Deadline::after_ms(timeout_ms);
  while (!ready()) {
    if (d.expired()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Isolated clients: index c's endpoint, one per client of that index. Closing it drops
// whatever its client left inside the provider (an uncommitted command, pending operations),
// and its region goes with it.
void HerdWorker::open_client_endpoint_st(uint32_t c) {
  if (client_eps_[c]) return;
  auto ep = std::make_unique<fabric::Endpoint>(*fabric_, client_eo_);
  {
    std::lock_guard lock(names_mu_);  // stats() reads the endpoints' counters
    client_eps_[c] = std::move(ep);
    client_names_[c] = client_eps_[c]->name();
  }
  if (rx_)
    for (size_t b = size_t{c} * kRxBuffers; b < size_t{c + 1} * kRxBuffers; ++b) {
      rx_repost_[b] = false;
      post_rx_st(b);
    }
}

void HerdWorker::close_client_endpoint_st(uint32_t c) {
  for (uint32_t r = 0; r < window_; ++r) {
    fabric::OpContext& ctx = read_ctx_[size_t{c} * window_ + r];
    delete static_cast<Pending*>(ctx.user);  // its READ dies with the endpoint
    ctx.user = nullptr;
  }
  if (rx_)
    for (size_t b = size_t{c} * kRxBuffers; b < size_t{c + 1} * kRxBuffers; ++b)
      rx_repost_[b] = false;
  std::lock_guard lock(names_mu_);
  if (!client_eps_[c]) return;
  counters_.endpoints_closed.fetch_add(1, std::memory_order_relaxed);
  closed_verbs_ += client_eps_[c]->counters().snapshot();
  client_eps_[c].reset();
  client_names_[c].clear();
}

fabric::Endpoint& HerdWorker::rx_endpoint(size_t b) const {
  return isolated_ ? *client_eps_[b / kRxBuffers] : *eps_[0];
}

// Where client c's requests arrive and its READs and responses leave (responses rotate over
// the k shared queues; see post_send_st).
fabric::Endpoint& HerdWorker::endpoint_of(uint32_t c) const {
  return isolated_ ? *client_eps_[c] : *eps_[0];
}

void HerdWorker::post_rx_st(size_t b) {
  long ret = rx_endpoint(b).recv_multi(rx_->local(b * rx_per_, rx_per_), &rx_ctx_[b]);
  if (ret == fabric::kAgain) {
    rx_repost_[b] = true;  // the receive queue is full: the next round tries again
  } else if (ret != 0) {
    spdlog::error("worker {}: cannot post a receive buffer: {}", index_, fabric::error_text(ret));
  }
}

HerdWorker::~HerdWorker() {
  oplog_.reset();  // flushes the log
  // Deregister the pilaf generations before the engine unmaps their memory.
  pilaf_mrs_.clear();
  engine_.reset();
}

void HerdWorker::pilaf_live(const store::PilafGeneration& g) {
  PilafMrs m;
  m.generation = g.generation;
  m.table = std::make_unique<fabric::MemoryRegion>(*fabric_, g.table, g.table_bytes,
                                                   fabric::Access::kRemoteRead);
  m.extents = std::make_unique<fabric::MemoryRegion>(*fabric_, g.extents, g.extent_bytes,
                                                     fabric::Access::kRemoteRead);
  PilafRegions r;
  r.generation = g.generation;
  r.entries = g.entries;
  r.table = m.table->remote();
  r.extents = m.extents->remote();
  pilaf_mrs_.push_back(std::move(m));
  std::lock_guard lock(pilaf_mu_);
  pilaf_current_ = r;
}

void HerdWorker::pilaf_release(const store::PilafGeneration& g) {
  std::erase_if(pilaf_mrs_, [&](const PilafMrs& m) { return m.generation == g.generation; });
}

PilafRegions HerdWorker::pilaf_regions() const {
  std::lock_guard lock(pilaf_mu_);
  return pilaf_current_;
}

std::vector<std::vector<uint8_t>> HerdWorker::endpoint_names(uint32_t client) const {
  std::vector<std::vector<uint8_t>> names;
  if (isolated_) {
    std::lock_guard lock(names_mu_);
    if (client < client_names_.size()) names.push_back(client_names_[client]);
    return names;
  }
  for (const auto& ep : eps_) names.push_back(ep->name());
  return names;
}

void HerdWorker::post_event(Event e) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
  events_pending_.store(true, std::memory_order_release);
}

void HerdWorker::add_client(ClientInfo c) {
  if (c.index < max_clients_) idle_[c.index].store(false, std::memory_order_relaxed);
  post_event({Event::Kind::kAdd, std::move(c)});
}

void HerdWorker::remove_client(uint32_t index) {
  ClientInfo info;
  info.index = index;
  post_event({Event::Kind::kRemove, std::move(info)});
}

void HerdWorker::drain_events_st() {
  if (!events_pending_.load(std::memory_order_acquire)) return;
  std::deque<Event> events;
  {
    std::lock_guard lock(mu_);
    events.swap(events_);
    events_pending_.store(false, std::memory_order_relaxed);
  }
  // Completions reaped while posting may point into an endpoint about to be closed.
  for (size_t i = 0; i < deferred_.size(); ++i) on_completion_st(deferred_[i]);
  deferred_.clear();
  for (Event& e : events) {
    uint32_t c = e.info.index;
    if (c >= max_clients_) continue;
    ClientSlotState& s = clients_[c];
    if (e.kind == Event::Kind::kOpenEndpoint) {
      try {
        open_client_endpoint_st(c);
      } catch (const std::exception& ex) {
        spdlog::error("worker {}: cannot open client {}'s endpoint: {}", index_, c, ex.what());
      }
      continue;
    }
    if (e.kind == Event::Kind::kRemove) {
      // The client is gone (its control connection closed): stop serving its slots and clear
      // them, so nothing it left there is taken for the next client of this index.
      const bool was_active = s.active;
      s.active = false;
      s.dropped = false;
      s.backlog.clear();
      std::memset(region_->data() + rpc::slot_offset(c, window_, slot_size_, 0), 0,
                  size_t{window_} * slot_size_);
      if (isolated_) {
        // Whatever it left inside the provider goes with its endpoint.
        s.peer = fabric::kNoPeer;
        close_client_endpoint_st(c);  // the index's next client gets a fresh one
        if (fabric::remove_dead_peer_region(*fabric_, s.address))
          counters_.regions_reclaimed.fetch_add(1, std::memory_order_relaxed);
      } else {
        // Its address stays in the AV a while (in-flight SENDs may still use it).
        retire_peer_st(s.peer);
        s.peer = fabric::kNoPeer;
      }
      // Counted out only now that the index is reusable (stats readers wait on this).
      if (was_active) active_clients_.fetch_sub(1, std::memory_order_relaxed);
      idle_[c].store(true, std::memory_order_release);
      continue;
    }
    if (!isolated_) retire_peer_st(s.peer);
    s.peer = fabric::kNoPeer;
    try {
      fabric::PeerAddr peer = fabric::kNoPeer;
      if (isolated_) {
        if (!client_eps_[c]) throw std::runtime_error("its endpoint is not open");
        peer = client_eps_[c]->insert_peer(e.info.address);
      }
      for (auto& ep : eps_) peer = ep->insert_peer(e.info.address);  // one AV per endpoint, same index
      s.peer = peer;
    } catch (const std::exception& ex) {
      spdlog::warn("worker {}: client {} has an unusable address: {}", index_, c, ex.what());
      continue;
    }
    if (!s.active) active_clients_.fetch_add(1, std::memory_order_relaxed);
    s.active = true;
    s.dropped = false;
    s.epoch = e.info.epoch;
    s.staging = e.info.staging;
    s.slots = e.info.slots;
    s.address = e.info.address;
    s.exp = 1;
    s.stall = 0;
    s.in_flight = 0;  // READs of an earlier client of this index no longer count (Pending::epoch)
    s.sent = 0;
    s.backlog.clear();
  }
}

// A departed client's address leaves the AV only a while later: the provider may still hold
// operations to it (an unsignaled response SEND, a shm command in flight), and shm unmaps the
// peer's region on fi_av_remove, which such an operation would then touch (seen: SIGSEGV in
// shm's progress under quick connect/disconnect churn).
void HerdWorker::retire_peer_st(fabric::PeerAddr peer) {
  if (peer != fabric::kNoPeer) retired_.push_back({peer, Deadline::after_ms(1000)});
}

void HerdWorker::bury_retired_st() {
  while (!retired_.empty() && retired_.front().until.expired()) {
    for (auto& ep : eps_) ep->remove_peer(retired_.front().peer);
    retired_.pop_front();
  }
}

void HerdWorker::run_st(const std::atomic<bool>& stop) {
  if (!pin_this_thread(core_)) spdlog::warn("worker {}: could not pin to core {}", index_, core_);
  uint32_t rounds = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    store::add_st(counters_.rounds);  // poll rounds: fewer per second = busier (fabkv-bench)
    if ((++rounds & 1023) == 0) {
      bury_retired_st();
      if (pilaf_) pilaf_->reap_retired();
    }
    drain_events_st();
    poll_cqs_st();
    if (transport_ == rpc::Transport::kWrite) scan_region_st();
    if (!batch_.empty() || !out_.empty()) execute_st();
    else repost_rx_st();
  }
  // Finish what is in hand: answer collected requests and let the last SENDs go out.
  poll_cqs_st();
  if (!batch_.empty() || !out_.empty()) execute_st();
  Deadline d = Deadline::after_ms(200);
  while (!d.expired()) poll_cqs_st();
}

// Polls every endpoint in use and hands each completion to `handle`: the shared ones, and
// (isolated) every admitted client's own, whose READ/WRITE notices and first contact need our
// progress.
template <class Handle>
void HerdWorker::poll_endpoints_st(Handle&& handle) {
  fabric::Completion comps[32];
  auto poll = [&](fabric::Endpoint& ep) {
    size_t n = ep.poll(comps);
    for (size_t i = 0; i < n; ++i) handle(comps[i]);
  };
  for (auto& ep : eps_) poll(*ep);
  for (uint32_t c = 0; c < client_eps_.size(); ++c)
    if (clients_[c].active && client_eps_[c]) poll(*client_eps_[c]);
}

void HerdWorker::poll_cqs_st() {
  // First what was reaped while posting (see reap_st), then whatever is new.
  for (size_t i = 0; i < deferred_.size(); ++i) on_completion_st(deferred_[i]);
  deferred_.clear();
  poll_endpoints_st([this](fabric::Completion& c) { on_completion_st(c); });
}

// Drives progress while in the middle of posting (a full queue): completions are kept for the
// next poll_cqs_st instead of being handled here, where they could add requests or responses
// to the lists being walked.
void HerdWorker::reap_st() {
  poll_endpoints_st([this](fabric::Completion& c) { deferred_.push_back(std::move(c)); });
}

void HerdWorker::on_completion_st(fabric::Completion& c) {
  fabric::OpContext* ctx = c.context;
  const bool is_rx = ctx != nullptr && rx_ && ctx->user == rx_.get();
  if (c.error != 0) {
    if (is_rx) {
      rx_repost_[ctx->tag] = true;
    } else if (c.verb == fabric::Verb::kRead && ctx != nullptr && ctx->user != nullptr) {
      // An indirect body could not be fetched (the client died or gave a bad descriptor).
      Pending* p = static_cast<Pending*>(ctx->user);
      ctx->user = nullptr;
      counters_.read_errors.fetch_add(1, std::memory_order_relaxed);
      ClientSlotState& s = clients_[p->client];
      if (s.epoch == p->epoch && s.in_flight > 0) s.in_flight--;
      reply_error_st(p->client, p->epoch, p->seq, static_cast<uint8_t>(rpc::OpCode::kPut),
                     WireStatus::kInternal);
      delete p;
    } else {
      // A response SEND to a client that went away: nothing to do but count it.
      counters_.send_errors.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (is_rx) {
    // A message, a buffer-release notice, or both: shm releases a multi-recv buffer with a
    // completion of its own that carries FI_MULTI_RECV and no FI_RECV; tcp;ofi_rxm flags the
    // last message.
    if (c.inbound && c.len > 0 && c.buf != nullptr)
      on_message_st(static_cast<const char*>(c.buf), c.len);
    if (c.multi_recv_done) rx_repost_[ctx->tag] = true;
    return;
  }
  if (c.verb == fabric::Verb::kRead && ctx != nullptr && ctx->user != nullptr) {
    // An indirect body arrived in staging: the request is ready for the engine.
    Pending* p = static_cast<Pending*>(ctx->user);
    ctx->user = nullptr;
    ClientSlotState& s = clients_[p->client];
    if (s.epoch != p->epoch || !s.active) {
      counters_.stale_responses.fetch_add(1, std::memory_order_relaxed);
      delete p;  // its client left while the body was fetched
      return;
    }
    if (s.in_flight > 0) s.in_flight--;
    const char* body = staging_->data() + size_t{static_cast<uint32_t>(ctx->tag)} * staging_slot_;
    p->req.key = std::string_view(body, p->req.key.size());
    p->req.value = std::string_view(body + p->req.key.size(), p->req.value.size());
    p->req.hash = store::hash_key(p->req.key);
    batch_.push_back(*p);
    delete p;
  }
}

// HERD sec. 4.2: poll the request region round-robin, one request per client per round
// (Guidelines sec. 4.1: a round's responses then leave as one batch).
void HerdWorker::scan_region_st() {
  for (uint32_t c = 0; c < max_clients_; ++c) {
    if (!clients_[c].active || !clients_[c].slots || clients_[c].dropped) continue;
    take_slot_st(c);
    if (!batching_ && (!batch_.empty() || !out_.empty())) execute_st();
  }
}

bool HerdWorker::take_slot_st(uint32_t c) {
  ClientSlotState& s = clients_[c];
  if (s.in_flight > 0) return false;  // an indirect body is being fetched for this client
  const uint32_t exp = s.exp;
  // A READ of an earlier client of this index may still hold this slot's context.
  if (read_ctx_[size_t{c} * window_ + (exp - 1) % window_].user != nullptr) return false;
  char* slot = region_->data() + rpc::slot_offset(c, window_, slot_size_, exp - 1);
  const uint32_t seq = rpc::load<uint32_t>(slot);
  if (seq == 0 || (exp > window_ && seq == exp - window_)) {
    s.stall = 0;  // empty, or still the previous request of this slot
    return false;
  }
  if (seq == exp) {
    // Header landed; the request is whole when the trailer agrees and the checksum matches.
    RequestHeader h = rpc::load<RequestHeader>(slot);
    size_t body = rpc::request_body_bytes(h.flags, h.key_len, h.value_len);
    size_t toff = rpc::trailer_offset(body);
    bool fits = body <= slot_size_ && toff + sizeof(rpc::RequestTrailer) <= slot_size_;
    if (fits && rpc::load<uint32_t>(slot + toff) == seq &&
        rpc::request_check(seq, slot + sizeof(RequestHeader), body) == h.check) {
      if (h.epoch != s.epoch) {
        // A whole request of an earlier client of this index that landed after its slots were
        // cleared (tcp places data at our progress): not ours to answer or to call garbage.
        s.stall = 0;
        return false;
      }
      s.stall = 0;
      // Not taken (the provider refused the indirect READ): it stays in its slot for the
      // next round.
      if (!accept_request_st(c, seq, slot)) return false;
      s.exp = exp + 1 == 0 ? 1 : exp + 1;
      return true;
    }
    if (!fits) {  // impossible lengths: it will never become whole
      counters_.malformed.fetch_add(1, std::memory_order_relaxed);
      s.exp = exp + 1 == 0 ? 1 : exp + 1;
      reply_error_st(c, exp, h.op, WireStatus::kMalformed);
      return false;
    }
  }
  // Torn (still landing) or garbage: give a landing WRITE time, then declare it malformed and
  // tell the owner its request `exp` failed, so that it is never stuck behind garbage.
  if (++s.stall < kStallPolls) return false;
  s.stall = 0;
  counters_.garbage.fetch_add(1, std::memory_order_relaxed);
  counters_.malformed.fetch_add(1, std::memory_order_relaxed);
  s.exp = exp + 1 == 0 ? 1 : exp + 1;
  reply_error_st(c, exp, 0, WireStatus::kMalformed);
  return false;
}

// SEND transport (HERD sec. 5.5): a request arrived as a message.
void HerdWorker::on_message_st(const char* buf, size_t len) {
  if (len < sizeof(RequestHeader)) {
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  RequestHeader h = rpc::load<RequestHeader>(buf);
  auto known = [&] {
    return h.client < max_clients_ && clients_[h.client].active && !clients_[h.client].dropped &&
           clients_[h.client].epoch == h.epoch;
  };
  if (!known()) {
    drain_events_st();  // the client's add may still be queued
    if (!known()) {
      counters_.unknown_client.fetch_add(1, std::memory_order_relaxed);
      return;  // cannot tell who sent it
    }
  }
  size_t body = rpc::request_body_bytes(h.flags, h.key_len, h.value_len);
  if (h.seq == 0 || sizeof(RequestHeader) + body > len ||
      rpc::request_check(h.seq, buf + sizeof(RequestHeader), body) != h.check) {
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    reply_error_st(h.client, h.seq, h.op, WireStatus::kMalformed);
    return;
  }
  if (!accept_request_st(h.client, h.seq, buf)) {
    // Only an indirect body can be refused, and messages carry theirs inline.
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    reply_error_st(h.client, h.seq, h.op, WireStatus::kMalformed);
  }
}

// `msg` holds a whole, verified request (header, body); build the engine request. Returns
// false only when an indirect body's READ could not be posted now (nothing was counted).
bool HerdWorker::accept_request_st(uint32_t c, uint32_t seq, const char* msg) {
  RequestHeader h = rpc::load<RequestHeader>(msg);
  if (h.client != c || h.epoch != clients_[c].epoch) {
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    reply_error_st(c, seq, h.op, WireStatus::kMalformed);
    return true;
  }
  Pending p;
  p.client = c;
  p.epoch = h.epoch;
  p.seq = seq;
  std::atomic<uint64_t>* op_counter = nullptr;
  switch (static_cast<rpc::OpCode>(h.op)) {
    case rpc::OpCode::kGet:
      p.req.op = store::Op::kGet;
      op_counter = &counters_.gets;
      break;
    case rpc::OpCode::kPut:
      p.req.op = store::Op::kPut;
      op_counter = &counters_.puts;
      break;
    case rpc::OpCode::kDel:
      p.req.op = store::Op::kDel;
      op_counter = &counters_.dels;
      break;
    default:
      break;
  }
  WireStatus refuse = WireStatus::kOk;
  if (op_counter == nullptr) refuse = WireStatus::kMalformed;
  else if (h.key_len == 0) refuse = WireStatus::kInvalidKey;
  else if (h.key_len > store::kMaxKeySize || h.value_len > max_value_ ||
           (p.req.op != store::Op::kPut && h.value_len != 0))
    refuse = WireStatus::kTooLarge;
  const char* body = msg + sizeof(RequestHeader);
  rpc::IndirectBody ib{};
  if (refuse == WireStatus::kOk && (h.flags & rpc::kFlagIndirect)) {
    ib = rpc::load<rpc::IndirectBody>(body);
    if (ib.length != size_t{h.key_len} + h.value_len || ib.length > staging_slot_)
      refuse = WireStatus::kMalformed;
  }
  if (refuse == WireStatus::kOk && (h.flags & rpc::kFlagIndirect)) {
    // The body lives in client memory: one READ fetches it (the slot only carries where).
    uint32_t slot_index = c * window_ + (seq - 1) % window_;
    p.req.key = std::string_view(body, h.key_len);  // lengths only; rebased on arrival
    p.req.value = std::string_view(body, h.value_len);
    p.req.put.expected_version = h.expected_version;
    p.req.put.expire_at = h.expire_at;
    long ret = post_read_st(c, slot_index, ib);
    if (ret == fabric::kAgain) return false;
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    op_counter->fetch_add(1, std::memory_order_relaxed);
    if (ret != 0) {
      counters_.read_errors.fetch_add(1, std::memory_order_relaxed);
      reply_error_st(c, seq, h.op, WireStatus::kInternal);
      return true;
    }
    counters_.indirect.fetch_add(1, std::memory_order_relaxed);
    read_ctx_[slot_index].user = new Pending(p);  // set-up path of a large request; freed on completion
    clients_[c].in_flight++;
    return true;
  }
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  if (op_counter != nullptr) op_counter->fetch_add(1, std::memory_order_relaxed);
  if (refuse != WireStatus::kOk) {
    if (refuse == WireStatus::kMalformed) counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    reply_error_st(c, seq, h.op, refuse);
    return true;
  }
  p.req.put.expected_version = h.expected_version;
  p.req.put.expire_at = h.expire_at;
  p.req.key = std::string_view(body, h.key_len);
  p.req.value = std::string_view(body + h.key_len, h.value_len);
  p.req.hash = store::hash_key(p.req.key);
  batch_.push_back(p);
  return true;
}

// Every post on the data path: one try, and one more after a round of progress if the provider
// refused it (a full queue). Never a loop: the caller keeps what was refused for the next round.
template <class Post>
long HerdWorker::post_twice_st(Post&& post) {
  long ret = post();
  if (ret == fabric::kAgain) {
    reap_st();
    ret = post();
  }
  return ret;
}

// The caller keeps a refused request in its slot and tries again next round rather than
// waiting here on one peer.
long HerdWorker::post_read_st(uint32_t c, uint32_t slot_index, const rpc::IndirectBody& ib) {
  ClientSlotState& s = clients_[c];
  fabric::OpContext& ctx = read_ctx_[slot_index];
  ctx.tag = slot_index;
  fabric::LocalBuffer dst = staging_->local(size_t{slot_index} * staging_slot_, ib.length);
  long ret = post_twice_st([&] { return endpoint_of(c).read(dst, s.peer, ib.addr, ib.rkey, &ctx); });
  if (ret != fabric::kAgain) {
    s.stuck_since = {};
    return ret;
  }
  auto now = Clock::now();
  if (s.stuck_since == Clock::time_point{}) s.stuck_since = now;
  else if (now - s.stuck_since > std::chrono::milliseconds(kPeerStallMs)) drop_peer_st(c, "READs");
  return ret;
}

char* HerdWorker::tx_slot(uint32_t c, uint32_t seq) { return tx_->data() + tx_offset(c, seq); }
size_t HerdWorker::tx_offset(uint32_t c, uint32_t seq) const {
  return (size_t{c} * window_ + (seq - 1) % window_) * tx_stride_;
}

void HerdWorker::reply_error_st(uint32_t c, uint32_t seq, uint8_t op, WireStatus st) {
  if (c >= max_clients_) return;
  reply_error_st(c, clients_[c].epoch, seq, op, st);
}

void HerdWorker::reply_error_st(uint32_t c, uint16_t epoch, uint32_t seq, uint8_t op,
                                WireStatus st) {
  if (c >= max_clients_ || !clients_[c].active || clients_[c].epoch != epoch || seq == 0) return;
  ResponseHeader r{};
  r.seq = seq;
  r.status = static_cast<uint8_t>(st);
  r.op = op;
  r.worker = static_cast<uint16_t>(index_);
  r.client = static_cast<uint16_t>(c);
  r.epoch = epoch;
  rpc::store(tx_slot(c, seq), r);
  out_.push_back({c, epoch, tx_offset(c, seq), sizeof(ResponseHeader)});
}

// Runs the round's requests through the engine's prefetch pipeline (HERD sec. 4.1.1: bucket,
// then item, prefetched while other requests advance) and sends every response.
void HerdWorker::execute_st() {
  if (!batch_.empty()) {
    counters_.batches.fetch_add(1, std::memory_order_relaxed);
    reqs_.clear();
    for (const Pending& p : batch_) reqs_.push_back(p.req);
    engine_->run_batch(reqs_, [&](size_t i, const store::Response& r) {
      const Pending& p = batch_[i];
      if (oplog_ && r.status == store::Status::kOk) log_mutation_st(p.req, r);
      char* out = tx_slot(p.client, p.seq);
      ResponseHeader h{};
      h.seq = p.seq;
      h.status = static_cast<uint8_t>(to_wire(r.status));
      h.op = static_cast<uint8_t>(p.req.op == store::Op::kGet   ? rpc::OpCode::kGet
                                  : p.req.op == store::Op::kPut ? rpc::OpCode::kPut
                                                                : rpc::OpCode::kDel);
      h.worker = static_cast<uint16_t>(index_);
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
      rpc::store(out, h);
      out_.push_back({p.client, p.epoch, tx_offset(p.client, p.seq), len});
    });
    batch_.clear();
  }
  send_responses_st();
  repost_rx_st();
}

// Pilaf sec. 4: every acknowledged PUT/DELETE goes to the log before its reply is sent
// (the log's writer thread reaches the disk later).
void HerdWorker::log_mutation_st(const store::Request& req, const store::Response& r) {
  if (req.op == store::Op::kPut) oplog_->append_put(req.key, req.value, r.version, req.put.expire_at);
  else if (req.op == store::Op::kDel) oplog_->append_del(req.key);
}

// Receive buffers whose messages were all consumed (the batch that used them has run) go back
// to the provider. Called every round, so a buffer released by a message that produced no
// work (a dropped one) is reposted too, and one the provider refused is tried again.
void HerdWorker::repost_rx_st() {
  if (!rx_) return;
  for (size_t b = 0; b < rx_repost_.size(); ++b) {
    if (!rx_repost_[b]) continue;
    rx_repost_[b] = false;
    post_rx_st(b);
  }
}

// kAgain (after post_twice_st) leaves the response to
// the client's backlog (send_responses_st).
long HerdWorker::post_send_st(uint32_t c, size_t offset, size_t len, bool more) {
  ClientSlotState& s = clients_[c];
  // Multi-queue (Guidelines sec. 4.3.1): responses leave through the k endpoints in turn; an
  // isolated client's through its own.
  fabric::Endpoint& ep = isolated_ ? *client_eps_[c] : *eps_[sent_ % queues_];
  uint64_t& n = isolated_ ? s.sent : sent_;
  // Padded where the provider would otherwise lock the client's region (fabric/isolation.h);
  // the slot and the client's receive buffers have room (recv_size_).
  len = fabric::lock_free_len(*fabric_, len);
  fabric::PostOptions po;
  po.more = more;
  po.inlined = len <= ep.inject_size();
  po.signaled = (n + 1) % kSignalEvery == 0;
  long ret = post_twice_st([&] { return ep.send(tx_->local(offset, len), s.peer, nullptr, po); });
  if (ret == 0) n++;
  return ret;
}

void HerdWorker::send_responses_st() {
  flush_backlogs_st();
  // Response batching: FI_MORE on all but the last SEND of the round, one doorbell.
  for (size_t i = 0; i < out_.size(); ++i) {
    const Outgoing& o = out_[i];
    ClientSlotState& s = clients_[o.client];
    if (!s.active || s.dropped || s.epoch != o.epoch) {
      counters_.stale_responses.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!s.backlog.empty()) {  // keep its order behind what is already waiting
      s.backlog.push_back(o);
      continue;
    }
    bool more = batching_ && i + 1 < out_.size();
    long ret = post_send_st(o.client, o.offset, o.len, more);
    if (ret == fabric::kAgain) {
      counters_.backlogged.fetch_add(1, std::memory_order_relaxed);
      s.backlog.push_back(o);
      s.stuck_since = Clock::now();
    } else if (ret != 0) {
      counters_.send_errors.fetch_add(1, std::memory_order_relaxed);
    }
  }
  out_.clear();
}

// Responses the provider refused earlier, oldest first; a client that takes none for
// kPeerStallMs is dropped so that it cannot hold the worker (or its memory) any longer.
void HerdWorker::flush_backlogs_st() {
  for (uint32_t c = 0; c < max_clients_; ++c) {
    ClientSlotState& s = clients_[c];
    while (!s.backlog.empty()) {
      const Outgoing o = s.backlog.front();
      if (!s.active || s.dropped || s.epoch != o.epoch) {
        s.backlog.clear();
        break;
      }
      long ret = post_send_st(c, o.offset, o.len, false);
      if (ret == fabric::kAgain) {
        if (Clock::now() - s.stuck_since > std::chrono::milliseconds(kPeerStallMs))
          drop_peer_st(c, "responses");
        break;
      }
      if (ret != 0) counters_.send_errors.fetch_add(1, std::memory_order_relaxed);
      s.backlog.pop_front();
      s.stuck_since = Clock::now();
    }
  }
}

// The client stopped taking what we post for kPeerStallMs: it is no longer served (its
// requests are ignored, its responses discarded) until its control connection closes and the
// index is reclaimed as for any departed client.
void HerdWorker::drop_peer_st(uint32_t c, const char* why) {
  ClientSlotState& s = clients_[c];
  if (s.dropped) return;
  s.dropped = true;
  s.backlog.clear();
  counters_.dropped_peers.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("worker {}: dropped client {} (epoch {}): the provider refused its {} for {} ms",
               index_, c, s.epoch, why, kPeerStallMs);
}

nlohmann::json HerdWorker::stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  fabric::VerbSnapshot verbs;
  for (const auto& ep : eps_) verbs += ep->counters().snapshot();
  {
    std::lock_guard lock(names_mu_);
    verbs += closed_verbs_;
    for (const auto& ep : client_eps_)
      if (ep) verbs += ep->counters().snapshot();
  }
  store::StatsSnapshot es = engine_->stats();
  nlohmann::json pilaf = nullptr;
  if (pilaf_) {
    auto ps = pilaf_->pilaf_stats();
    PilafRegions pr = pilaf_regions();
    pilaf = {{"generation", pr.generation},   {"entries", pr.entries},
             {"extent_bytes", pr.extents.length}, {"used_entries", ps.used_entries},
             {"fill", pr.entries ? static_cast<double>(ps.used_entries) / static_cast<double>(pr.entries) : 0.0},
             {"growths", ps.growths},         {"paths", ps.paths},
             {"moved_keys", ps.moved_keys},   {"retired_live", ps.retired_live}};
  }
  return {{"worker", index_},
          {"pilaf", pilaf},
          {"active_clients", active_clients_.load(std::memory_order_relaxed)},
          {"requests", r(counters_.requests)},
          {"gets", r(counters_.gets)},
          {"puts", r(counters_.puts)},
          {"dels", r(counters_.dels)},
          {"malformed", r(counters_.malformed)},
          {"garbage_slots", r(counters_.garbage)},
          {"unknown_client", r(counters_.unknown_client)},
          {"indirect", r(counters_.indirect)},
          {"send_errors", r(counters_.send_errors)},
          {"read_errors", r(counters_.read_errors)},
          {"isolated", isolated_},
          {"stale_responses", r(counters_.stale_responses)},
          {"backlogged", r(counters_.backlogged)},
          {"dropped_peers", r(counters_.dropped_peers)},
          {"endpoints_closed", r(counters_.endpoints_closed)},
          {"regions_reclaimed", r(counters_.regions_reclaimed)},
          {"batches", r(counters_.batches)},
          {"rounds", r(counters_.rounds)},
          {"verbs", verbs.to_json()},
          {"engine",
           {{"items", es.items},
            {"bytes", es.bytes},
            {"hits", es.hits},
            {"misses", es.misses},
            {"expired", es.expired},
            {"puts", es.puts},
            {"dels", es.dels},
            {"evictions", es.evictions},
            {"index_drops", es.index_drops},
            {"version_mismatches", es.version_mismatches},
            {"too_large", es.too_large},
            {"no_space", es.no_space}}}};
}

}  // namespace fabkv::server
