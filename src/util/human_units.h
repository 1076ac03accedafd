// Byte counts and durations as people read them, for reports and tables.
#pragma once

#include <string>

namespace hp {

// "12.34 GiB", "512.00 MiB", "0 B" (binary units, two decimals above bytes).
std::string human_bytes(double bytes);
// "1.230 s", "45.600 ms", "789.0 us".
std::string human_seconds(double s);

}  // namespace hp
