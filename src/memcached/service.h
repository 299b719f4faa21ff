// The memcached front end (docs/memcached.md): memcached's text, meta and binary protocols over
// TCP, on the same engines and data as the fabric protocols.
//
// Composition. The server knows nothing of memcached: fabkv-server's main builds the Service
// over the Server's workers and attaches it (Server::attach), and each worker then runs it as
// its local work (server::LocalWork, once per round). The files: service.cc (this class),
// shard.h (one worker's share, and the map of the rest: listener.cc, commands.cc, forward.cc,
// stats.cc, dump.cc),
// reply.h (the answers), text.h, binary.h and exec.h (the parsers and the commands on an engine).
//
// Threads and queues. There is no thread of its own: each worker serves a share of the
// connections in its loop. Every worker listens on
// the same port with SO_REUSEPORT, so the kernel spreads new connections over the workers, and
// keeps them in an epoll set that it polls without blocking; when the worker goes idle it
// blocks on that epoll descriptor together with the fabric (Worker::block_st). A command whose
// key belongs to the connection's own worker runs at once (no hand-off, no copy of the value).
// One whose key belongs to worker p (partition_of(hash_key(key), workers)) is copied into an Op
// and goes to p's inbox: a mutex-guarded vector that p swaps out whole once per round (a batch
// per lock, so many producers cost one uncontended lock per round each); p runs it on its engine
// and sends the Op back through the sender's inbox the same way, and each push rings the
// receiver (Worker::notify) if it blocks. So each partition is still touched by its owner only
// (EREW); a connection's answers leave in its commands' order (each connection keeps its
// answers in order, waiting for forwarded ones).
//
// Limits: keys up to 250 bytes, values up to --max-value (SERVER_ERROR object too large for
// cache, the block skipped), lines up to 64 KiB but retrievals' of any length (text.h),
// --memcached-max-conns connections (past it, memcached's "ERROR Too many open connections" and
// a close). Memory: each connection's input and answers are bounded (listener.cc, "Answers in
// bounded memory"), and all of them together by --memcached-conn-memory (listener.cc, "The
// server's total"); docs/memcached.md states each bound and what a client meets at it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/worker.h"

namespace fabkv::memcached {

struct ServiceOptions {
  std::string listen;           // HOST:PORT; port 0 picks a free one
  uint32_t max_conns = 4096;    // open client connections at once
  size_t max_value = 64 << 10;  // the largest item: server::engine_max_value
  size_t memory = 0;            // the engines' --memory (stats settings maxbytes)
  // The bytes all connections' buffers may hold together (--memcached-conn-memory): past it the
  // connections wait, and those whose clients have stopped reading are closed (listener.cc).
  size_t conn_memory = size_t{1} << 30;
};

class Service final : public server::LocalWork {
 public:
  // Binds the listening sockets (one per worker), to be attached to those workers
  // (server::Server::attach) before they run. Throws std::runtime_error.
  Service(const ServiceOptions& o, std::vector<server::Worker*> workers);
  ~Service() override;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  std::string address() const;  // "host:port" actually bound

  bool run_st(server::Worker& w) override;
  bool pending_st(const server::Worker& w) const override;
  int wait_fd(const server::Worker& w) const override;

  // Counters (any thread), as memcached's `stats` names them.
  nlohmann::json stats() const;
  // The engines' counters summed over the partitions (any thread).
  store::StatsSnapshot engine_totals() const;

  // One lru_crawler metadump at a time in the whole server, as memcached runs one: false when
  // another runs (any thread).
  bool start_metadump() { return !metadump_.exchange(true, std::memory_order_acq_rel); }
  void end_metadump() { metadump_.store(false, std::memory_order_release); }

  struct Shard;

 private:
  ServiceOptions o_;
  std::string host_;
  uint16_t port_ = 0;
  std::vector<server::Worker*> workers_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint32_t> curr_conns_{0};
  std::atomic<bool> metadump_{false};
  const uint32_t started_;
};

}  // namespace fabkv::memcached
