// Many real client processes against one real fabkv-server, on shm and tcp, with both request
// transports: results identical to a model map; a client killed mid-window is reclaimed; the
// verb counters show exactly one WRITE (or SEND) and one response SEND per request.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "common/deadline.h"
#include "raw_client.h"

namespace fabkv::testing {
namespace {

struct Param {
  std::string provider;
  std::string transport;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.provider << "/" << p.transport; }
std::string name(const ::testing::TestParamInfo<Param>& p) {
  return p.param.provider + "_" + p.param.transport;
}

class HerdProcesses : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        GetParam().provider, std::vector<std::string>{"--engine", "store", "--workers", "2",
                                                      "--transport", GetParam().transport});
  }
  // Starts `fabkv-herd-test-client MODE`, waits for its "READY <index> <epoch>", runs
  // `before_kill` (which may wait for what the test needs to be in flight), SIGKILLs it and
  // waits (bounded) until the server has let it go everywhere; returns its index and epoch.
  std::pair<unsigned, unsigned> kill_victim(const std::string& mode, RawClient& bystander,
                                            nlohmann::json* stats,
                                            const std::function<void()>& before_kill = {}) {
    Child victim({FABKV_TEST_CLIENT_BIN, mode, server_->address(), GetParam().provider});
    std::string line;
    unsigned idx = ~0u, epoch = 0;
    if (!victim.proc().read_line(&line, Deadline::after_ms(20000)) ||
        std::sscanf(line.c_str(), "READY %u %u", &idx, &epoch) != 2)
      throw std::runtime_error("victim did not start: " + line + "\n" + victim.stderr_excerpt());
    if (before_kill) before_kill();
    EXPECT_TRUE(victim.kill());
    perf::remove_shm_leftovers(victim.pid());
    // The server notices (control connection closed) and every worker lets the index go.
    auto worker_active = [](const nlohmann::json& st) {
      uint64_t n = 0;
      for (const auto& w : st.at("workers"))
        n = std::max<uint64_t>(n, w.at("active_clients").get<uint64_t>());
      return n;
    };
    Deadline d = Deadline::after_ms(10000);
    do {
      *stats = bystander.stats();
    } while ((stats->at("clients").at("departed").get<uint64_t>() < 1 ||
              worker_active(*stats) > 1) &&
             !d.expired());
    return {idx, epoch};
  }
  std::unique_ptr<ServerProcess> server_;
};

TEST_P(HerdProcesses, ManyClientsMatchTheirModels) {
  std::vector<std::unique_ptr<Child>> clients;
  // 3 clients + 2 busy-polling workers already oversubscribe 2 cores: keep the runs short.
  for (int i = 0; i < 3; ++i)
    clients.push_back(std::make_unique<Child>(
        std::vector<std::string>{FABKV_TEST_CLIENT_BIN, "stress", server_->address(),
                                 GetParam().provider, std::to_string(1000 + i), "400"}));
  for (auto& c : clients) EXPECT_TRUE(c->ends_as(0, 120000));
}

static uint64_t worker_sum(const nlohmann::json& st, const char* name) {
  uint64_t n = 0;
  for (const auto& w : st.at("workers")) n += w.at(name).get<uint64_t>();
  return n;
}
// PUTs the engines carried out (the workers' "puts" count requests as they arrive).
static uint64_t engine_puts(const nlohmann::json& st) {
  uint64_t n = 0;
  for (const auto& w : st.at("workers")) n += w.at("engine").at("puts").get<uint64_t>();
  return n;
}

// A client killed with indirect PUTs outstanding (on tcp the worker's READs of its memory are
// still waiting for it), its index then taken by a new client: the new client gets answers to
// its own requests only, each naming its index and epoch; nothing meant for the dead one. The
// premise is asserted, the kill waiting for it (10 s at most). A worker fetches one indirect
// body at a time per client (RpcServer::scan_st). On tcp the worker's READ waits for the
// victim's progress, which it drives only while it posts its requests (RawClient::post reaps):
// the worker has taken k >= 1 PUTs, carried out k - 1 and one READ is outstanding at the
// kill, which ends after it: it fails, or, when the victim's answer was already on its way,
// completes for a client that has left and is dropped (reads_dropped). On shm the READs complete
// without the victim (the worker copies from its memory), so all W PUTs are taken and carried out,
// answered into the dead victim's queue.
TEST_P(HerdProcesses, AReusedIndexNeverSeesItsPredecessorsAnswers) {
  if (GetParam().transport != "write") GTEST_SKIP() << "indirect requests ride the write transport";
  const bool tcp = GetParam().provider == "tcp";
  RawClient bystander(GetParam().provider, server_->address());
  // What the test needs at the kill: taken PUTs, and as many carried out but one (tcp) or all.
  auto premise = [&](const nlohmann::json& st) {
    const uint64_t taken = worker_sum(st, "indirect"), done = engine_puts(st);
    return tcp ? taken >= 1 && done + 1 == taken : taken == bystander.window && done == taken;
  };
  nlohmann::json s, at_kill;
  auto [idx, epoch] = kill_victim("victim-indirect", bystander, &s, [&] {
    Deadline d = Deadline::after_ms(10000);
    do at_kill = bystander.stats();
    while (!premise(at_kill) && !d.expired());
  });
  ASSERT_TRUE(premise(at_kill))
      << "the worker had not taken the victim's indirect PUTs (tcp: with one READ outstanding) "
         "at the kill: "
      << at_kill.dump();
  EXPECT_EQ(worker_sum(at_kill, "read_errors"), 0u) << at_kill.dump();
  RawClient next(GetParam().provider, server_->address(), "write");
  ASSERT_EQ(next.client, idx);
  ASSERT_EQ(next.epoch, epoch + 1);
  char req[512];
  const std::string key = "reuse-0";  // the same worker and slots the victim used
  const uint32_t w = next.worker_of(key);
  for (uint32_t r = 0; r < next.window; ++r) {
    size_t n = next.build(r + 1, rpc::OpCode::kGet, key, "", req);
    next.write_slot(w, r, req, n);
  }
  std::set<uint32_t> seen;
  for (uint32_t r = 0; r < next.window; ++r) {
    auto resp = next.response(10000);
    ASSERT_TRUE(resp.has_value()) << "answer " << r << " never came; " << next.stats().dump();
    EXPECT_EQ(resp->h.client, idx);
    EXPECT_EQ(resp->h.epoch, next.epoch) << "an answer for the dead client's epoch";
    EXPECT_EQ(resp->h.op, static_cast<uint8_t>(rpc::OpCode::kGet)) << "an answer to its PUT";
    EXPECT_TRUE(seen.insert(resp->h.seq).second) << "seq " << resp->h.seq << " answered twice";
  }
  EXPECT_FALSE(next.response(500).has_value()) << "an extra answer arrived";
  nlohmann::json st = next.stats();
  const uint64_t indirect = worker_sum(st, "indirect"), read_errors = worker_sum(st, "read_errors"),
                 dropped = worker_sum(st, "reads_dropped"),
                 stale = worker_sum(st, "stale_responses");
  // The READ that was waiting at the kill ended after it: it failed, or (its bytes already on
  // their way from the victim at the kill) it completed for a client that had left and was
  // dropped; as did any the worker posted to the dead victim before it let the index go. Every
  // PUT taken was carried out, failed or dropped, and none reached the engine for the new client.
  if (tcp) {
    EXPECT_GE(read_errors + dropped, 1u) << st.dump();
    EXPECT_EQ(read_errors + dropped + engine_puts(st), indirect) << st.dump();
  }
  std::printf(
      "index reuse %s: victim's indirect PUTs taken %lu (at the kill %lu, carried out "
      "%lu), READ errors %lu, READs dropped %lu, stale answers dropped %lu\n",
      GetParam().provider.c_str(), static_cast<unsigned long>(indirect),
      static_cast<unsigned long>(worker_sum(at_kill, "indirect")),
      static_cast<unsigned long>(engine_puts(at_kill)), static_cast<unsigned long>(read_errors),
      static_cast<unsigned long>(dropped), static_cast<unsigned long>(stale));
}

TEST_P(HerdProcesses, KilledClientIsReclaimedAndOthersSeeNoError) {
  RawClient bystander(GetParam().provider, server_->address());
  nlohmann::json s;
  auto [idx, epoch] = kill_victim("victim", bystander, &s);
  EXPECT_EQ(s.at("clients").at("departed").get<uint64_t>(), 1u);
  EXPECT_EQ(s.at("clients").at("active").get<uint64_t>(), 1u);
  // A new client takes the freed index, with a new epoch, and is served.
  RawClient next(GetParam().provider, server_->address());
  EXPECT_EQ(next.client, idx);
  EXPECT_EQ(next.epoch, epoch + 1);
  char req[512];
  const bool by_send = GetParam().transport == "send";
  size_t n = next.build(1, rpc::OpCode::kGet, "victim-0", "", req);
  if (by_send) next.send_raw(next.worker_of("victim-0"), req, n);
  else next.write_slot(next.worker_of("victim-0"), 0, req, n);
  auto r = next.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.seq, 1u);
  // The bystander was never disturbed.
  n = bystander.build(1, rpc::OpCode::kPut, "calm", "yes", req);
  if (by_send) bystander.send_raw(bystander.worker_of("calm"), req, n);
  else bystander.write_slot(bystander.worker_of("calm"), 0, req, n);
  r = bystander.response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->h.status, static_cast<uint8_t>(rpc::WireStatus::kOk));
}

TEST_P(HerdProcesses, OneRequestVerbAndOneResponseSendPerOperation) {
  RawClient c(GetParam().provider, server_->address(), GetParam().transport);
  auto before_server = c.stats();
  auto before = c.ep().counters().snapshot();
  const bool by_send = GetParam().transport == "send";
  std::vector<uint32_t> seq(2, 0);
  char req[512];
  const int kOps = 200;
  for (int i = 0; i < kOps; ++i) {
    std::string key = "count-" + std::to_string(i % 17);
    uint32_t w = c.worker_of(key);
    uint32_t s = ++seq[w];
    size_t n = c.build(s, i % 2 ? rpc::OpCode::kGet : rpc::OpCode::kPut, key, "v", req);
    if (by_send) c.send_raw(w, req, n);
    else c.write_slot(w, s - 1, req, n);
    ASSERT_TRUE(c.response().has_value());
  }
  auto d = c.ep().counters().snapshot() - before;
  using fabric::Verb;
  EXPECT_EQ(d[by_send ? Verb::kSend : Verb::kWrite].posted, static_cast<uint64_t>(kOps));
  EXPECT_EQ(d[by_send ? Verb::kWrite : Verb::kSend].posted, 0u);
  EXPECT_EQ(d[Verb::kRead].posted, 0u);
  EXPECT_EQ(d[Verb::kRecv].inbound, static_cast<uint64_t>(kOps));
  // A worker counts a SEND once fi_send has returned, and over tcp the answer may be here (and
  // the stats asked for) before the worker thread, preempted on a busy host, counted its last
  // one (seen: 199 of 200). So the server's counts are read until they hold every answer,
  // bounded; then they must be exactly that.
  uint64_t sends = 0, reads = 0, writes = 0;
  for (Deadline d = Deadline::after_ms(5000);;) {
    auto after_server = c.stats();
    sends = reads = writes = 0;
    for (size_t w = 0; w < after_server["workers"].size(); ++w) {
      auto a = after_server["workers"][w]["verbs"], b = before_server["workers"][w]["verbs"];
      sends += a["send"]["posted"].get<uint64_t>() - b["send"]["posted"].get<uint64_t>();
      reads += a["read"]["posted"].get<uint64_t>() - b["read"]["posted"].get<uint64_t>();
      writes += a["write"]["posted"].get<uint64_t>() - b["write"]["posted"].get<uint64_t>();
    }
    if (sends >= static_cast<uint64_t>(kOps) || d.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(sends, static_cast<uint64_t>(kOps));
  EXPECT_EQ(reads, 0u);
  EXPECT_EQ(writes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, HerdProcesses,
                         ::testing::Values(Param{"shm", "write"}, Param{"tcp", "write"},
                                           Param{"shm", "send"}, Param{"tcp", "send"}),
                         name);

}  // namespace
}  // namespace fabkv::testing
