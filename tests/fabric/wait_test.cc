// Blocking instead of polling (docs/fabric.md, "Blocking"), pinned per provider: what wait
// object a completion queue can have, what wakes a thread blocked on it, and what the
// provider counts of inbound one-sided operations. The target is a separate process
// (fabkv-fabric-progress-peer ... waitable) that blocks on its endpoint's wait object only when
// the test says so; the test posts an operation while it is blocked and reads how it woke.
// `--poll adaptive` (docs/server.md) is built on exactly these rows: a change in a provider
// fails here first.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "common/deadline.h"
#include "fabric/endpoint.h"
#include "fabric/error.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"
#include "fabric/waiter.h"
#include "perf/process.h"
#include "support/child.h"
#include "support/hex.h"

namespace fabkv::testing {
namespace {

using fabric::Completion;

std::unique_ptr<fabric::Fabric> open_fabric(const std::string& provider) {
  fabric::FabricOptions fo;
  fo.provider = provider;
  fo.quiet = true;
  return fabric::Fabric::open(fo);
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// shm in libfabric 2.1 (smr_cq_open): FI_WAIT_FD is refused with -FI_ENOSYS; FI_WAIT_UNSPEC
// becomes FI_WAIT_YIELD, whose fi_cq_sread makes no progress while it waits and loops on
// sched_yield (util_wait_yield_run): on an idle core it keeps the core, on a busy one it gives
// way to the other threads. Its CPU is printed, not asserted: it depends on what else runs.
TEST(Wait, ShmHasNoWaitObjectOnlyAYieldLoop) {
  auto f = open_fabric("shm");
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_DATA;
  attr.size = 64;
  attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  EXPECT_EQ(fi_cq_open(f->domain(), &attr, &cq, nullptr), -FI_ENOSYS);
  attr.wait_obj = FI_WAIT_UNSPEC;
  ASSERT_EQ(fi_cq_open(f->domain(), &attr, &cq, nullptr), 0);
  EXPECT_EQ(attr.wait_obj, FI_WAIT_YIELD);
  int fd = -1;
  EXPECT_NE(fi_control(&cq->fid, FI_GETWAIT, &fd), 0) << "a yield wait has no descriptor";
  fi_cq_data_entry e[4];
  const double cpu0 = thread_cpu_ms();
  auto t0 = Clock::now();
  EXPECT_EQ(fi_cq_sread(cq, e, 4, nullptr, 200), -FI_EAGAIN);
  const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const double cpu = thread_cpu_ms() - cpu0;
  EXPECT_GE(wall, 190.0);
  std::printf("fi_cq_sread(200 ms) on shm: %.1f ms of CPU in %.1f ms\n", cpu, wall);
  fi_close(&cq->fid);

  fabric::EndpointOptions eo;
  eo.waitable = true;
  fabric::Endpoint ep(*f, eo);
  EXPECT_EQ(ep.wait_fd(), -1);
  EXPECT_EQ(fabric::wakeup_of(ep), fabric::Wakeup::kNone);
  EXPECT_TRUE(ep.counts_remote_ops()) << "shm counts inbound READs/WRITEs (FI_RMA_EVENT)";
}

// tcp: a descriptor; blocking on it costs no CPU.
TEST(Wait, TcpHasADescriptorAndBlockingOnItIsFree) {
  auto f = open_fabric("tcp");
  fabric::EndpointOptions eo;
  eo.waitable = true;
  fabric::Endpoint ep(*f, eo);
  EXPECT_GE(ep.wait_fd(), 0);
  EXPECT_EQ(fabric::wakeup_of(ep), fabric::Wakeup::kAnyArrival);
  fabric::Waiter w;
  fabric::Endpoint* eps[] = {&ep};
  const double cpu0 = thread_cpu_ms();
  auto t0 = Clock::now();
  fabric::Waiter::Woke woke;
  do {
    Completion c[4];
    ep.poll(c);
    woke = w.wait(eps, {}, std::chrono::milliseconds(200));
  } while (woke == fabric::Waiter::Woke::kPending && Clock::now() - t0 < std::chrono::seconds(2));
  EXPECT_EQ(woke, fabric::Waiter::Woke::kTimeout);
  EXPECT_LT(thread_cpu_ms() - cpu0, 20.0);
  // wake() from another thread ends the wait at once.
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.wake();
  });
  t0 = Clock::now();
  do woke = w.wait(eps, {}, std::chrono::seconds(5));
  while (woke == fabric::Waiter::Woke::kPending);
  t.join();
  EXPECT_EQ(woke, fabric::Waiter::Woke::kWake);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
  // A waitable endpoint without one (shm) still sleeps, bounded, and wakes on wake().
}

class Wakeups : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    peer_ = std::make_unique<testing::Child>(std::vector<std::string>{FABKV_PROGRESS_PEER_BIN,
                                                                      GetParam(), "waitable"});
    std::string name = expect("NAME ");
    std::istringstream region(expect("REGION "));
    ASSERT_NE(name, "?") << "the target did not start";
    region >> region_.addr >> region_.key;
    fabric_ = open_fabric(GetParam());
    ep_ = std::make_unique<fabric::Endpoint>(*fabric_);
    mem_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, 1 << 20,
                                                      fabric::Access::kRemoteReadWrite);
    target_ = ep_->insert_peer(from_hex(name));
    peer_->proc().write_line("INSERT " + to_hex(ep_->name()));
    ASSERT_EQ(expect("OK"), "");
  }
  void TearDown() override {
    if (!peer_) return;
    peer_->proc().write_line("STOP");
    EXPECT_TRUE(peer_->ends_as(0, 5000)) << "stopped by a STOP line";
  }

  bool tcp() const { return GetParam() == "tcp"; }

  std::string expect(const std::string& prefix) {
    std::string line;
    while (peer_->proc().read_line(&line, Deadline::after_ms(10000)))
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    ADD_FAILURE() << "no '" << prefix << "' from the target";
    return "?";
  }
  void reap() {
    Completion c[16];
    size_t n = ep_->poll(c);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(c[i].error, 0) << c[i].error_text;
      if (!c[i].inbound) ++completed_;
    }
  }
  // The target polls 100 ms at a time (we poll too) until we have `n` completions, up to 10 s.
  void with_target(uint64_t n, const std::function<long()>& post = nullptr) {
    bool posted = post == nullptr;
    Deadline d = Deadline::after_ms(10000);
    while ((!posted || completed_ < n) && !d.expired()) {
      peer_->proc().write_line("POLL 100");
      Deadline chunk = Deadline::after_ms(100);
      while (!chunk.expired()) {
        if (!posted) posted = post() == 0;
        reap();
      }
      expect("POLLED ");
    }
    ASSERT_GE(completed_, n);
  }
  long write(size_t off, size_t len) {
    return ep_->write(mem_->local(off, len), target_, region_.at(off), region_.key, nullptr);
  }
  void warm_up() {
    with_target(1, [&] { return write(4096, 64); });
    completed_ = 0;
  }

  struct Blocked {
    std::string woke;
    long us = 0;
  };
  // The target blocks for up to `ms`; 50 ms into it we post (retrying -FI_EAGAIN while
  // polling our side), then read how and when it woke.
  // A post still refused when the target wakes (a first contact needs its progress) is
  // posted afterwards with the target polling. Then the operation must complete.
  Blocked block_during(const std::function<long()>& post, int ms = 3000) {
    peer_->proc().write_line("BLOCK " + std::to_string(ms));
    expect("BLOCKING");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Deadline d = Deadline::after_ms(ms);
    long ret;
    while ((ret = post()) == fabric::kAgain && !d.expired()) reap();
    EXPECT_TRUE(ret == 0 || ret == fabric::kAgain) << fabric::error_text(ret);
    std::istringstream in(expect("BLOCKED "));
    Blocked b;
    in >> b.woke >> b.us;
    with_target(1, ret == 0 ? nullptr : post);
    return b;
  }
  // tcp: the blocked target wakes for it, well before its 3 s bound; shm: nothing wakes it.
  void expect_woken(const Blocked& b) {
    if (tcp()) {
      EXPECT_EQ(b.woke, "fabric");
      EXPECT_LT(b.us, 2000000);
    } else {
      EXPECT_EQ(b.woke, "timeout");
      EXPECT_GE(b.us, 2900000);
    }
  }

  std::unique_ptr<testing::Child> peer_;  // support/child.h: its end is checked
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::Endpoint> ep_;
  std::unique_ptr<fabric::RegisteredBuffer> mem_;
  fabric::PeerAddr target_ = fabric::kNoPeer;
  fabric::RemoteRegion region_;
  uint64_t completed_ = 0;
};

// A new peer's first operation (tcp: a connection request to rxm's listener).
TEST_P(Wakeups, FirstContact) {
  expect_woken(block_during([&] { return write(0, 8); }));
}

TEST_P(Wakeups, Send) {
  warm_up();
  expect_woken(block_during([&] { return ep_->send(mem_->local(0, 32), target_, nullptr); }));
}

// HERD's write transport and server-reply's requests: a plain WRITE raises no completion at
// the target, yet its bytes wake a tcp target.
TEST_P(Wakeups, PlainWrite) {
  warm_up();
  expect_woken(block_during([&] { return write(8192, 64); }));
}

// Pilaf's GETs: a READ of the target's memory (tcp: served by the target's progress).
TEST_P(Wakeups, Read) {
  warm_up();
  expect_woken(block_during([&] {
    return ep_->read(mem_->local(65536, 64), target_, region_.at(4096), region_.key, nullptr);
  }));
}

TEST_P(Wakeups, WriteWithImmediate) {
  warm_up();
  expect_woken(block_during([&] {
    return ep_->write_imm(mem_->local(0, 64), 5, target_, region_.at(12288), region_.key, nullptr);
  }));
}

// What the target's counter of inbound one-sided operations sees: shm counts every READ and
// WRITE (each leaves a notice its progress takes); tcp;ofi_rxm takes the counter but counts
// neither (rxm does not advertise FI_RMA_EVENT).
TEST_P(Wakeups, RemoteOperationCounter) {
  warm_up();
  peer_->proc().write_line("REMOTE");
  std::string before = expect("REMOTE ");
  with_target(2, [&, n = 0]() mutable {
    long r = n == 0 ? write(8192, 64)
                    : ep_->read(mem_->local(65536, 64), target_, region_.at(4096), region_.key,
                                nullptr);
    if (r == 0) ++n;
    return n == 2 ? 0L : fabric::kAgain;
  });
  peer_->proc().write_line("REMOTE");
  std::string after = expect("REMOTE ");
  ASSERT_NE(before, "none");
  ASSERT_NE(after, "none");
  EXPECT_EQ(std::stoull(after) - std::stoull(before), tcp() ? 0u : 2u);
}

INSTANTIATE_TEST_SUITE_P(Providers, Wakeups, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
