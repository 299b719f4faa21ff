// Fabric: one opened libfabric fabric + domain for a provider and endpoint type, with the
// provider's attributes that protocols must honour (mr_mode bits, inject size, immediate data
// size, progress model). Organised like a libfabric provider: one file per object.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "fabric/rxm.h"

struct fi_info;
struct fid_fabric;
struct fid_domain;

namespace fabkv::fabric {

// Paper transports and their libfabric stand-ins (docs/architecture.md, "The fabric layer"):
//   RC/UC connected QP -> kMsg (libfabric has no UC), UD -> kDgram, and kRdm, the
//   connectionless reliable endpoint that shm and tcp;ofi_rxm offer.
enum class EndpointType : uint8_t { kMsg, kRdm, kDgram };
const char* to_string(EndpointType t);
EndpointType endpoint_type_from_string(const std::string& s);  // "msg"|"rdm"|"dgram"

struct FabricOptions {
  std::string provider = "auto";  // auto|shm|tcp|verbs|udp
  EndpointType type = EndpointType::kRdm;
  std::string peer_host;     // for auto: where the peer lives ("" = this host)
  std::string bind_host;     // tcp/verbs/udp: local address to bind ("" = provider default)
  std::string bind_port;     // MSG listeners: a fixed port ("" = ephemeral)
  bool atomics = true;       // ask for FI_ATOMIC (dropped automatically for DGRAM)
  bool thread_safe = false;  // FI_THREAD_SAFE instead of FI_THREAD_DOMAIN (one thread per domain)
  bool quiet = false;        // do not log the provider choice
  // What one endpoint must receive at once, for the sizes of ofi_rxm's buffers (fabric/rxm.h).
  // Read by the process's first open only.
  RxmNeeds rxm;
};

class Fabric {
 public:
  // Chooses the provider (logging which and why), opens fabric and domain. Throws FabricError.
  static std::unique_ptr<Fabric> open(const FabricOptions& options);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const std::string& provider_name() const { return provider_name_; }  // e.g. "tcp;ofi_rxm"
  // provider_name() == "shm", kept at open: fabric/isolation.cc asks on every post.
  bool is_shm() const { return is_shm_; }
  const std::string& requested_provider() const { return requested_; }  // e.g. "tcp"
  const std::string& choice_reason() const { return reason_; }
  EndpointType type() const { return type_; }

  // Provider attributes.
  uint64_t mr_mode() const;
  bool virt_addr() const;  // FI_MR_VIRT_ADDR: remote addresses are virtual addresses
  bool prov_key() const;   // FI_MR_PROV_KEY: the provider picks MR keys
  bool local_mr() const;   // FI_MR_LOCAL: local buffers need a descriptor
  size_t inject_size() const;
  size_t cq_data_size() const;
  size_t max_msg_size() const;
  bool manual_progress() const;  // data progress is FI_PROGRESS_MANUAL
  bool has_atomics() const;
  bool has_rma() const;
  std::string describe() const;  // one line of the above, for logs and perf headers

  fi_info* info() const { return info_; }
  fid_domain* domain() const { return domain_; }
  fid_fabric* fabric() const { return fabric_; }
  // Unique requested key for providers without FI_MR_PROV_KEY.
  uint64_t next_mr_key() { return next_key_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Fabric() = default;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  std::string provider_name_, requested_, reason_;
  EndpointType type_ = EndpointType::kRdm;
  bool is_shm_ = false;
  std::atomic<uint64_t> next_key_{1};
};

// The libfabric API version fabkv asks for: 2.x, built by scripts/install-libfabric.sh
// (docs/fabric.md, "Which libfabric").
inline constexpr uint32_t kFiVersionMajor = 2, kFiVersionMinor = 0;

// fabkv's own version, the CMake project version: "0.1.0".
const char* fabkv_version();
// The libfabric loaded at run time (not the headers fabkv was compiled against): fi_version()'s
// major.minor, completed with the library's release string (fi_tostr(FI_TYPE_VERSION)) when
// that agrees with it: "2.1.0".
std::string library_version();
// What `--version` prints: "fabkv 0.1.0, libfabric 2.1.0".
std::string version_line();

}  // namespace fabkv::fabric
