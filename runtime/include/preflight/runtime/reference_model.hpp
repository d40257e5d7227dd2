// Whole-model CPU reference in double: the forward pass, loss and backward pass of a
// step program's model (Llama family: RMSNorm, RoPE, GQA, SwiGLU; GPT-2 family:
// LayerNorm, learned positions, GeLU, biases, tied embeddings), composed from the
// per-kernel references (reference.hpp) in the same order as the program's ops and on
// the same flat parameter layout (Program::params offsets). It defines the gradients
// the runtime must produce: CPU tests check it against central finite differences, GPU
// tests check the runtime's gradients after one step against it.
#pragma once

#include <cstdint>
#include <vector>

#include "preflight/runtime/program.hpp"

namespace preflight::runtime::ref {

// One micro-batch of token ids and next-token labels, both [b, s] row-major.
struct TokenBatch {
    std::vector<std::int64_t> tokens, labels;
};

// The micro-batches the device generates for the program's rank at optimizer step `step`
// (1-based) with `seed` (synthetic.hpp: labels are the tokens shifted by one position;
// Program::data_micro_batch: rank r's are the global micro-batches r * grad_acc + 1 ...).
std::vector<TokenBatch> synthetic_batches(const Program& program, std::uint64_t seed, std::int64_t step);

// Mean next-token cross-entropy over every token of every micro-batch (the loss the
// runtime reports: summed per-token losses / (rows * micro-batches)). `params` holds
// Program::param_elements values in the flat layout. When `grads` is non-null it is
// resized to param_elements, zeroed, and receives dLoss/dparams (padding stays 0; a tied
// head's gradient lands on the word embedding, as on the device).
double model_loss(const Program& program, const std::vector<double>& params, const std::vector<TokenBatch>& batches,
                  std::vector<double>* grads);

// Deterministic parameters for CPU tests: matrices ~ N(0, std) from `seed` (padding rows of
// the embedding / head stay 0), norm weights 1 + N(0, std), biases N(0, std).
std::vector<double> random_params(const Program& program, std::uint64_t seed, double std_dev);

}  // namespace preflight::runtime::ref
