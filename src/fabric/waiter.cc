#include "fabric/waiter.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

#include "fabric/error.h"

namespace fabkv::fabric {

const char* to_string(Wakeup w) {
  switch (w) {
    case Wakeup::kNone: return "none";
    case Wakeup::kCompletions: return "completions";
    case Wakeup::kAnyArrival: return "any-arrival";
  }
  return "?";
}

Wakeup wakeup_of(const Endpoint& ep) {
  if (ep.wait_fd() < 0) return Wakeup::kNone;
  // tcp (and tcp;ofi_rxm): the CQ's wait object holds the provider's progress epoll set, i.e.
  // every socket (xnet_cq_open adds it; rxm adds its tcp CQ and connection EQ), so a READ
  // request or a WRITE's bytes wake it before they are served or placed. Pinned by
  // tests/fabric/wait_test.cc.
  if (std::string_view(ep.fabric().provider_name()).starts_with("tcp")) return Wakeup::kAnyArrival;
  return Wakeup::kCompletions;
}

Waiter::Waiter() {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw FabricError("eventfd", -errno);
}

Waiter::~Waiter() {
  if (event_fd_ >= 0) close(event_fd_);
}

void Waiter::wake() {
  uint64_t one = 1;
  // A full counter (2^64-2 wakes unread) or EINTR leaves it readable anyway.
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
}

Waiter::Woke Waiter::wait(std::span<Endpoint* const> eps, std::span<const int> extra,
                          std::chrono::microseconds timeout) {
  fids_.clear();
  pfds_.clear();
  pfds_.push_back({event_fd_, POLLIN, 0});
  for (Endpoint* ep : eps) {
    if (ep->wait_fd_ < 0) continue;
    fids_.push_back(&ep->cq_->fid);
    pfds_.push_back({ep->wait_fd_, POLLIN, 0});
  }
  for (int fd : extra) pfds_.push_back({fd, POLLIN, 0});
  // fi_trywait: completions queued, or work the provider must do first, say "not now"; only
  // after FI_SUCCESS may the descriptors be waited on. Asked of each endpoint's own fabric.
  for (Endpoint* ep : eps) {
    if (ep->wait_fd_ < 0) continue;
    fid* f = &ep->cq_->fid;
    if (fi_trywait(ep->fabric().fabric(), &f, 1) != 0) return Woke::kPending;
  }
  if (timeout.count() < 0) timeout = std::chrono::microseconds(0);
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  int n = ppoll(pfds_.data(), pfds_.size(), &ts, nullptr);
  if (n <= 0) return Woke::kTimeout;  // 0, or EINTR: the caller polls and decides again
  bool fabric = false;
  for (size_t i = 1; i < pfds_.size(); ++i) fabric |= pfds_[i].revents != 0;
  if (pfds_[0].revents != 0) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = read(event_fd_, &v, sizeof v);
  }
  return fabric ? Woke::kFabric : Woke::kWake;
}

}  // namespace fabkv::fabric
