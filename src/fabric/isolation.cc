#include "fabric/isolation.h"

#include <signal.h>
#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

namespace fabkv::fabric {

namespace {

// libfabric 2.1 shm (docs/fabric.md, "Fault isolation"): a command is 256 bytes with a 64-byte
// header, so up to 192 bytes ride inside it; up to 4096 bytes (SMR_INJECT_SIZE) go through the
// receiver's locked buffer pool; beyond that, cross-memory attach.
constexpr size_t kShmInlineMax = 192;
constexpr size_t kShmInjectMax = 4096;

bool is_shm(const Fabric& f) { return f.is_shm(); }

// Gone, or a zombie whose parent has not reaped it yet (it runs no more code either way).
bool process_dead(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');  // "pid (comm) S ...": comm may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

bool isolate_peers(const Fabric& fabric) { return is_shm(fabric); }

size_t lock_free_len(const Fabric& fabric, size_t len) {
  if (!is_shm(fabric) || len <= kShmInlineMax || len > kShmInjectMax) return len;
  return kShmInjectMax + 1;
}

size_t lock_free_capacity(const Fabric& fabric, size_t len) {
  if (!is_shm(fabric) || len <= kShmInlineMax) return len;
  return len > kShmInjectMax ? len : kShmInjectMax + 1;
}

bool remove_dead_peer_region(const Fabric& fabric, std::span<const uint8_t> name) {
  if (!is_shm(fabric)) return false;
  // shm names an endpoint "<pid>:<domain>:<index>" (optionally behind "fi_shm://"), and its
  // region is the shared-memory object of that name.
  std::string s(name.begin(), name.end());
  if (auto nul = s.find('\0'); nul != std::string::npos) s.resize(nul);
  if (s.rfind("fi_shm://", 0) == 0) s = s.substr(9);
  size_t colon = s.find(':');
  if (colon == 0 || colon == std::string::npos || s.find('/') != std::string::npos) return false;
  long pid = 0;
  for (size_t i = 0; i < colon; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    pid = pid * 10 + (s[i] - '0');
    if (pid > (1L << 30)) return false;
  }
  if (pid <= 0 || !process_dead(pid)) return false;
  return ::shm_unlink(s.c_str()) == 0;
}

size_t remove_stale_own_regions() {
  static std::once_flag once;
  static size_t removed = 0;
  std::call_once(once, [] { removed = remove_regions_of(::getpid()); });
  return removed;
}

size_t remove_regions_of(long pid) {
  if (pid <= 0) return 0;
  const std::string prefix = std::to_string(pid) + ":";
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && ::shm_unlink(name.c_str()) == 0) removed++;
  }
  return removed;
}

}  // namespace fabkv::fabric
