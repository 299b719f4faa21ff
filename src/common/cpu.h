// CPU placement: server and load generators run on separate cores (the brief's rule for
// every measurement), so every executable can pin itself or a thread.
#pragma once

namespace fabkv {

int online_cores();

// Pins the calling thread to `core` (taken modulo the online core count). A negative core
// means "do not pin". Returns false and leaves the thread unpinned when the kernel refuses.
bool pin_this_thread(int core);

}  // namespace fabkv
