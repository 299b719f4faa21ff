// How much memory libfabric's ofi_rxm (the rdm layer fabkv gets over tcp and verbs) sets aside
// per endpoint, sized from what fabkv's protocols keep in flight instead of rxm's defaults
// (docs/fabric.md, "The memory of an rdm endpoint over tcp").
//
// libfabric 2.1's rxm reads these settings from the environment once, when the process's first
// fi_getinfo initialises the providers; there are no fi_info attributes for them (an endpoint's
// rx_attr/tx_attr sizes are rxm's own queues, not its preposted buffers). So fabkv sets them
// with setenv before its first fi_getinfo, and only those the user has not set.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fabkv::fabric {

// What one endpoint of this process must be able to receive at once.
struct RxmNeeds {
  size_t in_flight = 0;        // messages that may be on their way to one endpoint (0: a client's)
  size_t largest_message = 0;  // bytes of the largest of them (0: one eager buffer)
};

// The eager size every fabkv process gives rxm (FI_OFI_RXM_BUFFER_SIZE): messages up to it travel
// in one preposted buffer, larger ones in segments of it (up to 8 of them) or by rendezvous. rxm
// refuses a connection between endpoints whose eager sizes differ, so it is one constant for
// every fabkv process, not a size per protocol.
inline constexpr size_t kRxmEagerBytes = 4096;
// Messages in flight to a client's endpoint when its caller does not say: a window of 16 on
// each of 4 workers.
inline constexpr size_t kRxmClientInFlight = 64;
// Buffers kept beyond the messages in flight, for rxm's own control messages (rendezvous
// replies, segment acknowledgements).
inline constexpr size_t kRxmControlBuffers = 16;
// FI_TCP_MAX_RX_SIZE: rxm's control messages (a header and a rendezvous request) fit.
inline constexpr size_t kRxmTcpRxBytes = 512;
// The most FI_OFI_RXM_MSG_RX_SIZE may be: the tcp provider's msg endpoints take at most 1,024
// receives (libfabric 2.1, prov/tcp/src/xnet_attr.c), and with a larger setting rxm offers no
// endpoint over tcp at all, so fi_getinfo returns the tcp provider's own rdm endpoint, which
// an rxm peer cannot talk to.
inline constexpr size_t kRxmMaxRxBuffers = 1024;

struct RxmSizes {
  size_t buffer_size = 0;  // FI_OFI_RXM_BUFFER_SIZE: eager message size, one buffer's payload
  size_t msg_rx_size = 0;  // FI_OFI_RXM_MSG_RX_SIZE: buffers preposted per endpoint
  size_t tcp_rx_size = 0;  // FI_TCP_MAX_RX_SIZE: the tcp provider's buffer for a message that
                           // arrives before a receive is posted (larger ones get their own)
};

// The sizes for `needs`; a pure function (tests/fabric/rxm_test.cc).
RxmSizes rxm_sizes(const RxmNeeds& needs);

// One environment setting: its name and fabkv's value.
struct RxmSetting {
  std::string name;
  std::string value;
};
std::vector<RxmSetting> rxm_settings(const RxmSizes& sizes);

// The eager size rxm runs with in this process: FI_OFI_RXM_BUFFER_SIZE as configure_rxm left it
// (the user's, else fabkv's), kRxmEagerBytes before that. The handshake compares the client's
// with the server's (client/session.cc, server/server.cc): with two different sizes rxm drops
// the connection and the client would only see its requests time out.
size_t rxm_eager_bytes();

// Sets each of rxm_settings(rxm_sizes(needs)) that the environment does not already hold, the
// first time it is called in the process (later calls change nothing: rxm has read them).
// Returns the settings the environment held afterwards, for logs.
std::vector<RxmSetting> configure_rxm(const RxmNeeds& needs);

}  // namespace fabkv::fabric
