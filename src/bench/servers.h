// The servers fabkv-bench starts itself: a local fabkv-server, and the baselines memcached and
// redis from the Debian packages, each pinned to the server core so the comparison is core for
// core (memcached with one worker thread, `-t 1`; redis is single-threaded; PROVIDERS.md).
// Every child's stdout/stderr goes to a log file (its last line is quoted when it fails), so a
// chatty server can never block on a full pipe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "perf/process.h"
#include "proto/registry.h"

namespace fabkv::bench {

struct ServerSpec {
  int core = 0;                 // server core (taskset -c / fabkv-server --cores); -1: unpinned
  std::string memory = "256M";  // fabkv --memory; memcached -m (MiB); redis maxmemory unset
  // fabkv-server only
  std::string fabkv_server_bin;  // path; "" = fabkv-server next to this executable
  std::string provider = "shm";
  uint32_t window = 4;
  uint32_t max_clients = 64;
  // --protocols (proto/registry.h): the server runs the engine they need (the cache engine
  // when any will do; the pilaf engine for a pilaf one).
  std::string protocols = proto::info(proto::kDefault).name;
  size_t pilaf_entries = 0;  // --pilaf-entries (0: the server's default)
  size_t pilaf_extents = 0;  // --pilaf-extents (0: the server's default)
  // --memcached 127.0.0.1:0: also serve memcached's protocols (fabkv:memcached)
  bool memcached = false;
  std::string max_value;                // --max-value ("" = the server's default)
  std::string name;                     // --name: its name on a cluster's ring ("" = none given)
  std::vector<std::string> extra_args;  // appended to fabkv-server's command line as they are
  // --poll: spin as the papers' servers (fabkv-server's own default is adaptive); the memcached
  // front end runs adaptive, blocking in epoll like memcached when idle.
  std::string poll = "spin";
  // Baseline binaries; "" = found on PATH.
  std::string memcached_bin, redis_bin;
};

class LocalServer {
 public:
  // Each starts the server and waits until it accepts connections (bounded); throws
  // std::runtime_error with a one-line reason ("memcached failed to start: ...").
  static std::unique_ptr<LocalServer> start_fabkv(const ServerSpec& spec);
  static std::unique_ptr<LocalServer> start_memcached(const ServerSpec& spec);
  static std::unique_ptr<LocalServer> start_redis(const ServerSpec& spec);
  ~LocalServer();  // stop()

  const std::string& address() const { return address_; }
  // fabkv-server started with ServerSpec::memcached: its memcached front end's host:port.
  const std::string& memcached_address() const { return memcached_address_; }
  pid_t pid() const { return child_->pid(); }
  const std::string& name() const { return name_; }
  // SIGTERM, then SIGKILL after 5 s; removes its log file when it exited cleanly, and the
  // data directory a sequencer was given.
  void stop();

 private:
  LocalServer(std::string name, std::unique_ptr<perf::ChildProcess> child, std::string log);
  std::string name_, address_, log_, memcached_address_;
  std::string data_dir_;  // fabkv-server --data-dir (sequencers), removed by stop()
  std::unique_ptr<perf::ChildProcess> child_;
  bool stopped_ = false;
};

// Absolute path of `name` on PATH, "" when absent (a name with '/' is returned if executable).
std::string find_executable(const std::string& name);
// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t free_loopback_port();

}  // namespace fabkv::bench
