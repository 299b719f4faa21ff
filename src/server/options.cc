#include "server/options.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/engine.h"
#include "store/limits.h"

namespace fabkv::server {

namespace {

// The engines registry lines name (proto/registry.h): --engine's words beyond cache, store, none.
std::vector<std::string> engines_of_protocols() {
  std::vector<std::string> out;
  for (const std::string& e : proto::engine_names())
    if (!store::engine_kind_from_string(e) && e != proto::EngineNeed::kNone) out.push_back(e);
  return out;
}

}  // namespace

void declare_knobs(Knobs& k, ServerOptions* o) {
  auto s = k.section("", "Server");
  s.text("provider", "--provider", &o->provider,
         "auto|shm|tcp|verbs: auto picks verbs with an RDMA device, else shm for a loopback "
         "--listen, else tcp");
  s.text("listen", "--listen", &o->listen, "control channel HOST:PORT (port 0: any free port)");
  s.text("secret", "--secret", &o->secret,
         "shared secret clients must prove they know (default: none). Never sent: a client answers "
         "a random nonce with an HMAC-SHA256 of it; a client that has a secret is refused by a "
         "server without one. The data path is not encrypted");
  s.number("workers", "--workers", &o->workers, "worker threads, one partition each (EREW)")
      .range(1, 64);
  s.list("cores", "--cores", &o->cores,
         "cores for the workers, comma-separated (default: worker i on core i; -1 unpinned)");
  s.text("engine", "--engine", &o->engine,
         fmt::format("cache (lossy, FIFO eviction) | store (lossless, kNoSpace when full) | an "
                     "engine a protocol brings, whose memory its clients reach: {} (docs/) | "
                     "none (no engine: a server of sequencers only); default: what the "
                     "protocols served need, else cache",
                     fmt::join(engines_of_protocols(), " | ")))
      .one_of(proto::engine_names());
  s.bytes("memory", "--memory", &o->memory, "engine memory across all workers (K/M/G suffixes)");
  s.bytes("max_value", "--max-value", &o->max_value, "largest value accepted")
      .range(1, store::kMaxValueSizeLimit);
  s.number("index_buckets", "--index-buckets", &o->index_buckets,
           "index buckets per worker of the cache, store and hydradb engines, rounded down to "
           "a power of two (0: 1/8 of the worker's memory); a cache whose full bucket takes a "
           "new key gives up its oldest entry (index_drops)")
      .range(0, uint32_t{1} << 30);
  s.list("protocols", "--protocols", &o->protocols,
         "access protocols to serve, any of " + proto::names(",") + " (all reach the same data)");
  s.number("max_clients", "--max-clients", &o->max_clients,
           "Nc: clients at once (request region = workers x Nc x W x slot size)")
      .range(1, 4096);
  s.text("oplog", "--oplog", &o->oplog,
         "log every acknowledged PUT/DELETE to files named FILE.<worker>.* and replay them at "
         "start (Pilaf sec. 4; docs/durability.md); off by default");
  s.text("oplog_sync", "--oplog-sync", &o->oplog_sync,
         "when the log reaches the disk, as Redis's appendfsync: always (a write is answered "
         "only once its record is on stable storage; one fdatasync per batch of writes) | "
         "everysec (default: at most about a second of acknowledged writes lost to a machine "
         "crash) | no (the page cache decides; a crash of the process loses nothing)")
      .one_of({"always", "everysec", "no"});
  s.flag("oplog_fsync", "--oplog-fsync", &o->oplog_fsync,
         "the older spelling of --oplog-sync always");
  s.number("oplog_rewrite_percentage", "--oplog-rewrite-percentage", &o->oplog_rewrite_percentage,
           "rewrite the log as its live items once it has grown by this % since the last "
           "rewrite (Redis's auto-aof-rewrite-percentage; 0: never): restart time and disk use "
           "stay bounded by the live data, at the price of re-reading the log in the background")
      .range(0, 100000);
  s.bytes("oplog_rewrite_min_size", "--oplog-rewrite-min-size", &o->oplog_rewrite_min_size,
          "no rewrite while the log holds less than this (Redis's auto-aof-rewrite-min-size)");
  s.number("test_rewrite_pause_ms", "--test-rewrite-pause-ms", &o->test_rewrite_pause_ms,
           "TEST ONLY: every log rewrite waits this many ms before it renames its new base into "
           "place, so that a test can kill the server in the middle of one (default 0: none)");
  s.number("test_oplog_write_delay_ms", "--test-oplog-write-delay-ms",
           &o->test_oplog_write_delay_ms,
           "TEST ONLY: the log's writer waits this many ms before it writes each batch, so that "
           "a test can kill the server between a command and its record reaching the file "
           "(default 0: none)");
  s.text("data_dir", "--data-dir", &o->data_dir,
         "directory for state that survives a restart (the sequencers' high-water mark, "
         "docs/sequencer.md); required when a sequencer is served");
  s.choice("poll", "--poll", &o->poll.mode,
           {{to_string(PollMode::kSpin), PollMode::kSpin},
            {to_string(PollMode::kAdaptive), PollMode::kAdaptive}},
           "how an idle worker waits: spin (polls without pause: lowest latency, a core per "
           "worker even when idle) | adaptive (polls --poll-spin-us after its last work, then "
           "blocks on the fabric's wait object, or sleeps up to --poll-sleep-us where nothing "
           "can wake it, e.g. on shm)");
  s.number("poll_spin_us", "--poll-spin-us", &o->poll.spin_us,
           "adaptive: microseconds a worker keeps polling after its last work before it blocks "
           "(longer: fewer wake-ups under sparse load, more CPU when idle)")
      .range(0, 10000000);
  s.number("poll_sleep_us", "--poll-sleep-us", &o->poll.sleep_us,
           "adaptive, where nothing wakes a blocked worker (shm; requests WRITten into memory on "
           "a provider that signals completions only): longest sleep between polls (the worst "
           "added latency after an idle stretch; longer: less idle CPU)")
      .range(PollOptions::kFirstSleepUs, 1000000);
  s.text("log", "--log", &o->log_level, "trace|debug|info|warn|error|off");
  s.text("memcached", "--memcached", &o->memcached,
         "also serve memcached's text, meta and binary protocols on HOST:PORT (port 0: any free "
         "port, printed as 'MEMCACHED host:port' after READY), on the same data; off by default "
         "(docs/memcached.md)");
  s.text("name", "--name", &o->name,
         "this server's name on a cluster's ketama ring, as memcached clients and twemproxy "
         "name it ('host' for port 11211, else 'host:port'); default: that of the --memcached "
         "address, else of the --listen address (docs/cluster.md)");
  s.number("memcached_max_conns", "--memcached-max-conns", &o->memcached_max_conns,
           "memcached connections at once; past it a new one gets 'ERROR Too many open "
           "connections' and is closed, as memcached does past -c (each takes a descriptor and "
           "its buffers)")
      .range(1, 1000000);
  s.bytes("memcached_item_size", "--memcached-item-size", &o->memcached_item_size,
          "the largest memcached item (memcached's -I): values up to it are stored through "
          "--memcached on the cache and store engines; the fabric protocols keep --max-value")
      .range(1, store::kMaxValueSizeLimit);
  s.bytes("memcached_conn_memory", "--memcached-conn-memory", &o->memcached_conn_memory,
          "what all memcached connections' buffers may hold together; past it they wait, and "
          "those whose clients have read nothing for 100 ms are closed (docs/memcached.md, "
          "'Memory bounds'); larger: more slow readers tolerated, more memory at risk")
      .range(size_t{1} << 20, size_t{1} << 40);
  proto::declare_knobs(k, o);
}

void load_toml(const std::string& path, ServerOptions* o) {
  Knobs k;
  declare_knobs(k, o);
  k.load_toml(path);
}

std::string_view needed_engine(const ServerOptions& o) {
  // The first protocol that needs an engine of its own decides; validate()
  // refuses a second protocol that needs another one.
  bool any = false;
  for (const auto& name : o.protocols) {
    const proto::Info* p = proto::find(name);
    if (p && p->engine != proto::EngineNeed::kAny && p->engine != proto::EngineNeed::kNone)
      return p->engine;
    if (!p || p->engine != proto::EngineNeed::kNone) any = true;
  }
  return any ? proto::EngineNeed::kAny : proto::EngineNeed::kNone;
}

std::string_view engine_for(std::string_view need) {
  return need == proto::EngineNeed::kAny ? store::to_string(store::EngineKind::kCache) : need;
}

size_t engine_max_value(const ServerOptions& o) {
  if (o.memcached.empty()) return o.max_value;
  const std::string_view engine = o.engine.empty() ? engine_for(needed_engine(o)) : o.engine;
  if (!store::engine_kind_from_string(engine)) return o.max_value;
  return std::max(o.max_value, o.memcached_item_size);
}

void resolve_defaults(ServerOptions* o) {
  if (o->engine.empty()) o->engine = std::string(engine_for(needed_engine(*o)));
  if (o->oplog_sync.empty()) o->oplog_sync = o->oplog_fsync ? "always" : "everysec";
}

void validate(const ServerOptions& o) {
  if (o.oplog_fsync && o.oplog_sync != "always" && !o.oplog_sync.empty())
    throw std::invalid_argument(fmt::format(
        "--oplog-fsync is --oplog-sync always; it contradicts --oplog-sync {}", o.oplog_sync));
  {
    // Every knob's own range, on a copy (the knobs bind the variables they check).
    ServerOptions copy = o;
    Knobs k;
    declare_knobs(k, &copy);
    k.check();
  }
  if (o.protocols.empty()) throw std::invalid_argument("--protocols is empty");
  const bool engineless = needed_engine(o) == proto::EngineNeed::kNone;
  // One engine per worker: protocols whose clients reach different engines' memory cannot share
  // a server, nor can two protocols that lay the same engine out differently (proto::Info::server
  // differs: farm's values inline, farm-var's pointers).
  const proto::Info* reader = nullptr;
  for (const auto& name : o.protocols) {
    const proto::Info* p = proto::find(name);
    if (p == nullptr || p->engine == proto::EngineNeed::kAny ||
        p->engine == proto::EngineNeed::kNone)
      continue;
    if (reader != nullptr && reader->server != p->server)
      throw std::invalid_argument(fmt::format(
          "protocols '{}' and '{}' cannot share a server: their clients reach {} (serve them "
          "from two servers)",
          reader->name, name,
          reader->engine == p->engine
              ? fmt::format("differently laid out memory of the {} engine", p->engine)
              : fmt::format("different engines' memory ({} and {})", reader->engine, p->engine)));
    if (reader == nullptr) reader = p;
  }
  for (const auto& name : o.protocols) {
    const proto::Info* p = proto::find(name);
    if (!p)
      throw std::invalid_argument("unknown protocol '" + name +
                                  "' (this build serves: " + proto::names() + ")");
    if (p->engine == proto::EngineNeed::kNone) {
      if (o.data_dir.empty())
        throw std::invalid_argument(fmt::format(
            "protocol '{}' needs --data-dir: it persists the high-water mark of the values it "
            "handed out there, so that a restart never hands one out again",
            name));
    } else if (p->engine == proto::EngineNeed::kAny) {
      if (o.engine == proto::EngineNeed::kNone)
        throw std::invalid_argument(fmt::format(
            "protocol '{}' needs an engine (--engine cache or store), not '{}'", name, o.engine));
    } else if (o.engine != p->engine) {
      throw std::invalid_argument(fmt::format(
          "protocol '{}' needs --engine {}: its clients READ that engine's memory (leave "
          "--engine out to get it), not '{}'",
          name, p->engine, o.engine));
    }
    // The op log sees only what the worker executes: a replay would bring back old values.
    if (proto::clients_write_engine(*p) && !o.oplog.empty())
      throw std::invalid_argument(fmt::format(
          "--oplog cannot serve protocol '{}': its clients PUT by CAS and WRITE straight into "
          "the engine's memory, which the worker never sees, so the log would miss those "
          "PUTs and a replay would bring back old values",
          name));
  }
  size_t sequencers = 0;
  for (const auto& name : o.protocols)
    if (proto::find(name)->engine == proto::EngineNeed::kNone) ++sequencers;
  // Each sequencer hands out values of its own counter (seq-atomic's lives in memory clients
  // add to): two on one server would hand out the same values.
  if (sequencers > 1)
    throw std::invalid_argument("serve at most one sequencer per server (--protocols)");
  if (!o.memcached.empty() && engineless)
    throw std::invalid_argument(
        "--memcached needs key-value data: serve a protocol with an engine (not only sequencers)");
  if (!engineless && o.memory / o.workers < 4 * (engine_max_value(o) + 512))
    throw std::invalid_argument(
        o.max_value == engine_max_value(o)
            ? "--memory too small for the workers and --max-value"
            : "--memory too small for the workers and --memcached-item-size");
}

}  // namespace fabkv::server
