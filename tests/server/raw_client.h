// Test support: a HERD client written against the wire format directly (not the client
// library), so tests can write exactly the bytes they want into request slots: well-formed
// requests, garbage, torn or impossible ones. Plus a real fabkv-server process to aim at.
#pragma once

#include <signal.h>

#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "control/client.h"
#include "fabric/endpoint.h"
#include "perf/process.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "proto/rpc/wire.h"
#include "store/hash.h"
#include "support/ready_process.h"

namespace fabkv::testing {

// A fabkv-server (64 MiB, unpinned) plus `extra` flags; stops on SIGTERM.
class ServerProcess : public ReadyProcess {
 public:
  explicit ServerProcess(const std::string& provider, const std::vector<std::string>& extra = {})
      : ReadyProcess(argv(provider, extra), Stop::kSigterm) {}
  int terminate() { return stop(); }

 private:
  static std::vector<std::string> argv(const std::string& provider,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> a = {
        FABKV_SERVER_BIN, "--provider", provider,  "--listen", "127.0.0.1:0",
        "--memory",       "64M",        "--cores", "-1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

struct RawResponse {
  rpc::ResponseHeader h{};
  std::string value;
};

class RawClient {
 public:
  // `extra` adds fields to the Hello payload (hydradb: its "ring").
  RawClient(const std::string& provider, const std::string& server,
            const std::string& transport = "", const std::string& protocol = "herd",
            const nlohmann::json& extra = {}) {
    fabric::FabricOptions fo;
    fo.provider = provider;
    fo.quiet = true;
    fabric_ = fabric::Fabric::open(fo);
    ep_ = std::make_unique<fabric::Endpoint>(*fabric_);
    buf_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, 4 << 20,
                                                      fabric::Access::kRemoteRead);
    control::Hello hello;
    hello.service = proto::kService;
    hello.provider = fabric_->provider_name();
    hello.fabric_address = ep_->name();
    nlohmann::json p = {{"protocol", protocol}};
    if (!transport.empty()) p["transport"] = transport;
    p["region"] = proto::region_to_json(buf_->remote());
    if (extra.is_object()) p.update(extra);
    std::string s = p.dump();
    hello.payload.assign(s.begin(), s.end());
    ctl_.emplace(control::ControlClient::connect(server, hello, 5000));
    const auto& w = ctl_->welcome();
    layout = nlohmann::json::parse(w.payload.begin(), w.payload.end());
    uint32_t k = layout.at("queues");
    for (size_t i = 0; i < w.fabric_addresses.size(); ++i) {
      fabric::PeerAddr a = ep_->insert_peer(w.fabric_addresses[i]);
      if (i % k == 0) workers_.push_back(a);
    }
    for (const auto& reg : w.regions) {
      regions_.push_back({reg.addr, reg.length, reg.key, static_cast<fabric::Access>(reg.access)});
      region_names_.push_back(reg.name);
    }
    client = layout.at("client");
    epoch = layout.at("epoch");
    window = layout.at("window");
    slot_size = layout.at("slot_size");
    recv_size = layout.at("recv_size");
    rx_ctx_.resize(16);  // 16 x recv_size stays below the 2 MiB where requests are staged
    for (size_t i = 0; i < rx_ctx_.size(); ++i) {
      rx_ctx_[i].tag = i;
      post_recv(i);
    }
  }

  // Builds a well-formed inline request into `out` (returns its size).
  size_t build(uint32_t seq, rpc::OpCode op, const std::string& key, const std::string& value,
               char* out) const {
    rpc::RequestHeader h{};
    h.seq = seq;
    h.client = static_cast<uint16_t>(client);
    h.epoch = static_cast<uint16_t>(epoch);
    h.op = static_cast<uint8_t>(op);
    h.key_len = static_cast<uint16_t>(key.size());
    h.value_len = static_cast<uint32_t>(value.size());
    char* body = out + sizeof(h);
    std::memcpy(body, key.data(), key.size());
    std::memcpy(body + key.size(), value.data(), value.size());
    size_t n = key.size() + value.size();
    h.check = rpc::request_check(h, body, n);
    rpc::store(out, h);
    rpc::store(out + rpc::trailer_offset(n), rpc::RequestTrailer{seq});
    return rpc::request_bytes(n);
  }

  // Builds an indirect PUT into `out`: key and value placed in this client's own region at
  // 3 MiB + `off`, for the worker to READ (returns the slot bytes).
  size_t build_indirect_put(uint32_t seq, const std::string& key, const std::string& value,
                            size_t off, char* out) const {
    const size_t at = 3 * 1024 * 1024 + off;
    std::memcpy(buf_->data() + at, key.data(), key.size());
    std::memcpy(buf_->data() + at + key.size(), value.data(), value.size());
    rpc::IndirectBody ib{buf_->remote().at(at), buf_->remote().key, key.size() + value.size()};
    rpc::RequestHeader h{};
    h.seq = seq;
    h.client = static_cast<uint16_t>(client);
    h.epoch = static_cast<uint16_t>(epoch);
    h.op = static_cast<uint8_t>(rpc::OpCode::kPut);
    h.flags = rpc::kFlagIndirect;
    h.key_len = static_cast<uint16_t>(key.size());
    h.value_len = static_cast<uint32_t>(value.size());
    h.check = rpc::request_check(h, &ib, sizeof(ib));
    rpc::store(out, h);
    rpc::store(out + sizeof(h), ib);
    rpc::store(out + rpc::trailer_offset(sizeof(ib)), rpc::RequestTrailer{seq});
    return rpc::request_bytes(sizeof(ib));
  }

  // WRITEs `len` raw bytes at `raddr` of a region the Welcome named.
  void write_at(uint32_t w, const fabric::RemoteRegion& r, uint64_t off, const char* bytes,
                size_t len) {
    Staged st = stage(bytes, len);
    post([&] { return ep_->write(st.src, workers_.at(w), r.at(off), r.key, st.ctx); });
  }

  // WRITEs `len` raw bytes into slot (seq-1) % W of worker w.
  void write_slot(uint32_t w, uint32_t slot, const char* bytes, size_t len) {
    Staged st = stage(bytes, len);
    uint64_t raddr = regions_.at(w).at(rpc::slot_offset(client, window, slot_size, slot));
    post([&] { return ep_->write(st.src, workers_.at(w), raddr, regions_.at(w).key, st.ctx); });
  }
  void send_raw(uint32_t w, const char* bytes, size_t len) {
    Staged st = stage(bytes, len);
    post([&] { return ep_->send(st.src, workers_.at(w), st.ctx); });
  }

  // The region the Welcome named `name` (e.g. "pilaf.table.0"); throws when there is none.
  fabric::RemoteRegion region(const std::string& name) const {
    for (size_t i = 0; i < region_names_.size(); ++i)
      if (region_names_[i] == name) return regions_[i];
    throw std::runtime_error("no region " + name);
  }
  // READs `len` bytes at `raddr` with `rkey` from worker w's endpoint into our buffer. Returns
  // the completion's error (0: the bytes are in *out).
  int read(uint32_t w, uint64_t raddr, uint64_t rkey, size_t len, std::string* out) {
    fabric::OpContext ctx;
    long ret;
    Deadline d = Deadline::after_ms(5000);
    while ((ret = ep_->read(buf_->local(3 * 1024 * 1024, len), workers_.at(w), raddr, rkey,
                            &ctx)) == fabric::kAgain &&
           !d.expired())
      reap();
    if (ret != 0) return static_cast<int>(-ret);
    fabric::Completion c[8];
    while (!d.expired()) {
      size_t n = ep_->poll(c);
      for (size_t i = 0; i < n; ++i) {
        // shm reports a failed READ without its context or flags (libfabric 1.17): ours is the
        // only operation in flight, so an error without a context is ours too.
        bool mine = c[i].context == &ctx || (c[i].context == nullptr && c[i].error != 0);
        if (!mine) {
          if (c[i].inbound || c[i].error != 0) early_.push_back(std::move(c[i]));
          continue;
        }
        if (c[i].error == 0 && out) out->assign(buf_->data() + 3 * 1024 * 1024, len);
        return c[i].error;
      }
    }
    return -1;  // no completion within 5 s
  }

  uint32_t worker_of(const std::string& key) const {
    return store::partition_of(store::hash_key(key), layout.at("workers").get<uint32_t>());
  }

  // Waits for one response; nullopt at the deadline.
  std::optional<RawResponse> response(int ms = 3000) {
    Deadline d = Deadline::after_ms(ms);
    fabric::Completion c[8];
    while (!d.expired()) {
      size_t n = 0;
      while (n < 8 && !early_.empty()) {
        c[n++] = std::move(early_.front());
        early_.pop_front();
      }
      if (n == 0) n = ep_->poll(c);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].error != 0)
          throw std::runtime_error(std::string("completion error: ") + c[i].error_text);
        if (c[i].inbound && c[i].verb == fabric::Verb::kRecv) {
          size_t slot = c[i].context->tag;
          const char* at = buf_->data() + slot * recv_size;
          RawResponse r;
          r.h = rpc::load<rpc::ResponseHeader>(at);
          r.value.assign(at + sizeof(rpc::ResponseHeader), r.h.value_len);
          post_recv(slot);
          // Keep what this poll brought after it for the next call (in order).
          for (size_t j = n; j-- > i + 1;) early_.push_front(std::move(c[j]));
          return r;
        }
      }
    }
    return std::nullopt;
  }

  nlohmann::json stats() {
    std::string q = R"({"op":"stats"})";
    auto b = ctl_->request(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(q.data()), q.size()), 5000);
    return nlohmann::json::parse(b.begin(), b.end());
  }

  fabric::Endpoint& ep() { return *ep_; }
  nlohmann::json layout;
  uint32_t client = 0, epoch = 0, window = 0, slot_size = 0, recv_size = 0;

 private:
  template <class P>
  void post(P&& p) {
    Deadline d = Deadline::after_ms(5000);
    long ret;
    while ((ret = p()) == fabric::kAgain && !d.expired()) reap();
    if (ret != 0) throw std::runtime_error("post failed");
    reap();  // keep our completion queue drained however many requests we post
  }
  // Local completions are dropped; responses (and errors) are kept for response().
  void reap() {
    fabric::Completion c[16];
    size_t n = ep_->poll(c);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].context >= staged_ctx_.data() && c[i].context < staged_ctx_.data() + kStagedSlots)
        staged_busy_[c[i].context - staged_ctx_.data()] = false;
      if (c[i].inbound || c[i].error != 0) early_.push_back(std::move(c[i]));
    }
  }
  // The provider reads a WRITE's or SEND's bytes until its completion (tcp sends them from our
  // buffer later), so each post's bytes get a staging slot of their own, reused once its post
  // completed. (With one slot, the last of many junk SENDs once carried the request staged
  // after them.) A slot that is still busy is waited for, which only happens with more than
  // kStagedSlots posts in flight: a victim that posts its W requests and stops drives no
  // progress beyond what post() does.
  struct Staged {
    fabric::LocalBuffer src;
    fabric::OpContext* ctx;
  };
  Staged stage(const char* bytes, size_t len) {
    if (len > kStagedBytes) throw std::runtime_error("a raw WRITE or SEND over 64 KiB");
    const size_t i = staged_next_++ % kStagedSlots;
    Deadline d = Deadline::after_ms(5000);
    while (staged_busy_[i] && !d.expired()) reap();
    if (staged_busy_[i]) throw std::runtime_error("an earlier WRITE or SEND did not complete");
    std::memcpy(buf_->data() + kStaging + i * kStagedBytes, bytes, len);
    staged_busy_[i] = true;  // before the post: post() reaps, and may reap its completion
    return {buf_->local(kStaging + i * kStagedBytes, len), &staged_ctx_[i]};
  }
  void post_recv(size_t i) {
    long ret = ep_->recv(buf_->local(i * recv_size, recv_size), &rx_ctx_[i]);
    if (ret != 0) throw std::runtime_error("recv post failed");
  }

  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::unique_ptr<fabric::RegisteredBuffer> buf_;
  std::optional<control::ControlClient> ctl_;
  std::vector<fabric::PeerAddr> workers_;
  std::vector<fabric::RemoteRegion> regions_;
  std::vector<std::string> region_names_;
  std::vector<fabric::OpContext> rx_ctx_;
  // Where WRITEs and SENDs are staged: [2 MiB, 3 MiB) of buf_, in slots.
  static constexpr size_t kStaging = 2 * 1024 * 1024, kStagedSlots = 16, kStagedBytes = 64 << 10;
  std::array<fabric::OpContext, kStagedSlots> staged_ctx_{};
  std::array<bool, kStagedSlots> staged_busy_{};
  size_t staged_next_ = 0;
  std::deque<fabric::Completion> early_;
};

}  // namespace fabkv::testing
