// fabkv::Client over HERD (HERD sec. 4): requests WRITten (or SENT, sec. 5.5) into the
// worker's request region, responses arriving as SENDs into receive buffers posted in advance.
//
// Per worker w the client keeps W slots. Request number r goes to slot r mod W with
// seq = r+1 (skipping 0 on wrap); a slot is reused only when both its response and the local
// completion of its WRITE/SEND have arrived, so neither the server's slot nor our local
// buffer is overwritten while in use.
#include "client/client.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "client/pilaf_reader.h"
#include "client/request.h"
#include "common/deadline.h"
#include "control/client.h"
#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/isolation.h"
#include "proto/json.h"
#include "proto/registry.h"
#include "proto/pilaf/layout.h"
#include "store/hash.h"
#include "store/limits.h"

namespace fabkv {

const char* to_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kNotFound: return "not found";
    case Status::kTooLarge: return "too large";
    case Status::kNoSpace: return "no space";
    case Status::kVersionMismatch: return "version mismatch";
    case Status::kInvalidKey: return "invalid key";
    case Status::kServerGone: return "server gone";
    case Status::kTimeout: return "timeout";
    case Status::kMalformed: return "malformed request";
    case Status::kError: return "error";
    case Status::kContended: return "contended: the key kept changing under 64 READs";
  }
  return "unknown status";
}

namespace {

using client_detail::RequestFields;

constexpr size_t kDefaultStaging = size_t{1} << 20;
constexpr size_t kStagingAlign = 64;
constexpr size_t kExtraRecvs = 4;
// Markers in OpContext::user telling transmit from receive completions.
char kTxMarker, kRecvMarker;

using proto::json_bytes;

// The indirect path's client memory: a bump allocator that restarts at 0 whenever nothing is
// in use. Indirect requests are the rare, large ones, so simplicity beats packing.
class StagingArena {
 public:
  explicit StagingArena(size_t size) : size_(size) {}
  bool alloc(size_t len, size_t* off) {
    len = (len + kStagingAlign - 1) & ~(kStagingAlign - 1);
    if (in_use_ == 0) head_ = 0;
    if (len > size_ - head_) return false;
    *off = head_;
    head_ += len;
    in_use_++;
    return true;
  }
  void release() {
    if (in_use_ > 0 && --in_use_ == 0) head_ = 0;
  }
  size_t size() const { return size_; }

 private:
  size_t size_, head_ = 0, in_use_ = 0;
};

}  // namespace

struct Client::Impl {
  static constexpr size_t kNoStaging = ~size_t{0};

  struct Slot {
    fabric::OpContext tx_ctx;
    Callback cb;
    uint32_t seq = 0;
    uint8_t op = 0;
    bool awaiting = false;    // response expected and callback not yet run
    bool zombie = false;      // callback ran (timeout) but the response may still come
    bool tx_pending = false;  // local WRITE/SEND completion not yet reaped
    Clock::time_point deadline{};
    size_t staging_off = kNoStaging;
    bool free() const { return !awaiting && !zombie && !tx_pending; }
  };
  struct Worker {
    fabric::PeerAddr peer = fabric::kNoPeer;  // request endpoint (w*k)
    fabric::RemoteRegion region;              // herd.requests.<w>
    uint64_t next_r = 0;
    uint32_t last_seq = 0;
    std::vector<Slot> slots;
  };

  ClientOptions o;
  std::string host;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::Endpoint> ep;
  std::unique_ptr<fabric::RegisteredBuffer> staging_buf, tx, rx;
  std::optional<StagingArena> staging;
  std::optional<control::ControlClient> ctl;
  nlohmann::json layout;

  uint16_t client = 0, epoch = 0;
  uint32_t n_workers = 0, window = 0, slot_size = 0, queues = 1;
  size_t max_value = 0, recv_size = 0;
  size_t tx_stride = 0;  // bytes per request slot in `tx` (room for lock-free padding)
  bool send_transport = false;

  std::vector<Worker> workers;
  std::vector<fabric::OpContext> recv_ctx;
  std::unique_ptr<client_detail::PilafReader> pilaf;  // protocol pilaf: GETs by READ
  size_t in_flight = 0;  // slots awaiting a response (pilaf GETs: pilaf->in_flight())
  bool gone = false;
  uint32_t spins = 0;
  Clock::time_point last_alive_check{};

  // ---- set-up ----------------------------------------------------------------------------

  void open(const ClientOptions& options, const std::string& server_host) {
    o = options;
    host = server_host;
    fabric::FabricOptions fo;
    fo.provider = o.provider;
    fo.peer_host = host;
    fo.quiet = true;
    fabric = fabric::Fabric::open(fo);
    size_t staging_bytes = o.staging_bytes ? o.staging_bytes : kDefaultStaging;
    handshake(staging_bytes);
    size_t needed = store::kMaxKeySize + max_value + kStagingAlign;
    if (needed > staging_bytes) {
      // The server allows larger values than our staging region holds: the region travels in
      // the Hello, so say goodbye and come back with one that fits (rare configurations only).
      ctl->close();
      ctl.reset();
      ep.reset();
      staging_buf.reset();
      handshake(needed);
    }
    setup_data_path();
  }

  void handshake(size_t staging_bytes) {
    fabric::EndpointOptions eo;
    eo.tx_depth = 512;
    eo.rx_depth = 512;
    eo.cq_depth = 4096;
    eo.av_size = 256;
    ep = std::make_unique<fabric::Endpoint>(*fabric, eo);
    staging_buf = std::make_unique<fabric::RegisteredBuffer>(*fabric, staging_bytes,
                                                             fabric::Access::kRemoteRead);
    staging.emplace(staging_bytes);
    fabric::RemoteRegion sr = staging_buf->remote();
    nlohmann::json payload = {{"protocol", o.protocol}, {"region", proto::region_to_json(sr)}};
    if (!o.transport.empty()) payload["transport"] = o.transport;
    else if (o.protocol != "herd") payload["transport"] = "send";
    control::Hello hello;
    hello.secret = o.secret;
    hello.service = proto::kService;
    hello.provider = fabric->provider_name();
    hello.fabric_address = ep->name();
    hello.payload = json_bytes(payload);
    ctl.emplace(control::ControlClient::connect(o.server, hello, o.connect_timeout_ms));
    parse_layout(ctl->welcome());
  }

  [[noreturn]] static void bad_layout(const std::string& why) {
    throw ClientError(Status::kMalformed, "fabkv: unusable layout from the server: " + why);
  }

  void parse_layout(const control::Welcome& w) {
    try {
      layout = nlohmann::json::parse(w.payload.begin(), w.payload.end());
    } catch (const nlohmann::json::exception& e) {
      bad_layout(std::string("payload is not JSON: ") + e.what());
    }
    try {
      if (layout.contains("wire") && layout.at("wire").get<uint32_t>() != rpc::kWireVersion)
        bad_layout(fmt::format("wire version {} (this client speaks {})",
                               layout.at("wire").get<uint32_t>(), rpc::kWireVersion));
      client = layout.at("client").get<uint16_t>();
      epoch = layout.at("epoch").get<uint16_t>();
      n_workers = layout.at("workers").get<uint32_t>();
      window = layout.at("window").get<uint32_t>();
      slot_size = layout.at("slot_size").get<uint32_t>();
      queues = layout.value("queues", 1u);
      max_value = layout.at("max_value").get<size_t>();
      recv_size = layout.at("recv_size").get<size_t>();
      std::string transport = layout.value("transport", std::string("write"));
      if (transport != "write" && transport != "send") bad_layout("transport " + transport);
      send_transport = transport == "send";
    } catch (const nlohmann::json::exception& e) {
      bad_layout(e.what());
    }
    if (n_workers == 0 || n_workers > 65536) bad_layout("workers out of range");
    if (window == 0 || window > 4096) bad_layout("window out of range");
    if (queues == 0) bad_layout("queues = 0");
    if (slot_size < rpc::request_bytes(sizeof(rpc::IndirectBody)))
      bad_layout(fmt::format("slot_size {} cannot hold an indirect request", slot_size));
    if (max_value > store::kMaxValueSizeLimit) bad_layout("max_value over 16 MiB");
    if (recv_size < sizeof(rpc::ResponseHeader)) bad_layout("recv_size under a response header");
    if (o.protocol == pilaf::kProtocol &&
        (!layout.contains("pilaf") || layout.at("pilaf").size() != n_workers))
      bad_layout("the server runs no pilaf engine for these workers");
    if (w.fabric_addresses.size() != size_t{n_workers} * queues)
      bad_layout(fmt::format("{} fabric addresses for {} workers x {} queues",
                             w.fabric_addresses.size(), n_workers, queues));
  }

  void setup_data_path() {
    const control::Welcome& w = ctl->welcome();
    // Every response endpoint goes into the AV: answers come from any of a worker's k queues,
    // and on shm a receiver must know a sender.
    std::vector<fabric::PeerAddr> peers;
    peers.reserve(w.fabric_addresses.size());
    for (const auto& a : w.fabric_addresses) peers.push_back(ep->insert_peer(a));
    workers.resize(n_workers);
    for (uint32_t i = 0; i < n_workers; ++i) {
      Worker& wk = workers[i];
      wk.peer = peers[size_t{i} * queues];
      wk.slots = std::vector<Slot>(window);
      for (uint32_t s = 0; s < window; ++s) {
        wk.slots[s].tx_ctx.user = &kTxMarker;
        wk.slots[s].tx_ctx.tag = (uint64_t{i} << 32) | s;
      }
      if (!send_transport) {
        std::string name = fmt::format("herd.requests.{}", i);
        wk.region = region_of(w, name);
        size_t end = rpc::slot_offset(client, window, slot_size, window - 1) + slot_size;
        if (end > wk.region.length)
          bad_layout(fmt::format("{} ({} bytes) has no slots for client {}", name,
                                 wk.region.length, client));
      }
    }
    size_t slots_total = size_t{n_workers} * window;
    // Messages of a size the provider would carry under a process-shared lock are sent padded
    // (fabric/isolation.h): the send transport's slots and every receive buffer have room.
    tx_stride = send_transport ? fabric::lock_free_capacity(*fabric, slot_size) : slot_size;
    tx = std::make_unique<fabric::RegisteredBuffer>(*fabric, slots_total * tx_stride,
                                                    fabric::Access::kLocalOnly);
    recv_size = (fabric::lock_free_capacity(*fabric, recv_size) + 7) & ~size_t{7};
    size_t n_recv = slots_total + kExtraRecvs;
    rx = std::make_unique<fabric::RegisteredBuffer>(*fabric, n_recv * recv_size,
                                                    fabric::Access::kLocalOnly);
    recv_ctx = std::vector<fabric::OpContext>(n_recv);
    if (o.protocol == pilaf::kProtocol) setup_pilaf(w);
    Deadline d = Deadline::after_ms(o.connect_timeout_ms);
    for (size_t i = 0; i < n_recv; ++i) {
      recv_ctx[i].user = &kRecvMarker;
      recv_ctx[i].tag = i;
      long ret = post_recv(i, d);
      if (ret != 0) throw fabric::FabricError("fi_recv", ret);
    }
  }

  // The Welcome's region called `name` (HERD's request regions, pilaf's tables and extents).
  static fabric::RemoteRegion region_of(const control::Welcome& w, const std::string& name) {
    auto it = std::find_if(w.regions.begin(), w.regions.end(),
                           [&](const control::RegionDescriptor& r) { return r.name == name; });
    if (it == w.regions.end()) bad_layout("no region " + name);
    return {it->addr, it->length, it->key, static_cast<fabric::Access>(it->access & 3)};
  }

  void setup_pilaf(const control::Welcome& w) {
    std::vector<client_detail::PilafMap> maps(n_workers);
    for (uint32_t i = 0; i < n_workers; ++i) {
      maps[i].peer = workers[i].peer;
      maps[i].table = region_of(w, fmt::format("pilaf.table.{}", i));
      maps[i].extents = region_of(w, fmt::format("pilaf.extents.{}", i));
      try {
        maps[i].generation = layout.at("pilaf").at(i).at("generation").get<uint32_t>();
        maps[i].entries = layout.at("pilaf").at(i).at("entries").get<uint64_t>();
      } catch (const nlohmann::json::exception& e) {
        bad_layout(e.what());
      }
      if (maps[i].entries == 0 || pilaf::table_bytes(maps[i].entries) > maps[i].table.length)
        bad_layout(fmt::format("pilaf.table.{} is smaller than its entries", i));
    }
    client_detail::PilafReader::Options po;
    po.ops = window * n_workers;
    po.max_record = pilaf::record_bytes(store::kMaxKeySize, max_value);
    po.timeout_ms = o.timeout_ms;
    po.grace_ms = layout.value("pilaf_grace_ms", 5000u);
    po.parallel_probes = o.pilaf_parallel_probes;
    po.clock_skew_s = o.clock_skew_s;  // test only
    pilaf = std::make_unique<client_detail::PilafReader>(
        *fabric, *ep, po, std::move(maps),
        [this](std::vector<client_detail::PilafMap>* maps) { return refresh_pilaf(maps); },
        [this] { poll_once(); },
        [this] {
          check_control(false);
          return !gone;
        });
  }

  bool refresh_pilaf(std::vector<client_detail::PilafMap>* maps) {
    if (!ctl || gone) return false;
    try {
      auto reply = ctl->request(json_bytes({{"op", "layout"}}), o.timeout_ms);
      auto j = nlohmann::json::parse(reply.begin(), reply.end());
      const auto& ws = j.at("workers");
      if (ws.size() != maps->size()) return false;
      for (size_t i = 0; i < maps->size(); ++i) {
        (*maps)[i].generation = ws.at(i).at("generation").get<uint32_t>();
        (*maps)[i].entries = ws.at(i).at("entries").get<uint64_t>();
        (*maps)[i].table = proto::region_from_json(ws.at(i).at("table"));
        (*maps)[i].extents = proto::region_from_json(ws.at(i).at("extents"));
        if ((*maps)[i].entries == 0) return false;
      }
      return true;
    } catch (const std::exception&) {
      check_control(true);
      return false;
    }
  }

  long post_recv(size_t i, Deadline d) {
    long ret;
    while ((ret = ep->recv(rx->local(i * recv_size, recv_size), &recv_ctx[i])) == fabric::kAgain) {
      if (d.expired()) break;
      fabric::Completion c[8];
      size_t n = ep->poll(c);
      for (size_t k = 0; k < n; ++k) on_completion(c[k]);
    }
    return ret;
  }

  // ---- data path -------------------------------------------------------------------------

  size_t tx_offset(uint32_t w, uint32_t s) const { return (size_t{w} * window + s) * tx_stride; }
  char* tx_area(uint32_t w, uint32_t s) { return tx->data() + tx_offset(w, s); }

  // Runs a request's callback once, then marks it finished (the callback may post more).
  static void finish(Slot& s, Status st, std::string_view value, uint64_t version) {
    Callback cb = std::move(s.cb);
    s.cb = nullptr;
    if (cb) cb(st, value, version);
  }

  void release_staging(Slot& s) {
    if (s.staging_off != kNoStaging) {
      staging->release();
      s.staging_off = kNoStaging;
    }
  }

  // Returns the number of callbacks run.
  size_t on_completion(fabric::Completion& c) {
    if (c.context == nullptr) {
      // Our posts all carry a context; shm drops it (and the flags) from a failed READ.
      if (pilaf && c.error != 0 && !c.inbound) pilaf->on_orphan_error();
      return 0;
    }
    if (pilaf && pilaf->owns(c.context)) return pilaf->on_completion(c);
    if (c.context->user == &kRecvMarker) return on_recv(c);
    if (c.context->user != &kTxMarker) return 0;
    uint32_t w = static_cast<uint32_t>(c.context->tag >> 32);
    uint32_t si = static_cast<uint32_t>(c.context->tag & 0xffffffffu);
    if (w >= workers.size() || si >= window) return 0;
    Slot& s = workers[w].slots[si];
    s.tx_pending = false;
    if (c.error == 0) {
      // A SEND built in staging (send transport, large request) is done with its bytes once
      // the SEND completed; an indirect WRITE's staging waits for the worker's READ, i.e.
      // the response.
      if (send_transport && s.staging_off != kNoStaging && !s.awaiting && !s.zombie)
        release_staging(s);
      return 0;
    }
    // The request never reached the server: the peer is gone (or unreachable).
    check_control(true);
    if (!s.awaiting) {
      if (!s.zombie) release_staging(s);
      return 0;
    }
    s.awaiting = false;
    s.zombie = false;
    in_flight--;
    release_staging(s);
    finish(s, Status::kServerGone, {}, 0);
    return 1;
  }

  size_t on_recv(fabric::Completion& c) {
    size_t i = c.context->tag;
    size_t ran = 0;
    if (c.error == 0) {
      client_detail::ParsedResponse r;
      const char* buf = rx->data() + i * recv_size;
      // Only answers to this incarnation of our index: a response the server built for a
      // departed client whose index we took must never complete one of our requests.
      if (client_detail::parse_response(buf, std::min(c.len, recv_size), &r) &&
          r.header.worker < workers.size() && r.header.client == client &&
          r.header.epoch == epoch) {
        Worker& wk = workers[r.header.worker];
        for (Slot& s : wk.slots) {
          if ((s.awaiting || s.zombie) && s.seq == r.header.seq && s.op == r.header.op) {
            bool run = s.awaiting;
            if (s.awaiting) in_flight--;
            s.awaiting = false;
            s.zombie = false;
            if (!send_transport || !s.tx_pending) release_staging(s);
            if (run) {
              finish(s, client_detail::from_wire(r.header.status), r.value, r.header.version);
              ran = 1;
            }
            break;
          }
        }
      }
    } else if (c.error == 125 /* ECANCELED: endpoint closing */) {
      return 0;
    }
    post_recv(i, Deadline::after_ms(o.timeout_ms));
    return ran;
  }

  // Is the control connection still up? It closes when the server process dies, which is
  // how a client learns "server gone" without waiting for a timeout. A system call, so at
  // most once per millisecond unless `now` is forced.
  void check_control(bool now) {
    if (gone) return;
    auto t = Clock::now();
    if (!now && t - last_alive_check < std::chrono::milliseconds(1)) return;
    last_alive_check = t;
    if (!ctl || !ctl->alive()) gone = true;
  }

  size_t expire(bool all) {
    size_t ran = 0;
    auto now = Clock::now();
    for (Worker& wk : workers) {
      for (Slot& s : wk.slots) {
        if (s.zombie && !s.awaiting && (all || now >= s.deadline)) {
          // Given up on for a second timeout: the response is not coming.
          s.zombie = false;
          release_staging(s);
          if (all) s.tx_pending = false;
        }
        if (!s.awaiting || (!all && now < s.deadline)) continue;
        s.awaiting = false;
        in_flight--;
        if (all) {
          s.tx_pending = false;
          release_staging(s);
        } else {
          // Keep the slot (and the staging bytes the worker may still READ) until the late
          // response arrives or another timeout passes.
          s.zombie = true;
          s.deadline = now + std::chrono::milliseconds(o.timeout_ms);
        }
        finish(s, all ? Status::kServerGone : Status::kTimeout, {}, 0);
        ran++;
      }
    }
    return ran;
  }

  size_t poll_once() {
    fabric::Completion comps[16];
    size_t n = ep->poll(comps);
    size_t ran = 0;
    for (size_t i = 0; i < n; ++i) ran += on_completion(comps[i]);
    if ((++spins & 127) == 0 || gone) {
      check_control(false);
      if (gone) ran += expire(true);
      else if (in_flight > 0) ran += expire(false);
      if (pilaf && pilaf->in_flight() > 0)
        ran += gone ? pilaf->expire(true, Status::kServerGone) : pilaf->expire(false, Status::kTimeout);
    }
    return ran;
  }

  Status submit(rpc::OpCode op, std::string_view key, std::string_view value,
                uint64_t expected_version, uint32_t expire_at, Callback cb) {
    if (gone) return Status::kServerGone;
    Status v = client_detail::validate(key, value.size(), max_value);
    if (v != Status::kOk) return v;
    uint32_t w = store::partition_of(store::hash_key(key), n_workers);
    Worker& wk = workers[w];
    size_t body = key.size() + value.size();
    size_t inline_bytes = rpc::request_bytes(body);
    bool indirect = !send_transport && inline_bytes > slot_size;
    bool staged_send = send_transport && inline_bytes > slot_size;
    size_t staging_len =
        indirect ? body : (staged_send ? fabric::lock_free_len(*fabric, inline_bytes) : 0);
    Deadline d = Deadline::after_ms(o.timeout_ms);
    // Wait for the slot and staging bytes; callbacks run meanwhile may take slots, so
    // re-check both on every round and claim nothing until both are there.
    size_t off = kNoStaging;
    uint32_t si;
    while (true) {
      si = static_cast<uint32_t>(wk.next_r % window);
      if (wk.slots[si].free() && (staging_len == 0 || staging->alloc(staging_len, &off))) break;
      poll_once();
      check_control(false);
      if (gone) return Status::kServerGone;
      if (d.expired()) return Status::kTimeout;
    }
    Slot& s = wk.slots[si];
    wk.next_r++;
    wk.last_seq = client_detail::next_seq(wk.last_seq);
    RequestFields f;
    f.seq = wk.last_seq;
    f.client = client;
    f.epoch = epoch;
    f.op = op;
    f.expire_at = expire_at;
    f.expected_version = expected_version;
    s.seq = f.seq;
    s.op = static_cast<uint8_t>(op);
    s.staging_off = off;
    fabric::LocalBuffer src;
    if (indirect) {
      char* st = staging_buf->data() + off;
      std::memcpy(st, key.data(), key.size());
      if (!value.empty()) std::memcpy(st + key.size(), value.data(), value.size());
      rpc::IndirectBody ib{staging_buf->remote().at(off), staging_buf->remote().key, body};
      size_t n = client_detail::encode_indirect(tx_area(w, si), f,
                                                static_cast<uint16_t>(key.size()),
                                                static_cast<uint32_t>(value.size()), ib);
      src = tx->local(tx_offset(w, si), n);
    } else if (staged_send) {
      size_t n = client_detail::encode_inline(staging_buf->data() + off, f, key, value);
      src = staging_buf->local(off, fabric::lock_free_len(*fabric, n));
    } else {
      size_t n = client_detail::encode_inline(tx_area(w, si), f, key, value);
      src = tx->local(tx_offset(w, si), send_transport ? fabric::lock_free_len(*fabric, n) : n);
    }
    s.cb = std::move(cb);
    s.awaiting = true;
    s.tx_pending = true;
    // Not expirable until posted: the retry loop below polls, and an expiry there would run
    // the callback of a request that then reports "not sent".
    s.deadline = Clock::time_point::max();
    in_flight++;
    fabric::PostOptions po;
    po.inlined = src.len <= ep->inject_size();
    long ret;
    while (true) {
      ret = send_transport
                ? ep->send(src, wk.peer, &s.tx_ctx, po)
                : ep->write(src, wk.peer, wk.region.at(rpc::slot_offset(client, window, slot_size, si)),
                            wk.region.key, &s.tx_ctx, po);
      if (ret != fabric::kAgain) break;
      // The first operation to a new peer waits for its progress; a full queue for ours.
      poll_once();
      check_control(false);
      if (gone || d.expired()) break;
    }
    if (ret == 0) {
      s.deadline = d.at();
      return Status::kOk;
    }
    // Not posted: nothing reaches the server, the callback will not run.
    if (s.awaiting) in_flight--;
    s.awaiting = false;
    s.tx_pending = false;
    s.cb = nullptr;
    release_staging(s);
    if (gone) return Status::kServerGone;
    return ret == fabric::kAgain ? Status::kTimeout : Status::kError;
  }

  Status wait_for(const bool& done, Deadline d) {
    while (!done) {
      poll_once();
      if (done) break;
      // Our own deadline is a backstop; the request's own expiry normally answers first.
      if (d.expired()) {
        expire(false);
        if (!done) return Status::kTimeout;
      }
    }
    return Status::kOk;
  }

  size_t pending() const { return in_flight + (pilaf ? pilaf->in_flight() : 0); }

  // GETs go by READ under pilaf; everything else (and all of pilaf-vo) by message.
  Status submit_any(rpc::OpCode op, std::string_view key, std::string_view value,
                    uint64_t expected_version, uint32_t expire_at, Callback cb) {
    if (op != rpc::OpCode::kGet || !pilaf)
      return submit(op, key, value, expected_version, expire_at, std::move(cb));
    if (gone) return Status::kServerGone;
    Status v = client_detail::validate(key, 0, max_value);
    if (v != Status::kOk) return v;
    return pilaf->get(key, store::partition_of(store::hash_key(key), n_workers), std::move(cb));
  }

  Status blocking(rpc::OpCode op, std::string_view key, std::string_view value,
                  uint64_t expected_version, uint32_t expire_at, std::string* out_value,
                  uint64_t* out_version) {
    bool done = false;
    Status result = Status::kError;
    Status st = submit_any(op, key, value, expected_version, expire_at,
                       [&](Status s, std::string_view v, uint64_t ver) {
                         done = true;
                         result = s;
                         if (out_value && s == Status::kOk) out_value->assign(v.data(), v.size());
                         if (out_version) *out_version = ver;
                       });
    if (st != Status::kOk) return st;
    Status w = wait_for(done, Deadline::after_ms(o.timeout_ms + 100));
    return w == Status::kOk ? result : w;
  }
};

// ---- Client ------------------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (!impl_) return;
  // Let in-flight requests finish briefly so the server is not left with our half-sent bytes;
  // then close the control channel (the server reclaims our slots) before the endpoint.
  if (impl_->ep && impl_->pending() > 0 && !impl_->gone) {
    Deadline d = Deadline::after_ms(std::min(impl_->o.timeout_ms, 200));
    while (impl_->pending() > 0 && !impl_->gone && !d.expired()) impl_->poll_once();
  }
  if (impl_->ctl) impl_->ctl->close();
  impl_->pilaf.reset();  // its buffer's registration goes before the fabric
}

std::unique_ptr<Client> Client::connect(const ClientOptions& options) {
  const bool by_message = options.protocol == pilaf::kProtocol || options.protocol == pilaf::kProtocolVo;
  if (options.protocol != "herd" && !by_message)
    throw ClientError(Status::kError, "fabkv: unknown protocol '" + options.protocol +
                                          "' (this client speaks: herd, pilaf, pilaf-vo)");
  if (by_message && !options.transport.empty() && options.transport != "send")
    throw ClientError(Status::kError, "fabkv: " + options.protocol +
                                          " sends its requests as messages: transport must be send");
  if (!options.transport.empty() && options.transport != "write" && options.transport != "send")
    throw ClientError(Status::kError,
                      "fabkv: transport must be write or send, not '" + options.transport + "'");
  if (options.timeout_ms <= 0 || options.connect_timeout_ms <= 0)
    throw ClientError(Status::kError, "fabkv: timeouts must be positive");
  std::string host;
  uint16_t port = 0;
  if (!control::split_host_port(options.server, &host, &port))
    throw ClientError(Status::kError,
                      "fabkv: --server wants HOST:PORT, got '" + options.server + "'");
  auto impl = std::make_unique<Impl>();
  try {
    impl->open(options, host);
  } catch (const ClientError&) {
    throw;
  } catch (const control::ControlError& e) {
    Status s = Status::kServerGone;
    if (e.status() == control::Status::kTimeout) s = Status::kTimeout;
    else if (e.status() == control::Status::kMalformed) s = Status::kMalformed;
    // The control client's text already names the server and, on a rejection, carries the
    // server's own message ("this server takes requests by write ...").
    std::string what = std::string("fabkv: ") + e.what();
    throw ClientError(s, what);
  } catch (const fabric::FabricError& e) {
    throw ClientError(Status::kError, std::string("fabkv: fabric: ") + e.what());
  } catch (const std::exception& e) {
    throw ClientError(Status::kError, std::string("fabkv: ") + e.what());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Status Client::get(std::string_view key, std::string* value, uint64_t* version) {
  return impl_->blocking(rpc::OpCode::kGet, key, {}, 0, 0, value, version);
}
Status Client::put(std::string_view key, std::string_view value, uint64_t expected_version,
                   uint32_t expire_at, uint64_t* new_version) {
  return impl_->blocking(rpc::OpCode::kPut, key, value, expected_version, expire_at, nullptr,
                         new_version);
}
Status Client::del(std::string_view key) {
  return impl_->blocking(rpc::OpCode::kDel, key, {}, 0, 0, nullptr, nullptr);
}
Status Client::get_async(std::string_view key, Callback cb) {
  return impl_->submit_any(rpc::OpCode::kGet, key, {}, 0, 0, std::move(cb));
}
Status Client::put_async(std::string_view key, std::string_view value, Callback cb,
                         uint64_t expected_version, uint32_t expire_at) {
  return impl_->submit(rpc::OpCode::kPut, key, value, expected_version, expire_at, std::move(cb));
}
Status Client::del_async(std::string_view key, Callback cb) {
  return impl_->submit(rpc::OpCode::kDel, key, {}, 0, 0, std::move(cb));
}

size_t Client::poll() { return impl_->poll_once(); }

Status Client::flush() {
  // Each request expires at its own deadline, so this ends within timeout_ms of the last post.
  Deadline backstop = Deadline::after_ms(impl_->o.timeout_ms + 100);
  while (impl_->pending() > 0) {
    impl_->poll_once();
    if (backstop.expired()) {
      impl_->expire(false);
      if (impl_->pilaf) impl_->pilaf->expire(false, Status::kTimeout);
    }
  }
  impl_->check_control(true);
  return impl_->gone ? Status::kServerGone : Status::kOk;
}

size_t Client::in_flight() const { return impl_->pending(); }

nlohmann::json Client::protocol_counters() const {
  if (impl_->pilaf) return impl_->pilaf->counters().to_json();
  return nlohmann::json::object();
}

nlohmann::json Client::stats() {
  if (!impl_->ctl || impl_->gone) throw ClientError(Status::kServerGone, "fabkv: server gone");
  try {
    auto reply = impl_->ctl->request(json_bytes({{"op", "stats"}}), impl_->o.timeout_ms);
    return nlohmann::json::parse(reply.begin(), reply.end());
  } catch (const control::ControlError& e) {
    impl_->check_control(true);
    throw ClientError(e.status() == control::Status::kTimeout ? Status::kTimeout
                                                               : Status::kServerGone,
                      std::string("fabkv: stats: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw ClientError(Status::kMalformed, std::string("fabkv: stats reply: ") + e.what());
  }
}

fabric::VerbSnapshot Client::counters() const { return impl_->ep->counters().snapshot(); }
const nlohmann::json& Client::layout() const { return impl_->layout; }
const std::string& Client::provider() const { return impl_->fabric->provider_name(); }

}  // namespace fabkv
