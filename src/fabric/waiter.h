// Waiter: how a polling thread stops burning its core when there is nothing to do, without
// sleeping through what arrives. It blocks on the wait objects of endpoints opened
// `EndpointOptions::waitable` (after fi_trywait says that is safe), on descriptors of the
// caller's own, and on an eventfd another thread rings with wake(); always with a timeout.
//
// What wakes it depends on the provider (measured, tests/fabric/wait_test.cc; docs/fabric.md
// "Blocking"): on tcp the wait object is the readiness of the provider's sockets, so any bytes
// from a peer wake it, one-sided READs and WRITEs into our memory included; on shm there is
// no wait object at all, so a caller can only sleep a bounded time and poll again; on a
// provider whose wait object fires on completions only (verbs' completion channel) a peer's
// plain WRITE raises nothing, so a thread that waits there for requests WRITten into its
// memory would sleep through them. wakeup_of() says which of these an endpoint has.
//
// Threading: wait() on the endpoints' owner thread; wake() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "fabric/endpoint.h"

struct pollfd;
struct fid;

namespace fabkv::fabric {

enum class Wakeup : uint8_t {
  kNone,         // no wait object (shm): sleep a bounded time, then poll again
  kCompletions,  // the wait object fires on completions only: a peer's plain WRITE or READ
                 // into our memory raises none (verbs, and any provider not measured here)
  kAnyArrival,   // it fires on any bytes from a peer, one-sided operations included (tcp)
};
const char* to_string(Wakeup w);
// What wakes a thread blocked on `ep`'s wait object.
Wakeup wakeup_of(const Endpoint& ep);

class Waiter {
 public:
  Waiter();  // throws FabricError when no eventfd can be made
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Makes the wait() in progress, or the next one, return at once. Any thread.
  void wake();

  enum class Woke : uint8_t {
    kPending,  // did not block: the provider already had something (fi_trywait said so)
    kFabric,   // an endpoint's wait object or an `extra` descriptor became ready
    kWake,     // wake() was called
    kTimeout,  // nothing for `timeout`
  };
  // Blocks until a wait object of `eps` fires, a descriptor of `extra` is readable (or hung
  // up), wake() is called, or `timeout` passes. Endpoints without a wait object are left out:
  // the caller bounds `timeout` for what they may hold. `eps` may belong to different Fabrics
  // (a client's reliable endpoint and its datagram endpoint, proto/herd/dgram.h).
  Woke wait(std::span<Endpoint* const> eps, std::span<const int> extra,
            std::chrono::microseconds timeout);

 private:
  int event_fd_ = -1;
  std::vector<fid*> fids_;  // reused: no allocation per wait
  std::vector<::pollfd> pfds_;
};

}  // namespace fabkv::fabric
