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
