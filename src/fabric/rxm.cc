#include "fabric/rxm.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace fabkv::fabric {

namespace {

// Preposted buffers one message of `len` bytes takes at its receiver (libfabric 2.1,
// prov/rxm/src/rxm_ep.c rxm_ep_init_proto): one up to the eager size, one per segment up to
// rxm's segmentation limit (8 eager sizes), and one, the rendezvous request, above it (the
// data then moves by RMA read straight into the receive the application posted).
size_t buffers_per_message(size_t len) {
  constexpr size_t kSarLimit = 8 * kRxmEagerBytes;
  if (len <= kRxmEagerBytes || len > kSarLimit) return 1;
  return (len + kRxmEagerBytes - 1) / kRxmEagerBytes;
}

}  // namespace

RxmSizes rxm_sizes(const RxmNeeds& needs) {
  const size_t in_flight = needs.in_flight != 0 ? needs.in_flight : kRxmClientInFlight;
  const size_t per_message = buffers_per_message(needs.largest_message);
  // in_flight * per_message cannot overflow in practice (both come from option ranges), but a
  // ceiling is wanted anyway.
  const size_t want = std::min(in_flight, kRxmMaxRxBuffers) * per_message + kRxmControlBuffers;
  RxmSizes s;
  s.buffer_size = kRxmEagerBytes;
  s.msg_rx_size = std::min(want, kRxmMaxRxBuffers);
  // Every transfer entry of the tcp provider carries a buffer of this size, 1,024 entries at
  // a time, used only for a message that arrives before any receive is posted (a larger one
  // gets a buffer of its own size, prov/tcp/src/xnet_progress.c xnet_get_save_rx). rxm keeps
  // receives posted, so the smallest size worth having: rxm's control messages.
  s.tcp_rx_size = kRxmTcpRxBytes;
  return s;
}

std::vector<RxmSetting> rxm_settings(const RxmSizes& s) {
  return {{"FI_OFI_RXM_BUFFER_SIZE", std::to_string(s.buffer_size)},
          {"FI_OFI_RXM_MSG_RX_SIZE", std::to_string(s.msg_rx_size)},
          {"FI_TCP_MAX_RX_SIZE", std::to_string(s.tcp_rx_size)}};
}

size_t rxm_eager_bytes() {
  const char* v = std::getenv("FI_OFI_RXM_BUFFER_SIZE");
  if (v == nullptr || *v == '\0') return kRxmEagerBytes;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 0);
  return end != nullptr && *end == '\0' ? static_cast<size_t>(n) : kRxmEagerBytes;
}

std::vector<RxmSetting> configure_rxm(const RxmNeeds& needs) {
  static std::once_flag once;
  std::call_once(once, [&] {
    for (const RxmSetting& s : rxm_settings(rxm_sizes(needs)))
      setenv(s.name.c_str(), s.value.c_str(), /*overwrite=*/0);
  });
  std::vector<RxmSetting> now = rxm_settings(RxmSizes{});
  for (RxmSetting& s : now) {
    const char* v = std::getenv(s.name.c_str());
    s.value = v != nullptr ? v : "";
  }
  return now;
}

}  // namespace fabkv::fabric
