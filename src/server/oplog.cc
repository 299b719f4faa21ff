#include "server/oplog.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "store/limits.h"

namespace fabkv::server {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the op log is written in host order, which must be little-endian");

constexpr size_t kRecordOverhead = OpLog::kHeaderSize + OpLog::kTrailerSize;
constexpr size_t kReadChunk = size_t{1} << 20;
// After a burst, a writer batch buffer larger than this is freed rather than kept for reuse.
constexpr size_t kKeepCapacity = size_t{4} << 20;
constexpr int kRetriesWhenStopping = 5;
constexpr auto kFirstBackoff = std::chrono::milliseconds(1);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw std::runtime_error("op log " + path + ": " + what + ": " + std::strerror(err));
}

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store_at(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Reads a file front to back through a window; records are parsed straight from the window.
class Reader {
 public:
  Reader(int fd, const std::string& path) : fd_(fd), path_(path), buf_(kReadChunk) {}

  // Makes at least n bytes available at data(); false when the file ends before.
  bool ensure(size_t n) {
    while (hi_ - lo_ < n) {
      if (eof_) return false;
      if (lo_ > 0) {  // slide what is left to the front
        std::memmove(buf_.data(), buf_.data() + lo_, hi_ - lo_);
        hi_ -= lo_;
        lo_ = 0;
      }
      if (buf_.size() < n) buf_.resize(std::max(n, buf_.size() * 2));
      ssize_t r = ::pread(fd_, buf_.data() + hi_, buf_.size() - hi_, static_cast<off_t>(off_));
      if (r < 0) {
        if (errno == EINTR) continue;
        fail("read", path_, errno);
      }
      if (r == 0) eof_ = true;
      hi_ += static_cast<size_t>(r);
      off_ += static_cast<uint64_t>(r);
    }
    return true;
  }
  const char* data() const { return buf_.data() + lo_; }
  size_t available() const { return hi_ - lo_; }
  void consume(size_t n) { lo_ += n; }

 private:
  int fd_;
  const std::string& path_;
  std::vector<char> buf_;
  size_t lo_ = 0, hi_ = 0;
  uint64_t off_ = 0;  // file offset of buf_[hi_]
  bool eof_ = false;
};

// Walks the records of an open file, calling put/del (when set) for each valid one.
OpLog::ReplayResult scan(int fd, const std::string& path, const OpLog::PutFn* put,
                         const OpLog::DelFn* del) {
  OpLog::ReplayResult res;
  Reader rd(fd, path);
  for (;;) {
    if (!rd.ensure(OpLog::kHeaderSize)) {
      res.torn_tail = rd.available() > 0;
      break;
    }
    const char* h = rd.data();
    const auto magic = load<uint8_t>(h + 0);
    const auto op = load<uint8_t>(h + 1);
    const auto key_len = load<uint8_t>(h + 2);
    const auto reserved = load<uint8_t>(h + 3);
    const auto value_len = load<uint32_t>(h + 4);
    const auto version = load<uint64_t>(h + 8);
    const auto expire_at = load<uint32_t>(h + 16);
    bool ok = magic == OpLog::kMagic && reserved == 0 && key_len >= 1 &&
              key_len <= store::kMaxKeySize;
    if (op == OpLog::kOpPut) ok = ok && value_len <= store::kMaxValueSizeLimit;
    else if (op == OpLog::kOpDel) ok = ok && value_len == 0 && version == 0 && expire_at == 0;
    else ok = false;
    // The length fields are checked before they size a read, so garbage cannot ask for more
    // than one maximal record.
    const size_t body = size_t{key_len} + value_len;
    const size_t n = kRecordOverhead + body;
    if (!ok || !rd.ensure(n)) {
      res.torn_tail = true;
      break;
    }
    const char* r = rd.data();  // ensure() may have moved the window
    if (XXH3_64bits(r, OpLog::kHeaderSize + body) != load<uint64_t>(r + OpLog::kHeaderSize + body)) {
      res.torn_tail = true;
      break;
    }
    std::string_view key(r + OpLog::kHeaderSize, key_len);
    if (op == OpLog::kOpPut) {
      if (put && *put) (*put)(key, std::string_view(r + OpLog::kHeaderSize + key_len, value_len),
                              version, expire_at);
    } else {
      if (del && *del) (*del)(key);
    }
    rd.consume(n);
    res.records++;
    res.valid_bytes += n;
  }
  return res;
}

void sync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;  // best effort: the file itself is synced on every batch
  ::fsync(dfd);
  ::close(dfd);
}

}  // namespace

char* OpLog::Buffer::grow(size_t n) {
  if (size + n > capacity) {
    size_t cap = std::max({size + n, capacity * 2, size_t{64} << 10});
    auto bigger = std::make_unique_for_overwrite<char[]>(cap);
    if (size > 0) std::memcpy(bigger.get(), data.get(), size);
    data = std::move(bigger);
    capacity = cap;
  }
  char* p = data.get() + size;
  size += n;
  return p;
}

OpLog::OpLog(const std::string& path, bool fsync) : OpLog(path, Options{.fsync = fsync}) {}

OpLog::OpLog(const std::string& path, Options options)
    : path_(path), options_(std::move(options)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("open", path_, errno);
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail("stat", path_, errno);
    if (!S_ISREG(st.st_mode)) fail("not a regular file", path_, EINVAL);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) fail("in use by another OpLog (flock)", path_, errno);
      fail("flock", path_, errno);
    }
    recovered_ = scan(fd_, path_, nullptr, nullptr);
    if (recovered_.torn_tail) {
      if (::ftruncate(fd_, static_cast<off_t>(recovered_.valid_bytes)) != 0)
        fail("truncate the torn tail", path_, errno);
      spdlog::warn("op log {}: cut a torn tail after {} records ({} valid bytes)", path_,
                   recovered_.records, recovered_.valid_bytes);
    }
    file_size_ = recovered_.valid_bytes;
    if (options_.fsync) {
      if (recovered_.torn_tail && ::fdatasync(fd_) != 0) fail("fdatasync", path_, errno);
      sync_parent_dir(path_);  // a newly created file's directory entry
    }
    writer_ = std::thread([this] { writer_main(); });
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

OpLog::~OpLog() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    stopping_.store(true, std::memory_order_relaxed);
  }
  work_cv_.notify_one();
  writer_.join();
  ::close(fd_);
}

void OpLog::append_put(std::string_view key, std::string_view value, uint64_t version,
                       uint32_t expire_at) {
  append(kOpPut, key, value, version, expire_at);
}

void OpLog::append_del(std::string_view key) { append(kOpDel, key, {}, 0, 0); }

void OpLog::append(uint8_t op, std::string_view key, std::string_view value, uint64_t version,
                   uint32_t expire_at) {
  if (key.empty() || key.size() > store::kMaxKeySize)
    throw std::invalid_argument("op log: key length out of range");
  if (value.size() > store::kMaxValueSizeLimit)
    throw std::invalid_argument("op log: value too large");
  const size_t body = key.size() + value.size();
  const size_t n = kRecordOverhead + body;
  bool wake;
  {
    std::unique_lock lk(mu_);
    if (pending_ > 0 && pending_ + n > options_.max_pending_bytes) {
      stalls_.fetch_add(1, std::memory_order_relaxed);
      space_cv_.wait(lk, [&] { return pending_ == 0 || pending_ + n <= options_.max_pending_bytes; });
    }
    // The writer sleeps only when active_ is empty, so only the first record after that has
    // to wake it.
    wake = active_.size == 0;
    char* p = active_.grow(n);
    store_at<uint8_t>(p + 0, kMagic);
    store_at<uint8_t>(p + 1, op);
    store_at<uint8_t>(p + 2, static_cast<uint8_t>(key.size()));
    store_at<uint8_t>(p + 3, 0);
    store_at<uint32_t>(p + 4, static_cast<uint32_t>(value.size()));
    store_at<uint64_t>(p + 8, version);
    store_at<uint32_t>(p + 16, expire_at);
    std::memcpy(p + kHeaderSize, key.data(), key.size());
    if (!value.empty()) std::memcpy(p + kHeaderSize + key.size(), value.data(), value.size());
    store_at<uint64_t>(p + kHeaderSize + body, XXH3_64bits(p, kHeaderSize + body));
    pending_ += n;
  }
  records_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(n, std::memory_order_relaxed);
  if (wake) work_cv_.notify_one();
}

OpLog::ReplayResult OpLog::replay(const std::string& path, const PutFn& put, const DelFn& del) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    fail("open", path, errno);
  }
  try {
    ReplayResult r = scan(fd, path, &put, &del);
    ::close(fd);
    return r;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

OpLog::Stats OpLog::stats() const {
  return Stats{records_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed),
               flushes_.load(std::memory_order_relaxed), stalls_.load(std::memory_order_relaxed),
               write_errors_.load(std::memory_order_relaxed)};
}

void OpLog::writer_main() {
  Buffer batch;
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return active_.size > 0 || stop_; });
    if (active_.size == 0) return;  // stop_ and nothing left
    std::swap(batch, active_);      // active_ gets the emptied buffer of the last batch
    lk.unlock();
    if (options_.before_write) options_.before_write();
    write_batch(batch);
    const size_t n = batch.size;
    batch.size = 0;
    if (batch.capacity > kKeepCapacity) batch = Buffer{};
    lk.lock();
    pending_ -= n;
    space_cv_.notify_all();
  }
}

// Writes one batch at the end of the file, retrying until it is there (see the header).
void OpLog::write_batch(const Buffer& batch) {
  const char* p = batch.data.get();
  const size_t n = batch.size;
  size_t done = 0;
  auto backoff = kFirstBackoff;
  int failures = 0;
  while (done < n) {
    ssize_t r = ::write(fd_, p + done, n - done);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    const int err = r < 0 ? errno : EIO;
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    if (failures++ == 0)
      spdlog::error("op log {}: write failed ({}); retrying, appends wait once {} bytes are "
                    "pending", path_, std::strerror(err), options_.max_pending_bytes);
    // Cut off the part of the batch that did reach the file, so that a retry does not leave a
    // torn record in the middle of the log. If that fails, resume where the write stopped.
    if (done > 0) {
      if (::ftruncate(fd_, static_cast<off_t>(file_size_)) == 0) done = 0;
      else write_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    if (stopping_.load(std::memory_order_relaxed) && failures >= kRetriesWhenStopping) {
      spdlog::error("op log {}: giving up at shutdown, {} bytes not logged", path_, n - done);
      if (done > 0) file_size_ += done;
      return;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  file_size_ += n;
  if (failures > 0) spdlog::info("op log {}: write succeeded after {} failures", path_, failures);
  if (options_.fsync && ::fdatasync(fd_) != 0) {
    // Not retried: after a failed fdatasync() Linux may report the pages clean, so a second
    // call proves nothing. Counted and logged.
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("op log {}: fdatasync failed: {}", path_, std::strerror(errno));
  }
  flushes_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace fabkv::server
