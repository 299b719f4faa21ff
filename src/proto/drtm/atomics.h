// Whether a fabric's atomics can guard DrTM's lock words (docs/drtm.md, "Who applies the
// atomics"). The worker changes lock words with its CPU's compare-and-swap while clients change
// them with remote atomics. On shm and tcp the worker itself applies every remote atomic, inside
// its own completion-queue polls, so the two never interleave. On verbs the NIC applies them, at
// any moment, and a NIC's atomic is atomic with respect to the CPU's atomics only when the
// device reports IBV_ATOMIC_GLOB; with IBV_ATOMIC_HCA (most ConnectX parts) it is atomic only
// among the device's own atomics, and a worker's CAS racing a client's could both succeed.
//
// libfabric 2.1.0 does not tell which: its verbs provider advertises FI_ATOMIC for every device
// and its fi_query_atomic checks only the operation and the datatype, never the device's
// atomic_cap. So the server asks libibverbs for the device's attributes itself when it was
// built with it (server_atomics.cc), and refuses drtm on a verbs device that is not known to
// have global atomics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fabkv::fabric {
class Fabric;
}

namespace fabkv::drtm {

// How far a device's atomics are atomic (ibv_device_attr::atomic_cap).
enum class AtomicScope : uint8_t {
  kUnknown,  // nobody could tell (no libibverbs, no such device, the query failed)
  kNone,     // IBV_ATOMIC_NONE: no atomics at all
  kDevice,   // IBV_ATOMIC_HCA: atomic among this device's atomics only
  kGlobal,   // IBV_ATOMIC_GLOB: atomic with the CPU's atomics too
};

// Why drtm cannot be served over `provider` (a libfabric provider name as fabric::Fabric
// reports it, e.g. "verbs;ofi_rxm"), whose device `device` reports `scope`; "" when it can.
// Pure: tests/server/drtm_atomics_test.cc runs every case without a NIC.
std::string atomics_refusal(std::string_view provider, std::string_view device, AtomicScope scope);

// The scope of the verbs device behind `fabric` (kUnknown for other providers, or when it
// cannot be asked), and that device's name (libfabric's domain name without a "-dgram" or
// "-xrc" suffix).
AtomicScope device_atomic_scope(const fabric::Fabric& fabric, std::string* device);

}  // namespace fabkv::drtm
