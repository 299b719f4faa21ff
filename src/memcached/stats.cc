// memcached's stats groups (protocol.txt of memcached 1.6, "Settings statistics", "Item
// statistics", "Slab statistics", "Item size statistics") with what fabkv has: its settings, and
// the engines' items as one class, class 1 (fabkv keeps items in one log or heap per partition,
// not in slab classes). Fields without an equivalent are left out; docs/memcached.md lists them.
#include <fmt/format.h>

#include "memcached/shard.h"
#include "store/tuning.h"

namespace fabkv::memcached {

namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

void append_lines(std::string* out, const Lines& lines, std::string_view prefix = {}) {
  for (const auto& [k, v] : lines)
    fmt::format_to(std::back_inserter(*out), "STAT {}{} {}\r\n", prefix, k, v);
}

// stats settings: what the front end and the server were started with.
Lines settings_lines(const ServiceOptions& o, const std::string& address, size_t workers,
                     bool evicts) {
  const size_t colon = address.rfind(':');
  const auto n = [](uint64_t v) { return std::to_string(v); };
  return {{"maxbytes", n(o.memory)},
          {"maxconns", n(o.max_conns)},
          {"tcpport", address.substr(colon + 1)},
          {"udpport", "0"},
          {"inter", address.substr(0, colon)},
          {"verbosity", "0"},
          {"oldest", "0"},
          {"evictions", evicts ? "on" : "off"},
          {"domain_socket", "NULL"},
          {"shutdown_command", "no"},
          {"num_threads", n(workers)},
          {"stat_key_prefix", ":"},
          {"detail_enabled", "no"},
          {"cas_enabled", "yes"},
          {"tcp_backlog", "1024"},
          {"binding_protocol", "auto-negotiate"},
          {"auth_enabled_sasl", "no"},
          {"auth_enabled_ascii", "no"},
          {"item_size_max", n(o.max_value)},
          {"maxconns_fast", "yes"},
          {"lru_crawler", "no"},
          {"flush_enabled", "yes"},
          {"dump_enabled", "yes"},
          {"hash_algorithm", "xxh3"},
          {"temp_lru", "no"},
          {"idle_timeout", "0"},
          {"track_sizes", "no"},
          {"ssl_enabled", "no"}};
}

}  // namespace

bool Connections::stats_group(Conn& c, std::string_view group) {
  std::string out;
  if (group == "settings") {
    const bool evicts = w_.engine().name() == store::to_string(store::EngineKind::kCache);
    append_lines(&out, settings_lines(o_, svc_.address(), workers_.size(), evicts));
  } else if (group == "slabs" || group == "items") {
    const store::StatsSnapshot es = svc_.engine_totals();
    uint64_t sum[kCounters] = {};
    for (const auto& s : shards_)
      for (size_t i = 0; i < kCounters; ++i)
        sum[i] += s->counters[i].load(std::memory_order_relaxed);
    const auto n = [](uint64_t v) { return std::to_string(v); };
    // As memcached: a class is shown once it holds items.
    if (group == "items" && es.items > 0) {
      append_lines(&out,
                   {{"number", n(es.items)},
                    {"mem_requested", n(es.bytes)},
                    {"evicted", n(es.evictions + es.index_drops)},
                    {"outofmemory", n(es.no_space)}},
                   "items:1:");
    }
    if (group == "slabs") {
      if (es.items > 0) {
        append_lines(&out,
                     {{"chunk_size", n(store::tuning::kItemAlign)},
                      {"used_chunks", n(es.items)},
                      {"get_hits", n(sum[kGetHits])},
                      {"cmd_set", n(sum[kCmdSet])},
                      {"delete_hits", n(sum[kDeleteHits])},
                      {"incr_hits", n(sum[kIncrHits])},
                      {"decr_hits", n(sum[kDecrHits])},
                      {"cas_hits", n(sum[kCasHits])},
                      {"cas_badval", n(sum[kCasBadval])},
                      {"touch_hits", n(sum[kTouchHits])}},
                     "1:");
      }
      append_lines(&out,
                   {{"active_slabs", es.items > 0 ? "1" : "0"}, {"total_malloced", n(o_.memory)}});
    }
  } else if (group == "sizes" || group == "sizes_disable") {
    // memcached's answer while its size histogram is off; fabkv keeps none.
    out = "STAT sizes_status disabled\r\n";
  } else if (group == "sizes_enable") {
    out = "STAT sizes_status error\r\nSTAT sizes_error fabkv keeps no size histogram\r\n";
  } else {
    return false;
  }
  out.append("END\r\n");
  emit(c, out);
  return true;
}

}  // namespace fabkv::memcached
