// fabkv-perf's server process: exposes the target regions, answers echo requests, drives
// outbound operations, and keeps polling its completion queue so that operations which need
// the target's progress on manual-progress providers (tcp READs, shm atomics) complete.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/log.h"
#include "control/client.h"
#include "control/server.h"
#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/retry.h"
#include "perf/perf.h"
#include "perf/wire.h"

namespace fabkv::perf {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct ClientState {
  uint64_t session = 0;
  uint32_t index = 0;
  fabric::PeerAddr peer = fabric::kNoPeer;
  RunSpec spec;
  fabric::RemoteRegion region;     // the client's own region (outbound and echo responses)
  std::vector<uint64_t> last_seq;  // echo over WRITE: last sequence seen per slot
  bool outbound = false;
  uint64_t outbound_ops = 0;
  uint32_t outstanding = 0;
  uint64_t posted = 0;
  bool alive = true;
  std::vector<fabric::OpContext> ctx;  // one per outbound window slot, user = this client
};

// Control-thread -> worker-thread events (the endpoint belongs to the worker alone).
struct Event {
  enum Kind { kJoin, kStart, kStop, kClose };
  Kind kind;
  uint64_t session = 0;
  std::vector<uint8_t> address;
  nlohmann::json payload;
  std::promise<uint64_t>* done = nullptr;  // kStop: the client's outbound op count
};

class PerfServer {
 public:
  PerfServer(const ServerRoleOptions& o, const std::string& host)
      : fabric_(fabric::Fabric::open(fabric_options(o, host))),
        ep_(*fabric_, endpoint_options()),
        target_(*fabric_, kTargetBytes, fabric::Access::kRemoteReadWrite),
        counters_(*fabric_, kMaxZ * sizeof(uint64_t), fabric::Access::kRemoteReadWrite),
        readonly_(*fabric_, kProbeRegionBytes, fabric::Access::kRemoteRead),
        writeonly_(*fabric_, kProbeRegionBytes, fabric::Access::kRemoteWrite),
        recv_(*fabric_, kRecvBufferBytes * kServerRecvBuffers, fabric::Access::kLocalOnly),
        tx_(*fabric_, kTargetBytes, fabric::Access::kLocalOnly),
        recv_ctx_(kServerRecvBuffers) {
    for (size_t i = 0; i < kProbeRegionBytes; ++i) readonly_.data()[i] = readonly_pattern(i);
    for (size_t i = 0; i < kServerRecvBuffers; ++i) {
      recv_ctx_[i].tag = i;
      post_recv(i);
    }
  }

  static fabric::FabricOptions fabric_options(const ServerRoleOptions& o, const std::string& host) {
    fabric::FabricOptions f;
    f.provider = o.provider;
    f.peer_host = host;
    f.bind_host = is_any(host) ? "" : host;
    return f;
  }
  static fabric::EndpointOptions endpoint_options() {
    fabric::EndpointOptions e;
    e.tx_depth = 512;
    e.rx_depth = 1024;
    e.cq_depth = 4096;
    e.selective_completion = true;
    return e;
  }

  static bool is_any(const std::string& h) { return h == "0.0.0.0" || h == "::" || h.empty(); }

  control::Welcome welcome(uint64_t session, const control::Hello& hello) {
    control::Welcome w;
    std::lock_guard lock(mu_);
    if (next_index_ >= kMaxClients) {
      w.status = control::Status::kServerBusy;
      w.message = fmt::format("the perf server takes at most {} clients", kMaxClients);
      return w;
    }
    nlohmann::json payload;
    try {
      payload = bytes_json(hello.payload);
      if (payload.value("observer", false)) {  // the coordinator: counters only
        w.provider = fabric_->provider_name();
        return w;
      }
      spec_from_json(payload.at("spec"));
    } catch (const std::exception& e) {
      w.status = control::Status::kRejected;
      w.message = std::string("bad perf hello: ") + e.what();
      return w;
    }
    uint32_t index = next_index_++;
    w.provider = fabric_->provider_name();
    w.fabric_addresses.push_back(ep_.name());
    auto add = [&](const char* name, const fabric::RemoteRegion& r) {
      w.regions.push_back({name, r.addr, r.length, r.key, static_cast<uint32_t>(r.access)});
    };
    add(kTargetRegion, target_.remote());
    add(kCounterRegion, counters_.remote());
    add(kReadOnlyRegion, readonly_.remote());
    add(kWriteOnlyRegion, writeonly_.remote());
    w.payload = json_bytes({{"index", index}, {"stride", kClientStride}});
    events_.push_back(Event{Event::kJoin, session, hello.fabric_address, payload, nullptr});
    events_pending_.store(true, std::memory_order_release);
    index_of_[session] = index;
    return w;
  }

  std::vector<uint8_t> request(uint64_t session, std::span<const uint8_t> body) {
    nlohmann::json req = bytes_json(body);
    std::string op = req.at("op").get<std::string>();
    if (op == "counters")
      return json_bytes({{"counters", ep_.counters().snapshot().to_json()},
                         {"provider", fabric_->provider_name()}});
    if (op == "start") {
      push(Event{Event::kStart, session, {}, {}, nullptr});
      return json_bytes({{"ok", true}});
    }
    if (op == "stop") {
      std::promise<uint64_t> done;
      auto fut = done.get_future();
      push(Event{Event::kStop, session, {}, {}, &done});
      if (fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
        return json_bytes({{"error", "server did not stop in time"}});
      return json_bytes({{"ops", fut.get()}});
    }
    return json_bytes({{"error", "unknown op " + op}});
  }

  void closed(uint64_t session) { push(Event{Event::kClose, session, {}, {}, nullptr}); }

  // The worker loop (the only thread that touches the endpoint).
  void run_st() {
    std::vector<fabric::Completion> comps(64);
    while (!g_stop.load(std::memory_order_relaxed)) {
      drain_events_st();
      size_t n = ep_.poll(comps);
      for (size_t i = 0; i < n; ++i) handle_st(comps[i]);
      handle_deferred_st();
      for (auto& c : clients_) {
        if (!c.alive) continue;
        if (c.spec.mode == Mode::kEcho && c.spec.echo != EchoKind::kSendSend) scan_slots_st(c);
        if (c.outbound) drive_outbound_st(c);
      }
    }
  }

  fabric::Fabric& fabric() { return *fabric_; }

 private:
  void push(Event e) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
    events_pending_.store(true, std::memory_order_release);
  }

  // Called every loop turn: a flag read when nothing is queued (a std::deque allocates when
  // constructed, and the lock is a shared cache line: both cost the echo's idle turns).
  void drain_events_st() {
    if (!events_pending_.load(std::memory_order_acquire)) return;
    std::deque<Event> events;
    {
      std::lock_guard lock(mu_);
      events.swap(events_);
      events_pending_.store(false, std::memory_order_relaxed);
    }
    for (Event& e : events) {
      if (e.kind == Event::kJoin) {
        ClientState c;
        c.session = e.session;
        c.index = static_cast<uint32_t>(clients_.size());
        try {
          c.peer = ep_.insert_peer(e.address);
          c.spec = spec_from_json(e.payload.at("spec"));
          c.region = region_from_json(e.payload.at("region"));
        } catch (const std::exception& ex) {
          spdlog::warn("perf server: client {} unusable: {}", e.session, ex.what());
          c.alive = false;
        }
        c.last_seq.assign(c.spec.window, 0);
        clients_.push_back(std::move(c));
        ClientState& added = clients_.back();
        added.ctx.resize(added.spec.window);
        for (auto& x : added.ctx) x.user = &added;
        continue;
      }
      ClientState* c = find(e.session);
      if (e.kind == Event::kStart && c) {
        c->outbound = true;
        c->outbound_ops = 0;
      } else if (e.kind == Event::kStop) {
        uint64_t ops = 0;
        if (c) {
          // Stop posting and report what completed. Not waiting for the (at most `window`)
          // operations still in flight: on tcp they need the client's progress, and the client
          // is blocked in this very request until we answer.
          c->outbound = false;
          ops = c->outbound_ops;
        }
        e.done->set_value(ops);
      } else if (e.kind == Event::kClose && c) {
        c->alive = false;
        c->outbound = false;
      }
    }
  }

  ClientState* find(uint64_t session) {
    for (auto& c : clients_)
      if (c.session == session) return &c;
    return nullptr;
  }

  void post_recv(size_t i) {
    long ret;
    ret = fabric::post_with_retry(
        [&] {
          return ep_.recv(recv_.local(i * kRecvBufferBytes, kRecvBufferBytes), &recv_ctx_[i]);
        },
        [&] { reap_st(); }, Deadline::after_ms(2000));
    if (ret != 0) spdlog::warn("perf server: recv post failed: {}", fabric::error_text(ret));
  }

  // Posts with retry on a full queue; completions reaped meanwhile are handled afterwards.
  template <class Post>
  long post_st(Post&& post) {
    return fabric::post_with_retry(
        post, [&] { reap_st(); }, Deadline::after_ms(2000));
  }

  // Progress while posting: completions are kept and handled afterwards.
  void reap_st() {
    fabric::Completion sink[8];
    size_t n = ep_.poll(sink);
    for (size_t k = 0; k < n; ++k) deferred_.push_back(std::move(sink[k]));
  }

  void handle_st(fabric::Completion& c) {
    if (c.error != 0) {
      bool expected = false;
      if (c.context && c.context->user) {
        auto* cl = static_cast<ClientState*>(c.context->user);
        if (cl->outstanding > 0) cl->outstanding--;
        // Operations still in flight when a client stopped and left fail with a reset.
        expected = !cl->outbound;
      }
      if (expected)
        spdlog::debug("perf server: {} to a departed client: {}", fabric::to_string(c.verb),
                      c.error_text);
      else if (errors_++ < 10)
        spdlog::warn("perf server: {} completion error: {}", fabric::to_string(c.verb),
                     c.error_text);
      if (c.context && c.context->verb == fabric::Verb::kRecv) post_recv(c.context->tag);
      return;
    }
    if (c.inbound && c.verb == fabric::Verb::kRecv) {
      size_t i = c.context->tag;
      if (c.len >= kEchoHeader + 4) {
        const char* req = recv_.data() + i * kRecvBufferBytes;
        uint32_t index = load_u32(req + kEchoHeader);
        if (index < clients_.size() && clients_[index].alive &&
            clients_[index].spec.mode == Mode::kEcho &&
            clients_[index].spec.echo == EchoKind::kSendSend) {
          respond_st(clients_[index], req, c.len, load_u64(req) % clients_[index].spec.window);
        }
      }
      post_recv(i);
    } else if (!c.inbound && c.context && c.context->user) {
      auto* cl = static_cast<ClientState*>(c.context->user);
      uint32_t done = cl->spec.signal_every;
      cl->outstanding = cl->outstanding > done ? cl->outstanding - done : 0;
      cl->outbound_ops += done;
    }
  }

  void handle_deferred_st() {
    while (!deferred_.empty()) {
      fabric::Completion d = std::move(deferred_.front());
      deferred_.pop_front();
      handle_st(d);
    }
  }

  void scan_slots_st(ClientState& c) {
    const size_t size = c.spec.size;
    char* base = target_.data() + c.index * kClientStride;
    for (uint32_t r = 0; r < c.spec.window; ++r) {
      const char* slot = base + r * size;
      uint64_t head = load_u64(slot);
      if (head == 0 || head == c.last_seq[r]) continue;
      if (load_u64(slot + size - kEchoTrailer) != head) continue;  // still landing
      c.last_seq[r] = head;
      respond_st(c, slot, size, r);
    }
  }

  // Echo response: the same bytes back, by WRITE into the client's region or by SEND.
  void respond_st(ClientState& c, const char* req, size_t len, uint32_t slot) {
    char* out = tx_.data() + c.index * kClientStride + slot * c.spec.size;
    std::memcpy(out, req, len);
    fabric::PostOptions po;
    po.inlined = c.spec.inlined && len <= ep_.inject_size();
    po.signaled = (++c.posted % c.spec.signal_every) == 0;
    fabric::LocalBuffer src = tx_.local(out - tx_.data(), len);
    long ret;
    if (c.spec.echo == EchoKind::kWriteWrite) {
      ret = post_st([&] {
        return ep_.write(src, c.peer, c.region.at(slot * c.spec.size), c.region.key, nullptr, po);
      });
    } else {
      ret = post_st([&] { return ep_.send(src, c.peer, nullptr, po); });
    }
    if (ret != 0 && errors_++ < 10)
      spdlog::warn("perf server: echo response failed: {}", fabric::error_text(ret));
  }

  void drive_outbound_st(ClientState& c) {
    const RunSpec& s = c.spec;
    while (c.outbound && c.outstanding < s.window) {
      uint32_t slot = static_cast<uint32_t>(c.posted % s.window);
      fabric::LocalBuffer buf = tx_.local(c.index * kClientStride + slot * s.size, s.size);
      fabric::PostOptions po;
      po.inlined = s.inlined && s.verb != fabric::Verb::kRead && s.size <= ep_.inject_size();
      bool signaled = ((c.posted + 1) % s.signal_every) == 0;
      po.signaled = signaled;
      fabric::OpContext* ctx = &c.ctx[slot];
      uint64_t raddr = c.region.at(slot * s.size);
      long ret;
      switch (s.verb) {
        case fabric::Verb::kRead: ret = ep_.read(buf, c.peer, raddr, c.region.key, ctx, po); break;
        case fabric::Verb::kWrite:
          ret = ep_.write(buf, c.peer, raddr, c.region.key, ctx, po);
          break;
        default: ret = ep_.send(buf, c.peer, ctx, po); break;
      }
      if (ret == fabric::kAgain) return;
      if (ret != 0) {
        if (errors_++ < 10)
          spdlog::warn("perf server: outbound post failed: {}", fabric::error_text(ret));
        c.outbound = false;
        return;
      }
      c.posted++;
      c.outstanding++;
    }
  }

  std::unique_ptr<fabric::Fabric> fabric_;
  fabric::Endpoint ep_;
  fabric::RegisteredBuffer target_, counters_, readonly_, writeonly_, recv_, tx_;
  std::vector<fabric::OpContext> recv_ctx_;
  std::deque<fabric::Completion> deferred_;
  std::vector<ClientState> clients_;  // worker thread only; reserve below keeps pointers stable
  uint64_t errors_ = 0;

  std::mutex mu_;  // guards events_, next_index_, index_of_
  std::deque<Event> events_;
  std::atomic<bool> events_pending_{false};
  uint32_t next_index_ = 0;
  std::map<uint64_t, uint32_t> index_of_;

 public:
  void reserve() { clients_.reserve(kMaxClients); }
};

}  // namespace

int run_server(const ServerRoleOptions& o) {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  pin_this_thread(o.core);
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(o.listen, &host, &port)) {
    fmt::print(stderr, "fabkv-perf: --listen wants HOST:PORT, got '{}'\n", o.listen);
    return 2;
  }
  std::unique_ptr<PerfServer> server;
  try {
    server = std::make_unique<PerfServer>(o, host);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-perf server: {}\n", e.what());
    return 2;
  }
  server->reserve();
  PerfServer* s = server.get();
  control::ControlServer::Handlers h;
  h.on_hello = [s](uint64_t id, const control::Hello& hello) {
    if (hello.service != kService) {
      control::Welcome w;
      w.status = control::Status::kUnknownService;
      w.message = "this is a fabkv-perf server; service '" + hello.service + "' is not offered";
      return w;
    }
    return s->welcome(id, hello);
  };
  h.on_request = [s](uint64_t id, std::span<const uint8_t> body) {
    try {
      return s->request(id, body);
    } catch (const std::exception& e) {
      return json_bytes({{"error", e.what()}});
    }
  };
  h.on_close = [s](uint64_t id) { s->closed(id); };
  std::unique_ptr<control::ControlServer> ctl;
  try {
    ctl = std::make_unique<control::ControlServer>(
        control::ControlServerOptions{.host = host, .port = port, .secret = o.secret}, h);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fabkv-perf server: {}\n", e.what());
    return 2;
  }
  fmt::print("READY {}\n", ctl->address());
  std::fflush(stdout);
  // stdin closing (the coordinator went away) or a STOP line ends the server.
  if (o.stdin_control) {
    std::thread stdin_watch([] {
      std::string line;
      while (std::getline(std::cin, line))
        if (line == "STOP") break;
      g_stop.store(true);
    });
    stdin_watch.detach();
  }
  s->run_st();
  ctl->stop();
  return 0;
}

}  // namespace fabkv::perf
