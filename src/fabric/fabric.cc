#include "fabric/fabric.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "common/log.h"
#include "fabric/error.h"
#include "fabric/isolation.h"
#include "fabric/provider.h"

namespace fabkv::fabric {

const char* to_string(EndpointType t) {
  switch (t) {
    case EndpointType::kMsg: return "msg";
    case EndpointType::kRdm: return "rdm";
    case EndpointType::kDgram: return "dgram";
  }
  return "?";
}

EndpointType endpoint_type_from_string(const std::string& s) {
  if (s == "msg") return EndpointType::kMsg;
  if (s == "rdm") return EndpointType::kRdm;
  if (s == "dgram") return EndpointType::kDgram;
  throw std::invalid_argument("unknown endpoint type '" + s + "' (expected msg, rdm or dgram)");
}

namespace {

fi_ep_type to_fi(EndpointType t) {
  switch (t) {
    case EndpointType::kMsg: return FI_EP_MSG;
    case EndpointType::kRdm: return FI_EP_RDM;
    case EndpointType::kDgram: return FI_EP_DGRAM;
  }
  return FI_EP_UNSPEC;
}

fi_info* make_hints(const std::string& provider, EndpointType type, bool atomics,
                    bool thread_safe) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw std::bad_alloc();
  hints->ep_attr->type = to_fi(type);
  hints->caps = FI_MSG | FI_SEND | FI_RECV;
  if (type != EndpointType::kDgram) {
    hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (atomics) hints->caps |= FI_ATOMIC;
  }
  if (type == EndpointType::kRdm) hints->caps |= FI_MULTI_RECV;
  // rdm over tcp and verbs is ofi_rxm. In libfabric 2.0 to 2.4 its fi_av_insert walks the
  // messages that arrived while no receive was posted and dereferences the connection each
  // came on, which rxm records only with FI_SOURCE (or FI_DIRECTED_RECV): without it, a peer
  // inserted while any such message waits crashes the process in rxm_get_addr (upstream
  // 47e04dcbf, in 2.5). A server flooded with SENDs then joined by a new client did exactly
  // that (tests/fabric/netns_test.sh). With FI_SOURCE, messages from peers already in the AV
  // wait in their own queue and the walk finds their connection. What is left: a message from a
  // peer not in the AV, waiting for a receive, whose connection closes before an insert (rxm
  // frees the connection). Building libfabric with 47e04dcbf closes that too.
  if (type == EndpointType::kRdm && (provider == "tcp" || provider == "verbs"))
    hints->caps |= FI_SOURCE;
  // Modes fabkv supports: every op context is an OpContext (fi_context2 first), and
  // WRITE-with-immediate targets post receives (verbs asks for FI_RX_CQ_DATA).
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  // Every mr_mode bit a provider may ask for that fabkv honours; verbs needs all four.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = thread_safe ? FI_THREAD_SAFE : FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

}  // namespace

std::unique_ptr<Fabric> Fabric::open(const FabricOptions& o) {
  // Before any fi_getinfo of the process (choose_provider's included): rxm reads its settings
  // when libfabric initialises its providers.
  const std::vector<RxmSetting> rxm = configure_rxm(o.rxm);
  ProviderChoice choice = choose_provider(o.provider, o.peer_host);
  std::string provider = choice.provider;
  if (o.type == EndpointType::kDgram && provider == "tcp") {
    provider = "udp";
    choice.reason += "; datagram endpoints come from the udp provider";
  }
  if (provider == "shm") {
    if (size_t n = remove_stale_own_regions(); n > 0 && !o.quiet)
      spdlog::info("fabric: removed {} shm region(s) a killed process with our pid left", n);
  }
  if (provider == "shm" && o.type != EndpointType::kRdm)
    throw FabricError("fi_getinfo",
                      fmt::format("the shm provider offers only rdm endpoints, not {}",
                                  to_string(o.type)));

  // shm names its endpoints after the node string it is given ("<node>:<uid>:<index>"), so an
  // IP address there makes two processes' endpoints collide: shm never gets one and picks
  // its own unique "<pid>:..." names.
  std::string node = provider == "shm" ? "" : o.bind_host;
  if (node.empty() && (provider == "tcp" || provider == "udp") && is_local_host(o.peer_host))
    node = "127.0.0.1";  // a same-host tcp peer: use the loopback domain, not the first NIC

  auto try_getinfo = [&](bool atomics, fi_info** out) {
    fi_info* hints = make_hints(provider, o.type, atomics, o.thread_safe);
    const char* service = o.bind_port.empty() ? nullptr : o.bind_port.c_str();
    int ret = fi_getinfo(FI_VERSION(kFiVersionMajor, kFiVersionMinor),
                         node.empty() ? nullptr : node.c_str(), service,
                         node.empty() && service == nullptr ? 0 : FI_SOURCE, hints, out);
    fi_freeinfo(hints);
    return ret;
  };

  fi_info* info = nullptr;
  bool want_atomics = o.atomics && o.type != EndpointType::kDgram;
  int ret = try_getinfo(want_atomics, &info);
  if (ret != 0 && want_atomics) {
    ret = try_getinfo(false, &info);
    if (ret == 0) choice.reason += "; no atomics on this provider/endpoint type";
  }
  if (ret != 0) {
    std::string why = fmt::format("no '{}' provider with {} endpoints{}: {}", provider,
                                  to_string(o.type), node.empty() ? "" : " on " + node,
                                  error_text(ret));
    if (const char* env = std::getenv("FI_PROVIDER"); env != nullptr)
      why += fmt::format(" (FI_PROVIDER={} restricts the providers libfabric offers)", env);
    throw FabricError("fi_getinfo", why);
  }

  std::unique_ptr<Fabric> f(new Fabric());
  f->info_ = fi_dupinfo(info);  // keep only the first (best) match
  fi_freeinfo(info);
  f->requested_ = provider;
  f->reason_ = choice.reason;
  f->type_ = o.type;
  f->provider_name_ = f->info_->fabric_attr->prov_name;
  f->is_shm_ = f->provider_name_ == "shm";
  // One thread drives a Fabric's domain, its data and its control calls alike (endpoint.h),
  // so libfabric may drop the locks of its progress path: FI_THREAD_DOMAIN with
  // FI_PROGRESS_CONTROL_UNIFIED (fi_domain(3)). Without it every CQ read on shm took and
  // released a mutex for the CQ's endpoint list, a third of an idle server's time (perf).
  // shm only: tcp;ofi_rxm manages connections behind the application's back.
  if (provider == "shm" && !o.thread_safe)
    f->info_->domain_attr->control_progress = FI_PROGRESS_CONTROL_UNIFIED;
  check(fi_fabric(f->info_->fabric_attr, &f->fabric_, nullptr), "fi_fabric");
  check(fi_domain(f->fabric_, f->info_, &f->domain_, nullptr), "fi_domain");
  if (!o.quiet)
    spdlog::info("fabric: provider {} ({}); {}", f->provider_name_, choice.reason, f->describe());
  if (!o.quiet && f->provider_name_.find("ofi_rxm") != std::string::npos) {
    std::string sizes;
    for (const RxmSetting& s : rxm) sizes += fmt::format(" {}={}", s.name, s.value);
    spdlog::info("fabric: rxm buffers:{} (docs/fabric.md)", sizes);
  }
  return f;
}

Fabric::~Fabric() {
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

uint64_t Fabric::mr_mode() const { return static_cast<uint64_t>(info_->domain_attr->mr_mode); }
bool Fabric::virt_addr() const { return (mr_mode() & FI_MR_VIRT_ADDR) != 0; }
bool Fabric::prov_key() const { return (mr_mode() & FI_MR_PROV_KEY) != 0; }
bool Fabric::local_mr() const { return (mr_mode() & FI_MR_LOCAL) != 0; }
size_t Fabric::inject_size() const { return info_->tx_attr->inject_size; }
size_t Fabric::cq_data_size() const { return info_->domain_attr->cq_data_size; }
size_t Fabric::max_msg_size() const { return info_->ep_attr->max_msg_size; }
bool Fabric::manual_progress() const {
  return info_->domain_attr->data_progress == FI_PROGRESS_MANUAL;
}
bool Fabric::has_atomics() const { return (info_->caps & FI_ATOMIC) != 0; }
bool Fabric::has_rma() const { return (info_->caps & FI_RMA) != 0; }

const char* fabkv_version() { return FABKV_VERSION; }

std::string library_version() {
  const uint32_t v = fi_version();
  std::string version = fmt::format("{}.{}", FI_MAJOR(v), FI_MINOR(v));
  char buf[128] = {};
  const int any = 0;  // fi_tostr wants a non-null datum even for FI_TYPE_VERSION
  if (const char* full = fi_tostr_r(buf, sizeof(buf), &any, FI_TYPE_VERSION); full != nullptr) {
    std::string s(full);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (s == version || s.rfind(version + ".", 0) == 0) version = s;
  }
  return version;
}

std::string version_line() {
  return fmt::format("fabkv {}, libfabric {}", fabkv_version(), library_version());
}

std::string Fabric::describe() const {
  std::string mr;
  auto add = [&](uint64_t bit, const char* name) {
    if (mr_mode() & bit) mr += (mr.empty() ? "" : "|") + std::string(name);
  };
  add(FI_MR_LOCAL, "local");
  add(FI_MR_VIRT_ADDR, "virt_addr");
  add(FI_MR_ALLOCATED, "allocated");
  add(FI_MR_PROV_KEY, "prov_key");
  return fmt::format(
      "ep={} domain={} mr_mode={} inject={} cq_data={} progress={} rma={} atomics={}",
      to_string(type_), info_->domain_attr->name, mr.empty() ? "none" : mr, inject_size(),
      cq_data_size(), manual_progress() ? "manual" : "auto", has_rma() ? "yes" : "no",
      has_atomics() ? "yes" : "no");
}

}  // namespace fabkv::fabric
