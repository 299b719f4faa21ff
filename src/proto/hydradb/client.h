// HydraDB's client side (survey sec. 3.1; the contract is wire.h and layout.h in this folder).
//
// Every request goes as server-reply's: WRITten into the client's slots of worker w's request
// region, answered by a WRITE into the client's response ring (1 WRITE each way). A GET answer
// also carries the item's address in the worker's item arena and a lease; the client caches
// key -> (worker, offset, version, value length, lease end). A later GET of a cached key whose
// lease has not run out is one READ of the item: accepted when check_item says the item is
// current (flag set, version, key, lengths and checksum agree) and the lease still holds when
// the READ completes; otherwise the entry is dropped and the GET goes by RPC, whose answer
// caches the new address. A PUT or DELETE by this client drops its own entry first.
//
// Leases are durations on this client's monotonic clock, counted from when it submitted the
// GET that brought the address (wire.h, docs/hydradb.md "Leases"): no clock is shared with the
// server. ClientTestHooks::clock_skew_s and lease_clock_rate (TEST ONLY) skew that clock.
//
// counters(): gets, cache_hits (GETs answered by one READ), cache_misses (no entry),
// lease_expired, stale_replaced (the READ found the flag cleared), stale_foreign (the READ
// found other bytes: memory reused or torn), late_reads (READ completed after the lease),
// reads, read_errors, rpc_gets, leases (addresses cached), and hit_rate.
#pragma once

#include <memory>

#include "proto/client_protocol.h"

namespace fabkv::hydradb {

// Throws ClientError(kError) for a transport other than "" or "write".
std::unique_ptr<proto::ClientProtocol> make_client(proto::ClientHost& host,
                                                   const proto::ClientSettings& options);

}  // namespace fabkv::hydradb
