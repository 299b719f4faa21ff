// Fabric-layer pieces that need no peer: the provider choice, verb counters and the latency
// histogram the perf tool reports with.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/histogram.h"
#include "fabric/counters.h"
#include "fabric/provider.h"

namespace fabkv::testing {
namespace {

using fabric::choose_provider;
using fabric::is_local_host;
using fabric::Verb;

// Sets or clears an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ------------------------------------------------------------------------- provider choice

TEST(ChooseProvider, ExplicitNamesAreTakenAsGiven) {
  ScopedEnv env("FI_PROVIDER", "shm");  // must not override an explicit name
  for (const char* p : {"shm", "tcp", "verbs", "udp"}) {
    for (const char* host : {"", "127.0.0.1", "198.18.0.2"}) {
      auto c = choose_provider(p, host);
      EXPECT_EQ(c.provider, p) << host;
      EXPECT_NE(c.reason.find("--provider"), std::string::npos) << c.reason;
    }
  }
}

TEST(ChooseProvider, UnknownNamesThrowInvalidArgument) {
  for (const char* p : {"", "TCP", "rxm", "tcp;ofi_rxm", "sockets", "auto "}) {
    EXPECT_THROW(choose_provider(p, ""), std::invalid_argument) << "'" << p << "'";
  }
  try {
    choose_provider("bogus", "");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
  }
}

TEST(ChooseProvider, AutoHonoursFiProvider) {
  {
    ScopedEnv env("FI_PROVIDER", "tcp");
    auto c = choose_provider("auto", "");
    EXPECT_EQ(c.provider, "tcp");
    EXPECT_NE(c.reason.find("FI_PROVIDER=tcp"), std::string::npos) << c.reason;
  }
  {
    // A layered name: the core provider is what is requested.
    ScopedEnv env("FI_PROVIDER", "tcp;ofi_rxm");
    EXPECT_EQ(choose_provider("auto", "198.18.0.2").provider, "tcp");
  }
  {
    ScopedEnv env("FI_PROVIDER", "shm");
    EXPECT_EQ(choose_provider("auto", "198.18.0.2").provider, "shm");
  }
  {
    // Set but empty: as if unset.
    ScopedEnv env("FI_PROVIDER", "");
    auto c = choose_provider("auto", "");
    EXPECT_EQ(c.reason.find("FI_PROVIDER"), std::string::npos) << c.reason;
  }
}

TEST(ChooseProvider, AutoPicksShmForALocalPeerAndTcpForARemoteOne) {
  ScopedEnv env("FI_PROVIDER", nullptr);
  if (!std::filesystem::exists("/sys/class/infiniband")) {
    EXPECT_FALSE(fabric::rdma_device_present());
  }
  if (fabric::rdma_device_present()) {
    EXPECT_EQ(choose_provider("auto", "").provider, "verbs");
    GTEST_SKIP() << "an RDMA device is present: auto picks verbs for every peer";
  }
  for (const char* local : {"", "localhost", "127.0.0.1", "127.0.0.2"}) {
    auto c = choose_provider("auto", local);
    EXPECT_EQ(c.provider, "shm") << local;
    EXPECT_NE(c.reason.find("this host"), std::string::npos) << c.reason;
  }
  auto c = choose_provider("auto", "198.18.0.2");
  EXPECT_EQ(c.provider, "tcp");
  EXPECT_NE(c.reason.find("198.18.0.2"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("another host"), std::string::npos) << c.reason;
}

TEST(IsLocalHost, LoopbackNamesAndOwnInterfacesAreLocal) {
  EXPECT_TRUE(is_local_host(""));
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_TRUE(is_local_host("127.1.2.3"));  // all of 127/8 is loopback
  // ::1 only where the kernel has IPv6 at all (getaddrinfo accepts the literal regardless).
  EXPECT_TRUE(is_local_host("::1"));
  // Every address of every interface of this machine.
  ifaddrs* ifs = nullptr;
  ASSERT_EQ(getifaddrs(&ifs), 0);
  int checked = 0;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    EXPECT_TRUE(is_local_host(buf)) << i->ifa_name << " " << buf;
    checked++;
  }
  freeifaddrs(ifs);
  EXPECT_GE(checked, 1);
}

TEST(IsLocalHost, OtherHostsAreNot) {
  EXPECT_FALSE(is_local_host("198.18.0.2"));  // RFC 2544 benchmarking range, not assigned here
  EXPECT_FALSE(is_local_host("198.18.0.1"));
  EXPECT_FALSE(is_local_host("not-a-host.invalid"));  // does not resolve
  EXPECT_FALSE(is_local_host("300.1.1.1"));
}

// ------------------------------------------------------------------------------ VerbCounters

TEST(VerbCounters, PostCompleteErrorAndInboundAreCountedExactly) {
  fabric::VerbCounters vc;
  vc.on_post(Verb::kWrite, 64, /*signaled=*/true, /*inlined=*/false, /*imm=*/false);
  vc.on_post(Verb::kWrite, 32, false, true, false);
  vc.on_post(Verb::kWrite, 8, true, true, true);
  vc.on_complete(Verb::kWrite);
  vc.on_complete(Verb::kWrite);
  vc.on_error(Verb::kWrite);
  vc.on_post(Verb::kRead, 4096, true, false, false);
  vc.on_inbound(Verb::kRecv, 100);
  vc.on_inbound(Verb::kRecv, 28);
  vc.on_inbound(Verb::kWrite, 8);
  auto s = vc.snapshot();
  fabric::VerbStats w;
  w.posted = 3;
  w.bytes = 104;
  w.signaled = 2;
  w.inlined = 2;
  w.with_imm = 1;
  w.completed = 2;
  w.errors = 1;
  w.inbound = 1;
  w.inbound_bytes = 8;
  EXPECT_EQ(s[Verb::kWrite], w);
  fabric::VerbStats r;
  r.posted = 1;
  r.bytes = 4096;
  r.signaled = 1;
  EXPECT_EQ(s[Verb::kRead], r);
  fabric::VerbStats rv;
  rv.inbound = 2;
  rv.inbound_bytes = 128;
  EXPECT_EQ(s[Verb::kRecv], rv);
  EXPECT_EQ(s[Verb::kSend], fabric::VerbStats{});
  EXPECT_EQ(s[Verb::kAtomic], fabric::VerbStats{});
  EXPECT_EQ(s.total_posted(), 4u);
}

TEST(VerbCounters, DiffAndSumOfSnapshots) {
  fabric::VerbCounters vc;
  for (int i = 0; i < 10; ++i) vc.on_post(Verb::kSend, 10, true, false, false);
  auto before = vc.snapshot();
  for (int i = 0; i < 7; ++i) {
    vc.on_post(Verb::kSend, 3, i % 2 == 0, false, i == 0);
    vc.on_complete(Verb::kSend);
  }
  vc.on_post(Verb::kAtomic, 8, true, false, false);
  auto d = vc.snapshot() - before;
  EXPECT_EQ(d[Verb::kSend].posted, 7u);
  EXPECT_EQ(d[Verb::kSend].bytes, 21u);
  EXPECT_EQ(d[Verb::kSend].signaled, 4u);
  EXPECT_EQ(d[Verb::kSend].with_imm, 1u);
  EXPECT_EQ(d[Verb::kSend].completed, 7u);
  EXPECT_EQ(d[Verb::kAtomic].posted, 1u);
  EXPECT_EQ(d.total_posted(), 8u);
  // before + diff == now
  auto sum = before;
  sum += d;
  auto now = vc.snapshot();
  for (size_t i = 0; i < fabric::kVerbKinds; ++i) EXPECT_EQ(sum.verbs[i], now.verbs[i]) << i;
  // A snapshot minus itself is all zeros.
  auto zero = now - now;
  for (const auto& v : zero.verbs) EXPECT_EQ(v, fabric::VerbStats{});
}

TEST(VerbCounters, JsonHasEveryVerbAndFieldWithExactValues) {
  fabric::VerbCounters vc;
  vc.on_post(Verb::kRead, 512, true, false, false);
  vc.on_complete(Verb::kRead);
  vc.on_post(Verb::kAtomic, 8, true, false, false);
  vc.on_error(Verb::kAtomic);
  vc.on_inbound(Verb::kRecv, 77);
  nlohmann::json j = vc.snapshot().to_json();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), fabric::kVerbKinds);
  const std::vector<std::string> fields = {"posted",  "bytes",    "signaled",
                                           "inlined", "with_imm", "completed",
                                           "errors",  "inbound",  "inbound_bytes"};
  for (const char* v : {"read", "write", "send", "recv", "atomic"}) {
    ASSERT_TRUE(j.contains(v)) << v;
    EXPECT_EQ(j[v].size(), fields.size()) << v;
    for (const auto& f : fields) ASSERT_TRUE(j[v].contains(f)) << v << "." << f;
  }
  EXPECT_EQ(j["read"]["posted"], 1);
  EXPECT_EQ(j["read"]["bytes"], 512);
  EXPECT_EQ(j["read"]["signaled"], 1);
  EXPECT_EQ(j["read"]["completed"], 1);
  EXPECT_EQ(j["read"]["errors"], 0);
  EXPECT_EQ(j["atomic"]["posted"], 1);
  EXPECT_EQ(j["atomic"]["errors"], 1);
  EXPECT_EQ(j["atomic"]["completed"], 0);
  EXPECT_EQ(j["recv"]["inbound"], 1);
  EXPECT_EQ(j["recv"]["inbound_bytes"], 77);
  EXPECT_EQ(j["recv"]["posted"], 0);
  for (const auto& f : fields) {
    EXPECT_EQ(j["write"][f], 0) << f;
    EXPECT_EQ(j["send"][f], 0) << f;
  }
  EXPECT_STREQ(fabric::to_string(Verb::kAtomic), "atomic");
}

// -------------------------------------------------------------------------- LatencyHistogram

// The exact value at quantile q with the histogram's rank rule.
uint64_t exact_quantile(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(v.size() - 1)) + 1;
  return v[rank - 1];
}

void expect_quantiles_close(const std::vector<uint64_t>& values, const char* what) {
  LatencyHistogram h;
  for (uint64_t v : values) h.record(v);
  ASSERT_EQ(h.count(), values.size());
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
    uint64_t want = exact_quantile(values, q);
    uint64_t got = h.quantile_ns(q);
    // Reported as the upper edge of the value's bucket: never below, at most 1/64 above.
    EXPECT_GE(got, want) << what << " q=" << q;
    EXPECT_LE(static_cast<double>(got - want), 0.016 * static_cast<double>(want))
        << what << " q=" << q << " want " << want << " got " << got;
  }
  EXPECT_EQ(h.max_ns(), *std::max_element(values.begin(), values.end()));
  EXPECT_EQ(h.min_ns(), *std::min_element(values.begin(), values.end()));
}

TEST(LatencyHistogram, QuantilesWithinOnePointSixPercent) {
  std::vector<uint64_t> uniform;
  for (uint64_t i = 1; i <= 100000; ++i) uniform.push_back(i);
  expect_quantiles_close(uniform, "uniform 1..1e5");

  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> lognormal(std::log(3000.0), 1.0);  // ~3 us median
  std::vector<uint64_t> ln;
  for (int i = 0; i < 50000; ++i) ln.push_back(static_cast<uint64_t>(lognormal(rng)) + 1);
  expect_quantiles_close(ln, "lognormal");

  std::exponential_distribution<double> expo(1.0 / 1e6);
  std::vector<uint64_t> ex;
  for (int i = 0; i < 50000; ++i) ex.push_back(static_cast<uint64_t>(expo(rng)));
  expect_quantiles_close(ex, "exponential");

  std::vector<uint64_t> bimodal;
  for (int i = 0; i < 9000; ++i) bimodal.push_back(1500 + i % 50);
  for (int i = 0; i < 1000; ++i) bimodal.push_back(250000 + i * 13);
  expect_quantiles_close(bimodal, "bimodal");

  // Small values (< 64) are exact.
  LatencyHistogram small;
  for (uint64_t i = 0; i < 64; ++i) small.record(i);
  EXPECT_EQ(small.quantile_ns(0.0), 0u);
  EXPECT_EQ(small.quantile_ns(0.5), 31u);
  EXPECT_EQ(small.quantile_ns(1.0), 63u);
  EXPECT_DOUBLE_EQ(small.mean_ns(), 31.5);
}

TEST(LatencyHistogram, EmptyAndSingleValue) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.quantile_ns(0.5), 0u);
  EXPECT_EQ(h.min_ns(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.mean_ns(), 0.0);
  h.record(123456789);
  for (double q : {0.0, 0.5, 1.0}) EXPECT_EQ(h.quantile_ns(q), 123456789u);  // capped at max
  h.clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
}

TEST(LatencyHistogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> d(1, 10'000'000);
  LatencyHistogram a, b, all;
  for (int i = 0; i < 20000; ++i) {
    uint64_t v = d(rng);
    (i % 3 == 0 ? a : b).record(v);
    all.record(v);
  }
  a.record(5);  // a's min and b's max differ
  all.record(5);
  b.record(50'000'000);
  all.record(50'000'000);
  LatencyHistogram m = a;
  m.merge(b);
  EXPECT_EQ(m.count(), all.count());
  EXPECT_EQ(m.min_ns(), 5u);
  EXPECT_EQ(m.max_ns(), 50'000'000u);
  EXPECT_DOUBLE_EQ(m.mean_ns(), all.mean_ns());
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0}) EXPECT_EQ(m.quantile_ns(q), all.quantile_ns(q));
  EXPECT_EQ(m.to_json(), all.to_json());
  // Merging an empty histogram changes nothing (its min is "none", not 0).
  LatencyHistogram empty;
  m.merge(empty);
  EXPECT_EQ(m.to_json(), all.to_json());
  empty.merge(m);
  EXPECT_EQ(empty.to_json(), all.to_json());
}

TEST(LatencyHistogram, JsonRoundTripIsLossless) {
  std::mt19937_64 rng(99);
  std::lognormal_distribution<double> d(std::log(20000.0), 1.5);
  LatencyHistogram h;
  for (int i = 0; i < 30000; ++i) h.record(static_cast<uint64_t>(d(rng)));
  h.record(std::numeric_limits<uint64_t>::max() / 4);
  nlohmann::json j = h.to_json();
  // Through text, as between processes.
  LatencyHistogram back = LatencyHistogram::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.count(), h.count());
  EXPECT_EQ(back.min_ns(), h.min_ns());
  EXPECT_EQ(back.max_ns(), h.max_ns());
  EXPECT_DOUBLE_EQ(back.mean_ns(), h.mean_ns());
  for (double q : {0.0, 0.25, 0.5, 0.9, 0.999, 1.0})
    EXPECT_EQ(back.quantile_ns(q), h.quantile_ns(q));
  EXPECT_EQ(back.to_json(), j);
  // Sparse: only non-empty buckets are written.
  size_t nonempty = j["b"].size();
  EXPECT_GT(nonempty, 10u);
  EXPECT_LT(nonempty, static_cast<size_t>(LatencyHistogram::kBuckets));
  // The empty histogram round-trips too, and stays empty after a merge with data.
  LatencyHistogram e = LatencyHistogram::from_json(LatencyHistogram().to_json());
  EXPECT_EQ(e.count(), 0u);
  e.record(10);
  EXPECT_EQ(e.min_ns(), 10u);
}

TEST(LatencyHistogram, IndexOfAndUpperEdgeAgreeAcrossTheWholeRange) {
  constexpr int kB = LatencyHistogram::kBuckets;
  auto check_value = [&](uint64_t v) {
    int idx = LatencyHistogram::index_of(v);
    ASSERT_GE(idx, 0) << v;
    ASSERT_LT(idx, kB) << v;
    uint64_t hi = LatencyHistogram::upper_edge(idx);
    ASSERT_LE(v, hi) << v;
    if (idx > 0) {
      ASSERT_GT(v, LatencyHistogram::upper_edge(idx - 1)) << v;
    }
    // Bucket width bounds the error: at most v/64 above the value.
    ASSERT_LE(hi - v, v / 64) << v;
  };
  // Around every power of two, and random values of every bit length.
  std::mt19937_64 rng(1);
  for (int bit = 0; bit < 64; ++bit) {
    uint64_t p = uint64_t{1} << bit;
    for (uint64_t v : {p - 1, p, p + 1, p + p / 2, p | (p - 1)}) check_value(v);
    for (int k = 0; k < 200; ++k) check_value(p | (rng() & (p - 1)));
  }
  check_value(0);
  check_value(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(LatencyHistogram::index_of(std::numeric_limits<uint64_t>::max()), kB - 1);
  EXPECT_EQ(LatencyHistogram::upper_edge(kB - 1), std::numeric_limits<uint64_t>::max());
  // Every bucket: its upper edge maps back to it, the next value to the next bucket, and the
  // edges strictly increase.
  for (int i = 0; i < kB; ++i) {
    uint64_t hi = LatencyHistogram::upper_edge(i);
    ASSERT_EQ(LatencyHistogram::index_of(hi), i) << i;
    if (i + 1 < kB) {
      ASSERT_EQ(LatencyHistogram::index_of(hi + 1), i + 1) << i;
      ASSERT_LT(hi, LatencyHistogram::upper_edge(i + 1)) << i;
    }
  }
  // Recording the extremes works and quantiles stay in range.
  LatencyHistogram h;
  h.record(0);
  h.record(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(h.quantile_ns(0.0), 0u);
  EXPECT_EQ(h.quantile_ns(1.0), std::numeric_limits<uint64_t>::max());
}

}  // namespace
}  // namespace fabkv::testing

// A killed process left region files named after a pid that this process now has: shm would
// refuse our endpoints (fi_enable: EBUSY) until fabric::remove_stale_own_regions clears them.
// Each ctest case runs in a process of its own, so this one's Fabric::open is the first.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "fabric/endpoint.h"

namespace fabkv::testing {
namespace {
TEST(ShmStaleRegions, LeftoversOfAnEarlierProcessWithOurPidAreRemoved) {
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    std::string name = std::to_string(::getpid()) + ":0:" + std::to_string(i);
    int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    // What a killed process leaves: a region header naming its pid, which is ours now
    // (libfabric 2.1 shm: version 8 in the first byte, the owner's pid at offset 4). shm then
    // refuses to create the region, since that pid is alive.
    unsigned char header[4096] = {};
    header[0] = 8;
    const int pid = ::getpid();
    std::memcpy(header + 4, &pid, sizeof(pid));
    ASSERT_EQ(::write(fd, header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
    ::close(fd);
    names.push_back(name);
  }
  fabric::FabricOptions fo;
  fo.provider = "shm";
  fo.quiet = true;
  auto f = fabric::Fabric::open(fo);
  std::vector<std::unique_ptr<fabric::Endpoint>> eps;
  for (int i = 0; i < 4; ++i)
    ASSERT_NO_THROW(eps.push_back(std::make_unique<fabric::Endpoint>(*f)));
  eps.clear();
  for (const auto& n : names)
    EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + n)) << n << " outlived its endpoint";
}
}  // namespace
}  // namespace fabkv::testing

// ------------------------------------------------------------------------- address vectors
#include "fabric/error.h"

namespace fabkv::testing {
namespace {

std::unique_ptr<fabric::Fabric> open_quiet(const std::string& provider) {
  fabric::FabricOptions fo;
  fo.provider = provider;
  fo.quiet = true;
  return fabric::Fabric::open(fo);
}

// Issue #24: libfabric 2.1's rxm AV takes the length implied by whatever name it is handed as
// its own address length (docs/fault-isolation.md, "A client of another fabric"): one shm name
// made every later tcp address "too large for AV", and a tcp server refused every client after
// one that came on shm. shm, the other way round, took a tcp name as a string and inserted it. A
// name of the other provider is refused before libfabric sees it, and the AV takes the next correct
// one.
TEST(AddressVector, AnotherProvidersNameIsRefusedAndTheNextCorrectOneIsTaken) {
  for (const auto& [mine, theirs] : {std::pair{"tcp", "shm"}, std::pair{"shm", "tcp"}}) {
    SCOPED_TRACE(std::string(mine) + " endpoint, " + theirs + " name");
    auto f = open_quiet(mine);
    auto g = open_quiet(theirs);
    fabric::Endpoint ep(*f), peer(*f), stranger(*g);
    for (int i = 0; i < 3; ++i) {
      try {
        ep.insert_peer(stranger.name());
        ADD_FAILURE() << "inserted a " << theirs << " name into a " << mine << " AV";
      } catch (const fabric::FabricError& e) {
        EXPECT_NE(std::string(e.what()).find(f->provider_name()), std::string::npos) << e.what();
      }
    }
    EXPECT_NO_THROW(ep.insert_peer(peer.name()));
  }
}

// Names no peer of this provider has: refused (never read past their end), and the AV stays
// usable.
TEST(AddressVector, GarbageNamesAreRefusedAndTheAvStaysUsable) {
  std::mt19937_64 rng(24);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
  };
  for (const char* provider : {"tcp", "shm"}) {
    SCOPED_TRACE(provider);
    auto f = open_quiet(provider);
    fabric::Endpoint ep(*f), peer(*f);
    std::vector<uint8_t> good = peer.name();
    std::vector<uint8_t> longer = good;
    longer.resize(4096, 'a');
    std::vector<std::pair<std::string, std::vector<uint8_t>>> bad = {
        {"empty", {}},
        {"one byte", {0x02}},
        {"16 random bytes", random_bytes(16)},
        {"300 random bytes", random_bytes(300)},
        {"a real name padded to 4096 bytes", longer},
    };
    if (std::string(provider) == "tcp")
      bad.push_back({"a real name cut short", {good.begin(), good.end() - 1}});
    else bad.push_back({"a name of another scheme", {'f', 'i', '_', 'x', ':', '/', '/', '1', 0}});
    for (const auto& [what, name] : bad)
      EXPECT_THROW(ep.insert_peer(name), fabric::FabricError) << what;
    EXPECT_NO_THROW(ep.insert_peer(good));
  }
}

}  // namespace
}  // namespace fabkv::testing
