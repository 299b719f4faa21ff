#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "proto/registry.h"
#include "server/options.h"

namespace fabkv::server {
namespace {

// Writes `text` to a temporary TOML file; removed when it goes out of scope. Named after this
// process: ctest -j runs these tests as processes side by side, and a shared name let one
// remove or rewrite the file another was reading (seen failing two of them in make test-asan).
class TomlFile {
 public:
  explicit TomlFile(const std::string& text)
      : path_(::testing::TempDir() + std::to_string(::getpid()) + "-fabkv-server-test.toml") {
    std::ofstream f(path_);
    f << text;
  }
  ~TomlFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The message load_toml throws for `text` ("" when it loads).
std::string toml_error(const std::string& text, ServerOptions* o = nullptr) {
  ServerOptions scratch;
  TomlFile f(text);
  try {
    load_toml(f.path(), o ? o : &scratch);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string validate_error(const ServerOptions& o) {
  try {
    validate(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ServerOptions, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64K"), 64u << 10);
  EXPECT_EQ(parse_bytes("256M"), 256u << 20);
  EXPECT_EQ(parse_bytes("2GiB"), size_t{2} << 30);
  EXPECT_THROW(parse_bytes(""), std::invalid_argument);
  EXPECT_THROW(parse_bytes("12Q"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("lots"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("-5"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("99999999999999T"), std::invalid_argument);
  EXPECT_EQ(format_bytes(64u << 10), "64K");
  EXPECT_EQ(format_bytes(size_t{8} << 20), "8M");
  EXPECT_EQ(format_bytes(1000), "1000");
}

TEST(ServerOptions, LoadsTomlAndRejectsUnknownKeys) {
  ServerOptions o;
  ASSERT_EQ(toml_error("workers = 2\nmemory = \"128M\"\nengine = \"store\"\ncores = [0, 1]\n"
                       "[herd]\ntransport = \"send\"\n[rpc]\nbatching = false\n",
                       &o),
            "");
  EXPECT_EQ(o.workers, 2u);
  EXPECT_EQ(o.memory, size_t{128} << 20);
  EXPECT_EQ(o.engine, "store");
  EXPECT_EQ(o.herd.transport, herd::TransportChoice::kSend);
  EXPECT_EQ(o.cores, (std::vector<int>{0, 1}));
  EXPECT_FALSE(o.rpc.batching);

  // An unknown key: refused with its line and the known keys and tables.
  std::string e = toml_error("workers = 2\nwokers = 2\n");
  EXPECT_NE(e.find("fabkv-server-test.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown setting 'wokers'"), std::string::npos) << e;
  EXPECT_NE(e.find("workers"), std::string::npos) << e;
  EXPECT_NE(e.find("[rpc]"), std::string::npos) << e;
  // Unknown inside a table: the table's keys.
  e = toml_error("[rpc]\nwindow = 4\nwindoww = 4\n");
  EXPECT_NE(e.find(":3:"), std::string::npos) << e;
  EXPECT_NE(
      e.find("unknown setting 'windoww' in [rpc] (known: window, slot_size, queues, batching)"),
      std::string::npos)
      << e;
  EXPECT_NE(toml_error("[farm]\nwindow = 4\n"), "");
  // A syntax error: the file's line.
  e = toml_error("workers = [\n");
  EXPECT_NE(e.find("fabkv-server-test.toml:"), std::string::npos) << e;
  // Wrong types and ranges, with where.
  e = toml_error("\n[rpc]\nwindow = \"four\"\n");
  EXPECT_NE(e.find(":3: [rpc] window: expected an integer"), std::string::npos) << e;
  e = toml_error("[rpc]\nwindow = 65\n");
  EXPECT_NE(e.find(":2: --window must be 1..64"), std::string::npos) << e;
  EXPECT_NE(toml_error("[herd]\ntransport = \"pigeon\"\n"), "");
  EXPECT_NE(toml_error("rpc = 4\n"), "") << "a table's name used as a key";
}

TEST(ServerOptions, ProtocolKnobsLiveInTheirTables) {
  ServerOptions o;
  ASSERT_EQ(toml_error("[rpc]\nwindow = 8\nslot_size = 2048\nqueues = 2\n"
                       "[pilaf]\nentries = \"1M\"\nextents = 16777216\ngrace_ms = 250\n",
                       &o),
            "");
  EXPECT_EQ(o.rpc.window, 8u);
  EXPECT_EQ(o.rpc.slot_size, 2048u);
  EXPECT_EQ(o.rpc.queues, 2u);
  EXPECT_EQ(o.pilaf.entries, size_t{1} << 20);
  EXPECT_EQ(o.pilaf.extents, size_t{16} << 20);
  EXPECT_EQ(o.pilaf.grace_ms, 250u);
}

TEST(ServerOptions, FlatKeysOfTablesSayWhereTheyMoved) {
  std::string e = toml_error("workers = 1\nwindow = 4\n");
  EXPECT_NE(e.find(":2: window moved to [rpc]"), std::string::npos) << e;
  e = toml_error("transport = \"send\"\n");
  EXPECT_NE(e.find("transport moved to [herd]"), std::string::npos) << e;
  e = toml_error("pilaf_entries = \"1M\"\n");
  EXPECT_NE(e.find("pilaf_entries moved to [pilaf] as entries"), std::string::npos) << e;
}

// Runs the knobs the way fabkv-server does: flags parsed, the file loaded, the flags applied.
void parse(ServerOptions* o, std::vector<const char*> argv, const std::string& toml = "") {
  Knobs k;
  declare_knobs(k, o);
  CLI::App app;
  k.add_to(app);
  argv.insert(argv.begin(), "fabkv-server");
  app.parse(static_cast<int>(argv.size()), argv.data());
  if (!toml.empty()) {
    TomlFile f(toml);
    k.load_toml(f.path());
  }
  k.apply_flags();
}

TEST(ServerOptions, FlagsParseAndOverrideTheFile) {
  ServerOptions o;
  parse(&o, {"--pilaf-grace-ms", "250", "--pilaf-entries", "1M", "--transport", "send",
             "--batching", "off", "--cores", "0,-1", "--protocols", "herd,pilaf"});
  EXPECT_EQ(o.pilaf.grace_ms, 250u);
  EXPECT_EQ(o.pilaf.entries, size_t{1} << 20);
  EXPECT_EQ(o.herd.transport, herd::TransportChoice::kSend);
  EXPECT_FALSE(o.rpc.batching);
  EXPECT_EQ(o.cores, (std::vector<int>{0, -1}));
  EXPECT_EQ(o.protocols, (std::vector<std::string>{"herd", "pilaf"}));

  o = ServerOptions();
  parse(&o, {"--window", "16", "--workers", "3", "--oplog-fsync"},
        "workers = 2\nmax_clients = 8\n[rpc]\nwindow = 8\nqueues = 2\n[pilaf]\ngrace_ms = 100\n");
  EXPECT_EQ(o.rpc.window, 16u) << "the flag wins";
  EXPECT_EQ(o.workers, 3u) << "the flag wins";
  EXPECT_EQ(o.rpc.queues, 2u) << "the file, no flag";
  EXPECT_EQ(o.max_clients, 8u) << "the file, no flag";
  EXPECT_EQ(o.pilaf.grace_ms, 100u) << "the file, no flag";
  EXPECT_TRUE(o.oplog_fsync);

  // --oplog-sync: Redis's appendfsync words, everysec by default, --oplog-fsync its older
  // spelling of always (and refused beside another mode).
  o = ServerOptions();
  parse(&o, {"--oplog", "/tmp/x"});
  resolve_defaults(&o);
  EXPECT_EQ(o.oplog_sync, "everysec");
  o = ServerOptions();
  parse(&o, {"--oplog", "/tmp/x", "--oplog-fsync"});
  resolve_defaults(&o);
  EXPECT_EQ(o.oplog_sync, "always");
  o = ServerOptions();
  parse(&o,
        {"--oplog-sync", "no", "--oplog-rewrite-percentage", "50", "--oplog-rewrite-min-size",
         "1M"},
        "oplog = \"/tmp/x\"\n");
  resolve_defaults(&o);
  EXPECT_EQ(o.oplog_sync, "no");
  EXPECT_EQ(o.oplog_rewrite_percentage, 50u);
  EXPECT_EQ(o.oplog_rewrite_min_size, size_t{1} << 20);
  o = ServerOptions();
  parse(&o, {}, "oplog = \"/tmp/x\"\noplog_sync = \"always\"\n");
  EXPECT_EQ(o.oplog_sync, "always");
  o = ServerOptions();
  parse(&o, {"--oplog-fsync", "--oplog-sync", "everysec"});
  resolve_defaults(&o);
  try {
    validate(o);
    ADD_FAILURE() << "--oplog-fsync with --oplog-sync everysec accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("contradicts --oplog-sync everysec"), std::string::npos)
        << e.what();
  }
  o = ServerOptions();
  EXPECT_THROW(parse(&o, {"--oplog-sync", "sometimes"}), std::invalid_argument);

  o = ServerOptions();
  EXPECT_THROW(parse(&o, {"--pilaf-grace-ms", "soon"}), std::invalid_argument);
  EXPECT_THROW(parse(&o, {"--pilaf-grace-ms", "0"}), std::invalid_argument);
  EXPECT_THROW(parse(&o, {"--window", "0"}), std::invalid_argument);
  EXPECT_THROW(parse(&o, {"--transport", "pigeon"}), std::invalid_argument);
}

TEST(ServerOptions, PollModeAndBudgets) {
  ServerOptions o;
  EXPECT_EQ(o.poll.mode, PollMode::kAdaptive) << "the server's default";
  EXPECT_EQ(o.poll.spin_us, 100u);
  EXPECT_EQ(o.poll.sleep_us, 1000u);
  parse(&o, {"--poll", "spin"});
  EXPECT_EQ(o.poll.mode, PollMode::kSpin);
  parse(&o, {"--poll", "adaptive", "--poll-spin-us", "0", "--poll-sleep-us", "200"});
  EXPECT_EQ(o.poll.mode, PollMode::kAdaptive);
  EXPECT_EQ(o.poll.spin_us, 0u);
  EXPECT_EQ(o.poll.sleep_us, 200u);
  o = ServerOptions();
  parse(&o, {"--poll-spin-us", "30"},
        "poll = \"spin\"\npoll_spin_us = 500\npoll_sleep_us = 2000\n");
  EXPECT_EQ(o.poll.mode, PollMode::kSpin) << "the file";
  EXPECT_EQ(o.poll.spin_us, 30u) << "the flag wins";
  EXPECT_EQ(o.poll.sleep_us, 2000u);
  o = ServerOptions();
  EXPECT_THROW(parse(&o, {"--poll", "sometimes"}), std::invalid_argument);
  EXPECT_THROW(parse(&o, {"--poll-sleep-us", "10"}), std::invalid_argument);  // < 50
  EXPECT_THROW(parse(&o, {"--poll-spin-us", "20000000"}), std::invalid_argument);
  EXPECT_NE(toml_error("poll = \"yes\"\n"), "");
}

TEST(ServerOptions, ValidatesRanges) {
  ServerOptions o;
  EXPECT_THROW(validate(o), std::invalid_argument) << "engine not resolved yet";
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "cache");
  EXPECT_NO_THROW(validate(o));
  o.workers = 0;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.engine = "btree";
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.protocols = {proto::info(proto::kDefault).name, "memcache"};
  resolve_defaults(&o);
  const std::string e = validate_error(o);
  EXPECT_EQ(e, "unknown protocol 'memcache' (this build serves: " + proto::names() + ")");
  for (const proto::Info& p : proto::protocols())
    EXPECT_NE(e.find(p.name), std::string::npos) << "lists " << p.name;
  o = ServerOptions();
  o.protocols = {};
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.rpc.slot_size = 100;  // not a multiple of 8
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.pilaf.grace_ms = 0;
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(ServerOptions, PilafProtocolsPickThePilafEngine) {
  ServerOptions o;
  o.protocols = {"herd", "pilaf", "pilaf-vo"};
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "pilaf");
  EXPECT_NO_THROW(validate(o));
  o.engine = "cache";  // pilaf clients READ the pilaf engine's table: nothing else will do
  const std::string e = validate_error(o);
  EXPECT_NE(e.find("protocol 'pilaf' needs --engine pilaf"), std::string::npos) << e;
  EXPECT_NE(e.find("READ"), std::string::npos) << "says why: " << e;
  EXPECT_NE(e.find("'cache'"), std::string::npos) << e;
  o = ServerOptions();
  o.protocols = {"pilaf"};
  o.pilaf.entries = 4;
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.pilaf.entries = 1024;
  o.pilaf.extents = 100;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = ServerOptions();
  o.rpc.slot_size = 100;  // not a multiple of 8
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(ServerOptions, FarmProtocolsPickTheFarmEngineAndServeAlone) {
  ServerOptions o;
  o.protocols = {"herd", "farm", "server-reply"};
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "farm");
  EXPECT_NO_THROW(validate(o));
  o.engine = "store";
  std::string e = validate_error(o);
  EXPECT_NE(e.find("protocol 'farm' needs --engine farm"), std::string::npos) << e;
  // One engine per worker: farm with pilaf, and farm with farm-var (values inline against
  // pointers in the buckets) are refused, whatever the order, with both names.
  for (const auto& pair : std::vector<std::vector<std::string>>{{"farm", "pilaf"},
                                                                {"pilaf-vo", "farm-var"},
                                                                {"farm-var", "farm"}}) {
    o = ServerOptions();
    o.protocols = {"herd", pair[0], pair[1]};
    resolve_defaults(&o);
    e = validate_error(o);
    EXPECT_NE(e.find("cannot share a server"), std::string::npos) << e;
    EXPECT_NE(e.find("'" + pair[0] + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("'" + pair[1] + "'"), std::string::npos) << e;
  }
  o = ServerOptions();
  o.protocols = {"farm"};
  o.farm.inline_bytes = 8;  // below a pointer
  resolve_defaults(&o);
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(ServerOptions, DrtmPicksItsEngineAndRefusesWhatCannotServeIt) {
  ServerOptions o;
  o.protocols = {"herd", "server-reply", "drtm"};
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "drtm");
  EXPECT_NO_THROW(validate(o));
  o.engine = "store";
  std::string e = validate_error(o);
  EXPECT_NE(e.find("protocol 'drtm' needs --engine drtm"), std::string::npos) << e;
  // Two protocols whose clients reach two different engines' memory: one server cannot.
  o = ServerOptions();
  o.protocols = {"pilaf", "drtm"};
  resolve_defaults(&o);
  e = validate_error(o);
  EXPECT_NE(e.find("'pilaf' and 'drtm' cannot share a server"), std::string::npos) << e;
  EXPECT_NE(e.find("different engines' memory (pilaf and drtm)"), std::string::npos) << e;
  // The op log never sees a PUT made by CAS and WRITE.
  o = ServerOptions();
  o.protocols = {"drtm"};
  o.oplog = "/tmp/never";
  resolve_defaults(&o);
  e = validate_error(o);
  EXPECT_NE(e.find("--oplog cannot serve protocol 'drtm'"), std::string::npos) << e;
  EXPECT_NE(e.find("never sees"), std::string::npos) << "says why: " << e;
}

TEST(ServerOptions, EngineFollowsTheRegistry) {
  // Every protocol of the registry: a server of it alone gets the engine it needs and validates.
  for (const proto::Info& p : proto::protocols()) {
    ServerOptions o;
    o.protocols = {p.name};
    resolve_defaults(&o);
    EXPECT_EQ(needed_engine(o), p.engine) << p.name;
    EXPECT_EQ(o.engine, engine_for(p.engine)) << p.name;
    if (p.engine == proto::EngineNeed::kNone) {
      // A sequencer keeps its high-water mark in --data-dir: refused without one.
      EXPECT_NE(validate_error(o).find("--data-dir"), std::string::npos) << p.name;
      o.data_dir = "/tmp";
    }
    EXPECT_NO_THROW(validate(o)) << p.name;
  }
}

TEST(ServerOptions, SequencersRunWithoutAnEngineAndOneAtATime) {
  ServerOptions o;
  o.protocols = {"seq-rpc"};
  o.data_dir = "/tmp";
  resolve_defaults(&o);
  EXPECT_EQ(needed_engine(o), proto::EngineNeed::kNone);
  EXPECT_EQ(o.engine, "none");
  EXPECT_NO_THROW(validate(o));
  o.protocols = {"seq-rpc", "seq-atomic"};  // two counters would hand out the same values
  EXPECT_NE(validate_error(o).find("at most one sequencer"), std::string::npos);
  o = ServerOptions();
  o.protocols = {"herd", "seq-rpc"};  // with a key-value protocol: its engine
  o.data_dir = "/tmp";
  resolve_defaults(&o);
  EXPECT_EQ(o.engine, "cache");
  EXPECT_NO_THROW(validate(o));
  o.engine = "none";
  EXPECT_NE(validate_error(o).find("needs an engine"), std::string::npos);
}

}  // namespace
}  // namespace fabkv::server
