#include "server/server.h"

#include <fstream>

#include <fmt/format.h>

#include "common/log.h"
#include "control/client.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "store/limits.h"

namespace fabkv::server {

namespace {

using proto::region_from_json;
using proto::region_to_json;

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
          "with --workers {} (or move the log away)", o.oplog, recorded, recorded));
    return;
  }
  std::ofstream out(meta, std::ios::trunc);
  out << o.workers << "\n";
  if (!out) throw std::runtime_error("cannot write " + meta);
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
  if (!o.oplog.empty()) check_oplog_workers(o);
  for (uint32_t w = 0; w < o.workers; ++w) workers_.push_back(std::make_unique<HerdWorker>(w, o, fo));

  control::ControlServer::Handlers h;
  h.on_hello = [this](uint64_t s, const control::Hello& hello) { return on_hello(s, hello); };
  h.on_request = [this](uint64_t, std::span<const uint8_t> body) -> std::vector<uint8_t> {
    std::string op;
    try {
      op = nlohmann::json::parse(body.begin(), body.end()).at("op").get<std::string>();
    } catch (const std::exception& e) {
      op = "";
    }
    nlohmann::json reply = op == "stats"    ? stats()
                           : op == "layout" ? pilaf_layout()
                                            : nlohmann::json{{"error", "unknown request"}};
    std::string s = reply.dump();
    return {s.begin(), s.end()};
  };
  h.on_close = [this](uint64_t s) { on_close(s); };
  control::ControlServerOptions co;
  co.host = host;
  co.port = port;
  co.secret = o.secret;
  control_ = std::make_unique<control::ControlServer>(co, h);
}

Server::~Server() { stop(); }

std::string Server::address() const { return control_->address(); }
const std::string& Server::provider() const { return workers_.at(0)->provider(); }

void Server::start() {
  for (auto& w : workers_) threads_.emplace_back([this, wp = w.get()] { wp->run_st(stop_); });
}

void Server::stop() {
  if (control_) control_->stop();  // no new clients, no more requests on the control channel
  stop_.store(true);
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

control::Welcome Server::on_hello(uint64_t session, const control::Hello& hello) {
  control::Welcome w;
  nlohmann::json req;
  try {
    req = hello.payload.empty() ? nlohmann::json::object()
                                : nlohmann::json::parse(hello.payload.begin(), hello.payload.end());
  } catch (const std::exception&) {
    w.status = control::Status::kRejected;
    w.message = "the Hello payload is not JSON";
    return w;
  }
  if (hello.service != proto::kService) {
    w.status = control::Status::kUnknownService;
    w.message = fmt::format("this is a fabkv server (service '{}'), not '{}'", proto::kService,
                            hello.service);
    return w;
  }
  std::string protocol;
  try {
    protocol = req.value("protocol", std::string("herd"));
  } catch (const std::exception&) {
    protocol = "?";
  }
  if (std::find(o_.protocols.begin(), o_.protocols.end(), protocol) == o_.protocols.end()) {
    w.status = control::Status::kRejected;
    w.message = fmt::format("protocol '{}' is not served here (serving: {})", protocol,
                            fmt::join(o_.protocols, ","));
    return w;
  }
  // Pilaf clients send PUT/DELETE (pilaf-vo: everything) as messages (Pilaf sec. 3.1, 5.1).
  const bool by_message = protocol != "herd";
  std::string transport;
  try {
    transport = req.value("transport", std::string(by_message ? "send" : rpc::to_string(o_.herd.transport)));
  } catch (const std::exception&) {
    transport = "?";
  }
  if (by_message && transport != "send") {
    w.status = control::Status::kRejected;
    w.message = fmt::format("{} sends its requests as messages: transport must be send, not {}",
                            protocol, transport);
    return w;
  }
  if (!by_message && transport != rpc::to_string(o_.herd.transport)) {
    w.status = control::Status::kRejected;
    w.message = fmt::format("this server takes requests by {} (--transport), not {}",
                            rpc::to_string(o_.herd.transport), transport);
    return w;
  }
  fabric::RemoteRegion staging;
  try {
    if (req.contains("region")) staging = region_from_json(req.at("region"));
  } catch (const std::exception& e) {
    w.status = control::Status::kRejected;
    w.message = std::string("bad staging region: ") + e.what();
    return w;
  }
  uint32_t index = 0;
  uint16_t epoch = 0;
  {
    std::lock_guard lock(mu_);
    auto free_everywhere = [&](uint32_t i) {
      if (clients_[i].used) return false;
      for (const auto& wk : workers_)
        if (!wk->idle(i)) return false;  // a worker has not yet cleared its last client's slots
      return true;
    };
    while (index < clients_.size() && !free_everywhere(index)) ++index;
    if (index == clients_.size()) {
      w.status = control::Status::kServerBusy;
      w.message = fmt::format("all {} client slots are taken (--max-clients)", o_.max_clients);
      return w;
    }
    Slot& s = clients_[index];
    s.used = true;
    s.epoch = static_cast<uint16_t>(s.epoch + 1);
    s.session = session;
    epoch = s.epoch;
    admitted_++;
  }
  // Isolated clients (shm) get endpoints of their own, opened by each worker on demand.
  for (auto& wk : workers_) {
    if (wk->open_endpoint(index, 5000)) continue;
    {
      std::lock_guard lock(mu_);
      clients_[index].used = false;
      admitted_--;
    }
    w.status = control::Status::kServerBusy;
    w.message = fmt::format("worker {} could not open an endpoint for this client", wk->index());
    return w;
  }
  // Workers learn of the client before it learns the layout, so its first request finds it.
  for (auto& wk : workers_) {
    ClientInfo ci;
    ci.index = index;
    ci.epoch = epoch;
    ci.address = hello.fabric_address;
    ci.staging = staging;
    ci.slots = transport == "write";
    wk->add_client(std::move(ci));
  }
  const size_t recv = workers_[0]->recv_size();
  w.provider = provider();
  for (auto& wk : workers_) {
    for (auto& name : wk->endpoint_names(index)) w.fabric_addresses.push_back(name);
    fabric::RemoteRegion r = wk->request_region();
    w.regions.push_back({fmt::format("herd.requests.{}", wk->index()), r.addr, r.length, r.key,
                         static_cast<uint32_t>(r.access)});
  }
  nlohmann::json pilaf = nlohmann::json::array();
  if (o_.engine == "pilaf") {
    for (auto& wk : workers_) {
      PilafRegions p = wk->pilaf_regions();
      w.regions.push_back({fmt::format("pilaf.table.{}", wk->index()), p.table.addr,
                           p.table.length, p.table.key, static_cast<uint32_t>(p.table.access)});
      w.regions.push_back({fmt::format("pilaf.extents.{}", wk->index()), p.extents.addr,
                           p.extents.length, p.extents.key,
                           static_cast<uint32_t>(p.extents.access)});
      pilaf.push_back({{"generation", p.generation}, {"entries", p.entries}});
    }
  }
  nlohmann::json layout = {{"wire", rpc::kWireVersion},   {"client", index},
                           {"epoch", epoch},               {"workers", o_.workers},
                           {"window", o_.rpc.window},          {"slot_size", o_.rpc.slot_size},
                           {"max_clients", o_.max_clients},
                           {"queues", workers_[0]->isolated() ? 1u : o_.rpc.queues},
                           {"transport", transport},          {"protocol", protocol},
                           {"max_value", o_.max_value},    {"max_key", store::kMaxKeySize},
                           {"engine", o_.engine},          {"provider", provider()},
                           {"recv_size", recv}};
  if (o_.engine == "pilaf") {
    layout["pilaf"] = pilaf;
    layout["pilaf_grace_ms"] = o_.pilaf.grace_ms;
  }
  std::string s = layout.dump();
  w.payload.assign(s.begin(), s.end());
  spdlog::info("client {} (epoch {}) joined from session {}", index, epoch, session);
  return w;
}

// The pilaf engines' current generations; a client whose READs found a retired table asks for
// this ({"op": "layout"}) and re-maps (Pilaf sec. 3.3, with a control request instead of a
// reset connection).
nlohmann::json Server::pilaf_layout() const {
  if (o_.engine != "pilaf") return {{"error", "this server does not run the pilaf engine"}};
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& wk : workers_) {
    PilafRegions p = wk->pilaf_regions();
    workers.push_back({{"generation", p.generation},
                       {"entries", p.entries},
                       {"table", region_to_json(p.table)},
                       {"extents", region_to_json(p.extents)}});
  }
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
                      {"transport", rpc::to_string(o_.herd.transport)},
                      {"workers", workers}};
  {
    std::lock_guard lock(mu_);
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
