// One loop for every post that the provider may refuse with -FI_EAGAIN: a full transmit or
// receive queue, or (shm, tcp) the first operation to a new peer, which waits for that
// peer's progress. The caller's progress drives its own completion queue between tries
// (shm moves a peer's bytes only while the target polls); the loop ends at the deadline or
// once alive() says the peer is gone. Used by the client's protocols (src/proto/rpc/client.cc,
// src/proto/pilaf/reader.cc) and meant for the server's workers too.
#pragma once

#include "common/deadline.h"
#include "fabric/endpoint.h"

namespace fabkv::fabric {

// post(): long, 0 or a negative libfabric error (kAgain = try again).
// progress(): reaps completions once. alive(): false once there is no point in trying again.
// Returns the last post()'s result: 0, kAgain (deadline passed or not alive), or an error.
// Templates, not std::function: the first try is on every request's hot path.
template <class Post, class Progress, class Alive>
inline long post_with_retry(Post&& post, Progress&& progress, const Deadline& deadline,
                            Alive&& alive) {
  long ret;
  while ((ret = post()) == kAgain) {
    progress();
    if (deadline.expired() || !alive()) break;
  }
  return ret;
}

// The same for a caller with no notion of liveness (bounded by the deadline only).
template <class Post, class Progress>
inline long post_with_retry(Post&& post, Progress&& progress, const Deadline& deadline) {
  return post_with_retry(post, progress, deadline, [] { return true; });
}

}  // namespace fabkv::fabric
