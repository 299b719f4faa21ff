// Segregated-fit allocator for the store engine's heap, in the style of TLSF (Masmano et al.,
// "TLSF: a new dynamic memory allocator for real-time systems", 2004): free blocks sit in
// size-class lists indexed by a two-level bitmap, so allocation and free are O(1); blocks
// split on allocation and coalesce with both neighbours on free (boundary tags), so freed
// space is reused by items of any size.
//
// The heap manages a caller-provided range (part of the partition's mapping) and hands out
// offsets from its start, not pointers, so that index entries stay meaningful when the
// range is registered with a NIC and addressed by offset. Owner thread only.
//
// Block layout (offsets within a block; blocks are 16-byte aligned, sizes multiples of 16):
//   used:  [0] u64 size|flags   [8] payload (size - 8 bytes)
//   free:  [0] u64 size|flags   [8] u64 next free   [16] u64 prev free   [size-8] u64 size
// flags: bit 0 = this block is free, bit 1 = the previous block is free (its footer is valid).
// A used block of size 0 at the end stops coalescing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace fabkv::store {

class Heap {
 public:
  static constexpr uint64_t kNil = ~uint64_t{0};
  static constexpr uint64_t kMinBlock = 32;
  static constexpr uint64_t kBlockAlign = 16;

  Heap() = default;
  // `size` >= 64; the heap uses size rounded down to 16 bytes.
  Heap(std::byte* base, uint64_t size);

  // Returns the payload offset of at least `bytes` bytes (8-byte aligned, never 0), or kNil.
  uint64_t alloc(uint64_t bytes);
  void free(uint64_t payload);
  // Bytes of the block holding `payload`, header included.
  uint64_t block_size(uint64_t payload) const { return load(payload - 8) & ~kFlagMask; }

  std::byte* at(uint64_t payload) const { return base_ + payload; }
  uint64_t used_bytes() const { return used_; }
  uint64_t capacity() const { return size_; }

  // Walks every block and every free list; returns "" when consistent, else what is wrong.
  // For tests (O(heap size)).
  std::string check() const;

 private:
  static constexpr uint64_t kFree = 1, kPrevFree = 2, kFlagMask = 15;
  static constexpr int kSlBits = 4, kSlCount = 1 << kSlBits, kFlCount = 64;
  static constexpr uint64_t kSmallLimit = uint64_t{kSlCount} * kBlockAlign;  // 256

  uint64_t load(uint64_t off) const {
    uint64_t v;
    std::memcpy(&v, base_ + off, 8);
    return v;
  }
  void store(uint64_t off, uint64_t v) { std::memcpy(base_ + off, &v, 8); }
  static void mapping(uint64_t size, int& fl, int& sl);
  uint64_t find_fit(uint64_t need, uint64_t search) const;
  void insert_free(uint64_t block, uint64_t size);
  void remove_free(uint64_t block, uint64_t size);

  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t used_ = 0;
  uint64_t fl_bitmap_ = 0;
  uint32_t sl_bitmap_[kFlCount] = {};
  uint64_t heads_[kFlCount][kSlCount];
};

}  // namespace fabkv::store
