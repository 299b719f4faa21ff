#include "store/engine.h"

#include <time.h>

#include <bit>
#include <stdexcept>
#include <string>

#include "store/cache_engine.h"
#include "store/store_engine.h"

namespace fabkv::store {

const char* to_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kNotFound: return "not_found";
    case Status::kTooLarge: return "too_large";
    case Status::kInvalidKey: return "invalid_key";
    case Status::kNoSpace: return "no_space";
    case Status::kLogFailed: return "log_failed";
    case Status::kVersionMismatch: return "version_mismatch";
  }
  return "unknown";
}

const char* to_string(EngineKind k) {
  switch (k) {
    case EngineKind::kCache: return "cache";
    case EngineKind::kStore: return "store";
  }
  return "unknown";
}

std::optional<EngineKind> engine_kind_from_string(std::string_view name) {
  if (name == "cache") return EngineKind::kCache;
  if (name == "store") return EngineKind::kStore;
  return std::nullopt;
}

uint32_t realtime_seconds(void*) {
  // The coarse clock is a vDSO read of the last tick (a few ns); a second's resolution is all
  // expiry needs.
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint32_t>(ts.tv_sec);
}

std::unique_ptr<Engine> make_engine(EngineKind kind, const EngineOptions& opts) {
  switch (kind) {
    case EngineKind::kCache: return std::make_unique<CacheEngine>(opts);
    case EngineKind::kStore: return std::make_unique<StoreEngine>(opts);
  }
  throw std::invalid_argument("store: unknown engine kind");
}

Status Engine::touch(KeyHash h, std::string_view key, uint32_t expire_at, ItemView* out) {
  ItemView item;
  if (Status st = get(h, key, item); st != Status::kOk) return st;
  // Copied first: the put may reuse the old item's memory. The copy is the view handed out
  // (an item touched into the past is not found again).
  touched_value_.assign(item.value);
  PutOptions o;
  o.expire_at = expire_at;
  o.flags = item.flags;
  o.restore_version = item.version;
  if (Status st = put(h, key, touched_value_, o); st != Status::kOk) return st;
  if (out != nullptr) *out = {touched_value_, item.version, expire_at, item.flags};
  return Status::kOk;
}

size_t checked_index_buckets(const EngineOptions& opts, size_t bucket_bytes) {
  if (opts.max_value_size > kMaxValueSizeLimit) {
    throw std::runtime_error("store: max_value_size " + std::to_string(opts.max_value_size) +
                             " exceeds the limit " + std::to_string(kMaxValueSizeLimit));
  }
  size_t nb = opts.index_buckets != 0 ? opts.index_buckets : opts.memory_bytes / 8 / bucket_bytes;
  nb = std::bit_floor(nb == 0 ? size_t{1} : nb);
  if (nb > (uint64_t{1} << 32)) nb = uint64_t{1} << 32;
  return nb;
}

}  // namespace fabkv::store
