// OpLog: a worker's log of the writes it applied (Pilaf sec. 4, "Logging": the server logs every
// put and delete to local disk, as Redis, Masstree and LevelDB do), kept to the promise that
// --oplog-sync makes (Redis's appendfsync), replayed at start, rewritten when it has grown.
// Engine-agnostic: it records what was applied, not how. docs/durability.md is the user's view.
//
// Files. A log is a stem ("<--oplog>.<worker>") and the files named after it, the way Redis 7
// names the parts of its append-only file:
//   <stem>.<N>.base   the live items as of the end of segment N (written by a rewrite); one
//   <stem>.<K>.incr   segments of records in the order they were appended, K > N
//   <stem>.lock       held with flock() while an OpLog has the log open
// Replay reads the base, then the segments in order of K. Appends go to the last segment.
//
// Appending. The worker thread is the only appender: append_*() copies the record into an
// in-memory buffer and returns; the writer thread swaps that buffer for an empty one and
// write()s it, so the records appended while one batch is being written and synced form the
// next batch (group commit). The worker never waits for the disk unless the writer falls more
// than Options::max_pending_bytes behind (backpressure, Stats::stalls). A failed write() is
// counted, the part of the batch that reached the file is cut off again and the batch retried
// with a growing back-off (1 ms up to 1 s); only the destructor gives up, after a few retries,
// so that a dead disk cannot hang shutdown (it logs how many bytes were lost). While a write
// fails, failing() says so: the worker then refuses new writes and answers reads of what is
// written (Worker::execute_st, docs/durability.md "A full disk"), and appends never wait for
// space (there are no more once the worker knows); the first write that succeeds ends it.
//
// Positions. Every appended byte has a position (an LSN: bytes appended since this OpLog
// opened). appended() is the position after the last record appended; durable() the position
// up to which the records are on stable storage (Sync::kAlways: fdatasync returned) or at least
// written to the file (the other modes). A worker holds every answer built while
// appended() > durable() until durable() reaches the appended() it saw
// (Worker::log_barrier_st), so no answer ever reveals a write the log could still lose (to a
// crash of the machine with kAlways, to a crash of the process in every mode).
//
// Sync (Options::sync, --oplog-sync):
//   kAlways    fdatasync after every written batch; durable() moves only then.
//   kEverySec  fdatasync at most once a second (and within about a second of the last write),
//              on a thread of its own: a crash of the machine loses at most about a second of
//              acknowledged writes (more while a sync takes longer than a second).
//   kNo        never fdatasync while running (the page cache decides; once at close).
// A process crash (SIGKILL) loses nothing written in any mode: written bytes are in the page
// cache; and nothing acknowledged, since answers wait for the write. A failed fdatasync with
// kAlways ends the process (see writer_main): Linux may report the pages clean afterwards, so the
// log could no longer tell what is durable.
//
// Rewrite (compaction, Redis's BGREWRITEAOF): once the files hold more than
// rewrite_min_size bytes and rewrite_percentage % more than after the last rewrite (or than at
// open), the writer starts a new segment and the rewriter thread reads the base and the
// segments before it, keeps each key's last record (a DELETE or CLEAR drops what came before,
// an expired item is left out), writes them in log order to "<stem>.<N>.base.tmp", fsyncs it,
// renames it to "<stem>.<N>.base", fsyncs the directory and only then removes the old base and
// segments <= N. A crash at any instant leaves a set of files that replays to the same items.
// It reads only closed files: the worker never waits for it.
//
// File format: a sequence of records, nothing else (no file header). Integers little-endian.
//
//   off  0  u8   magic       0xF2 (format 2; format 1 records, 0xF1, are read too, see below)
//   off  1  u8   op          1 = PUT, 2 = DELETE, 3 = CLEAR (memcached's flush_all),
//                            4 = VERSION (the engine's version counter, see below)
//   off  2  u8   key_len     PUT/DELETE: 1..250 (store::kMaxKeySize); CLEAR/VERSION: 0
//   off  3  u8   reserved    0
//   off  4  u32  value_len   PUT: 0..16 MiB (store::kMaxValueSizeLimit); else 0
//   off  8  u64  version     PUT: the version the engine gave the item; VERSION: the last
//                            version handed out (!= 0); else 0
//   off 16  u32  expire_at   PUT: absolute Unix seconds, 0 = never; CLEAR: when (a delayed
//                            flush_all: absolute Unix seconds; 0 = at once); else 0
//   off 20  u32  flags       PUT: memcached's client flags (store::PutOptions::flags); else 0
//   off 24       key         key_len bytes
//   off 24+K     value       value_len bytes
//   off 24+K+V u64 checksum  XXH3_64bits (seed 0) of bytes [0, 24+K+V): header, key and value
//
// A delayed CLEAR (flush_all N) empties nothing when it is read: it says that everything
// present at its time goes then, unless a later CLEAR replaces it. The running server logs a
// CLEAR at once when the time comes; replay (Worker::open_oplog) arms one still to come, and
// carries out at the end one whose time passed while the server was down. A rewrite keeps the
// last delayed CLEAR that no CLEAR follows.
//
// VERSION keeps CAS versions from going backwards across a rewrite: the rewrite drops deleted
// and expired items, and with them the versions they were given, so it ends every base with a
// VERSION record of the last version the records it read handed out; replay moves the engine's
// counter past it (store::Engine::restore_version). Written by this format's rewrites only.
//
// Format 1 (written before flags were logged) is the same without `flags` (a 20-byte header)
// and without CLEAR and VERSION; its records replay with flags 0. A reader accepts a record only
// if every header field is in range and the checksum matches; the first record that is not
// accepted (or is cut short by the end of the file) ends the valid prefix. A crash in the middle
// of a write leaves such a torn tail in the last segment, and nothing valid after it (the writer
// appends whole batches, and cuts a failed write off before it retries); opening the log cuts
// it away. Anything else is corruption, not a crash's doing, and opening refuses it, naming the
// file and the byte: a base or an earlier segment that does not end in a whole record, and a
// bad record in the last segment that a valid record follows.
//
// Threading: append_*(), appended() and the replay callbacks on the worker (constructing)
// thread; everything else from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fabkv::server {

class OpLog {
 public:
  enum class Sync : uint8_t { kAlways, kEverySec, kNo };

  struct Options {
    Sync sync = Sync::kEverySec;
    // Bytes appended but not yet written (including the batch being written) beyond which
    // append_*() waits for the writer. A single record larger than this is still accepted
    // once everything before it has been written.
    size_t max_pending_bytes = size_t{64} << 20;
    // Rewrite when the files hold at least rewrite_min_size bytes and have grown by
    // rewrite_percentage % since the last rewrite (Redis's auto-aof-rewrite-percentage and
    // auto-aof-rewrite-min-size, same defaults). 0 = never rewrite.
    uint32_t rewrite_percentage = 100;
    uint64_t rewrite_min_size = uint64_t{64} << 20;
    // Called on the writer thread each time durable() moved (to wake a worker that holds
    // answers). Must not call into the OpLog.
    std::function<void()> on_durable = nullptr;
    // Tests only, on the writer / rewriter thread: before each write() of a batch (a slow or
    // stuck disk), and before a rewrite renames its new base into place.
    std::function<void()> before_write = nullptr;
    std::function<void()> before_rename = nullptr;
    // Tests only, on the syncer thread (kEverySec): before each background fdatasync.
    std::function<void()> before_background_sync = nullptr;
  };

  enum class Op : uint8_t { kPut = 1, kDel = 2, kClear = 3, kVersion = 4 };
  // One record as replay hands it over; the views are valid only during the call.
  struct Record {
    Op op = Op::kPut;
    std::string_view key, value;
    uint64_t version = 0;
    uint32_t expire_at = 0;
    uint32_t flags = 0;
  };
  using ApplyFn = std::function<void(const Record&)>;

  struct ReplayResult {
    uint64_t records = 0;      // records applied
    uint64_t files = 0;        // files read (base and segments)
    bool torn_tail = false;    // the last segment ended in bytes that are not a record
    uint64_t valid_bytes = 0;  // bytes of valid records read, over all files
  };

  // Opens the log at `stem` (creating its first segment if there is none), takes its lock,
  // replays it through `apply` (may be empty), cuts a torn tail off the last segment, removes
  // what a rewrite that was cut short left behind, and starts the writer and rewriter threads.
  // A file "<stem>" (the one-file layout of earlier fabkv) becomes the first segment. Throws
  // std::runtime_error naming the file and the errno text when a file cannot be opened,
  // locked, read or truncated, and when a base or an earlier segment is corrupt.
  OpLog(const std::string& stem, Options options, const ApplyFn& apply = nullptr);
  explicit OpLog(const std::string& stem) : OpLog(stem, Options{}) {}
  // Writes and syncs everything appended (waiting for the writer), waits for a rewrite in
  // progress, joins the threads, closes.
  ~OpLog();

  OpLog(const OpLog&) = delete;
  OpLog& operator=(const OpLog&) = delete;

  // Worker thread only. Copies the record into the current in-memory buffer; blocks only for
  // backpressure (see Options::max_pending_bytes). Preconditions (what the engine accepts):
  // 1 <= key.size() <= store::kMaxKeySize, value.size() <= store::kMaxValueSizeLimit; a
  // violation throws std::invalid_argument and logs nothing.
  void append_put(std::string_view key, std::string_view value, uint64_t version,
                  uint32_t expire_at, uint32_t flags = 0);
  void append_del(std::string_view key);
  // A CLEAR at `at` (absolute Unix seconds; 0: now): memcached's delayed flush_all.
  void append_clear(uint32_t at = 0);

  // A write of the log failed and has not succeeded since (a full disk, an I/O error): any
  // thread. failures() counts how often that began.
  bool failing() const { return failing_.load(std::memory_order_acquire); }
  uint64_t failures() const { return failures_.load(std::memory_order_acquire); }
  // Worker thread: calls `fn` for every record appended and not yet written (the batch being
  // written and those after it), in order.
  void for_each_unwritten(const ApplyFn& fn);

  // Positions (see the top). appended(): worker thread. durable(): any thread.
  uint64_t appended() const { return appended_; }
  uint64_t durable() const { return durable_.load(std::memory_order_seq_cst); }
  Sync sync() const { return options_.sync; }

  struct Stats {
    uint64_t records;         // records appended
    uint64_t bytes;           // bytes appended (encoded records, framing included)
    uint64_t flushes;         // batches written
    uint64_t syncs;           // fdatasync calls that returned
    uint64_t stalls;          // append_*() calls that had to wait for the writer (backpressure)
    uint64_t write_errors;    // failed write()/fdatasync()/ftruncate() calls (each retry counts)
    uint64_t rewrites;        // rewrites finished
    uint64_t rewrite_errors;  // rewrites given up (the old files stay; tried again later)
    uint64_t file_bytes;      // bytes in the log's files now (base and segments)
    uint64_t base_bytes;      // the base's size after the last rewrite (or the files' at open)
  };
  Stats stats() const;  // any thread
  const std::string& stem() const { return stem_; }
  // What opening found (and replayed).
  const ReplayResult& recovered() const { return recovered_; }
  // The segment being appended to now (tests).
  std::string current_segment() const;

  // Replays only what a rewrite would keep of this log (each key's last live record in log
  // order, a delayed CLEAR still to come, the VERSION record), as if it had just been
  // rewritten: an engine that the whole history did not fit (Worker::open_oplog). Before the
  // first append. Throws std::runtime_error as the constructor does.
  void replay_live(const ApplyFn& apply);

  // Replays the log at `stem` without opening it for appends (tools and tests): calls `apply`
  // for each record in order. Stops at a torn tail of the last segment; a missing log is empty.
  // Throws std::runtime_error as the constructor does; exceptions from `apply` propagate.
  static ReplayResult replay(const std::string& stem, const ApplyFn& apply);

  static std::string segment_path(const std::string& stem, uint64_t k);
  static std::string base_path(const std::string& stem, uint64_t n);
  static const char* to_string(Sync s);
  static std::optional<Sync> sync_from_string(std::string_view s);

  // Format constants (see the table above).
  static constexpr uint8_t kMagic = 0xF2;
  static constexpr uint8_t kMagicV1 = 0xF1;
  static constexpr size_t kHeaderSize = 24;
  static constexpr size_t kHeaderSizeV1 = 20;
  static constexpr size_t kTrailerSize = 8;

 private:
  // A growable byte buffer that does not zero what it hands out.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t size = 0, capacity = 0;
    char* grow(size_t n);  // appends n uninitialised bytes, returns where they start
  };

  void append(Op op, std::string_view key, std::string_view value, uint64_t version,
              uint32_t expire_at, uint32_t flags);
  void writer_main();
  void write_batch(const Buffer& batch);
  void sync_now();
  void sync_in_background();
  void syncer_main();
  void stop_syncer();
  void maybe_rotate();
  void rewriter_main();
  bool rewrite(uint64_t through);

  const std::string stem_;
  const Options options_;
  int lock_fd_ = -1;
  int fd_ = -1;           // the segment appended to (writer thread after construction)
  uint64_t segment_ = 0;  // its number K
  ReplayResult recovered_;
  uint64_t segment_size_ = 0;  // writer thread: bytes in the current segment
  bool unsynced_ = false;      // writer thread: written since the last fdatasync
  std::chrono::steady_clock::time_point last_sync_{};

  std::mutex mu_;
  std::condition_variable work_cv_;   // writer waits: something to write, or stop
  std::condition_variable space_cv_;  // a stalled appender waits: pending_ went down
  Buffer active_;                     // guarded by mu_: records not yet taken by the writer
  Buffer writing_;  // the batch being written: swapped and emptied under mu_, read by the writer
  std::atomic<bool> failing_{false};
  std::atomic<uint64_t> failures_{0};
  size_t pending_ = 0;                 // guarded by mu_: active_.size + the batch being written
  uint64_t appended_ = 0;              // guarded by mu_ (written by the worker thread only)
  bool stop_ = false;                  // guarded by mu_
  std::atomic<bool> stopping_{false};  // the same, readable without mu_ (writer's retry loop)
  std::atomic<uint64_t> durable_{0};

  // Rewrites: the writer hands the rewriter the last segment a new base is to cover.
  std::mutex rw_mu_;
  std::condition_variable rw_cv_;
  uint64_t rewrite_through_ = 0;  // guarded by rw_mu_: 0 = no rewrite asked for
  bool rewriting_ = false;        // guarded by rw_mu_: asked for or running
  bool rw_stop_ = false;          // guarded by rw_mu_
  std::atomic<uint64_t> file_bytes_{0}, base_bytes_{0};
  std::atomic<uint64_t> retry_at_bytes_{0};  // after a failed rewrite, wait for this size

  // kEverySec's fdatasync runs on the syncer thread (Redis's background fsync), so that a slow
  // disk never holds the writes behind a sync, nor the answers waiting for those writes.
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  int sync_fd_ = -1;        // guarded by sync_mu_: a dup() of the segment to sync; -1 = none
  bool sync_stop_ = false;  // guarded by sync_mu_

  std::atomic<uint64_t> records_{0}, bytes_{0}, flushes_{0}, syncs_{0}, stalls_{0},
      write_errors_{0}, rewrites_{0}, rewrite_errors_{0};
  std::thread syncer_;  // kEverySec only
  std::thread rewriter_;
  std::thread writer_;  // last: started when everything above is ready
};

}  // namespace fabkv::server
