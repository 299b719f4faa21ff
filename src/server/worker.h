// Worker: one server thread owning one partition of the keys (EREW), pinned to its own core.
// It owns the fabric, the endpoints, the engine, the op log, the client table and the loop,
// and drives the server side of every protocol served (proto/server_protocol.h), offering them
// its services through proto/server_host.h (the only part of it they see): each round
// it takes fabric completions and messages and routes them to their protocol, lets each
// protocol poll its memory and run what it collected, then posts the answers they built.
//
// Fault isolation (docs/fault-isolation.md): where the provider needs it (shm), each client
// index has an endpoint of its own, closed and opened anew when the client leaves, so a client
// killed inside the provider wedges nothing but its own endpoint. No post waits on one peer: an
// answer that the provider refuses is kept in that client's backlog and retried every round,
// and a peer that takes none for kPeerStallMs is dropped (counted), never the worker.
//
// Threading: constructed on the main thread; run_st() then owns the fabric objects, the engine
// and the protocols' worker-side state. admit/add_client/remove_client/stats may be called
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.h"
#include "fabric/endpoint.h"
#include "fabric/memory_region.h"
#include "fabric/waiter.h"
#include "proto/registry.h"
#include "proto/server_host.h"
#include "proto/server_protocol.h"
#include "server/options.h"
#include "store/engine.h"

namespace fabkv::server {

class OpLog;
class Worker;

// Work that reaches a worker from outside the fabric: the memcached front end's connections
// and the requests other workers forward to this partition's owner (src/memcached/service.h).
// The worker runs it once per round and, when idle, also wakes for `wait_fd()`.
class LocalWork {
 public:
  virtual ~LocalWork() = default;
  // Runs what is there for worker `w` now; true when there was anything. Worker thread.
  virtual bool run_st(Worker& w) = 0;
  // Is something queued for worker `w` that run_st would take? Checked right before it blocks.
  virtual bool pending_st(const Worker& w) const = 0;
  // A descriptor that becomes readable when run_st has something for `w` (-1: none).
  virtual int wait_fd(const Worker& w) const = 0;
};

class Worker final : public proto::ServerHost {
 public:
  Worker(uint32_t index, const ServerOptions& o, const fabric::FabricOptions& fo);
  ~Worker() override;

  uint32_t index() const override { return index_; }
  const ServerOptions& options() const { return o_; }
  const proto::ServerSettings& settings() const override { return settings_; }
  fabric::Fabric& fabric() override { return *fabric_; }
  const std::string& provider() const override;
  bool isolated() const override { return isolated_; }
  // Bytes a client posts per receive buffer for a message answer (ServerHost::recv_size).
  size_t recv_size() const override { return recv_size_; }
  // The endpoint names a client of this index talks to: its own endpoint where clients are
  // isolated, else the worker's shared ones (rpc.queues). Valid while the index is admitted.
  std::vector<std::vector<uint8_t>> endpoint_names(uint32_t client) const;
  // The server side serving protocol `p` on this worker.
  proto::ServerProtocol& protocol(const proto::Info& p) const;
  // Every server side on this worker (for control requests and stats).
  const std::vector<std::unique_ptr<proto::ServerProtocol>>& protocols() const { return sides_; }

  // ---- admission (control thread)
  // Isolated clients: has the worker open index c's endpoint and waits for it, up to
  // `timeout_ms`; false if it did not come. True at once when clients are not isolated.
  bool open_endpoint(uint32_t c, int timeout_ms);
  struct ClientInfo {
    uint32_t index = 0;
    uint16_t epoch = 0;
    const proto::Info* protocol = nullptr;
    std::vector<uint8_t> address;  // the client's endpoint name
    nlohmann::json hello;          // its Hello payload (for the protocol's add_client_st)
  };
  // Hands the worker an admitted client and waits, up to `timeout_ms`, until it serves it: the
  // client's address is in the worker's address vector(s) and its protocol knows it. Returns
  // "" then, else why not: an address this fabric cannot use (nothing of it was kept), or no
  // answer in time (`*late` is set; the worker takes the client whenever it gets to it). The
  // caller then calls remove_client(), so that the index comes back clean either way.
  std::string add_client(ClientInfo c, int timeout_ms, bool* late = nullptr);
  void remove_client(uint32_t index);
  // True once a client index is free on this worker: never used, or its removal has been
  // processed (protocols have cleared what it left). The server reuses an index only when
  // every worker says so, so that a departed client's leftovers never reach a new one.
  bool idle(uint32_t index) const { return idle_[index].load(std::memory_order_acquire); }
  nlohmann::json stats() const;

  // The worker loop; returns after `stop` is set and the work in hand is answered.
  void run_st(const std::atomic<bool>& stop);
  // Ends a block or sleep of an adaptive worker now (Server::stop after setting `stop`). Any
  // thread; nothing to do for a spinning one.
  void wake();
  // Local work the loop also runs (the memcached front end); before run_st starts.
  void attach(LocalWork* work) { local_ = work; }
  // Work for this worker was queued (LocalWork::pending_st now says so): wakes it if it
  // blocks or sleeps. Any thread.
  void notify();

  // ---- services for the protocols (worker thread; proto/server_host.h says what each does)
  bool serving_st(uint32_t c, uint16_t epoch) const override {
    return c < clients_.size() && clients_[c].active && !clients_[c].dropped &&
           clients_[c].epoch == epoch;
  }
  bool dropped_st(uint32_t c) const override { return clients_[c].dropped; }
  // Also logs every acknowledged PUT/DELETE to the op log before `done` sees it (Pilaf sec. 4).
  void execute_st(std::span<const store::Request> reqs, store::CompletionFn done) override;
  // Empties the engine (memcached's flush_all) and logs it, and cancels a delayed one; false,
  // changing nothing, where the engine cannot and while the op log cannot be written.
  bool clear_st();
  // memcached's delayed flush_all: empties the engine at `at` (absolute Unix seconds; a later
  // call or clear_st() replaces it), logged now as a CLEAR with its time (server/oplog.h), so
  // that a restart before then keeps it and one after it carries it out. The worker keeps the
  // time, not the front end: a server restarted without --memcached still carries it out.
  void clear_at_st(uint32_t at);
  // --oplog-sync always (docs/durability.md): every answer built after a logged write waits,
  // GETs included, so that no answer shows a write that a crash could still take back.
  uint64_t log_barrier_st(std::string_view key) override;
  // The op log cannot be written now (OpLog::failing): writes are refused (execute_st).
  bool log_failing() const;
  // False while the log fails for a key whose last record is not written yet: a read of it is
  // refused (store::Status::kLogFailed), as execute_st does.
  bool readable_st(std::string_view key);
  // The worker wakes for it.
  void when_durable_st(uint64_t position, std::function<void()> fn) override;
  store::Engine& engine() { return *engine_; }
  store::Engine* engine_st() override { return engine_.get(); }
  void reply_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src) override;
  void reply_write_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t raddr,
                      uint64_t rkey) override;
  void reply_imm_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t imm) override;
  void send_replies_st() override;
  // kAgain: the provider refused it twice. A peer that refuses for kPeerStallMs is dropped.
  long read_st(uint32_t c, fabric::LocalBuffer dst, uint64_t raddr, uint64_t rkey,
               fabric::OpContext* ctx) override;
  // Drains the admission queue now (a message from a client whose admission is still queued).
  // True when there was anything. The check is inline: every turn of the loop makes it.
  bool drain_events_st() {
    return events_pending_.load(std::memory_order_acquire) && take_events_st();
  }

 private:
  struct Outgoing {
    uint32_t client;
    uint16_t epoch;
    fabric::LocalBuffer src;
    bool write;
    uint64_t raddr, rkey;
    bool has_imm = false;  // a SEND with immediate data (reply_imm_st)
    uint64_t imm = 0;
  };
  struct ClientState {
    bool active = false;
    uint16_t epoch = 0;
    proto::ServerProtocol* side = nullptr;  // the server side of its protocol
    fabric::PeerAddr peer = fabric::kNoPeer;
    bool dropped = false;             // dropped for refusing what we post; no longer served
    uint64_t sent = 0;                // answers posted on its own endpoint (isolated)
    std::deque<Outgoing> backlog;     // answers the provider refused, oldest first
    Clock::time_point stuck_since{};  // when the backlog's head (or a READ) was first refused
    std::vector<uint8_t> address;     // its endpoint name (to reclaim a dead shm peer's region)
  };
  struct Event {
    enum class Kind { kAdd, kRemove, kOpenEndpoint } kind = Kind::kAdd;
    ClientInfo info;
    // kAdd: told "" once the client is served, or why it cannot be (add_client waits on it).
    std::shared_ptr<std::promise<std::string>> added;
  };
  struct Retired {
    fabric::PeerAddr peer;
    Deadline until;
  };

  void make_sides();
  fabric::EndpointOptions open_endpoints();
  void open_engine();
  void open_receive_buffers(size_t min_multi_recv);
  void post_event(Event e);
  bool take_events_st();
  template <class Handle>
  size_t poll_endpoints_st(Handle&& handle);
  template <class Post>
  long post_twice_st(Post&& post);
  std::string insert_peer_st(uint32_t c, std::span<const uint8_t> address, fabric::PeerAddr* peer);
  void open_client_endpoint_st(uint32_t c);
  void close_client_endpoint_st(uint32_t c);
  void post_rx_st(size_t b);
  void repost_rx_st();
  void mark_repost_st(size_t b) {
    if (rx_repost_[b]) return;
    rx_repost_[b] = 1;
    rx_repost_list_.push_back(static_cast<uint32_t>(b));
  }
  void unmark_repost_st(size_t b);
  fabric::Endpoint& rx_endpoint(size_t b) const;
  fabric::Endpoint& endpoint_of(uint32_t c) const;
  void drop_peer_st(uint32_t c, const char* why);
  void flush_backlogs_st();
  long post_reply_st(const Outgoing& o, bool more);
  void retire_peer_st(fabric::PeerAddr peer);
  void bury_retired_st();
  size_t poll_cqs_st();
  void reap_st();
  void on_completion_st(fabric::Completion& c);
  void on_message_st(const char* buf, size_t len, bool has_data, uint64_t data);
  bool round_st();
  void periodic_st();
  void idle_st(bool active, const std::atomic<bool>& stop);
  void block_st(const std::atomic<bool>& stop);
  std::span<const int> local_extra() const {
    return local_fd_ >= 0 ? std::span<const int>(&local_fd_, 1) : std::span<const int>();
  }
  uint64_t remote_ops_st();
  void open_oplog();
  bool release_durable_st();

  const uint32_t index_;
  const ServerOptions o_;
  const proto::ServerSettings settings_;  // what of o_ the protocols read
  const int core_;

  std::unique_ptr<fabric::Fabric> fabric_;
  bool isolated_ = false;              // one endpoint per client index
  size_t recv_size_ = 0, rx_per_ = 0;  // answer receive buffer, rx buffer bytes
  fabric::EndpointOptions client_eo_;
  std::vector<std::unique_ptr<fabric::Endpoint>> eps_;         // shared (not isolated)
  std::vector<std::unique_ptr<fabric::Endpoint>> client_eps_;  // per client (isolated)
  mutable std::mutex names_mu_;  // client_eps_ swaps vs. stats(); client_names_
  std::vector<std::vector<uint8_t>> client_names_;
  fabric::VerbSnapshot closed_verbs_;  // what closed client endpoints had counted
  std::unique_ptr<store::Engine> engine_;
  std::unique_ptr<OpLog> oplog_;
  bool hold_answers_ = false;  // --oplog (answers wait for OpLog::durable(), every sync mode)
  struct Held {
    uint64_t position;
    std::function<void()> fn;
  };
  uint32_t clear_at_ = 0;  // clear_at_st's time; 0: none
  void due_clear_st();     // carries out clear_at_ once its time came
  bool clear_now_st();
  bool unwritten_st(std::string_view key);
  std::unique_ptr<store::Engine> make_engine() const;  // the one --engine names
  // While the log fails (OpLog::failing): the keys whose last record is not written yet, and
  // whether a CLEAR is (log_barrier_st), as of unwritten_at_ (appended()) in failure number
  // unwritten_of_ (OpLog::failures).
  std::unordered_set<std::string> unwritten_;
  bool unwritten_clear_ = false;
  uint64_t unwritten_at_ = 0, unwritten_of_ = 0;
  std::vector<store::Request> readable_;  // execute_st while the log fails: the reads
  std::vector<size_t> readable_at_;       // and where each was in the batch
  std::deque<Held> held_;                 // when_durable_st's, in position order
  // One server side per distinct Info::server among the served protocols.
  std::vector<std::unique_ptr<proto::ServerProtocol>> sides_;
  std::vector<proto::ServerProtocol*> side_of_;  // by proto::Id; nullptr = not served
  // f(info, side) once per server side served (a side serving several protocols: under its own).
  template <class F>
  void for_each_side(F&& f) const {
    for (const proto::Info& p : proto::protocols()) {
      const proto::ServerProtocol* side = side_of_[static_cast<size_t>(p.id)];
      if (side != nullptr && p.server == p.id) f(p, *side);
    }
  }
  std::unique_ptr<fabric::RegisteredBuffer> rx_;  // messages: multi-recv buffers
  std::vector<fabric::OpContext> rx_ctx_;
  // Receive buffers to post again at the end of the round: a flag per buffer (so none is
  // posted twice) and the list of flagged ones, so that a round visits only those (a scan of
  // every client's buffers cost ~3 K instructions per round at 64 clients: callgrind).
  std::vector<uint8_t> rx_repost_;
  std::vector<uint32_t> rx_repost_list_, rx_reposting_;

  std::vector<ClientState> clients_;
  std::vector<uint32_t> admitted_;  // indices of active clients, for loops that visit them
  std::vector<fabric::Completion> deferred_;  // reaped by reap_st, handled by poll_cqs_st
  std::vector<Outgoing> out_;                 // answers built this round
  bool any_backlog_ = false;                  // some client has answers waiting
  std::deque<Retired> retired_;  // departed clients' addresses, removed from the AV later
  uint64_t sent_ = 0;

  LocalWork* local_ = nullptr;
  int local_fd_ = -1;  // local_->wait_fd(*this), read once at the start of run_st

  std::mutex mu_;
  std::deque<Event> events_;
  std::atomic<bool> events_pending_{false};

  // --poll adaptive (docs/server.md, "Polling"); unused when spinning.
  const bool adaptive_;
  std::unique_ptr<fabric::Waiter> waiter_;
  std::atomic<bool> sleeping_{false};  // in block_st: post_event must wake us
  uint32_t scanning_clients_ = 0;  // admitted clients whose requests land in memory (scans_memory)
  uint32_t idle_rounds_ = 0;       // rounds without a sign of work, in a row
  Clock::time_point idle_since_{};
  uint64_t remote_seen_ = 0;  // the endpoints' inbound one-sided count at the last look
  bool fabric_woke_ = false;  // the last wait ended by the fabric, no sign of work since
  uint32_t stretch_ = 0;      // polling time = poll.spin_us << stretch_ (idle_st)
  uint32_t sleep_us_ = PollOptions::kFirstSleepUs;  // next sleep where nothing can wake us
  uint64_t answers_ = 0;                            // answers built so far (a sign of work)
  std::vector<fabric::Endpoint*> wait_eps_;
  std::atomic<int> wait_kind_{0};  // what the last block_st did (stats): 0 none, 1 block, 2 sleep
  int logged_kind_ = 0;            // the last one logged (with clients admitted)

  struct Counters {
    std::atomic<uint64_t> send_errors{0}, write_errors{0}, unknown_client{0}, short_messages{0},
        rounds{0}, stale_responses{0}, backlogged{0}, dropped_peers{0}, endpoints_closed{0},
        regions_reclaimed{0}, log_refused{0};
    // adaptive: times the worker blocked or slept, how each ended, and for how long in all.
    std::atomic<uint64_t> blocks{0}, woken_by_fabric{0}, woken_by_control{0}, timeouts{0},
        not_now{0}, idle_us{0}, unexplained_wakes{0};
  };
  Counters counters_;
  std::atomic<uint32_t> active_clients_{0};
  std::unique_ptr<std::atomic<bool>[]> idle_;
};

}  // namespace fabkv::server
