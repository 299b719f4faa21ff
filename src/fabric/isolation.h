// What a server must do so that a peer process killed at any instant cannot stall it
// (docs/fabric.md, "Fault isolation"). Today only libfabric's shm provider needs anything:
//
// - Its receive side is a bounded multi-producer queue in the receiver's shared-memory region.
//   A sender claims an entry, fills it, then commits it; the receiver consumes in order. A
//   sender killed between claim and commit leaves an entry that is never committed, and every
//   later command to that endpoint, from any peer, waits behind it forever. So a server gives
//   each client an endpoint (and so a region) of its own: a dead client wedges only its own.
// - A message of 193..4096 bytes travels in a buffer taken from the receiver's pool under the
//   receiver region's process-shared spinlock; a peer killed while holding it makes the next
//   taker spin inside libfabric, where no deadline of ours can fire. Messages up to 192 bytes
//   travel inside the command and larger ones by cross-memory attach, neither under a lock, so
//   both sides send every message of that middle size padded to 4097 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "fabric/fabric.h"

namespace fabkv::fabric {

// True when one endpoint per peer is needed to isolate peers from each other (shm).
bool isolate_peers(const Fabric& fabric);

// The length to post for a message of `len` bytes so that no process-shared lock is taken:
// `len` itself, or 4097 on shm for 193..4096 bytes. The buffer must hold that many bytes.
size_t lock_free_len(const Fabric& fabric, size_t len);
// Bytes a send or receive buffer needs to carry messages of up to `len` bytes padded so.
size_t lock_free_capacity(const Fabric& fabric, size_t len);

// A shm peer that was SIGKILLed leaves its region file behind (nothing else unlinks it), and a
// later process that gets the same pid then cannot create its endpoint. Removes the region of
// the peer whose endpoint name this is when that process no longer exists; true if removed.
bool remove_dead_peer_region(const Fabric& fabric, std::span<const uint8_t> name);

// The other half of that hazard: region files named after this process's pid that this process
// did not create were left by an earlier, killed process with the same pid (pids wrap at
// pid_max, 32768 here), and would make shm refuse our endpoints (fi_enable: EBUSY). Removes
// them, once per process, before its first shm endpoint; returns how many.
size_t remove_stale_own_regions();

// Removes every shm region file of process `pid` ("<pid>:..." in /dev/shm); returns how many.
size_t remove_regions_of(long pid);

}  // namespace fabkv::fabric
