#include "server/worker.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/bytes.h"
#include "common/cpu.h"
#include "common/log.h"
#include "fabric/error.h"
#include "fabric/isolation.h"
#include "server/oplog.h"
#include "server/protocols.h"
#include "server/restore.h"
#include "store/stats.h"

namespace fabkv::server {

namespace {

// Every k-th answer is signaled so the transmit queue's credits keep flowing (Guidelines
// sec. 3.1: selective signaling).
constexpr uint64_t kSignalEvery = 16;
// Messages: multi-recv buffers per receiving endpoint.
constexpr size_t kRxBuffers = 2;
// A peer whose operations the provider has refused for this long is dropped (the client died
// inside the provider, or stopped draining its queue); meanwhile its answers wait in its
// backlog and the worker serves everyone else.
constexpr int64_t kPeerStallMs = 250;
// Isolated clients' endpoints: a client has at most W requests per worker in flight, so small
// queues do; the command queue (rx) also takes one notice per READ/WRITE the client posts, and
// the worker drains it every round.
constexpr size_t kClientTxDepth = 256, kClientRxDepth = 256;
// --poll adaptive: the clock is read every kIdleCheck idle rounds only (an idle round takes
// tens of nanoseconds), and one block lasts at most kMaxBlock, so that periodic work (the
// pilaf engine publishes its clock, departed peers leave the AV after 1 s) still runs on time.
constexpr uint32_t kIdleCheck = 16;
constexpr auto kMaxBlock = std::chrono::milliseconds(10);
// An adaptive worker's polling time doubles after each wake-up by the fabric that brought no
// sign of work, up to 2^kMaxStretch times --poll-spin-us (see idle_st).
constexpr uint32_t kMaxStretch = 10;
// What an adaptive worker did the last time it was idle (stats "poll.idle_wait").
constexpr std::array<const char*, 3> kIdleWaitNames = {"none yet", "block", "sleep"};

// The settings the protocols read (proto/server_host.h), out of the server's.
proto::ServerSettings settings_of(const ServerOptions& o) {
  proto::ServerSettings s;
  static_cast<proto::ProtocolOptions&>(s) = o;
  s.workers = o.workers;
  s.max_clients = o.max_clients;
  s.max_value = o.max_value;
  s.data_dir = o.data_dir;
  return s;
}

// The protocol served that brings the engine --engine names (farm and farm-var configure the
// farm engine differently); the default protocol when none does.
proto::Id engine_protocol(const ServerOptions& o) {
  for (const std::string& name : o.protocols)
    if (const proto::Info* p = proto::find(name); p != nullptr && p->engine == o.engine)
      return p->id;
  return proto::kDefault;
}

}  // namespace

// Set-up in steps, each of which needs the ones before it: the fabric, the protocols' server
// sides, the endpoints (sized for the messages the sides declared), the engine, then the sides
// open (register, post) and the worker posts receive buffers if any side takes messages.
Worker::Worker(uint32_t index, const ServerOptions& o, const fabric::FabricOptions& fo)
    : index_(index),
      o_(o),
      settings_(settings_of(o)),
      core_(o.cores.empty() ? static_cast<int>(index) : o.cores[index % o.cores.size()]),
      adaptive_(o.poll.mode == PollMode::kAdaptive) {
  fabric::FabricOptions f = fo;
  f.quiet = index > 0;  // one provider log line per server is enough
  fabric_ = fabric::Fabric::open(f);
  isolated_ = fabric::isolate_peers(*fabric_);
  make_sides();
  const fabric::EndpointOptions eo = open_endpoints();
  clients_.resize(o.max_clients);
  idle_ = std::make_unique<std::atomic<bool>[]>(o.max_clients);
  for (uint32_t c = 0; c < o.max_clients; ++c) idle_[c].store(true);
  open_engine();
  bool messages = false;
  for (auto& side : sides_) {
    side->open();
    messages |= side->wants_messages();
  }
  if (messages) open_receive_buffers(eo.min_multi_recv);
  if (isolated_) {
    // Opened on demand (open_endpoint), one shm region each: ~7 MiB resident with libfabric
    // 2.1, so memory follows the clients connected, not --max-clients.
    client_eps_.resize(o.max_clients);
    client_names_.resize(o.max_clients);
  }
  if (adaptive_) waiter_ = std::make_unique<fabric::Waiter>();
}

// The server sides of the protocols served, one per Info::server.
void Worker::make_sides() {
  side_of_.assign(proto::protocols().size(), nullptr);
  for (const std::string& name : o_.protocols) {
    const proto::Info* p = proto::find(name);
    if (p == nullptr) continue;  // validate() refused it already
    proto::ServerProtocol*& side = side_of_[static_cast<size_t>(p->server)];
    if (side_of_[static_cast<size_t>(p->id)] != nullptr) continue;
    if (side == nullptr) {
      sides_.push_back(make_server_side(p->server, *this));
      side = sides_.back().get();
    }
    side_of_[static_cast<size_t>(p->id)] = side;
  }
}

// The shared endpoints (none where each client gets its own) and the options a client's own
// is opened with. Answers and requests are padded where the provider would otherwise take a
// process-shared lock (fabric/isolation.h): every buffer is sized for that, and for the
// largest message a served protocol declared.
fabric::EndpointOptions Worker::open_endpoints() {
  size_t request = 0, answer = 0;
  for (const auto& side : sides_) {
    request = std::max(request, side->max_request_bytes(o_.max_value));
    answer = std::max(answer, side->max_answer_bytes(o_.max_value));
  }
  recv_size_ = fabric::lock_free_capacity(*fabric_, answer);
  fabric::EndpointOptions eo;
  eo.tx_depth = 1024;
  eo.rx_depth = 1024;
  eo.cq_depth = 8192;
  eo.selective_completion = true;
  eo.av_size = o_.max_clients;
  eo.waitable = adaptive_;
  eo.min_multi_recv = fabric::lock_free_capacity(*fabric_, request);
  if (!isolated_) {
    for (uint32_t q = 0; q < o_.rpc.queues; ++q)
      eps_.push_back(std::make_unique<fabric::Endpoint>(*fabric_, eo));
  }
  client_eo_ = eo;
  client_eo_.tx_depth = kClientTxDepth;
  client_eo_.rx_depth = kClientRxDepth;
  client_eo_.cq_depth = 2 * (kClientTxDepth + kClientRxDepth);
  client_eo_.av_size = 4;
  return eo;
}

// The engine --engine names, built by the registry (the one a served protocol brings, else
// cache or store);
// none for a server of protocols without key-value data (the sequencers). Then the op log.
void Worker::open_engine() {
  // A server of protocols without key-value data only (the sequencers) runs without an engine.
  const bool engineless = needed_engine(o_) == proto::EngineNeed::kNone;
  if (!engineless) engine_ = make_engine();
  if (!o_.oplog.empty() && engineless && index_ == 0)
    spdlog::info("--oplog ignored: no protocol served keeps key-value data");
  if (!o_.oplog.empty() && !engineless) open_oplog();
}

// Messages: multi-recv buffers, kRxBuffers on the first shared endpoint, or (isolated)
// kRxBuffers on each client's own, smaller (a client has at most W requests in flight to a
// worker).
void Worker::open_receive_buffers(size_t min_multi_recv) {
  const size_t endpoints = isolated_ ? o_.max_clients : 1;
  rx_per_ = isolated_ ? std::max<size_t>(size_t{256} << 10, 4 * min_multi_recv)
                      : std::max<size_t>(size_t{4} << 20, 8 * min_multi_recv);
  rx_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, rx_per_ * kRxBuffers * endpoints,
                                                   fabric::Access::kLocalOnly);
  rx_ctx_.resize(kRxBuffers * endpoints);
  rx_repost_.assign(kRxBuffers * endpoints, 0);
  rx_repost_list_.reserve(kRxBuffers * endpoints);
  for (size_t b = 0; b < rx_ctx_.size(); ++b) {
    rx_ctx_[b].tag = b;
    rx_ctx_[b].user = rx_.get();
  }
  if (!isolated_)
    for (size_t b = 0; b < kRxBuffers; ++b)
      fabric::check(eps_[0]->recv_multi(rx_->local(b * rx_per_, rx_per_), &rx_ctx_[b]),
                    "fi_recvmsg(multi)");
}

std::unique_ptr<store::Engine> Worker::make_engine() const {
  store::EngineOptions so;
  so.memory_bytes = o_.memory / o_.workers;
  so.max_value_size = engine_max_value(o_);
  so.index_buckets = o_.index_buckets;
  return proto::make_engine(
      {.name = o_.engine, .store = so, .options = o_, .protocol = engine_protocol(o_)});
}

// Replays the log into the engine (the engine starts with what the log says), then appends to
// it (server/oplog.h).
void Worker::open_oplog() {
  const std::string stem = fmt::format("{}.{}", o_.oplog, index_);
  OpLog::Options lo;
  lo.sync = OpLog::sync_from_string(o_.oplog_sync).value_or(OpLog::Sync::kEverySec);
  lo.rewrite_percentage = o_.oplog_rewrite_percentage;
  lo.rewrite_min_size = o_.oplog_rewrite_min_size;
  // Tests only (tests/client/durability_test.cc kills a server in the middle of a rewrite):
  // every rewrite waits this long before it renames its new base into place.
  if (o_.test_rewrite_pause_ms > 0)
    lo.before_rename = [ms = o_.test_rewrite_pause_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
  // Tests only (tests/memcached/durability_test.cc): a slow disk, every batch written late.
  if (o_.test_oplog_write_delay_ms > 0)
    lo.before_write = [ms = o_.test_oplog_write_delay_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
  // Every mode holds answers until their records are durable() (always: synced; everysec and
  // no: written to the file, which a crash of the process keeps). Answering before the write
  // lost acknowledged writes to a SIGKILL (tests/client/durability_test.cc, *_everysec).
  hold_answers_ = true;
  if (hold_answers_)
    lo.on_durable = [this] {
      // seq_cst with block_st's store of sleeping_ and its look at the log: either it sees the
      // new position before it blocks, or we see it asleep and wake it.
      if (sleeping_.load(std::memory_order_seq_cst)) wake();
    };
  EngineRestore whole(*engine_, store::realtime_seconds(nullptr));
  std::optional<EngineRestore> live;
  const EngineRestore* restore = &whole;
  const auto t0 = Clock::now();
  oplog_ = std::make_unique<OpLog>(stem, std::move(lo), std::ref(whole));
  if (whole.refused() > 0) {
    // The whole history did not fit where the running server's did: an engine lays items out
    // in the order they come (the store engine's heap), and replay leaves out the expired ones
    // that made room for others live. Load only each key's last live record into a new engine,
    // as a rewrite would keep them: the smallest the data can be.
    spdlog::warn(
        "worker {}: replaying {} the engine refused {} PUT(s) (the first: key '{}', {}); loading "
        "only the live items instead",
        index_, stem, whole.refused(), whole.first_refused(), store::to_string(whole.why()));
    engine_.reset();
    engine_ = make_engine();
    restore = &live.emplace(*engine_, store::realtime_seconds(nullptr));
    oplog_->replay_live(std::ref(*live));
  }
  // A live item the engine cannot hold even so (a smaller --max-value or --memory than the log
  // was written with): an error, and the key is absent, never at an older value.
  if (restore->refused() > 0)
    spdlog::error(
        "worker {}: replaying the op log {} the engine refused {} of its live items (the first: "
        "key '{}', {}); they are lost. Start with the --memory and --max-value the log was "
        "written with to keep them",
        index_, stem, restore->refused(), restore->first_refused(),
        store::to_string(restore->why()));
  // A delayed flush_all still to come is armed again; one whose time came while the server was
  // down is carried out now (everything in the log was written before it) and logged so.
  clear_at_ = restore->clear_at();
  due_clear_st();
  const OpLog::ReplayResult& rr = oplog_->recovered();
  if (rr.records > 0 || rr.torn_tail)
    spdlog::info("worker {}: replayed {} records from {} file(s) of {} in {} ms{}", index_,
                 rr.records, rr.files, stem,
                 std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(),
                 rr.torn_tail ? " (cut a torn tail)" : "");
}

Worker::~Worker() {
  oplog_.reset();  // flushes the log
  // Protocols deregister what they registered (e.g. tables in the engine's memory) before the
  // engine goes.
  sides_.clear();
  engine_.reset();
}

const std::string& Worker::provider() const { return fabric_->provider_name(); }

proto::ServerProtocol& Worker::protocol(const proto::Info& p) const {
  return *side_of_.at(static_cast<size_t>(p.id));
}

bool Worker::open_endpoint(uint32_t c, int timeout_ms) {
  if (!isolated_ || c >= o_.max_clients) return c < o_.max_clients;
  auto ready = [&] {
    std::lock_guard lock(names_mu_);
    return !client_names_[c].empty();
  };
  if (ready()) return true;
  ClientInfo info;
  info.index = c;
  post_event({Event::Kind::kOpenEndpoint, std::move(info), nullptr});
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
void Worker::open_client_endpoint_st(uint32_t c) {
  if (client_eps_[c]) return;
  auto ep = std::make_unique<fabric::Endpoint>(*fabric_, client_eo_);
  {
    std::lock_guard lock(names_mu_);  // stats() reads the endpoints' counters
    client_eps_[c] = std::move(ep);
    client_names_[c] = client_eps_[c]->name();
  }
  if (rx_)
    for (size_t b = size_t{c} * kRxBuffers; b < size_t{c + 1} * kRxBuffers; ++b) {
      unmark_repost_st(b);
      post_rx_st(b);
    }
}

void Worker::close_client_endpoint_st(uint32_t c) {
  if (rx_)
    for (size_t b = size_t{c} * kRxBuffers; b < size_t{c + 1} * kRxBuffers; ++b)
      unmark_repost_st(b);
  std::lock_guard lock(names_mu_);
  if (!client_eps_[c]) return;
  counters_.endpoints_closed.fetch_add(1, std::memory_order_relaxed);
  closed_verbs_ += client_eps_[c]->counters().snapshot();
  client_eps_[c].reset();
  client_names_[c].clear();
}

fabric::Endpoint& Worker::rx_endpoint(size_t b) const {
  return isolated_ ? *client_eps_[b / kRxBuffers] : *eps_[0];
}

// Where client c's requests arrive and its READs leave (answers rotate over the shared
// queues; see post_reply_st).
fabric::Endpoint& Worker::endpoint_of(uint32_t c) const {
  return isolated_ ? *client_eps_[c] : *eps_[0];
}

void Worker::post_rx_st(size_t b) {
  long ret = rx_endpoint(b).recv_multi(rx_->local(b * rx_per_, rx_per_), &rx_ctx_[b]);
  if (ret == fabric::kAgain) {
    mark_repost_st(b);  // the receive queue is full: the next round tries again
  } else if (ret != 0) {
    spdlog::error("worker {}: cannot post a receive buffer: {}", index_, fabric::error_text(ret));
  }
}

// Receive buffers whose messages were all consumed (the round that used them has run) go
// back to the provider. Called every round, so a buffer released by a message that produced
// no work is reposted too, and one the provider refused is tried again.
void Worker::repost_rx_st() {
  if (!rx_) return;
  if (rx_repost_list_.empty()) return;
  // post_rx_st may flag a buffer again (a full queue): that one waits for the next round.
  rx_reposting_.swap(rx_repost_list_);
  for (uint32_t b : rx_reposting_) {
    rx_repost_[b] = 0;
    post_rx_st(b);
  }
  rx_reposting_.clear();
}

void Worker::unmark_repost_st(size_t b) {
  if (!rx_repost_[b]) return;
  rx_repost_[b] = 0;
  std::erase(rx_repost_list_, static_cast<uint32_t>(b));
}

std::vector<std::vector<uint8_t>> Worker::endpoint_names(uint32_t client) const {
  std::vector<std::vector<uint8_t>> names;
  if (isolated_) {
    std::lock_guard lock(names_mu_);
    if (client < client_names_.size()) names.push_back(client_names_[client]);
    return names;
  }
  for (const auto& ep : eps_) names.push_back(ep->name());
  return names;
}

void Worker::post_event(Event e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
    // seq_cst with block_st's store of sleeping_ and load of events_pending_: either it sees
    // this event before it blocks, or we see it asleep and wake it.
    events_pending_.store(true, std::memory_order_seq_cst);
  }
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

void Worker::wake() {
  if (waiter_) waiter_->wake();
}

// The other half of block_st's check: the producer's queue store, then this load (seq_cst on
// both sides), so that either block_st sees the work or we see it asleep.
void Worker::notify() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

std::string Worker::add_client(ClientInfo c, int timeout_ms, bool* late) {
  if (late != nullptr) *late = false;
  if (c.index >= o_.max_clients) return fmt::format("no client index {} here", c.index);
  idle_[c.index].store(false, std::memory_order_relaxed);
  auto added = std::make_shared<std::promise<std::string>>();
  std::future<std::string> answer = added->get_future();
  post_event({Event::Kind::kAdd, std::move(c), std::move(added)});
  if (answer.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
    if (late != nullptr) *late = true;
    return fmt::format("worker {} did not take the client within {} ms", index_, timeout_ms);
  }
  try {
    return answer.get();
  } catch (const std::future_error&) {  // the worker stopped with the event still queued
    return fmt::format("worker {} stopped", index_);
  }
}

void Worker::remove_client(uint32_t index) {
  ClientInfo info;
  info.index = index;
  post_event({Event::Kind::kRemove, std::move(info), nullptr});
}

bool Worker::take_events_st() {
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
    if (c >= o_.max_clients) continue;  // add_client() refuses such an index before posting
    ClientState& s = clients_[c];
    if (e.kind == Event::Kind::kOpenEndpoint) {
      try {
        open_client_endpoint_st(c);
      } catch (const std::exception& ex) {
        spdlog::error("worker {}: cannot open client {}'s endpoint: {}", index_, c, ex.what());
      }
      continue;
    }
    if (e.kind == Event::Kind::kRemove) {
      // The client is gone (its control connection closed): its protocol stops serving it and
      // clears what it left (slots), so nothing of it is taken for the index's next client.
      const bool was_active = s.active;
      std::erase(admitted_, c);
      if (was_active && s.side != nullptr && s.side->scans_memory()) scanning_clients_--;
      if (s.side != nullptr) s.side->remove_client_st(c);
      s.side = nullptr;
      s.active = false;
      s.dropped = false;
      s.backlog.clear();
      if (isolated_) {
        // Whatever it left inside the provider goes with its endpoint.
        s.peer = fabric::kNoPeer;
        close_client_endpoint_st(c);  // the index's next client gets a fresh one
        if (fabric::remove_dead_peer_region(*fabric_, s.address))
          counters_.regions_reclaimed.fetch_add(1, std::memory_order_relaxed);
        s.address.clear();  // a client refused at admission has none to reclaim
      } else {
        // Its address stays in the AV a while (in-flight answers may still use it).
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
    if (std::string why = insert_peer_st(c, e.info.address, &s.peer); !why.empty()) {
      // Refused at admission (Server::on_hello): the client is told why and never served.
      spdlog::warn("worker {}: client {} has an unusable address: {}", index_, c, why);
      if (e.added) e.added->set_value(std::move(why));
      continue;
    }
    if (!s.active) {
      active_clients_.fetch_add(1, std::memory_order_relaxed);
      admitted_.push_back(c);
    } else if (s.side != nullptr && s.side->scans_memory()) {
      scanning_clients_--;  // re-admitted: counted again below
    }
    s.active = true;
    s.dropped = false;
    s.epoch = e.info.epoch;
    s.address = e.info.address;
    s.sent = 0;
    s.backlog.clear();
    s.stuck_since = {};
    s.side = side_of_[static_cast<size_t>(e.info.protocol->id)];
    if (s.side->scans_memory()) scanning_clients_++;
    s.side->add_client_st(c, s.epoch, *e.info.protocol, e.info.hello);
    if (e.added) e.added->set_value({});
  }
  return true;
}

// Client c's address into the address vector of every endpoint it talks to: its own
// (isolated) or each shared one, where it gets the same index in each. All or nothing: a name
// that one AV took and the next refused leaves the first again at once (it was never used, so
// no operation of ours can still hold it, unlike a departed client's; retire_peer_st). The
// fabric layer refuses a name of another provider's shape before libfabric sees it
// (fabric::peer_name_problem).
std::string Worker::insert_peer_st(uint32_t c, std::span<const uint8_t> address,
                                   fabric::PeerAddr* peer) {
  if (isolated_) {
    if (!client_eps_[c]) return "its endpoint is not open";
    try {
      *peer = client_eps_[c]->insert_peer(address);
      return {};
    } catch (const std::exception& ex) {
      return ex.what();
    }
  }
  std::vector<fabric::PeerAddr> taken;
  taken.reserve(eps_.size());
  try {
    for (auto& ep : eps_) taken.push_back(ep->insert_peer(address));
  } catch (const std::exception& ex) {
    for (size_t i = 0; i < taken.size(); ++i) eps_[i]->remove_peer(taken[i]);
    return ex.what();
  }
  *peer = taken.empty() ? fabric::kNoPeer : taken.back();
  return {};
}

// A departed client's address leaves the AV only a while later: the provider may still hold
// operations to it (an unsignaled answer, a shm command in flight), and shm unmaps the peer's
// region on fi_av_remove, which such an operation would then touch (seen: SIGSEGV in shm's
// progress under quick connect/disconnect churn).
void Worker::retire_peer_st(fabric::PeerAddr peer) {
  if (peer != fabric::kNoPeer) retired_.push_back({peer, Deadline::after_ms(1000)});
}

void Worker::bury_retired_st() {
  while (!retired_.empty() && retired_.front().until.expired()) {
    for (auto& ep : eps_) ep->remove_peer(retired_.front().peer);
    retired_.pop_front();
  }
}

void Worker::run_st(const std::atomic<bool>& stop) {
  if (!pin_this_thread(core_)) spdlog::warn("worker {}: could not pin to core {}", index_, core_);
  if (local_ != nullptr) local_fd_ = local_->wait_fd(*this);
  uint32_t rounds = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    store::add_st(counters_.rounds);  // poll rounds: fewer per second = busier (fabkv-bench)
    if ((++rounds & 1023) == 0) periodic_st();
    const bool events = drain_events_st();
    const bool active = round_st();
    if (adaptive_) idle_st(active || events, stop);
  }
  // Finish what is in hand: answer collected requests (those waiting for the log too, once it
  // has them) and let the last answers go out.
  round_st();
  Deadline d = Deadline::after_ms(200);
  while (!d.expired()) {
    poll_cqs_st();
    if (release_durable_st()) send_replies_st();
  }
}

void Worker::periodic_st() {
  bury_retired_st();
  if (engine_)
    engine_->housekeeping();  // e.g. the pilaf engine's retired generations, even
                              // when no pilaf protocol is served
  for (auto& side : sides_) side->tick_st();
}

// One round: completions and messages, the protocols' memory polls, then every protocol runs
// what it collected and the round's answers leave together (Guidelines sec. 4.1). True when it
// saw a sign of work: a completion, an answer built, a backlog.
bool Worker::round_st() {
  const uint64_t answers = answers_;
  const bool completions = poll_cqs_st() > 0;
  // The empty turn is what a message waits for on average (half of it, on each side:
  // docs/results/perf-idle-2026-11-27.md), so what usually has nothing to do is looked at
  // here before a call.
  const bool released = !held_.empty() && release_durable_st();
  if (clear_at_ != 0) due_clear_st();
  for (auto& side : sides_) side->poll_st();
  for (auto& side : sides_)
    if (side->has_work_st()) side->flush_st();
  if (!out_.empty() || any_backlog_) send_replies_st();
  if (!rx_repost_list_.empty()) repost_rx_st();
  const bool local = local_ != nullptr && local_->run_st(*this);
  return completions || released || answers_ != answers || any_backlog_ || local;
}

// --poll adaptive: after poll.spin_us without a sign of work, block (or sleep) once. The
// spinning path never comes here.
void Worker::idle_st(bool active, const std::atomic<bool>& stop) {
  if (!active)
    for (auto& side : sides_) active |= side->busy_st();
  if (active) {
    idle_rounds_ = 0;
    sleep_us_ = PollOptions::kFirstSleepUs;
    fabric_woke_ = false;  // the wake-up, if any, was for work we can see
    return;
  }
  if (++idle_rounds_ % kIdleCheck != 0) return;
  const auto now = Clock::now();
  if (idle_rounds_ == kIdleCheck) {
    idle_since_ = now;
    return;
  }
  if (now - idle_since_ < std::chrono::microseconds(uint64_t{o_.poll.spin_us} << stretch_)) return;
  // Woken by the fabric, then a whole polling time without a sign of work: what woke us was a
  // one-sided operation our progress served (a pilaf READ on tcp raises no completion, and
  // tcp;ofi_rxm counts none). Under a READ load that would put the worker to sleep after every
  // polling time and make the next READ pay a wake-up (measured: p99 2.4 ms instead of 60 us on
  // a shared host), so each such wake-up doubles the polling time, and only a wait that times
  // out (10 ms of nothing at all) brings it back to --poll-spin-us. Not a visible request: a
  // pilaf load's PUTs do not say its GETs stopped (tried: resetting, or halving, on a wake-up
  // for visible work cost pilaf on tcp 10-15% of its throughput and doubled its p99). The
  // price: a new client's connection set-up also wakes the worker a few times for nothing, so
  // a client that then keeps talking at intervals under the stretched polling time keeps the
  // worker polling, as spin would, until it falls silent for that time plus 10 ms.
  if (fabric_woke_) {
    fabric_woke_ = false;
    stretch_ = std::min(stretch_ + 1, kMaxStretch);
    store::add_st(counters_.unexplained_wakes);
  }
  // Peers READing or WRITing our memory raise no completion (pilaf's GETs); where the
  // provider counts them (shm), a count that moved since the last look is work too, so a
  // worker under a READ-only load keeps polling (and draining the notices those leave in its
  // command queue, which fills after rx_depth of them, docs/fabric.md).
  const uint64_t remote = remote_ops_st();
  if (remote != remote_seen_) {
    remote_seen_ = remote;
    idle_since_ = now;
    return;
  }
  block_st(stop);
}

uint64_t Worker::remote_ops_st() {
  uint64_t n = 0;
  for (auto& ep : eps_)
    if (ep->counts_remote_ops()) n += ep->remote_ops();
  for (uint32_t c : admitted_)
    if (c < client_eps_.size() && client_eps_[c] && client_eps_[c]->counts_remote_ops())
      n += client_eps_[c]->remote_ops();
  return n;
}

// Blocks on the endpoints' wait objects when everything an admitted client sends fires them
// (fabric/waiter.h: tcp wakes on any inbound bytes; a completions-only provider only while no
// client puts requests into memory); otherwise sleeps, doubling from 50 us up to
// poll.sleep_us. With no client admitted, nothing can arrive but a control event, which rings
// the waiter. Always bounded (kMaxBlock); periodic work runs after every wait.
void Worker::block_st(const std::atomic<bool>& stop) {
  wait_eps_.clear();
  for (auto& ep : eps_) wait_eps_.push_back(ep.get());
  for (uint32_t c : admitted_)
    if (c < client_eps_.size() && client_eps_[c]) wait_eps_.push_back(client_eps_[c].get());
  fabric::Wakeup wakes = fabric::Wakeup::kAnyArrival;
  for (fabric::Endpoint* ep : wait_eps_) wakes = std::min(wakes, fabric::wakeup_of(*ep));
  const bool block = admitted_.empty() || wakes == fabric::Wakeup::kAnyArrival ||
                     (wakes == fabric::Wakeup::kCompletions && scanning_clients_ == 0);
  const int kind = block ? 1 : 2;
  wait_kind_.store(kind, std::memory_order_relaxed);
  if (logged_kind_ != kind && !admitted_.empty()) {  // say why, once per change
    logged_kind_ = kind;
    if (block)
      spdlog::info("worker {}: idle: blocks on its completion queues ({} wakes it: {})", index_,
                   provider(), fabric::to_string(wakes));
    else
      spdlog::info("worker {}: idle: sleeps up to {} us between polls: {}", index_,
                   o_.poll.sleep_us,
                   wakes == fabric::Wakeup::kNone
                       ? provider() + " has no wait object"
                       : fmt::format("{} client(s) put requests into memory, which raises no "
                                     "completion on {}",
                                     scanning_clients_, provider()));
  }
  sleeping_.store(true, std::memory_order_seq_cst);
  if (events_pending_.load(std::memory_order_seq_cst) || stop.load(std::memory_order_relaxed) ||
      (local_ != nullptr && local_->pending_st(*this)) ||
      (!held_.empty() && oplog_->durable() >= held_.front().position)) {
    sleeping_.store(false, std::memory_order_relaxed);  // an event came in: not now
    idle_rounds_ = 0;
    return;
  }
  const auto t0 = Clock::now();
  fabric::Waiter::Woke woke;
  if (block) {
    woke = waiter_->wait(admitted_.empty() ? std::span<fabric::Endpoint* const>() : wait_eps_,
                         local_extra(), kMaxBlock);
  } else {
    woke = waiter_->wait({}, local_extra(), std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(sleep_us_ * 2, o_.poll.sleep_us);
  }
  sleeping_.store(false, std::memory_order_relaxed);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  switch (woke) {
    case fabric::Waiter::Woke::kPending: store::add_st(counters_.not_now); break;
    case fabric::Waiter::Woke::kFabric: store::add_st(counters_.woken_by_fabric); break;
    case fabric::Waiter::Woke::kWake: store::add_st(counters_.woken_by_control); break;
    case fabric::Waiter::Woke::kTimeout: store::add_st(counters_.timeouts); break;
  }
  if (woke != fabric::Waiter::Woke::kPending) {
    store::add_st(counters_.blocks);
    counters_.idle_us.store(counters_.idle_us.load(std::memory_order_relaxed) +
                                static_cast<uint64_t>(us.count()),
                            std::memory_order_relaxed);
  }
  // A timeout leaves the worker idle: the next check blocks again. Anything else (bytes that
  // may be a READ no completion will show, an admission, "not now") earns a full spin.
  if (woke != fabric::Waiter::Woke::kTimeout) idle_rounds_ = 0;
  if (woke == fabric::Waiter::Woke::kFabric) fabric_woke_ = true;
  if (woke == fabric::Waiter::Woke::kTimeout) stretch_ = 0;
  periodic_st();
}

void Worker::execute_st(std::span<const store::Request> reqs, store::CompletionFn done) {
  const bool oversize = engine_->max_value_size() > o_.max_value;
  if (!oplog_ && !oversize) {
    engine_->run_batch(reqs, done);
    return;
  }
  // The log cannot be written (a full disk): a PUT or DELETE is refused before the engine
  // sees it, so that nothing changes that the log could not keep, and so is a GET of a key
  // whose last record is not written yet (its answer would wait for the disk, for as long as
  // it stays full); other reads go on.
  const bool failing = oplog_ && oplog_->failing();
  if (failing) {
    readable_.clear();
    readable_at_.clear();
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].op == store::Op::kGet && readable_st(reqs[i].key)) {
        readable_.push_back(reqs[i]);
        readable_at_.push_back(i);
        continue;
      }
      store::Response refused;
      refused.status = store::Status::kLogFailed;
      store::add_st(counters_.log_refused);
      done(i, refused);
    }
    reqs = readable_;
  }
  engine_->run_batch(reqs, [&](size_t at, const store::Response& r) {
    const size_t i = failing ? readable_at_[at] : at;
    const store::Request& req = reqs[at];
    // Pilaf sec. 4: every acknowledged PUT/DELETE goes to the log before its answer is built
    // (the log's writer thread reaches the disk later; log_barrier_st says when).
    if (oplog_ && r.status == store::Status::kOk) {
      if (req.op == store::Op::kPut)
        oplog_->append_put(req.key, req.value, r.version, req.put.expire_at, req.put.flags);
      else if (req.op == store::Op::kDel) oplog_->append_del(req.key);
      // A touch is logged as the PUT it amounts to (the item with its new expiry and its
      // version kept), so replay and rewrite need no record type of their own.
      else if (req.op == store::Op::kTouch)
        oplog_->append_put(req.key, r.value, r.version, r.expire_at, r.flags);
    } else if (oplog_ && req.op == store::Op::kDel && r.status == store::Status::kNotFound) {
      // A DELETE that found nothing is logged too: the cache engine may have evicted the key,
      // and the log's earlier PUT of it would bring it back at the next start.
      oplog_->append_del(req.key);
    }
    // A memcached item above --max-value (engine_max_value, server/options.h) does not fit a
    // fabric client's buffers: its GET is refused as too large.
    if (oversize && req.op == store::Op::kGet && r.status == store::Status::kOk &&
        r.value.size() > o_.max_value) {
      store::Response refused = r;
      refused.status = store::Status::kTooLarge;
      refused.value = {};
      done(i, refused);
      return;
    }
    done(i, r);
  });
}

bool Worker::clear_st() { return !log_failing() && clear_now_st(); }

// Empties the engine and logs the CLEAR (kept in memory while the log fails), ending a delayed
// one; false, changing nothing, where the engine cannot.
bool Worker::clear_now_st() {
  if (!engine_ || !engine_->clear()) return false;
  clear_at_ = 0;
  if (oplog_) oplog_->append_clear();
  return true;
}

bool Worker::log_failing() const { return oplog_ && oplog_->failing(); }

void Worker::clear_at_st(uint32_t at) {
  clear_at_ = at;
  if (oplog_) oplog_->append_clear(at);
}

// Also while the log fails: its CLEAR with the time is logged already, so the CLEAR of now
// waits in memory with the other records (reads wait for it: log_barrier_st), and no write
// after it can be acknowledged and then emptied by a later replay of the delayed one.
void Worker::due_clear_st() {
  if (clear_at_ == 0 || store::realtime_seconds(nullptr) < clear_at_) return;
  clear_at_ = 0;
  clear_now_st();
}

uint64_t Worker::log_barrier_st(std::string_view key) {
  if (!hold_answers_) return 0;
  const uint64_t appended = oplog_->appended();
  if (appended <= oplog_->durable()) return 0;
  // The log fails and may stay so (a full disk): an answer about a key whose records are all
  // written shows nothing a crash could take back, and goes now; the others wait for the disk.
  if (key.empty() || !oplog_->failing()) return appended;
  return unwritten_st(key) ? appended : 0;
}

bool Worker::readable_st(std::string_view key) {
  return !oplog_ || !oplog_->failing() || !unwritten_st(key);
}

// While the log fails: may `key` show a record not written yet (its own, or a CLEAR)?
bool Worker::unwritten_st(std::string_view key) {
  const uint64_t appended = oplog_->appended();
  if (unwritten_of_ != oplog_->failures() || unwritten_at_ != appended) {
    unwritten_.clear();
    unwritten_clear_ = false;
    oplog_->for_each_unwritten([this](const OpLog::Record& r) {
      if (r.op == OpLog::Op::kClear) unwritten_clear_ = true;
      else if (!r.key.empty()) unwritten_.emplace(r.key);
    });
    unwritten_of_ = oplog_->failures();
    unwritten_at_ = appended;
  }
  return unwritten_clear_ || unwritten_.contains(std::string(key));
}

void Worker::when_durable_st(uint64_t position, std::function<void()> fn) {
  if (position == 0 || (held_.empty() && oplog_->durable() >= position)) {
    fn();
    return;
  }
  held_.push_back({position, std::move(fn)});
}

// What waited for the log and may go now; true when anything did.
bool Worker::release_durable_st() {
  if (held_.empty()) return false;
  const uint64_t durable = oplog_->durable();
  bool any = false;
  while (!held_.empty() && held_.front().position <= durable) {
    std::function<void()> fn = std::move(held_.front().fn);
    held_.pop_front();
    fn();
    any = true;
  }
  return any;
}

// Polls every endpoint in use and hands each completion to `handle`: the shared ones, and
// (isolated) every admitted client's own, whose READ/WRITE notices and first contact need our
// progress.
template <class Handle>
size_t Worker::poll_endpoints_st(Handle&& handle) {
  fabric::Completion comps[32];
  size_t total = 0;
  auto poll = [&](fabric::Endpoint& ep) {
    size_t n = ep.poll(comps);
    for (size_t i = 0; i < n; ++i) handle(comps[i]);
    total += n;
  };
  for (auto& ep : eps_) poll(*ep);
  // Only the admitted clients' (a handler may admit or remove one: indices, not iterators).
  for (size_t i = 0; i < admitted_.size(); ++i) {
    const uint32_t c = admitted_[i];
    if (c < client_eps_.size() && client_eps_[c]) poll(*client_eps_[c]);
  }
  return total;
}

size_t Worker::poll_cqs_st() {
  // First what was reaped while posting (see reap_st), then whatever is new.
  size_t n = deferred_.size();
  if (n > 0) {
    for (size_t i = 0; i < deferred_.size(); ++i) on_completion_st(deferred_[i]);
    deferred_.clear();
  }
  return n + poll_endpoints_st([this](fabric::Completion& c) { on_completion_st(c); });
}

// Drives progress while in the middle of posting (a full queue): completions are kept for the
// next poll_cqs_st instead of being handled here, where they could add requests or answers
// to the lists being walked.
void Worker::reap_st() {
  poll_endpoints_st([this](fabric::Completion& c) { deferred_.push_back(std::move(c)); });
}

void Worker::on_completion_st(fabric::Completion& c) {
  fabric::OpContext* ctx = c.context;
  if (ctx != nullptr && ctx->owner != nullptr) {
    static_cast<proto::ServerProtocol*>(ctx->owner)->on_completion_st(c);
    return;
  }
  const bool is_rx = ctx != nullptr && rx_ && ctx->user == rx_.get();
  if (c.error != 0) {
    if (is_rx) mark_repost_st(ctx->tag);
    else if (c.verb == fabric::Verb::kWrite)
      counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    else counters_.send_errors.fetch_add(1, std::memory_order_relaxed);  // a client went away
    return;
  }
  if (is_rx) {
    // A message, a buffer-release notice, or both: shm releases a multi-recv buffer with a
    // completion of its own that carries FI_MULTI_RECV and no FI_RECV; tcp;ofi_rxm flags the
    // last message.
    // A zero-length message counts when it carries immediate data (a header-only SEND,
    // Guidelines sec. 3; the sequencer Spec-S0, proto/seq_spec/).
    if (c.inbound && ((c.len > 0 && c.buf != nullptr) || (c.len == 0 && c.has_data)))
      on_message_st(static_cast<const char*>(c.buf), c.len, c.has_data, c.data);
    if (c.multi_recv_done) mark_repost_st(ctx->tag);
  }
}

// A message goes to the protocol of the client its prefix names (proto::MessagePrefix). Every
// message with a body is at least proto::kMinMessageBytes, whatever its protocol: a shorter one
// is malformed. A zero-length message with immediate data (a header-only SEND) names its
// client in the data's low 32 bits (proto::ImmPrefix) and goes to that client's protocol if it
// takes such messages (on_header_only_st); otherwise it is malformed as well.
void Worker::on_message_st(const char* buf, size_t len, bool has_data, uint64_t data) {
  if (len == 0 && has_data) {
    const proto::ImmPrefix m = proto::ImmPrefix::from(data);
    if (!serving_st(m.client, m.epoch)) drain_events_st();  // its admission may be queued
    if (serving_st(m.client, m.epoch) && clients_[m.client].side->on_header_only_st(m.client, data))
      return;
    counters_.short_messages.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (len < proto::kMinMessageBytes) {
    counters_.short_messages.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const proto::MessagePrefix m = bytes::load<proto::MessagePrefix>(buf);
  if (!serving_st(m.client, m.epoch)) {
    drain_events_st();  // the client's admission may still be queued
    if (!serving_st(m.client, m.epoch)) {
      counters_.unknown_client.fetch_add(1, std::memory_order_relaxed);
      return;  // cannot tell who sent it
    }
  }
  clients_[m.client].side->on_message_st(m.client, buf, len);
}

// Every post on the data path: one try, and one more after a round of progress if the provider
// refused it (a full queue). Never a loop: the caller keeps what was refused for the next round.
template <class Post>
long Worker::post_twice_st(Post&& post) {
  long ret = post();
  if (ret == fabric::kAgain) {
    reap_st();
    ret = post();
  }
  return ret;
}

long Worker::read_st(uint32_t c, fabric::LocalBuffer dst, uint64_t raddr, uint64_t rkey,
                     fabric::OpContext* ctx) {
  ClientState& s = clients_[c];
  long ret = post_twice_st([&] { return endpoint_of(c).read(dst, s.peer, raddr, rkey, ctx); });
  if (ret != fabric::kAgain) {
    s.stuck_since = {};
    return ret;
  }
  auto now = Clock::now();
  if (s.stuck_since == Clock::time_point{}) s.stuck_since = now;
  else if (now - s.stuck_since > std::chrono::milliseconds(kPeerStallMs)) drop_peer_st(c, "READs");
  return ret;
}

void Worker::reply_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src) {
  out_.push_back({c, epoch, src, false, 0, 0});
  answers_++;
}
void Worker::reply_imm_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t imm) {
  out_.push_back({c, epoch, src, false, 0, 0, true, imm});
  answers_++;
}

void Worker::reply_write_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t raddr,
                            uint64_t rkey) {
  out_.push_back({c, epoch, src, true, raddr, rkey});
  answers_++;
}

// kAgain (after post_twice_st) leaves the answer to the client's backlog (send_replies_st).
long Worker::post_reply_st(const Outgoing& o, bool more) {
  ClientState& s = clients_[o.client];
  // Multi-queue (Guidelines sec. 4.3.1): answers leave through the k endpoints in turn; an
  // isolated client's through its own.
  fabric::Endpoint& ep = isolated_ ? *client_eps_[o.client] : *eps_[sent_ % eps_.size()];
  uint64_t& n = isolated_ ? s.sent : sent_;
  fabric::LocalBuffer src = o.src;
  fabric::PostOptions po;
  po.more = more;
  po.signaled = (n + 1) % kSignalEvery == 0;
  long ret;
  if (o.write) {
    po.inlined = src.len <= ep.inject_size();
    ret = post_twice_st([&] { return ep.write(src, s.peer, o.raddr, o.rkey, nullptr, po); });
  } else {
    // Padded where the provider would otherwise lock the client's region
    // (fabric/isolation.h); answer buffers and the client's receive buffers have room.
    src.len = fabric::lock_free_len(*fabric_, src.len);
    po.inlined = src.len <= ep.inject_size();
    if (o.has_imm)
      ret = post_twice_st([&] { return ep.send_imm(src, o.imm, s.peer, nullptr, po); });
    else ret = post_twice_st([&] { return ep.send(src, s.peer, nullptr, po); });
  }
  if (ret == 0) n++;
  return ret;
}

void Worker::send_replies_st() {
  flush_backlogs_st();
  // Batching: FI_MORE on all but the last answer of the round, one doorbell.
  for (size_t i = 0; i < out_.size(); ++i) {
    const Outgoing& o = out_[i];
    ClientState& s = clients_[o.client];
    if (!s.active || s.dropped || s.epoch != o.epoch) {
      counters_.stale_responses.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!s.backlog.empty()) {  // keep its order behind what is already waiting
      s.backlog.push_back(o);
      any_backlog_ = true;
      continue;
    }
    bool more = o_.rpc.batching && i + 1 < out_.size();
    long ret = post_reply_st(o, more);
    if (ret == fabric::kAgain) {
      counters_.backlogged.fetch_add(1, std::memory_order_relaxed);
      s.backlog.push_back(o);
      any_backlog_ = true;
      s.stuck_since = Clock::now();
    } else if (ret != 0) {
      (o.write ? counters_.write_errors : counters_.send_errors)
          .fetch_add(1, std::memory_order_relaxed);
    }
  }
  out_.clear();
}

// Answers the provider refused earlier, oldest first; a client that takes none for
// kPeerStallMs is dropped so that it cannot hold the worker (or its memory) any longer.
void Worker::flush_backlogs_st() {
  if (!any_backlog_) return;
  any_backlog_ = false;
  for (uint32_t c : admitted_) {
    ClientState& s = clients_[c];
    while (!s.backlog.empty()) {
      const Outgoing o = s.backlog.front();
      if (!s.active || s.dropped || s.epoch != o.epoch) {
        s.backlog.clear();
        break;
      }
      long ret = post_reply_st(o, false);
      if (ret == fabric::kAgain) {
        if (Clock::now() - s.stuck_since > std::chrono::milliseconds(kPeerStallMs))
          drop_peer_st(c, "answers");
        any_backlog_ |= !s.backlog.empty();
        break;
      }
      if (ret != 0)
        (o.write ? counters_.write_errors : counters_.send_errors)
            .fetch_add(1, std::memory_order_relaxed);
      s.backlog.pop_front();
      s.stuck_since = Clock::now();
    }
  }
}

// The client stopped taking what we post for kPeerStallMs: it is no longer served (its
// requests are ignored, its answers discarded) until its control connection closes and the
// index is reclaimed as for any departed client.
void Worker::drop_peer_st(uint32_t c, const char* why) {
  ClientState& s = clients_[c];
  if (s.dropped) return;
  s.dropped = true;
  s.backlog.clear();
  counters_.dropped_peers.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("worker {}: dropped client {} (epoch {}): the provider refused its {} for {} ms",
               index_, c, s.epoch, why, kPeerStallMs);
}

nlohmann::json Worker::stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  fabric::VerbSnapshot verbs;
  for (const auto& ep : eps_) verbs += ep->counters().snapshot();
  {
    std::lock_guard lock(names_mu_);
    verbs += closed_verbs_;
    for (const auto& ep : client_eps_)
      if (ep) verbs += ep->counters().snapshot();
  }
  for_each_side([&](const proto::Info&, const proto::ServerProtocol& side) {
    verbs += side.own_verbs();
  });
  store::StatsSnapshot es = engine_ ? engine_->stats() : store::StatsSnapshot{};
  nlohmann::json j = {
      {"worker", index_},
      {"active_clients", active_clients_.load(std::memory_order_relaxed)},
      {"unknown_client", r(counters_.unknown_client)},
      {"malformed", r(counters_.short_messages)},  // protocols add theirs
      {"send_errors", r(counters_.send_errors)},
      {"write_errors", r(counters_.write_errors)},
      {"isolated", isolated_},
      {"stale_responses", r(counters_.stale_responses)},
      {"backlogged", r(counters_.backlogged)},
      {"dropped_peers", r(counters_.dropped_peers)},
      {"endpoints_closed", r(counters_.endpoints_closed)},
      {"regions_reclaimed", r(counters_.regions_reclaimed)},
      {"rounds", r(counters_.rounds)},
      {"poll",
       {{"mode", to_string(o_.poll.mode)},
        {"idle_wait",
         kIdleWaitNames[static_cast<size_t>(wait_kind_.load(std::memory_order_relaxed))]},
        {"blocks", r(counters_.blocks)},
        {"woken_by_fabric", r(counters_.woken_by_fabric)},
        {"woken_by_control", r(counters_.woken_by_control)},
        {"timeouts", r(counters_.timeouts)},
        {"not_now", r(counters_.not_now)},
        {"unexplained_wakes", r(counters_.unexplained_wakes)},
        {"idle_ms", r(counters_.idle_us) / 1000}}},
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
  // Each server side's counters, by protocol; numbers also summed into the worker's totals
  // (requests, gets, malformed, ...), objects shown as they are.
  nlohmann::json by_protocol = nlohmann::json::object();
  for_each_side([&](const proto::Info& p, const proto::ServerProtocol& side) {
    nlohmann::json ps = side.stats();
    for (auto& [k, v] : ps.items()) {
      if (v.is_number_unsigned()) j[k] = j.value(k, uint64_t{0}) + v.get<uint64_t>();
      else if (!j.contains(k)) j[k] = v;
    }
    by_protocol[p.name] = std::move(ps);
  });
  j["protocols"] = std::move(by_protocol);
  if (oplog_) {
    const OpLog::Stats ls = oplog_->stats();
    j["oplog"] = {{"sync", OpLog::to_string(oplog_->sync())},
                  {"records", ls.records},
                  {"bytes", ls.bytes},
                  {"flushes", ls.flushes},
                  {"syncs", ls.syncs},
                  {"stalls", ls.stalls},
                  {"write_errors", ls.write_errors},
                  {"failing", oplog_->failing()},
                  {"refused", r(counters_.log_refused)},
                  {"rewrites", ls.rewrites},
                  {"rewrite_errors", ls.rewrite_errors},
                  {"file_bytes", ls.file_bytes},
                  {"base_bytes", ls.base_bytes}};
  }
  return j;
}

}  // namespace fabkv::server
