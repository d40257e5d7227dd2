// Text formatting shared by the CLI commands: binary byte units, bars, tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "preflight/planner/format.hpp"

namespace preflight::cli {

// Byte and count formatting is the planner's, shared with the explorer.
using preflight::format_bytes;
using preflight::format_count;
using preflight::format_real;
using preflight::group_digits;
// "989.4 TFLOP/s", or "N/A" when unknown.
std::string format_rate(std::optional<double> v, const char* unit);
// A non-negative figure of any size: digits grouped when it rounds to an integer of at least
// 1 below 10^15 ("1,234"), else three significant digits ("8.4e-05", "1.24e+18"); "N/A" when it
// is not finite. Never an integer cast that could wrap.
std::string format_figure(double v);
// A count of floating-point operations in the largest of GFLOP, TFLOP, PFLOP, EFLOP that keeps it
// at 1 or more, one digit after the point ("6.1 TFLOP", "215.9 PFLOP"); smaller counts as a
// figure ("512 FLOP"); "N/A" when it is not finite.
std::string format_flops(double flops);
// A step time: "1.234 s" from one second up, "12.3 ms" below.
std::string format_seconds(double s);
// A wall time in the largest of s, h, days that reads well ("42 s", "3.5 h", "1389.1 days"), three
// significant digits beyond a million days.
std::string format_duration(double s);
// v with `digits` digits after the point ("%.*f"): "12.35".
std::string fixed(double v, int digits);
// A bar of `width` cells filled to fraction (clamped to [0, 1]).
std::string bar(double fraction, int width);
// The comment line under a table whose MFU or HFU passes 100 % with attention counted in full
// (the PaLM/Megatron convention counts the s^2 work a causal kernel skips, so a step near the
// peak at long sequences reads above it); "" when max_utilisation <= 1 or attention is counted
// causal.
std::string mfu_above_peak_note(double max_utilisation, bool attention_counted_full);

// A batch's distance from its target (a fraction) with its sign, "+1.58 %"; under 0.005 % (a huge
// target) "+<0.01 %" or "-<0.01 %", never "-0.00 %".
std::string signed_batch_error(double e);

// "1 GPU", "8 GPUs", "1,024 plans": a count with digit grouping and its noun, singular at 1.
std::string count_of(std::int64_t n, const char* singular, const char* plural);
// `word` as one POSIX shell word: unchanged when it holds only [A-Za-z0-9_./:=@%+,-], else in
// single quotes (each ' written '\''), so a printed command line pastes as it reads.
std::string shell_word(const std::string& word);

// A plain aligned table: header row, a units row, then data rows. Column 0 is left
// aligned, the rest right aligned.
struct Table {
    std::vector<std::string> header;
    std::vector<std::string> units;
    std::vector<std::vector<std::string>> rows;
    bool text_last = false;  // the last column is prose (a reason): aligned left, never padded
    std::string render() const;
};

}  // namespace preflight::cli
