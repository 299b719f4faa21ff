// Public limits of the storage core. Everything a client or a wire format may depend on lives
// here; internal tuning knobs are in tuning.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabkv::store {

// Full keys up to 250 bytes (memcached's limit, docs/architecture.md "Storage"). The key length is
// stored in one byte of the item header (layout.h).
inline constexpr size_t kMaxKeySize = 250;

// Values: 64 KiB unless the server raises EngineOptions::max_value_size, which may go up to
// kMaxValueSizeLimit. The value length is stored in 32 bits of the item header.
inline constexpr size_t kDefaultMaxValueSize = size_t{64} << 10;
inline constexpr size_t kMaxValueSizeLimit = size_t{16} << 20;

static_assert(kMaxKeySize >= 1 && kMaxKeySize <= UINT8_MAX, "key length must fit in one byte");
static_assert(kDefaultMaxValueSize >= (size_t{64} << 10), "the issue asks for at least 64 KiB");
static_assert(kMaxValueSizeLimit >= (size_t{1} << 20), "values must be configurable to 1 MiB");
static_assert(kDefaultMaxValueSize <= kMaxValueSizeLimit);
static_assert(kMaxValueSizeLimit <= UINT32_MAX, "value length must fit in 32 bits");

}  // namespace fabkv::store
