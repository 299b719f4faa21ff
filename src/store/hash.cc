#include "store/hash.h"

#include <xxhash.h>

namespace fabkv::store {

KeyHash hash_key(std::string_view key) { return KeyHash{XXH3_64bits(key.data(), key.size())}; }

}  // namespace fabkv::store
