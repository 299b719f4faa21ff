// The batch pipeline (HERD sec. 4.1.1): each request needs at most two random memory
// accesses, its index bucket and its item. A request enters stage 1 by prefetching its
// bucket; `gap` requests later (stage 2) it reads the now-cached bucket and prefetches the
// items its tags point at; another `gap` requests later it executes, touching only cached
// lines. Meanwhile the requests between it and the front of the batch are in the other
// stages, so the DRAM latency of one request overlaps the work of others.
//
// HERD overlaps the prefetches with post_send(); in a worker loop the completion callback
// is where the response is posted, so the same overlap happens.
#pragma once

#include <cstddef>
#include <span>

#include "store/engine.h"
#include "store/tuning.h"

namespace fabkv::store {

template <class E>
inline Response execute_one(E& e, const Request& r) {
  Response resp;
  switch (r.op) {
    case Op::kGet: {
      ItemView v;
      resp.status = e.get(r.hash, r.key, v);
      resp.version = v.version;
      resp.expire_at = v.expire_at;
      resp.flags = v.flags;
      resp.value = v.value;
      break;
    }
    case Op::kPut: resp.status = e.put(r.hash, r.key, r.value, r.put, &resp.version); break;
    case Op::kDel: resp.status = e.del(r.hash, r.key); break;
    case Op::kTouch: {
      ItemView v;
      resp.status = e.touch(r.hash, r.key, r.put.expire_at, &v);
      resp.version = v.version;
      resp.expire_at = v.expire_at;
      resp.flags = v.flags;
      resp.value = v.value;
      break;
    }
  }
  return resp;
}

// E is a concrete engine (CacheEngine, StoreEngine: final classes, so the calls below are
// direct and inlined) or Engine (virtual calls). Owner thread only.
template <class E, class Done>
inline void run_pipeline(E& e, std::span<const Request> reqs, Done&& done, size_t gap) {
  const size_t n = reqs.size();
  // A batch of one (a single client at window 1: every round of the worker) has no other
  // request to overlap its misses with; the prefetches would only add their own lookups.
  if (n == 1) {
    done(0, execute_one(e, reqs[0]));
    return;
  }
  if (gap == 0) gap = tuning::kDefaultStageGap;
  for (size_t i = 0; i < n + 2 * gap; ++i) {
    if (i < n) e.prefetch_index(reqs[i].hash);
    if (i >= gap && i - gap < n) e.prefetch_item(reqs[i - gap].hash);
    if (i >= 2 * gap && i - 2 * gap < n) {
      const size_t j = i - 2 * gap;
      done(j, execute_one(e, reqs[j]));
    }
  }
}

}  // namespace fabkv::store
