// Memory regions with explicit remote access rights, and the descriptor a peer needs to reach
// one (address, length, key). Honours the provider's mr_mode: with FI_MR_VIRT_ADDR (shm,
// verbs) a peer addresses the region by virtual address, without it (tcp;ofi_rxm) by offset
// from 0; with FI_MR_PROV_KEY (verbs) the provider picks the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

struct fid_mr;

namespace fabkv::fabric {

class Fabric;

// What a peer may do to a region. Local use (send from it, receive or read into it) is always
// allowed. Atomics need read and write.
enum class Access : uint32_t {
  kLocalOnly = 0,
  kRemoteRead = 1,
  kRemoteWrite = 2,
  kRemoteReadWrite = 3,
};
inline bool allows_read(Access a) { return (static_cast<uint32_t>(a) & 1) != 0; }
inline bool allows_write(Access a) { return (static_cast<uint32_t>(a) & 2) != 0; }
const char* to_string(Access a);

// Everything a peer needs to address a registered region. `addr` is what goes into
// fi_read/fi_write's `addr` argument for offset 0 (a virtual address or 0).
struct RemoteRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t key = 0;
  Access access = Access::kLocalOnly;

  uint64_t at(uint64_t offset) const { return addr + offset; }
};

// A local buffer as the data path sees it: where, how long, and its MR descriptor.
struct LocalBuffer {
  void* addr = nullptr;
  size_t len = 0;
  void* desc = nullptr;

  LocalBuffer slice(size_t offset, size_t n) const {
    return {static_cast<char*>(addr) + offset, n, desc};
  }
};

class MemoryRegion {
 public:
  // Registers [buf, buf+len) with the fabric's domain. Throws FabricError.
  MemoryRegion(Fabric& fabric, void* buf, size_t len, Access access);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* data() const { return buf_; }
  size_t size() const { return len_; }
  void* desc() const;
  uint64_t key() const;
  Access access() const { return access_; }
  RemoteRegion remote() const;
  LocalBuffer local(size_t offset = 0) const {
    return {static_cast<char*>(buf_) + offset, len_ - offset, desc()};
  }
  LocalBuffer local(size_t offset, size_t n) const {
    return {static_cast<char*>(buf_) + offset, n, desc()};
  }

 private:
  void* buf_;
  size_t len_;
  Access access_;
  bool virt_addr_;
  fid_mr* mr_ = nullptr;
};

// Page-aligned zeroed memory plus its registration: the usual way to get a buffer.
class RegisteredBuffer {
 public:
  RegisteredBuffer(Fabric& fabric, size_t len, Access access);
  ~RegisteredBuffer();
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;

  char* data() const { return static_cast<char*>(mem_); }
  size_t size() const { return len_; }
  MemoryRegion& mr() { return *mr_; }
  const MemoryRegion& mr() const { return *mr_; }
  LocalBuffer local(size_t offset = 0) const { return mr_->local(offset); }
  LocalBuffer local(size_t offset, size_t n) const { return mr_->local(offset, n); }
  RemoteRegion remote() const { return mr_->remote(); }

 private:
  void* mem_ = nullptr;
  size_t len_ = 0;
  std::unique_ptr<MemoryRegion> mr_;
};

}  // namespace fabkv::fabric
