#include "fabric/provider.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <rdma/fabric.h>

#include "fabric/fabric.h"

namespace fabkv::fabric {

namespace {

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (getnameinfo(sa, sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6), buf,
                  sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0)
    return {};
  return buf;
}

}  // namespace

bool is_local_host(const std::string& host) {
  if (host.empty() || host == "localhost") return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  ifaddrs* ifs = nullptr;
  getifaddrs(&ifs);
  for (addrinfo* a = res; a != nullptr && !local; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) local = true;
    } else if (a->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
      if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) local = true;
    }
    std::string want = numeric_host(a->ai_addr);
    for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
      if (numeric_host(i->ifa_addr) == want) local = true;
    }
  }
  if (ifs != nullptr) freeifaddrs(ifs);
  freeaddrinfo(res);
  return local;
}

bool rdma_device_present() {
  std::error_code ec;
  const std::filesystem::path dir("/sys/class/infiniband");
  if (!std::filesystem::is_directory(dir, ec)) return false;
  if (std::filesystem::directory_iterator(dir, ec) == std::filesystem::directory_iterator())
    return false;
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("verbs");
  fi_info* info = nullptr;
  int ret = fi_getinfo(FI_VERSION(kFiVersionMajor, kFiVersionMinor), nullptr, nullptr, 0, hints,
                       &info);
  fi_freeinfo(hints);
  if (info != nullptr) fi_freeinfo(info);
  return ret == 0;
}

ProviderChoice choose_provider(const std::string& requested, const std::string& peer_host) {
  if (requested == "shm" || requested == "tcp" || requested == "verbs" || requested == "udp")
    return {requested, "requested with --provider " + requested};
  if (requested != "auto")
    throw std::invalid_argument("unknown provider '" + requested +
                                "' (expected auto, shm, tcp, verbs or udp)");
  if (const char* env = std::getenv("FI_PROVIDER"); env != nullptr && *env != '\0') {
    const std::string p = core_provider(env);
    return {p, "FI_PROVIDER=" + std::string(env) + " is set in the environment"};
  }
  if (rdma_device_present())
    return {"verbs", "an RDMA device is present (/sys/class/infiniband) and verbs reports it"};
  if (is_local_host(peer_host))
    return {"shm", "no RDMA device; the peer (" + (peer_host.empty() ? "local" : peer_host) +
                       ") is on this host"};
  return {"tcp", "no RDMA device; the peer " + peer_host + " is on another host"};
}

}  // namespace fabkv::fabric
