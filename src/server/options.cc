#include "server/options.h"

#include <stdexcept>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "proto/rpc/wire.h"
#include "proto/pilaf/layout.h"
#include "proto/registry.h"
#include "store/limits.h"

namespace fabkv::server {


size_t parse_bytes(const std::string& s) {
  if (s.empty()) throw std::invalid_argument("empty size");
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(s, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a size: '" + s + "'");
  }
  std::string unit = s.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();
  int shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M" || unit == "m") shift = 20;
  else if (unit == "G" || unit == "g") shift = 30;
  else if (unit == "T" || unit == "t") shift = 40;
  else throw std::invalid_argument("unknown size unit in '" + s + "' (use K, M, G or T)");
  if (n > (~0ULL >> shift)) throw std::invalid_argument("size too large: '" + s + "'");
  return static_cast<size_t>(n << shift);
}

void load_toml(const std::string& path, ServerOptions* o) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}: {}", path, e.source().begin.line, e.description()));
  }
  auto str = [&](const char* k, std::string* out) {
    if (auto v = t[k].value<std::string>()) *out = *v;
  };
  auto u32 = [&](const char* k, uint32_t* out) {
    if (auto v = t[k].value<int64_t>()) {
      if (*v < 0 || *v > 0xffffffffLL) throw std::runtime_error(fmt::format("{}: {} out of range", path, k));
      *out = static_cast<uint32_t>(*v);
    }
  };
  auto bytes = [&](const char* k, size_t* out) {
    if (auto v = t[k].value<int64_t>()) *out = static_cast<size_t>(*v);
    else if (auto s = t[k].value<std::string>()) *out = parse_bytes(*s);
  };
  for (auto&& [k, v] : t) {
    static const char* known[] = {"provider", "listen", "secret", "workers", "cores", "engine",
                                  "memory", "max_value", "protocols", "transport", "window",
                                  "slot_size", "max_clients", "queues", "batching", "log",
                                  "pilaf_entries", "pilaf_extents", "oplog", "oplog_fsync"};
    bool ok = false;
    for (const char* n : known) ok |= (k.str() == n);
    if (!ok) throw std::runtime_error(fmt::format("{}: unknown setting '{}'", path, k.str()));
  }
  str("provider", &o->provider);
  str("listen", &o->listen);
  str("secret", &o->secret);
  u32("workers", &o->workers);
  str("engine", &o->engine);
  bytes("memory", &o->memory);
  bytes("max_value", &o->max_value);
  u32("window", &o->rpc.window);
  u32("slot_size", &o->rpc.slot_size);
  u32("max_clients", &o->max_clients);
  u32("queues", &o->rpc.queues);
  str("log", &o->log_level);
  bytes("pilaf_entries", &o->pilaf.entries);
  bytes("pilaf_extents", &o->pilaf.extents);
  str("oplog", &o->oplog);
  if (auto v = t["oplog_fsync"].value<bool>()) o->oplog_fsync = *v;
  if (auto v = t["batching"].value<bool>()) o->rpc.batching = *v;
  if (auto tr = t["transport"].value<std::string>()) {
    if (*tr == "write") o->herd.transport = rpc::Transport::kWrite;
    else if (*tr == "send") o->herd.transport = rpc::Transport::kSend;
    else throw std::runtime_error(fmt::format("{}: transport must be write or send", path));
  }
  if (auto* arr = t["cores"].as_array()) {
    o->cores.clear();
    for (auto& e : *arr) o->cores.push_back(static_cast<int>(e.value<int64_t>().value_or(-1)));
  }
  if (auto* arr = t["protocols"].as_array()) {
    o->protocols.clear();
    for (auto& e : *arr) o->protocols.push_back(e.value<std::string>().value_or(""));
  }
}

bool serves_pilaf(const ServerOptions& o) {
  for (const auto& p : o.protocols)
    if (p == pilaf::kProtocol || p == pilaf::kProtocolVo) return true;
  return false;
}

void resolve_defaults(ServerOptions* o) {
  if (o->engine.empty()) o->engine = serves_pilaf(*o) ? "pilaf" : "cache";
}

void validate(const ServerOptions& o) {
  if (o.workers < 1 || o.workers > 64) throw std::invalid_argument("--workers must be 1..64");
  if (o.engine != "cache" && o.engine != "store" && o.engine != "pilaf")
    throw std::invalid_argument("--engine must be cache, store or pilaf, not '" + o.engine + "'");
  if (serves_pilaf(o) && o.engine != "pilaf")
    throw std::invalid_argument("the pilaf protocols READ the pilaf engine's table: use --engine "
                                "pilaf (or leave --engine out), not '" + o.engine + "'");
  if (o.pilaf.entries < 16 || o.pilaf.entries > (size_t{1} << 32))
    throw std::invalid_argument("--pilaf-entries must be 16..4G");
  if (o.pilaf.extents < 4096) throw std::invalid_argument("--pilaf-extents must be at least 4K");
  if (o.rpc.window < 1 || o.rpc.window > 64) throw std::invalid_argument("--window must be 1..64");
  if (o.max_clients < 1 || o.max_clients > 4096)
    throw std::invalid_argument("--max-clients must be 1..4096");
  if (o.rpc.queues < 1 || o.rpc.queues > 16) throw std::invalid_argument("--queues must be 1..16");
  if (o.rpc.slot_size < 64 || o.rpc.slot_size > (1u << 20) || o.rpc.slot_size % 8 != 0)
    throw std::invalid_argument("--slot-size must be a multiple of 8 in 64..1048576");
  if (o.max_value < 1 || o.max_value > store::kMaxValueSizeLimit)
    throw std::invalid_argument(
        fmt::format("--max-value must be 1..{}", store::kMaxValueSizeLimit));
  if (o.memory / o.workers < 4 * (o.max_value + 512))
    throw std::invalid_argument("--memory too small for the workers and --max-value");
  if (o.protocols.empty()) throw std::invalid_argument("--protocols is empty");
  for (const auto& p : o.protocols)
    if (proto::find(p) == nullptr)
      throw std::invalid_argument("unknown protocol '" + p + "' (this build serves: " +
                                  proto::names() + ")");
}

}  // namespace fabkv::server
