// Synthetic training data, generated from a seed on the device (and on the host for
// tests): each sequence walks the first `kSyntheticVocab` tokens with a fixed stride
// from a random start, so token t+1 is a function of token t (a learnable bigram task).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PREFLIGHT_HD __host__ __device__ __forceinline__
#else
#define PREFLIGHT_HD inline
#endif

namespace preflight::runtime {

inline constexpr std::int64_t kSyntheticVocab = 256;

// SplitMix64 (Steele et al. 2014): a stateless 64-bit mix.
PREFLIGHT_HD std::uint64_t mix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// What an emulated rank receives in place of a neighbouring pipeline stage's activations or
// gradients (it is alone): values of an initialised model's scale (GPT-2's init std, 0.02), new
// ones for each receive (`receive` counts them), never zeros (see cuda/comm.hpp EmulatedComm).
inline constexpr double kEmulatedReceiveStd = 0.02;
PREFLIGHT_HD std::uint64_t emulated_receive_seed(std::int64_t rank, std::uint64_t receive) {
    return mix64(0x5eedull ^ mix64(static_cast<std::uint64_t>(rank) * 1000003ull + receive));
}

// Token at position t (0..s, s+1 positions; labels are positions 1..s) of sequence
// `row` in micro-batch `micro_batch` of optimizer step `step`.
PREFLIGHT_HD std::int64_t synthetic_token(std::uint64_t seed, std::int64_t step, std::int64_t micro_batch,
                                          std::int64_t row, std::int64_t t, std::int64_t vocab) {
    const std::int64_t v = vocab < kSyntheticVocab ? vocab : kSyntheticVocab;
    const std::uint64_t key = mix64(seed ^ mix64(static_cast<std::uint64_t>(step) * 1000003ull +
                                                 static_cast<std::uint64_t>(micro_batch) * 7919ull +
                                                 static_cast<std::uint64_t>(row)));
    const std::int64_t start = static_cast<std::int64_t>(key % static_cast<std::uint64_t>(v));
    const std::int64_t stride = 1 + static_cast<std::int64_t>(mix64(seed) % 7);  // same for every sequence
    return (start + t * stride) % v;
}

// Uniform in (0, 1] and standard normal (Box-Muller) from a counter.
PREFLIGHT_HD double synthetic_uniform(std::uint64_t seed, std::uint64_t i) {
    return (static_cast<double>(mix64(seed ^ mix64(i)) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace preflight::runtime
