// Every protocol of the registration list (proto/registry.h) served side by side on the same
// data, by one fabkv-server per engine that protocols bring (pilaf's, drtm's; the protocols that
// run on any engine join each): each protocol's client writes keys of its own, and every
// protocol's client reads, overwrites and deletes what the others wrote, checked against a
// plain model map. Also the registry's own rules (unique names, server sides that exist).
#include <gtest/gtest.h>

#include <algorithm>
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

void check_group(const std::string& provider, const std::vector<const proto::Info*>& group) {
  std::string list;
  for (const proto::Info* p : group) list += (list.empty() ? "" : ",") + std::string(p->name);
  ReadyProcess server({FABKV_SERVER_BIN, "--provider", provider, "--listen", "127.0.0.1:0",
                       "--protocols", list, "--workers", "2", "--cores", "-1", "--log", "warn"},
                      ReadyProcess::Stop::kSigterm);
  std::vector<std::unique_ptr<Client>> clients;
  for (const proto::Info* pp : group) {
    const proto::Info& p = *pp;
    ClientOptions o;
    o.server = server.address();
    o.provider = provider;
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
      ASSERT_EQ(clients[i]->put(key, value), Status::kOk) << group[i]->name;
      model[key] = value;
    }
  // Every protocol reads every key, then overwrites or deletes the next protocol's keys.
  for (size_t i = 0; i < n; ++i) {
    const char* who = group[i]->name;
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
        std::string value = fmt::format("by {} #{}", group[i]->name, k);
        ASSERT_EQ(clients[i]->put(key, value), Status::kOk);
        model[key] = value;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const char* who = group[i]->name;
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
  for (const proto::Info* p : group)
    if (p->server == p->id) {
      EXPECT_TRUE(st.at("workers").at(0).at("protocols").contains(p->name)) << p->name;
    }
}

// The protocols one server can serve together: those that need one engine of their own (pilaf's,
// drtm's: their clients reach its memory) and every protocol that runs on any engine. A server
// runs one engine, so each such engine gets a server of its own (options.cc refuses a mix).
std::vector<std::vector<const proto::Info*>> engine_groups() {
  std::vector<std::vector<const proto::Info*>> groups;
  std::vector<proto::EngineNeed> needs;
  for (const proto::Info& p : proto::protocols())
    if (p.engine != proto::EngineNeed::kAny &&
        std::find(needs.begin(), needs.end(), p.engine) == needs.end())
      needs.push_back(p.engine);
  if (needs.empty()) needs.push_back(proto::EngineNeed::kAny);
  for (proto::EngineNeed n : needs) {
    std::vector<const proto::Info*> g;
    for (const proto::Info& p : proto::protocols())
      if (p.engine == proto::EngineNeed::kAny || p.engine == n) g.push_back(&p);
    groups.push_back(std::move(g));
  }
  return groups;
}


class CrossProtocol : public ::testing::TestWithParam<std::string> {};

TEST_P(CrossProtocol, EveryProtocolSeesWhatTheOthersWrote) {
  for (const auto& group : engine_groups()) {
    SCOPED_TRACE(group.back()->name);
    check_group(GetParam(), group);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, CrossProtocol, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace fabkv
