// drtm's refusal of a fabric whose atomics cannot guard its lock words (atomics.h).
#include <rdma/fabric.h>

#include <fmt/format.h>

#include "fabric/fabric.h"
#include "proto/drtm/atomics.h"

#ifdef FABKV_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

namespace fabkv::drtm {

namespace {

#ifdef FABKV_HAVE_IBVERBS
constexpr const char* kWhyUnknown = "libibverbs could not tell";
#else
constexpr const char* kWhyUnknown = "this fabkv-server was built without libibverbs to ask";
#endif

// Whether one of the provider's layers ("verbs;ofi_rxm": verbs under rxm) is verbs.
bool over_verbs(std::string_view provider) {
  while (!provider.empty()) {
    const size_t semi = provider.find(';');
    if (provider.substr(0, semi) == "verbs") return true;
    if (semi == std::string_view::npos) break;
    provider.remove_prefix(semi + 1);
  }
  return false;
}

const char* to_string(AtomicScope s) {
  switch (s) {
    case AtomicScope::kUnknown: break;
    case AtomicScope::kNone: return "no atomics (IBV_ATOMIC_NONE)";
    case AtomicScope::kDevice: return "atomics that are atomic only among its own (IBV_ATOMIC_HCA)";
    case AtomicScope::kGlobal: return "global atomics (IBV_ATOMIC_GLOB)";
  }
  return "unknown";
}

}  // namespace

std::string atomics_refusal(std::string_view provider, std::string_view device, AtomicScope scope) {
  // shm, tcp (and rxm over tcp): the worker applies every atomic in its own polls.
  if (!over_verbs(provider) || scope == AtomicScope::kGlobal) return "";
  const std::string dev = device.empty() ? std::string("the verbs device")
                                         : fmt::format("verbs device {}", device);
  if (scope == AtomicScope::kUnknown)
    return fmt::format(
        "drtm needs global atomics (IBV_ATOMIC_GLOB), and whether {} has them is unknown: "
        "libfabric does not report it and {} (docs/drtm.md)",
        dev, kWhyUnknown);
  return fmt::format(
      "drtm needs global atomics (IBV_ATOMIC_GLOB): {} has {}, so a client's CAS on a lock word "
      "and the worker's own could both succeed (docs/drtm.md)",
      dev, to_string(scope));
}

AtomicScope device_atomic_scope(const fabric::Fabric& fabric, std::string* device) {
  device->clear();
  const fi_info* info = fabric.info();
  if (!over_verbs(fabric.provider_name()) || info == nullptr || info->domain_attr == nullptr ||
      info->domain_attr->name == nullptr)
    return AtomicScope::kUnknown;
  std::string name = info->domain_attr->name;
  for (const char* suffix : {"-dgram", "-xrc"})
    if (name.size() > std::string_view(suffix).size() && name.ends_with(suffix))
      name.resize(name.size() - std::string_view(suffix).size());
  *device = name;
#ifdef FABKV_HAVE_IBVERBS
  AtomicScope scope = AtomicScope::kUnknown;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return scope;
  for (int i = 0; i < n; ++i) {
    if (name != ibv_get_device_name(list[i])) continue;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0)
        scope = attr.atomic_cap == IBV_ATOMIC_GLOB  ? AtomicScope::kGlobal
                : attr.atomic_cap == IBV_ATOMIC_HCA ? AtomicScope::kDevice
                                                    : AtomicScope::kNone;
      ibv_close_device(ctx);
    }
    break;
  }
  ibv_free_device_list(list);
  return scope;
#else
  return AtomicScope::kUnknown;
#endif
}

}  // namespace fabkv::drtm
