// ServerHost: the services a worker offers the server sides of its protocols
// (proto/server_protocol.h). server::Worker implements it (server/worker.h); a protocol sees
// only this, so that the protocol layer does not depend on the server's (the dependency points
// down: server -> proto), and a protocol can be driven by a fake host without a worker or a
// fabric (tests/proto/).
//
// The worker owns the fabric, the endpoints, the engine, the op log and the client table; what
// a protocol may do with them is here. Calls ending in _st run on the worker's thread only.
// Cost: one virtual call per request or per answer, none per byte (the worker's own loop calls
// the protocols, not the other way round).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "fabric/endpoint.h"
#include "fabric/fabric.h"
#include "proto/options.h"
#include "proto/prefix.h"
#include "store/engine.h"

namespace fabkv::proto {

// The server settings protocols read (server::ServerOptions has them all, with their help):
// the protocols' own option blocks and the few general ones they size themselves by.
struct ServerSettings : ProtocolOptions {
  uint32_t workers = 1;          // the server's workers (rings hold one part per worker)
  uint32_t max_clients = 64;     // Nc: client indices per worker
  size_t max_value = 64 * 1024;  // largest value accepted
  std::string data_dir;          // state that survives a restart (the sequencers')
};

class ServerHost {
 public:
  virtual ~ServerHost() = default;

  // ---- facts, constant for the host's life (any thread)
  virtual uint32_t index() const = 0;  // the worker's index (its partition)
  virtual const ServerSettings& settings() const = 0;
  // The fabric to register memory with (a protocol's regions, answer buffers).
  virtual fabric::Fabric& fabric() = 0;
  virtual const std::string& provider() const = 0;
  // Does each client have an endpoint of its own (docs/fault-isolation.md)? Then a client uses
  // one queue, and its READs die with its endpoint when it leaves.
  virtual bool isolated() const = 0;
  // Bytes a client posts per receive buffer for an answer message: the largest any served
  // protocol declared (ServerProtocol::max_answer_bytes), padded for the provider
  // (fabric/isolation.h). Valid once every server side is constructed (from open() on).
  virtual size_t recv_size() const = 0;

  // ---- worker thread
  // Is client c (of incarnation `epoch`) admitted and still served?
  virtual bool serving_st(uint32_t c, uint16_t epoch) const = 0;
  // Was client c dropped for refusing what the worker posts (no longer served)?
  virtual bool dropped_st(uint32_t c) const = 0;
  // The worker's engine, built from the registry before open() (proto/registry.h, make_engine): a
  // protocol that brings its own finds it here and registers its memory; nullptr on a server
  // without key-value data (the sequencers).
  virtual store::Engine* engine_st() = 0;
  // Runs requests through the engine's prefetch pipeline (HERD sec. 4.1.1) and logs every
  // acknowledged PUT/DELETE before `done` sees it (Pilaf sec. 4). While the op log cannot be
  // written, PUTs and DELETEs are refused (store::Status::kLogFailed) before the engine sees them.
  virtual void execute_st(std::span<const store::Request> reqs, store::CompletionFn done) = 0;
  // With --oplog (docs/durability.md): the log position an answer about `key` built now must
  // wait for before anyone sees it, or 0 when it may leave at once. An empty key: an answer
  // about any key (flush_all, a batch).
  virtual uint64_t log_barrier_st(std::string_view key) = 0;
  // Runs `fn` on the worker's thread once the log is durable up to `position` (a
  // log_barrier_st() value), in the order of the calls; at once when it is already.
  virtual void when_durable_st(uint64_t position, std::function<void()> fn) = 0;
  // An answer to client c: sent as a message, or WRITten to (raddr, rkey) in its memory. It
  // leaves at the end of the round (all of a round's answers together), or waits while the
  // provider refuses it. `src` must stay valid until then.
  virtual void reply_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src) = 0;
  virtual void reply_write_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t raddr,
                              uint64_t rkey) = 0;
  // An answer by SEND with immediate data; `src` may be empty (a header-only SEND).
  virtual void reply_imm_st(uint32_t c, uint16_t epoch, fabric::LocalBuffer src, uint64_t imm) = 0;
  // Posts the round's answers now (a protocol that does not batch calls it per request).
  virtual void send_replies_st() = 0;
  // READs client memory into `dst`; its completion comes to the protocol that set
  // ctx->owner. fabric::kAgain: the provider refused it; keep the work for the next round.
  virtual long read_st(uint32_t c, fabric::LocalBuffer dst, uint64_t raddr, uint64_t rkey,
                       fabric::OpContext* ctx) = 0;
};

}  // namespace fabkv::proto
