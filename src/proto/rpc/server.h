// The server half of the shared RPC pieces (proto/rpc/wire.h): request slots that clients
// WRITE into and a worker polls (HERD sec. 4.2), requests that arrive as messages (HERD
// sec. 5.5), large requests whose body the worker READs from client memory, the round's batch
// through the engine, and one answer per request. How an answer travels is the protocol's:
// by default one SEND (herd, pilaf, drtm), server-reply WRITEs it into the client's ring
// (answer_st). Everything it needs of the worker goes through proto/server_host.h.
//
// One instance per worker and protocol: its own request region ("<protocol>.requests.<w>"),
// answer buffers (one per client slot) and staging for indirect bodies, registered only when
// the protocol is served.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric/memory_region.h"
#include "proto/rpc/options.h"
#include "proto/rpc/wire.h"
#include "proto/server_protocol.h"
#include "store/engine.h"

namespace fabkv::rpc {

// An engine's status on the wire: the same value (WireStatus starts with store::Status's, in
// its order), but for a write refused because the op log cannot be written, which the fabric
// clients see as the server failing to serve it (kInternal: Status::kError).
inline WireStatus to_wire(store::Status s) {
  return s == store::Status::kLogFailed ? WireStatus::kInternal : static_cast<WireStatus>(s);
}

class RpcServer : public proto::ServerProtocol {
 public:
  struct Config {
    bool slots = true;      // clients WRITE requests into slots the worker polls
    bool messages = false;  // clients SEND requests
    // Room per answer buffer (header + largest value + extras); 0: the host's recv_size, one
    // answer message of header and largest value, padded for the provider (fabric/isolation.h).
    size_t answer_bytes = 0;
    // Takes OpCode::kNext (a sequencer's request: no key, no engine); the round's kNext
    // requests get consecutive values from one claim_st() (Guidelines sec. 4.2's batching).
    bool next = false;
    // Takes GET/PUT/DEL (through the worker's engine). false for a sequencer, whose server
    // may run without an engine: they are answered kMalformed.
    bool kv = true;
  };
  RpcServer(proto::ServerHost& w, const proto::Info& p, Config cfg);
  ~RpcServer() override;

  void open() override;
  bool wants_messages() const override { return cfg_.messages; }
  // Every RPC client is told recv_size (welcome) and may SEND a whole request, so the family
  // declares its largest whatever the config.
  size_t max_request_bytes(size_t max_value) const override;
  size_t max_answer_bytes(size_t max_value) const override;
  nlohmann::json stats() const override;
  void add_client_st(uint32_t c, uint16_t epoch, const proto::Info& p,
                     const nlohmann::json& hello) override;
  void remove_client_st(uint32_t c) override;
  void poll_st() override;
  void on_message_st(uint32_t c, const char* msg, size_t len) override;
  void on_completion_st(fabric::Completion& c) override;
  bool has_work_st() const override { return !batch_.empty() || !nexts_.empty(); }
  void flush_st() override;
  bool scans_memory() const override { return cfg_.slots; }
  bool busy_st() const override { return stalled_; }

 protected:
  // The layout keys and regions every RPC client needs; `transport` is what it was given.
  void welcome(Transport transport, proto::WelcomeParts* out) const;
  // Posts (or queues) the answer built in `slot` (`len` bytes from its ResponseHeader) for
  // request `seq` of client c: by default as one SEND.
  virtual void answer_st(uint32_t c, uint16_t epoch, uint32_t seq, char* slot, size_t len);
  // What a subclass learns of its client from the Hello (set-up path, worker thread).
  virtual void learn_client_st(uint32_t /*c*/, const nlohmann::json& /*hello*/) {}
  // What a protocol adds at out + len to an answer the engine produced (room: answer_bytes);
  // returns the answer's new length. Error answers get nothing. hydradb: where the GET's item
  // is and its lease (proto/hydradb/wire.h).
  virtual size_t extend_answer_st(const store::Request& /*req*/, const store::Response& /*r*/,
                                  char* /*out*/, size_t len) {
    return len;
  }
  fabric::LocalBuffer answer_buffer(uint32_t c, uint32_t seq, size_t len) const;
  // The fabric the answer buffers are registered with (open()): the worker's, or the one a
  // protocol sends its answers through (herd's datagram endpoint, proto/herd/dgram.h).
  virtual fabric::Fabric& answer_fabric() { return worker_.fabric(); }
  // Config::next: n consecutive values for the round's kNext requests; returns the first, or 0
  // when none can be handed out (each request is then answered kInternal).
  virtual uint64_t claim_st(size_t /*n*/) { return 0; }

  proto::ServerHost& worker_;
  const proto::Info& protocol_;
  const Config cfg_;
  const uint32_t window_, slot_size_, max_clients_;
  const size_t max_value_, staging_slot_;
  const bool batching_;  // rpc.batching (read every poll: kept here, not asked of the host)

 private:
  struct ClientState;
  struct Pending;
  void scan_st(uint32_t c);
  bool accept_st(uint32_t c, const RequestHeader& h, const char* msg);
  void reply_error_st(uint32_t c, uint16_t epoch, uint32_t seq, uint8_t op, WireStatus st);
  char* answer_slot(uint32_t c, uint32_t seq) const;

  size_t stride_ = 0;                                  // bytes per answer buffer
  std::unique_ptr<fabric::RegisteredBuffer> region_;   // request slots (clients WRITE here)
  std::unique_ptr<fabric::RegisteredBuffer> tx_;       // answers, one per (client, slot)
  std::unique_ptr<fabric::RegisteredBuffer> staging_;  // indirect request bodies READ here
  std::vector<fabric::OpContext> read_ctx_;            // one per (client, slot)
  std::vector<ClientState> clients_;
  std::vector<uint32_t> slot_clients_;  // clients whose slots poll_st scans, in admission order
  struct Next {
    uint32_t client;
    uint16_t epoch;
    uint32_t seq;
  };
  void flush_nexts_st();
  std::vector<Pending> batch_;        // requests collected this round
  std::vector<Next> nexts_;           // kNext requests collected this round, in arrival order
  std::vector<store::Request> reqs_;  // batch_'s engine requests (kept to avoid reallocation)
  bool stalled_ = false;              // the last poll_st saw a slot torn or garbage (busy_st)

  struct Counters {
    std::atomic<uint64_t> requests{0}, gets{0}, puts{0}, dels{0}, malformed{0}, garbage{0},
        indirect{0}, read_errors{0}, reads_dropped{0}, batches{0}, nexts{0}, next_errors{0};
  };
  Counters counters_;
};

// "" when the Hello asks for the transport `served` (or for none); else the refusal, which
// names both: "the server takes herd requests by write; this client asked for send", and the
// flag to use. `fixed`: the protocol has one transport, the server no choice of it.
std::string check_transport(const nlohmann::json& hello, std::string_view protocol,
                            Transport served, bool fixed);

// A server side whose requests travel as the server's --transport says (herd's knob, resolved
// by provider: proto/herd/options.h), WRITten into slots or SENT, and whose answers are one
// SEND each: herd, and seq-rpc over it. A client may ask for a transport only to be told if
// it is not the server's.
class TransportServer : public RpcServer {
 public:
  // `cfg`'s slots and messages are set from the transport.
  TransportServer(proto::ServerHost& w, const proto::Info& p, Config cfg);

  std::string admit(const proto::Info& p, const nlohmann::json& hello, uint32_t client,
                    uint16_t epoch, proto::WelcomeParts* out) override;
  nlohmann::json stats() const override;

 private:
  const Transport transport_;
};

}  // namespace fabkv::rpc
