#include "bench/servers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace fabkv::bench {

std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  p += ":/usr/sbin:/sbin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t colon = p.find(':', pos);
    std::string dir = p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (!dir.empty()) {
      std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return "";
}

uint16_t free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

std::string temp_log(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          fmt::format("fabkv-bench-{}-{}-{}.log", ::getpid(), name, ::random() % 100000))
      .string();
}

// The last line of a server's log that says something (a command-line error is followed by
// CLI11's "Run with --help for more information.", which does not).
std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty() && !line.starts_with("Run with --help")) last = line;
  return last.empty() ? "(no output)" : last;
}

// `sh -c 'exec [setpriv --pdeathsig TERM] [taskset -c CORE] prog args... REDIRECTS'`: exec keeps
// the pid (setpriv and taskset exec the program in turn), so the pid we hold is the server's
// own, for CPU accounting and signals.
std::unique_ptr<perf::ChildProcess> spawn(const std::string& what, std::vector<std::string> argv,
                                          int core, const std::string& redirects) {
  if (core >= 0) {
    std::string taskset = find_executable("taskset");
    if (taskset.empty())
      throw std::runtime_error(what + " failed to start: taskset (util-linux) is not installed");
    argv.insert(argv.begin(), {taskset, "-c", std::to_string(core)});
  }
  // setpriv --pdeathsig TERM: the server gets SIGTERM when fabkv-bench dies however it dies
  // (Ctrl-C, a crash, SIGKILL), so no busy-polling fabkv-server or stray baseline outlives it.
  std::string setpriv = find_executable("setpriv");
  if (!setpriv.empty()) argv.insert(argv.begin(), {setpriv, "--pdeathsig", "TERM"});
  std::string cmd = "exec";
  for (const auto& a : argv) cmd += " " + shell_quote(a);
  cmd += " " + redirects;
  return std::make_unique<perf::ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", cmd});
}

bool accepts(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

// Waits until the baseline listens on `port` or exits.
void await_listening(const std::string& what, perf::ChildProcess& child, uint16_t port,
                     const std::string& log) {
  Deadline d = Deadline::after_ms(10000);
  while (!d.expired()) {
    int st = child.wait(Deadline::after_ms(0));
    if (st >= 0)
      throw std::runtime_error(fmt::format("{} failed to start (exit status {}): {}", what, st,
                                           last_line(log)));
    if (accepts(port)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error(what + " failed to start: not listening after 10 s: " + last_line(log));
}

size_t memory_mib(const std::string& m) {
  size_t pos = 0;
  double v = std::stod(m, &pos);
  char unit = pos < m.size() ? static_cast<char>(std::toupper(static_cast<unsigned char>(m[pos])))
                             : 'B';
  double mib = unit == 'G' ? v * 1024 : unit == 'M' ? v : unit == 'K' ? v / 1024 : v / (1 << 20);
  return mib < 16 ? 16 : static_cast<size_t>(mib);
}

// True when every protocol of a --protocols list runs on any engine (proto/registry.h): the
// harness then asks for the cache engine explicitly.
bool any_engine(const std::string& protocols) {
  size_t pos = 0;
  while (pos <= protocols.size()) {
    size_t comma = protocols.find(',', pos);
    if (comma == std::string::npos) comma = protocols.size();
    const proto::Info* p = proto::find(std::string_view(protocols).substr(pos, comma - pos));
    if (!p || p->engine != proto::EngineNeed::kAny) return false;
    pos = comma + 1;
  }
  return true;
}

// True when a --protocols list holds a sequencer (proto/registry.h: no engine), which needs
// fabkv-server --data-dir.
bool needs_data_dir(const std::string& protocols) {
  size_t pos = 0;
  while (pos <= protocols.size()) {
    size_t comma = protocols.find(',', pos);
    if (comma == std::string::npos) comma = protocols.size();
    const proto::Info* p = proto::find(std::string_view(protocols).substr(pos, comma - pos));
    if (p && p->engine == proto::EngineNeed::kNone) return true;
    pos = comma + 1;
  }
  return false;
}

}  // namespace

LocalServer::LocalServer(std::string name, std::unique_ptr<perf::ChildProcess> child,
                         std::string log)
    : name_(std::move(name)), log_(std::move(log)), child_(std::move(child)) {}

LocalServer::~LocalServer() { stop(); }

void LocalServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  child_->kill(SIGTERM);
  int st = child_->wait(Deadline::after_ms(5000));
  if (st < 0) {
    child_->kill(SIGKILL);
    child_->wait(Deadline::after_ms(5000));
    perf::remove_shm_leftovers(child_->pid());
  }
  if (st == 0 || name_ != "fabkv-server") {
    std::error_code ec;
    std::filesystem::remove(log_, ec);
  }
  if (!data_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(data_dir_, ec);
  }
}

std::unique_ptr<LocalServer> LocalServer::start_fabkv(const ServerSpec& s) {
  std::string bin = s.fabkv_server_bin;
  if (bin.empty())
    bin = (std::filesystem::path(perf::self_executable()).parent_path() / "fabkv-server").string();
  if (::access(bin.c_str(), X_OK) != 0)
    throw std::runtime_error("fabkv-server not found at " + bin + " (build it, or give --server)");
  std::string log = temp_log("fabkv-server");
  // The pilaf engine must hold its whole table and extents within --memory (it refuses to
  // grow past it): raise the memory when the sizes asked for need more.
  std::string memory = s.memory;
  if (s.pilaf_entries || s.pilaf_extents) {
    size_t need_mib = ((s.pilaf_entries * 32 + s.pilaf_extents) >> 20) + 16;
    if (need_mib > memory_mib(s.memory)) memory = std::to_string(need_mib) + "M";
  }
  std::vector<std::string> argv = {bin, "--provider", s.provider, "--listen", "127.0.0.1:0",
                                   "--cores", std::to_string(s.core), "--protocols", s.protocols,
                                   "--memory", memory, "--window", std::to_string(s.window),
                                   "--max-clients", std::to_string(s.max_clients), "--log", "warn",
                                   // The papers' servers busy-poll, and server_busy counts spin
                                   // rounds (fabkv-server's own default is adaptive).
                                   "--poll", s.poll};
  if (any_engine(s.protocols)) argv.insert(argv.end(), {"--engine", "cache"});
  // A sequencer keeps its high-water mark in a data directory: a fresh one per server.
  std::string data_dir;
  if (needs_data_dir(s.protocols)) {
    char tmpl[] = "/tmp/fabkv-bench-seq-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed for --data-dir");
    data_dir = tmpl;
    argv.insert(argv.end(), {"--data-dir", data_dir});
  }
  if (s.pilaf_entries)
    argv.insert(argv.end(), {"--pilaf-entries", std::to_string(s.pilaf_entries)});
  if (s.pilaf_extents)
    argv.insert(argv.end(), {"--pilaf-extents", std::to_string(s.pilaf_extents)});
  if (s.memcached) argv.insert(argv.end(), {"--memcached", "127.0.0.1:0"});
  if (!s.max_value.empty()) argv.insert(argv.end(), {"--max-value", s.max_value});
  if (!s.name.empty()) argv.insert(argv.end(), {"--name", s.name});
  argv.insert(argv.end(), s.extra_args.begin(), s.extra_args.end());
  // Workers pin themselves with --cores; the control thread may float.
  auto child = spawn("fabkv-server", argv, -1, "2>" + shell_quote(log));
  std::string line;
  if (!child->read_line(&line, Deadline::after_ms(20000)) || line.rfind("READY ", 0) != 0) {
    child->wait(Deadline::after_ms(2000));
    throw std::runtime_error("fabkv-server failed to start: " + last_line(log));
  }
  std::unique_ptr<LocalServer> srv(new LocalServer("fabkv-server", std::move(child), log));
  srv->address_ = line.substr(6);
  srv->data_dir_ = data_dir;
  if (s.memcached) {
    if (!srv->child_->read_line(&line, Deadline::after_ms(20000)) ||
        line.rfind("MEMCACHED ", 0) != 0)
      throw std::runtime_error("fabkv-server did not start its memcached front end: " +
                               last_line(log));
    srv->memcached_address_ = line.substr(10);
  }
  return srv;
}

std::unique_ptr<LocalServer> LocalServer::start_memcached(const ServerSpec& s) {
  std::string bin = find_executable(s.memcached_bin.empty() ? "memcached" : s.memcached_bin);
  if (bin.empty())
    throw std::runtime_error(
        "memcached failed to start: not installed (apt-get install memcached)");
  uint16_t port = free_loopback_port();
  std::string log = temp_log("memcached");
  // -t 1: one worker thread, core for core with one fabkv worker (PROVIDERS.md: -t 2 is slower
  // here anyway). -U 0: no UDP. -c: enough connections for the largest client count.
  std::vector<std::string> argv = {bin, "-t", "1", "-l", "127.0.0.1", "-p", std::to_string(port)};
  argv.insert(argv.end(), {"-U", "0", "-m", std::to_string(memory_mib(s.memory)), "-c", "4096"});
  // memcached refuses to run as root unless told which user to be; stay root (the harness
  // reads its /proc accounting either way).
  if (::geteuid() == 0) argv.insert(argv.end(), {"-u", "root"});
  auto child = spawn("memcached", argv, s.core, ">" + shell_quote(log) + " 2>&1");
  await_listening("memcached", *child, port, log);
  std::unique_ptr<LocalServer> srv(new LocalServer("memcached", std::move(child), log));
  srv->address_ = fmt::format("127.0.0.1:{}", port);
  return srv;
}

std::unique_ptr<LocalServer> LocalServer::start_redis(const ServerSpec& s) {
  std::string bin = find_executable(s.redis_bin.empty() ? "redis-server" : s.redis_bin);
  if (bin.empty())
    throw std::runtime_error("redis failed to start: not installed (apt-get install redis-server)");
  uint16_t port = free_loopback_port();
  std::string log = temp_log("redis");
  // Persistence off, as the survey ran it: no RDB snapshots (save ""), no AOF.
  auto child = spawn("redis",
                     {bin, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
                      "--loglevel", "warning", "--dir",
                      std::filesystem::temp_directory_path().string()},
                     s.core, ">" + shell_quote(log) + " 2>&1");
  await_listening("redis", *child, port, log);
  std::unique_ptr<LocalServer> srv(new LocalServer("redis", std::move(child), log));
  srv->address_ = fmt::format("127.0.0.1:{}", port);
  return srv;
}

}  // namespace fabkv::bench
