// What a protocol's client side may know of how it was configured: the session
// (src/client/session.cc) fills a ClientSettings from the public ClientOptions, the protocols'
// own client options (proto/client_options.h) and, in tests only, the test hooks; protocols read it
// through ClientHost::settings() (proto/client_protocol.h) and never see the public options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/client_options.h"

namespace fabkv::proto {

// Fault and clock injection for tests, out of the public options: set only through
// src/client/testing.h (fabkv::testing::connect); all zero/one is "no hook".
struct ClientTestHooks {
  // Pretend this client's wall clock is off by this many seconds (a host whose clock is
  // skewed). Expiry is judged by the server's clock on every protocol, so this changes nothing
  // against a server that publishes its clock (pilaf: TableHeader.clock, docs/pilaf.md
  // "Expiry and the server's clock"); tests use it to show exactly that.
  int clock_skew_s = 0;
  // hydradb measures leases on this client's monotonic clock; this rate (1 = true time) makes
  // that clock run fast (> 1: leases end early) or slow (< 1: the client trusts an address
  // longer than the server holds its memory, which the item checks must catch).
  double lease_clock_rate = 1.0;
  // The sequence number this client's first request to each worker carries (0 = 1, as
  // always) on the RPC protocols (rpc::RpcClient and rfrpc's batches). The Hello tells the
  // server, whose slot polling starts there too. Tests start near 2^32 to cross the
  // sequence's wrap in a few requests (tests/client/rpc_slots_e2e_test.cc).
  uint32_t first_seq = 0;
  // This client's n-th request by the RPC client (counted from 1 over all workers; 0 = none)
  // goes out with its check broken, as garbage in its slot would look to the worker
  // (tests/client/rpc_slots_e2e_test.cc: the answer is kMalformed, at once).
  uint64_t garbage_request = 0;
  // drtm: the process exits (code 3) right after a lock is taken, as a client killed between
  // its two atomics (tests/client/drtm_e2e_test.cc).
  bool drtm_exit_holding_lock = false;
  // drtm: the holder stalls this many ms between taking a lock and its WRITE, as a
  // descheduled process would (docs/drtm.md, "A late holder").
  int drtm_stall_holding_lock_ms = 0;
};

struct ClientSettings {
  std::string transport;  // ClientOptions::transport: "" = the protocol's choice
  int timeout_ms = 2000;  // bound on every data-path wait (per request)
  int connect_timeout_ms = 5000;
  size_t staging_bytes = 0;         // ClientOptions::staging_bytes (0 = the RPC client's default)
  ClientProtocolOptions protocols;  // each protocol's own client knobs
  ClientTestHooks test;
};

}  // namespace fabkv::proto
