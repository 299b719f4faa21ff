// A pilaf server against raw wire-level clients: garbage, truncated and oversized PUT messages
// get error replies while the worker keeps serving, and one-sided READs that leave the exposed
// regions get a fabric error instead of server memory (as far as the provider can check: shm
// checks nothing, docs/fabric.md).
#include <gtest/gtest.h>

#include <cstring>

#include "proto/pilaf/layout.h"
#include "server/raw_client.h"

namespace fabkv::testing {
namespace {

using rpc::OpCode;
using rpc::WireStatus;

class PilafFaults : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        GetParam(), std::vector<std::string>{"--protocols", "pilaf", "--max-value", "1K"});
    client_ = std::make_unique<RawClient>(GetParam(), server_->address(), "", "pilaf");
  }
  uint64_t malformed() {
    uint64_t n = 0;
    const nlohmann::json st = client_->stats();
    for (const auto& w : st.at("workers")) n += w.at("malformed").get<uint64_t>();
    return n;
  }
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<RawClient> client_;
};

TEST_P(PilafFaults, BadPutMessagesGetErrorsAndTheWorkerKeepsServing) {
  RawClient& c = *client_;
  ASSERT_EQ(c.layout.at("transport"), "send");
  char msg[4096];
  // Garbage in the body: the checksum does not match, the PUT is never executed.
  size_t n = c.build(1, OpCode::kPut, "victim", "value", msg);
  msg[sizeof(rpc::RequestHeader) + 2] ^= 0x55;
  c.send_raw(0, msg, n);
  auto r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.seq, 1u);
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kMalformed));
  // Truncated: the header promises more bytes than the message carries.
  n = c.build(2, OpCode::kPut, "victim", std::string(200, 'x'), msg);
  c.send_raw(0, msg, sizeof(rpc::RequestHeader) + 20);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.seq, 2u);
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kMalformed));
  // Oversized value (over --max-value 1K): too large, nothing stored.
  n = c.build(3, OpCode::kPut, "victim", std::string(1025, 'y'), msg);
  c.send_raw(0, msg, n);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kTooLarge));
  // Garbage from nobody (an unknown client index): dropped and counted, no reply possible.
  char junk[256];
  std::memset(junk, 0xa7, sizeof(junk));
  c.send_raw(0, junk, sizeof(junk));
  EXPECT_EQ(malformed(), 2u);
  // The key was never written, and a good PUT then works.
  n = c.build(4, OpCode::kGet, "victim", "", msg);
  c.send_raw(0, msg, n);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kNotFound));
  n = c.build(5, OpCode::kPut, "victim", "fine", msg);
  c.send_raw(0, msg, n);
  r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kOk));
  EXPECT_EQ(c.stats().at("workers").at(0).at("unknown_client").get<uint64_t>(), 1u);
}

TEST_P(PilafFaults, ReadsInsideTheRegionsSeeTheTable) {
  fabric::RemoteRegion t = client_->region("pilaf.table.0");
  EXPECT_EQ(t.access, fabric::Access::kRemoteRead) << "clients may only READ the table";
  std::string bytes;
  ASSERT_EQ(client_->read(0, t.at(0), t.key, sizeof(pilaf::TableHeader), &bytes), 0);
  pilaf::TableHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  EXPECT_EQ(h.magic, pilaf::kTableMagic);
  EXPECT_EQ(h.state, pilaf::kStateLive);
  EXPECT_EQ(pilaf::table_bytes(h.entries), t.length);
}

TEST_P(PilafFaults, ReadsOutsideTheRegionsGetAFabricError) {
  const fabric::RemoteRegion t = client_->region("pilaf.table.0");
  std::string bytes = "untouched";
  if (GetParam() == "tcp") {
    // tcp;ofi_rxm checks the key and the bounds at the target. The failed READ also takes the
    // client's connection down (later operations fail with ENOTCONN), so each probe comes
    // from a client of its own.
    struct Bad {
      const char* what;
      uint64_t addr, key;
    };
    for (const Bad& b : {Bad{"past the end", t.at(t.length), t.key},
                         Bad{"across the end", t.at(t.length - 8), t.key},
                         Bad{"wrong key", t.at(0), t.key ^ 0x5a5a}}) {
      RawClient c(GetParam(), server_->address(), "", "pilaf");
      EXPECT_NE(c.read(0, b.addr, b.key, 64, &bytes), 0) << b.what;
      EXPECT_EQ(bytes, "untouched") << b.what;
    }
  } else {
    // shm checks neither key nor bounds (measured, docs/fabric.md): it copies whatever the
    // server process has mapped there. An address the server has not mapped still fails.
    EXPECT_NE(client_->read(0, 4096, t.key, 64, &bytes), 0) << "unmapped page";
    EXPECT_EQ(bytes, "untouched");
  }
  // The server is unaffected: a new client is served.
  RawClient c(GetParam(), server_->address(), "", "pilaf");
  char msg[256];
  size_t n = c.build(1, OpCode::kPut, "after", "reads", msg);
  c.send_raw(0, msg, n);
  auto r = c.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(WireStatus::kOk));
}

INSTANTIATE_TEST_SUITE_P(Providers, PilafFaults, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv::testing
