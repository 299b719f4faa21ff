// Access rights and faults between real processes: what each provider enforces, pinned down
// per provider, and that a dead peer never hangs the survivor.
#include <chrono>
#include <cstring>

#include <gtest/gtest.h>

#include "fabric/error.h"
#include "peer.h"

namespace fabkv::testing {
namespace {

using fabric::Completion;

enum class Outcome { kPostFailed, kErrorCompletion, kSucceeded, kTimedOut };
const char* name(Outcome o) {
  switch (o) {
    case Outcome::kPostFailed: return "post failed";
    case Outcome::kErrorCompletion: return "error completion";
    case Outcome::kSucceeded: return "succeeded";
    case Outcome::kTimedOut: return "timed out";
  }
  return "?";
}

template <class Post>
Outcome attempt(Connection& c, Post&& post, std::string* text, int ms = 3000) {
  std::vector<Completion> got;
  long ret = c.post(post, &got);
  if (ret != 0) {
    *text = fabric::error_text(ret);
    return Outcome::kPostFailed;
  }
  if (!c.wait(1, &got, ms)) return Outcome::kTimedOut;
  if (got[0].error != 0) {
    *text = got[0].error_text;
    return Outcome::kErrorCompletion;
  }
  return Outcome::kSucceeded;
}

bool is_error(Outcome o) { return o == Outcome::kPostFailed || o == Outcome::kErrorCompletion; }

class FabricAccess : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<PeerServer>(GetParam());
    conn_ = std::make_unique<Connection>(GetParam(), *server_);
    // Warm the connection so that failures below are about access, not connection set-up.
    std::string text;
    ASSERT_EQ(attempt(
                  *conn_,
                  [&] {
                    return conn_->ep->read(conn_->local->local(0, 8), conn_->peer,
                                           conn_->readonly.at(0), conn_->readonly.key, nullptr);
                  },
                  &text),
              Outcome::kSucceeded)
        << text;
  }
  bool is_shm() const { return GetParam() == "shm"; }

  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<Connection> conn_;
};

// What libfabric enforces here (1.17 and 2.1 alike), measured and pinned down (docs/fabric.md,
// "Security"):
// - tcp;ofi_rxm checks the key and the bounds of every remote access at the target, but not
//   the access rights: a region registered write-only can be READ, a read-only one written.
// - shm's one-sided path copies with process_vm_readv/writev (cross-memory attach) straight
//   from the target's address space and checks neither key, rights nor bounds: any process on
//   the host that can name an address can read and write it.
// A test fails the day a provider starts enforcing more, so the docs get updated with it.

TEST_P(FabricAccess, ReadOfWriteOnlyRegion) {
  auto& c = *conn_;
  std::string text;
  Outcome o = attempt(
      c,
      [&] {
        return c.ep->read(c.local->local(0, 64), c.peer, c.writeonly.at(0), c.writeonly.key,
                          nullptr);
      },
      &text);
  EXPECT_EQ(o, Outcome::kSucceeded)
      << name(o) << ": does " << GetParam() << " enforce remote rights now? " << text;
}

TEST_P(FabricAccess, WriteToReadOnlyRegion) {
  auto& c = *conn_;
  std::string text;
  Outcome o = attempt(
      c,
      [&] {
        return c.ep->write(c.local->local(0, 64), c.peer, c.readonly.at(0), c.readonly.key,
                           nullptr);
      },
      &text);
  EXPECT_EQ(o, Outcome::kSucceeded)
      << name(o) << ": does " << GetParam() << " enforce remote rights now? " << text;
}

TEST_P(FabricAccess, ReadPastRegionEnd) {
  auto& c = *conn_;
  std::string text;
  Outcome o = attempt(
      c,
      [&] {
        return c.ep->read(c.local->local(0, 4096), c.peer, c.readonly.at(c.readonly.length - 64),
                          c.readonly.key, nullptr);
      },
      &text);
  // shm: the bytes past the end are whatever is mapped there, or EFAULT if nothing is.
  if (is_shm()) EXPECT_TRUE(o == Outcome::kSucceeded || is_error(o)) << name(o);
  else EXPECT_TRUE(is_error(o)) << name(o);
}

TEST_P(FabricAccess, WrongKey) {
  auto& c = *conn_;
  std::string text;
  Outcome o = attempt(
      c,
      [&] {
        return c.ep->read(c.local->local(0, 64), c.peer, c.readonly.at(0), c.readonly.key + 0x5151,
                          nullptr);
      },
      &text);
  if (is_shm()) EXPECT_EQ(o, Outcome::kSucceeded) << name(o) << " " << text;
  else EXPECT_TRUE(is_error(o)) << name(o);
}

TEST_P(FabricAccess, DeadPeerGivesAnErrorWithinTheDeadlineNotAHang) {
  auto& c = *conn_;
  server_->kill();
  auto start = std::chrono::steady_clock::now();
  // Keep issuing READs until one fails or times out; none may block past its deadline.
  bool failed = false;
  for (int i = 0; i < 200 && !failed; ++i) {
    std::string text;
    Outcome o = attempt(
        c,
        [&] {
          return c.ep->read(c.local->local(0, 64), c.peer, c.readonly.at(0), c.readonly.key,
                            nullptr);
        },
        &text, 1000);
    failed = o != Outcome::kSucceeded;
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(failed) << "READs from a killed peer kept succeeding";
  EXPECT_LT(took, std::chrono::seconds(30));
  // The control channel notices too.
  Deadline d = Deadline::after_ms(5000);
  while (c.ctl->alive() && !d.expired()) {
    try {
      c.ctl->request(perf::json_bytes({{"op", "counters"}}), 500);
    } catch (const std::exception&) {
    }
  }
  EXPECT_FALSE(c.ctl->alive());
}

// Inlined unsignaled WRITEs (the fi_inject_write path: server-reply's answers, rfrpc's mode
// flags) still queued when the peer dies. libfabric 2.1's tcp provider reports such a WRITE's
// failure with a NULL context, and ofi_rxm dereferences it (rxm_handle_comp_error): the
// survivor crashed in fi_cq_read (docs/fabric.md, "What else changed"). Each round posts a
// burst into a dead peer's connection and reaps; the process must live and see the failure.
TEST(FabricDeadPeer, InjectedWritesQueuedToADeadPeerNeverCrashTheSurvivor) {
  for (const char* provider : {"shm", "tcp"}) {
    for (int round = 0; round < 2; ++round) {
      PeerServer server(provider);
      fabric::EndpointOptions eo;
      eo.selective_completion = true;
      Connection c(provider, server, {}, eo);
      fabric::PostOptions inj;
      inj.signaled = false;
      inj.inlined = true;
      std::vector<Completion> got;
      ASSERT_EQ(c.post(
                    [&] {
                      return c.ep->write(c.local->local(0, 8), c.peer, c.target.at(c.area),
                                         c.target.key, nullptr, inj);
                    },
                    &got),
                0);
      server.kill();
      // A second of bursts: unsignaled WRITEs report nothing when they succeed, and on shm
      // (cross-memory attach into a dead process) not when they fail either.
      bool burst_failed = false;
      const Deadline d = Deadline::after_ms(1000);
      while (!d.expired()) {
        for (int i = 0; i < 64; ++i) {
          const long ret = c.ep->write(c.local->local(0, 8), c.peer, c.target.at(c.area),
                                       c.target.key, nullptr, inj);
          if (ret != 0 && ret != fabric::kAgain) burst_failed = true;
        }
        Completion cs[16];
        const size_t n = c.ep->poll(cs);
        for (size_t i = 0; i < n; ++i) burst_failed |= cs[i].error != 0;
      }
      // tcp sees the connection's reset and fails the WRITEs still queued.
      if (std::string(provider) == "tcp") {
        EXPECT_TRUE(burst_failed) << "round " << round;
      }
      // Alive, and a signaled READ now fails: refused (the queue to the dead peer stays full
      // on shm), an error completion, or none within a second. Never a success.
      const long ret = c.ep->read(c.local->local(0, 8), c.peer, c.target.at(c.area), c.target.key,
                                  nullptr);
      bool read_failed = ret != 0;
      if (ret == 0) {
        std::vector<Completion> done;
        read_failed = !c.wait(1, &done, 1000) || done[0].error != 0;
      }
      EXPECT_TRUE(read_failed) << provider << " round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricAccess, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
