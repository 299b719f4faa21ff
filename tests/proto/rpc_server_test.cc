// The shared RPC server side (proto/rpc/server.h) without a worker or a peer: requests are
// built with the client's own encoders (proto/rpc/request.h) and WRITten into the slots the
// Welcome publishes, or handed over as messages; a fake host (fake_server_host.h) records what
// the side would post. As eRPC tests its protocol: feed it hand-built requests, inspect what it
// would post.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "fake_server_host.h"
#include "proto/herd/options.h"
#include "proto/registry.h"
#include "proto/rpc/request.h"
#include "proto/rpc/server.h"
#include "proto/rpc/wire.h"

namespace fabkv::rpc {
namespace {

using proto::testing::FakeServerHost;

constexpr uint32_t kClient = 1;
constexpr uint16_t kEpoch = 7;

proto::ServerSettings settings(herd::TransportChoice transport) {
  proto::ServerSettings s;
  s.max_clients = 4;
  s.max_value = 4096;
  s.herd.transport = transport;
  return s;
}

// A herd server side on a fake host, with one client admitted.
class RpcServerTest : public ::testing::Test {
 protected:
  void start(herd::TransportChoice transport, nlohmann::json hello = nlohmann::json::object()) {
    host_ = std::make_unique<FakeServerHost>(settings(transport));
    side_ = std::make_unique<TransportServer>(*host_, proto::info(proto::Id::herd),
                                              RpcServer::Config{});
    side_->open();
    proto::WelcomeParts welcome;
    ASSERT_EQ(side_->admit(proto::info(proto::Id::herd), hello, kClient, kEpoch, &welcome), "");
    if (side_->scans_memory()) {
      // shm addresses a region by its virtual address (fabric/memory_region.h), so the
      // published descriptor is where a client's WRITE would land.
      ASSERT_TRUE(host_->fabric().virt_addr());
      ASSERT_EQ(welcome.regions.size(), 1u);
      region_ = reinterpret_cast<char*>(welcome.regions[0].addr);
    }
    side_->add_client_st(kClient, kEpoch, proto::info(proto::Id::herd), hello);
  }

  // One worker round as server/worker.cc runs it: poll the slots, then run what was collected.
  void round() {
    side_->poll_st();
    if (side_->has_work_st()) side_->flush_st();
  }

  char* slot(uint32_t seq) const {
    const proto::ServerSettings& s = host_->settings();
    return region_ +
           slot_offset(kClient, s.rpc.window, s.rpc.slot_size, seq_slot(seq, s.rpc.window));
  }

  static std::string request(uint32_t seq, OpCode op, std::string_view key,
                             std::string_view value = {}) {
    std::string out(request_bytes(key.size() + value.size()), '\0');
    RequestFields f;
    f.seq = seq;
    f.client = kClient;
    f.epoch = kEpoch;
    f.op = op;
    out.resize(encode_inline(out.data(), f, key, value));
    return out;
  }

  // The answer the side handed to the host, the oldest first.
  FakeServerHost::Reply answer() {
    EXPECT_FALSE(host_->replies.empty());
    if (host_->replies.empty()) return {};
    FakeServerHost::Reply r = std::move(host_->replies.front());
    host_->replies.pop_front();
    return r;
  }

  uint64_t stat(const char* name) const { return side_->stats().at(name).get<uint64_t>(); }

  std::unique_ptr<FakeServerHost> host_;
  std::unique_ptr<TransportServer> side_;
  char* region_ = nullptr;
};

TEST_F(RpcServerTest, AnswersRequestsWrittenIntoItsSlots) {
  start(herd::TransportChoice::kWrite);
  ASSERT_TRUE(side_->scans_memory());
  const std::string put = request(1, OpCode::kPut, "key", "value");
  std::memcpy(slot(1), put.data(), put.size());
  round();
  FakeServerHost::Reply r = answer();
  EXPECT_EQ(r.client, kClient);
  EXPECT_EQ(r.epoch, kEpoch);
  EXPECT_EQ(r.header().seq, 1u);
  EXPECT_EQ(r.header().status, static_cast<uint8_t>(WireStatus::kOk));
  EXPECT_EQ(r.header().op, static_cast<uint8_t>(OpCode::kPut));

  const std::string get = request(2, OpCode::kGet, "key");
  std::memcpy(slot(2), get.data(), get.size());
  round();
  r = answer();
  ParsedResponse parsed;
  ASSERT_TRUE(parse_response(r.bytes.data(), r.bytes.size(), &parsed));
  EXPECT_EQ(parsed.header.seq, 2u);
  EXPECT_EQ(parsed.header.client, kClient);
  EXPECT_EQ(parsed.header.epoch, kEpoch);
  EXPECT_EQ(parsed.value, "value");
  // A slot is taken once: the next round finds nothing new.
  round();
  EXPECT_TRUE(host_->replies.empty());
  EXPECT_EQ(stat("requests"), 2u);
}

TEST_F(RpcServerTest, ATornSlotWaitsUntilTheWholeRequestLanded) {
  start(herd::TransportChoice::kWrite);
  const std::string put = request(1, OpCode::kPut, "torn", std::string(300, 'x'));
  const size_t trailer = put.size() - sizeof(RequestTrailer);
  // Everything but the trailer: the header names our seq, the request is not whole yet.
  std::memcpy(slot(1), put.data(), trailer);
  for (int i = 0; i < 100; ++i) round();
  EXPECT_TRUE(host_->replies.empty());
  EXPECT_TRUE(side_->busy_st()) << "a landing request keeps an adaptive worker polling";
  std::memcpy(slot(1) + trailer, put.data() + trailer, sizeof(RequestTrailer));
  round();
  const FakeServerHost::Reply r = answer();
  EXPECT_EQ(r.header().seq, 1u);
  EXPECT_EQ(r.header().status, static_cast<uint8_t>(WireStatus::kOk));
  EXPECT_FALSE(side_->busy_st());
  EXPECT_EQ(stat("malformed"), 0u);
}

TEST_F(RpcServerTest, GarbageInASlotIsAnsweredMalformedAndCounted) {
  start(herd::TransportChoice::kWrite);
  std::mt19937 rng(26);
  char* s = slot(1);
  for (uint32_t i = 0; i < host_->settings().rpc.slot_size; ++i) s[i] = static_cast<char>(rng());
  store(s, uint32_t{12345});  // not 0, not seq 1, not the slot's previous seq: not ours
  // Given time to land first (it could be a WRITE in progress), then declared malformed.
  for (int i = 0; i < 100; ++i) round();
  EXPECT_TRUE(host_->replies.empty());
  for (int i = 0; i < 1000000 && host_->replies.empty(); ++i) round();
  const FakeServerHost::Reply r = answer();
  EXPECT_EQ(r.header().seq, 1u);
  EXPECT_EQ(r.header().status, static_cast<uint8_t>(WireStatus::kMalformed));
  EXPECT_EQ(r.header().op, kOpUnknown);
  EXPECT_EQ(stat("malformed"), 1u);
  EXPECT_EQ(stat("garbage_slots"), 1u);
  // The client is not stuck behind it: its next request is served.
  const std::string get = request(2, OpCode::kGet, "absent");
  std::memcpy(slot(2), get.data(), get.size());
  round();
  EXPECT_EQ(answer().header().status, static_cast<uint8_t>(WireStatus::kNotFound));
}

TEST_F(RpcServerTest, SequenceNumbersWrapIntoTheSameSlots) {
  const uint32_t window = rpc::Options{}.window;
  const uint32_t last = seq_cycle(window);
  // TEST ONLY (ClientOptions::first_seq): the client starts just before the wrap.
  start(herd::TransportChoice::kWrite, {{"first_seq", last - 1}});
  const uint32_t seqs[] = {last - 1, last, 1, 2};
  for (uint32_t seq : seqs) {
    const std::string put = request(seq, OpCode::kPut, "k" + std::to_string(seq), "v");
    std::memcpy(slot(seq), put.data(), put.size());
    round();
    const FakeServerHost::Reply r = answer();
    EXPECT_EQ(r.header().seq, seq);
    EXPECT_EQ(r.header().status, static_cast<uint8_t>(WireStatus::kOk)) << seq;
  }
  EXPECT_EQ(stat("malformed"), 0u);
}

TEST_F(RpcServerTest, AnIndirectBodyIsReadFromClientMemoryThenServed) {
  start(herd::TransportChoice::kWrite);
  const std::string key = "big", value(3000, 'v');  // larger than a slot: sent indirect
  IndirectBody body{};
  body.addr = 0x10000;
  body.rkey = 42;
  body.length = key.size() + value.size();
  RequestFields f;
  f.seq = 1;
  f.client = kClient;
  f.epoch = kEpoch;
  f.op = OpCode::kPut;
  std::string put(request_bytes(sizeof(IndirectBody)), '\0');
  put.resize(encode_indirect(put.data(), f, static_cast<uint16_t>(key.size()),
                             static_cast<uint32_t>(value.size()), body));
  std::memcpy(slot(1), put.data(), put.size());
  // The provider refuses the READ: the request stays in its slot for the next round.
  host_->read_result = fabric::kAgain;
  round();
  EXPECT_TRUE(host_->reads.empty());
  EXPECT_TRUE(host_->replies.empty());
  host_->read_result = 0;
  round();
  ASSERT_EQ(host_->reads.size(), 1u);
  const FakeServerHost::Read read = host_->reads.front();
  EXPECT_EQ(read.client, kClient);
  EXPECT_EQ(read.raddr, body.addr);
  EXPECT_EQ(read.rkey, body.rkey);
  ASSERT_EQ(read.dst.len, body.length);
  EXPECT_EQ(read.ctx->owner, static_cast<proto::ServerProtocol*>(side_.get()));
  // Nothing more of this client is taken while its body is on the way.
  round();
  EXPECT_EQ(host_->reads.size(), 1u);
  EXPECT_TRUE(host_->replies.empty());
  // The READ lands and completes: the request goes through the engine in the next round.
  std::memcpy(read.dst.addr, key.data(), key.size());
  std::memcpy(static_cast<char*>(read.dst.addr) + key.size(), value.data(), value.size());
  fabric::Completion done{};
  done.context = read.ctx;
  done.verb = fabric::Verb::kRead;
  side_->on_completion_st(done);
  round();
  EXPECT_EQ(answer().header().status, static_cast<uint8_t>(WireStatus::kOk));
  EXPECT_EQ(stat("indirect"), 1u);
  const std::string get = request(2, OpCode::kGet, key);
  std::memcpy(slot(2), get.data(), get.size());
  round();
  const FakeServerHost::Reply r = answer();
  ParsedResponse parsed;
  ASSERT_TRUE(parse_response(r.bytes.data(), r.bytes.size(), &parsed));
  EXPECT_EQ(parsed.value, value);
}

TEST_F(RpcServerTest, MessagesAreCheckedBeforeTheyAreServed) {
  start(herd::TransportChoice::kSend);
  ASSERT_TRUE(side_->wants_messages());
  ASSERT_FALSE(side_->scans_memory());
  // Shorter than a header: nobody to answer, counted.
  const std::string put = request(1, OpCode::kPut, "m", "message");
  side_->on_message_st(kClient, put.data(), sizeof(RequestHeader) - 1);
  EXPECT_TRUE(host_->replies.empty());
  EXPECT_EQ(stat("malformed"), 1u);
  // A body that does not match its check: answered kMalformed.
  std::string bad = put;
  bad[sizeof(RequestHeader)] ^= 1;
  side_->on_message_st(kClient, bad.data(), bad.size());
  ASSERT_FALSE(side_->has_work_st());
  EXPECT_EQ(answer().header().status, static_cast<uint8_t>(WireStatus::kMalformed));
  EXPECT_EQ(stat("malformed"), 2u);
  // The request itself, then a GET of it, in one round (one batch through the engine).
  const std::string get = request(2, OpCode::kGet, "m");
  side_->on_message_st(kClient, put.data(), put.size());
  side_->on_message_st(kClient, get.data(), get.size());
  ASSERT_TRUE(side_->has_work_st());
  side_->flush_st();
  EXPECT_EQ(answer().header().status, static_cast<uint8_t>(WireStatus::kOk));
  const FakeServerHost::Reply r = answer();
  ParsedResponse parsed;
  ASSERT_TRUE(parse_response(r.bytes.data(), r.bytes.size(), &parsed));
  EXPECT_EQ(parsed.value, "message");
}

TEST_F(RpcServerTest, AHelloAskingAnotherTransportIsRefused) {
  start(herd::TransportChoice::kWrite);
  proto::WelcomeParts welcome;
  EXPECT_NE(side_->admit(proto::info(proto::Id::herd), {{"transport", "send"}}, 2, 1, &welcome),
            "");
  EXPECT_NE(side_->admit(proto::info(proto::Id::herd), {{"transport", 1}}, 2, 1, &welcome), "");
  EXPECT_EQ(side_->admit(proto::info(proto::Id::herd), {{"transport", "write"}}, 2, 1, &welcome),
            "");
}

}  // namespace
}  // namespace fabkv::rpc
