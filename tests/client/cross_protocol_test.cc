// Every key-value protocol of the registration list (proto/registry.h) served side by side on
// the same data, by one fabkv-server per engine that protocols READ (pilaf's, farm's, drtm's; the
// protocols that run on any engine join each): each protocol's client writes keys of its own, and
// every protocol's client reads, overwrites and deletes what the others wrote, checked against a
// plain model map. Also the registry's own rules (unique names, server sides that exist).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "client/client.h"
#include "proto/registry.h"
#include "support/ready_process.h"

namespace fabkv {
namespace {

using fabkv::testing::ReadyProcess;

TEST(Registry, NamesAreUniqueAndEveryServerSideServesItself) {
  std::set<std::string> names;
  for (const proto::Info& p : proto::protocols()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_EQ(proto::find(p.name), &p);
    const proto::Info& side = proto::info(p.server);
    EXPECT_EQ(side.server, side.id) << p.name << "'s server side is served by another";
    EXPECT_EQ(side.engine, p.engine) << p.name << " needs another engine than its server side";
  }
  EXPECT_EQ(proto::find("no-such-protocol"), nullptr);
  EXPECT_EQ(proto::find(""), nullptr);
  EXPECT_EQ(std::string(proto::info(proto::kDefault).name), "herd");
}

// The key-value protocols one server can serve together: a server side whose clients reach an
// engine of its own (pilaf, farm, farm-var, drtm) with the protocols it serves and every
// protocol that runs on any engine (src/server/options.cc refuses two such server sides on one
// server). Every key-value protocol is in at least one family; the sequencers keep no key-value
// data (tests/client/seq_e2e_test.cc).
std::vector<std::vector<const proto::Info*>> families() {
  std::vector<std::vector<const proto::Info*>> out;
  for (const proto::Info& side : proto::protocols()) {
    if (side.server != side.id || side.engine == proto::EngineNeed::kAny ||
        side.engine == proto::EngineNeed::kNone)
      continue;
    std::vector<const proto::Info*> f;
    for (const proto::Info& p : proto::protocols())
      if (p.server == side.id || p.engine == proto::EngineNeed::kAny) f.push_back(&p);
    out.push_back(f);
  }
  if (out.empty()) {
    out.emplace_back();
    for (const proto::Info& p : proto::protocols())
      if (p.engine != proto::EngineNeed::kNone) out.back().push_back(&p);
  }
  return out;
}

TEST(Registry, EveryKeyValueProtocolIsInAFamily) {
  std::set<std::string> seen;
  for (const auto& f : families())
    for (const proto::Info* p : f) seen.insert(p->name);
  for (const proto::Info& p : proto::protocols())
    EXPECT_EQ(seen.count(p.name), p.engine == proto::EngineNeed::kNone ? 0u : 1u) << p.name;
}

class CrossProtocol : public ::testing::TestWithParam<std::string> {
 protected:
  // One server of the family; each protocol's client writes, reads, overwrites, deletes.
  void check_family(const std::vector<const proto::Info*>& family);
};

TEST_P(CrossProtocol, EveryProtocolSeesWhatTheOthersWrote) {
  for (const auto& family : families()) {
    SCOPED_TRACE(family.front()->name);
    check_family(family);
    if (HasFatalFailure()) return;
  }
}

void CrossProtocol::check_family(const std::vector<const proto::Info*>& family) {
  std::string names;
  for (const proto::Info* p : family) names += (names.empty() ? "" : ",") + std::string(p->name);
  ReadyProcess server({FABKV_SERVER_BIN, "--provider", GetParam(), "--listen", "127.0.0.1:0",
                       "--protocols", names, "--workers", "2", "--cores", "-1", "--log", "warn"},
                      ReadyProcess::Stop::kSigterm);
  std::vector<std::unique_ptr<Client>> clients;
  for (const proto::Info* pp : family) {
    const proto::Info& p = *pp;
    ClientOptions o;
    o.server = server.address();
    o.provider = GetParam();
    o.protocol = p.name;
    o.timeout_ms = 10000;
    clients.push_back(Client::connect(o));
    ASSERT_EQ(clients.back()->layout().at("protocol"), p.name);
  }
  std::map<std::string, std::string> model;
  std::mt19937 rng(7);
  const size_t n = clients.size();
  // Each protocol writes its own keys (values of several sizes, one over a slot: indirect).
  for (size_t i = 0; i < n; ++i)
    for (int k = 0; k < 40; ++k) {
      std::string key = fmt::format("k{}-{}", i, k);
      std::string value(k == 39 ? 3000 : 1 + rng() % 200, static_cast<char>('a' + (k + i) % 26));
      ASSERT_EQ(clients[i]->put(key, value), Status::kOk) << family[i]->name;
      model[key] = value;
    }
  // Every protocol reads every key, then overwrites or deletes the next protocol's keys.
  for (size_t i = 0; i < n; ++i) {
    const char* who = family[i]->name;
    for (const auto& [key, value] : model) {
      std::string got;
      ASSERT_EQ(clients[i]->get(key, &got), Status::kOk) << who << " " << key;
      ASSERT_EQ(got, value) << who << " " << key;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t victim = (i + 1) % n;
    for (int k = 0; k < 40; ++k) {
      std::string key = fmt::format("k{}-{}", victim, k);
      if (k % 3 == 0) {
        ASSERT_EQ(clients[i]->del(key), Status::kOk);
        model.erase(key);
      } else {
        std::string value = fmt::format("by {} #{}", family[i]->name, k);
        ASSERT_EQ(clients[i]->put(key, value), Status::kOk);
        model[key] = value;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const char* who = family[i]->name;
    for (size_t j = 0; j < n; ++j)
      for (int k = 0; k < 40; ++k) {
        std::string key = fmt::format("k{}-{}", j, k), got;
        auto it = model.find(key);
        Status s = clients[i]->get(key, &got);
        if (it == model.end()) {
          EXPECT_EQ(s, Status::kNotFound) << who << " " << key;
        } else {
          ASSERT_EQ(s, Status::kOk) << who << " " << key;
          EXPECT_EQ(got, it->second) << who << " " << key;
        }
      }
  }
  // The server counts its clients by protocol.
  nlohmann::json st = clients[0]->stats();
  for (const proto::Info* p : family)
    if (p->server == p->id) {
      EXPECT_TRUE(st.at("workers").at(0).at("protocols").contains(p->name)) << p->name;
    }
}

INSTANTIATE_TEST_SUITE_P(Providers, CrossProtocol, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv
