// The RPC client's answers by SEND land in two multi-recv buffers (src/proto/rpc/client.h,
// "Answers by SEND"), each released by the provider once less than the endpoint's
// min_multi_recv is left in it and then posted again. Real server processes, on shm and tcp:
// - AnswersCrossManyBufferReleases: random GET/PUT/DEL with both workers' windows in flight and
//   values up to 8 KB, every answer checked against a model map (e2e_checks.h), for herd and
//   pilaf-vo; the buffers were released and posted again many times (counter rx_reposts).
// - ACallbackKeepsItsValueWhileItPolls: a callback that posts more requests than the window
//   holds polls from inside itself, and the answers of those fill both buffers; the buffer its
//   own value lies in must not be posted again (and overwritten) before it returns.
// - ALargerMaxValueTakesASecondHello: a server whose --max-value makes answers larger than the
//   client's first guess for the endpoint's minimum; the client says hello again from an
//   endpoint made with the Welcome's size (counter rx_min_raised), and values of nearly that
//   size round-trip.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "e2e_checks.h"
#include "server_fixture.h"
#include "values.h"

namespace fabkv::testing {
namespace {

struct Param {
  std::string provider, protocol, transport;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.provider << "/" << p.protocol; }
std::string name(const ::testing::TestParamInfo<Param>& p) {
  std::string n = p.param.provider + "_" + p.param.protocol;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

class RpcAnswersE2E : public ::testing::TestWithParam<Param> {
 protected:
  void start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {"--workers", "2", "--window", "4"};
    a.insert(a.end(), extra.begin(), extra.end());
    server_ = std::make_unique<KvServer>(GetParam().provider, GetParam().protocol, a);
  }
  std::unique_ptr<Client> connect() const {
    ClientOptions o;
    o.server = server_->address();
    o.provider = GetParam().provider;
    o.protocol = GetParam().protocol;
    o.transport = GetParam().transport;
    o.timeout_ms = 10000;  // two cores shared with busy-polling workers and the rest of CI
    return Client::connect(o);
  }
  static uint64_t counter(const Client& c, const char* name) {
    return c.protocol_counters().value(name, uint64_t{0});
  }
  std::unique_ptr<KvServer> server_;
};

// 3,000 operations, a third of them GETs of values of 1 to 8,000 bytes: ~4 MB of answers
// through buffers of 256 KiB, so each was released and posted again about ten times.
TEST_P(RpcAnswersE2E, AnswersCrossManyBufferReleases) {
  start();
  auto c = connect();
  async_ops_match_model(c.get(), 8000, 3000);
  const nlohmann::json n = c->protocol_counters();
  EXPECT_GT(n.value("rx_reposts", uint64_t{0}), 4u) << n.dump();
  EXPECT_EQ(n.value("rx_min_raised", uint64_t{1}), 0u) << "a default server took a second Hello";
}

// The rest on herd only: the RPC client's answer path is the same for every protocol.
class RpcAnswersHerdE2E : public RpcAnswersE2E {};

// The outer GET's callback posts 120 GETs of 6,000-byte values: with two workers' windows of 4
// it waits for free slots, polling, and the answers that arrive meanwhile (~700 KB) fill the
// rest of the buffer its own value lies in, the other buffer, and more. Its value must still
// read as it arrived when the callback looks at it last: the buffer under it was released while
// the callback ran (counter rx_reposts_deferred) and was posted again only after it returned.
TEST_P(RpcAnswersHerdE2E, ACallbackKeepsItsValueWhileItPolls) {
  start();
  auto c = connect();
  const std::string outer_value = value_for("outer", 1, 8000);
  ASSERT_EQ(c->put("outer", outer_value), Status::kOk);
  constexpr int kInner = 120;
  for (int i = 0; i < kInner; ++i) {
    const std::string key = "inner-" + std::to_string(i % 40);
    ASSERT_EQ(c->put(key, value_for(key, 7, 6000)), Status::kOk) << key;
  }
  // Shared with the callbacks, which may outlive a failed assertion (the client ends them).
  struct State {
    int inner_done = 0, inner_bad = 0, posted = 0;
    bool outer_done = false, outer_same = false;
  };
  auto st = std::make_shared<State>();
  Client* client = c.get();
  ASSERT_EQ(c->get_async("outer",
                         [st, client, outer_value](Status s, std::string_view v, uint64_t) {
                           st->outer_done = true;
                           if (s != Status::kOk || v != outer_value) return;
                           for (int i = 0; i < kInner; ++i) {
                             const std::string key = "inner-" + std::to_string(i % 40);
                             Status p = client->get_async(
                                 key, [st, key](Status s2, std::string_view v2, uint64_t) {
                                   st->inner_done++;
                                   if (s2 != Status::kOk || !value_ok(key, std::string(v2)))
                                     st->inner_bad++;
                                 });
                             if (p == Status::kOk) st->posted++;
                           }
                           st->outer_same = v == outer_value;
                         }),
            Status::kOk);
  ASSERT_EQ(c->flush(), Status::kOk);
  ASSERT_TRUE(st->outer_done);
  EXPECT_EQ(st->posted, kInner);
  EXPECT_EQ(st->inner_done, kInner);
  EXPECT_EQ(st->inner_bad, 0);
  EXPECT_TRUE(st->outer_same) << "the outer value changed under its callback";
  const nlohmann::json n = c->protocol_counters();
  EXPECT_GT(n.value("rx_reposts_deferred", uint64_t{0}), 0u)
      << "no buffer was released under a running callback: " << n.dump();
  // And the buffer that waited was posted again: the client goes on.
  std::string got;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "inner-" + std::to_string(i);
    ASSERT_EQ(c->get(key, &got), Status::kOk) << key;
    EXPECT_TRUE(value_ok(key, got)) << key;
  }
}

// 1 MiB values: answers of 1 MiB + 32 bytes, over the first guess (the default server's 64 KiB
// + 32). One second Hello, then values from 700 KB to the largest, with both workers' windows
// in flight (buffers of 4 such answers: released and posted again several times).
TEST_P(RpcAnswersHerdE2E, ALargerMaxValueTakesASecondHello) {
  constexpr size_t kMax = size_t{1} << 20;
  start({"--engine", "store", "--max-value", std::to_string(kMax)});
  auto c = connect();
  ASSERT_EQ(c->layout().at("max_value").get<size_t>(), kMax);
  EXPECT_EQ(counter(*c, "rx_min_raised"), 1u) << c->protocol_counters().dump();
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) {
    const std::string key = "big-" + std::to_string(i);
    keys.push_back(key);
    ASSERT_EQ(c->put(key, value_for(key, 1, kMax - static_cast<size_t>(i) * 50000)), Status::kOk)
        << key;
  }
  auto bad = std::make_shared<int>(0);
  for (int round = 0; round < 3; ++round)
    for (const std::string& key : keys)
      ASSERT_EQ(c->get_async(key,
                             [bad, key](Status s, std::string_view v, uint64_t) {
                               if (s != Status::kOk || !value_ok(key, std::string(v))) ++*bad;
                             }),
                Status::kOk)
          << key;
  ASSERT_EQ(c->flush(), Status::kOk);
  EXPECT_EQ(*bad, 0);
  EXPECT_GT(counter(*c, "rx_reposts"), 0u) << c->protocol_counters().dump();
}

std::vector<Param> params(bool herd_only) {
  std::vector<Param> out;
  for (const char* provider : {"shm", "tcp"}) {
    out.push_back({provider, "herd", ""});
    if (!herd_only) out.push_back({provider, "pilaf-vo", ""});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(All, RpcAnswersE2E, ::testing::ValuesIn(params(false)), name);
INSTANTIATE_TEST_SUITE_P(All, RpcAnswersHerdE2E, ::testing::ValuesIn(params(true)), name);

}  // namespace
}  // namespace fabkv::testing
