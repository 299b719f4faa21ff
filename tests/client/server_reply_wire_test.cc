// server_reply::read_answer (src/proto/server_reply/wire.h) against answers that land byte by
// byte in random orders over what the slot held before, also between the reads it makes, as a
// worker's WRITE may land while the client polls: whenever it accepts, it hands out exactly
// the new answer, and once every byte has landed it accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/server_reply/wire.h"
#include "support/landing.h"

namespace fabkv::server_reply {
namespace {

constexpr size_t kMaxValue = 64;

// One answer as the worker builds it (proto/server_reply/server.cc): header, value, padding,
// trailer.
std::vector<char> build_answer(std::mt19937_64& rng, uint32_t seq) {
  rpc::ResponseHeader h{};
  h.seq = seq;
  h.status = static_cast<uint8_t>(rng() % 4);
  h.op = static_cast<uint8_t>(rng() % 3);
  h.worker = static_cast<uint16_t>(rng() % 2);
  h.value_len = static_cast<uint32_t>(rng() % (kMaxValue + 1));
  h.version = rng();
  h.client = static_cast<uint16_t>(rng() % 4);
  h.epoch = static_cast<uint16_t>(rng() % 4);
  std::vector<char> a(response_bytes(h.value_len), 0);
  std::memcpy(a.data(), &h, sizeof(h));
  for (size_t i = 0; i < h.value_len; ++i) a[sizeof(h) + i] = static_cast<char>('a' + rng() % 26);
  ResponseTrailer t{seq, response_check(a.data(), h.value_len, seq)};
  std::memcpy(a.data() + trailer_offset(h.value_len), &t, sizeof(t));
  return a;
}

// The slot before the new answer lands: the previous answer of this slot, either as the client
// left it after taking it (header and trailer zeroed, value bytes still there) or untouched.
void fill_previous(std::mt19937_64& rng, uint32_t seq, bool taken, char* slot) {
  std::vector<char> old = build_answer(rng, seq);
  std::memcpy(slot, old.data(), old.size());
  if (!taken) return;
  rpc::ResponseHeader h;
  std::memcpy(&h, old.data(), sizeof(h));
  std::memset(slot, 0, sizeof(h));
  std::memset(slot + trailer_offset(h.value_len), 0, sizeof(ResponseTrailer));
}

using fabkv::testing::Landing;

TEST(ServerReplyWire, AnAnswerLandingInAnyByteOrderIsTakenWholeOrNotAtAll) {
  std::mt19937_64 rng(20261123);
  alignas(8) char slot[ring_slot_bytes(kMaxValue)];
  std::string copy;
  size_t refusals = 0, accepted_early = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const uint32_t seq = 5 + static_cast<uint32_t>(rng() % 1000);
    std::memset(slot, 0, sizeof(slot));
    fill_previous(rng, seq - 4, trial % 2 == 0, slot);
    const std::vector<char> a = build_answer(rng, seq);
    rpc::ResponseHeader h;
    std::memcpy(&h, a.data(), sizeof(h));
    Landing landing(rng, a, slot);
    for (;;) {
      const bool was_done = landing.done();
      if (read_answer(slot, seq, kMaxValue, &copy, landing)) {
        // Whatever had landed by then, what is handed out is the new answer, whole.
        ASSERT_EQ(copy.size(), sizeof(h) + h.value_len) << "trial " << trial;
        ASSERT_EQ(std::string(a.data(), copy.size()), copy) << "trial " << trial;
        accepted_early += !landing.done();
        break;
      }
      ASSERT_FALSE(was_done) << "trial " << trial << ": every byte landed and it was refused";
      refusals++;
      landing.land_one();
    }
  }
  EXPECT_GT(refusals, 5000u);  // the partial states were looked at, and refused
  // Bytes that already held the new values (zeros over zeros) let some answers be taken
  // before their last byte: still exactly the new answer.
  EXPECT_GT(accepted_early, 0u);
}

TEST(ServerReplyWire, WrongSeqOrLengthIsRefused) {
  std::mt19937_64 rng(7);
  alignas(8) char slot[ring_slot_bytes(kMaxValue)] = {};
  std::string copy;
  const std::vector<char> a = build_answer(rng, 9);
  std::memcpy(slot, a.data(), a.size());
  EXPECT_TRUE(read_answer(slot, 9, kMaxValue, &copy));
  EXPECT_FALSE(read_answer(slot, 13, kMaxValue, &copy));  // the next use of this slot
  // A length beyond the client's largest value is never believed.
  uint32_t huge = kMaxValue + 1;
  std::memcpy(slot + offsetof(rpc::ResponseHeader, value_len), &huge, sizeof(huge));
  EXPECT_FALSE(read_answer(slot, 9, kMaxValue, &copy));
  // One flipped value byte fails the checksum.
  std::memcpy(slot, a.data(), a.size());
  rpc::ResponseHeader h;
  std::memcpy(&h, a.data(), sizeof(h));
  if (h.value_len > 0) {
    slot[sizeof(h)] ^= 1;
    EXPECT_FALSE(read_answer(slot, 9, kMaxValue, &copy));
  }
}

}  // namespace
}  // namespace fabkv::server_reply
