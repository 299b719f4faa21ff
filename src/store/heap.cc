#include "store/heap.h"

#include <bit>
#include <stdexcept>

namespace fabkv::store {

Heap::Heap(std::byte* base, uint64_t size) : base_(base), size_(size & ~(kBlockAlign - 1)) {
  if (size_ < 64) throw std::runtime_error("store: heap smaller than 64 bytes");
  for (auto& row : heads_) {
    for (auto& h : row) h = kNil;
  }
  // One free block over everything but the 16 bytes of the end marker.
  const uint64_t first = size_ - kBlockAlign;
  store(0, first | kFree);
  store(first - 8, first);
  store(first, 0 | kPrevFree);  // end marker: used, size 0
  insert_free(0, first);
}

void Heap::mapping(uint64_t size, int& fl, int& sl) {
  if (size < kSmallLimit) {
    fl = 0;
    sl = static_cast<int>(size / kBlockAlign);
  } else {
    const int msb = 63 - std::countl_zero(size);
    fl = msb - 7;  // 256 = 2^8 -> fl 1
    sl = static_cast<int>((size >> (msb - kSlBits)) & (kSlCount - 1));
  }
}

void Heap::insert_free(uint64_t block, uint64_t size) {
  int fl, sl;
  mapping(size, fl, sl);
  const uint64_t next = heads_[fl][sl];
  store(block + 8, next);
  store(block + 16, kNil);
  if (next != kNil) store(next + 16, block);
  heads_[fl][sl] = block;
  sl_bitmap_[fl] |= 1u << sl;
  fl_bitmap_ |= uint64_t{1} << fl;
}

void Heap::remove_free(uint64_t block, uint64_t size) {
  int fl, sl;
  mapping(size, fl, sl);
  const uint64_t next = load(block + 8);
  const uint64_t prev = load(block + 16);
  if (prev != kNil) {
    store(prev + 8, next);
  } else {
    heads_[fl][sl] = next;
  }
  if (next != kNil) store(next + 16, prev);
  if (heads_[fl][sl] == kNil) {
    sl_bitmap_[fl] &= ~(1u << sl);
    if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(uint64_t{1} << fl);
  }
}

uint64_t Heap::find_fit(uint64_t need, uint64_t search) const {
  int fl, sl;
  mapping(search, fl, sl);
  if (fl < kFlCount) {
    uint32_t sl_map = sl_bitmap_[fl] & (~0u << sl);
    uint64_t fl_map = fl + 1 < kFlCount ? fl_bitmap_ & (~uint64_t{0} << (fl + 1)) : 0;
    if (sl_map != 0) return heads_[fl][std::countr_zero(sl_map)];
    if (fl_map != 0) {
      fl = std::countr_zero(fl_map);
      return heads_[fl][std::countr_zero(sl_bitmap_[fl])];
    }
  }
  // Nothing in the classes that surely fit. The request's own class may still hold a block
  // big enough (it spans sizes up to 1/16 above the request): first fit in that one list, so
  // that a heap with one large free block can hand out nearly all of it.
  mapping(need, fl, sl);
  for (uint64_t b = heads_[fl][sl]; b != kNil; b = load(b + 8)) {
    if ((load(b) & ~kFlagMask) >= need) return b;
  }
  return kNil;
}

uint64_t Heap::alloc(uint64_t bytes) {
  if (bytes > size_) return kNil;
  uint64_t need = (bytes + 8 + kBlockAlign - 1) & ~(kBlockAlign - 1);
  if (need < kMinBlock) need = kMinBlock;
  // Round the request up to the next class boundary so that any block in the class found is
  // big enough (TLSF's mapping_search); small classes are exact sizes already.
  uint64_t search = need;
  if (search >= kSmallLimit) {
    const int msb = 63 - std::countl_zero(search);
    search += (uint64_t{1} << (msb - kSlBits)) - 1;
  }
  const uint64_t block = find_fit(need, search);
  if (block == kNil) return kNil;
  const uint64_t word = load(block);
  uint64_t size = word & ~kFlagMask;
  remove_free(block, size);
  if (size - need >= kMinBlock) {
    // Split: the remainder stays free; the block after it keeps its prev-free bit.
    const uint64_t rest = block + need;
    const uint64_t rest_size = size - need;
    store(rest, rest_size | kFree);
    store(rest + rest_size - 8, rest_size);
    insert_free(rest, rest_size);
    size = need;
  } else {
    const uint64_t next = block + size;
    store(next, load(next) & ~kPrevFree);
  }
  store(block, size | (word & kPrevFree));
  used_ += size;
  return block + 8;
}

void Heap::free(uint64_t payload) {
  uint64_t block = payload - 8;
  const uint64_t word = load(block);
  uint64_t size = word & ~kFlagMask;
  used_ -= size;
  uint64_t prev_bits = word & kPrevFree;
  if (prev_bits != 0) {
    const uint64_t prev_size = load(block - 8);
    const uint64_t prev = block - prev_size;
    remove_free(prev, prev_size);
    block = prev;
    size += prev_size;
    prev_bits = load(prev) & kPrevFree;  // 0: two free blocks are never neighbours
  }
  const uint64_t next = block + size;
  const uint64_t next_word = load(next);
  if ((next_word & kFree) != 0) {
    const uint64_t next_size = next_word & ~kFlagMask;
    remove_free(next, next_size);
    size += next_size;
  }
  store(block, size | kFree | prev_bits);
  store(block + size - 8, size);
  const uint64_t after = block + size;
  store(after, load(after) | kPrevFree);
  insert_free(block, size);
}

std::string Heap::check() const {
  uint64_t off = 0, free_bytes = 0, used_bytes = 0, free_blocks = 0;
  bool prev_free = false;
  for (;;) {
    const uint64_t word = load(off);
    const uint64_t size = word & ~kFlagMask;
    if (((word & kPrevFree) != 0) != prev_free)
      return "prev-free bit wrong at " + std::to_string(off);
    if (size == 0) {
      if (off != size_ - kBlockAlign)
        return "size-0 block before the end at " + std::to_string(off);
      break;
    }
    if (size % kBlockAlign != 0 || size < kMinBlock || off + size > size_ - kBlockAlign) {
      return "bad block size at " + std::to_string(off);
    }
    const bool is_free = (word & kFree) != 0;
    if (is_free) {
      if (prev_free) return "two free neighbours at " + std::to_string(off);
      if (load(off + size - 8) != size) return "bad footer at " + std::to_string(off);
      free_bytes += size;
      ++free_blocks;
    } else {
      used_bytes += size;
    }
    prev_free = is_free;
    off += size;
  }
  if (used_bytes != used_) return "used bytes " + std::to_string(used_bytes) + " != counter";
  uint64_t listed_bytes = 0, listed_blocks = 0;
  for (int fl = 0; fl < kFlCount; ++fl) {
    for (int sl = 0; sl < kSlCount; ++sl) {
      const bool bit = (sl_bitmap_[fl] >> sl) & 1;
      if (bit != (heads_[fl][sl] != kNil)) return "bitmap disagrees with list";
      uint64_t prev = kNil;
      for (uint64_t b = heads_[fl][sl]; b != kNil; b = load(b + 8)) {
        if (load(b + 16) != prev) return "broken prev link";
        const uint64_t size = load(b) & ~kFlagMask;
        int f, s;
        mapping(size, f, s);
        if (f != fl || s != sl) return "block in the wrong class";
        listed_bytes += size;
        ++listed_blocks;
        prev = b;
      }
    }
    if (((fl_bitmap_ >> fl) & 1) != (sl_bitmap_[fl] != 0)) return "first-level bitmap wrong";
  }
  if (listed_bytes != free_bytes || listed_blocks != free_blocks) return "free lists miss blocks";
  return "";
}

}  // namespace fabkv::store
