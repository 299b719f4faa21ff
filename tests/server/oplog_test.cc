// OpLog: the PUT/DELETE log of a worker (src/server/oplog.h). Round trips against a model,
// torn and corrupt tails, the writer thread's backpressure and retries. Pure unit tests: files
// in a fresh directory under /tmp, no fabric.
#include "server/oplog.h"
#include "server/restore.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proto/registry.h"
#include "store/engine.h"

namespace fabkv::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One logged operation, as appended and as replayed.
struct Op {
  bool put = true;
  std::string key, value;
  uint64_t version = 0;
  uint32_t expire_at = 0;
  uint32_t flags = 0;
  bool operator==(const Op&) const = default;
};

size_t encoded_size(const Op& op) {
  return OpLog::kHeaderSize + op.key.size() + op.value.size() + OpLog::kTrailerSize;
}

void append(OpLog& log, const Op& op) {
  if (op.put) log.append_put(op.key, op.value, op.version, op.expire_at, op.flags);
  else log.append_del(op.key);
}

struct Replayed {
  OpLog::ReplayResult result;
  std::vector<Op> ops;
};

Replayed replay_all(const std::string& stem) {
  Replayed r;
  r.result = OpLog::replay(stem, [&](const OpLog::Record& rec) {
    r.ops.push_back(Op{rec.op == OpLog::Op::kPut, std::string(rec.key), std::string(rec.value),
                       rec.version, rec.expire_at, rec.flags});
  });
  return r;
}

// Ops with small keys and values: record i is PUT "key-i" = "value-i" (every fifth a DELETE).
std::vector<Op> small_ops(size_t n, size_t first = 0) {
  std::vector<Op> ops;
  for (size_t i = first; i < first + n; i++) {
    if (i % 5 == 4) ops.push_back(Op{false, "key-" + std::to_string(i - 1), "", 0, 0});
    else
      ops.push_back(Op{true, "key-" + std::to_string(i), "value-" + std::to_string(i), i + 1,
                       static_cast<uint32_t>(i % 3 == 0 ? 0 : 1700000000 + i)});
  }
  return ops;
}

uint64_t total_size(const std::vector<Op>& ops) {
  uint64_t n = 0;
  for (const Op& op : ops) n += encoded_size(op);
  return n;
}

// Polls until pred() holds; false after the deadline.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A gate the writer thread waits at before each write() (a stuck disk) until the test opens it.
struct Gate {
  std::promise<void> open_promise;
  std::shared_future<void> opened = open_promise.get_future().share();
  void open() { open_promise.set_value(); }
  std::function<void()> hook() {
    return [f = opened] { f.wait(); };
  }
};

class OpLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/fabkv-oplog-test-" + std::to_string(::getpid()) + "-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = (dir_ / "worker.log").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void write_ops(const std::vector<Op>& ops) {
    OpLog log(path_);
    for (const Op& op : ops) append(log, op);
  }
  // The first segment: where a log that was never rewritten keeps its records.
  std::string seg() const { return OpLog::segment_path(path_, 1); }
  uint64_t file_size() const { return fs::file_size(seg()); }

  fs::path dir_;
  std::string path_;
};

TEST_F(OpLogTest, RoundTripReproducesTheModel) {
  std::mt19937_64 rng(20240611);
  std::vector<std::string> keys;
  for (size_t i = 0; i < 300; i++) {
    size_t len = i % 10 == 0 ? 250 : 1 + rng() % 40;  // every tenth key at the 250-byte limit
    std::string k(len, 'k');
    for (char& c : k) c = static_cast<char>(rng());  // any byte, zeros included
    keys.push_back(std::move(k));
  }
  struct Item {
    std::string value;
    uint64_t version;
    uint32_t expire_at;
    bool operator==(const Item&) const = default;
  };
  std::map<std::string, Item> model;
  std::vector<Op> ops;
  uint64_t version = 1;
  for (size_t i = 0; i < 4000; i++) {
    const std::string& k = keys[rng() % keys.size()];
    if (rng() % 4 == 0) {
      ops.push_back(Op{false, k, "", 0, 0});
      model.erase(k);
      continue;
    }
    size_t len;
    switch (rng() % 20) {
      case 0: len = 0; break;
      case 1: len = size_t{64} << 10; break;
      default: len = rng() % 300;
    }
    std::string v(len, '\0');
    for (char& c : v) c = static_cast<char>(rng());
    uint32_t expire = rng() % 3 == 0 ? static_cast<uint32_t>(rng()) : 0;
    ops.push_back(Op{true, k, v, version, expire});
    model[k] = Item{v, version, expire};
    version += 1 + rng() % 3;
  }

  OpLog::Stats st;
  {
    OpLog log(path_);
    EXPECT_EQ(log.stem(), path_);
    EXPECT_EQ(log.recovered().records, 0u);
    for (const Op& op : ops) append(log, op);
    st = log.stats();
  }  // the destructor writes everything
  EXPECT_EQ(st.records, ops.size());
  EXPECT_EQ(st.bytes, total_size(ops));
  EXPECT_EQ(st.stalls, 0u);
  EXPECT_EQ(st.write_errors, 0u);
  EXPECT_EQ(file_size(), total_size(ops));

  std::map<std::string, Item> replayed;
  uint64_t calls = 0;
  OpLog::ReplayResult r = OpLog::replay(path_, [&](const OpLog::Record& rec) {
    calls++;
    if (rec.op == OpLog::Op::kPut)
      replayed[std::string(rec.key)] = Item{std::string(rec.value), rec.version, rec.expire_at};
    else replayed.erase(std::string(rec.key));
  });
  EXPECT_EQ(r.records, ops.size());
  EXPECT_EQ(calls, ops.size());
  EXPECT_FALSE(r.torn_tail);
  EXPECT_EQ(r.valid_bytes, total_size(ops));
  EXPECT_TRUE(replayed == model);
  EXPECT_EQ(replay_all(path_).ops, ops);  // the same operations, in the same order
}

TEST_F(OpLogTest, ReopeningAppendsAfterTheExistingRecords) {
  std::vector<Op> a = small_ops(30), b = small_ops(20, 30);
  write_ops(a);
  {
    OpLog log(path_);
    EXPECT_EQ(log.recovered().records, a.size());
    EXPECT_FALSE(log.recovered().torn_tail);
    for (const Op& op : b) append(log, op);
  }
  std::vector<Op> all = a;
  all.insert(all.end(), b.begin(), b.end());
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, all);
  EXPECT_FALSE(r.result.torn_tail);
}

TEST_F(OpLogTest, TruncatedLastRecordIsATornTail) {
  std::vector<Op> ops = small_ops(40);
  ops.push_back(Op{true, "last", std::string(1000, 'x'), 99, 0});
  write_ops(ops);
  const uint64_t full = file_size();
  const uint64_t prefix = full - encoded_size(ops.back());
  std::vector<Op> kept(ops.begin(), ops.end() - 1);

  // Cut inside the value, inside the checksum, inside the header, and right after the header.
  for (uint64_t cut : {full - 500, full - 1, prefix + 3, prefix + OpLog::kHeaderSize}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    fs::resize_file(seg(), cut);
    Replayed r = replay_all(path_);
    EXPECT_EQ(r.ops, kept);
    EXPECT_EQ(r.result.records, kept.size());
    EXPECT_TRUE(r.result.torn_tail);
    EXPECT_EQ(r.result.valid_bytes, prefix);
  }

  // A new OpLog cuts the tail away, so what it appends is reachable.
  std::vector<Op> more = small_ops(10, 100);
  {
    OpLog log(path_);
    EXPECT_TRUE(log.recovered().torn_tail);
    EXPECT_EQ(log.recovered().records, kept.size());
    EXPECT_EQ(log.recovered().valid_bytes, prefix);
    EXPECT_EQ(file_size(), prefix);
    for (const Op& op : more) append(log, op);
  }
  Replayed r = replay_all(path_);
  std::vector<Op> expected = kept;
  expected.insert(expected.end(), more.begin(), more.end());
  EXPECT_EQ(r.ops, expected);
  EXPECT_FALSE(r.result.torn_tail);
  EXPECT_EQ(r.result.valid_bytes, file_size());
}

TEST_F(OpLogTest, GarbageAfterTheRecordsIsATornTail) {
  std::vector<Op> ops = small_ops(25);
  const uint64_t valid = total_size(ops);

  // A header that claims a value far beyond the limit; a plausible header cut short; zeros
  // (a file extended by a crash before its data reached the disk); random bytes.
  std::string huge(OpLog::kHeaderSize, '\0');
  huge[0] = static_cast<char>(OpLog::kMagic);
  huge[1] = static_cast<char>(OpLog::Op::kPut);
  huge[2] = 5;
  huge[4] = huge[5] = huge[6] = huge[7] = '\xff';
  std::string plausible = huge;
  plausible[4] = 10;
  plausible[5] = plausible[6] = plausible[7] = 0;
  std::mt19937 rng(7);
  std::string random(3000, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  for (const std::string& garbage : {huge, plausible + "abc", std::string(4096, '\0'), random,
                                     std::string(1, static_cast<char>(OpLog::kMagic))}) {
    fs::remove(seg());
    write_ops(ops);
    {
      std::ofstream f(seg(), std::ios::binary | std::ios::app);
      f << garbage;
    }
    Replayed r = replay_all(path_);
    EXPECT_EQ(r.ops, ops);
    EXPECT_TRUE(r.result.torn_tail);
    EXPECT_EQ(r.result.valid_bytes, valid);
  }

  // The last garbage is still there: reopening cuts it, then appends.
  std::vector<Op> more = small_ops(5, 50);
  {
    OpLog log(path_);
    EXPECT_EQ(file_size(), valid);
    for (const Op& op : more) append(log, op);
  }
  Replayed r = replay_all(path_);
  std::vector<Op> expected = ops;
  expected.insert(expected.end(), more.begin(), more.end());
  EXPECT_EQ(r.ops, expected);
  EXPECT_FALSE(r.result.torn_tail);
}

// A bad record with valid ones after it is not what a crash leaves (a crash tears only the
// end): the log is refused, naming the file and the byte, not cut there (which deleted every
// record after it).
TEST_F(OpLogTest, AnyFlippedByteInAMiddleRecordOfTheLastSegmentRefusesTheLog) {
  std::vector<Op> ops = small_ops(21);
  write_ops(ops);
  std::vector<char> original(file_size());
  {
    std::ifstream f(seg(), std::ios::binary);
    f.read(original.data(), static_cast<std::streamsize>(original.size()));
  }
  const size_t middle = 10;
  const uint64_t start = total_size({ops.begin(), ops.begin() + middle});
  auto corrupt = [&](size_t i) {
    std::vector<char> bytes = original;
    bytes[start + i] ^= 0x20;
    std::ofstream f(seg(), std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  for (size_t i = 0; i < encoded_size(ops[middle]); i++) {
    SCOPED_TRACE("byte " + std::to_string(i) + " of record " + std::to_string(middle));
    corrupt(i);
    try {
      replay_all(path_);
      ADD_FAILURE() << "replayed a log with a corrupt record in the middle";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(seg()), std::string::npos) << what;
      EXPECT_NE(what.find("byte " + std::to_string(start)), std::string::npos) << what;
      EXPECT_NE(what.find("truncate -s " + std::to_string(start)), std::string::npos) << what;
    }
  }
  // Opening refuses it too, and leaves the file as it was (nothing cut).
  corrupt(30);
  EXPECT_THROW(OpLog log(path_), std::runtime_error);
  EXPECT_EQ(file_size(), original.size());
  // What the message says to do keeps the records before the bad one.
  fs::resize_file(seg(), start);
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, std::vector<Op>(ops.begin(), ops.begin() + middle));
  EXPECT_FALSE(r.result.torn_tail);
}

// A value may hold anything, a log's own records too: a crash that cuts such a value short
// leaves valid records inside the torn tail, which must not pass for records after it (the
// restart refused to start after an ordinary crash). A flipped length field, whose record then
// seems to end past the end of the file, is still corruption: valid records run on after it.
TEST_F(OpLogTest, LogRecordsInsideATornValueAreStillATornTail) {
  const fs::path other = dir_ / "other";
  fs::create_directory(other);
  {
    OpLog log((other / "log").string());
    for (const Op& op : small_ops(3)) append(log, op);
  }
  std::string embedded(fs::file_size(OpLog::segment_path((other / "log").string(), 1)), '\0');
  {
    std::ifstream f(OpLog::segment_path((other / "log").string(), 1), std::ios::binary);
    f.read(embedded.data(), static_cast<std::streamsize>(embedded.size()));
  }
  std::vector<Op> ops = small_ops(5);
  const uint64_t prefix = total_size(ops);
  ops.push_back(Op{true, "holder", std::string(300, 'j') + embedded + std::string(300, 'j'), 99,
                   0});
  write_ops(ops);
  // Cut inside the value, just after the embedded records.
  fs::resize_file(seg(), prefix + OpLog::kHeaderSize + 6 + 300 + embedded.size() + 10);
  Replayed r = replay_all(path_);
  EXPECT_TRUE(r.result.torn_tail);
  EXPECT_EQ(r.ops, std::vector<Op>(ops.begin(), ops.end() - 1));
  {
    OpLog log(path_);  // cuts it
    EXPECT_EQ(file_size(), prefix);
  }

  // A length field flipped so that its record seems to run past the end: refused.
  fs::remove(seg());
  std::vector<Op> more = small_ops(12);
  write_ops(more);
  const uint64_t at = total_size({more.begin(), more.begin() + 4});
  {
    std::fstream f(seg(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 6));  // value_len's third byte: +1 MiB
    f.put(0x10);
  }
  EXPECT_THROW(replay_all(path_), std::runtime_error);
}

TEST_F(OpLogTest, MissingFileIsAnEmptyLog) {
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.result.records, 0u);
  EXPECT_FALSE(r.result.torn_tail);
  EXPECT_EQ(r.result.valid_bytes, 0u);
  EXPECT_TRUE(r.ops.empty());
  EXPECT_EQ(replay_all((dir_ / "no" / "such" / "dir.log").string()).result.records, 0u);
  EXPECT_FALSE(fs::exists(seg()));  // replay does not create it
}

TEST_F(OpLogTest, EmptyLogReplaysNothing) {
  write_ops({});
  EXPECT_TRUE(fs::exists(seg()));
  EXPECT_EQ(file_size(), 0u);
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.result.records, 0u);
  EXPECT_FALSE(r.result.torn_tail);
}

TEST_F(OpLogTest, ASegmentThatIsADirectoryThrows) {
  fs::create_directory(seg());
  EXPECT_THROW(replay_all(path_), std::runtime_error);
}

TEST_F(OpLogTest, OpenFailuresNameThePath) {
  std::string bad = (dir_ / "missing-dir" / "worker.log").string();
  try {
    OpLog log(bad);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  fs::create_directory(path_ + ".lock");
  EXPECT_THROW(OpLog log(path_), std::runtime_error);  // its lock file is a directory
}

TEST_F(OpLogTest, ASecondOpLogOnTheSameFileIsRefused) {
  OpLog first(path_);
  EXPECT_THROW(OpLog second(path_), std::runtime_error);
  first.append_del("k");
}

TEST_F(OpLogTest, BadKeysAreRejectedAndNotLogged) {
  {
    OpLog log(path_);
    EXPECT_THROW(log.append_put("", "v", 1, 0), std::invalid_argument);
    EXPECT_THROW(log.append_put(std::string(251, 'k'), "v", 1, 0), std::invalid_argument);
    EXPECT_THROW(log.append_del(""), std::invalid_argument);
    log.append_put(std::string(250, 'k'), "", 1, 0);
    EXPECT_EQ(log.stats().records, 1u);
  }
  EXPECT_EQ(replay_all(path_).result.records, 1u);
}

// The worker's appends return while the writer is stuck, as long as less than the bound is
// pending; the destructor then writes all of it.
TEST_F(OpLogTest, AppendsDoNotWaitForAStuckWriterBelowTheBound) {
  Gate gate;
  std::vector<Op> ops = small_ops(2000);
  {
    OpLog log(path_, OpLog::Options{.before_write = gate.hook()});
    for (const Op& op : ops) append(log, op);  // would hang here if appends waited
    OpLog::Stats st = log.stats();
    EXPECT_EQ(st.records, ops.size());
    EXPECT_EQ(st.bytes, total_size(ops));
    EXPECT_EQ(st.stalls, 0u);
    EXPECT_EQ(st.flushes, 0u);  // the writer has not written anything yet
    gate.open();
    EXPECT_TRUE(eventually([&] { return log.stats().flushes > 0; }));
  }
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, ops);
  EXPECT_FALSE(r.result.torn_tail);
}

// Beyond the bound, append waits (counted) and nothing is dropped.
TEST_F(OpLogTest, BackpressureWaitsForTheWriterAndDropsNothing) {
  Gate gate;
  std::vector<Op> ops;
  for (size_t i = 0; i < 100; i++)
    ops.push_back(Op{true, "key-" + std::to_string(i), std::string(1000, char('a' + i % 26)), i + 1,
                     0});
  {
    OpLog log(path_, OpLog::Options{.max_pending_bytes = 8 << 10, .before_write = gate.hook()});
    std::thread worker([&] {
      for (const Op& op : ops) append(log, op);
    });
    EXPECT_TRUE(eventually([&] { return log.stats().stalls == 1; }));
    std::this_thread::sleep_for(20ms);
    OpLog::Stats st = log.stats();
    EXPECT_LE(st.bytes, (8u << 10)) << "appended past the bound while the writer was stuck";
    EXPECT_LT(st.records, ops.size());
    EXPECT_EQ(st.flushes, 0u);
    gate.open();
    worker.join();
    st = log.stats();
    EXPECT_EQ(st.records, ops.size());
    EXPECT_GE(st.stalls, 1u);
    EXPECT_GT(st.flushes, 1u);
  }
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, ops);
  EXPECT_FALSE(r.result.torn_tail);
}

// A record larger than the bound still goes through (once everything before it is written).
TEST_F(OpLogTest, RecordLargerThanTheBoundIsAccepted) {
  std::vector<Op> ops = {Op{true, "a", "1", 1, 0},
                         Op{true, "big", std::string(64 << 10, 'b'), 2, 0},
                         Op{true, "c", "3", 3, 0}};
  {
    OpLog log(path_, OpLog::Options{.max_pending_bytes = 4 << 10});
    for (const Op& op : ops) append(log, op);
  }
  EXPECT_EQ(replay_all(path_).ops, ops);
}

TEST_F(OpLogTest, FsyncModeWritesEverything) {
  std::vector<Op> ops = small_ops(50);
  {
    OpLog log(path_, OpLog::Options{.sync = OpLog::Sync::kAlways});
    for (size_t i = 0; i < ops.size(); i++) {
      append(log, ops[i]);
      if (i % 10 == 0) std::this_thread::sleep_for(1ms);  // several batches
    }
    EXPECT_TRUE(eventually([&] { return log.stats().flushes > 0; }));
    EXPECT_EQ(log.stats().write_errors, 0u);
  }
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, ops);
  EXPECT_FALSE(r.result.torn_tail);
}

// A failing write() (here EFBIG from RLIMIT_FSIZE, as a full disk would fail) is retried until
// it succeeds; the part of the batch that reached the file is cut off first, so the log has no
// torn record in the middle and no duplicate.
TEST_F(OpLogTest, FailedWritesAreRetriedWithoutLossOrDuplicates) {
  // Restores the file size limit and SIGXFSZ however the test ends (the limit is per process).
  struct Limits {
    struct rlimit saved {};
    struct sigaction old_action {};
    bool ok = false;
    Limits() {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ok = ::getrlimit(RLIMIT_FSIZE, &saved) == 0 &&
           ::sigaction(SIGXFSZ, &ignore, &old_action) == 0;
    }
    ~Limits() {
      ::setrlimit(RLIMIT_FSIZE, &saved);
      ::sigaction(SIGXFSZ, &old_action, nullptr);
    }
    bool cap(rlim_t bytes) const {
      struct rlimit low = saved;
      low.rlim_cur = bytes;
      return ::setrlimit(RLIMIT_FSIZE, &low) == 0;
    }
    bool restore() const { return ::setrlimit(RLIMIT_FSIZE, &saved) == 0; }
  } limits;
  ASSERT_TRUE(limits.ok);
  if (limits.saved.rlim_cur != RLIM_INFINITY && limits.saved.rlim_cur < (1u << 20))
    GTEST_SKIP() << "file size limit already low";

  Gate gate;
  std::vector<Op> ops;
  for (size_t i = 0; i < 20; i++)
    ops.push_back(Op{true, "key-" + std::to_string(i), std::string(500, char('a' + i)), i + 1, 0});
  OpLog::Stats st{};
  {
    OpLog log(path_, OpLog::Options{.before_write = gate.hook()});
    for (const Op& op : ops) append(log, op);  // ~10.5 KB in one or two batches
    ASSERT_TRUE(limits.cap(4096));             // a batch fits only partly
    gate.open();
    EXPECT_TRUE(eventually([&] { return log.stats().write_errors >= 2; }));
    EXPECT_LE(file_size(), 4096u);
    ASSERT_TRUE(limits.restore());
    // Written by the retries (not by the destructor).
    EXPECT_TRUE(eventually([&] { return file_size() == total_size(ops); }));
    st = log.stats();
  }
  EXPECT_GE(st.write_errors, 2u);
  Replayed r = replay_all(path_);
  EXPECT_EQ(r.ops, ops);
  EXPECT_FALSE(r.result.torn_tail);
  EXPECT_EQ(file_size(), total_size(ops));
}

// ---- sync modes and positions ----------------------------------------------------------------

TEST_F(OpLogTest, SyncModesByName) {
  for (OpLog::Sync s : {OpLog::Sync::kAlways, OpLog::Sync::kEverySec, OpLog::Sync::kNo})
    EXPECT_EQ(OpLog::sync_from_string(OpLog::to_string(s)), s);
  EXPECT_FALSE(OpLog::sync_from_string("sometimes").has_value());
  EXPECT_EQ(OpLog::Options{}.sync, OpLog::Sync::kEverySec);  // Redis's default too
}

// always: durable() moves only once the batch is written and fdatasync()ed, and then to the
// position after its last record; on_durable says so.
TEST_F(OpLogTest, AlwaysMovesDurableOnlyAfterTheSync) {
  Gate gate;
  std::atomic<int> told{0};
  OpLog log(path_, OpLog::Options{.sync = OpLog::Sync::kAlways,
                                  .on_durable = [&] { told++; },
                                  .before_write = gate.hook()});
  const std::vector<Op> ops = small_ops(10);
  for (const Op& op : ops) append(log, op);
  EXPECT_EQ(log.appended(), total_size(ops));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(log.durable(), 0u) << "durable before the writer wrote anything";
  EXPECT_EQ(told.load(), 0);
  gate.open();
  EXPECT_TRUE(eventually([&] { return log.durable() == log.appended(); }));
  EXPECT_GE(log.stats().syncs, 1u);
  EXPECT_GE(told.load(), 1);
}

// Group commit: what is appended while one batch is being written and synced leaves as one
// further batch (one fdatasync), not one per record.
TEST_F(OpLogTest, RecordsAppendedDuringAFlushShareTheNextSync) {
  std::promise<void> first_write_started;
  std::atomic<int> writes{0};
  Gate gate;
  auto hook = [&, held = gate.hook()] {
    if (writes++ == 0) {
      first_write_started.set_value();
      held();  // the first batch's write is stuck until the test opens the gate
    }
  };
  OpLog log(path_, OpLog::Options{.sync = OpLog::Sync::kAlways, .before_write = hook});
  log.append_put("first", "1", 1, 0);
  first_write_started.get_future().wait();
  const std::vector<Op> ops = small_ops(1000, 10);
  for (const Op& op : ops) append(log, op);  // all during the first batch's flush
  gate.open();
  EXPECT_TRUE(eventually([&] { return log.durable() == log.appended(); }));
  const OpLog::Stats st = log.stats();
  EXPECT_EQ(st.flushes, 2u) << "1001 records in two batches";
  EXPECT_EQ(st.syncs, 2u);
}

// everysec: a write is synced within about a second even when nothing follows it.
TEST_F(OpLogTest, EverySecSyncsWithinASecondOfTheLastWrite) {
  OpLog log(path_, OpLog::Options{.sync = OpLog::Sync::kEverySec});
  log.append_put("k", "v", 1, 0);
  EXPECT_TRUE(eventually([&] { return log.stats().flushes == 1; }));
  const uint64_t before = log.stats().syncs;
  EXPECT_TRUE(eventually([&] { return log.stats().syncs > before; }, 3000ms))
      << "no fdatasync within 3 s of the last write";
}

TEST_F(OpLogTest, NoSyncsOnlyAtClose) {
  std::optional<OpLog> log;
  log.emplace(path_, OpLog::Options{.sync = OpLog::Sync::kNo});
  for (const Op& op : small_ops(20)) append(*log, op);
  EXPECT_TRUE(eventually([&] { return log->durable() == log->appended(); }));
  std::this_thread::sleep_for(1500ms);  // longer than everysec's interval
  EXPECT_EQ(log->stats().syncs, 0u);
  log.reset();
  EXPECT_EQ(replay_all(path_).ops.size(), 20u);
}

// Flags (memcached's client flags) and CLEAR (flush_all) are logged and replayed.
TEST_F(OpLogTest, FlagsAndClearRoundTrip) {
  {
    OpLog log(path_);
    log.append_put("a", "1", 1, 0, 0xdeadbeef);
    log.append_clear();
    log.append_put("b", "2", 2, 0, 7);
  }
  std::vector<OpLog::Record> seen;
  std::vector<std::string> keys;
  OpLog::replay(path_, [&](const OpLog::Record& r) {
    seen.push_back(r);
    keys.emplace_back(r.key);
  });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].op, OpLog::Op::kPut);
  EXPECT_EQ(seen[0].flags, 0xdeadbeefu);
  EXPECT_EQ(seen[1].op, OpLog::Op::kClear);
  EXPECT_EQ(keys[1], "");
  EXPECT_EQ(seen[2].flags, 7u);
}

// A log written before flags were logged (format 1, one file named after the stem) is read,
// with flags 0, and becomes the first segment; new records follow in format 2.
TEST_F(OpLogTest, AFormatOneLogOfTheOneFileLayoutIsReadAndKept) {
  auto v1 = [](const std::string& key, const std::string& value, uint64_t version) {
    std::string r(OpLog::kHeaderSizeV1, '\0');
    r[0] = static_cast<char>(OpLog::kMagicV1);
    r[1] = static_cast<char>(OpLog::Op::kPut);
    r[2] = static_cast<char>(key.size());
    const uint32_t vlen = static_cast<uint32_t>(value.size());
    std::memcpy(r.data() + 4, &vlen, 4);
    std::memcpy(r.data() + 8, &version, 8);
    r += key + value;
    const uint64_t sum = XXH3_64bits(r.data(), r.size());
    r.append(reinterpret_cast<const char*>(&sum), 8);
    return r;
  };
  {
    std::ofstream f(path_, std::ios::binary);
    f << v1("old-a", "x", 5) << v1("old-b", "yy", 6);
  }
  {
    OpLog log(path_);
    EXPECT_EQ(log.recovered().records, 2u);
    EXPECT_FALSE(fs::exists(path_));
    EXPECT_TRUE(fs::exists(seg()));
    log.append_put("new", "z", 7, 0, 3);
  }
  Replayed r = replay_all(path_);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.ops[0], (Op{true, "old-a", "x", 5, 0, 0}));
  EXPECT_EQ(r.ops[1], (Op{true, "old-b", "yy", 6, 0, 0}));
  EXPECT_EQ(r.ops[2], (Op{true, "new", "z", 7, 0, 3}));
}

// ---- rewrite ---------------------------------------------------------------------------------

// A log that keeps overwriting a few keys is rewritten as its live items (each key's last
// record, in log order; deleted, cleared and expired ones left out), the old files go, and the
// replay is the model's.
TEST_F(OpLogTest, RewriteKeepsTheLiveItemsAndBoundsTheFiles) {
  std::map<std::string, Op> model;
  std::mt19937_64 rng(11);
  const uint32_t now = static_cast<uint32_t>(std::time(nullptr));
  uint64_t version = 1;
  OpLog::Options o{.rewrite_percentage = 100, .rewrite_min_size = 16 << 10};
  {
    OpLog log(path_, o);
    for (int i = 0; i < 20000; i++) {
      const std::string k = "key-" + std::to_string(rng() % 40);
      const int what = static_cast<int>(rng() % 100);
      if (what < 10) {
        log.append_del(k);
        model.erase(k);
      } else if (what == 10 && i < 10000) {
        log.append_clear();
        model.clear();
      } else {
        const uint32_t expire = what < 15 ? now - 10 : what < 20 ? now + 3600 : 0;
        Op op{true,      k,      std::string(50 + rng() % 50, static_cast<char>('a' + rng() % 26)),
              version++, expire, static_cast<uint32_t>(rng())};
        append(log, op);
        if (expire != 0 && expire <= now) model.erase(k);  // the rewrite may leave it out
        else model[k] = op;
      }
      if (i % 500 == 0) std::this_thread::sleep_for(1ms);  // several batches
    }
    EXPECT_TRUE(eventually([&] { return log.stats().rewrites >= 1; }, 10000ms));
    // What was appended while the last rewrite ran sits in the newest segment until a later
    // write finds the log grown again; a few more writes bring the files down to the live data.
    EXPECT_TRUE(eventually(
        [&] {
          Op tick{true, "tick", "t", version++, 0, 0};
          append(log, tick);
          model["tick"] = tick;
          std::this_thread::sleep_for(2ms);
          return log.stats().file_bytes < log.stats().bytes / 4;
        },
        30000ms))  // an ASan build on a loaded host took 10 s
        << "the files did not shrink: " << log.stats().file_bytes << " of " << log.stats().bytes;
    EXPECT_EQ(log.stats().rewrite_errors, 0u);
  }
  // One base and the segments after it.
  size_t bases = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string n = e.path().filename().string();
    bases += n.ends_with(".base");
    EXPECT_FALSE(n.ends_with(".tmp")) << n;
  }
  EXPECT_EQ(bases, 1u);
  std::map<std::string, Op> replayed;
  uint64_t last_version = 0;
  bool in_order = true;
  OpLog::replay(path_, [&](const OpLog::Record& r) {
    const std::string k(r.key);
    if (r.op == OpLog::Op::kPut) {
      in_order &= r.version > last_version;
      last_version = r.version;
      Op op{true, k, std::string(r.value), r.version, r.expire_at, r.flags};
      if (r.expire_at != 0 && r.expire_at <= now) replayed.erase(k);
      else replayed[k] = op;
    } else if (r.op == OpLog::Op::kDel) {
      replayed.erase(k);
    } else if (r.op == OpLog::Op::kClear) {
      replayed.clear();
    }
  });
  EXPECT_TRUE(replayed == model);
  EXPECT_TRUE(in_order) << "versions not replayed in the order they were handed out";
}

// The two states a crash can leave a rewrite in, made by hand: a temporary base not renamed
// yet (the old files are complete), and a renamed base whose old segments were not removed yet.
// Both replay to the same items, and opening the log cleans up.
TEST_F(OpLogTest, ARewriteCutShortAtEitherStepReplaysTheSame) {
  const fs::path before = dir_ / "before-rename";
  fs::create_directory(before);
  auto snapshot = [&] {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.is_regular_file())
        fs::copy_file(e.path(), before / e.path().filename(), fs::copy_options::overwrite_existing);
  };
  std::atomic<bool> taken{false};
  OpLog::Options o{.rewrite_percentage = 100, .rewrite_min_size = 8 << 10};
  o.before_rename = [&] {
    if (!taken.exchange(true)) snapshot();
  };
  std::map<std::string, std::string> model;
  {
    OpLog log(path_, o);
    for (int i = 0; i < 3000; i++) {
      const std::string k = "k" + std::to_string(i % 30), v = "v" + std::to_string(i);
      log.append_put(k, v, static_cast<uint64_t>(i + 1), 0);
      model[k] = v;
      if (i % 100 == 0) std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(eventually([&] { return log.stats().rewrites >= 1; }));
  }
  ASSERT_TRUE(taken.load());
  auto items = [&](const std::string& stem) {
    std::map<std::string, std::string> m;
    OpLog::replay(stem, [&](const OpLog::Record& r) {
      if (r.op == OpLog::Op::kPut) m[std::string(r.key)] = std::string(r.value);
    });
    return m;
  };
  const std::string old_stem = (before / "worker.log").string();
  // (1) Killed before the rename: the snapshot holds the old segments and a .tmp base.
  bool had_tmp = false;
  for (const auto& e : fs::directory_iterator(before))
    had_tmp |= e.path().string().ends_with(".base.tmp");
  ASSERT_TRUE(had_tmp);
  { OpLog reopened(old_stem, OpLog::Options{}, nullptr); }
  for (const auto& e : fs::directory_iterator(before))
    EXPECT_FALSE(e.path().string().ends_with(".tmp"));
  // The snapshot was taken at the first rewrite: every key it has carries a value the run
  // wrote for that key.
  const auto early = items(old_stem);
  EXPECT_FALSE(early.empty());
  for (const auto& [k, v] : early)
    EXPECT_EQ(std::stoi(v.substr(1)) % 30, std::stoi(k.substr(1))) << k;
  // (2) Killed after the rename, before the old segments went: put them back beside the base.
  auto count = [&](const char* suffix) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().string().ends_with(suffix);
    return n;
  };
  const size_t segments = count(".incr");
  for (const auto& e : fs::directory_iterator(before))
    if (e.path().string().ends_with(".incr"))
      fs::copy_file(e.path(), dir_ / e.path().filename(), fs::copy_options::skip_existing);
  ASSERT_GT(count(".incr"), segments);
  EXPECT_EQ(items(path_), model);
  {
    OpLog reopened(path_);  // removes the segments its base covers
  }
  EXPECT_EQ(count(".incr"), segments);
  EXPECT_EQ(items(path_), model);
}

// everysec hands its fdatasync to a thread of its own, which clears "unsynced" at the hand-over;
// a rotation in the same turn of the writer then closed the segment without a sync of its own,
// and a machine crash before the background sync ran left a torn segment that is not the last
// (refused at the next start). Here that background sync does not run until the test ends.
TEST_F(OpLogTest, EverySecRotationSyncsTheClosedSegment) {
  Gate gate;
  std::atomic<bool> block{false};
  std::atomic<int> background{0};
  OpLog::Options o;
  o.sync = OpLog::Sync::kEverySec;
  o.rewrite_percentage = 100;
  o.rewrite_min_size = 16 << 10;
  o.before_background_sync = [&, hook = gate.hook()] {
    background++;
    if (block.load()) hook();
  };
  OpLog log(path_, o);
  // Rotated: the next segment exists (current_segment() is the writer thread's).
  const auto rotated = [&] { return fs::exists(OpLog::segment_path(path_, 2)); };
  // Below the rotation's size; then a quiet second: its background sync runs.
  const std::string v(1000, 'v');
  for (uint64_t i = 1; i <= 12; i++) log.append_put("k", v, i, 0);
  ASSERT_TRUE(eventually([&] { return log.stats().syncs == 1; }, 5000ms));
  const int handed = background.load();
  // Another second later, one record crosses the size: the writer hands its sync over (it waits
  // at the gate) and rotates in the same turn.
  block = true;
  std::this_thread::sleep_for(1100ms);
  log.append_put("k", std::string(5000, 'w'), 13, 0);
  ASSERT_TRUE(eventually(rotated, 5000ms));
  EXPECT_EQ(background.load(), handed + 1);  // the premise: a sync was handed over and waits
  EXPECT_EQ(log.stats().syncs, 2u) << "rotated without syncing the closed segment";
  gate.open();
}

// memcached's delayed flush_all: a CLEAR with a time. It empties nothing when read; a later
// CLEAR replaces it; a rewrite keeps it while no CLEAR follows it.
TEST_F(OpLogTest, ADelayedClearIsKeptUntilAnotherClearReplacesIt) {
  const uint32_t later = static_cast<uint32_t>(std::time(nullptr)) + 3600;
  auto clear_at = [&] {
    uint32_t at = 0;
    std::set<std::string> keys;
    OpLog::replay(path_, [&](const OpLog::Record& r) {
      if (r.op == OpLog::Op::kClear) at = r.expire_at;
      if (r.op == OpLog::Op::kPut) keys.emplace(r.key);
    });
    return std::pair{at, keys.count("a") + keys.count("b")};
  };
  OpLog::Options o{.rewrite_percentage = 100, .rewrite_min_size = 16 << 10};
  {
    OpLog log(path_, o);
    log.append_put("a", "1", 1, 0);
    log.append_clear(later);
    log.append_put("b", "2", 2, 0);
    uint64_t v = 3;
    ASSERT_TRUE(eventually(
        [&] {
          log.append_put("tick", std::string(500, 't'), v++, 0);
          std::this_thread::sleep_for(1ms);
          return log.stats().rewrites >= 1;
        },
        20000ms));
  }
  EXPECT_EQ(clear_at(), std::pair(later, size_t{2}));  // a and b: neither emptied by it
  {
    OpLog log(path_);
    log.append_clear();
  }
  EXPECT_EQ(clear_at().first, 0u);
}

// ---- replay into an engine ------------------------------------------------------------------

// What a worker does with its log (Worker::open_oplog, src/server/worker.cc): EngineRestore.
OpLog::ReplayResult replay_into(const std::string& stem, store::Engine& e, uint32_t now) {
  EngineRestore restore(e, now);
  return OpLog::replay(stem, std::ref(restore));
}

struct FakeClock {
  uint32_t now = 2'000'000'000;
  static uint32_t read(void* self) { return static_cast<FakeClock*>(self)->now; }
};

class OpLogReplayTest : public OpLogTest, public ::testing::WithParamInterface<const char*> {
 protected:
  std::unique_ptr<store::Engine> engine(size_t max_value = store::kDefaultMaxValueSize,
                                        size_t memory = size_t{64} << 20) {
    store::EngineOptions o;
    o.memory_bytes = memory;
    o.index_buckets = 4096;
    o.max_value_size = max_value;
    o.huge_pages = false;
    o.prefault = false;
    o.clock = &FakeClock::read;
    o.clock_ctx = &clock_;
    return proto::make_engine(GetParam(), o);
  }

  // A server's run: random PUTs (a third of them CAS with the version last seen), DELETEs and
  // expiry times, each logged as the worker logs it (only what the engine accepted, with the
  // version the engine stamped). `seen` collects what a client learnt: key -> version.
  void run(store::Engine& e, OpLog& log, std::mt19937_64& rng, size_t n,
           std::map<std::string, uint64_t>& seen) {
    for (size_t i = 0; i < n; i++) {
      const std::string k = "key-" + std::to_string(rng() % 150);
      if (rng() % 6 == 0) {
        if (e.del(k) == store::Status::kOk) log.append_del(k);
        continue;
      }
      store::PutOptions p;
      if (rng() % 3 == 0 && seen.count(k)) p.expected_version = seen[k];
      const uint32_t r = static_cast<uint32_t>(rng() % 4);
      p.expire_at = r == 0 ? 0 : r == 1 ? clock_.now - 5 : clock_.now + 1000 + r;
      const std::string v = k + "=" + std::to_string(rng());
      uint64_t version = 0;
      if (e.put(k, v, p, &version) == store::Status::kOk) {
        log.append_put(k, v, version, p.expire_at);
        seen[k] = version;
      }
    }
  }

  // Every key of `want` reads the same from `got`: value, version, expiry (or both absent).
  void expect_same(store::Engine& want, store::Engine& got) {
    for (int i = 0; i < 150; i++) {
      const std::string k = "key-" + std::to_string(i);
      store::ItemView a, b;
      const store::Status sa = want.get(k, a);
      const store::Status sb = got.get(k, b);
      ASSERT_EQ(sa, sb) << k;
      if (sa != store::Status::kOk) continue;
      EXPECT_EQ(a.value, b.value) << k;
      EXPECT_EQ(a.version, b.version) << k;
      EXPECT_EQ(a.expire_at, b.expire_at) << k;
    }
  }

  FakeClock clock_;
};

TEST_P(OpLogReplayTest, ARestartRestoresCasVersionsAndNewVersionsNeverCollide) {
  std::mt19937_64 rng(7);
  std::map<std::string, uint64_t> seen;
  auto first = engine();
  {
    OpLog log(path_);
    run(*first, log, rng, 2000, seen);
  }
  // Restart: a fresh engine from the log alone has every item with its version.
  auto second = engine();
  OpLog::ReplayResult r = replay_into(path_, *second, clock_.now);
  EXPECT_FALSE(r.torn_tail);
  expect_same(*first, *second);
  // The same next PUT gets the same version on both: the counter moved past the log.
  uint64_t v1 = 0, v2 = 0;
  ASSERT_EQ(first->put("fresh", "x", {}, &v1), store::Status::kOk);
  ASSERT_EQ(second->put("fresh", "x", {}, &v2), store::Status::kOk);
  EXPECT_EQ(v2, v1);

  // A second run on the restored engine appends to the log; a second restart sees both runs.
  {
    OpLog log(path_);
    log.append_put("fresh", "x", v2, 0);
    run(*second, log, rng, 2000, seen);
  }
  auto third = engine();
  replay_into(path_, *third, clock_.now);
  expect_same(*second, *third);

  // What a client learnt before the restarts: a CAS with the item's version succeeds, a CAS
  // with any other version it saw is stale.
  size_t cas_ok = 0, cas_stale = 0;
  for (const auto& [k, version] : seen) {
    store::ItemView cur;
    if (third->get(k, cur) != store::Status::kOk) continue;
    if (cur.version == version) {
      uint64_t nv = 0;
      ASSERT_EQ(third->put(k, "cas", store::PutOptions{.expected_version = version}, &nv),
                store::Status::kOk)
          << k;
      EXPECT_GT(nv, version);
      cas_ok++;
    }
  }
  for (const auto& [k, version] : seen) {
    store::ItemView cur;
    if (third->get(k, cur) != store::Status::kOk) continue;
    EXPECT_EQ(third->put(k, "stale", store::PutOptions{.expected_version = version - 1}),
              store::Status::kVersionMismatch)
        << k;
    cas_stale++;
  }
  EXPECT_GT(cas_ok, 10u);
  EXPECT_GT(cas_stale, 10u);
}

// A restarted server whose engine refuses a logged PUT (its --max-value is smaller now): that
// item is lost, but every other item keeps its version. (Re-stamping with the engine's
// counter, as replay did before, shifted every later version by one: a client's old version
// then named another item.)
TEST_P(OpLogReplayTest, APutRefusedOnReplayDoesNotShiftTheOtherVersions) {
  auto first = engine();
  std::map<std::string, uint64_t> versions;
  {
    OpLog log(path_);
    for (int i = 0; i < 20; i++) {
      const std::string k = "key-" + std::to_string(i);
      const std::string v(i == 3 ? 2000 : 10, 'v');
      uint64_t version = 0;
      ASSERT_EQ(first->put(k, v, {}, &version), store::Status::kOk);
      log.append_put(k, v, version, 0);
      versions[k] = version;
    }
  }
  auto second = engine(1024);
  replay_into(path_, *second, clock_.now);
  store::ItemView item;
  EXPECT_EQ(second->get("key-3", item), store::Status::kNotFound);
  for (const auto& [k, version] : versions) {
    if (k == "key-3") continue;
    ASSERT_EQ(second->get(k, item), store::Status::kOk) << k;
    EXPECT_EQ(item.version, version) << k;
  }
  uint64_t v = 0;
  ASSERT_EQ(second->put("new", "x", {}, &v), store::Status::kOk);
  EXPECT_EQ(v, versions["key-19"] + 1);
}

// Replay rebuilds what the running server had, not more: an item that expired while the
// server was down (or before) is not stored again. Stored, the expired items took the memory
// that the key's later PUT needed, the engine refused it, and the key kept its older value
// (the store engine, whose memory does not evict).
TEST_P(OpLogReplayTest, ExpiredItemsAreNotRestoredAndTheLastRecordOfAKeyWins) {
  const size_t memory = size_t{4} << 20;
  auto first = engine(store::kDefaultMaxValueSize, memory);
  const std::string filler(16 << 10, 'f');
  {
    OpLog log(path_);
    auto put = [&](const std::string& k, const std::string& v, uint32_t expire_at) {
      uint64_t version = 0;
      const store::Status st = first->put(k, v, store::PutOptions{.expire_at = expire_at},
                                          &version);
      if (st == store::Status::kOk) log.append_put(k, v, version, expire_at);
      return st;
    };
    ASSERT_EQ(put("K", "v1", 0), store::Status::kOk);
    // Fill the memory with items that live one second.
    size_t fillers = 0;
    while (put("f-" + std::to_string(fillers), filler, clock_.now + 1) == store::Status::kOk &&
           fillers < 10000)
      fillers++;
    ASSERT_GT(fillers, 50u);
    clock_.now += 2;
    store::ItemView item;
    for (size_t i = 0; i <= fillers; i++) first->get("f-" + std::to_string(i), item);  // dropped
    for (size_t i = 0; i < 20; i++)  // and their memory used again
      ASSERT_EQ(put("K", std::string(i == 19 ? 2 : 32 << 10, 'v'), 0), store::Status::kOk) << i;
  }
  auto second = engine(store::kDefaultMaxValueSize, memory);
  EngineRestore restore(*second, clock_.now);
  OpLog::replay(path_, std::ref(restore));
  EXPECT_EQ(restore.refused(), 0u);
  store::ItemView item;
  ASSERT_EQ(second->get("K", item), store::Status::kOk);
  EXPECT_EQ(item.value, "vv");
  EXPECT_EQ(second->get("f-0", item), store::Status::kNotFound);
}

// A rewrite leaves out deleted and expired items, and with them the highest versions it read;
// the VERSION record it ends the base with keeps the engine's counter past them, so no version
// is handed out twice across a restart (a stale CAS with a recycled version succeeded).
TEST_P(OpLogReplayTest, AfterARewriteVersionsStillNeverGoBackwards) {
  auto first = engine();
  // Larger than the PUTs below: the first rewrite covers all of them (a slow host).
  OpLog::Options o{.rewrite_percentage = 100, .rewrite_min_size = 128 << 10};
  uint64_t highest = 0;
  {
    OpLog log(path_, o);
    const std::string v(200, 'v');
    for (int i = 0; i < 400; i++) {
      const std::string k = "key-" + std::to_string(i % 50);
      uint64_t version = 0;
      ASSERT_EQ(first->put(k, v, {}, &version), store::Status::kOk);
      log.append_put(k, v, version, 0);
      highest = version;
    }
    // The newest items go: deleted, or expired (the rewrite leaves both out).
    for (int i = 40; i < 50; i++) {
      const std::string k = "key-" + std::to_string(i);
      if (i % 2 == 0) {
        ASSERT_EQ(first->del(k), store::Status::kOk);
        log.append_del(k);
      } else {
        uint64_t version = 0;
        ASSERT_EQ(first->put(k, v, store::PutOptions{.expire_at = clock_.now - 1}, &version),
                  store::Status::kOk);
        log.append_put(k, v, version, clock_.now - 1);
        highest = version;
      }
    }
    log.append_clear();  // and a CLEAR drops everything before it from the rewrite
    ASSERT_TRUE(eventually(
        [&] {
          log.append_del("tick");  // grows the log until a rewrite has run
          std::this_thread::sleep_for(1ms);
          return log.stats().rewrites >= 1;
        },
        20000ms));
  }
  uint64_t version_record = 0;
  OpLog::replay(path_, [&](const OpLog::Record& r) {
    if (r.op == OpLog::Op::kVersion) version_record = r.version;
  });
  EXPECT_EQ(version_record, highest);
  auto second = engine();
  replay_into(path_, *second, static_cast<uint32_t>(std::time(nullptr)));
  uint64_t v = 0;
  ASSERT_EQ(second->put("after-restart", "x", {}, &v), store::Status::kOk);
  EXPECT_GT(v, highest);
}

INSTANTIATE_TEST_SUITE_P(Engines, OpLogReplayTest, ::testing::Values("cache", "store", "pilaf"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace fabkv::server
