// The sizes fabkv gives libfabric's ofi_rxm (src/fabric/rxm.h) and how it sets them: from what
// an endpoint must receive at once, never over a setting the user made.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "fabric/rxm.h"

namespace fabkv::testing {
namespace {

using fabric::kRxmControlBuffers;
using fabric::kRxmEagerBytes;
using fabric::rxm_sizes;

TEST(RxmSizes, AClientGetsBuffersForItsWindowNotRxmsDefault) {
  const fabric::RxmSizes s = rxm_sizes({});
  EXPECT_EQ(s.buffer_size, kRxmEagerBytes);
  EXPECT_EQ(s.msg_rx_size, fabric::kRxmClientInFlight + kRxmControlBuffers);
  EXPECT_LT(s.msg_rx_size, size_t{4096});  // rxm's own default on tcp
  EXPECT_EQ(s.tcp_rx_size, fabric::kRxmTcpRxBytes);
  EXPECT_GE(s.tcp_rx_size,
            size_t{128});  // the tcp provider raises a smaller one to its inject size
}

TEST(RxmSizes, BuffersFollowMessagesInFlightAndTheirSegments) {
  // Up to the eager size: one buffer a message.
  EXPECT_EQ(rxm_sizes({.in_flight = 256, .largest_message = 100}).msg_rx_size,
            256 + kRxmControlBuffers);
  EXPECT_EQ(rxm_sizes({.in_flight = 256, .largest_message = kRxmEagerBytes}).msg_rx_size,
            256 + kRxmControlBuffers);
  // Segmented: one buffer per eager-sized segment.
  EXPECT_EQ(rxm_sizes({.in_flight = 10, .largest_message = kRxmEagerBytes + 1}).msg_rx_size,
            2 * 10 + kRxmControlBuffers);
  EXPECT_EQ(rxm_sizes({.in_flight = 10, .largest_message = 8 * kRxmEagerBytes}).msg_rx_size,
            8 * 10 + kRxmControlBuffers);
  // Rendezvous above 8 segments: the request takes one buffer, the data none.
  EXPECT_EQ(rxm_sizes({.in_flight = 10, .largest_message = 8 * kRxmEagerBytes + 1}).msg_rx_size,
            10 + kRxmControlBuffers);
  // Never more than the tcp provider takes: above it, libfabric offers no rxm over tcp.
  EXPECT_EQ(rxm_sizes({.in_flight = 100000, .largest_message = 16384}).msg_rx_size, 1024u);
  EXPECT_EQ(rxm_sizes({.in_flight = 64 * 16, .largest_message = 100}).msg_rx_size, 1024u);
}

TEST(RxmSizes, TheEagerSizeIsTheSameWhateverTheNeeds) {
  // rxm refuses connections between endpoints whose eager sizes differ: a server and a client
  // with different needs must still agree.
  EXPECT_EQ(rxm_sizes({.in_flight = 4096, .largest_message = 1 << 20}).buffer_size,
            rxm_sizes({.in_flight = 1, .largest_message = 8}).buffer_size);
}

// ctest runs each test in a process of its own, so this is the process's first configure_rxm.
TEST(RxmConfigure, SetsWhatTheUserLeftAndKeepsWhatTheUserSet) {
  ::setenv("FI_OFI_RXM_MSG_RX_SIZE", "100", 1);
  const bool user_eager = std::getenv("FI_OFI_RXM_BUFFER_SIZE") != nullptr;
  const auto settings = fabric::configure_rxm({.in_flight = 8, .largest_message = 64});
  EXPECT_STREQ(std::getenv("FI_OFI_RXM_MSG_RX_SIZE"), "100");
  if (!user_eager) {
    EXPECT_EQ(std::string(std::getenv("FI_OFI_RXM_BUFFER_SIZE")), std::to_string(kRxmEagerBytes));
  }
  ASSERT_EQ(settings.size(), 3u);
  for (const auto& s : settings) EXPECT_STREQ(std::getenv(s.name.c_str()), s.value.c_str());
  // A second call changes nothing: rxm has read its settings by then.
  ::unsetenv("FI_TCP_MAX_RX_SIZE");
  fabric::configure_rxm({.in_flight = 4000, .largest_message = 64});
  EXPECT_EQ(std::getenv("FI_TCP_MAX_RX_SIZE"), nullptr);
  ::unsetenv("FI_OFI_RXM_MSG_RX_SIZE");
}

}  // namespace
}  // namespace fabkv::testing
