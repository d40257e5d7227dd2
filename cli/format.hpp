// Text formatting shared by the CLI commands: binary byte units, bars, tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace preflight::cli {

// "14.96 GiB", "512.0 MiB", "0 B": binary units, 3 significant-ish digits.
std::string format_bytes(std::int64_t bytes);
// "8,030,261,248"
std::string group_digits(std::int64_t v);
// "8.03 B", "124.4 M"
std::string format_count(std::int64_t v);
// "989.4 TFLOP/s", or "N/A" when unknown.
std::string format_rate(std::optional<double> v, const char* unit);
// A bar of `width` cells filled to fraction (clamped to [0, 1]).
std::string bar(double fraction, int width);

// A plain aligned table: header row, a units row, then data rows. Column 0 is left
// aligned, the rest right aligned.
struct Table {
    std::vector<std::string> header;
    std::vector<std::string> units;
    std::vector<std::vector<std::string>> rows;
    std::string render() const;
};

}  // namespace preflight::cli
