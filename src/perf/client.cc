// fabkv-perf's client process: one logical client with its own endpoint, running one RunSpec
// against the server between a GO from the coordinator and the end of its duration.
#include <signal.h>

#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/histogram.h"
#include "common/log.h"
#include "control/client.h"
#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/retry.h"
#include "perf/perf.h"
#include "perf/wire.h"

namespace fabkv::perf {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

struct Slot {
  fabric::OpContext ctx;
  uint64_t t0 = 0;
  uint64_t seq = 0;  // echo: the sequence number in flight on this slot
  bool busy = false;
};

class PerfClient {
 public:
  PerfClient(const ClientRoleOptions& o, const std::string& host)
      : o_(o),
        s_(o.spec),
        fabric_(fabric::Fabric::open(fabric_options(o, host))),
        ep_(*fabric_, endpoint_options(s_)),
        mine_(*fabric_, kClientStride, fabric::Access::kRemoteReadWrite),
        tx_(*fabric_, kClientStride, fabric::Access::kLocalOnly),
        rx_(*fabric_, kClientStride * 2, fabric::Access::kLocalOnly),
        slots_(s_.window),
        rng_(0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(::getpid())) {
    control::Hello hello;
    hello.service = kService;
    hello.provider = fabric_->provider_name();
    hello.fabric_address = ep_.name();
    hello.payload = json_bytes({{"spec", to_json(s_)}, {"region", region_to_json(mine_.remote())}});
    ctl_.emplace(control::ControlClient::connect(o.server, hello, o.timeout_ms, o.secret));
    const control::Welcome& w = ctl_->welcome();
    if (w.fabric_addresses.empty()) throw std::runtime_error("server sent no fabric address");
    server_ = ep_.insert_peer(w.fabric_addresses[0]);
    for (const auto& r : w.regions) {
      fabric::RemoteRegion rr{r.addr, r.length, r.key, static_cast<fabric::Access>(r.access)};
      if (r.name == kTargetRegion) target_ = rr;
      if (r.name == kCounterRegion) counters_ = rr;
    }
    auto payload = bytes_json(w.payload);
    index_ = payload.at("index").get<uint32_t>();
    area_ = index_ * kClientStride;
    for (uint32_t r = 0; r < s_.window; ++r) slots_[r].ctx.tag = r;
    // Receive buffers: echo responses by SEND and outbound SENDs land here.
    recv_size_ = std::max<size_t>(s_.size, 64);
    recv_count_ = std::min<size_t>(2 * s_.window, rx_.size() / recv_size_);
    recv_ctx_.resize(recv_count_);
    for (size_t i = 0; i < recv_count_; ++i) {
      recv_ctx_[i].tag = i;
      recv_ctx_[i].user = this;  // marks a receive context
    }
    bool needs_recv = (s_.mode == Mode::kEcho && s_.echo != EchoKind::kWriteWrite) ||
                      (s_.mode == Mode::kOutbound && s_.verb == fabric::Verb::kSend);
    if (needs_recv)
      for (size_t i = 0; i < recv_count_; ++i) post_recv(i);
  }

  static fabric::FabricOptions fabric_options(const ClientRoleOptions& o, const std::string& host) {
    fabric::FabricOptions f;
    f.provider = o.provider;
    f.peer_host = host;
    f.quiet = true;
    return f;
  }
  static fabric::EndpointOptions endpoint_options(const RunSpec& s) {
    fabric::EndpointOptions e;
    e.tx_depth = std::max<size_t>(256, s.window * 2);
    e.rx_depth = std::max<size_t>(256, s.window * 2);
    e.cq_depth = 4096;
    e.selective_completion = s.signal_every > 1;
    return e;
  }

  ClientResult run() {
    ClientResult res;
    if (s_.mode == Mode::kOutbound) return run_outbound();
    // Warm-up (first operations to a new peer wait for the server's progress), then measure.
    res.all_ops = phase(s_.warmup_s, false);
    auto before = ep_.counters().snapshot();
    auto t0 = Clock::now();
    uint64_t ops = phase(s_.duration_s, true);
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    res.ops = ops;
    res.histogram = hist_.to_json();
    res.counters = ep_.counters().snapshot() - before;
    uint64_t before_drain = completed_;
    drain();
    res.all_ops += ops + (completed_ - before_drain);
    return res;
  }

 private:
  // Runs the window for `seconds`; returns completed operations.
  uint64_t phase(double seconds, bool measure) {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    measuring_ = measure;
    completed_ = 0;
    fabric::Completion comps[32];
    uint64_t last_progress = now_ns();
    uint32_t spins = 0;
    while (true) {
      bool time_up = (++spins & 63) == 0 && Clock::now() >= end;
      if (!time_up) fill_window();
      size_t n = ep_.poll(comps);
      for (size_t i = 0; i < n; ++i) on_completion(comps[i]);
      if (s_.mode == Mode::kEcho && s_.echo == EchoKind::kWriteWrite) scan_responses();
      if (n > 0 || completed_ != last_completed_) {
        last_progress = now_ns();
        last_completed_ = completed_;
      }
      if (time_up) break;
      if ((spins & 1023) == 0 &&
          now_ns() - last_progress > static_cast<uint64_t>(o_.timeout_ms) * 1000000ULL)
        throw std::runtime_error(
            fmt::format("no completion from the server for {} ms (server gone?)", o_.timeout_ms));
    }
    return completed_;
  }

  // After the measurement: wait (bounded) for what is still in flight.
  void drain() {
    measuring_ = false;
    fabric::Completion comps[32];
    Deadline d = Deadline::after_ms(std::min(o_.timeout_ms, 1000));
    while (in_flight() > 0 && !d.expired()) {
      size_t n = ep_.poll(comps);
      for (size_t i = 0; i < n; ++i) on_completion(comps[i]);
      if (s_.mode == Mode::kEcho && s_.echo == EchoKind::kWriteWrite) scan_responses();
    }
  }

  size_t in_flight() const {
    size_t n = 0;
    for (const auto& s : slots_) n += s.busy ? 1 : 0;
    return n;
  }

  void fill_window() {
    for (uint32_t r = 0; r < s_.window; ++r) {
      Slot& slot = slots_[r];
      if (slot.busy) continue;
      long ret = post(r);
      if (ret == fabric::kAgain) return;  // queue full or peer not yet connected: progress first
      if (ret != 0) throw fabric::FabricError(fmt::format("post {}", s_.label()), ret);
    }
  }

  long post(uint32_t r) {
    Slot& slot = slots_[r];
    const uint32_t size = s_.size;
    fabric::LocalBuffer buf = tx_.local(r * size, size);
    fabric::PostOptions po;
    po.inlined = s_.inlined && s_.verb != fabric::Verb::kRead && size <= ep_.inject_size();
    // Selective signaling: with k > 1 only every k-th post asks for a completion and, as on an
    // RC queue pair, its completion retires the k-1 unsignaled posts before it.
    po.signaled = ((posted_ + 1) % s_.signal_every) == 0;
    long ret = 0;
    slot.t0 = now_ns();
    switch (s_.mode) {
      case Mode::kInbound: {
        uint64_t raddr = target_.at(area_ + r * size);
        if (s_.verb == fabric::Verb::kRead)
          ret = ep_.read(buf, server_, raddr, target_.key, &slot.ctx, po);
        else if (s_.verb == fabric::Verb::kWrite)
          ret = ep_.write(buf, server_, raddr, target_.key, &slot.ctx, po);
        else ret = ep_.send(buf, server_, &slot.ctx, po);
        break;
      }
      case Mode::kAtomic: {
        uint64_t which = rng_() % s_.z;
        char* op = tx_.data() + r * 16;
        store_u64(op, 1);
        ret = ep_.fetch_add(tx_.local(r * 16, 8), tx_.local(r * 16 + 8, 8), server_,
                            counters_.at(which * 8), counters_.key, &slot.ctx);
        po.signaled = true;
        break;
      }
      case Mode::kEcho: {
        uint64_t seq = ++seq_ * s_.window + r + 1;  // (seq - 1) % window == r
        char* req = tx_.data() + r * size;
        store_u64(req, seq);
        store_u32(req + kEchoHeader, index_);
        store_u64(req + size - kEchoTrailer, seq);
        slot.seq = seq;
        if (s_.echo == EchoKind::kSendSend) ret = ep_.send(buf, server_, &slot.ctx, po);
        else
          ret = ep_.write(buf, server_, target_.at(area_ + r * size), target_.key, &slot.ctx, po);
        break;
      }
      default: return fabric::kInvalid;
    }
    if (ret == 0) {
      slot.busy = true;
      posted_++;
      if (s_.mode != Mode::kEcho && !po.signaled) unsignaled_.push_back(r);
    }
    return ret;
  }

  void finish(uint32_t r) {
    Slot& slot = slots_[r];
    if (!slot.busy) return;
    slot.busy = false;
    completed_++;
    if (measuring_) hist_.record(now_ns() - slot.t0);
  }

  void on_completion(fabric::Completion& c) {
    if (c.error != 0) {
      throw std::runtime_error(fmt::format("{} completion error: {}", fabric::to_string(c.verb),
                                           c.error_text));
    }
    if (c.inbound) {
      if (c.verb != fabric::Verb::kRecv || c.context == nullptr) return;
      size_t i = c.context->tag;
      if (s_.mode == Mode::kEcho && c.len >= kEchoHeader) {
        uint64_t seq = load_u64(rx_.data() + i * recv_size_);
        uint32_t r = static_cast<uint32_t>((seq - 1) % s_.window);
        if (slots_[r].busy && slots_[r].seq == seq) finish(r);
      } else if (s_.mode == Mode::kOutbound) {
        outbound_recvs_++;
      }
      post_recv(i);
      return;
    }
    if (s_.mode == Mode::kEcho || c.context == nullptr || c.context->user == this) return;
    // A signaled completion retires itself and every unsignaled post before it.
    uint32_t r = static_cast<uint32_t>(c.context->tag);
    while (!unsignaled_.empty()) {
      finish(unsignaled_.front());
      unsignaled_.pop_front();
    }
    finish(r);
  }

  void scan_responses() {
    const uint32_t size = s_.size;
    for (uint32_t r = 0; r < s_.window; ++r) {
      Slot& slot = slots_[r];
      if (!slot.busy) continue;
      const char* resp = mine_.data() + r * size;
      if (load_u64(resp) == slot.seq && load_u64(resp + size - kEchoTrailer) == slot.seq) finish(r);
    }
  }

  void post_recv(size_t i) {
    long ret = fabric::post_with_retry(
        [&] { return ep_.recv(rx_.local(i * recv_size_, recv_size_), &recv_ctx_[i]); }, [] {},
        Deadline::after_ms(o_.timeout_ms));
    if (ret != 0) throw fabric::FabricError("fi_recv", ret);
  }

  ClientResult run_outbound() {
    ClientResult res;
    auto request = [&](const char* op) {
      auto reply = bytes_json(ctl_->request(json_bytes({{"op", op}}), o_.timeout_ms));
      if (reply.contains("error")) throw std::runtime_error(reply["error"].get<std::string>());
      return reply;
    };
    auto progress = [&](double seconds) {
      fabric::Completion comps[32];
      auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(seconds));
      while (Clock::now() < end) {
        size_t n = ep_.poll(comps);
        for (size_t i = 0; i < n; ++i) on_completion(comps[i]);
      }
    };
    request("start");
    progress(s_.warmup_s);
    res.all_ops = request("stop").at("ops").get<uint64_t>();
    auto before = ep_.counters().snapshot();
    auto t0 = Clock::now();
    request("start");
    progress(s_.duration_s);
    auto reply = request("stop");
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    res.ops = reply.at("ops").get<uint64_t>();
    res.all_ops += res.ops;
    progress(0.05);  // serve the operations still in flight before counting and leaving
    res.counters = ep_.counters().snapshot() - before;
    res.histogram = hist_.to_json();
    return res;
  }

  const ClientRoleOptions& o_;
  RunSpec s_;
  std::unique_ptr<fabric::Fabric> fabric_;
  fabric::Endpoint ep_;
  fabric::RegisteredBuffer mine_, tx_, rx_;
  std::optional<control::ControlClient> ctl_;
  fabric::PeerAddr server_ = fabric::kNoPeer;
  fabric::RemoteRegion target_, counters_;
  uint32_t index_ = 0;
  uint64_t area_ = 0;
  std::vector<Slot> slots_;
  std::vector<fabric::OpContext> recv_ctx_;
  size_t recv_size_ = 0, recv_count_ = 0;
  std::deque<uint32_t> unsignaled_;
  std::mt19937_64 rng_;
  LatencyHistogram hist_;
  bool measuring_ = false;
  uint64_t completed_ = 0, last_completed_ = 0, posted_ = 0, seq_ = 0, outbound_recvs_ = 0;
};

}  // namespace

int run_client(const ClientRoleOptions& o) {
  signal(SIGPIPE, SIG_IGN);
  pin_this_thread(o.core);
  auto fail = [](const std::string& what) {
    nlohmann::json j = {{"error", what}};
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
    return 3;
  };
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(o.server, &host, &port))
    return fail("--server wants HOST:PORT, got '" + o.server + "'");
  std::unique_ptr<PerfClient> client;
  try {
    validate(o.spec);
    client = std::make_unique<PerfClient>(o, host);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  fmt::print("READY\n");
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line) || line != "GO") return fail("no GO from the coordinator");
  try {
    ClientResult r = client->run();
    nlohmann::json j = {{"ops", r.ops},
                        {"seconds", r.seconds},
                        {"all_ops", r.all_ops},
                        {"histogram", r.histogram},
                        {"counters", r.counters.to_json()}};
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

}  // namespace fabkv::perf
