// ServerOptions: every fabkv-server setting with its default and trade-off, filled from the
// command line and a TOML file (flags override the file). Each setting's flag, TOML key, help
// and range are declared once, in options.cc (declare_knobs; the protocols' own in their
// folders' options.cc), with common/knobs.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/knobs.h"
#include "common/poll.h"
#include "proto/options.h"
#include "proto/registry.h"

namespace fabkv::server {

// The protocols' own knobs come from proto/options.h.
struct ServerOptions : proto::ProtocolOptions {
  // libfabric provider: auto picks verbs with an RDMA device, else shm for a loopback
  // --listen and tcp otherwise.
  std::string provider = "auto";
  // Control channel address; port 0 picks a free one (printed in the READY line).
  std::string listen = "127.0.0.1:7000";
  std::string secret;  // clients must prove it (challenge-response; docs/control-channel.md)
  // Worker threads, each owning one partition (EREW) and pinned to its own core.
  uint32_t workers = 1;
  std::vector<int> cores;  // worker i -> cores[i]; empty = core i; -1 = unpinned
  // cache (lossy, evicts) | store (lossless, kNoSpace) | an engine a protocol brings, whose
  // memory its clients READ (proto::engine_names()). "" = what the protocols served need
  // (needed_engine), else cache (resolve_defaults).
  std::string engine;
  size_t memory = size_t{256} << 20;  // engine bytes, split evenly across workers
  size_t max_value = 64 * 1024;       // largest value accepted
  // Index buckets per worker of the cache, store and hydradb engines, rounded down to a power
  // of two; 0: the engine's default (1/8 of the worker's memory in buckets, store/engine.h).
  uint32_t index_buckets = 0;
  // Any mix of proto/registry.h's protocols: all of them reach the same engine (the same data).
  std::vector<std::string> protocols = {proto::info(proto::kDefault).name};
  uint32_t max_clients = 64;  // Nc: clients at once (request region = workers*Nc*W*slot_size)
  // How idle workers wait (docs/server.md, "Polling"): spin, or adaptive (poll for
  // poll.spin_us after the last work, then block on the fabric's wait object, or sleep up to
  // poll.sleep_us where nothing can wake the worker). Every wait is bounded. Adaptive by
  // default: as fast as spin under a closed loop, ~0.5% of a core instead of a whole one when
  // idle; a request after an idle stretch pays a wake-up (measured, docs/server.md).
  PollOptions poll{.mode = PollMode::kAdaptive};
  std::string log_level = "info";
  // Log of every acknowledged PUT/DELETE (Pilaf sec. 4), one per worker, in files named after
  // "<oplog>.<worker>" (server/oplog.h); replayed at start. "" = off (the default).
  std::string oplog;
  // Redis's appendfsync (docs/durability.md): "always" (an answer leaves only once its record
  // is on stable storage: group commit), "everysec" (at most about a second of acknowledged
  // writes lost to a machine crash), "no" (the page cache decides). "" = everysec, or always
  // with oplog_fsync, its older spelling.
  std::string oplog_sync;
  bool oplog_fsync = false;
  // Rewrite the log (compaction) once it has grown by this % since the last rewrite and holds
  // at least oplog_rewrite_min_size bytes (Redis's auto-aof-rewrite-*); 0 = never.
  uint32_t oplog_rewrite_percentage = 100;
  size_t oplog_rewrite_min_size = size_t{64} << 20;
  // TEST ONLY (tests/client/durability_test.cc kills a server in the middle of a rewrite):
  // every rewrite waits this long before it renames its new base into place; 0 = no wait.
  uint32_t test_rewrite_pause_ms = 0;
  uint32_t test_oplog_write_delay_ms = 0;
  // Where the server keeps state that must survive a restart: the sequencers' high-water mark
  // ("<data_dir>/sequence.hwm", docs/sequencer.md). Required when a sequencer is served.
  std::string data_dir;
  // memcached's text, meta and binary protocols over TCP on HOST:PORT, on the same engines
  // and data (docs/memcached.md); "" = off (the default).
  std::string memcached;
  uint32_t memcached_max_conns = 4096;  // past it: "ERROR Too many open connections", closed
  // The largest memcached item (memcached's -I, 1 MiB by default): the cache and store engines
  // take values up to it when --memcached is on (engine_max_value); the fabric protocols keep
  // --max-value, which sizes every client's buffers.
  size_t memcached_item_size = size_t{1} << 20;
  // The bytes all memcached connections' buffers may hold together (input, answers not yet
  // read, forwarded commands): past it they wait, and those whose clients have read nothing for
  // a while are closed (docs/memcached.md, "Memory bounds").
  size_t memcached_conn_memory = size_t{1} << 30;
  // This server's name on a cluster's ketama ring (docs/cluster.md), told to every client in
  // the handshake so that a cluster client whose list names it otherwise refuses it rather
  // than place keys where memcached's clients would not. "" = the ring name of the memcached
  // listener's address, else of the control address ("host" for port 11211, else
  // "host:port"); none when that host is a wildcard (0.0.0.0, ::).
  std::string name;
};

// What the served protocols ask of the engine (proto/registry.h, Info::engine): the engine of
// the first protocol that brings one, EngineNeed::kNone when none of them needs an engine (only
// sequencers), else EngineNeed::kAny. Unknown protocol names and protocols needing two engines
// are validate()'s business.
std::string_view needed_engine(const ServerOptions& o);
// The engine (--engine) that satisfies a need: cache (the default) for kAny, else the need
// itself (an engine's name, or "none": the worker then makes no engine).
std::string_view engine_for(std::string_view need);

// The largest value the engine takes: --max-value, or memcached's item size when the memcached
// front end is on and the engine is cache or store (their values reach fabric clients only
// through the worker's answers, which refuse a value above --max-value with kTooLarge:
// Worker::execute_st). The engines whose memory clients READ keep --max-value (their records
// and tables are sized by it).
size_t engine_max_value(const ServerOptions& o);

// Fills in what depends on other settings (engine "" -> engine_for(needed_engine(o))).
void resolve_defaults(ServerOptions* o);

// "64M", "1G", "4096" (common/knobs.h).
using fabkv::parse_bytes;

// Declares every setting of `o` on `k` (flag, TOML table and key, help, group, range): the
// general ones at the file's top level, the protocols' in their tables (proto/options.h).
void declare_knobs(Knobs& k, ServerOptions* o);

// Loads a TOML file into `o`: general settings at the top level (workers = 2, memory = "1G",
// cores = [0, 1]), the protocols' in their tables ([rpc] window = 8).
// Throws std::runtime_error with the file's line on error (unknown key, a key that moved into
// a table, wrong type, out of range).
void load_toml(const std::string& path, ServerOptions* o);

// Checks ranges and combinations; throws std::invalid_argument with a user-facing message.
void validate(const ServerOptions& o);

}  // namespace fabkv::server
