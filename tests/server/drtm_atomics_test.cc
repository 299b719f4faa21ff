// drtm's refusal of a fabric whose atomics cannot guard its lock words (src/proto/drtm/atomics.h),
// every case without a NIC: the decision is a pure function of the provider and what the device
// reports; the device query itself only runs on verbs.
#include <gtest/gtest.h>

#include <string>

#include "fabric/fabric.h"
#include "proto/drtm/atomics.h"

namespace fabkv::drtm {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST(DrtmAtomics, ShmAndTcpServeDrtmWhateverTheDeviceSays) {
  // The worker applies every atomic in its own polls there: nothing to ask.
  for (const char* p : {"shm", "tcp", "tcp;ofi_rxm", "udp;ofi_rxd"})
    for (AtomicScope s :
         {AtomicScope::kUnknown, AtomicScope::kNone, AtomicScope::kDevice, AtomicScope::kGlobal})
      EXPECT_EQ(atomics_refusal(p, "", s), "") << p;
}

TEST(DrtmAtomics, VerbsServesDrtmOnlyWithGlobalAtomics) {
  for (const char* p : {"verbs", "verbs;ofi_rxm"}) {
    EXPECT_EQ(atomics_refusal(p, "mlx5_0", AtomicScope::kGlobal), "") << p;
    const std::string hca = atomics_refusal(p, "mlx5_0", AtomicScope::kDevice);
    EXPECT_TRUE(has(hca, "IBV_ATOMIC_HCA") && has(hca, "IBV_ATOMIC_GLOB") && has(hca, "mlx5_0"))
        << hca;
    const std::string none = atomics_refusal(p, "mlx5_0", AtomicScope::kNone);
    EXPECT_TRUE(has(none, "IBV_ATOMIC_NONE") && has(none, "mlx5_0")) << none;
    // Not known to be global is refused too: libfabric does not report it.
    const std::string unknown = atomics_refusal(p, "", AtomicScope::kUnknown);
    EXPECT_TRUE(has(unknown, "unknown") && has(unknown, "libfabric does not report it")) << unknown;
  }
  EXPECT_EQ(atomics_refusal("xverbs", "", AtomicScope::kUnknown), "");  // a layer named verbs only
}

TEST(DrtmAtomics, OtherProvidersAreNotAskedAboutADevice) {
  fabric::FabricOptions fo;
  fo.provider = "shm";
  fo.quiet = true;
  auto f = fabric::Fabric::open(fo);
  std::string device = "stale";
  EXPECT_EQ(device_atomic_scope(*f, &device), AtomicScope::kUnknown);
  EXPECT_EQ(device, "");
  EXPECT_EQ(atomics_refusal(f->provider_name(), device, AtomicScope::kUnknown), "");
}

}  // namespace
}  // namespace fabkv::drtm
