// The endpoint's hot path: posting operations, reaping completions, counting verbs.
// Nothing here throws; errors are libfabric codes (negative) or error completions.
#include <cstdio>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include "fabric/endpoint.h"
#include "fabric/error.h"

namespace fabkv::fabric {

OpContext* Endpoint::scratch(OpContext* ctx, Verb verb) {
  if (ctx == nullptr) {
    // Unsignaled operations still lend their context to the provider until they finish
    // (FI_CONTEXT mode); a ring as deep as the tx queue outlives every one of them.
    ctx = &scratch_ring_[scratch_next_];
    scratch_next_ = (scratch_next_ + 1) % scratch_ring_.size();
    ctx->user = nullptr;
  }
  ctx->verb = verb;
  return ctx;
}

uint64_t Endpoint::flags_for(const PostOptions& o, bool imm) const {
  uint64_t f = 0;
  if (o.signaled || !options_.selective_completion) f |= FI_COMPLETION;
  if (o.inlined) f |= FI_INJECT;
  if (o.more) f |= FI_MORE;
  if (o.delivery_complete) f |= FI_DELIVERY_COMPLETE;
  if (imm) f |= FI_REMOTE_CQ_DATA;
  return f;
}

// Inlined into every post: as a call it was ~35 of the ~110 instructions fabkv adds to an
// fi_inject (callgrind, herd GET on shm: docs/results/perf-callgrind-2026-11-27.md).
[[gnu::always_inline]] inline void Endpoint::count_post(Verb v, size_t bytes, const PostOptions& o,
                                                        bool imm) {
  counters_.on_post(v, bytes, o.signaled || !options_.selective_completion, o.inlined, imm);
}

namespace {

// A message over the provider's max_msg_size is refused here: not every provider checks
// (udp in libfabric 1.17 sends, and delivers, a datagram larger than it advertises; 2.1's
// udpx_sendmsg still checks no size).
long too_big(VerbCounters& counters) {
  counters.on_error(Verb::kSend);
  return -FI_EMSGSIZE;
}

}  // namespace

// One RMA post through fi_readmsg/fi_writemsg; READ, WRITE and WRITE-with-immediate differ
// only in the call, the verb and whether immediate data rides along.
long Endpoint::post_rma(Verb verb, LocalBuffer buf, PeerAddr peer, uint64_t raddr, uint64_t rkey,
                        OpContext* ctx, const PostOptions& o, const uint64_t* imm) {
  iovec iov{buf.addr, buf.len};
  fi_rma_iov rma{raddr, buf.len, rkey};
  void* desc = buf.desc;
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = peer;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = scratch(ctx, verb);
  msg.data = imm ? *imm : 0;
  uint64_t flags = flags_for(o, imm != nullptr);
  return verb == Verb::kRead ? fi_readmsg(ep_, &msg, flags) : fi_writemsg(ep_, &msg, flags);
}

long Endpoint::read(LocalBuffer dst, PeerAddr peer, uint64_t raddr, uint64_t rkey, OpContext* ctx,
                    PostOptions o) {
  o.inlined = false;  // nothing to inline in a READ
  long ret = post_rma(Verb::kRead, dst, peer, raddr, rkey, ctx, o, nullptr);
  if (ret == 0) count_post(Verb::kRead, dst.len, o, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kRead);
  return ret;
}

long Endpoint::write(LocalBuffer src, PeerAddr peer, uint64_t raddr, uint64_t rkey, OpContext* ctx,
                     PostOptions o) {
  long ret = use_inject_call(o) && src.len <= inject_size_
                 ? fi_inject_write(ep_, src.addr, src.len, peer, raddr, rkey)
                 : post_rma(Verb::kWrite, src, peer, raddr, rkey, ctx, o, nullptr);
  if (ret == 0) count_post(Verb::kWrite, src.len, o, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kWrite);
  return ret;
}

long Endpoint::write_imm(LocalBuffer src, uint64_t imm, PeerAddr peer, uint64_t raddr,
                         uint64_t rkey, OpContext* ctx, PostOptions o) {
  long ret = use_inject_call(o) && src.len <= inject_size_
                 ? fi_inject_writedata(ep_, src.addr, src.len, imm, peer, raddr, rkey)
                 : post_rma(Verb::kWrite, src, peer, raddr, rkey, ctx, o, &imm);
  if (ret == 0) count_post(Verb::kWrite, src.len, o, true);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kWrite);
  return ret;
}

// One message post through fi_sendmsg; a zero-length payload carries no iov (the
// Guidelines' header-only SEND, immediate data only).
long Endpoint::post_msg(LocalBuffer buf, PeerAddr peer, OpContext* ctx, const PostOptions& o,
                        const uint64_t* imm) {
  iovec iov{buf.addr, buf.len};
  void* desc = buf.desc;
  fi_msg msg{};
  msg.msg_iov = buf.len > 0 ? &iov : nullptr;
  msg.desc = buf.len > 0 ? &desc : nullptr;
  msg.iov_count = buf.len > 0 ? 1 : 0;
  msg.addr = peer;
  msg.context = scratch(ctx, Verb::kSend);
  msg.data = imm ? *imm : 0;
  return fi_sendmsg(ep_, &msg, flags_for(o, imm != nullptr));
}

long Endpoint::send(LocalBuffer src, PeerAddr peer, OpContext* ctx, PostOptions o) {
  if (src.len > max_msg_size_) [[unlikely]]
    return too_big(counters_);
  long ret = use_inject_call(o) && src.len <= inject_size_ ? fi_inject(ep_, src.addr, src.len, peer)
                                                           : post_msg(src, peer, ctx, o, nullptr);
  if (ret == 0) count_post(Verb::kSend, src.len, o, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kSend);
  return ret;
}

long Endpoint::send_imm(LocalBuffer src, uint64_t imm, PeerAddr peer, OpContext* ctx,
                        PostOptions o) {
  if (src.len > max_msg_size_) [[unlikely]]
    return too_big(counters_);
  long ret = use_inject_call(o) && src.len <= inject_size_
                 ? fi_injectdata(ep_, src.addr, src.len, imm, peer)
                 : post_msg(src, peer, ctx, o, &imm);
  if (ret == 0) count_post(Verb::kSend, src.len, o, true);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kSend);
  return ret;
}

long Endpoint::recv(LocalBuffer dst, OpContext* ctx) {
  long ret = fi_recv(ep_, dst.addr, dst.len, dst.desc, FI_ADDR_UNSPEC, scratch(ctx, Verb::kRecv));
  if (ret == 0) counters_.on_post(Verb::kRecv, dst.len, true, false, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kRecv);
  return ret;
}

long Endpoint::recv_multi(LocalBuffer dst, OpContext* ctx) {
  iovec iov{dst.addr, dst.len};
  void* desc = dst.desc;
  fi_msg msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = FI_ADDR_UNSPEC;
  msg.context = scratch(ctx, Verb::kRecv);
  long ret = fi_recvmsg(ep_, &msg, FI_MULTI_RECV | FI_COMPLETION);
  if (ret == 0) counters_.on_post(Verb::kRecv, dst.len, true, false, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kRecv);
  return ret;
}

long Endpoint::fetch_add(LocalBuffer operand, LocalBuffer result, PeerAddr peer, uint64_t raddr,
                         uint64_t rkey, OpContext* ctx) {
  long ret = fi_fetch_atomic(ep_, operand.addr, 1, operand.desc, result.addr, result.desc, peer,
                             raddr, rkey, FI_UINT64, FI_SUM, scratch(ctx, Verb::kAtomic));
  if (ret == 0) counters_.on_post(Verb::kAtomic, sizeof(uint64_t), true, false, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kAtomic);
  return ret;
}

long Endpoint::compare_swap(LocalBuffer swap, LocalBuffer compare, LocalBuffer result,
                            PeerAddr peer, uint64_t raddr, uint64_t rkey, OpContext* ctx) {
  long ret = fi_compare_atomic(ep_, swap.addr, 1, swap.desc, compare.addr, compare.desc,
                               result.addr, result.desc, peer, raddr, rkey, FI_UINT64, FI_CSWAP,
                               scratch(ctx, Verb::kAtomic));
  if (ret == 0) counters_.on_post(Verb::kAtomic, sizeof(uint64_t), true, false, false);
  else if (ret != -FI_EAGAIN) counters_.on_error(Verb::kAtomic);
  return ret;
}

namespace {

// Every flag that names an operation or its direction.
constexpr uint64_t kOperationFlags = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                     FI_REMOTE_WRITE | FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;

// Remote CQ data arrives either with a receive (FI_RECV) or with a remote WRITE
// (FI_REMOTE_WRITE), so a completion that carries it and names no operation is a remote WRITE
// with immediate data. libfabric 2.0 to 2.4's shm reports those with FI_REMOTE_CQ_DATA alone
// (its "cleanup op flags" change, ofiwg/libfabric fc24cadcf, dropped the FI_RMA |
// FI_REMOTE_WRITE that 1.17 set; 5f73ca045 puts them back in 2.5). Without this, fabkv took
// the announcement for a local completion and never counted the inbound WRITE.
uint64_t normalized_flags(uint64_t flags) {
  if ((flags & FI_REMOTE_CQ_DATA) != 0 && (flags & kOperationFlags) == 0)
    flags |= FI_RMA | FI_REMOTE_WRITE;
  return flags;
}

Verb verb_from_flags(uint64_t flags, Verb fallback) {
  if (flags & FI_ATOMIC) return Verb::kAtomic;
  if (flags & FI_RECV) return Verb::kRecv;
  if (flags & FI_REMOTE_WRITE) return Verb::kWrite;
  if (flags & FI_READ) return Verb::kRead;
  if (flags & FI_WRITE) return Verb::kWrite;
  if (flags & FI_SEND) return Verb::kSend;
  return fallback;
}

}  // namespace

// A remote WRITE's completion at the target belongs to no operation of ours unless the
// provider consumed one of our receives for it (FI_RX_CQ_DATA mode, verbs): its op_context is
// then NULL by the spec, but shm fills it with an internal message id (smr_progress_cmd_rma),
// which must never be taken for an OpContext.
OpContext* Endpoint::own_context(uint64_t flags, void* op_context) const {
  if ((flags & FI_REMOTE_WRITE) != 0 && (flags & FI_RECV) == 0 && !remote_write_takes_recv_)
    return nullptr;
  return static_cast<OpContext*>(op_context);
}

void Endpoint::to_completion(const void* raw, Completion* c) {
  const auto* e = static_cast<const fi_cq_data_entry*>(raw);
  const uint64_t flags = normalized_flags(e->flags);
  c->context = own_context(flags, e->op_context);
  c->flags = flags;
  c->len = e->len;
  c->buf = e->buf;
  c->has_data = (flags & FI_REMOTE_CQ_DATA) != 0;
  c->data = c->has_data ? e->data : 0;
  c->multi_recv_done = (flags & FI_MULTI_RECV) != 0;
  c->error = 0;
  c->error_text[0] = '\0';
  c->verb = verb_from_flags(flags, c->context ? c->context->verb : Verb::kSend);
  // Remote-write-with-immediate completions carry no local context (see own_context).
  c->inbound = (flags & (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0;
  if (c->inbound) {
    if (c->verb == Verb::kRecv && (flags & FI_MSG) == 0 && (flags & FI_REMOTE_CQ_DATA) &&
        (flags & FI_REMOTE_WRITE)) {
      c->verb = Verb::kWrite;
    }
    // A multi-recv release notice with no message carries no arrival.
    if (!(c->multi_recv_done && e->len == 0 && !(flags & FI_MSG)))
      counters_.on_inbound(c->verb == Verb::kRecv ? Verb::kRecv : c->verb, e->len);
    if (c->verb == Verb::kRecv) counters_.on_complete(Verb::kRecv);
  } else {
    counters_.on_complete(c->verb);
  }
}

// The empty poll is what a spinning loop does most (on shm a message waits half a loop turn,
// on average, before it is seen: docs/results/perf-idle-2026-11-27.md), so it is one read and
// a return; whatever the read brought is handled out of line, in poll_more.
size_t Endpoint::poll(std::span<Completion> out) {
  if (out.empty()) return 0;
  fi_cq_data_entry entries[kPollBatch];
  const size_t want = std::min(kPollBatch, out.size());
  const ssize_t n = fi_cq_read(cq_, entries, want);
  if (n == -FI_EAGAIN) return 0;
  return poll_more(out, entries, n, want);
}

// `n` is what the first fi_cq_read of `want` entries returned into `first`.
size_t Endpoint::poll_more(std::span<Completion> out, const void* first, long n, size_t want) {
  fi_cq_data_entry entries[kPollBatch];
  const auto* got_entries = static_cast<const fi_cq_data_entry*>(first);
  size_t got = 0;
  while (true) {
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) to_completion(&got_entries[i], &out[got++]);
      if (static_cast<size_t>(n) < want) break;
    } else if (n == -FI_EAVAIL) {
      if (read_error(&out[got])) got++;
    } else {
      break;  // -FI_EAGAIN: nothing more now
    }
    if (got >= out.size()) break;
    want = std::min(kPollBatch, out.size() - got);
    n = fi_cq_read(cq_, entries, want);
    got_entries = entries;
  }
  return got;
}

// The error completion at the head of the queue into `c`; false if the provider had none.
bool Endpoint::read_error(Completion* c) {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(cq_, &err, 0) <= 0) return false;
  *c = Completion{};
  const uint64_t flags = normalized_flags(err.flags);
  c->context = own_context(flags, err.op_context);
  c->flags = flags;
  c->verb = verb_from_flags(flags, c->context ? c->context->verb : Verb::kSend);
  c->inbound = (flags & (FI_RECV | FI_REMOTE_WRITE)) != 0 && c->context == nullptr;
  // A multi-recv buffer cancelled (closing) is released with its error.
  c->multi_recv_done = (flags & FI_MULTI_RECV) != 0;
  c->error = err.err != 0 ? err.err : FI_EOTHER;
  char buf[256] = {};
  const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
  std::string t = error_text(c->error) + (text && *text ? std::string(": ") + text : "");
  std::snprintf(c->error_text, sizeof c->error_text, "%s", t.c_str());
  counters_.on_error(c->verb);
  return true;
}

size_t Endpoint::wait(size_t n, Deadline deadline, std::vector<Completion>* out) {
  size_t collected = 0;
  Completion buf[16];
  uint32_t spins = 0;
  while (collected < n) {
    size_t got = poll(std::span<Completion>(buf, std::min<size_t>(16, n - collected)));
    for (size_t i = 0; i < got; ++i) {
      if (out != nullptr) out->push_back(std::move(buf[i]));
    }
    collected += got;
    if (got == 0 && (++spins & 0x3ff) == 0 && deadline.expired()) break;
  }
  return collected;
}

void Endpoint::progress_for(std::chrono::milliseconds duration, std::vector<Completion>* out) {
  Deadline d(duration);
  Completion buf[16];
  while (!d.expired()) {
    size_t got = poll(buf);
    if (out != nullptr)
      for (size_t i = 0; i < got; ++i) out->push_back(std::move(buf[i]));
  }
}

}  // namespace fabkv::fabric
