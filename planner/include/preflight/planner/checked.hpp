// Checked 64-bit integer arithmetic for byte, FLOP and element counts: an overflow
// is an InputError naming the input that caused it (exit 2), never a wrapped number.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "preflight/planner/error.hpp"

namespace preflight {

namespace detail {
[[noreturn]] inline void overflow(std::string_view subject, const char* op, std::int64_t a, std::int64_t b) {
    throw InputError(std::string(subject), std::string("too large: ") + std::to_string(a) + " " + op + " " + std::to_string(b) +
                                  " overflows a 64-bit count (limit 9,223,372,036,854,775,807)");
}
}  // namespace detail

// a * b; throws InputError(subject, ...) when the product does not fit in int64.
// (A string_view: a literal subject costs no allocation on the hot path.)
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view subject) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) detail::overflow(subject, "x", a, b);
    return r;
}
// The same, with a subject built only when the product overflows.
template <std::invocable SubjectFn>
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, SubjectFn&& subject) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) detail::overflow(subject(), "x", a, b);
    return r;
}

// a + b; throws InputError(subject, ...) when the sum does not fit in int64.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view subject) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) detail::overflow(subject, "+", a, b);
    return r;
}
template <std::invocable SubjectFn>
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, SubjectFn&& subject) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) detail::overflow(subject(), "+", a, b);
    return r;
}

// v, when finite; else an InputError naming the figure (a NaN or infinity is never printed).
inline double require_finite(double v, const std::string& what) {
    if (!std::isfinite(v)) throw InputError(what, "is not a finite number (" + std::to_string(v) + "): an input is out of range");
    return v;
}

}  // namespace preflight
