// RF-RPC's knobs (proto/rfrpc/options.h): TOML table [rfrpc], flags --rfrpc-*.
#include "proto/rfrpc/options.h"

#include "common/knobs.h"
#include "proto/registry.h"

namespace fabkv::rfrpc {

void declare(Knobs& k, Options* o) {
  const char* name = proto::info(proto::Id::rfrpc).name;
  auto s = k.section(name, name);
  s.number("fetch_size", "--rfrpc-fetch-size", &o->fetch_size,
           "rfrpc: F, bytes a client READs at first (result header + payload; a larger result "
           "takes a second READ). Larger F wastes bandwidth on small results, smaller F costs "
           "second READs (RF-RPC sec. 3.2)")
      .range(64, 1 << 20)
      .multiple_of(8);
  s.number("retries", "--rfrpc-retries", &o->retries,
           "rfrpc: R, failed fetches after which a call counts as slow; two slow calls in a "
           "row switch a hybrid client to server-reply (RF-RPC sec. 3.2)")
      .range(1, 1000);
  s.choice("mode", "--rfrpc-mode", &o->mode,
           {{"hybrid", Mode::kHybrid}, {"fetch", Mode::kFetch}, {"reply", Mode::kReply}},
           "rfrpc: hybrid (remote fetch, switching to server-reply while the server is slow, "
           "RF-RPC sec. 3.2) | fetch (remote fetch only) | reply (server-reply only)");
  s.number("delay_ns", "--rfrpc-delay-ns", &o->delay_ns,
           "rfrpc test hook: ns of busy work added to every request (0 = none)")
      .range(0, 10'000'000);
  s.number("delay_ns_per_kib", "--rfrpc-delay-ns-per-kib", &o->delay_ns_per_kib,
           "rfrpc test hook: ns of busy work per KiB of a request's result or value")
      .range(0, 10'000'000);
  s.number("batch_linger_ns", "--rfrpc-batch-linger-ns", &o->batch_linger_ns,
           "rfrpc test hook: ns of busy work right after each result batch is published (0 = "
           "none)")
      .range(0, 10'000'000);
  s.number("batch_entries", "--rfrpc-batch-entries", &o->batch_entries,
           "rfrpc: N, the most requests in a batch (RF-RPC sec. 4; 0 = no batching). Larger: "
           "fewer operations per request, longer waits for the batch to fill")
      .range(0, 1024);
  s.number("batch_bytes", "--rfrpc-batch-bytes", &o->batch_bytes,
           "rfrpc: L, the most payload bytes of a request batch (the paper's 2048); larger "
           "requests go alone")
      .range(256, 1 << 20)
      .multiple_of(8);
  s.number("batch_timeout_us", "--rfrpc-batch-timeout-us", &o->batch_timeout_us,
           "rfrpc: T, the longest a client holds a batch that is not full (the paper: 5 ms)")
      .range(1, 1'000'000);
  s.number("batch_llimit_us", "--rfrpc-batch-llimit-us", &o->batch_llimit_us,
           "rfrpc: llimit of RF-RPC eq. 3: tune each client's batch size in [1, N] so that at "
           "most alpha percent of calls take longer (0 = the batch size stays N)")
      .range(0, 10'000'000);
  s.number("batch_alpha_pct", "--rfrpc-batch-alpha-pct", &o->batch_alpha_pct,
           "rfrpc: alpha of RF-RPC eq. 3, in percent")
      .range(1, 100);
}

}  // namespace fabkv::rfrpc
