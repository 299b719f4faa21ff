#include "common/cpu.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

namespace fabkv {

int online_cores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

bool pin_this_thread(int core) {
  if (core < 0) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % online_cores(), &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace fabkv
