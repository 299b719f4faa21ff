// Endpoint set-up, address vectors and msg connection management. The data path is in
// endpoint_datapath.cc.
#include <sys/socket.h>

#include <cstring>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include "common/log.h"
#include "fabric/endpoint.h"
#include "fabric/error.h"

namespace fabkv::fabric {

static_assert(kAgain == -FI_EAGAIN && kInvalid == -FI_EINVAL);
static_assert(sizeof(OpContext::provider_scratch) == sizeof(fi_context2));
static_assert(offsetof(OpContext, provider_scratch) == 0, "fi_context2 must come first");

Endpoint::Endpoint(Fabric& fabric, const EndpointOptions& options)
    : fabric_(fabric), options_(options) {
  if (fabric.type() == EndpointType::kMsg)
    throw FabricError("fi_endpoint", "msg endpoints are made by Endpoint::connect or Listener");
  open_common(fabric.info());
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_UNSPEC;
  av_attr.count = options.av_size;
  check(fi_av_open(fabric.domain(), &av_attr, &av_, nullptr), "fi_av_open");
  check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
  // Before fi_enable: libfabric 2.x's shm and rxm copy the minimum into the endpoint's receive
  // context when it is enabled and ignore a later fi_setopt (which libfabric 1.17's shm
  // required instead, dereferencing state that enabling creates).
  if (options.min_multi_recv > 0) {
    size_t min = options.min_multi_recv;
    check(fi_setopt(&ep_->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)),
          "fi_setopt(FI_OPT_MIN_MULTI_RECV)");
  }
  check(fi_enable(ep_), "fi_enable");
}

Endpoint::Endpoint(Fabric& fabric, const EndpointOptions& options, fi_info* conn_info)
    : fabric_(fabric), options_(options) {
  open_common(conn_info);
  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  check(fi_eq_open(fabric.fabric(), &eq_attr, &eq_, nullptr), "fi_eq_open");
  check(fi_ep_bind(ep_, &eq_->fid, 0), "fi_ep_bind(eq)");
  check(fi_enable(ep_), "fi_enable");
}

void Endpoint::open_common(fi_info* base) {
  fi_info* info = fi_dupinfo(base);
  info->tx_attr->size = options_.tx_depth;
  info->rx_attr->size = options_.rx_depth;
  int ret = fi_endpoint(fabric_.domain(), info, &ep_, nullptr);
  inject_size_ = info->tx_attr->inject_size;
  max_msg_size_ = fabric_.max_msg_size();
  // libfabric 2.1's shm and tcp providers never read FI_MORE (docs/fabric.md, "Doorbell
  // batching"): there it only steers a post away from the cheaper fi_inject* call.
  const std::string& prov = fabric_.provider_name();
  more_ignored_ = prov.starts_with("shm") || prov.starts_with("tcp");
  remote_write_takes_recv_ = (info->mode & FI_RX_CQ_DATA) != 0;
  fi_freeinfo(info);
  check(ret, "fi_endpoint");
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = options_.cq_depth;
  // fabkv busy-polls by default (a sleep->wake costs ~15-20 us here); a waitable endpoint
  // asks for a file descriptor to block on. libfabric 2.1's shm refuses FI_WAIT_FD
  // (-FI_ENOSYS; its FI_WAIT_UNSPEC is FI_WAIT_YIELD, a sched_yield loop that makes no
  // progress, docs/fabric.md "Blocking"): such an endpoint is opened without one.
  cq_attr.wait_obj = options_.waitable ? FI_WAIT_FD : FI_WAIT_NONE;
  if (fi_cq_open(fabric_.domain(), &cq_attr, &cq_, nullptr) != 0 && options_.waitable) {
    cq_ = nullptr;
    cq_attr.wait_obj = FI_WAIT_NONE;
  }
  if (cq_ == nullptr) check(fi_cq_open(fabric_.domain(), &cq_attr, &cq_, nullptr), "fi_cq_open");
  if (cq_attr.wait_obj == FI_WAIT_FD) {
    int fd = -1;
    if (fi_control(&cq_->fid, FI_GETWAIT, &fd) == 0) wait_fd_ = fd;
  }
  if (options_.waitable) {
    // Inbound READs and WRITEs raise no completion at the target; where the provider counts
    // them (FI_RMA_EVENT counters, shm), a blocking thread can still tell that peers are busy
    // with its memory. A provider that refuses the binding simply does not count.
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_NONE;
    if (fi_cntr_open(fabric_.domain(), &cntr_attr, &remote_cntr_, nullptr) != 0) {
      remote_cntr_ = nullptr;
    } else if (fi_ep_bind(ep_, &remote_cntr_->fid, FI_REMOTE_READ | FI_REMOTE_WRITE) != 0) {
      fi_close(&remote_cntr_->fid);
      remote_cntr_ = nullptr;
    }
  }
  // libfabric 2.1's ofi_rxm passes an inlined WRITE (fi_inject_write) straight to the tcp (or
  // verbs) connection with no context; when the connection fails with it still queued, tcp
  // reports its error with a NULL context and rxm_handle_comp_error dereferences it: the
  // process crashes in fi_cq_read (docs/fabric.md). rxm takes its own path instead, a buffer of
  // its own as the context and the error handed to us without a context, whenever a WRITE
  // counter is bound to the endpoint; so one is, on rxm. It costs an increment per WRITE.
  if (fabric_.provider_name().find("ofi_rxm") != std::string::npos) {
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_NONE;
    check(fi_cntr_open(fabric_.domain(), &cntr_attr, &write_cntr_, nullptr), "fi_cntr_open(write)");
    check(fi_ep_bind(ep_, &write_cntr_->fid, FI_WRITE), "fi_ep_bind(cntr, FI_WRITE)");
  }
  // Selective completion applies to transmits only: every receive must complete. (Binding
  // FI_RECV in the same call would make un-flagged receives complete silently.)
  uint64_t tx_flags = FI_TRANSMIT | (options_.selective_completion ? FI_SELECTIVE_COMPLETION : 0);
  check(fi_ep_bind(ep_, &cq_->fid, tx_flags), "fi_ep_bind(cq, transmit)");
  check(fi_ep_bind(ep_, &cq_->fid, FI_RECV), "fi_ep_bind(cq, recv)");
  scratch_ring_.resize(std::max<size_t>(options_.tx_depth, 1));
}

Endpoint::~Endpoint() {
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (remote_cntr_ != nullptr) fi_close(&remote_cntr_->fid);
  if (write_cntr_ != nullptr) fi_close(&write_cntr_->fid);
  if (eq_ != nullptr) fi_close(&eq_->fid);
}

uint64_t Endpoint::remote_ops() { return remote_cntr_ != nullptr ? fi_cntr_read(remote_cntr_) : 0; }

std::vector<uint8_t> Endpoint::name() const {
  std::vector<uint8_t> out(256);
  size_t len = out.size();
  int ret = fi_getname(&ep_->fid, out.data(), &len);
  if (ret == -FI_ETOOSMALL) {
    out.resize(len);
    ret = fi_getname(&ep_->fid, out.data(), &len);
  }
  check(ret, "fi_getname");
  out.resize(len);
  return out;
}

namespace {

// shm copies at most this many characters of a peer's name (docs/fault-isolation.md, "A client
// of another fabric").
constexpr size_t kMaxStringName = 255;

uint16_t sockaddr_family(std::span<const uint8_t> name) {
  sa_family_t family = 0;
  std::memcpy(&family, name.data(), sizeof family);
  return family;
}

}  // namespace

// fi_av_insert is handed a pointer and no length, and libfabric 2.1's providers trust a name
// to be theirs (docs/fault-isolation.md, "A client of another fabric, or an address that is no
// address"): the rxm AV (tcp, verbs) sizes a name by its address family and then keeps that
// size as its own address length, so one shm name made it refuse every correct tcp address
// after it; shm runs strlen over whatever it gets. An empty name is a null pointer to both, a
// short one is read past its end. So a peer's name must have our own name's shape: for
// sockaddrs the same family and length, for strings a printable, terminated string of the
// same scheme ("fi_shm://"), for any other format the same length.
std::string peer_name_problem(const Fabric& fabric, std::span<const uint8_t> own,
                              std::span<const uint8_t> peer) {
  const std::string& prov = fabric.provider_name();
  if (peer.empty()) return fmt::format("the address is empty (a {} address was expected)", prov);
  switch (fabric.info()->addr_format) {
    case FI_ADDR_STR: {
      std::string_view s(reinterpret_cast<const char*>(peer.data()), peer.size());
      if (s.back() == '\0') s.remove_suffix(1);
      if (s.empty() || s.size() > kMaxStringName)
        return fmt::format("a {} address is a string of 1 to {} characters, not {} bytes", prov,
                           kMaxStringName, peer.size());
      for (char ch : s)
        if (ch < 0x21 || ch > 0x7e)
          return fmt::format(
              "a {} address is a printable string; this one ({} bytes) holds "
              "byte 0x{:02x}",
              prov, peer.size(), static_cast<uint8_t>(ch));
      std::string_view mine(reinterpret_cast<const char*>(own.data()), own.size());
      if (size_t scheme = mine.find("://"); scheme != std::string_view::npos) {
        std::string_view prefix = mine.substr(0, scheme + 3);
        if (!s.starts_with(prefix))
          return fmt::format("a {} address starts with \"{}\"; this one does not", prov, prefix);
      }
      return {};
    }
    case FI_SOCKADDR:
    case FI_SOCKADDR_IN:
    case FI_SOCKADDR_IN6:
    case FI_SOCKADDR_IB:
      if (peer.size() != own.size() || peer.size() < sizeof(sa_family_t) ||
          sockaddr_family(peer) != sockaddr_family(own))
        return fmt::format(
            "not a {} address: {} bytes{}, where this endpoint's are {} bytes of address "
            "family {}",
            prov, peer.size(),
            peer.size() >= sizeof(sa_family_t)
                ? fmt::format(" of address family {}", sockaddr_family(peer))
                : std::string(),
            own.size(), sockaddr_family(own));
      return {};
    default:
      if (peer.size() != own.size())
        return fmt::format("not a {} address: {} bytes, where this endpoint's are {}", prov,
                           peer.size(), own.size());
      return {};
  }
}

PeerAddr Endpoint::insert_peer(std::span<const uint8_t> name) {
  if (av_ == nullptr) return kNoPeer;
  if (own_name_.empty()) own_name_ = this->name();
  if (std::string why = peer_name_problem(fabric_, own_name_, name); !why.empty())
    throw FabricError("fi_av_insert", why);
  // A string name goes in with its terminator, whether or not the peer sent one.
  std::vector<uint8_t> terminated;
  const void* addr = name.data();
  if (fabric_.info()->addr_format == FI_ADDR_STR && name.back() != 0) {
    terminated.assign(name.begin(), name.end());
    terminated.push_back(0);
    addr = terminated.data();
  }
  fi_addr_t fi_addr = FI_ADDR_UNSPEC;
  int n = fi_av_insert(av_, addr, 1, &fi_addr, 0, nullptr);
  if (n != 1) throw FabricError("fi_av_insert", n < 0 ? n : -FI_EINVAL);
  return fi_addr;
}

void Endpoint::remove_peer(PeerAddr peer) {
  if (av_ != nullptr && peer != kNoPeer) {
    fi_addr_t a = peer;
    fi_av_remove(av_, &a, 1, 0);
  }
}

namespace {

// Waits for `want` on an event queue before the deadline; throws FabricError with the
// provider's text for an error event, returns false on timeout.
bool wait_event(fid_eq* eq, uint32_t want, Deadline deadline, fi_eq_cm_entry* entry,
                const char* op) {
  while (!deadline.expired()) {
    uint32_t event = 0;
    ssize_t n = fi_eq_read(eq, &event, entry, sizeof(*entry), 0);
    if (n == -FI_EAGAIN) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      fi_eq_readerr(eq, &err, 0);
      char buf[256] = {};
      const char* text = fi_eq_strerror(eq, err.prov_errno, err.err_data, buf, sizeof(buf));
      throw FabricError(op, fmt::format("{} ({})", error_text(err.err), text ? text : ""));
    }
    if (n < 0) throw FabricError(op, n);
    if (event == want) return true;
    if (event == FI_SHUTDOWN) throw FabricError(op, "peer shut the connection down");
  }
  return false;
}

}  // namespace

std::unique_ptr<Endpoint> Endpoint::connect(Fabric& fabric, std::span<const uint8_t> listener_name,
                                            const EndpointOptions& options, Deadline deadline) {
  if (fabric.type() != EndpointType::kMsg)
    throw FabricError("fi_connect", "connect() is for msg fabrics");
  fi_info* info = fi_dupinfo(fabric.info());
  free(info->dest_addr);
  info->dest_addr = malloc(listener_name.size());
  memcpy(info->dest_addr, listener_name.data(), listener_name.size());
  info->dest_addrlen = listener_name.size();
  std::unique_ptr<Endpoint> ep;
  try {
    ep.reset(new Endpoint(fabric, options, info));
  } catch (...) {
    fi_freeinfo(info);
    throw;
  }
  fi_freeinfo(info);
  check(fi_connect(ep->ep_, listener_name.data(), nullptr, 0), "fi_connect");
  fi_eq_cm_entry entry{};
  if (!wait_event(ep->eq_, FI_CONNECTED, deadline, &entry, "fi_connect"))
    throw FabricError("fi_connect", "timed out waiting for the peer to accept");
  return ep;
}

bool Endpoint::peer_shutdown() {
  if (eq_ == nullptr || shutdown_) return shutdown_;
  uint32_t event = 0;
  fi_eq_cm_entry entry{};
  ssize_t n = fi_eq_read(eq_, &event, &entry, sizeof(entry), 0);
  if (n == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    fi_eq_readerr(eq_, &err, 0);
    shutdown_ = true;
  } else if (n >= 0 && event == FI_SHUTDOWN) {
    shutdown_ = true;
  }
  return shutdown_;
}

Listener::Listener(Fabric& fabric) : fabric_(fabric) {
  if (fabric.type() != EndpointType::kMsg)
    throw FabricError("fi_passive_ep", "listeners are for msg fabrics");
  check(fi_passive_ep(fabric.fabric(), fabric.info(), &pep_, nullptr), "fi_passive_ep");
  fi_eq_attr eq_attr{};
  eq_attr.wait_obj = FI_WAIT_UNSPEC;
  check(fi_eq_open(fabric.fabric(), &eq_attr, &eq_, nullptr), "fi_eq_open");
  check(fi_pep_bind(pep_, &eq_->fid, 0), "fi_pep_bind");
  check(fi_listen(pep_), "fi_listen");
}

Listener::~Listener() {
  if (pep_ != nullptr) fi_close(&pep_->fid);
  if (eq_ != nullptr) fi_close(&eq_->fid);
}

std::vector<uint8_t> Listener::name() const {
  std::vector<uint8_t> out(256);
  size_t len = out.size();
  check(fi_getname(&pep_->fid, out.data(), &len), "fi_getname(pep)");
  out.resize(len);
  return out;
}

std::unique_ptr<Endpoint> Listener::accept(const EndpointOptions& options, Deadline deadline) {
  fi_eq_cm_entry entry{};
  if (!wait_event(eq_, FI_CONNREQ, deadline, &entry, "fi_listen")) return nullptr;
  std::unique_ptr<Endpoint> ep;
  try {
    ep.reset(new Endpoint(fabric_, options, entry.info));
  } catch (...) {
    fi_reject(pep_, entry.info->handle, nullptr, 0);
    fi_freeinfo(entry.info);
    throw;
  }
  fi_freeinfo(entry.info);
  check(fi_accept(ep->ep_, nullptr, 0), "fi_accept");
  fi_eq_cm_entry done{};
  if (!wait_event(ep->eq_, FI_CONNECTED, deadline, &done, "fi_accept")) return nullptr;
  return ep;
}

std::string address_to_string(Fabric& fabric, std::span<const uint8_t> name) {
  char buf[256] = {};
  size_t len = sizeof(buf);
  // fi_av_straddr needs an AV; open a throwaway one (set-up path only).
  fid_av* av = nullptr;
  fi_av_attr attr{};
  if (fabric.type() == EndpointType::kMsg || fi_av_open(fabric.domain(), &attr, &av, nullptr) != 0)
    return fmt::format("<{} bytes>", name.size());
  fi_av_straddr(av, name.data(), buf, &len);
  fi_close(&av->fid);
  return buf;
}

}  // namespace fabkv::fabric
