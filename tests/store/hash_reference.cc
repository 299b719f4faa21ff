// The shared library's XXH3_64bits, compiled apart from store/hash.h so that the test can
// compare hash_key against the library that computed every hash before hash_key was inlined.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace fabkv::store::testing {

uint64_t library_xxh3_64(const void* p, size_t n) { return XXH3_64bits(p, n); }

}  // namespace fabkv::store::testing
