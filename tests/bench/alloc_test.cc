// The load generator's data path allocates nothing per request
// (docs/results/loadgen-2026-11-23.md): heap allocations are counted (this binary replaces operator
// new) across a measured run against the null target, which allocates nothing once warm either, so
// any per-request allocation in the runner shows up as a count that grows with the requests.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "bench/driver.h"
#include "bench/runner.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace fabkv::bench;

class NullRunAllocations : public ::testing::TestWithParam<uint32_t> {};

TEST_P(NullRunAllocations, NoneGrowWithTheRequests) {
  DriverOptions o;
  o.clients = 2;
  o.window = GetParam();
  auto d = make_null_driver(o);
  Runner runner(*d, -1);
  RunSpec spec;
  spec.workload.keys = 10000;
  spec.workload.read_ratio = 0.5;
  spec.clients = 2;
  spec.window = GetParam();
  spec.warmup_s = 0.1;
  spec.duration_s = 0.3;
  runner.load(spec.workload, spec.window, nullptr);
  runner.run(spec, nullptr);  // warm: buffers grown to their size
  for (bool rmw : {false, true}) {
    spec.workload.read_modify_write = rmw;
    // Enough requests that a per-request allocation would show: a slow host (a sanitizer
    // build, a busy CI machine) gets longer runs, not a failure.
    RunResult r;
    uint64_t allocations = 0;
    for (spec.duration_s = 0.3;; spec.duration_s *= 2) {
      const uint64_t before = g_allocations.load();
      r = runner.run(spec, nullptr);
      allocations = g_allocations.load() - before;
      if (r.requests > 10000 || spec.duration_s >= 4.8) break;
    }
    std::printf("window %u rmw %d: %llu allocations over %llu requests\n", GetParam(), rmw,
                static_cast<unsigned long long>(allocations),
                static_cast<unsigned long long>(r.requests));
    ASSERT_GT(r.requests, 10000u);
    EXPECT_EQ(r.check.mismatches, 0u);
    // Set-up per run (per-thread tables, histograms, streams) is a fixed few dozen.
    EXPECT_LT(allocations, 200u) << allocations << " allocations for " << r.requests
                                 << " requests (rmw " << rmw << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, NullRunAllocations, ::testing::Values(1u, 4u));
