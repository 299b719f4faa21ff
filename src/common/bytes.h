// Loads and stores of plain values at any address (wire formats, memory a peer writes): a
// memcpy, which compilers turn into one unaligned move, without the undefined behaviour of a
// cast.
#pragma once

#include <cstring>
#include <type_traits>

namespace fabkv::bytes {

template <class T>
inline T load(const void* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
inline void store(void* p, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace fabkv::bytes
