#include "fabric/memory_region.h"

#include <sys/mman.h>

#include <new>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "fabric/error.h"
#include "fabric/fabric.h"

namespace fabkv::fabric {

const char* to_string(Access a) {
  switch (a) {
    case Access::kLocalOnly: return "local-only";
    case Access::kRemoteRead: return "read-only";
    case Access::kRemoteWrite: return "write-only";
    case Access::kRemoteReadWrite: return "read-write";
  }
  return "?";
}

MemoryRegion::MemoryRegion(Fabric& fabric, void* buf, size_t len, Access access)
    : buf_(buf), len_(len), access_(access), virt_addr_(fabric.virt_addr()) {
  uint64_t flags = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
  if (allows_read(access)) flags |= FI_REMOTE_READ;
  if (allows_write(access)) flags |= FI_REMOTE_WRITE;
  uint64_t requested_key = fabric.prov_key() ? 0 : fabric.next_mr_key();
  check(fi_mr_reg(fabric.domain(), buf, len, flags, 0, requested_key, 0, &mr_, nullptr),
        "fi_mr_reg");
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) fi_close(&mr_->fid);
}

void* MemoryRegion::desc() const { return fi_mr_desc(mr_); }
uint64_t MemoryRegion::key() const { return fi_mr_key(mr_); }

RemoteRegion MemoryRegion::remote() const {
  return {virt_addr_ ? reinterpret_cast<uint64_t>(buf_) : 0, len_, key(), access_};
}

RegisteredBuffer::RegisteredBuffer(Fabric& fabric, size_t len, Access access) : len_(len) {
  // mmap'd memory is page-aligned, zeroed and backed (FI_MR_ALLOCATED) once touched; touch it
  // now so registration pins real pages.
  mem_ = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                -1, 0);
  if (mem_ == MAP_FAILED) throw std::bad_alloc();
  mr_ = std::make_unique<MemoryRegion>(fabric, mem_, len, access);
}

RegisteredBuffer::~RegisteredBuffer() {
  mr_.reset();
  if (mem_ != nullptr) ::munmap(mem_, len_);
}

}  // namespace fabkv::fabric
