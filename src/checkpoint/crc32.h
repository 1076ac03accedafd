// CRC-32 (IEEE 802.3, the zlib/PNG polynomial), for the checkpoint marker's file checksums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hp {

// crc32(data) continuing from `crc` (0 to start); crc32("123456789") == 0xCBF43926.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32(const void* data, size_t n) { return crc32_update(0, data, n); }

}  // namespace hp
