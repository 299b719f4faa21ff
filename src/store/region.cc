#include "store/region.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/log.h"

namespace fabkv::store {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// Say once per process, not once per partition: a server with 16 partitions would otherwise
// print the same line 16 times.
void log_no_huge_pages(int err) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  spdlog::info(
      "store: huge pages not available (MAP_HUGETLB: {}); using 4 KiB pages with "
      "transparent huge page advice",
      std::strerror(err));
}
}  // namespace

PartitionMemory::PartitionMemory(size_t bytes, bool huge_pages, bool prefault) {
  if (bytes == 0) throw std::runtime_error("store: partition memory size must be > 0");
  const int populate = prefault ? MAP_POPULATE : 0;
  void* p = MAP_FAILED;
  if (huge_pages) {
    size_t rounded = (bytes + kHugePage - 1) & ~(kHugePage - 1);
    p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | populate, -1, 0);
    if (p != MAP_FAILED) {
      mapped_ = rounded;
      huge_ = true;
    } else {
      log_no_huge_pages(errno);
    }
  }
  if (p == MAP_FAILED) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw std::runtime_error("store: mmap of " + std::to_string(bytes) +
                               " bytes failed: " + std::strerror(errno));
    }
    mapped_ = bytes;
    // Advice only; THP may be disabled, which is fine.
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
    if (prefault && ::madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
      // Kernels before 5.14 lack MADV_POPULATE_WRITE: touch every page instead.
      auto* bytes_p = static_cast<volatile char*>(p);
      for (size_t off = 0; off < bytes; off += 4096) bytes_p[off] = 0;
    }
  }
  base_ = static_cast<std::byte*>(p);
  size_ = bytes;
}

PartitionMemory::~PartitionMemory() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
}

}  // namespace fabkv::store
