// A client's datagram endpoint for HERD's answers (proto/herd/dgram.h).
#include "fabric/error.h"
#include "proto/herd/dgram.h"

namespace fabkv::herd {

namespace {

fabric::EndpointOptions receiver_options() {
  fabric::EndpointOptions eo;
  eo.av_size = 16;  // it sends nothing: no peers
  eo.tx_depth = 16;
  eo.rx_depth = 1024;
  eo.cq_depth = 2048;
  eo.waitable = true;  // a session that blocks when idle wakes for its answers (own_endpoint)
  return eo;
}

}  // namespace

DgramReceiver::DgramReceiver(const fabric::Fabric& reliable)
    : fabric_(open_dgram_fabric(reliable, true)),
      ep_(std::make_unique<fabric::Endpoint>(*fabric_, receiver_options())),
      address_(fabric::address_to_string(*fabric_, ep_->name())) {}

DgramReceiver::~DgramReceiver() {
  ep_.reset();  // its receives are cancelled before their buffer goes
  rx_.reset();
}

// Once: the buffers stay posted for the endpoint's life (a second Hello to the same server
// finds them there).
void DgramReceiver::post(size_t n, size_t size) {
  if (rx_) return;
  size_ = (size + 7) & ~size_t{7};
  rx_ = std::make_unique<fabric::RegisteredBuffer>(*fabric_, n * size_, fabric::Access::kLocalOnly);
  rx_ctx_ = std::vector<fabric::OpContext>(n);
  for (size_t i = 0; i < n; ++i) {
    rx_ctx_[i].tag = i;
    repost(i);
  }
}

void DgramReceiver::repost(size_t slot) {
  // The receive queue holds every buffer (rx_depth), so a post is refused only by a provider
  // in trouble: counted; the buffer is lost for this session.
  if (ep_->recv(rx_->local(slot * size_, size_), &rx_ctx_[slot]) != 0) counters_.errors++;
}

}  // namespace fabkv::herd
