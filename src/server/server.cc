#include "server/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cluster/ketama.h"
#include "common/deadline.h"
#include "common/log.h"
#include "control/client.h"
#include "fabric/provider.h"
#include "fabric/rxm.h"
#include "proto/handshake.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "store/limits.h"

namespace fabkv::server {

namespace {

// How long admission waits for a worker to open a client's endpoint or take its address: the
// worker answers within a round, and a client's own connect deadline is 5 s by default.
constexpr int kWorkerAnswerMs = 5000;

// A worker replays only its own log file (FILE.<worker>) and keys are partitioned by worker
// count, so a log is only valid for the worker count that wrote it: FILE.workers records it.
void check_oplog_workers(const ServerOptions& o) {
  const std::string meta = o.oplog + ".workers";
  std::ifstream in(meta);
  uint32_t recorded = 0;
  if (in >> recorded) {
    if (recorded != o.workers)
      throw std::runtime_error(fmt::format(
          "the op log {}.* was written by {} worker(s); keys are partitioned by worker, so start "
          "with --workers {} (or move the log away)",
          o.oplog, recorded, recorded));
    return;
  }
  if (in.is_open() && in.peek() != std::ifstream::traits_type::eof())
    throw std::runtime_error(fmt::format(
        "{} does not hold a worker count; write the --workers the log was written with into it "
        "(or move the log away)",
        meta));
  // Written whole or not at all: a temporary file, synced, renamed over, the directory synced
  // (a crash must not leave an empty file that the next start would take for a new log).
  const std::string tmp = meta + ".tmp";
  const std::string text = fmt::format("{}\n", o.workers);
  const auto fail = [&](const char* what, const std::string& path) {
    throw std::runtime_error(fmt::format("cannot write {}: {} {}: {}", meta, what, path,
                                         std::strerror(errno)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open", tmp);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  errno = err;
  if (!written) fail("write", tmp);
  if (::rename(tmp.c_str(), meta.c_str()) != 0) fail("rename", tmp);
  std::string dir = std::filesystem::path(meta).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dfd >= 0 && ::fsync(dfd) == 0;
  const int derr = errno;
  if (dfd >= 0) ::close(dfd);
  errno = derr;
  if (!synced) fail("fsync", dir);
}

// The ketama name of a listener's bound "host:port" (cluster/ketama.h), "" for a wildcard host:
// its clients reach it by names the server does not know.
std::string default_name(const std::string& bound) {
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(bound, &host, &port) || host == "0.0.0.0" || host == "::")
    return "";
  return cluster::ketama_name(host, port);
}

}  // namespace

Server::Server(const ServerOptions& options) : o_(options), clients_(options.max_clients) {
  resolve_defaults(&o_);
  const ServerOptions& o = o_;
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(o.listen, &host, &port))
    throw std::invalid_argument("--listen wants HOST:PORT, got '" + o.listen + "'");
  fabric::FabricOptions fo;
  fo.provider = o.provider;
  fo.peer_host = host;  // auto: a loopback listener means same-host clients (shm)
  fo.bind_host = (host == "0.0.0.0" || host == "::") ? "" : host;
  // A worker's endpoint receives the requests of every client, W each; the largest is a
  // whole value with its key and headers (rpc::RpcServer::max_request_bytes).
  fo.rxm.in_flight = size_t{o.max_clients} * o.rpc.window;
  fo.rxm.largest_message = o.max_value + store::kMaxKeySize + 64;
  if (!o.oplog.empty()) check_oplog_workers(o);
  for (uint32_t w = 0; w < o.workers; ++w) workers_.push_back(std::make_unique<Worker>(w, o, fo));

  control::ControlServer::Handlers h;
  h.on_hello = [this](uint64_t s, const control::Hello& hello) { return on_hello(s, hello); };
  h.on_request = [this](uint64_t, std::span<const uint8_t> body) -> std::vector<uint8_t> {
    std::string op;
    try {
      op = nlohmann::json::parse(body.begin(), body.end()).at("op").get<std::string>();
    } catch (const std::exception& e) {
      op = "";
    }
    nlohmann::json reply = op == "stats" ? stats() : protocol_request(op);
    std::string s = reply.dump();
    return {s.begin(), s.end()};
  };
  h.on_close = [this](uint64_t s) { on_close(s); };
  control::ControlServerOptions co;
  co.host = host;
  co.port = port;
  co.secret = o.secret;
  control_ = std::make_unique<control::ControlServer>(co, h);
  std::lock_guard lock(mu_);  // the control channel is open: a Hello may read the name
  name_ = o.name.empty() ? default_name(control_->address()) : o.name;
}

Server::~Server() { stop(); }

std::string Server::address() const { return control_->address(); }
const std::string& Server::provider() const { return workers_.at(0)->provider(); }

void Server::attach(std::unique_ptr<LocalWork> front_end, const std::string& listen) {
  for (auto& w : workers_) w->attach(front_end.get());
  front_end_ = std::move(front_end);
  std::lock_guard lock(mu_);  // the control channel is open: a Hello may read the name
  if (o_.name.empty()) name_ = default_name(listen);
}

std::vector<Worker*> Server::workers() const {
  std::vector<Worker*> ws;
  for (const auto& w : workers_) ws.push_back(w.get());
  return ws;
}

void Server::start() {
  for (auto& w : workers_) threads_.emplace_back([this, wp = w.get()] { wp->run_st(stop_); });
}

void Server::stop() {
  if (control_) control_->stop();  // no new clients, no more requests on the control channel
  stop_.store(true);
  for (auto& w : workers_) w->wake();  // an adaptive worker may be blocked (at most 10 ms)
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  front_end_.reset();  // its connections close; the workers that ran it have stopped
}

namespace {

control::Welcome refuse(control::Status st, std::string why) {
  control::Welcome w;
  w.status = st;
  w.message = std::move(why);
  return w;
}

}  // namespace

std::optional<control::Welcome> Server::check_hello(const control::Hello& hello,
                                                    nlohmann::json* out,
                                                    const proto::Info** protocol) const {
  if (hello.service != proto::kService)
    return refuse(control::Status::kUnknownService,
                  fmt::format("this is a fabkv server (service '{}'), not '{}'", proto::kService,
                              hello.service));
  // A client of another fabric cannot reach our endpoints, nor we its: it is told ours before
  // anything else, and before anything is reserved for it; the refusal's provider field names
  // it too, so that an auto client opens that fabric and says hello again (on_hello). (Its
  // address is checked again in admit: the provider it names is only what it says.)
  if (!hello.provider.empty() && hello.provider != provider()) {
    std::string ours = fabric::core_provider(provider()),
                theirs = fabric::core_provider(hello.provider);
    // One core provider under two stacks (tcp's own rdm endpoint against tcp;ofi_rxm, which
    // an explicit FI_OFI_RXM_MSG_RX_SIZE above 1024 gives, docs/fabric.md): the full names.
    if (ours == theirs) ours = provider(), theirs = hello.provider;
    return refuse(control::Status::kRejected,
                  fmt::format("the server serves {}; this client asked for {}: start the client "
                              "with --provider {} (or auto, which follows the server)",
                              ours, theirs, ours));
  }
  nlohmann::json& req = *out;
  try {
    req = hello.payload.empty() ? nlohmann::json::object()
                                : nlohmann::json::parse(hello.payload.begin(), hello.payload.end());
  } catch (const std::exception&) {
    return refuse(control::Status::kRejected, "the Hello payload is not JSON");
  }
  if (!req.is_object())
    return refuse(control::Status::kRejected, "the Hello payload is not a JSON object");
  if (auto theirs = req.find("rxm_eager_bytes");
      theirs != req.end() && provider().find("ofi_rxm") != std::string::npos) {
    const size_t ours = fabric::rxm_eager_bytes();
    if (!theirs->is_number_unsigned() || theirs->get<size_t>() != ours)
      return refuse(control::Status::kRejected,
                    fmt::format("the server's ofi_rxm eager size is {} bytes; this client's is {}: "
                                "set FI_OFI_RXM_BUFFER_SIZE alike on both sides, or on neither "
                                "(docs/fabric.md)",
                                ours, theirs->dump()));
  }
  std::string name = proto::info(proto::kDefault).name;
  if (req.contains("protocol")) {
    if (!req.at("protocol").is_string())
      return refuse(control::Status::kRejected, "protocol must be a string");
    name = req.at("protocol").get<std::string>();
  }
  const proto::Info* p = proto::find(name);
  if (p == nullptr ||
      std::find(o_.protocols.begin(), o_.protocols.end(), name) == o_.protocols.end())
    return refuse(control::Status::kRejected,
                  fmt::format("the server serves {}; this client asked for protocol '{}', which "
                              "is not served here: start the client with --protocol {}",
                              fmt::join(o_.protocols, ","), name,
                              o_.protocols.size() == 1 ? o_.protocols[0] : "and one of those"));
  if (req.contains("region")) {
    try {
      (void)proto::region_from_json(req.at("region"));
    } catch (const std::exception& e) {
      return refuse(control::Status::kRejected, std::string("bad staging region: ") + e.what());
    }
  }
  *protocol = p;
  return std::nullopt;
}

bool Server::reserve_index(uint64_t session, uint32_t* index, uint16_t* epoch, std::string* name) {
  std::lock_guard lock(mu_);
  auto free_everywhere = [&](uint32_t i) {
    if (clients_[i].used) return false;
    for (const auto& wk : workers_)
      if (!wk->idle(i)) return false;  // a worker has not yet cleared its last client's slots
    return true;
  };
  uint32_t i = 0;
  while (i < clients_.size() && !free_everywhere(i)) ++i;
  if (i == clients_.size()) return false;
  Slot& s = clients_[i];
  s.used = true;
  s.epoch = static_cast<uint16_t>(s.epoch + 1);
  s.session = session;
  admitted_++;
  *index = i;
  *epoch = s.epoch;
  *name = name_;
  return true;
}

control::Welcome Server::welcome(uint32_t index, uint16_t epoch, const proto::Info& p,
                                 proto::WelcomeParts parts, const std::string& name) const {
  control::Welcome w;
  w.provider = provider();
  for (auto& wk : workers_)
    for (auto& addr : wk->endpoint_names(index)) w.fabric_addresses.push_back(addr);
  w.regions = std::move(parts.regions);
  nlohmann::json layout = proto::SessionLayout{.client = static_cast<uint16_t>(index),
                                               .epoch = epoch,
                                               .workers = o_.workers,
                                               .max_clients = o_.max_clients,
                                               .protocol = std::string(p.name),
                                               .max_value = o_.max_value,
                                               .max_key = store::kMaxKeySize,
                                               .engine = o_.engine,
                                               .provider = provider(),
                                               .name = name};
  layout.update(parts.layout);
  std::string s = layout.dump();
  w.payload.assign(s.begin(), s.end());
  return w;
}

control::Welcome Server::on_hello(uint64_t session, const control::Hello& hello) {
  control::Welcome w = admit(session, hello);
  // Every refusal names the server's provider (docs/control-channel.md, "Welcome"): a client
  // on another fabric learns which one to open.
  if (w.status != control::Status::kOk) w.provider = provider();
  return w;
}

control::Welcome Server::admit(uint64_t session, const control::Hello& hello) {
  nlohmann::json req;
  const proto::Info* p = nullptr;
  if (auto refused = check_hello(hello, &req, &p)) return std::move(*refused);
  uint32_t index = 0;
  uint16_t epoch = 0;
  std::string name;
  if (!reserve_index(session, &index, &epoch, &name))
    return refuse(control::Status::kServerBusy,
                  fmt::format("all {} client slots are taken (--max-clients)", o_.max_clients));
  auto give_back = [&] {
    std::lock_guard lock(mu_);
    clients_[index].used = false;
    admitted_--;
  };
  // A refusal after the workers were asked to do something for the client: each forgets it
  // (closes its endpoint, takes its address out of the AV), and the refusal leaves only once
  // they have, so the index is free again for whoever comes next. A worker that is late
  // already is not waited for again: the index stays out of use until it has caught up.
  auto undo = [&](bool workers_answer) {
    for (auto& wk : workers_) wk->remove_client(index);
    Deadline d = Deadline::after_ms(workers_answer ? kWorkerAnswerMs : 0);
    auto all_idle = [&] {
      for (const auto& wk : workers_)
        if (!wk->idle(index)) return false;
      return true;
    };
    while (!all_idle() && !d.expired()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    give_back();
  };
  // The protocol's server side on every worker checks the Hello and says what the client
  // needs (regions, layout keys).
  proto::WelcomeParts parts;
  for (auto& wk : workers_) {
    std::string why = wk->protocol(*p).admit(*p, req, index, epoch, &parts);
    if (!why.empty()) {
      give_back();
      return refuse(control::Status::kRejected, why);
    }
  }
  // Isolated clients (shm) get endpoints of their own, opened by each worker on demand.
  for (auto& wk : workers_) {
    if (wk->open_endpoint(index, kWorkerAnswerMs)) continue;
    undo(false);
    return refuse(control::Status::kServerBusy,
                  fmt::format("worker {} could not open an endpoint for this client", wk->index()));
  }
  // Workers learn of the client before it learns the layout, so its first request finds it,
  // and each has put its address into its AV by then: one the fabric cannot use is refused
  // here, in the handshake, and never reaches the data path (issue #24; it used to be found
  // only by the worker, after the Welcome, with the client left waiting for nothing).
  for (auto& wk : workers_) {
    Worker::ClientInfo ci;
    ci.index = index;
    ci.epoch = epoch;
    ci.protocol = p;
    ci.address = hello.fabric_address;
    ci.hello = req;
    bool late = false;
    std::string why = wk->add_client(std::move(ci), kWorkerAnswerMs, &late);
    if (why.empty()) continue;
    undo(!late);
    if (late) return refuse(control::Status::kServerBusy, why);
    return refuse(control::Status::kRejected,
                  fmt::format("the server cannot use this client's fabric address: {}", why));
  }
  spdlog::info("client {} (epoch {}, {}) joined from session {}", index, epoch, p->name, session);
  return welcome(index, epoch, *p, std::move(parts), name);
}

// Asked of every worker's protocols; the first that knows `op` answers for its worker:
// {"workers": [answer of worker 0, ...]}. (pilaf: {"op": "layout"}, the live generations.)
nlohmann::json Server::protocol_request(const std::string& op) const {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& wk : workers_) {
    for (const auto& side : wk->protocols()) {
      if (auto answer = side->control(op)) {
        workers.push_back(std::move(*answer));
        break;
      }
    }
  }
  if (workers.size() != workers_.size())
    return {{"error", op.empty() ? std::string("unknown request")
                                 : fmt::format("unknown request '{}'", op)}};
  return {{"workers", workers}};
}

void Server::on_close(uint64_t session) {
  uint32_t index = 0;
  {
    std::lock_guard lock(mu_);
    while (index < clients_.size() && !(clients_[index].used && clients_[index].session == session))
      ++index;
    if (index == clients_.size()) return;
    clients_[index].used = false;
    departed_++;
  }
  // Its slots and index are reclaimed; requests it left in flight are answered or dropped.
  for (auto& wk : workers_) wk->remove_client(index);
  spdlog::info("client {} left", index);
}

nlohmann::json Server::stats() const {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : workers_) workers.push_back(w->stats());
  nlohmann::json j = {{"provider", provider()},
                      {"protocols", o_.protocols},
                      {"engine", o_.engine},
                      {"workers", workers}};
  {
    std::lock_guard lock(mu_);
    j["name"] = name_;
    uint64_t active = 0;
    for (const auto& c : clients_) active += c.used ? 1 : 0;
    j["clients"] = {{"active", active}, {"admitted", admitted_}, {"departed", departed_}};
  }
  auto cs = control_->stats();
  j["control"] = {{"accepted", cs.accepted},
                  {"handshakes_ok", cs.handshakes_ok},
                  {"rejected_version", cs.rejected_version},
                  {"rejected_secret", cs.rejected_secret},
                  {"malformed", cs.malformed},
                  {"timed_out", cs.timed_out}};
  return j;
}

}  // namespace fabkv::server
