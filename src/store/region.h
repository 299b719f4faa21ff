// One partition's memory: a single anonymous mapping made at set-up, never resized, so that
// a later issue can register it with the NIC once.
#pragma once

#include <cstddef>

#include "store/engine.h"

namespace fabkv::store {

class PartitionMemory {
 public:
  // Maps `bytes` (rounded up to 2 MiB when huge pages are used). Tries MAP_HUGETLB when
  // `huge_pages`, falls back to normal pages with madvise(MADV_HUGEPAGE) and logs that huge
  // pages were not available. Throws std::runtime_error when the mapping fails.
  PartitionMemory(size_t bytes, bool huge_pages, bool prefault);
  ~PartitionMemory();
  PartitionMemory(const PartitionMemory&) = delete;
  PartitionMemory& operator=(const PartitionMemory&) = delete;

  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  bool huge_pages() const { return huge_; }
  EngineMemory region() const { return EngineMemory{base_, size_, huge_}; }

 private:
  std::byte* base_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
  bool huge_ = false;
};

}  // namespace fabkv::store
