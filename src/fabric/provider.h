// Run-time provider choice: the same binary selects verbs on an RDMA host, shm between
// processes of one host and tcp between hosts (docs/architecture.md, principle 1).
#pragma once

#include <string>

namespace fabkv::fabric {

struct ProviderChoice {
  std::string provider;  // "verbs", "shm", "tcp" or "udp": the core provider to request
  std::string reason;    // one sentence for the log line
};

// `requested` is auto|shm|tcp|verbs|udp. `peer_host` is the host of the peer this process will
// talk to ("" or a loopback/local address means the same host). With auto, FI_PROVIDER in the
// environment wins, then verbs when an RDMA device is present, then shm for a same-host peer,
// else tcp. Throws std::invalid_argument for an unknown name.
ProviderChoice choose_provider(const std::string& requested, const std::string& peer_host);

// The core provider of a libfabric provider name, the one a user gives --provider: "tcp" of
// "tcp;ofi_rxm", "shm" of "shm".
inline std::string core_provider(const std::string& name) { return name.substr(0, name.find(';')); }

// True when `host` names this machine: empty, "localhost", a loopback address, or the address
// of one of its interfaces.
bool is_local_host(const std::string& host);

// True when the kernel shows an RDMA device and libfabric's verbs provider reports it.
bool rdma_device_present();

}  // namespace fabkv::fabric
