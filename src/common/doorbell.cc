#include "common/doorbell.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace fabkv {

namespace {

// glibc wraps these only from 2.36 on.
int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_getfd(int pidfd, int fd) {
  return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
}

std::string errno_text(const char* what) { return fmt::format("{}: {}", what, strerror(errno)); }

}  // namespace

DoorbellServer::DoorbellServer(uint32_t workers) {
  if (workers > kDoorbellMaxWorkers)
    throw std::system_error(EINVAL, std::generic_category(), "doorbell: too many workers");
  page_fd_ = memfd_create("fabkv-doorbell", MFD_CLOEXEC);
  if (page_fd_ < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  void* p = MAP_FAILED;
  if (ftruncate(page_fd_, kDoorbellPageBytes) == 0)
    p = mmap(nullptr, kDoorbellPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(page_fd_);
    throw std::system_error(err, std::generic_category(), "doorbell page");
  }
  page_ = new (p) DoorbellPage{};
  page_->magic = kDoorbellMagic;
  page_->version = kDoorbellVersion;
  page_->workers = static_cast<uint16_t>(workers);
  std::random_device rd;
  page_->nonce = (uint64_t{rd()} << 32) | rd();
  for (uint32_t w = 0; w < workers; ++w) {
    // Non-blocking: the worker drains it before each sleep with a read that must not wait.
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      release();
      throw std::system_error(err, std::generic_category(), "eventfd");
    }
    bells_.push_back(fd);
  }
}

DoorbellServer::~DoorbellServer() { release(); }

void DoorbellServer::release() {
  for (int fd : bells_) close(fd);
  bells_.clear();
  if (page_ != nullptr) munmap(page_, kDoorbellPageBytes);
  page_ = nullptr;
  if (page_fd_ >= 0) close(page_fd_);
  page_fd_ = -1;
}

nlohmann::json DoorbellServer::layout() const {
  return {{"pid", getpid()}, {"page", page_fd_}, {"bells", bells_}, {"nonce", page_->nonce}};
}

std::unique_ptr<DoorbellClient> DoorbellClient::open(const nlohmann::json& layout,
                                                     std::string* why) {
  std::unique_ptr<DoorbellClient> c(new DoorbellClient);
  int pidfd = -1;
  try {
    const pid_t pid = layout.at("pid").get<pid_t>();
    const int page = layout.at("page").get<int>();
    const std::vector<int> bells = layout.at("bells").get<std::vector<int>>();
    const uint64_t nonce = layout.at("nonce").get<uint64_t>();
    if (bells.empty() || bells.size() > kDoorbellMaxWorkers) {
      *why = "a doorbell of no or too many workers";
      return nullptr;
    }
    pidfd = pidfd_open(pid);
    if (pidfd < 0) {
      *why = errno_text("pidfd_open");  // another host, or another pid namespace
      return nullptr;
    }
    // Only a regular file of a page's size is mapped: the pid may be another process's.
    const int fd = pidfd_getfd(pidfd, page);
    struct stat st {};
    void* p = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size == static_cast<off_t>(kDoorbellPageBytes))
      p = mmap(nullptr, kDoorbellPageBytes, PROT_READ, MAP_SHARED, fd, 0);
    *why = fd < 0 ? errno_text("pidfd_getfd") : "not the server's doorbell page";
    if (fd >= 0) close(fd);  // the mapping stays
    if (p == MAP_FAILED) {
      close(pidfd);
      return nullptr;
    }
    c->page_ = static_cast<const DoorbellPage*>(p);
    if (c->page_->magic != kDoorbellMagic || c->page_->version != kDoorbellVersion ||
        c->page_->nonce != nonce || c->page_->workers != bells.size()) {
      close(pidfd);
      return nullptr;  // the destructor unmaps it
    }
    for (int b : bells) {
      const int fd = pidfd_getfd(pidfd, b);
      if (fd < 0) {
        *why = errno_text("pidfd_getfd");
        close(pidfd);
        return nullptr;
      }
      c->bells_.push_back(fd);
    }
  } catch (const nlohmann::json::exception& e) {
    *why = std::string("unusable doorbell layout: ") + e.what();
    if (pidfd >= 0) close(pidfd);
    return nullptr;
  }
  close(pidfd);
  why->clear();
  return c;
}

DoorbellClient::~DoorbellClient() {
  for (int fd : bells_) close(fd);
  if (page_ != nullptr) munmap(const_cast<DoorbellPage*>(page_), kDoorbellPageBytes);
}

void DoorbellClient::ring_now(uint32_t w) {
  const uint64_t one = 1;
  // A full counter (2^64-2 rings unread) or an error leaves the worker's bounded sleep as the
  // backstop.
  [[maybe_unused]] ssize_t n = write(bells_[w], &one, sizeof one);
  rings_++;
}

}  // namespace fabkv
