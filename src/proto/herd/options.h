// HERD's own knobs: how its requests arrive and how its answers leave (the shared RPC knobs are
// in proto/rpc/options.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "proto/rpc/options.h"

namespace fabkv::herd {

// write: into the client's slots of the request region (HERD sec. 4.2); send: as messages
// (HERD sec. 5.5); auto: the one measured faster on the provider (resolve()).
enum class TransportChoice : uint8_t { kAuto, kWrite, kSend };

// How answers leave a worker (docs/server.md, "HERD's answers by datagram"): rdm, one SEND on
// the reliable endpoint the requests came from; dgram, one datagram from the worker's datagram
// endpoint (HERD sec. 3.3, 4.3: UD SENDs, no per-client connection state for answers).
enum class Responses : uint8_t { kRdm, kDgram };
inline const char* to_string(Responses r) { return r == Responses::kRdm ? "rdm" : "dgram"; }

struct Options {
  // What a client gets when it does not ask for a transport.
  TransportChoice transport = TransportChoice::kAuto;
  Responses responses = Responses::kRdm;
  // TEST ONLY (tests/client/herd_dgram_e2e_test.cc): each worker drops this many of its first
  // datagram answers instead of sending them, as a lossy fabric would, so that a test sees the
  // client's retry.
  uint32_t test_drop_responses = 0;
};

// auto on shm: send. There a WRITE request is a cross-memory-attach system call by the client
// and a slot the server must scan, while a SEND lands in a posted buffer and raises a
// completion. auto on tcp and verbs: write, HERD sec. 4.2's choice for an RDMA NIC (fig. 5:
// inbound WRITEs are the cheapest verb a server can take), and on tcp the faster measured
// (docs/results/perf-2026-11-23.md, "The request transport"). `provider` is the fabric's name
// ("shm", "tcp;ofi_rxm", "verbs;ofi_rxm").
rpc::Transport resolve(TransportChoice c, std::string_view provider);

// Declares this knob (TOML table [herd]; flag --transport); proto/herd/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::herd
