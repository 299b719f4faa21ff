// Who must be polling (docs/fabric.md, "Progress: who must be polling"), pinned per provider:
// the target is a separate process (fabkv-fabric-progress-peer) that makes fabric progress
// only when the test tells it to, so each test sees what an operation does while the target
// does NOT poll, then that it finishes once the target does. A change in a provider's
// progress model fails here, and the table in docs/fabric.md must change with it. Measured
// identical on libfabric 1.17 and 2.1 (docs/fabric.md).
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/deadline.h"
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

// What an operation did while only the initiator polled.
struct Alone {
  bool accepted = false;   // the post was taken (not -FI_EAGAIN for 300 ms)
  bool completed = false;  // the initiator got its completion
  bool landed = false;     // the data (or the atomic's result) is in the target's memory
};

class Progress : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { start(""); }
  void TearDown() override { stop(); }

  bool shm() const { return GetParam() == "shm"; }

  // Starts the target (with a receive queue of `rx_depth` entries; fabkv's default when empty)
  // and our endpoint; the target inserts us before our first operation, as a fabkv server does.
  void start(const std::string& rx_depth) {
    std::vector<std::string> argv{FABKV_PROGRESS_PEER_BIN, GetParam()};
    if (!rx_depth.empty()) argv.push_back(rx_depth);
    peer_ = std::make_unique<testing::Child>(argv);
    std::string name = expect("NAME ");
    std::istringstream region(expect("REGION "));
    ASSERT_NE(name, "?") << "the target did not start";
    region >> region_.addr >> region_.key;
    fabric::FabricOptions fo;
    fo.provider = GetParam();
    fo.quiet = true;
    fabric_ = fabric::Fabric::open(fo);
    ep_ = std::make_unique<fabric::Endpoint>(*fabric_);
    mem_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, 1 << 20,
                                                      fabric::Access::kRemoteReadWrite);
    target_ = ep_->insert_peer(from_hex(name));
    peer_->proc().write_line("INSERT " + to_hex(ep_->name()));
    ASSERT_EQ(expect("OK"), "");
    completed_ = 0;
  }
  void stop() {
    if (!peer_) return;
    peer_->proc().write_line("STOP");
    EXPECT_TRUE(peer_->ends_as(0, 5000)) << "stopped by a STOP line";
    peer_.reset();
    mem_.reset();
    ep_.reset();
    fabric_.reset();
  }

  std::string expect(const std::string& prefix) {
    std::string line;
    while (peer_->proc().read_line(&line, Deadline::after_ms(10000)))
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    ADD_FAILURE() << "no '" << prefix << "' from the target";
    return "?";
  }
  // Whether the target's bytes [off, off+n) all equal `byte`; read by the target, not polling.
  bool landed(size_t off, size_t n, uint8_t byte) {
    peer_->proc().write_line("PEEK " + std::to_string(off) + " " + std::to_string(n));
    auto b = from_hex(expect("PEEK "));
    return b.size() == n && std::all_of(b.begin(), b.end(), [&](uint8_t x) { return x == byte; });
  }

  void reap() {
    Completion c[16];
    size_t n = ep_->poll(c);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(c[i].error, 0) << c[i].error_text;
      if (!c[i].inbound) ++completed_;
    }
  }
  // Posts, retrying -FI_EAGAIN while polling our side only; false when still refused after
  // `ms` and 1000 tries (so that a stretch of this process not running is no refusal).
  bool post_alone(const std::function<long()>& post, int ms = 300) {
    Deadline d = Deadline::after_ms(ms);
    long ret;
    for (int tries = 0; (ret = post()) == fabric::kAgain && (tries < 1000 || !d.expired()); ++tries)
      reap();
    EXPECT_TRUE(ret == 0 || ret == fabric::kAgain) << fabric::error_text(ret);
    return ret == 0;
  }
  // Posts one operation and polls only our side: up to 2 s for its completion, and 200 ms more
  // in any case (so an operation that needs the target has had every chance without it).
  Alone alone(const std::function<long()>& post, size_t off, size_t n, uint8_t byte) {
    Alone a;
    a.accepted = post_alone(post);
    Deadline d = Deadline::after_ms(2000);
    while (a.accepted && completed_ == 0 && !d.expired()) reap();
    Deadline more = Deadline::after_ms(200);
    while (!more.expired()) reap();
    a.completed = completed_ == 1;
    a.landed = landed(off, n, byte);
    return a;
  }
  // The target polls, 100 ms at a time, while we post `pending` (if any) and poll, until
  // `done(inbound)` holds (inbound: the target's count of arrivals) or 10 s have passed.
  uint64_t with_target(const std::function<bool(uint64_t)>& done,
                       const std::function<long()>& pending = nullptr) {
    Deadline d = Deadline::after_ms(10000);
    bool posted = pending == nullptr;
    uint64_t inbound = 0;
    do {
      peer_->proc().write_line("POLL 100");
      Deadline chunk = Deadline::after_ms(100);
      while (!chunk.expired()) {
        if (!posted) {
          long ret = pending();
          EXPECT_TRUE(ret == 0 || ret == fabric::kAgain) << fabric::error_text(ret);
          posted = ret == 0;
        }
        reap();
      }
      inbound = std::stoull(expect("POLLED "));
    } while (!(posted && done(inbound)) && !d.expired());
    EXPECT_TRUE(posted) << "refused even while the target polled";
    return inbound;
  }
  std::function<bool(uint64_t)> completed(uint64_t n) {
    return [this, n](uint64_t) { return completed_ >= n; };
  }
  std::function<bool(uint64_t)> completed_and_landed(uint64_t n, size_t off, size_t len,
                                                     uint8_t byte) {
    return [=, this](uint64_t) { return completed_ >= n && landed(off, len, byte); };
  }
  // One WRITE with the target polling: connection and name exchange done.
  // Waits for the data too: on tcp the initiator's completion means "sent", and the bytes land
  // when the target reads its socket, which may be in its next polling chunk (under load the
  // chunk that saw our completion can end first).
  void warm_up() {
    std::memset(mem_->data() + 4096, 0x22, 64);
    with_target(completed_and_landed(1, 4096, 64, 0x22), [&] { return write(4096, 64); });
    ASSERT_EQ(completed_, 1u);
    ASSERT_TRUE(landed(4096, 64, 0x22));
    completed_ = 0;
  }

  long write(size_t off, size_t len) {
    return ep_->write(mem_->local(off, len), target_, region_.at(off), region_.key, nullptr);
  }

  std::unique_ptr<testing::Child> peer_;  // support/child.h: its end is checked
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::unique_ptr<fabric::RegisteredBuffer> mem_;
  fabric::PeerAddr target_ = fabric::kNoPeer;
  fabric::RemoteRegion region_;
  uint64_t completed_ = 0;
};

// Row "first operation to a new peer": refused with -FI_EAGAIN until the target progresses
// (shm: the target must map us; tcp: rxm must accept the connection).
TEST_P(Progress, FirstOperationToANewPeerWaitsForTheTarget) {
  std::memset(mem_->data(), 0x11, 8);
  Alone a = alone([&] { return write(0, 8); }, 0, 8, 0x11);
  EXPECT_FALSE(a.accepted);
  EXPECT_FALSE(a.completed);
  EXPECT_FALSE(a.landed);
  with_target(completed_and_landed(1, 0, 8, 0x11), [&] { return write(0, 8); });
  EXPECT_EQ(completed_, 1u);
  EXPECT_TRUE(landed(0, 8, 0x11));
}

// Row "warm READ": shm's initiator copies out of the target with process_vm_readv; tcp's
// target must read and send the data.
TEST_P(Progress, WarmRead) {
  warm_up();
  Alone a = alone(
      [&] {
        return ep_->read(mem_->local(65536, 64), target_, region_.at(4096), region_.key, nullptr);
      },
      4096, 64, 0x22);
  EXPECT_TRUE(a.accepted);
  EXPECT_EQ(a.completed, shm());
  EXPECT_EQ(mem_->data()[65536 + 63] == 0x22, shm());
  with_target(completed(1));
  EXPECT_EQ(completed_, 1u);
  EXPECT_EQ(mem_->data()[65536 + 63], 0x22);
}

// Row "warm WRITE": both initiators complete alone; on shm the data is already in the target's
// memory (process_vm_writev), on tcp it lands when the target reads its socket.
TEST_P(Progress, WarmWrite) {
  warm_up();
  std::memset(mem_->data() + 8192, 0x33, 64);
  Alone a = alone([&] { return write(8192, 64); }, 8192, 64, 0x33);
  EXPECT_TRUE(a.accepted);
  EXPECT_TRUE(a.completed);
  EXPECT_EQ(a.landed, shm());
  with_target([&](uint64_t) { return landed(8192, 64, 0x33); });
  EXPECT_TRUE(landed(8192, 64, 0x33));
}

// Row "WRITE with immediate": the initiator completes alone; the data is placed, and announced,
// by the target's progress on both (shm carries a small one inside its command).
TEST_P(Progress, WriteWithImmediateLandsWhenTheTargetPolls) {
  warm_up();
  std::memset(mem_->data() + 12288, 0x44, 64);
  Alone a = alone(
      [&] {
        return ep_->write_imm(mem_->local(12288, 64), 7, target_, region_.at(12288), region_.key,
                              nullptr);
      },
      12288, 64, 0x44);
  EXPECT_TRUE(a.accepted);
  EXPECT_TRUE(a.completed);
  EXPECT_FALSE(a.landed);
  EXPECT_EQ(with_target([](uint64_t inbound) { return inbound >= 1; }), 1u);
  EXPECT_TRUE(landed(12288, 64, 0x44));
}

// Row "0-byte SEND": the initiator completes alone; the target sees it when it polls.
TEST_P(Progress, HeaderOnlySendIsSeenWhenTheTargetPolls) {
  warm_up();
  Alone a = alone([&] { return ep_->send_imm(mem_->local(0, 0), 9, target_, nullptr); }, 0, 0, 0);
  EXPECT_TRUE(a.accepted);
  EXPECT_TRUE(a.completed);
  EXPECT_EQ(with_target([](uint64_t inbound) { return inbound >= 1; }), 1u);
}

// Row "atomics": applied, and completed, only by the target's progress on both.
TEST_P(Progress, FetchAddIsAppliedByTheTarget) {
  warm_up();
  const uint64_t one = 1;
  std::memcpy(mem_->data() + 16384, &one, 8);
  Alone a = alone(
      [&] {
        return ep_->fetch_add(mem_->local(16384, 8), mem_->local(16392, 8), target_,
                              region_.at(20480), region_.key, nullptr);
      },
      20480, 1, 1);
  EXPECT_TRUE(a.accepted);
  EXPECT_FALSE(a.completed);
  EXPECT_FALSE(a.landed);
  with_target(completed(1));
  EXPECT_EQ(completed_, 1u);
  EXPECT_TRUE(landed(20480, 1, 1));
}

// Row "many one-sided ops without target polling": every shm READ or WRITE leaves a notice in
// the target's command queue, as deep as the target endpoint's receive queue (rounded up to a
// power of two): then -FI_EAGAIN until the target polls. tcp takes them all (its socket
// buffers and rxm queue them).
TEST_P(Progress, ManyWritesFromOnePeerWithoutTheTarget) {
  for (const std::string depth : {"", "1024"}) {
    SCOPED_TRACE("target rx_depth " + (depth.empty() ? std::string("default") : depth));
    if (!depth.empty()) {
      stop();
      start(depth);
    }
    warm_up();
    constexpr uint64_t kCap = 20000;
    uint64_t accepted = 0;
    while (accepted < kCap && post_alone([&] { return write((accepted % 1024) * 8, 8); }))
      ++accepted;
    const uint64_t queue = depth.empty() ? fabric::EndpointOptions{}.rx_depth : 1024;
    EXPECT_EQ(accepted, shm() ? queue : kCap);
    with_target(completed(accepted));
    EXPECT_EQ(completed_, accepted);
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, Progress, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
