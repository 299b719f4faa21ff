// HerdWorker: one server worker serving the HERD protocol for the partition it owns (EREW).
// It polls its part of the request region (or its receive buffers, with the SEND transport),
// drives fabric progress, runs what it collected through the engine's prefetch pipeline and
// answers each request with one SEND over its connectionless endpoint(s).
//
// Fault isolation (docs/fabric.md): where the provider needs it (shm), each client index has
// an endpoint of its own, closed and opened anew when the client leaves, so a client killed
// inside the provider wedges nothing but its own endpoint. No post waits on one peer: a SEND
// that the provider refuses is kept in that client's backlog and retried every round, and a
// peer that takes none for kPeerStallMs is dropped (counted), never the worker.
//
// Threading: constructed on the main thread; run_st() then owns the fabric objects and the
// engine. add_client/remove_client/stats may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fabric/endpoint.h"
#include "fabric/memory_region.h"
#include "proto/rpc/wire.h"
#include "server/options.h"
#include "store/engine.h"

namespace fabkv::store {
class PilafEngine;
struct PilafGeneration;
}  // namespace fabkv::store

namespace fabkv::server {

class OpLog;

// Where clients READ a worker's pilaf engine (the current generation).
struct PilafRegions {
  uint32_t generation = 0;
  uint64_t entries = 0;
  fabric::RemoteRegion table, extents;
};

struct ClientInfo {
  uint32_t index = 0;
  uint16_t epoch = 0;
  std::vector<uint8_t> address;   // the client's endpoint name
  fabric::RemoteRegion staging;   // client memory the worker READs indirect requests from
  bool slots = true;              // it WRITEs requests into its slots (else it only SENDs)
};

class HerdWorker {
 public:
  HerdWorker(uint32_t index, const ServerOptions& o, const fabric::FabricOptions& fo);
  ~HerdWorker();

  uint32_t index() const { return index_; }
  // The endpoint names a client of this index talks to: its own endpoint where clients are
  // isolated, else the worker's k shared ones. Valid while the index is admitted.
  std::vector<std::vector<uint8_t>> endpoint_names(uint32_t client) const;
  bool isolated() const { return isolated_; }
  fabric::RemoteRegion request_region() const { return region_->remote(); }
  // Bytes a client posts per response buffer (room for the provider's lock-free padding).
  size_t recv_size() const { return recv_size_; }
  const std::string& provider() const { return fabric_->provider_name(); }
  // Pilaf engine only (else nullopt-like: generation 0, empty regions). Any thread.
  PilafRegions pilaf_regions() const;

  // Isolated clients: has the worker open index c's endpoint (its first client, or the first
  // since the last one left) and waits for it, up to `timeout_ms`; false if it did not come.
  // True at once when clients are not isolated or the endpoint is open. Any thread.
  bool open_endpoint(uint32_t c, int timeout_ms);
  void add_client(ClientInfo c);
  void remove_client(uint32_t index);
  // True once a client index is free on this worker: never used, or its removal has been
  // processed (its slots cleared). The server reuses an index only when every worker says so,
  // so that clearing a departed client's slots can never erase a new client's first request.
  bool idle(uint32_t index) const { return idle_[index].load(std::memory_order_acquire); }
  nlohmann::json stats() const;

  // The worker loop; returns after `stop` is set and the work in hand is answered.
  void run_st(const std::atomic<bool>& stop);

 private:
  struct ClientSlotState;
  struct Pending;
  struct Event {
    enum class Kind { kAdd, kRemove, kOpenEndpoint } kind = Kind::kAdd;
    ClientInfo info;
  };

  void post_event(Event e);
  void drain_events_st();
  template <class Handle>
  void poll_endpoints_st(Handle&& handle);
  template <class Post>
  long post_twice_st(Post&& post);
  void open_client_endpoint_st(uint32_t c);
  void close_client_endpoint_st(uint32_t c);
  void post_rx_st(size_t b);
  fabric::Endpoint& rx_endpoint(size_t b) const;
  fabric::Endpoint& endpoint_of(uint32_t c) const;
  void drop_peer_st(uint32_t c, const char* why);
  void flush_backlogs_st();
  void retire_peer_st(fabric::PeerAddr peer);
  void bury_retired_st();
  void poll_cqs_st();
  void reap_st();
  void on_completion_st(fabric::Completion& c);
  void scan_region_st();
  bool take_slot_st(uint32_t c);
  void on_message_st(const char* buf, size_t len);
  bool accept_request_st(uint32_t c, uint32_t seq, const char* msg);
  void reply_error_st(uint32_t c, uint32_t seq, uint8_t op, rpc::WireStatus st);
  void reply_error_st(uint32_t c, uint16_t epoch, uint32_t seq, uint8_t op, rpc::WireStatus st);
  void execute_st();
  void send_responses_st();
  void repost_rx_st();
  long post_send_st(uint32_t c, size_t offset, size_t len, bool more);
  long post_read_st(uint32_t c, uint32_t slot_index, const rpc::IndirectBody& ib);
  void pilaf_live(const store::PilafGeneration& g);
  void pilaf_release(const store::PilafGeneration& g);
  void log_mutation_st(const store::Request& req, const store::Response& r);
  char* tx_slot(uint32_t c, uint32_t seq);
  size_t tx_offset(uint32_t c, uint32_t seq) const;

  const uint32_t index_;
  const uint32_t window_, slot_size_, max_clients_, queues_;
  const size_t max_value_, staging_slot_;
  const rpc::Transport transport_;
  const bool messages_;  // requests may arrive as messages (SEND transport, or a pilaf protocol)
  const bool batching_;
  const int core_;

  std::unique_ptr<fabric::Fabric> fabric_;
  bool isolated_ = false;                               // one endpoint per client index
  size_t recv_size_ = 0, tx_stride_ = 0, rx_per_ = 0;   // response slot, rx buffer bytes
  fabric::EndpointOptions client_eo_;
  std::vector<std::unique_ptr<fabric::Endpoint>> eps_;         // shared (not isolated)
  std::vector<std::unique_ptr<fabric::Endpoint>> client_eps_;  // per client (isolated)
  mutable std::mutex names_mu_;  // client_eps_ swaps vs. stats(); client_names_
  std::vector<std::vector<uint8_t>> client_names_;
  fabric::VerbSnapshot closed_verbs_;  // what closed client endpoints had counted
  std::unique_ptr<store::Engine> engine_;
  store::PilafEngine* pilaf_ = nullptr;  // engine_ when it is the pilaf engine
  struct PilafMrs {
    uint32_t generation;
    std::unique_ptr<fabric::MemoryRegion> table, extents;
  };
  std::vector<PilafMrs> pilaf_mrs_;  // every generation still mapped (current last)
  mutable std::mutex pilaf_mu_;      // pilaf_current_ (control thread reads it)
  PilafRegions pilaf_current_;
  std::unique_ptr<OpLog> oplog_;
  std::unique_ptr<fabric::RegisteredBuffer> region_;   // request slots (clients WRITE here)
  std::unique_ptr<fabric::RegisteredBuffer> tx_;       // responses, one per (client, slot)
  std::unique_ptr<fabric::RegisteredBuffer> staging_;  // indirect request bodies READ here
  std::unique_ptr<fabric::RegisteredBuffer> rx_;       // SEND transport: multi-recv buffers
  std::vector<fabric::OpContext> rx_ctx_;
  std::vector<fabric::OpContext> read_ctx_;            // one per (client, slot)
  std::vector<bool> rx_repost_;

  std::vector<ClientSlotState> clients_;
  std::vector<Pending> batch_;      // requests collected this round
  std::vector<store::Request> reqs_;  // batch_'s engine requests (kept to avoid reallocation)
  std::vector<fabric::Completion> deferred_;  // reaped by reap_st, handled by poll_cqs_st
  struct Outgoing {
    uint32_t client;
    uint16_t epoch;
    size_t offset, len;
  };
  std::vector<Outgoing> out_;       // responses built this round
  struct Retired {
    fabric::PeerAddr peer;
    Deadline until;
  };
  std::deque<Retired> retired_;     // departed clients' addresses, removed from the AV later
  uint64_t sent_ = 0;

  std::mutex mu_;
  std::deque<Event> events_;
  std::atomic<bool> events_pending_{false};

  struct Counters {
    std::atomic<uint64_t> requests{0}, gets{0}, puts{0}, dels{0}, malformed{0}, garbage{0},
        indirect{0}, send_errors{0}, read_errors{0}, batches{0}, unknown_client{0}, rounds{0},
        stale_responses{0}, backlogged{0}, dropped_peers{0}, endpoints_closed{0},
        regions_reclaimed{0};
  };
  Counters counters_;
  std::atomic<uint32_t> active_clients_{0};
  std::unique_ptr<std::atomic<bool>[]> idle_;
};

}  // namespace fabkv::server
