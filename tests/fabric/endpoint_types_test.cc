// The endpoint types other than rdm, between two real processes (this test and
// fabkv-fabric-msg-peer): FI_EP_MSG on tcp (the RC stand-in: Listener + Endpoint::connect,
// WRITE/READ, SEND/RECV, WRITE-with-immediate, exact counters, a peer that dies), FI_EP_DGRAM
// on udp (the UD stand-in: datagram echo, oversized messages refused), and shm refusing both.
#include <signal.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"
#include "perf/process.h"
#include "support/child.h"
#include "support/hex.h"

namespace fabkv::testing {
namespace {

using fabric::Completion;
using fabric::EndpointType;
using fabric::Verb;

using fabkv::testing::from_hex;
using fabkv::testing::to_hex;

// fabkv-fabric-msg-peer as a child process, with its stdout read line by line. How it ends is
// checked (support/child.h): a STOP line must end it with exit 0 (served without a fault; under
// the sanitizers also: no leak, no error), a kill must be what killed it.
class MsgPeer {
 public:
  explicit MsgPeer(const std::string& mode)
      : proc_(std::make_unique<Child>(std::vector<std::string>{FABKV_MSG_PEER_BIN, mode})) {}
  ~MsgPeer() { stop(); }
  // Asks the peer to exit; its exit status (perf::ChildProcess::wait's). Anything but 0 within
  // 5 s is also a test failure showing the peer's stderr.
  int stop() {
    if (!proc_) return -1;
    proc_->proc().write_line("STOP");
    EXPECT_TRUE(proc_->ends_as(0, 5000)) << "stopped by a STOP line";
    int status = proc_->proc().wait(Deadline::after_ms(0));
    proc_.reset();
    return status;
  }

  // The rest of the next line that starts with `prefix` ("" when none came before the deadline);
  // other lines are kept in lines().
  std::string expect(const std::string& prefix, int ms = 10000) {
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].rfind(prefix, 0) == 0) {
        std::string rest = lines_[i].substr(prefix.size());
        lines_.erase(lines_.begin() + static_cast<long>(i));
        return rest;
      }
    }
    Deadline d = Deadline::after_ms(ms);
    std::string line;
    while (proc_->proc().read_line(&line, d)) {
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
      lines_.push_back(line);
    }
    return {};
  }
  nlohmann::json counters() {
    proc_->proc().write_line("COUNTERS");
    std::string j = expect("COUNTERS ");
    return j.empty() ? nlohmann::json() : nlohmann::json::parse(j);
  }
  void write_line(const std::string& s) { proc_->proc().write_line(s); }
  void kill() {
    EXPECT_TRUE(proc_->kill());
    proc_.reset();
  }

 private:
  std::unique_ptr<Child> proc_;
  std::vector<std::string> lines_;
};

// Posts with retry while the transmit queue is full; completions reaped meanwhile are kept.
template <class Post>
long post(fabric::Endpoint& ep, Post&& p, std::vector<Completion>* reaped) {
  Deadline d = Deadline::after_ms(5000);
  long ret;
  while ((ret = p()) == fabric::kAgain && !d.expired()) {
    Completion c[8];
    size_t n = ep.poll(c);
    for (size_t i = 0; i < n; ++i) reaped->push_back(std::move(c[i]));
  }
  return ret;
}

// Waits until `got` holds at least n completions.
bool wait_for(fabric::Endpoint& ep, size_t n, std::vector<Completion>* got, int ms = 5000) {
  if (got->size() < n) ep.wait(n - got->size(), Deadline::after_ms(ms), got);
  return got->size() >= n;
}

// ---------------------------------------------------------------------------------- FI_EP_MSG

class MsgEndpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    peer_ = std::make_unique<MsgPeer>("msg");
    std::string name = peer_->expect("LISTEN ");
    ASSERT_FALSE(name.empty()) << "the peer did not start listening";
    std::istringstream region(peer_->expect("REGION "));
    region >> remote_.addr >> remote_.length >> remote_.key;
    ASSERT_GE(remote_.length, 1u << 20);
    fabric::FabricOptions fo;
    fo.provider = "tcp";
    fo.type = EndpointType::kMsg;
    fo.bind_host = "127.0.0.1";
    fo.quiet = true;
    fabric_ = fabric::Fabric::open(fo);
    ASSERT_EQ(fabric_->type(), EndpointType::kMsg);
    ASSERT_TRUE(fabric_->has_rma());
    ep_ = fabric::Endpoint::connect(*fabric_, from_hex(name), fabric::EndpointOptions{},
                                    Deadline::after_ms(10000));
    ASSERT_TRUE(ep_);
    ASSERT_EQ(peer_->expect("CONNECTED"), "");
    peer_->expect("SERVING");
    local_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, 1 << 20,
                                                        fabric::Access::kLocalOnly);
  }

  // Posts `n` operations made by make(i), at most `window` outstanding; all must succeed.
  template <class Make>
  void run_ops(int n, int window, Make&& make) {
    std::vector<Completion> got;
    int posted = 0;
    size_t done = 0;
    Deadline d = Deadline::after_ms(10000);
    while (done < static_cast<size_t>(n) && !d.expired()) {
      while (posted < n && posted - static_cast<int>(done) < window) {
        ASSERT_EQ(post(
                      *ep_, [&] { return make(posted); }, &got),
                  0);
        posted++;
      }
      Completion c[16];
      size_t k = ep_->poll(c);
      for (size_t i = 0; i < k; ++i) got.push_back(std::move(c[i]));
      for (; done < got.size(); ++done) ASSERT_EQ(got[done].error, 0) << got[done].error_text;
    }
    ASSERT_EQ(done, static_cast<size_t>(n));
  }

  std::unique_ptr<MsgPeer> peer_;
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::unique_ptr<fabric::RegisteredBuffer> local_;
  fabric::RemoteRegion remote_;
};

TEST_F(MsgEndpoint, WriteReadSendAndWriteImmAcrossProcessesWithExactCounters) {
  char* buf = local_->data();
  constexpr int kOps = 64, kSize = 64;
  for (int i = 0; i < kOps * kSize; ++i) buf[i] = static_cast<char>(i * 13 + 5);
  run_ops(kOps, 8, [&](int i) {
    return ep_->write(local_->local(i * kSize, kSize), fabric::kNoPeer, remote_.at(i * kSize),
                      remote_.key, nullptr);
  });
  // READ everything back into another part of the buffer: the data must be intact.
  char* back = buf + 256 * 1024;
  run_ops(kOps, 8, [&](int i) {
    return ep_->read(local_->local(256 * 1024 + i * kSize, kSize), fabric::kNoPeer,
                     remote_.at(i * kSize), remote_.key, nullptr);
  });
  ASSERT_EQ(std::memcmp(buf, back, kOps * kSize), 0);

  // SEND/RECV echo, ping-pong: each message comes back byte for byte.
  constexpr int kRecvs = 4, kEchoes = 20;
  const size_t rx_base = 512 * 1024;
  fabric::OpContext rctx[kRecvs];
  for (int i = 0; i < kRecvs; ++i) {
    rctx[i].tag = static_cast<uint64_t>(i);
    ASSERT_EQ(ep_->recv(local_->local(rx_base + i * 4096, 4096), &rctx[i]), 0);
  }
  uint64_t send_bytes = 0;
  for (int m = 0; m < kEchoes; ++m) {
    size_t len = 16 + static_cast<size_t>(m) * 7;
    char* msg = buf + 128 * 1024;
    for (size_t k = 0; k < len; ++k) msg[k] = static_cast<char>(m * 31 + k);
    std::vector<Completion> got;
    fabric::OpContext sctx;
    ASSERT_EQ(post(
                  *ep_,
                  [&] { return ep_->send(local_->local(128 * 1024, len), fabric::kNoPeer, &sctx); },
                  &got),
              0);
    send_bytes += len;
    ASSERT_TRUE(wait_for(*ep_, 2, &got)) << "echo " << m << " did not come back";
    const Completion* rc = nullptr;
    for (const auto& c : got) {
      ASSERT_EQ(c.error, 0) << c.error_text;
      if (c.inbound) {
        rc = &c;
      } else {
        EXPECT_EQ(c.context, &sctx);
      }
    }
    ASSERT_NE(rc, nullptr);
    EXPECT_EQ(rc->verb, Verb::kRecv);
    ASSERT_EQ(rc->len, len);
    size_t slot = rc->context->tag;
    ASSERT_EQ(std::memcmp(buf + rx_base + slot * 4096, msg, len), 0) << "echo " << m;
    ASSERT_EQ(ep_->recv(local_->local(rx_base + slot * 4096, 4096), &rctx[slot]), 0);
  }

  // WRITE with immediate data: lands, and the peer is told (inbound completion with the data).
  const uint64_t magic = 0x0123456789abcdefULL;
  std::memcpy(buf + 8192, &magic, 8);
  ASSERT_GE(fabric_->cq_data_size(), 4u);
  run_ops(1, 1, [&](int) {
    return ep_->write_imm(local_->local(8192, 8), 0xfab, fabric::kNoPeer, remote_.at(8192),
                          remote_.key, nullptr);
  });
  // "IMM <data> <len>": the peer's inbound completion and the length it reports. tcp reports
  // the WRITE's payload length since libfabric 1.18 (ofiwg/libfabric 922219650, "write len
  // field of cq_entry for writedata", as fi_cq(3) asks); 1.17 reported 0.
  std::istringstream imm(peer_->expect("IMM "));
  uint64_t imm_data = 0, imm_len = ~uint64_t{0};
  imm >> imm_data >> imm_len;
  EXPECT_EQ(imm_data, 0xfabu);
  run_ops(1, 1, [&](int) {
    return ep_->read(local_->local(8200, 8), fabric::kNoPeer, remote_.at(8192), remote_.key,
                     nullptr);
  });
  uint64_t landed = 0;
  std::memcpy(&landed, buf + 8200, 8);
  EXPECT_EQ(landed, magic);

  // Our counters, exactly.
  auto s = ep_->counters().snapshot();
  EXPECT_EQ(s[Verb::kWrite].posted, kOps + 1u);
  EXPECT_EQ(s[Verb::kWrite].bytes, kOps * kSize + 8u);
  EXPECT_EQ(s[Verb::kWrite].with_imm, 1u);
  EXPECT_EQ(s[Verb::kWrite].completed, kOps + 1u);
  EXPECT_EQ(s[Verb::kWrite].signaled, kOps + 1u);
  EXPECT_EQ(s[Verb::kRead].posted, kOps + 1u);
  EXPECT_EQ(s[Verb::kRead].bytes, kOps * kSize + 8u);
  EXPECT_EQ(s[Verb::kRead].completed, kOps + 1u);
  EXPECT_EQ(s[Verb::kSend].posted, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kSend].bytes, send_bytes);
  EXPECT_EQ(s[Verb::kSend].completed, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kRecv].posted, static_cast<uint64_t>(kRecvs + kEchoes));
  EXPECT_EQ(s[Verb::kRecv].inbound, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kRecv].inbound_bytes, send_bytes);
  EXPECT_EQ(s[Verb::kRecv].completed, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kAtomic].posted, 0u);
  for (const auto& v : s.verbs) EXPECT_EQ(v.errors, 0u);

  // The peer's, exactly: it received our SENDs and one WRITE-with-immediate, and sent echoes.
  auto p = peer_->counters();
  ASSERT_TRUE(p.is_object()) << "no counters from the peer";
  EXPECT_EQ(p["recv"]["inbound"].get<uint64_t>(), static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(p["recv"]["inbound_bytes"].get<uint64_t>(), send_bytes);
  EXPECT_EQ(p["write"]["inbound"].get<uint64_t>(), 1u);
  // The length the provider reports for it (pinned: 8, the WRITE's payload; see above).
  EXPECT_EQ(p["write"]["inbound_bytes"].get<uint64_t>(), imm_len);
  EXPECT_EQ(imm_len, 8u) << "tcp no longer reports the length of a write-with-data";
  EXPECT_EQ(p["send"]["posted"].get<uint64_t>(), static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(p["send"]["bytes"].get<uint64_t>(), send_bytes);
  EXPECT_EQ(p["write"]["posted"].get<uint64_t>(), 0u);
  EXPECT_EQ(p["read"]["posted"].get<uint64_t>(), 0u);
  ep_.reset();
  EXPECT_EQ(peer_->stop(), 0) << "the peer did not exit cleanly";
}

TEST_F(MsgEndpoint, SurvivorSeesTheDeadPeerWithinADeadline) {
  // One round trip first, so the connection is known to work.
  fabric::OpContext rctx;
  ASSERT_EQ(ep_->recv(local_->local(0, 4096), &rctx), 0);
  std::vector<Completion> got;
  ASSERT_EQ(post(
                *ep_, [&] { return ep_->send(local_->local(4096, 32), fabric::kNoPeer, nullptr); },
                &got),
            0);
  ASSERT_TRUE(wait_for(*ep_, 2, &got));
  for (const auto& c : got) ASSERT_EQ(c.error, 0) << c.error_text;
  got.clear();
  ASSERT_EQ(ep_->recv(local_->local(0, 4096), &rctx), 0);

  peer_->kill();
  // Within the deadline the survivor must see an error completion, a failed post, or the
  // FI_SHUTDOWN event: never hang, never report success to a dead peer forever.
  Deadline d = Deadline::after_ms(10000);
  bool noticed = false;
  std::string how;
  uint32_t round = 0;
  while (!noticed && !d.expired()) {
    if (ep_->peer_shutdown()) {
      noticed = true;
      how = "peer_shutdown()";
      break;
    }
    if (round++ % 64 == 0) {
      long r = ep_->send(local_->local(4096, 32), fabric::kNoPeer, nullptr);
      if (r != 0 && r != fabric::kAgain) {
        noticed = true;
        how = "post failed: " + fabric::error_text(r);
        break;
      }
    }
    Completion c[8];
    size_t n = ep_->poll(c);
    for (size_t i = 0; i < n && !noticed; ++i) {
      if (c[i].error != 0) {
        noticed = true;
        how = std::string("error completion: ") + c[i].error_text;
      }
    }
  }
  EXPECT_TRUE(noticed) << "the survivor saw nothing within 10 s of the peer's death";
  RecordProperty("noticed_by", how);
  std::cout << "survivor noticed the dead peer by " << how << "\n";
}

// -------------------------------------------------------------------------------- FI_EP_DGRAM

TEST(DgramEndpoint, TcpWithDgramTypeOpensTheUdpProvider) {
  fabric::FabricOptions fo;
  fo.provider = "tcp";
  fo.type = EndpointType::kDgram;
  fo.quiet = true;
  auto f = fabric::Fabric::open(fo);
  EXPECT_EQ(f->requested_provider(), "udp");
  EXPECT_NE(f->provider_name().find("udp"), std::string::npos) << f->provider_name();
  EXPECT_EQ(f->type(), EndpointType::kDgram);
  EXPECT_FALSE(f->has_rma());
  EXPECT_FALSE(f->has_atomics());
  EXPECT_NE(f->choice_reason().find("udp"), std::string::npos) << f->choice_reason();
}

TEST(DgramEndpoint, DatagramsEchoBetweenProcessesAndOversizedOnesAreRefused) {
  MsgPeer peer("dgram");
  std::istringstream hello(peer.expect("NAME "));
  std::string peer_name;
  size_t peer_max = 0;
  hello >> peer_name >> peer_max;
  ASSERT_FALSE(peer_name.empty()) << "the dgram peer did not start";

  fabric::FabricOptions fo;
  fo.provider = "udp";
  fo.type = EndpointType::kDgram;
  fo.quiet = true;
  auto f = fabric::Fabric::open(fo);
  const size_t max = f->max_msg_size();
  ASSERT_GT(max, 64u);
  ASSERT_LT(max, 1u << 16) << "udp datagrams are bounded";
  EXPECT_EQ(max, peer_max);
  fabric::Endpoint ep(*f);
  fabric::PeerAddr to = ep.insert_peer(from_hex(peer_name));
  ASSERT_NE(to, fabric::kNoPeer);
  fabric::RegisteredBuffer buf(*f, 1 << 20, fabric::Access::kLocalOnly);
  constexpr int kRecvs = 4;
  const size_t rx_base = 512 * 1024, slot = 64 * 1024;
  fabric::OpContext rctx[kRecvs];
  for (int i = 0; i < kRecvs; ++i) {
    rctx[i].tag = static_cast<uint64_t>(i);
    ASSERT_EQ(ep.recv(buf.local(rx_base + i * slot, max), &rctx[i]), 0);
  }
  peer.write_line("PEER " + to_hex(ep.name()));
  ASSERT_EQ(peer.expect("SERVING"), "");

  // Ping-pong (one datagram in flight: nothing to lose on loopback), sizes up to the maximum.
  constexpr int kEchoes = 12;
  uint64_t bytes = 0;
  for (int m = 0; m < kEchoes; ++m) {
    size_t len = m == kEchoes - 1 ? max : 8 + static_cast<size_t>(m) * 100;
    char* msg = buf.data();
    for (size_t k = 0; k < len; ++k) msg[k] = static_cast<char>(m * 17 + k * 3);
    std::vector<Completion> got;
    fabric::OpContext sctx;
    ASSERT_EQ(post(
                  ep, [&] { return ep.send(buf.local(0, len), to, &sctx); }, &got),
              0);
    bytes += len;
    ASSERT_TRUE(wait_for(ep, 2, &got)) << "datagram " << m << " (" << len << " B) not echoed";
    const Completion* rc = nullptr;
    for (const auto& c : got) {
      ASSERT_EQ(c.error, 0) << c.error_text;
      if (c.inbound) rc = &c;
    }
    ASSERT_NE(rc, nullptr);
    ASSERT_EQ(rc->len, len);
    size_t s = rc->context->tag;
    ASSERT_EQ(std::memcmp(buf.data() + rx_base + s * slot, msg, len), 0) << "datagram " << m;
    ASSERT_EQ(ep.recv(buf.local(rx_base + s * slot, max), &rctx[s]), 0);
  }
  auto s = ep.counters().snapshot();
  EXPECT_EQ(s[Verb::kSend].posted, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kSend].bytes, bytes);
  EXPECT_EQ(s[Verb::kRecv].inbound, static_cast<uint64_t>(kEchoes));
  EXPECT_EQ(s[Verb::kRecv].inbound_bytes, bytes);

  // One byte over the provider's max_msg_size: refused (failed post or error completion),
  // not sent, not a crash; the endpoint keeps working afterwards.
  {
    std::vector<Completion> got;
    fabric::OpContext big;
    long r = post(
        ep, [&] { return ep.send(buf.local(0, max + 1), to, &big); }, &got);
    bool refused = r != 0;
    if (!refused) {
      ASSERT_TRUE(wait_for(ep, 1, &got)) << "the oversized send neither failed nor completed";
      refused = got[0].error != 0;
    }
    EXPECT_TRUE(refused) << "a " << max + 1 << "-byte datagram (max_msg_size " << max
                         << ") was accepted";
    EXPECT_EQ(ep.counters().snapshot()[Verb::kSend].errors, 1u);
  }
  {
    std::vector<Completion> got;
    fabric::OpContext sctx;
    std::memcpy(buf.data(), "after", 5);
    ASSERT_EQ(post(
                  ep, [&] { return ep.send(buf.local(0, 5), to, &sctx); }, &got),
              0);
    ASSERT_TRUE(wait_for(ep, 2, &got)) << "the endpoint stopped working after the refusal";
    for (const auto& c : got) {
      ASSERT_EQ(c.error, 0) << c.error_text;
      if (c.inbound) {
        EXPECT_EQ(c.len, 5u);
      }
    }
  }
  auto p = peer.counters();
  ASSERT_TRUE(p.is_object());
  EXPECT_EQ(p["recv"]["inbound"].get<uint64_t>(), kEchoes + 1u) << "the peer saw the oversized one";
  EXPECT_EQ(peer.stop(), 0) << "the peer did not exit cleanly";
}

// ---------------------------------------------------------------------------------------- shm

TEST(ShmEndpointTypes, RefusesMsgAndDgramWithAClearError) {
  for (EndpointType t : {EndpointType::kMsg, EndpointType::kDgram}) {
    fabric::FabricOptions fo;
    fo.provider = "shm";
    fo.type = t;
    fo.quiet = true;
    try {
      fabric::Fabric::open(fo);
      ADD_FAILURE() << "shm opened a " << fabric::to_string(t) << " fabric";
    } catch (const fabric::FabricError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rdm"), std::string::npos) << what;
      EXPECT_NE(what.find(fabric::to_string(t)), std::string::npos) << what;
    }
  }
  // And rdm still opens.
  fabric::FabricOptions fo;
  fo.provider = "shm";
  fo.quiet = true;
  EXPECT_NO_THROW(fabric::Fabric::open(fo));
}

}  // namespace
}  // namespace fabkv::testing
