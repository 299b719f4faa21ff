// The server side of an access protocol, as a generic worker (server/worker.h) drives it; what
// the worker offers it in return is proto/server_host.h.
// docs/architecture.md walks through it with server-reply as the example.
//
// The worker owns the fabric, the endpoints, the engine, the op log, the client table and the
// loop; a protocol owns what it registers (request slots, response buffers, tables clients
// READ) and what it knows of each of its clients. Each worker has one instance per server side
// served (proto/registry.h), so everything here is per worker, and a client index is the
// server's (all protocols share the index space; a client speaks one protocol).
//
// Threads: admit(), control() and stats() run on the control thread (set-up path) and must
// only read what the worker thread does not change, or lock. Everything ending in _st runs
// on the worker's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/wire.h"
#include "fabric/endpoint.h"
#include "proto/registry.h"
#include "proto/server_host.h"
#include "store/engine.h"

namespace fabkv::proto {

// What admitting a client adds to its Welcome (one call per worker).
struct WelcomeParts {
  nlohmann::json layout = nlohmann::json::object();  // keys merged into the layout
  std::vector<control::RegionDescriptor> regions;    // regions the client may reach
};

class ServerProtocol {
 public:
  virtual ~ServerProtocol() = default;

  // ---- construction (main thread)
  // Called once the worker's engine exists (after an op log replay): register (a protocol
  // that brings an engine, proto/registry.h, finds it in the worker), post.
  virtual void open() {}
  // Does this protocol take requests as messages (the worker then posts receive buffers and
  // hands it every message whose prefix names one of its clients, MessagePrefix)?
  virtual bool wants_messages() const { return false; }
  // The largest message a client of it SENDs, and the largest answer it SENDs, for values of up
  // to `max_value` (0: none). The worker sizes its receive buffers and the clients' (recv_size)
  // for the largest over the server sides it serves; asked once, before open().
  virtual size_t max_request_bytes(size_t /*max_value*/) const { return 0; }
  virtual size_t max_answer_bytes(size_t /*max_value*/) const { return 0; }

  // ---- control thread
  // Checks the Hello payload of a client of protocol `p` (one this server side serves) and
  // fills in what the client must know. Returns "" or, to refuse it, the reason (for the user).
  virtual std::string admit(const Info& p, const nlohmann::json& hello, uint32_t client,
                            uint16_t epoch, WelcomeParts* out) = 0;
  // A control-channel request ({"op": op}) this protocol answers; nullopt when it is not its.
  virtual std::optional<nlohmann::json> control(std::string_view /*op*/) const {
    return std::nullopt;
  }
  // Counters (numbers are summed into the worker's totals; objects are shown as they are).
  virtual nlohmann::json stats() const { return nlohmann::json::object(); }
  // The verbs of endpoints the protocol opened itself (herd's datagram answers), added to the
  // worker's "verbs" (any thread, like stats()).
  virtual fabric::VerbSnapshot own_verbs() const { return {}; }

  // ---- worker thread
  // The client was admitted (admit() said yes) / has left; `hello` is what admit() saw.
  virtual void add_client_st(uint32_t c, uint16_t epoch, const Info& p,
                             const nlohmann::json& hello) = 0;
  virtual void remove_client_st(uint32_t c) = 0;
  // Looks for requests in memory (slots clients WRITE into); once per round.
  virtual void poll_st() {}
  // A message from client `c` (its prefix checked by the worker).
  virtual void on_message_st(uint32_t /*c*/, const char* /*msg*/, size_t /*len*/) {}
  // A zero-length message with immediate data from client `c` (ImmPrefix checked by the
  // worker). False: not one this protocol takes (the worker counts it malformed).
  virtual bool on_header_only_st(uint32_t /*c*/, uint64_t /*imm*/) { return false; }
  // A completion of an operation this protocol posted with OpContext::owner == this.
  virtual void on_completion_st(fabric::Completion& /*c*/) {}
  // End of a round: run what was collected, build the answers (ServerHost::reply_st).
  virtual bool has_work_st() const { return false; }
  virtual void flush_st() {}
  // Every ~1000 rounds, and after every time an adaptive worker blocked (housekeeping:
  // retired generations, ...).
  virtual void tick_st() {}

  // ---- for a worker that blocks when idle (--poll adaptive, docs/server.md "Polling")
  // Do its clients put requests into memory that poll_st() scans, raising no completion at the
  // server (HERD's write transport, server-reply)? Then the worker must not sleep on a wait
  // object that fires on completions only. Constant for the server side's life.
  virtual bool scans_memory() const { return false; }
  // Something in hand that only more rounds finish (a request still landing in a slot, or
  // garbage being counted towards kMalformed): the worker keeps polling while it says so.
  virtual bool busy_st() const { return false; }
};

}  // namespace fabkv::proto
