// Number formatting shared by every front end (CLI tables, explorer labels, reports):
// one definition of how a byte count or a count of things is written for people.
#pragma once

#include <cstdint>
#include <string>

namespace preflight {

// "14.96 GiB", "512.0 MiB", "0 B": binary units, two decimals below 100, one above.
std::string format_bytes(std::int64_t bytes);
// "8,030,261,248"
std::string group_digits(std::int64_t v);
// "8.03 B", "124.4 M": decimal magnitudes for parameter and token counts.
std::string format_count(std::int64_t v);
// "1.5", "0.001", "1e+308": a value as a message quotes it (shortest %g form, 6 significant digits).
std::string format_real(double v);
// "a wait 41 % likely", "a wait under 1 % likely", "a wait over 99 % likely": the host-pace
// model's probability of a wait (memory.hpp MemoryReport::host_wait_probability), whole percent.
std::string format_wait_odds(double wait_probability);

}  // namespace preflight
