// Pilaf end to end: fabkv::Client speaking pilaf (GETs by READ, PUT/DEL by message), pilaf-vo
// and herd against one real fabkv-server process on shm and tcp, all on the same pilaf engine.
// A model map under random operations from many clients while the table grows, readers racing
// a writer (Pilaf fig. 9), probes per GET at 75% fill (Pilaf fig. 6), GETs that never reach the
// server's CPU, fabkv-cli, and the op log across a restart.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "client/client.h"
#include "perf/process.h"
#include "server_fixture.h"
#include "support/child.h"

namespace fabkv {
namespace {

using fabkv::testing::value_for;
using fabkv::testing::value_ok;

class PilafE2E : public fabkv::testing::ProviderE2E {
 protected:
  void start(const std::vector<std::string>& extra = {}) {
    start_server("herd,pilaf,pilaf-vo", extra);
  }
};

TEST_P(PilafE2E, GetsAreReadsAndAllProtocolsShareTheData) {
  start();
  auto pilaf = Client::connect(options("pilaf"));
  auto vo = Client::connect(options("pilaf-vo"));
  auto herd = Client::connect(options("herd"));
  EXPECT_EQ(pilaf->layout().at("protocol"), "pilaf");
  EXPECT_EQ(pilaf->layout().at("transport"), "send");
  uint64_t ver = 0, got_ver = 0;
  ASSERT_EQ(vo->put("shared", "from-vo", 0, 0, &ver), Status::kOk);
  std::string v;
  ASSERT_EQ(pilaf->get("shared", &v, &got_ver), Status::kOk);
  EXPECT_EQ(v, "from-vo");
  EXPECT_EQ(got_ver, ver) << "the version travels in the extent record";
  ASSERT_EQ(pilaf->put("shared", "from-pilaf"), Status::kOk);
  ASSERT_EQ(herd->get("shared", &v), Status::kOk);
  EXPECT_EQ(v, "from-pilaf");
  ASSERT_EQ(vo->get("shared", &v), Status::kOk);
  EXPECT_EQ(v, "from-pilaf");

  // A pilaf GET is READs only: no message, and the worker never hears of it (Pilaf sec. 3.1).
  const uint64_t gets_before = worker_sum(herd->stats(), "gets");
  auto before = pilaf->counters();
  for (int i = 0; i < 50; ++i) ASSERT_EQ(pilaf->get("shared", &v), Status::kOk);
  EXPECT_EQ(pilaf->get("absent-key", &v), Status::kNotFound);
  auto d = pilaf->counters() - before;
  EXPECT_EQ(d[fabric::Verb::kSend].posted, 0u);
  EXPECT_GE(d[fabric::Verb::kRead].posted, 51u * 2);  // an entry and a record each, at least
  EXPECT_EQ(worker_sum(herd->stats(), "gets"), gets_before);
  // pilaf-vo GETs are messages the worker serves.
  ASSERT_EQ(vo->get("shared", &v), Status::kOk);
  EXPECT_EQ(worker_sum(herd->stats(), "gets"), gets_before + 1);
  EXPECT_EQ(pilaf->protocol_counters().at("gets").get<uint64_t>(), 52u);
  // pilaf-vo reads nothing: its counters are the RPC client's only (proto/rpc/client.h).
  EXPECT_FALSE(vo->protocol_counters().contains("gets")) << vo->protocol_counters().dump();
  EXPECT_TRUE(vo->protocol_counters().contains("rx_reposts")) << vo->protocol_counters().dump();

  ASSERT_EQ(pilaf->del("shared"), Status::kOk);
  EXPECT_EQ(pilaf->get("shared", &v), Status::kNotFound);
  EXPECT_EQ(herd->get("shared", &v), Status::kNotFound);
}

// A GET's callback may start other GETs (and wait for them) before it is done with its own
// value: the value handed to it must stay its own meanwhile, not the READ buffer the next GET
// reuses.
TEST_P(PilafE2E, ACallbackThatStartsAnotherGetKeepsItsValue) {
  start();
  auto c = Client::connect(options("pilaf"));
  const std::string a = value_for("first", 1, 200), b = value_for("second", 2, 200);
  ASSERT_EQ(c->put("first", a), Status::kOk);
  ASSERT_EQ(c->put("second", b), Status::kOk);
  for (int i = 0; i < 50; ++i) {
    bool done = false;
    std::string seen, other;
    Status st = c->get_async("first", [&](Status s, std::string_view v, uint64_t) {
      ASSERT_EQ(s, Status::kOk);
      // A nested, blocking GET of another key runs to completion inside this callback.
      EXPECT_EQ(c->get("second", &other), Status::kOk);
      seen.assign(v.data(), v.size());
      done = true;
    });
    ASSERT_EQ(st, Status::kOk);
    ASSERT_EQ(c->flush(), Status::kOk);
    ASSERT_TRUE(done);
    EXPECT_EQ(other, b);
    ASSERT_EQ(seen, a) << "the callback's value was overwritten by the nested GET (round " << i
                       << ")";
  }
}

TEST_P(PilafE2E, ModelMapUnderRandomOpsWhileTheTableGrows) {
  // A tiny first generation: the table and the extents grow several times under the clients.
  start({"--workers", "2", "--pilaf-entries", "64", "--pilaf-extents", "4K"});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(Client::connect(options("pilaf")));
  clients.push_back(Client::connect(options("pilaf-vo")));
  clients.push_back(Client::connect(options("herd")));
  std::map<std::string, std::string> model;
  std::mt19937_64 rng(GetParam() == "shm" ? 1 : 2);
  const int kOps = 4000;
  for (int i = 0; i < kOps; ++i) {
    Client& c = *clients[rng() % clients.size()];
    std::string key = "key-" + std::to_string(rng() % 600);
    int op = static_cast<int>(rng() % 10);
    std::string v;
    if (op < 5) {
      Status s = c.get(key, &v);
      auto it = model.find(key);
      if (it == model.end()) ASSERT_EQ(s, Status::kNotFound) << "op " << i << " " << key;
      else {
        ASSERT_EQ(s, Status::kOk) << "op " << i << " " << key;
        ASSERT_EQ(v, it->second) << "op " << i << " " << key;
      }
    } else if (op < 9) {
      std::string val = value_for(key, i, 1 + rng() % 300);
      ASSERT_EQ(c.put(key, val), Status::kOk) << "op " << i;
      model[key] = val;
    } else {
      Status s = c.del(key);
      ASSERT_EQ(s, model.erase(key) ? Status::kOk : Status::kNotFound) << "op " << i;
    }
  }
  // Many GETs in flight at once from one client, every key of the model.
  Client& c = *clients[0];
  size_t answered = 0, wrong = 0;
  for (const auto& [k, v_model] : model) {
    const std::string want = v_model;  // (clang 14 cannot capture a structured binding)
    ASSERT_EQ(c.get_async(k,
                          [&, want](Status s, std::string_view v, uint64_t) {
                            answered++;
                            if (s != Status::kOk || v != want) wrong++;
                          }),
              Status::kOk);
  }
  ASSERT_EQ(c.flush(), Status::kOk);
  EXPECT_EQ(answered, model.size());
  EXPECT_EQ(wrong, 0u);
  auto st = c.stats();
  uint64_t growths = 0;
  for (const auto& w : st.at("workers")) growths += w.at("pilaf").at("growths").get<uint64_t>();
  EXPECT_GT(growths, 0u) << "the test meant to grow the tables";
  uint64_t refreshes = 0;
  for (int i = 0; i < 4; ++i) refreshes += counter(*clients[i], "layout_refreshes");
  EXPECT_GT(refreshes, 0u) << "readers must have met retired tables and fetched the layout";
}

// Pilaf fig. 9's shape: a writer rewrites a few keys as fast as it can (values change size, so
// records move and freed extents are reused) while readers READ them. No reader may return a
// torn or foreign value; the races it detected are counted, not hidden, and at least one must
// have happened: a reader that never met the writer mid-PUT proved nothing, so the reader goes
// on (at most 60 s) until it has retried a torn entry or record, or re-probed after a move.
TEST_P(PilafE2E, ReadersRacingAWriterNeverSeeATornValue) {
  start();
  const int kKeys = 8;
  {
    auto c = Client::connect(options("pilaf"));
    for (int k = 0; k < kKeys; ++k)
      ASSERT_EQ(c->put("hot" + std::to_string(k), value_for("hot" + std::to_string(k), 0, 64)),
                Status::kOk);
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::string writer_error;
  std::thread writer([&] {
    try {
      auto w = Client::connect(options("pilaf"));
      std::mt19937_64 rng(3);
      for (uint64_t n = 1; !stop.load(); ++n) {
        std::string key = "hot" + std::to_string(rng() % kKeys);
        if (w->put(key, value_for(key, n, 16 + rng() % 2000)) != Status::kOk) {
          writer_error = "a PUT failed";
          return;
        }
        writes++;
      }
    } catch (const std::exception& e) {
      writer_error = e.what();
    }
  });
  auto r = Client::connect(options("pilaf"));
  std::mt19937_64 rng(4);
  // The races a reader detected and READ again after (Pilaf fig. 9): torn entries, records
  // freed or reused under it, probes repeated after a cuckoo move.
  auto races = [&] {
    const nlohmann::json pc = r->protocol_counters();
    return pc.at("torn_entries").get<uint64_t>() + pc.at("torn_extents").get<uint64_t>() +
           pc.at("reprobes").get<uint64_t>();
  };
  // At least 3 s and 300 GETs (a loaded CI host on tcp, where READs wait for the busy server's
  // progress, may need longer) and until a race was met; at most 60 s.
  const uint64_t kMinGets = 300;
  uint64_t gets = 0, bad = 0, raced = 0, contended = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto more = [&] {
    auto t = std::chrono::steady_clock::now();
    if (t >= t0 + std::chrono::seconds(60)) return false;
    if (t < t0 + std::chrono::seconds(3) || gets < kMinGets) return true;
    if (gets % 64 == 0) raced = races();
    return raced == 0;
  };
  while (more()) {
    std::string key = "hot" + std::to_string(rng() % kKeys), v;
    Status s = r->get(key, &v);
    gets++;
    // The retry bound (64 torn READs, docs/pilaf.md) may end a GET with kContended when the
    // writer rewrites the key all the time: no value, which is allowed; a wrong or torn value
    // never is.
    if (s == Status::kContended) {
      contended++;
      continue;
    }
    if (s != Status::kOk || !value_ok(key, v)) {
      bad++;
      ADD_FAILURE() << "GET " << key << ": " << to_string(s) << " '" << v.substr(0, 40) << "'";
      if (bad > 5) break;
    }
  }
  stop = true;
  writer.join();
  ASSERT_TRUE(writer_error.empty()) << writer_error;
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(gets, kMinGets);
  EXPECT_GT(writes.load(), 100u);
  auto pc = r->protocol_counters();
  EXPECT_EQ(pc.at("gets").get<uint64_t>(), gets);
  EXPECT_EQ(pc.at("gave_up").get<uint64_t>(), contended);
  // Seen: 3 of 68 736 GETs against 46 756 PUTs in 3 s on shm (229 torn entries), the tcp case
  // running next to it on the 2 cores.
  EXPECT_LE(contended * 1000, gets) << "more than 1 GET in 1000 gave up";
  EXPECT_GT(races(), 0u) << "no GET met the writer in 60 s, so none was tested against a race: "
                         << pc.dump();
  // Recorded for docs/pilaf.md; how many races a run meets depends on the scheduler.
  std::printf(
      "race: %llu GETs against %llu PUTs in %.1f s: %llu gave up (kContended), %llu "
      "torn entries, %llu torn extents, %llu re-probes, %.2f probes and %.2f extent READs "
      "per GET\n",
      static_cast<unsigned long long>(gets), static_cast<unsigned long long>(writes.load()),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      static_cast<unsigned long long>(contended),
      static_cast<unsigned long long>(pc.at("torn_entries").get<uint64_t>()),
      static_cast<unsigned long long>(pc.at("torn_extents").get<uint64_t>()),
      static_cast<unsigned long long>(pc.at("reprobes").get<uint64_t>()),
      pc.at("probes_per_get").get<double>(), pc.at("extent_reads_per_get").get<double>());
}

// Pilaf fig. 6: 3-way cuckoo at 75% fill needs ~1.6 entry READs per lookup. A property of the
// hashing and the table, so true on any machine; measured here through the real client.
TEST_P(PilafE2E, ProbesPerGetAtThreeQuartersFill) {
  const int kEntries = 4096, kKeys = kEntries * 3 / 4;
  start({"--pilaf-entries", std::to_string(kEntries), "--pilaf-extents", "4M"});
  auto c = Client::connect(options("pilaf"));
  int posted = 0;
  for (int i = 0; i < kKeys; ++i)
    ASSERT_EQ(c->put_async("fill-" + std::to_string(i), "v",
                           [&](Status s, std::string_view, uint64_t) {
                             EXPECT_EQ(s, Status::kOk);
                             posted++;
                           }),
              Status::kOk);
  ASSERT_EQ(c->flush(), Status::kOk);
  ASSERT_EQ(posted, kKeys);
  auto st = c->stats().at("workers").at(0).at("pilaf");
  ASSERT_EQ(st.at("growths").get<uint64_t>(), 0u)
      << "the table must stay at its size: " << st.dump();
  EXPECT_NEAR(st.at("fill").get<double>(), 0.75, 0.001);
  auto before = c->protocol_counters();
  std::string v;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(c->get("fill-" + std::to_string(i), &v), Status::kOk);
  auto after = c->protocol_counters();
  auto diff = [&](const char* k) {
    return static_cast<double>(after.at(k).get<uint64_t>() - before.at(k).get<uint64_t>());
  };
  const double probes = diff("entry_reads") / diff("gets");
  const double extents = diff("extent_reads") / diff("gets");
  std::printf("75%% fill, %d keys: %.3f entry READs and %.3f extent READs per GET\n", kKeys, probes,
              extents);
  EXPECT_GE(probes, 1.3);
  EXPECT_LE(probes, 1.9);
  // The 8-bit tag in the entry skips the record READ of slots holding other keys.
  EXPECT_LT(extents, 1.05);
  EXPECT_GE(extents, 1.0);
}

// The same lookups with the three entries READ at once: the same answers, one entry round of
// three READs per GET (plus a header READ per miss), and a model map still holds.
TEST_P(PilafE2E, ParallelProbesGiveTheSameAnswers) {
  start({"--pilaf-entries", "1024"});
  auto writer = Client::connect(options("pilaf"));
  ClientOptions po = options("pilaf");
  po.protocol_options.pilaf.parallel_probes = true;
  auto reader = Client::connect(po);
  std::map<std::string, std::string> model;
  for (int i = 0; i < 700; ++i) {
    std::string k = "par-" + std::to_string(i);
    ASSERT_EQ(writer->put(k, value_for(k, i, 40)), Status::kOk);
    model[k] = value_for(k, i, 40);
  }
  for (int i = 0; i < 700; i += 4) {
    ASSERT_EQ(writer->del("par-" + std::to_string(i)), Status::kOk);
    model.erase("par-" + std::to_string(i));
  }
  size_t answered = 0, wrong = 0;
  for (int i = 0; i < 800; ++i) {  // 100 never-written keys too
    std::string k = "par-" + std::to_string(i);
    auto it = model.find(k);
    std::string want = it == model.end() ? "" : it->second;
    ASSERT_EQ(reader->get_async(k,
                                [&, want](Status s, std::string_view v, uint64_t) {
                                  answered++;
                                  if (want.empty() ? s != Status::kNotFound
                                                   : (s != Status::kOk || v != want))
                                    wrong++;
                                }),
              Status::kOk);
  }
  ASSERT_EQ(reader->flush(), Status::kOk);
  EXPECT_EQ(answered, 800u);
  EXPECT_EQ(wrong, 0u);
  auto pc = reader->protocol_counters();
  const uint64_t gets = pc.at("gets"), retries = pc.at("torn_entries").get<uint64_t>() +
                                                 pc.at("reprobes").get<uint64_t>();
  EXPECT_EQ(gets, 800u);
  if (retries == 0) {
    EXPECT_EQ(pc.at("entry_reads").get<uint64_t>(), 3 * gets);
    EXPECT_EQ(pc.at("header_reads").get<uint64_t>(), 800u - model.size());
  }
}

// A load generator killed in the middle of its READs and PUTs: GETs left nothing on the
// server, its PUTs in flight are answered or dropped, and everyone else is served on.
TEST_P(PilafE2E, AClientKilledMidRequestLeavesTheServerServing) {
  start({"--max-clients", "64"});
  auto c = Client::connect(options("pilaf"));
  ASSERT_EQ(c->put("survivor", "still-here"), Status::kOk);
  testing::Child load({FABKV_BENCH_BIN,
                       "--server",
                       server_->address(),
                       "--provider",
                       GetParam(),
                       "--systems",
                       "fabkv:pilaf",
                       "--read-ratio",
                       "0.7",
                       "--keys",
                       "2000",
                       "--clients",
                       "4",
                       "--window",
                       "4",
                       "--duration",
                       "30",
                       "--warmup",
                       "0",
                       "--client-core",
                       "-1",
                       "--quiet"});
  // Wait until it is past loading and measuring, then kill it mid-flight.
  std::string line;
  Deadline ready = Deadline::after_ms(60000);  // sanitizer builds on a loaded CI host are slow
  uint64_t puts = 0;
  while (!ready.expired()) {
    puts = worker_sum(c->stats(), "puts");
    if (puts > 2500) break;  // loaded 2000 keys and is into the run's PUTs
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(puts, 2500u) << "the load generator never got going: " << load.stderr_excerpt();
  EXPECT_TRUE(load.kill());
  perf::remove_shm_leftovers(load.pid());
  // Its connections close; the server goes on serving this client and new ones.
  std::string v;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(c->get("survivor", &v), Status::kOk);
    ASSERT_EQ(v, "still-here");
  }
  auto fresh = Client::connect(options("pilaf-vo"));
  ASSERT_EQ(fresh->put("after-kill", "ok"), Status::kOk);
  ASSERT_EQ(c->get("after-kill", &v), Status::kOk);
  Deadline gone = Deadline::after_ms(30000);
  while (!gone.expired() && c->stats().at("clients").at("departed").get<uint64_t>() < 4)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(c->stats().at("clients").at("departed").get<uint64_t>(), 4u);
}

TEST_P(PilafE2E, ConnectRejectsWhatCannotWork) {
  start();
  ClientOptions o = options("pilaf");
  o.transport = "write";
  try {
    Client::connect(o);
    FAIL() << "pilaf with the write transport connected";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("messages"), std::string::npos) << e.what();
  }
  // A herd-only server refuses pilaf clients with the reason.
  fabkv::testing::KvServer herd_only(GetParam(), "herd");
  o = options("pilaf");
  o.server = herd_only.address();
  try {
    Client::connect(o);
    FAIL() << "pilaf connected to a herd-only server";
  } catch (const ClientError& e) {
    EXPECT_NE(std::string(e.what()).find("not served here"), std::string::npos) << e.what();
  }
}

TEST_P(PilafE2E, CliSpeaksPilaf) {
  start();
  auto run = [&](const std::string& args) {
    std::string out;
    std::string cmd = std::string(FABKV_CLI_BIN) + " --server " + server_->address() +
                      " --provider " + GetParam() + " --protocol pilaf " + args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    int rc = ::pclose(f);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  EXPECT_EQ(run("put cli-key cli-value").first, 0);
  auto [rc, out] = run("get cli-key");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "cli-value");
  EXPECT_EQ(run("del cli-key").first, 0);
  EXPECT_EQ(run("get cli-key").first, 1) << "not found exits 1";
}

TEST_P(PilafE2E, OpLogRestoresTheDataAfterARestart) {
  auto dir = std::filesystem::temp_directory_path() /
             ("fabkv-oplog-" + std::to_string(::getpid()) + "-" + GetParam());
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "kv.log").string();
  std::map<std::string, std::string> model;
  {
    start({"--oplog", log, "--workers", "2"});
    auto c = Client::connect(options("pilaf"));
    for (int i = 0; i < 200; ++i) {
      std::string k = "durable-" + std::to_string(i);
      ASSERT_EQ(c->put(k, value_for(k, i, 100)), Status::kOk);
      model[k] = value_for(k, i, 100);
    }
    for (int i = 0; i < 200; i += 3) {
      ASSERT_EQ(c->del("durable-" + std::to_string(i)), Status::kOk);
      model.erase("durable-" + std::to_string(i));
    }
    c.reset();
    EXPECT_EQ(server_->stop(), 0);
  }
  start({"--oplog", log, "--workers", "2"});
  auto c = Client::connect(options("pilaf"));
  for (int i = 0; i < 200; ++i) {
    std::string k = "durable-" + std::to_string(i), v;
    Status s = c->get(k, &v);
    if (model.count(k)) {
      EXPECT_EQ(s, Status::kOk) << k;
      EXPECT_EQ(v, model[k]) << k;
    } else {
      EXPECT_EQ(s, Status::kNotFound) << k;
    }
  }
  c.reset();
  server_.reset();
  // The log belongs to two workers' partitions: another worker count is refused with the reason.
  perf::ChildProcess wrong({FABKV_SERVER_BIN, "--provider", GetParam(), "--listen", "127.0.0.1:0",
                            "--protocols", "pilaf", "--workers", "1", "--oplog", log});
  std::string line;
  wrong.read_line(&line, Deadline::after_ms(10000));
  EXPECT_EQ(wrong.wait(Deadline::after_ms(10000)), 2) << line;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Providers, PilafE2E, ::testing::Values("shm", "tcp"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace fabkv
