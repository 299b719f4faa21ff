// Bad input against a real fabkv-server process, on shm and tcp: garbage, torn and impossible
// requests in slots, oversized values, wrong handshakes, a client killed mid-window, the
// server stopped. Each gets a clear error or a counted drop, and the server keeps serving.
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "raw_client.h"

namespace fabkv::testing {
namespace {

using rpc::OpCode;
using rpc::WireStatus;

class HerdFaults : public ::testing::TestWithParam<std::string> {
 protected:
  // The write transport: these tests write garbage into request slots (auto takes send on shm
  // and tcp).
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(GetParam(),
                                              std::vector<std::string>{"--transport", "write"});
  }
  std::unique_ptr<ServerProcess> server_;

  // A PUT then a GET through raw slots, checking the value comes back.
  void put_get_ok(RawClient& c, uint32_t first_seq, const std::string& key) {
    char req[1024];
    uint32_t w = c.worker_of(key);
    size_t n = c.build(first_seq, OpCode::kPut, key, "value-of-" + key, req);
    c.write_slot(w, first_seq - 1, req, n);
    auto r = c.response();
    ASSERT_TRUE(r.has_value()) << "no response to a well-formed PUT";
    ASSERT_EQ(r->h.seq, first_seq);
    ASSERT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kOk));
    n = c.build(first_seq + 1, OpCode::kGet, key, "", req);
    c.write_slot(w, first_seq, req, n);
    r = c.response();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kOk));
    EXPECT_EQ(r->value, "value-of-" + key);
  }

  static uint64_t worker_stat(const nlohmann::json& s, const char* name) {
    uint64_t n = 0;
    for (const auto& w : s.at("workers")) n += w.at(name).get<uint64_t>();
    return n;
  }
};

TEST_P(HerdFaults, WellFormedRequestsWork) {
  RawClient c(GetParam(), server_->address());
  put_get_ok(c, 1, "alpha");
}

TEST_P(HerdFaults, GarbageInASlotIsCountedAnsweredAndOthersKeepWorking) {
  RawClient bad(GetParam(), server_->address());
  RawClient good(GetParam(), server_->address());
  std::mt19937_64 rng(42);
  char junk[1024];
  for (auto& b : junk) b = static_cast<char>(rng());
  rpc::store<uint32_t>(junk, 0xdeadbeef);  // a sequence number the server does not expect
  bad.write_slot(0, 0, junk, sizeof(junk));
  // The owner is told its request 1 failed once the garbage has sat there long enough.
  auto r = bad.response(5000);
  ASSERT_TRUE(r.has_value()) << "garbage was neither answered nor dropped visibly";
  EXPECT_EQ(r->h.seq, 1u);
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kMalformed));
  EXPECT_GE(worker_stat(good.stats(), "garbage_slots"), 1u);
  put_get_ok(good, 1, "still-served");
  put_get_ok(bad, 2, "bad-client-recovers");  // the bad client's next requests still work
}

TEST_P(HerdFaults, ImpossibleLengthsAreMalformedAtOnce) {
  RawClient c(GetParam(), server_->address());
  char req[1024] = {};
  rpc::RequestHeader h{};
  h.seq = 1;
  h.client = static_cast<uint16_t>(c.client);
  h.epoch = static_cast<uint16_t>(c.epoch);
  h.op = static_cast<uint8_t>(OpCode::kPut);
  h.key_len = 60000;  // cannot fit a slot
  h.value_len = 4000000;
  rpc::store(req, h);
  c.write_slot(0, 0, req, sizeof(req));
  auto r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kMalformed));
  put_get_ok(c, 2, "after-impossible");
}

TEST_P(HerdFaults, ChecksumMismatchIsNeverExecuted) {
  RawClient c(GetParam(), server_->address());
  char req[1024];
  size_t n = c.build(1, OpCode::kPut, "torn", "xxxxxxxx", req);
  req[sizeof(rpc::RequestHeader) + 5] ^= 0x40;  // corrupt the value after the checksum
  c.write_slot(0, 0, req, n);
  auto r = c.response(5000);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kMalformed));
  // And the key was not written.
  n = c.build(2, OpCode::kGet, "torn", "", req);
  c.write_slot(c.worker_of("torn"), 1, req, n);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kNotFound));
}

TEST_P(HerdFaults, OversizedKeyOrValueIsTooLargeAndNothingIsWritten) {
  RawClient c(GetParam(), server_->address());
  // An indirect PUT that claims a value over the server's limit: refused without a READ.
  char req[256] = {};
  rpc::RequestHeader h{};
  h.seq = 1;
  h.client = static_cast<uint16_t>(c.client);
  h.epoch = static_cast<uint16_t>(c.epoch);
  h.op = static_cast<uint8_t>(OpCode::kPut);
  h.flags = rpc::kFlagIndirect;
  h.key_len = 3;
  h.value_len = c.layout.at("max_value").get<uint32_t>() + 1;
  rpc::IndirectBody ib{0, 0, uint64_t{h.key_len} + h.value_len};
  char* body = req + sizeof(h);
  rpc::store(body, ib);
  h.check = rpc::request_check(h, body, sizeof(ib));
  rpc::store(req, h);
  rpc::store(req + rpc::trailer_offset(sizeof(ib)), rpc::RequestTrailer{1});
  c.write_slot(c.worker_of("big"), 0, req, rpc::request_bytes(sizeof(ib)));
  auto r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kTooLarge));
  // A 251-byte key inline.
  std::string key(251, 'k');
  char big[1024];
  size_t n = c.build(2, OpCode::kPut, key, "v", big);
  c.write_slot(c.worker_of(key), 1, big, n);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kTooLarge));
  EXPECT_EQ(worker_stat(c.stats(), "puts"), 2u);  // seen, both refused
  uint64_t items = 0;
  const nlohmann::json st = c.stats();  // named: a range-for over a temporary's member dangles
  for (const auto& w : st.at("workers")) items += w.at("engine").at("puts").get<uint64_t>();
  EXPECT_EQ(items, 0u);
}

TEST_P(HerdFaults, WrongHandshakesGetClearErrors) {
  auto expect_reject = [&](const std::string& service, const std::string& payload,
                           const std::string& needle) {
    control::Hello h;
    h.service = service;
    h.payload.assign(payload.begin(), payload.end());
    try {
      control::ControlClient::connect(server_->address(), h, 3000);
      ADD_FAILURE() << "accepted " << service << " " << payload;
    } catch (const control::ControlError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_reject("memcached", "{}", "not 'memcached'");
  expect_reject("fabkv", R"({"protocol":"pilaf"})", "pilaf");
  expect_reject("fabkv", R"({"protocol":"herd","transport":"carrier-pigeon"})", "carrier-pigeon");
  expect_reject("fabkv", "not json", "JSON");
  // The server still admits a proper client.
  RawClient c(GetParam(), server_->address());
  put_get_ok(c, 1, "after-bad-handshakes");
}

TEST_P(HerdFaults, ServerStopsCleanlyOnSigterm) {
  RawClient c(GetParam(), server_->address());
  put_get_ok(c, 1, "k");
  EXPECT_EQ(server_->terminate(), 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, HerdFaults, ::testing::Values("shm", "tcp"));

// The SEND transport: garbage messages are dropped and counted, and enough of them to use up
// every receive buffer (each is reposted even when its messages produced no work) leave the
// worker serving.
class HerdSendFaults : public ::testing::TestWithParam<std::string> {};

TEST_P(HerdSendFaults, GarbageMessagesAreDroppedAndReceiveBuffersRecycled) {
  ServerProcess server(GetParam(), {"--transport", "send"});
  RawClient c(GetParam(), server.address());
  ASSERT_EQ(c.layout.at("transport"), "send");
  char junk[1024];
  std::mt19937_64 rng(7);
  for (auto& b : junk) b = static_cast<char>(rng());
  rpc::store<uint16_t>(junk + 4, 999);  // a client index that does not exist
  c.send_raw(0, junk, 10);              // shorter than a header
  const int kMessages = 9000;           // > the worker's two 4 MiB receive buffers
  for (int i = 0; i < kMessages; ++i) c.send_raw(0, junk, sizeof(junk));
  // A well-formed request still gets through.
  char req[256];
  size_t n = c.build(1, OpCode::kPut, "after-junk", "ok", req);
  c.send_raw(c.worker_of("after-junk"), req, n);
  auto r = c.response(20000);
  ASSERT_TRUE(r.has_value()) << "the worker stopped taking messages: "
                             << c.stats()["workers"][0].dump();
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kOk));
  // The request may have gone to another worker than the junk: worker 0 can still be working
  // through its messages. Wait (bounded) until every message is counted.
  uint64_t unknown = 0, malformed = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    unknown = malformed = 0;
    const nlohmann::json st = c.stats();
    for (const auto& w : st.at("workers")) {
      unknown += w.at("unknown_client").get<uint64_t>();
      malformed += w.at("malformed").get<uint64_t>();
    }
    if (unknown >= kMessages && malformed >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < give_up);
  EXPECT_EQ(unknown, static_cast<uint64_t>(kMessages));
  EXPECT_EQ(malformed, 1u);
}

INSTANTIATE_TEST_SUITE_P(Providers, HerdSendFaults, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
