#include "server/oplog.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include "store/engine.h"
#include "store/limits.h"

namespace fabkv::server {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "the op log is written in host order, which must be little-endian");

constexpr size_t kReadChunk = size_t{1} << 20;
// After a burst, a writer batch buffer larger than this is freed rather than kept for reuse.
constexpr size_t kKeepCapacity = size_t{4} << 20;
constexpr int kRetriesWhenStopping = 5;
constexpr auto kFirstBackoff = std::chrono::milliseconds(1);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);
// Sync::kEverySec: the longest a written byte waits for its fdatasync (Redis's everysec).
constexpr auto kSyncInterval = std::chrono::seconds(1);

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

// Writes one record (format 2, the table in oplog.h) at p: kHeaderSize + key + value +
// kTrailerSize bytes.
void encode_at(char* p, OpLog::Op op, std::string_view key, std::string_view value,
               uint64_t version, uint32_t expire_at, uint32_t flags) {
  const size_t body = key.size() + value.size();
  store_at<uint8_t>(p + 0, OpLog::kMagic);
  store_at<uint8_t>(p + 1, static_cast<uint8_t>(op));
  store_at<uint8_t>(p + 2, static_cast<uint8_t>(key.size()));
  store_at<uint8_t>(p + 3, 0);
  store_at<uint32_t>(p + 4, static_cast<uint32_t>(value.size()));
  store_at<uint64_t>(p + 8, version);
  store_at<uint32_t>(p + 16, expire_at);
  store_at<uint32_t>(p + 20, flags);
  if (!key.empty()) std::memcpy(p + OpLog::kHeaderSize, key.data(), key.size());
  if (!value.empty()) std::memcpy(p + OpLog::kHeaderSize + key.size(), value.data(), value.size());
  store_at<uint64_t>(p + OpLog::kHeaderSize + body, XXH3_64bits(p, OpLog::kHeaderSize + body));
}

// One file's valid records: what they are, where they end.
struct FileScan {
  uint64_t records = 0;
  uint64_t valid_bytes = 0;
  bool torn_tail = false;
};

// Checks the record header at h (at least kHeaderSizeV1 bytes). Returns the record's size (header,
// key, value and checksum), or 0 when the header is not one a writer writes; fills `rec` but its
// key, value and flags. The length fields are checked before they size a read, so garbage cannot
// ask for more than one maximal record.
size_t check_header(const char* h, OpLog::Record* rec) {
  const auto magic = load<uint8_t>(h + 0);
  const auto op = load<uint8_t>(h + 1);
  const auto key_len = load<uint8_t>(h + 2);
  const auto reserved = load<uint8_t>(h + 3);
  const auto value_len = load<uint32_t>(h + 4);
  const auto version = load<uint64_t>(h + 8);
  const auto expire_at = load<uint32_t>(h + 16);
  const bool v2 = magic == OpLog::kMagic;
  bool ok = (v2 || magic == OpLog::kMagicV1) && reserved == 0;
  rec->op = static_cast<OpLog::Op>(op);
  rec->version = version;
  rec->expire_at = expire_at;
  const bool keyed = key_len >= 1 && key_len <= store::kMaxKeySize;
  const bool bare = value_len == 0 && expire_at == 0;
  switch (rec->op) {
    case OpLog::Op::kPut: ok = ok && keyed && value_len <= store::kMaxValueSizeLimit; break;
    case OpLog::Op::kDel: ok = ok && keyed && bare && version == 0; break;
    case OpLog::Op::kClear: ok = ok && v2 && key_len == 0 && value_len == 0 && version == 0; break;
    case OpLog::Op::kVersion: ok = ok && v2 && key_len == 0 && bare && version != 0; break;
    default: ok = false;
  }
  if (!ok) return 0;
  return (v2 ? OpLog::kHeaderSize : OpLog::kHeaderSizeV1) + key_len + value_len +
         OpLog::kTrailerSize;
}

// Checks a whole record at r (n = check_header's size): the checksum, and flags only on PUT.
bool check_body(const char* r, size_t n, OpLog::Record* rec) {
  const bool v2 = load<uint8_t>(r) == OpLog::kMagic;
  const size_t header = v2 ? OpLog::kHeaderSize : OpLog::kHeaderSizeV1;
  const size_t key_len = load<uint8_t>(r + 2);
  const size_t body = n - header - OpLog::kTrailerSize;
  if (XXH3_64bits(r, header + body) != load<uint64_t>(r + header + body)) return false;
  rec->flags = v2 ? load<uint32_t>(r + 20) : 0;
  if (v2 && rec->op != OpLog::Op::kPut && rec->flags != 0) return false;
  rec->key = std::string_view(r + header, key_len);
  rec->value = std::string_view(r + header + key_len, body - key_len);
  return true;
}

// Walks the records of an open file, calling `each(record, offset, size)` for every valid one
// (format 1 or 2), until the end or the first bytes that are not a valid record.
template <class Each>
FileScan scan_file(int fd, const std::string& path, Each&& each) {
  FileScan res;
  Reader rd(fd, path);
  for (;;) {
    if (!rd.ensure(OpLog::kHeaderSizeV1)) {
      res.torn_tail = rd.available() > 0;
      break;
    }
    OpLog::Record rec;
    const size_t n = check_header(rd.data(), &rec);
    if (n == 0 || !rd.ensure(n) || !check_body(rd.data(), n, &rec)) {
      res.torn_tail = true;
      break;
    }
    each(rec, res.valid_bytes, n);
    rd.consume(n);
    res.records++;
    res.valid_bytes += n;
  }
  return res;
}

// The offset of the first valid record after the bad one at byte `from` of the file from which
// valid records run on to the end (or to a record the end cuts short), if any: what tells
// corruption (a bad record with good ones after it: a flipped bit, a length field included)
// from a torn tail (nothing after it but the rest of the record the crash cut). Requiring the
// run to the end keeps the bytes of a log record inside a torn value (a value may hold
// anything) from passing for records after it.
std::optional<uint64_t> next_valid_record(int fd, const std::string& path, uint64_t from) {
  struct stat st;
  if (::fstat(fd, &st) != 0) fail("stat", path, errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  std::vector<char> rec_buf;
  // Is there a whole record at `at`? Its size if so, else 0; `past_end` when its header is whole
  // and sound and the record ends past the end of the file.
  const auto record_at = [&](uint64_t at, bool* past_end) -> size_t {
    *past_end = false;
    char h[OpLog::kHeaderSize];
    const size_t hn = static_cast<size_t>(std::min<uint64_t>(OpLog::kHeaderSize, size - at));
    if (::pread(fd, h, hn, static_cast<off_t>(at)) != static_cast<ssize_t>(hn))
      fail("read", path, errno);
    if (hn < OpLog::kHeaderSizeV1) {  // a header the end cuts short, if it is one
      const auto magic = load<uint8_t>(h);
      *past_end = magic == OpLog::kMagic || magic == OpLog::kMagicV1;
      return 0;
    }
    OpLog::Record rec;
    const size_t n = check_header(h, &rec);
    if (n == 0) return 0;
    if (at + n > size) {
      *past_end = true;
      return 0;
    }
    rec_buf.resize(n);
    if (::pread(fd, rec_buf.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n))
      fail("read", path, errno);
    return check_body(rec_buf.data(), n, &rec) ? n : 0;
  };
  const auto runs_to_the_end = [&](uint64_t at) {
    for (bool past_end = false; at < size;) {
      const size_t n = record_at(at, &past_end);
      if (n == 0) return past_end;
      at += n;
    }
    return true;
  };
  Reader rd(fd, path);
  for (uint64_t skip = from + 1; skip > 0;) {  // to from + 1 through the window
    const size_t step = static_cast<size_t>(std::min<uint64_t>(skip, kReadChunk));
    if (!rd.ensure(step)) return std::nullopt;
    rd.consume(step);
    skip -= step;
  }
  for (uint64_t at = from + 1; at + OpLog::kHeaderSizeV1 <= size; ++at, rd.consume(1)) {
    if (!rd.ensure(OpLog::kHeaderSizeV1)) return std::nullopt;
    const auto magic = load<uint8_t>(rd.data());
    if (magic != OpLog::kMagic && magic != OpLog::kMagicV1) continue;
    OpLog::Record rec;
    const size_t n = check_header(rd.data(), &rec);
    if (n == 0 || at + n > size || !rd.ensure(n) || !check_body(rd.data(), n, &rec)) continue;
    if (runs_to_the_end(at + n)) return at;
  }
  return std::nullopt;
}

int open_or_fail(const std::string& path, int flags, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) fail("open", path, errno);
  return fd;
}

// Makes a directory entry change (a new file, a rename, an unlink) durable.
void sync_dir_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("open its directory", path, errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) fail("fsync its directory", path, err);
}

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The files of a log, as a directory listing shows them.
struct Files {
  std::vector<uint64_t> bases;           // N of every "<stem>.<N>.base", ascending
  std::vector<uint64_t> segments;        // K of every "<stem>.<K>.incr", ascending
  std::vector<std::string> temporaries;  // "<stem>.<N>.base.tmp": a rewrite cut short
  bool legacy = false;                   // "<stem>" itself: the one-file layout of earlier fabkv

  uint64_t base() const { return bases.empty() ? 0 : bases.back(); }
  // The segments the base does not cover.
  std::vector<uint64_t> live_segments() const {
    std::vector<uint64_t> out;
    for (uint64_t k : segments)
      if (k > base()) out.push_back(k);
    return out;
  }
};

Files list_files(const std::string& stem) {
  Files f;
  const fs::path p(stem);
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  const std::string name = p.filename().string();
  std::error_code ec;
  f.legacy = fs::is_regular_file(p, ec);
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return f;
    fail("list its directory", stem, ec.value());
  }
  for (const fs::directory_entry& e : it) {
    const std::string n = e.path().filename().string();
    if (n.size() <= name.size() + 1 || n.compare(0, name.size(), name) != 0 ||
        n[name.size()] != '.')
      continue;
    std::string_view rest = std::string_view(n).substr(name.size() + 1);  // "<K>.incr", ...
    const size_t dot = rest.find('.');
    if (dot == std::string_view::npos) continue;
    uint64_t num = 0;
    if (!parse_u64(rest.substr(0, dot), &num) || num == 0) continue;
    const std::string_view kind = rest.substr(dot + 1);
    if (kind == "incr") f.segments.push_back(num);
    else if (kind == "base") f.bases.push_back(num);
    else if (kind == "base.tmp") f.temporaries.push_back(e.path().string());
  }
  std::sort(f.bases.begin(), f.bases.end());
  std::sort(f.segments.begin(), f.segments.end());
  return f;
}

uint32_t now_unix() { return static_cast<uint32_t>(std::time(nullptr)); }

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("op log: cannot remove {}: {}", path, std::strerror(errno));
}

// Replays one file; `last` says whether a torn tail is a crash's doing (the last segment) or
// corruption (anything else: refused).
FileScan replay_file(const std::string& path, bool last, const OpLog::ApplyFn& apply) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    fail("open", path, errno);
  }
  FileScan s;
  std::optional<uint64_t> next;
  try {
    s = scan_file(fd, path, [&](const OpLog::Record& r, uint64_t, size_t) {
      if (apply) apply(r);
    });
    if (s.torn_tail && last) next = next_valid_record(fd, path, s.valid_bytes);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  // What to do about it, as redis-check-aof says: keep the valid prefix, or start empty.
  const auto recover = [&] {
    return fmt::format(
        "The server refuses to start on it. To keep the {} records before byte {} and lose the "
        "rest of this file (and, for a base or an earlier segment, the segments after it), cut "
        "it there: `truncate -s {} {}`; or move the log away to start empty",
        s.records, s.valid_bytes, s.valid_bytes, path);
  };
  if (s.torn_tail && !last)
    throw std::runtime_error(fmt::format(
        "op log {}: corrupt after {} records (byte {}); only the last segment may end torn. {}",
        path, s.records, s.valid_bytes, recover()));
  if (next)
    throw std::runtime_error(fmt::format(
        "op log {}: the record at byte {} is corrupt and valid records follow it (the next at "
        "byte {}): not a torn tail that a crash leaves. {}",
        path, s.valid_bytes, *next, recover()));
  return s;
}

// Replays base and live segments in order into `apply`; adds up what it read.
OpLog::ReplayResult replay_files(const std::string& stem, const Files& f,
                                 const OpLog::ApplyFn& apply) {
  OpLog::ReplayResult r;
  const std::vector<uint64_t> segs = f.live_segments();
  auto add = [&](const FileScan& s) {
    r.files++;
    r.records += s.records;
    r.valid_bytes += s.valid_bytes;
    r.torn_tail |= s.torn_tail;
  };
  if (f.base() != 0) add(replay_file(OpLog::base_path(stem, f.base()), false, apply));
  for (size_t i = 0; i < segs.size(); ++i)
    add(replay_file(OpLog::segment_path(stem, segs[i]), i + 1 == segs.size(), apply));
  return r;
}

// Where a key's last record is (file, offset, size), for a rewrite.
struct LiveRecord {
  uint32_t file;
  uint32_t size;
  uint64_t offset;
  uint32_t expire_at;
};

// Each key's last record in `inputs` (a base and segments, oldest first; each file's descriptor
// appended to *fds, which the caller closes): DELETE drops the key, CLEAR everything before it;
// expired items are left out. In log order, so that replay restores versions in the order they
// were handed out (store::PutOptions::restore_version). Throws on a torn file.
// *last_version gets the last version the records handed out (VERSION records included), as
// replaying them would leave the engine's counter (store::stamp_version), 0 if none.
// *clear_at gets the time of the last delayed CLEAR that no CLEAR follows, 0 if none.
std::vector<LiveRecord> live_records(const std::vector<std::string>& inputs, std::vector<int>* fds,
                                     uint64_t* in_bytes, uint64_t* last_version,
                                     uint32_t* clear_at) {
  std::unordered_map<std::string, LiveRecord> live;
  uint64_t counter = 0;  // the next version, 0 before any
  for (size_t i = 0; i < inputs.size(); ++i) {
    fds->push_back(open_or_fail(inputs[i], O_RDONLY));
    FileScan s =
        scan_file(fds->back(), inputs[i], [&](const OpLog::Record& r, uint64_t off, size_t n) {
          if (r.version != 0) {  // PUT and VERSION
            store::PutOptions restored;
            restored.restore_version = r.version;
            if (counter == 0) counter = r.version;
            store::stamp_version(counter, restored);
          }
          if (r.op == OpLog::Op::kPut)
            live.insert_or_assign(std::string(r.key),
                                  LiveRecord{static_cast<uint32_t>(i), static_cast<uint32_t>(n),
                                             off, r.expire_at});
          else if (r.op == OpLog::Op::kDel) live.erase(std::string(r.key));
          else if (r.op == OpLog::Op::kClear && r.expire_at == 0) live.clear();
          if (r.op == OpLog::Op::kClear) *clear_at = r.expire_at;
        });
    if (s.torn_tail)
      throw std::runtime_error(fmt::format("{} is corrupt after byte {}", inputs[i],
                                           s.valid_bytes));
    *in_bytes += s.valid_bytes;
  }
  *last_version = counter == 0 ? 0 : counter == 1 ? UINT64_MAX : counter - 1;
  const uint32_t now = now_unix();
  std::vector<LiveRecord> keep;
  keep.reserve(live.size());
  for (const auto& [k, loc] : live)
    if (loc.expire_at == 0 || loc.expire_at > now) keep.push_back(loc);
  std::sort(keep.begin(), keep.end(), [](const LiveRecord& a, const LiveRecord& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  return keep;
}

// What a rewrite keeps of `inputs` (a base and segments, oldest first; their descriptors are
// appended to *fds, which the caller closes), record by record in log order: each key's last
// live record, then a delayed CLEAR still to come and the VERSION record (oplog.h). Calls
// emit(bytes, size) for each; the bytes are valid only during the call.
template <class Emit>
void emit_live(const std::vector<std::string>& inputs, std::vector<int>* fds, uint64_t* in_bytes,
               Emit&& emit) {
  uint64_t last_version = 0;
  uint32_t clear_at = 0;
  const std::vector<LiveRecord> keep = live_records(inputs, fds, in_bytes, &last_version,
                                                    &clear_at);
  std::vector<char> rec;
  for (const LiveRecord& loc : keep) {
    rec.resize(loc.size);
    size_t got = 0;
    while (got < loc.size) {
      ssize_t r = ::pread((*fds)[loc.file], rec.data() + got, loc.size - got,
                          static_cast<off_t>(loc.offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail("read", inputs[loc.file], r < 0 ? errno : EIO);
      got += static_cast<size_t>(r);
    }
    emit(rec.data(), rec.size());
  }
  // Last, so that replay's counter ends past every version handed out, also those of the items
  // left out (oplog.h, VERSION).
  auto bare = [&](OpLog::Op op, uint64_t version, uint32_t at) {
    char b[OpLog::kHeaderSize + OpLog::kTrailerSize];
    encode_at(b, op, {}, {}, version, at, 0);
    emit(b, sizeof b);
  };
  if (clear_at != 0) bare(OpLog::Op::kClear, 0, clear_at);  // still to come: kept
  if (last_version != 0) bare(OpLog::Op::kVersion, last_version, 0);
}

}  // namespace

std::string OpLog::segment_path(const std::string& stem, uint64_t k) {
  return fmt::format("{}.{}.incr", stem, k);
}
std::string OpLog::base_path(const std::string& stem, uint64_t n) {
  return fmt::format("{}.{}.base", stem, n);
}

const char* OpLog::to_string(Sync s) {
  switch (s) {
    case Sync::kAlways: return "always";
    case Sync::kEverySec: return "everysec";
    case Sync::kNo: return "no";
  }
  return "?";
}

std::optional<OpLog::Sync> OpLog::sync_from_string(std::string_view s) {
  if (s == "always") return Sync::kAlways;
  if (s == "everysec") return Sync::kEverySec;
  if (s == "no") return Sync::kNo;
  return std::nullopt;
}

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

OpLog::OpLog(const std::string& stem, Options options, const ApplyFn& apply)
    : stem_(stem), options_(std::move(options)) {
  const std::string lock_path = stem_ + ".lock";
  lock_fd_ = open_or_fail(lock_path, O_RDWR | O_CREAT);
  try {
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) fail("in use by another OpLog (flock)", lock_path, errno);
      fail("flock", lock_path, errno);
    }
    Files f = list_files(stem_);
    if (f.legacy) {
      // The one-file layout: the file becomes segment 1 (only when nothing else is there: a
      // stem that has both is not one log).
      if (!f.bases.empty() || !f.segments.empty())
        throw std::runtime_error(fmt::format(
            "op log {}: both the file {} and segments of the same name exist; move one away", stem_,
            stem_));
      if (::rename(stem_.c_str(), segment_path(stem_, 1).c_str()) != 0)
        fail("rename to " + segment_path(stem_, 1), stem_, errno);
      sync_dir_of(stem_);
      f.segments.push_back(1);
    }
    // What a rewrite cut short or finished without cleaning up leaves behind.
    for (const std::string& t : f.temporaries) remove_file(t);
    const uint64_t base = f.base();
    for (uint64_t n : f.bases)
      if (n != base) remove_file(base_path(stem_, n));
    for (uint64_t k : f.segments)
      if (k <= base) remove_file(segment_path(stem_, k));
    recovered_ = replay_files(stem_, f, apply);
    const std::vector<uint64_t> segs = f.live_segments();
    bool created = false;
    if (segs.empty()) {
      segment_ = base + 1;
      fd_ = open_or_fail(segment_path(stem_, segment_), O_RDWR | O_CREAT | O_APPEND);
      created = true;
    } else {
      segment_ = segs.back();
      fd_ = open_or_fail(segment_path(stem_, segment_), O_RDWR | O_APPEND);
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail("stat", current_segment(), errno);
    segment_size_ = static_cast<uint64_t>(st.st_size);
    if (recovered_.torn_tail) {
      // The valid prefix of the last segment: its size less what the scan did not accept.
      int rfd = open_or_fail(current_segment(), O_RDONLY);
      FileScan s = scan_file(rfd, current_segment(), [](const Record&, uint64_t, size_t) {});
      ::close(rfd);
      if (::ftruncate(fd_, static_cast<off_t>(s.valid_bytes)) != 0)
        fail("truncate the torn tail", current_segment(), errno);
      if (::fdatasync(fd_) != 0) fail("fdatasync", current_segment(), errno);
      spdlog::warn("op log {}: cut a torn tail after {} records ({} valid bytes)",
                   current_segment(), s.records, s.valid_bytes);
      segment_size_ = s.valid_bytes;
    }
    if (created || f.legacy) sync_dir_of(stem_);
    uint64_t total = segment_size_;
    if (base != 0) total += fs::file_size(base_path(stem_, base));
    for (uint64_t k : segs)
      if (k != segment_) total += fs::file_size(segment_path(stem_, k));
    file_bytes_.store(total);
    base_bytes_.store(total);
    last_sync_ = std::chrono::steady_clock::now();
    rewriter_ = std::thread([this] { rewriter_main(); });
    if (options_.sync == Sync::kEverySec) syncer_ = std::thread([this] { syncer_main(); });
    writer_ = std::thread([this] { writer_main(); });
  } catch (...) {
    stop_syncer();
    if (rewriter_.joinable()) {
      {
        std::lock_guard lk(rw_mu_);
        rw_stop_ = true;
      }
      rw_cv_.notify_one();
      rewriter_.join();
    }
    if (fd_ >= 0) ::close(fd_);
    ::close(lock_fd_);
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
  stop_syncer();  // after the writer: it may have handed over one more sync
  {
    std::lock_guard lk(rw_mu_);
    rw_stop_ = true;
  }
  rw_cv_.notify_one();
  rewriter_.join();
  ::close(fd_);
  ::close(lock_fd_);
}

std::string OpLog::current_segment() const { return segment_path(stem_, segment_); }

void OpLog::append_put(std::string_view key, std::string_view value, uint64_t version,
                       uint32_t expire_at, uint32_t flags) {
  if (key.empty() || key.size() > store::kMaxKeySize)
    throw std::invalid_argument("op log: key length out of range");
  append(Op::kPut, key, value, version, expire_at, flags);
}

void OpLog::append_del(std::string_view key) {
  if (key.empty() || key.size() > store::kMaxKeySize)
    throw std::invalid_argument("op log: key length out of range");
  append(Op::kDel, key, {}, 0, 0, 0);
}

void OpLog::append_clear(uint32_t at) { append(Op::kClear, {}, {}, 0, at, 0); }

void OpLog::append(Op op, std::string_view key, std::string_view value, uint64_t version,
                   uint32_t expire_at, uint32_t flags) {
  if (value.size() > store::kMaxValueSizeLimit)
    throw std::invalid_argument("op log: value too large");
  const size_t n = kHeaderSize + key.size() + value.size() + kTrailerSize;
  bool wake;
  {
    std::unique_lock lk(mu_);
    // A failing log does not make the worker wait: it stops appending once it sees failing().
    if (pending_ > 0 && pending_ + n > options_.max_pending_bytes && !failing()) {
      stalls_.fetch_add(1, std::memory_order_relaxed);
      space_cv_.wait(lk, [&] {
        return pending_ == 0 || pending_ + n <= options_.max_pending_bytes || failing();
      });
    }
    // The writer sleeps only when active_ is empty, so only the first record after that has
    // to wake it.
    wake = active_.size == 0;
    encode_at(active_.grow(n), op, key, value, version, expire_at, flags);
    pending_ += n;
    appended_ += n;
  }
  records_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(n, std::memory_order_relaxed);
  if (wake) work_cv_.notify_one();
}

void OpLog::for_each_unwritten(const ApplyFn& fn) {
  std::lock_guard lk(mu_);
  for (const Buffer* b : {&writing_, &active_}) {
    for (size_t at = 0; at < b->size;) {
      Record rec;
      const char* p = b->data.get() + at;
      const size_t n = check_header(p, &rec);
      if (n == 0 || !check_body(p, n, &rec)) break;  // cannot be: we wrote them
      fn(rec);
      at += n;
    }
  }
}

void OpLog::replay_live(const ApplyFn& apply) {
  const Files f = list_files(stem_);
  std::vector<std::string> inputs;
  if (f.base() != 0) inputs.push_back(base_path(stem_, f.base()));
  for (uint64_t k : f.live_segments()) inputs.push_back(segment_path(stem_, k));
  std::vector<int> fds;
  uint64_t in_bytes = 0;
  try {
    emit_live(inputs, &fds, &in_bytes, [&](const char* p, size_t n) {
      Record rec;
      if (check_header(p, &rec) == n && check_body(p, n, &rec)) apply(rec);
    });
  } catch (...) {
    for (int fd : fds) ::close(fd);
    throw;
  }
  for (int fd : fds) ::close(fd);
}

OpLog::ReplayResult OpLog::replay(const std::string& stem, const ApplyFn& apply) {
  return replay_files(stem, list_files(stem), apply);
}

OpLog::Stats OpLog::stats() const {
  auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return Stats{r(records_),      r(bytes_),    r(flushes_),        r(syncs_),      r(stalls_),
               r(write_errors_), r(rewrites_), r(rewrite_errors_), r(file_bytes_), r(base_bytes_)};
}

void OpLog::writer_main() {
  Buffer& batch = writing_;
  std::unique_lock lk(mu_);
  for (;;) {
    // Everysec: written bytes wait at most kSyncInterval for their fdatasync, even when no
    // further record comes.
    if (options_.sync == Sync::kEverySec && unsynced_) {
      work_cv_.wait_until(lk, last_sync_ + kSyncInterval,
                          [&] { return active_.size > 0 || stop_; });
    } else {
      work_cv_.wait(lk, [&] { return active_.size > 0 || stop_; });
    }
    if (active_.size == 0) {
      if (stop_) {
        lk.unlock();
        if (unsynced_) sync_now();  // at close, every mode
        return;
      }
      lk.unlock();
      sync_in_background();  // everysec, a quiet second
      lk.lock();
      continue;
    }
    std::swap(batch, active_);  // active_ gets the emptied buffer of the last batch
    const uint64_t end = appended_;
    lk.unlock();
    if (options_.before_write) options_.before_write();
    write_batch(batch);
    // everysec and no: written is durable() (a crash of the process keeps it), so the answers
    // held for this batch go before everysec's fdatasync, which may take long on a busy disk.
    if (options_.sync != Sync::kAlways) {
      durable_.store(end, std::memory_order_seq_cst);  // see Worker::open_oplog
      if (options_.on_durable) options_.on_durable();
    }
    if (options_.sync == Sync::kEverySec &&
        std::chrono::steady_clock::now() - last_sync_ >= kSyncInterval)
      sync_in_background();
    if (options_.sync == Sync::kAlways) {
      sync_now();
      durable_.store(end, std::memory_order_seq_cst);  // see Worker::open_oplog
      if (options_.on_durable) options_.on_durable();
    }
    maybe_rotate();
    lk.lock();
    pending_ -= batch.size;
    batch.size = 0;
    if (batch.capacity > kKeepCapacity) batch = Buffer{};
    space_cv_.notify_all();
  }
}

void OpLog::sync_now() {
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    if (options_.sync == Sync::kAlways) {
      // Not retried: after a failed fdatasync() Linux may report the pages clean, so a second
      // call proves nothing, and answers held for this batch could never be sent truthfully.
      // Stop here, as PostgreSQL does: a restart replays what did reach the disk.
      spdlog::critical(
          "op log {}: fdatasync failed: {}; stopping the server (--oplog-sync "
          "always cannot promise what it acknowledges any more)",
          current_segment(), std::strerror(err));
      std::abort();
    }
    spdlog::error("op log {}: fdatasync failed: {}", current_segment(), std::strerror(err));
  } else {
    syncs_.fetch_add(1, std::memory_order_relaxed);
  }
  unsynced_ = false;
  last_sync_ = std::chrono::steady_clock::now();
}

// Writer thread, everysec: hands the syncer the segment to fdatasync (a dup() of its descriptor,
// so that a rotation may close ours meanwhile). While the last sync still runs (a slow disk),
// this one waits for the next second.
void OpLog::sync_in_background() {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(sync_mu_);
  last_sync_ = now;
  if (sync_fd_ >= 0) return;
  const int fd = ::dup(fd_);
  if (fd < 0) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("op log {}: dup for fdatasync failed: {}", current_segment(),
                  std::strerror(errno));
    return;
  }
  sync_fd_ = fd;
  unsynced_ = false;
  sync_cv_.notify_one();
}

void OpLog::syncer_main() {
  std::unique_lock lk(sync_mu_);
  for (;;) {
    sync_cv_.wait(lk, [&] { return sync_fd_ >= 0 || sync_stop_; });
    if (sync_fd_ < 0) return;  // stopped, nothing left to sync
    const int fd = sync_fd_;
    lk.unlock();
    if (options_.before_background_sync) options_.before_background_sync();
    if (::fdatasync(fd) != 0) {
      write_errors_.fetch_add(1, std::memory_order_relaxed);
      spdlog::error("op log {}: fdatasync failed: {}", stem_, std::strerror(errno));
    } else {
      syncs_.fetch_add(1, std::memory_order_relaxed);
    }
    ::close(fd);
    lk.lock();
    sync_fd_ = -1;
  }
}

void OpLog::stop_syncer() {
  if (!syncer_.joinable()) return;
  {
    std::lock_guard lk(sync_mu_);
    sync_stop_ = true;
  }
  sync_cv_.notify_one();
  syncer_.join();
}

// Writes one batch at the end of the current segment, retrying until it is there (see the
// header).
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
    if (failures++ == 0) {
      spdlog::error(
          "op log {}: write failed ({}); retrying until it succeeds, and refusing writes "
          "meanwhile",
          current_segment(), std::strerror(err));
      {
        std::lock_guard lk(mu_);  // an appender waiting for space sees it
        failures_.fetch_add(1, std::memory_order_release);
        failing_.store(true, std::memory_order_release);
      }
      space_cv_.notify_all();
      if (options_.on_durable) options_.on_durable();  // wakes the worker to see it
    }
    // Cut off the part of the batch that did reach the file, so that a retry does not leave a
    // torn record in the middle of the log. If that fails, resume where the write stopped.
    if (done > 0) {
      if (::ftruncate(fd_, static_cast<off_t>(segment_size_)) == 0) done = 0;
      else write_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    if (stopping_.load(std::memory_order_relaxed) && failures >= kRetriesWhenStopping) {
      spdlog::error("op log {}: giving up at shutdown, {} bytes not logged", current_segment(),
                    n - done);
      segment_size_ += done;
      return;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  segment_size_ += n;
  file_bytes_.fetch_add(n, std::memory_order_relaxed);
  unsynced_ = true;
  if (failures > 0) {
    failing_.store(false, std::memory_order_release);
    spdlog::warn("op log {}: write succeeded after {} failures; writes are accepted again",
                 current_segment(), failures);
  }
  flushes_.fetch_add(1, std::memory_order_relaxed);
}

// Writer thread, after a batch: has the log grown enough for a rewrite (Options)? Then close
// the current segment and start the next, and hand the rewriter the closed ones.
void OpLog::maybe_rotate() {
  if (options_.rewrite_percentage == 0) return;
  const uint64_t total = file_bytes_.load(std::memory_order_relaxed);
  const uint64_t base = base_bytes_.load(std::memory_order_relaxed);
  if (total < options_.rewrite_min_size || total < retry_at_bytes_.load() ||
      total < base * (100 + options_.rewrite_percentage) / 100)
    return;
  {
    std::lock_guard lk(rw_mu_);
    if (rewriting_) return;
  }
  // The closed segment is complete on disk before anything replaces it; the new one's
  // directory entry is durable before a record in it is acknowledged. Always, not only when
  // unsynced_: everysec's background sync may have been handed the segment (which clears
  // unsynced_) and not have run yet, and a machine crash would then leave a torn segment
  // that is not the last (tests/server/oplog_test.cc, EverySecRotationSyncsTheClosedSegment).
  sync_now();
  const uint64_t next = segment_ + 1;
  int fd = ::open(segment_path(stem_, next).c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("op log {}: cannot start a new segment: {}", segment_path(stem_, next),
                  std::strerror(errno));
    retry_at_bytes_.store(total + options_.rewrite_min_size);
    return;
  }
  try {
    sync_dir_of(stem_);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
  const uint64_t closed = segment_;
  ::close(fd_);
  fd_ = fd;
  segment_ = next;
  segment_size_ = 0;
  {
    std::lock_guard lk(rw_mu_);
    rewriting_ = true;
    rewrite_through_ = closed;
  }
  rw_cv_.notify_one();
}

void OpLog::rewriter_main() {
  std::unique_lock lk(rw_mu_);
  for (;;) {
    rw_cv_.wait(lk, [&] { return rewrite_through_ != 0 || rw_stop_; });
    if (rewrite_through_ == 0) return;
    const uint64_t through = rewrite_through_;
    lk.unlock();
    bool ok = false;
    try {
      ok = rewrite(through);
    } catch (const std::exception& e) {
      spdlog::error("op log {}: rewrite failed: {}", stem_, e.what());
    }
    if (!ok) rewrite_errors_.fetch_add(1, std::memory_order_relaxed);
    lk.lock();
    rewrite_through_ = 0;
    rewriting_ = false;
    if (!ok) retry_at_bytes_.store(file_bytes_.load() + options_.rewrite_min_size);
  }
}

// Writes the live items of the base and segments <= through into a new base, then removes
// what it replaces. Reads only closed files.
bool OpLog::rewrite(uint64_t through) {
  const auto t0 = std::chrono::steady_clock::now();
  Files f = list_files(stem_);
  std::vector<std::string> inputs;
  if (f.base() != 0) inputs.push_back(base_path(stem_, f.base()));
  for (uint64_t k : f.segments)
    if (k > f.base() && k <= through) inputs.push_back(segment_path(stem_, k));
  std::vector<int> fds;  // the inputs' (emit_live)
  int ofd = -1;          // the new base's
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
    fds.clear();
    if (ofd >= 0) ::close(ofd);
    ofd = -1;
  };
  uint64_t in_bytes = 0;
  try {
    const std::string out = base_path(stem_, through);
    const std::string tmp = out + ".tmp";
    ofd = open_or_fail(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    std::vector<char> buf;
    buf.reserve(kReadChunk + kHeaderSize + store::kMaxKeySize + store::kMaxValueSizeLimit);
    uint64_t out_bytes = 0, items = 0;
    auto flush = [&] {
      size_t done = 0;
      while (done < buf.size()) {
        ssize_t w = ::write(ofd, buf.data() + done, buf.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail("write", tmp, w < 0 ? errno : EIO);
        done += static_cast<size_t>(w);
      }
      out_bytes += buf.size();
      buf.clear();
    };
    emit_live(inputs, &fds, &in_bytes, [&](const char* p, size_t n) {
      buf.insert(buf.end(), p, p + n);
      items += load<uint8_t>(p + 1) == static_cast<uint8_t>(Op::kPut);
      if (buf.size() >= kReadChunk) flush();
    });
    flush();
    if (::fdatasync(ofd) != 0) fail("fdatasync", tmp, errno);
    if (options_.before_rename) options_.before_rename();
    // The new base is complete and durable: make it the log's, then drop what it replaces.
    if (::rename(tmp.c_str(), out.c_str()) != 0) fail("rename to " + out, tmp, errno);
    sync_dir_of(out);
    close_all();
    uint64_t removed = 0;
    for (const std::string& in : inputs) {
      std::error_code ec;
      removed += fs::file_size(in, ec);
      remove_file(in);
    }
    sync_dir_of(out);
    file_bytes_.fetch_sub(std::min(removed, file_bytes_.load()), std::memory_order_relaxed);
    file_bytes_.fetch_add(out_bytes, std::memory_order_relaxed);
    base_bytes_.store(out_bytes, std::memory_order_relaxed);
    rewrites_.fetch_add(1, std::memory_order_relaxed);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    spdlog::info("op log {}: rewrote {} bytes in {} file(s) as {} ({} items, {} bytes) in {} ms",
                 stem_, in_bytes, inputs.size(), out, items, out_bytes, ms);
    return true;
  } catch (...) {
    close_all();
    remove_file(base_path(stem_, through) + ".tmp");
    throw;
  }
}

}  // namespace fabkv::server
