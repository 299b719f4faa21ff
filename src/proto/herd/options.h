// HERD's own knob: how its requests arrive (the shared RPC knobs are in proto/rpc/options.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "proto/rpc/options.h"

namespace fabkv::herd {

// write: into the client's slots of the request region (HERD sec. 4.2); send: as messages
// (HERD sec. 5.5); auto: the one measured faster on the provider (resolve()).
enum class TransportChoice : uint8_t { kAuto, kWrite, kSend };

struct Options {
  // What a client gets when it does not ask for a transport.
  TransportChoice transport = TransportChoice::kAuto;
};

// auto on verbs: write, the paper's choice for an RDMA NIC (HERD sec. 4.2 and fig. 5: inbound
// WRITEs are the cheapest verb a server can take). auto on shm and tcp: send. On shm a WRITE is
// a cross-memory-attach system call by the client and a slot the server must scan; a SEND
// lands in a posted buffer and raises a completion (docs/results/perf-2026-11-23.md has the
// side-by-side numbers). `provider` is the fabric's name ("shm", "tcp;ofi_rxm",
// "verbs;ofi_rxm").
rpc::Transport resolve(TransportChoice c, std::string_view provider);

// Declares this knob (TOML table [herd]; flag --transport); proto/herd/options.cc.
void declare(Knobs& k, Options* o);

}  // namespace fabkv::herd
