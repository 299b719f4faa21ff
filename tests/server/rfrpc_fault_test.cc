// Bad input into rfrpc's regions against a real fabkv-server process, on shm and tcp: garbage,
// torn and impossibly long requests in the request slots, a garbage mode flag. Each is rejected
// (a kMalformed result in the sender's result slot, never executed) and counted, and the worker
// serves on, also the sender. Results are fetched as rfrpc clients fetch them: by READ of the
// worker's response region, parsed by rfrpc::read_result (src/proto/rfrpc/wire.h).
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "proto/rfrpc/wire.h"
#include "raw_client.h"

namespace fabkv::testing {
namespace {

using rpc::OpCode;
using rpc::WireStatus;

class RfrpcFaults : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        GetParam(), std::vector<std::string>{"--protocols", "rfrpc", "--rfrpc-mode", "fetch"});
  }

 public:
  // The result of request `seq` of client c, READ from worker w's response region until whole
  // (5 s at most).
  static std::optional<std::string> fetch(RawClient& c, uint32_t w, uint32_t seq) {
    const fabric::RemoteRegion r = c.region("rfrpc.results." + std::to_string(w));
    const size_t max_value = c.layout.at("max_value").get<size_t>();
    const size_t n = rfrpc::result_slot_bytes(max_value);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::string got, copy;
    while (std::chrono::steady_clock::now() < give_up) {
      if (c.read(w, r.at(rfrpc::result_offset(c.client, c.window, max_value, seq)), r.key,
                 std::min<size_t>(n, 4096), &got) != 0)
        return std::nullopt;
      size_t total = 0;
      if (rfrpc::read_result(got.data(), got.size(), seq, max_value, &copy, &total) ==
          rfrpc::ResultRead::kWhole)
        return copy;
    }
    return std::nullopt;
  }
  static rpc::ResponseHeader header(const std::string& result) {
    return rpc::load<rpc::ResponseHeader>(result.data() + sizeof(rfrpc::ResultHeader));
  }
  static uint64_t worker_stat(const nlohmann::json& s, const char* name) {
    uint64_t n = 0;
    for (const auto& w : s.at("workers"))
      n += w.at("protocols").at("rfrpc").at(name).get<uint64_t>();
    return n;
  }
  // A PUT then a GET through raw slots, the results fetched by READ.
  void put_get_ok(RawClient& c, uint32_t first_seq, const std::string& key) {
    char req[1024];
    ASSERT_EQ(c.worker_of(key), 0u);  // one worker
    size_t n = c.build(first_seq, OpCode::kPut, key, "value-of-" + key, req);
    c.write_slot(0, first_seq - 1, req, n);
    auto r = fetch(c, 0, first_seq);
    ASSERT_TRUE(r.has_value()) << "no result for a well-formed PUT";
    ASSERT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kOk));
    n = c.build(first_seq + 1, OpCode::kGet, key, "", req);
    c.write_slot(0, first_seq, req, n);
    r = fetch(c, 0, first_seq + 1);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kOk));
    EXPECT_EQ(r->substr(sizeof(rfrpc::ResultHeader) + sizeof(rpc::ResponseHeader)),
              "value-of-" + key);
  }
  std::unique_ptr<ServerProcess> server_;
};

std::unique_ptr<RawClient> raw(const std::string& provider, const std::string& server) {
  // The Hello must announce a ring: an empty one (a fetch-mode worker never WRITEs into it).
  fabric::RemoteRegion none{};
  return std::make_unique<RawClient>(provider, server, "write", "rfrpc",
                                     nlohmann::json{{"ring", proto::region_to_json(none)}});
}

TEST_P(RfrpcFaults, WellFormedRequestsWork) {
  auto c = raw(GetParam(), server_->address());
  put_get_ok(*c, 1, "alpha");
}

TEST_P(RfrpcFaults, GarbageInARequestSlotIsCountedAnsweredAndOthersKeepWorking) {
  auto bad = raw(GetParam(), server_->address());
  auto good = raw(GetParam(), server_->address());
  std::mt19937_64 rng(42);
  char junk[1024];
  for (auto& b : junk) b = static_cast<char>(rng());
  rpc::store<uint32_t>(junk, 0xdeadbeef);
  bad->write_slot(0, 0, junk, sizeof(junk));
  auto r = fetch(*bad, 0, 1);
  ASSERT_TRUE(r.has_value()) << "garbage was neither answered nor dropped visibly";
  EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kMalformed));
  EXPECT_GE(worker_stat(good->stats(), "garbage_slots"), 1u);
  put_get_ok(*good, 1, "still-served");
  put_get_ok(*bad, 2, "bad-client-recovers");
}

TEST_P(RfrpcFaults, TornRequestIsNeverExecuted) {
  auto c = raw(GetParam(), server_->address());
  char req[1024];
  size_t n = c->build(1, OpCode::kPut, "torn", "xxxxxxxx", req);
  req[sizeof(rpc::RequestHeader) + 5] ^= 0x40;  // a body byte after the check was computed
  c->write_slot(0, 0, req, n);
  auto r = fetch(*c, 0, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kMalformed));
  n = c->build(2, OpCode::kGet, "torn", "", req);
  c->write_slot(0, 1, req, n);
  r = fetch(*c, 0, 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kNotFound));
  // A request whose tail status (trailer seq) never arrives is the same: torn, counted.
  n = c->build(3, OpCode::kPut, "tailless", "v", req);
  rpc::store(req + n - sizeof(rpc::RequestTrailer), rpc::RequestTrailer{77});
  c->write_slot(0, 2, req, n);
  r = fetch(*c, 0, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kMalformed));
  EXPECT_GE(worker_stat(c->stats(), "malformed"), 2u);
}

TEST_P(RfrpcFaults, ImpossibleSizesAreMalformedAtOnce) {
  auto c = raw(GetParam(), server_->address());
  char req[1024] = {};
  rpc::RequestHeader h{};
  h.seq = 1;
  h.client = static_cast<uint16_t>(c->client);
  h.epoch = static_cast<uint16_t>(c->epoch);
  h.op = static_cast<uint8_t>(OpCode::kPut);
  h.key_len = 60000;
  h.value_len = 4000000;
  rpc::store(req, h);
  c->write_slot(0, 0, req, sizeof(req));
  auto r = fetch(*c, 0, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(header(*r).status, static_cast<uint8_t>(WireStatus::kMalformed));
  put_get_ok(*c, 2, "after-impossible");
}

// The mode flag is the client's to write: a value that is no mode is counted and read as
// fetch mode, and the client is still answered (by READ).
TEST_P(RfrpcFaults, GarbageModeFlagIsCountedAndServedAsFetch) {
  auto c = raw(GetParam(), server_->address());
  const fabric::RemoteRegion modes = c->region("rfrpc.modes.0");
  char flag[8];
  std::memset(flag, 0x7f, sizeof(flag));
  c->write_at(0, modes, size_t{c->client} * sizeof(rfrpc::ModeFlag), flag, sizeof(flag));
  put_get_ok(*c, 1, "flagged");
  EXPECT_GE(worker_stat(c->stats(), "bad_mode_flags"), 2u);
  EXPECT_EQ(worker_stat(c->stats(), "reply_writes"), 0u);
}

// Garbage into a batch slot (RF-RPC sec. 4): the worker answers the batch with no entries
// after the stall bound (its sender fails them), counts it, and serves on.
TEST(RfrpcBatchFaults, GarbageBatchIsCountedAnsweredEmptyAndOthersKeepWorking) {
  for (const std::string provider : {"shm", "tcp"}) {
    ServerProcess server(provider, {"--protocols", "rfrpc", "--rfrpc-batch-entries", "8"});
    auto c = raw(provider, server.address());
    const fabric::RemoteRegion batches = c->region("rfrpc.batches.0");
    const size_t bslot = rfrpc::batch_slot_bytes(2048);
    std::mt19937_64 rng(5);
    std::vector<char> junk(bslot);
    for (auto& b : junk) b = static_cast<char>(rng());
    rfrpc::BatchHeader h{};
    h.status_size = 64 | rfrpc::kStatusBit;  // plausible, but the check and tail are wrong
    h.seq = 1;
    h.entries = 3;
    std::memcpy(junk.data(), &h, sizeof(h));
    c->write_at(0, batches, rfrpc::batch_offset(c->client, c->window, 0, bslot), junk.data(),
                junk.size());
    // The answer: a result batch with no entries, READ from the results region.
    const fabric::RemoteRegion results = c->region("rfrpc.bresults.0");
    const size_t rslot = rfrpc::batch_slot_bytes(rfrpc::result_batch_payload(2048));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::string got, copy;
    bool answered = false;
    while (!answered && std::chrono::steady_clock::now() < give_up) {
      ASSERT_EQ(c->read(0, results.at(rfrpc::batch_offset(c->client, c->window, 0, rslot)),
                        results.key, 256, &got),
                0);
      size_t total = 0;
      answered = rfrpc::read_batch(got.data(), got.size(), 1, rslot, false, &copy, &total) ==
                 rfrpc::BatchRead::kWhole;
    }
    ASSERT_TRUE(answered) << provider;
    rfrpc::BatchHeader r;
    std::memcpy(&r, copy.data(), sizeof(r));
    EXPECT_EQ(r.entries, 0u);
    uint64_t bad = 0;
    const nlohmann::json st = c->stats();
    for (const auto& w : st.at("workers"))
      bad += w.at("protocols").at("rfrpc").at("bad_batches").get<uint64_t>();
    EXPECT_GE(bad, 1u) << provider << " " << st.at("workers").at(0).at("protocols").dump();
    // Single requests are still served, also for the sender.
    char req[1024];
    size_t n = c->build(1, OpCode::kPut, "after", "batch", req);
    c->write_slot(0, 0, req, n);
    auto res = RfrpcFaults::fetch(*c, 0, 1);
    ASSERT_TRUE(res.has_value()) << provider;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, RfrpcFaults, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
