// OpLog: optional asynchronous logging of PUT and DELETE to a local file (Pilaf sec. 4,
// "Logging": the server logs every put and delete to local disk asynchronously, as Redis,
// Masstree and LevelDB do). Engine-agnostic: it records what was applied, not how.
//
// One log per worker. The worker thread is the only appender: append_*() copies the record into
// an in-memory buffer and returns; a background writer thread swaps that buffer for an empty one
// and write()s it (then fdatasync()s it when `fsync` is set). The worker never waits for the
// disk unless the writer falls more than Options::max_pending_bytes behind; then append_*()
// waits until there is room again (backpressure, counted in Stats::stalls). Nothing is dropped:
// a failed write() is counted (Stats::write_errors), whatever part of the batch reached the file
// is cut off again, and the writer retries the whole batch with a growing back-off (1 ms up to
// 1 s) until it succeeds. Only the destructor gives up, after a few retries, so that a dead disk
// cannot hang shutdown (it logs how many bytes were lost).
//
// Durability: without `fsync`, a record is in the page cache once its batch is written (it
// survives a crash of the process, not of the machine). With `fsync`, a batch is on stable
// storage once fdatasync() returns. In both cases a record appended just before a crash may be
// missing: the reply to the client is not held back until the record is durable (Pilaf's log is
// asynchronous too).
//
// File format: a sequence of records, nothing else (no file header). All integers little-endian.
//
//   off  0  u8   magic       0xF1 (fabkv op log, format 1)
//   off  1  u8   op          1 = PUT, 2 = DELETE
//   off  2  u8   key_len     1..250 (store::kMaxKeySize)
//   off  3  u8   reserved    0
//   off  4  u32  value_len   PUT: 0..16 MiB (store::kMaxValueSizeLimit); DELETE: 0
//   off  8  u64  version     PUT: the version the engine gave the item; DELETE: 0
//   off 16  u32  expire_at   PUT: absolute Unix seconds, 0 = never; DELETE: 0
//   off 20       key         key_len bytes
//   off 20+K     value       value_len bytes
//   off 20+K+V u64 checksum  XXH3_64bits (seed 0) of bytes [0, 20+K+V): header, key and value
//
// A record is 28 + key_len + value_len bytes, unaligned. A reader accepts a record only if every
// header field is in range and the checksum matches; the first record that is not accepted (or
// is cut short by the end of the file) ends the valid prefix. A crash in the middle of a write
// leaves such a torn tail; replay() stops there, and a new OpLog on the file truncates it away
// before appending (otherwise the new records would sit behind garbage, unreachable).
//
// Threading: append_*() from the one worker thread; stats() and path() from any thread.
// replay() is static and must not run on a file that an OpLog is appending to.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace fabkv::server {

class OpLog {
 public:
  struct Options {
    // fdatasync() after each written batch (durable) or not (page cache only).
    bool fsync = false;
    // Bytes appended but not yet written (including the batch being written) beyond which
    // append_*() waits for the writer. A single record larger than this is still accepted
    // once everything before it has been written.
    size_t max_pending_bytes = size_t{64} << 20;
    // Tests only: called on the writer thread before each write() of a batch (to simulate a
    // slow or stuck disk). Must not call into the OpLog.
    std::function<void()> before_write = nullptr;
  };

  // Opens (creates or appends to) `path`, a regular file, and takes an exclusive flock() on it
  // (two OpLogs on one file would corrupt it). Scans the existing records and truncates a torn
  // tail (see recovered()). Starts the writer thread. Throws std::runtime_error naming the path
  // and the errno text when the file cannot be opened, locked, read or truncated.
  explicit OpLog(const std::string& path, bool fsync = false);
  OpLog(const std::string& path, Options options);
  // Writes everything appended (waiting for the writer), joins the writer thread, closes.
  ~OpLog();

  OpLog(const OpLog&) = delete;
  OpLog& operator=(const OpLog&) = delete;

  // Worker thread only. Copies the record into the current in-memory buffer; blocks only for
  // backpressure (see Options::max_pending_bytes). Preconditions (what the engine accepts):
  // 1 <= key.size() <= store::kMaxKeySize, value.size() <= store::kMaxValueSizeLimit; a
  // violation throws std::invalid_argument and logs nothing.
  void append_put(std::string_view key, std::string_view value, uint64_t version,
                  uint32_t expire_at);
  void append_del(std::string_view key);

  struct Stats {
    uint64_t records;       // records appended
    uint64_t bytes;         // bytes appended (encoded records, framing included)
    uint64_t flushes;       // batches written (and fdatasync()ed with `fsync`)
    uint64_t stalls;        // append_*() calls that had to wait for the writer (backpressure)
    uint64_t write_errors;  // failed write()/fdatasync()/ftruncate() calls (each retry counts)
  };
  Stats stats() const;  // any thread
  const std::string& path() const { return path_; }

  struct ReplayResult {
    uint64_t records = 0;      // records applied (put or del called)
    bool torn_tail = false;    // bytes after valid_bytes that do not form a valid record
    uint64_t valid_bytes = 0;  // length of the valid prefix = offset of the torn tail
  };
  // What the constructor found in the file before truncating it to result.valid_bytes
  // (records = records already in the file).
  const ReplayResult& recovered() const { return recovered_; }

  // Replays a log: calls put(key, value, version, expire_at) / del(key) for each record, in
  // order. The views are valid only during the call. Stops cleanly at a torn or corrupt tail.
  // A missing file is an empty log (0 records). Throws std::runtime_error only when the file
  // exists but cannot be opened or read (an I/O error is not taken for a torn tail); exceptions
  // from the callbacks propagate.
  using PutFn = std::function<void(std::string_view key, std::string_view value,
                                   uint64_t version, uint32_t expire_at)>;
  using DelFn = std::function<void(std::string_view key)>;
  static ReplayResult replay(const std::string& path, const PutFn& put, const DelFn& del);

  // Format constants (see the table above).
  static constexpr uint8_t kMagic = 0xF1;
  static constexpr uint8_t kOpPut = 1;
  static constexpr uint8_t kOpDel = 2;
  static constexpr size_t kHeaderSize = 20;
  static constexpr size_t kTrailerSize = 8;

 private:
  // A growable byte buffer that does not zero what it hands out.
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t size = 0, capacity = 0;
    char* grow(size_t n);  // appends n uninitialised bytes, returns where they start
  };

  void append(uint8_t op, std::string_view key, std::string_view value, uint64_t version,
              uint32_t expire_at);
  void writer_main();
  void write_batch(const Buffer& batch);

  const std::string path_;
  const Options options_;
  int fd_ = -1;
  ReplayResult recovered_;
  uint64_t file_size_ = 0;  // writer thread only (after construction): bytes in the file

  std::mutex mu_;
  std::condition_variable work_cv_;   // writer waits: something to write, or stop
  std::condition_variable space_cv_;  // a stalled appender waits: pending_ went down
  Buffer active_;                     // guarded by mu_: records not yet taken by the writer
  size_t pending_ = 0;                // guarded by mu_: active_.size + the batch being written
  bool stop_ = false;                 // guarded by mu_
  std::atomic<bool> stopping_{false};  // the same, readable without mu_ (writer's retry loop)

  std::atomic<uint64_t> records_{0}, bytes_{0}, flushes_{0}, stalls_{0}, write_errors_{0};
  std::thread writer_;  // last: started when everything above is ready
};

}  // namespace fabkv::server
