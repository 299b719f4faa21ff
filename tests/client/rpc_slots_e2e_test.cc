// The 32-bit request sequence numbers of the RPC protocols wrap after about 2^32 requests from
// one client to one worker (proto/rpc/wire.h, "Sequence numbers"); both sides must still pick
// the same request slot, answer buffer, ring slot and result slot afterwards. Real client and
// server processes, on shm and tcp, with every RPC-family protocol: herd over both transports,
// server-reply, rfrpc (single calls and batches), hydradb and seq-rpc (both transports). The
// client starts its sequence a few requests below the wrap (testing::ClientHooks::first_seq, TEST
// ONLY), runs a few hundred checked requests with a window in flight, and the test asserts that
// every worker's sequence did wrap (the client's seq_wraps counter) and that every request was
// answered correctly. And a request the worker finds as garbage in its slot is answered
// kMalformed at once (GarbageSlotE2E).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/testing.h"
#include "support/ready_process.h"

#ifndef FABKV_SERVER_BIN
#error "needs FABKV_SERVER_BIN"
#endif

namespace fabkv::testing {
namespace {

// The window the servers run with, and a first sequence number 13 below the top of 32 bits:
// with W = 4 the sequence wraps after 10 requests to a worker (wire.h: the cycle ends at the
// largest multiple of W).
constexpr uint32_t kWindow = 4;
constexpr uint32_t kFirstSeq = UINT32_MAX - 12;
constexpr uint32_t kWorkers = 2;

struct Case {
  std::string name;
  std::string protocol;
  std::vector<std::string> server_args;
  std::string transport;  // the client's ("" = the protocol's)
  const char* wrap_counter = "seq_wraps";
  bool sequencer = false;
};

struct Param {
  std::string provider;
  Case c;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.provider << "/" << p.c.name; }

std::vector<Param> params() {
  const std::vector<Case> cases = {
      {"herd_write", "herd", {"--transport", "write"}, "write"},
      {"herd_send", "herd", {"--transport", "send"}, "send"},
      {"server_reply", "server-reply", {}, ""},
      {"rfrpc_fetch", "rfrpc", {"--rfrpc-mode", "fetch"}, ""},
      {"rfrpc_reply", "rfrpc", {"--rfrpc-mode", "reply"}, ""},
      {"rfrpc_batches", "rfrpc", {"--rfrpc-batch-entries", "4"}, "", "batch_seq_wraps"},
      {"hydradb", "hydradb", {}, ""},
      {"seq_rpc_write", "seq-rpc", {"--transport", "write"}, "write", "seq_wraps", true},
      {"seq_rpc_send", "seq-rpc", {"--transport", "send"}, "send", "seq_wraps", true},
  };
  std::vector<Param> out;
  for (const char* provider : {"shm", "tcp"})
    for (const Case& c : cases) out.push_back({provider, c});
  return out;
}
std::string name(const ::testing::TestParamInfo<Param>& p) {
  return p.param.provider + "_" + p.param.c.name;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fabkv-wrap-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class SeqWrapE2E : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const Param& p = GetParam();
    std::vector<std::string> a = {FABKV_SERVER_BIN,
                                  "--provider",
                                  p.provider,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--protocols",
                                  p.c.protocol,
                                  "--cores",
                                  "-1",
                                  "--log",
                                  "warn",
                                  "--workers",
                                  std::to_string(kWorkers),
                                  "--window",
                                  std::to_string(kWindow)};
    if (p.c.sequencer) a.insert(a.end(), {"--data-dir", dir_.path()});
    else a.insert(a.end(), {"--memory", "64M"});
    a.insert(a.end(), p.c.server_args.begin(), p.c.server_args.end());
    server_ = std::make_unique<ReadyProcess>(a, ReadyProcess::Stop::kSigterm);
    ClientOptions o;
    o.server = server_->address();
    o.provider = p.provider;
    o.protocol = p.c.protocol;
    o.transport = p.c.transport;
    o.timeout_ms = 5000;  // a request lost at the wrap ends the test in seconds, not minutes
    testing::ClientHooks hooks;
    hooks.first_seq = kFirstSeq;
    client_ = testing::connect(o, hooks);
  }
  uint64_t wraps() const {
    return client_->protocol_counters().value(GetParam().c.wrap_counter, uint64_t{0});
  }

  TempDir dir_;
  std::unique_ptr<ReadyProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(SeqWrapE2E, EveryRequestIsAnsweredAcrossTheWrap) {
  if (GetParam().c.sequencer) {
    // All of a sequencer client's requests go to one worker, and its values increase.
    uint64_t last = 0;
    for (int i = 0; i < 30; ++i) {
      uint64_t v = 0;
      ASSERT_EQ(client_->next(&v), Status::kOk) << "request " << i;
      ASSERT_GT(v, last) << "request " << i;
      last = v;
    }
    // And a window of them in flight at once. The callbacks' state outlives this function: a
    // failed assertion returns with requests in flight, which the client ends later.
    for (int round = 0; round < 5; ++round) {
      auto got = std::make_shared<std::vector<uint64_t>>();
      auto failed = std::make_shared<size_t>(0);
      for (uint32_t i = 0; i < 2 * kWindow; ++i)
        ASSERT_EQ(client_->next_async([got, failed](Status s, std::string_view, uint64_t v) {
          if (s == Status::kOk) got->push_back(v);
          else ++*failed;
        }),
                  Status::kOk);
      ASSERT_EQ(client_->flush(), Status::kOk);
      ASSERT_EQ(*failed, 0u) << "round " << round;
      ASSERT_EQ(got->size(), 2 * kWindow);
      for (uint64_t v : *got) {
        EXPECT_GT(v, last);
        last = v;
      }
    }
    EXPECT_EQ(wraps(), 1u) << "the run never crossed the wrap";
    return;
  }
  // Rounds of PUTs then GETs of 20 keys (both workers), each round with every request in
  // flight at once (submit waits for a free slot of the key's worker), every answer checked.
  // The callbacks' count outlives this function (a failed assertion returns with requests in
  // flight, which the client ends later).
  std::map<std::string, std::string> model;
  auto bad = std::make_shared<size_t>(0);
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 20; ++k) {
      const std::string key = "wrap-" + std::to_string(k);
      const std::string value = key + "-round-" + std::to_string(round) + std::string(k * 7, 'v');
      ASSERT_EQ(client_->put_async(key, value,
                                   [bad](Status s, std::string_view, uint64_t) {
                                     if (s != Status::kOk) ++*bad;
                                   }),
                Status::kOk);
      model[key] = value;
    }
    ASSERT_EQ(client_->flush(), Status::kOk);
    ASSERT_EQ(*bad, 0u) << "PUTs of round " << round << " failed";
    for (const auto& [key, value] : model) {
      ASSERT_EQ(client_->get_async(key,
                                   [bad, want = value](Status s, std::string_view v, uint64_t) {
                                     if (s != Status::kOk || v != want) ++*bad;
                                   }),
                Status::kOk);
    }
    ASSERT_EQ(client_->flush(), Status::kOk);
    ASSERT_EQ(*bad, 0u) << "GETs of round " << round << " failed or returned another value";
  }
  // Blocking calls after the wrap, too.
  std::string v;
  ASSERT_EQ(client_->get("wrap-3", &v), Status::kOk);
  EXPECT_EQ(v, model["wrap-3"]);
  EXPECT_EQ(client_->del("wrap-3"), Status::kOk);
  EXPECT_EQ(client_->get("wrap-3", &v), Status::kNotFound);
  // Every worker's sequence wrapped (batches: the entries' numbers of both workers).
  EXPECT_GE(wraps(), uint64_t{kWorkers}) << client_->protocol_counters().dump();
}

INSTANTIATE_TEST_SUITE_P(All, SeqWrapE2E, ::testing::ValuesIn(params()), name);

// A request the worker cannot read (garbage in the slot: here the client's own request with its
// check broken, testing::ClientHooks::garbage_request) is answered kMalformed once it has sat in
// the slot for the worker's stall bound (proto/rpc/server.cc, kStallPolls: milliseconds). The
// answer cannot name the request's op (garbage has none), and the client must still take it:
// the caller learns at once, not after its timeout, and the next requests go on.
class GarbageSlotE2E : public SeqWrapE2E {};

TEST_P(GarbageSlotE2E, AGarbageRequestIsAnsweredMalformedAtOnce) {
  ClientOptions o;
  o.server = server_->address();
  o.provider = GetParam().provider;
  o.protocol = GetParam().c.protocol;
  o.transport = GetParam().c.transport;
  o.timeout_ms = 10000;
  testing::ClientHooks hooks;
  hooks.garbage_request = 3;
  auto c = testing::connect(o, hooks);
  ASSERT_EQ(c->put("g-1", "one"), Status::kOk);
  ASSERT_EQ(c->put("g-2", "two"), Status::kOk);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c->put("g-3", "three"), Status::kMalformed);  // the third request: garbage
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(ms, o.timeout_ms / 2) << "the error came by the timeout, not by the answer";
  std::string v;
  EXPECT_EQ(c->get("g-3", &v), Status::kNotFound);  // never executed
  ASSERT_EQ(c->put("g-3", "three"), Status::kOk);
  ASSERT_EQ(c->get("g-3", &v), Status::kOk);
  EXPECT_EQ(v, "three");
  ASSERT_EQ(c->get("g-1", &v), Status::kOk);
  EXPECT_EQ(v, "one");
}

std::vector<Param> garbage_params() {
  std::vector<Param> out;
  for (const Param& p : params())
    if (!p.c.sequencer && p.c.name != "rfrpc_batches") out.push_back(p);
  return out;
}
INSTANTIATE_TEST_SUITE_P(All, GarbageSlotE2E, ::testing::ValuesIn(garbage_params()), name);

}  // namespace
}  // namespace fabkv::testing
