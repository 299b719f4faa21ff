// Endpoint: one libfabric endpoint with its completion queue and (for rdm/dgram) its address
// vector, and every operation the papers' protocols are built from. The hot path lives in
// endpoint_datapath.cc; set-up and connection management in endpoint.cc.
//
// Threading: an Endpoint belongs to one thread (FI_THREAD_DOMAIN unless the Fabric was opened
// thread-safe); only counters().snapshot() may be called from others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/deadline.h"
#include "fabric/counters.h"
#include "fabric/fabric.h"
#include "fabric/memory_region.h"

struct fid_ep;
struct fid_cq;
struct fid_cntr;
struct fid_av;
struct fid_eq;
struct fid_pep;
struct fi_info;

namespace fabkv::fabric {

// Data-path return codes callers test for (libfabric's -FI_EAGAIN and -FI_EINVAL).
inline constexpr long kAgain = -11;
inline constexpr long kInvalid = -22;

using PeerAddr = uint64_t;                         // an fi_addr_t
inline constexpr PeerAddr kNoPeer = ~uint64_t{0};  // FI_ADDR_UNSPEC: connected (msg) endpoints

// The context of every posted operation. libfabric providers with FI_CONTEXT/FI_CONTEXT2 mode
// use the first 64 bytes as scratch until the operation completes, so it must stay alive (and
// unmoved) until then. Embed it in your own per-request state and get it back in Completion.
struct OpContext {
  void* provider_scratch[8] = {};  // layout of struct fi_context2
  void* user = nullptr;
  void* owner = nullptr;  // who handles its completion (a server worker routes by it)
  uint64_t tag = 0;
  Verb verb = Verb::kSend;  // set by the endpoint when the operation is posted
};

// Per-operation knobs the papers vary (Guidelines sec. 3; HERD sec. 3.2).
struct PostOptions {
  bool signaled = true;  // ask for a completion (matters with selective_completion)
  bool inlined = false;  // payload copied at post time (fi_inject*, FI_INJECT); <= inject_size
  bool more = false;     // FI_MORE: more posts follow, ring the doorbell later (doorbell batching)
  bool delivery_complete = false;  // FI_DELIVERY_COMPLETE: complete when visible at the target
};

// Filled in whole by Endpoint::poll, so it is trivial: an array of them costs nothing to
// declare on every poll (a std::string member here once took ~400 ns a round to construct and
// destroy 32 of them). Value-initialize (`Completion{}`) for zeros.
struct Completion {
  OpContext* context;
  Verb verb;
  bool inbound;          // an arrival (RECV, remote WRITE with immediate), not a local op
  bool has_data;         // immediate data present
  bool multi_recv_done;  // FI_MULTI_RECV: the provider released this multi-recv buffer
  uint64_t data;
  size_t len;
  void* buf;             // for multi-recv: where this message landed
  uint64_t flags;        // raw libfabric completion flags
  int error;             // 0, or a positive libfabric errno
  char error_text[120];  // provider's text when error != 0 (NUL-terminated, truncated)
};
static_assert(std::is_trivial_v<Completion>);

struct EndpointOptions {
  size_t tx_depth = 256;  // transmit queue entries; a full queue returns -FI_EAGAIN
  size_t rx_depth = 256;
  size_t cq_depth = 1024;
  size_t av_size = 256;
  // FI_SELECTIVE_COMPLETION: only ops posted with signaled=true produce completions
  // (Guidelines sec. 3.1 "unsignaled" verbs; signal every k-th op).
  bool selective_completion = false;
  // Bytes that must remain free in a multi-recv buffer before the provider releases it. At
  // least the largest message the endpoint receives: libfabric 2.1's shared receive queue
  // (shm, tcp;ofi_rxm) places a message in what is left of the buffer without checking that it
  // fits.
  size_t min_multi_recv = 0;
  // For a thread that blocks when idle (fabric/waiter.h): the completion queue gets a wait
  // object (FI_WAIT_FD) where the provider has one, and a counter of inbound one-sided
  // operations (FI_REMOTE_READ | FI_REMOTE_WRITE) where it counts them. libfabric 2.1's shm
  // has no wait object (its CQs take FI_WAIT_NONE or FI_WAIT_YIELD only) but counts; tcp has
  // both (docs/fabric.md, "Blocking"). Off: FI_WAIT_NONE and no counter, as before.
  bool waitable = false;
};

class Endpoint {
 public:
  // A connectionless endpoint (rdm or dgram fabrics). Throws FabricError.
  Endpoint(Fabric& fabric, const EndpointOptions& options = {});
  // A connected (msg) endpoint: connects to a Listener's name before the deadline.
  static std::unique_ptr<Endpoint> connect(Fabric& fabric, std::span<const uint8_t> listener_name,
                                           const EndpointOptions& options, Deadline deadline);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Fabric& fabric() const { return fabric_; }
  EndpointType type() const { return fabric_.type(); }
  std::vector<uint8_t> name() const;  // fi_getname: what a peer inserts into its AV
  VerbCounters& counters() { return counters_; }
  const VerbCounters& counters() const { return counters_; }
  size_t inject_size() const { return inject_size_; }
  // The FI_OPT_MIN_MULTI_RECV it was enabled with (EndpointOptions::min_multi_recv; 0: the
  // provider's default). Fixed for its life: the provider reads it only at fi_enable.
  size_t min_multi_recv() const { return options_.min_multi_recv; }

  // Address vector (rdm/dgram). Throws FabricError, and leaves the AV as it was, for a name
  // this endpoint cannot use: one of another provider or address format, or garbage
  // (peer_name_problem says which), or one the provider refuses.
  PeerAddr insert_peer(std::span<const uint8_t> name);
  void remove_peer(PeerAddr peer);

  // ---- data path: 0 on success, -FI_EAGAIN when the queue is full (poll, then retry), or a
  // negative libfabric error. Never throws. `peer` is ignored on msg endpoints. A null ctx is
  // allowed for unsignaled operations.
  long read(LocalBuffer dst, PeerAddr peer, uint64_t raddr, uint64_t rkey, OpContext* ctx,
            PostOptions o = {});
  long write(LocalBuffer src, PeerAddr peer, uint64_t raddr, uint64_t rkey, OpContext* ctx,
             PostOptions o = {});
  // WRITE with immediate data: the target gets an inbound completion carrying `imm`.
  long write_imm(LocalBuffer src, uint64_t imm, PeerAddr peer, uint64_t raddr, uint64_t rkey,
                 OpContext* ctx, PostOptions o = {});
  long send(LocalBuffer src, PeerAddr peer, OpContext* ctx, PostOptions o = {});
  // SEND with immediate data; with src.len == 0 this is the Guidelines' header-only SEND.
  long send_imm(LocalBuffer src, uint64_t imm, PeerAddr peer, OpContext* ctx, PostOptions o = {});
  long recv(LocalBuffer dst, OpContext* ctx);
  // One buffer that receives many messages (FI_MULTI_RECV, rdm only).
  long recv_multi(LocalBuffer dst, OpContext* ctx);
  // 64-bit fetch-and-add / compare-and-swap on remote memory; operand/compare/result are
  // 8-byte local buffers (registered when the provider needs FI_MR_LOCAL).
  long fetch_add(LocalBuffer operand, LocalBuffer result, PeerAddr peer, uint64_t raddr,
                 uint64_t rkey, OpContext* ctx);
  long compare_swap(LocalBuffer swap, LocalBuffer compare, LocalBuffer result, PeerAddr peer,
                    uint64_t raddr, uint64_t rkey, OpContext* ctx);

  // Reaps up to out.size() completions (this also drives progress on manual-progress
  // providers). Returns how many were written; error completions are returned with `error`.
  size_t poll(std::span<Completion> out);
  // Polls until `n` completions are collected into `out` or the deadline passes; returns how
  // many were collected (fewer than n means the deadline passed).
  size_t wait(size_t n, Deadline deadline, std::vector<Completion>* out);
  // Polls for `duration` and discards nothing: completions are appended to `out` if given.
  void progress_for(std::chrono::milliseconds duration, std::vector<Completion>* out = nullptr);

  // msg endpoints: true once the peer has shut the connection down.
  bool peer_shutdown();

  // ---- blocking (EndpointOptions::waitable; fabric/waiter.h)
  // The completion queue's wait object (FI_GETWAIT): a file descriptor that becomes readable
  // when the provider has something for this endpoint. -1 when not waitable or the provider
  // has none (shm).
  int wait_fd() const { return wait_fd_; }
  // Inbound one-sided operations (READs and WRITEs by peers) the provider has counted, or 0
  // when it does not count them (counts_remote_ops() false). Drives progress, like poll().
  uint64_t remote_ops();
  bool counts_remote_ops() const { return remote_cntr_ != nullptr; }

 private:
  friend class Listener;
  friend class Waiter;
  Endpoint(Fabric& fabric, const EndpointOptions& options, fi_info* conn_info);  // msg
  void open_common(fi_info* info);
  OpContext* scratch(OpContext* ctx, Verb verb);
  uint64_t flags_for(const PostOptions& o, bool imm) const;
  long post_rma(Verb verb, LocalBuffer buf, PeerAddr peer, uint64_t raddr, uint64_t rkey,
                OpContext* ctx, const PostOptions& o, const uint64_t* imm);
  long post_msg(LocalBuffer buf, PeerAddr peer, OpContext* ctx, const PostOptions& o,
                const uint64_t* imm);
  void count_post(Verb v, size_t bytes, const PostOptions& o, bool imm);
  void to_completion(const void* entry, Completion* c);
  // poll's entries per fi_cq_read, and what it does once a read brought anything.
  static constexpr size_t kPollBatch = 16;
  [[gnu::noinline]] size_t poll_more(std::span<Completion> out, const void* first, long n,
                                     size_t want);
  bool read_error(Completion* c);
  // The fi_inject* calls never produce a completion; used for inlined unsignaled posts, the
  // cheapest form (HERD sec. 3.2: inlined, unsignaled WRITEs), unless FI_MORE must be passed.
  bool use_inject_call(const PostOptions& o) const {
    return o.inlined && !o.signaled && (!o.more || more_ignored_);
  }
  OpContext* own_context(uint64_t flags, void* op_context) const;

  Fabric& fabric_;
  EndpointOptions options_;
  fid_ep* ep_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  std::vector<uint8_t> own_name_;    // name(), kept by insert_peer to check peers against
  fid_eq* eq_ = nullptr;             // msg only: connection events
  fid_cntr* remote_cntr_ = nullptr;  // waitable: inbound READs/WRITEs, where counted
  fid_cntr* write_cntr_ = nullptr;   // ofi_rxm: keeps its inlined WRITEs off a crashing path
  int wait_fd_ = -1;                 // waitable: the CQ's FI_GETWAIT descriptor
  size_t inject_size_ = 0;
  size_t max_msg_size_ = 0;    // the provider's, kept at open: send() checks it on every post
  bool more_ignored_ = false;  // the provider does nothing with FI_MORE
  bool shutdown_ = false;
  bool remote_write_takes_recv_ = false;  // FI_RX_CQ_DATA mode: remote WRITEs consume a receive
  VerbCounters counters_;
  std::vector<OpContext> scratch_ring_;
  size_t scratch_next_ = 0;
};

// A passive endpoint that accepts msg connections (the RC QP stand-in's server side).
class Listener {
 public:
  explicit Listener(Fabric& fabric);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  std::vector<uint8_t> name() const;
  // Waits for one connection request and accepts it; nullptr when the deadline passes.
  std::unique_ptr<Endpoint> accept(const EndpointOptions& options, Deadline deadline);

 private:
  Fabric& fabric_;
  fid_pep* pep_ = nullptr;
  fid_eq* eq_ = nullptr;
};

// Why `peer` cannot be inserted into the address vector of an endpoint on `fabric` whose own
// name is `own`, or "" when it can. fi_av_insert takes no length: a provider reads as many
// bytes as its address format says, so only a name of our own shape may reach it (the rules
// are in endpoint.cc, docs/fault-isolation.md "A client of another fabric").
std::string peer_name_problem(const Fabric& fabric, std::span<const uint8_t> own,
                              std::span<const uint8_t> peer);

// Textual form of an endpoint name for logs ("fi_av_straddr").
std::string address_to_string(Fabric& fabric, std::span<const uint8_t> name);

}  // namespace fabkv::fabric
