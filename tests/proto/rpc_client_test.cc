// rpc::RpcClient (proto/rpc/client.h) against a FakeClientHost (client_host_fake.h): the
// request path's first step refuses what it must refuse before anything is claimed, encoded
// or posted, and the callback of a refused request never runs (client/client.h's async
// contract: "any other return means nothing was sent").
#include "proto/rpc/client.h"

#include <gtest/gtest.h>

#include <string>

#include "client_host_fake.h"
#include "store/limits.h"

namespace fabkv::testing {
namespace {

proto::ClientRequest request(proto::ClientOp op, std::string_view key,
                             std::string_view value = {}) {
  proto::ClientRequest r;
  r.op = op;
  r.key = key;
  r.value = value;
  return r;
}

class RpcClientTest : public ::testing::Test {
 protected:
  // Submits r and checks that it was refused with `want`, that nothing was asked of the
  // host (no fabric, no endpoint, no waiting) and that the callback did not run.
  void expect_refused(rpc::RpcClient& c, const proto::ClientRequest& r, Status want) {
    bool ran = false;
    EXPECT_EQ(c.submit(r, [&](Status, std::string_view, uint64_t) { ran = true; }), want);
    EXPECT_FALSE(ran);
    EXPECT_EQ(host_.calls().total(), 0u);
    EXPECT_EQ(c.in_flight(), 0u);
    EXPECT_EQ(c.waiting(), 0u);
  }

  FakeClientHost host_;
};

TEST_F(RpcClientTest, BadKeysAndValuesAreRefusedWithNothingSent) {
  rpc::RpcClient c(host_, rpc::ClientConfig{"herd.requests", true});
  expect_refused(c, request(proto::ClientOp::kGet, ""), Status::kInvalidKey);
  expect_refused(c, request(proto::ClientOp::kPut, "", "v"), Status::kInvalidKey);
  expect_refused(c, request(proto::ClientOp::kDel, ""), Status::kInvalidKey);
  const std::string too_long(store::kMaxKeySize + 1, 'k');
  expect_refused(c, request(proto::ClientOp::kGet, too_long), Status::kTooLarge);
  expect_refused(c, request(proto::ClientOp::kPut, too_long, "v"), Status::kTooLarge);
  // Before open() the server's max_value is unknown (0): any value is too large.
  expect_refused(c, request(proto::ClientOp::kPut, "k", "v"), Status::kTooLarge);
}

TEST_F(RpcClientTest, NextIsOnlyForSequencersAndCarriesNoKey) {
  rpc::RpcClient kv(host_, rpc::ClientConfig{"herd.requests", true});
  expect_refused(kv, request(proto::ClientOp::kNext, ""), Status::kError);
  rpc::ClientConfig seq{"seq-rpc.requests", true};
  seq.next = true;
  rpc::RpcClient sequencer(host_, seq);
  expect_refused(sequencer, request(proto::ClientOp::kNext, "k"), Status::kInvalidKey);
  expect_refused(sequencer, request(proto::ClientOp::kNext, "", "v"), Status::kInvalidKey);
}

TEST_F(RpcClientTest, NothingIsSentOnceTheServerIsGone) {
  rpc::RpcClient c(host_, rpc::ClientConfig{"herd.requests", true});
  host_.set_gone();
  // Even a request that would otherwise be refused for itself: gone is checked first.
  expect_refused(c, request(proto::ClientOp::kGet, "k"), Status::kServerGone);
  expect_refused(c, request(proto::ClientOp::kGet, ""), Status::kServerGone);
}

TEST_F(RpcClientTest, TakesItsSettingsFromTheHost) {
  // The RPC client reads its knobs from ClientHost::settings() when made, not from the public
  // ClientOptions: a test hook set there is announced in the Hello (proto/rpc/client.cc).
  host_.mutable_settings().test.first_seq = 7;
  rpc::RpcClient c(host_, rpc::ClientConfig{"herd.requests", true});
  EXPECT_EQ(host_.calls().total(), 0u) << "making it asks nothing of the host";
  EXPECT_EQ(c.in_flight(), 0u);
  EXPECT_FALSE(c.slot_free(0)) << "no worker before open()";
}

}  // namespace
}  // namespace fabkv::testing
