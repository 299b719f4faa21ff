// What a tcp client costs in memory: fabkv sizes ofi_rxm's buffers from what a client keeps in
// flight (src/fabric/rxm.h, docs/fabric.md "The memory of an rdm endpoint over tcp"). With
// rxm's defaults a client's endpoint preposted 4,096 receive buffers of 16 KiB and one
// client process peaked over 130 MiB. Not a timing test: the peak resident size after a fixed
// number of requests, against a real fabkv-server.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "client/client.h"
#include "server_fixture.h"

namespace fabkv::testing {
namespace {

// The sanitizers' shadow memory would count against the bound.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// VmHWM of this process (peak resident set), in KiB; 0 when /proc does not say.
size_t peak_resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    size_t kib = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %zu kB", &kib) == 1) return kib;
  }
  return 0;
}

// The goal for one tcp client process (#27): 32 MiB resident.
constexpr size_t kBoundKib = 32 * 1024;

TEST(TcpClientMemory, PeakResidentAfterABurstStaysUnder32MiB) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers' shadow memory counts as resident";
  KvServer server("tcp", "herd", {"--max-value", "64K"});
  ClientOptions o;
  o.server = server.address();
  o.provider = "tcp";
  o.protocol = "herd";
  o.timeout_ms = 10000;
  std::unique_ptr<Client> c = Client::connect(o);
  // 2,000 rounds of a PUT and a GET of 1,000 bytes, then values by segments (16 KiB) and by
  // rendezvous (the largest, 64 KiB): every path rxm has for a message.
  const std::string small(1000, 's');
  std::string got;
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "k" + std::to_string(i % 100);
    ASSERT_EQ(c->put(key, small), Status::kOk) << i;
    ASSERT_EQ(c->get(key, &got), Status::kOk) << i;
    ASSERT_EQ(got, small);
  }
  for (size_t len : {size_t{16} << 10, size_t{64} << 10}) {
    const std::string big(len, 'b');
    for (int i = 0; i < 50; ++i) {
      ASSERT_EQ(c->put("big", big), Status::kOk) << len;
      ASSERT_EQ(c->get("big", &got), Status::kOk) << len;
      ASSERT_EQ(got, big);
    }
  }
  const size_t peak = peak_resident_kib();
  ASSERT_GT(peak, 0u) << "no VmHWM in /proc/self/status";
  EXPECT_LT(peak, kBoundKib) << "peak resident " << peak / 1024 << " MiB for one tcp client";
  std::printf("peak resident of one tcp client process: %zu KiB\n", peak);
}

}  // namespace
}  // namespace fabkv::testing
