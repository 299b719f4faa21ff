// ServerOptions: every fabkv-server setting with its default and trade-off, filled from the
// command line and a TOML file (flags override the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/options.h"

namespace fabkv::server {

// The protocols' own knobs (rpc, herd, pilaf, ...) come from proto/options.h.
struct ServerOptions : proto::ProtocolOptions {
  // libfabric provider: auto picks verbs with an RDMA device, else shm for a loopback
  // --listen and tcp otherwise.
  std::string provider = "auto";
  // Control channel address; port 0 picks a free one (printed in the READY line).
  std::string listen = "127.0.0.1:7000";
  std::string secret;  // clients must present it (sent in clear: trusted networks only)
  // Worker threads, each owning one partition (EREW) and pinned to its own core.
  uint32_t workers = 1;
  std::vector<int> cores;  // worker i -> cores[i]; empty = core i; -1 = unpinned
  // cache (lossy, evicts) | store (lossless, kNoSpace) | pilaf (lossless, self-verifying cuckoo
  // table and extents that clients READ, Pilaf sec. 3). "" = pilaf when a pilaf protocol is
  // served, else cache (resolve_defaults).
  std::string engine;
  size_t memory = size_t{256} << 20;     // engine bytes, split evenly across workers
  size_t max_value = 64 * 1024;          // largest value accepted
  // Any mix of proto/registry.h's protocols: all of them reach the same engine (the same data).
  std::vector<std::string> protocols = {"herd"};
  uint32_t max_clients = 64;  // Nc: clients at once (request region = workers*Nc*W*slot_size)
  std::string log_level = "info";
  // Asynchronous log of every PUT/DELETE (Pilaf sec. 4), one file per worker:
  // "<oplog>.<worker>"; replayed at start. "" = off (the default).
  std::string oplog;
  bool oplog_fsync = false;  // fdatasync each written batch (durable, slower)
};

// True when `o` serves a protocol that READs the pilaf engine's memory or sends it messages.
bool serves_pilaf(const ServerOptions& o);

// Fills in what depends on other settings (engine "" -> pilaf or cache).
void resolve_defaults(ServerOptions* o);

// Parses "64M", "1G", "4096" (K/M/G/T = powers of 1024). Throws std::invalid_argument.
size_t parse_bytes(const std::string& s);

// Loads a TOML file into `o` (keys are the flag names without dashes, e.g. workers = 2,
// memory = "1G", cores = [0, 1]). Throws std::runtime_error with the file's line on error.
void load_toml(const std::string& path, ServerOptions* o);

// Checks ranges and combinations; throws std::invalid_argument with a user-facing message.
void validate(const ServerOptions& o);

}  // namespace fabkv::server
