// EngineRestore: rebuilds an engine from an op log's records (server/oplog.h) into the state
// the running server had, for Worker::open_oplog (and the op log's tests, which replay as the
// worker does).
//
//   - PUT: stored with its logged version and flags (PutOptions::restore_version), unless its
//     item has expired since: the running server had dropped it (and its memory with it), so
//     replay does not store it, but it still replaces what came before it and moves the
//     version counter past it. A PUT the engine refuses (a smaller --memory or --max-value than
//     the log was written with) is counted: the key is left absent, never at an older value.
//   - DELETE: applied.
//   - CLEAR: at once, or (a delayed flush_all) remembered as clear_at(), which a later CLEAR
//     replaces.
//   - VERSION: the version counter moves past it.
#pragma once

#include <cstdint>
#include <string>

#include "server/oplog.h"
#include "store/engine.h"

namespace fabkv::server {

class EngineRestore {
 public:
  // `now`: the Unix seconds against which expiry is judged.
  EngineRestore(store::Engine& engine, uint32_t now) : engine_(engine), now_(now) {}

  void operator()(const OpLog::Record& r);

  uint64_t refused() const { return refused_; }                        // PUTs the engine refused
  const std::string& first_refused() const { return first_refused_; }  // the first one's key
  store::Status why() const { return why_; }                           // and what the engine said
  // The last delayed CLEAR's time (absolute Unix seconds) that no CLEAR followed; 0: none.
  uint32_t clear_at() const { return clear_at_; }

 private:
  store::Engine& engine_;
  const uint32_t now_;
  uint64_t refused_ = 0;
  std::string first_refused_;
  store::Status why_ = store::Status::kOk;
  uint32_t clear_at_ = 0;
};

}  // namespace fabkv::server
