// Megatron-LM's defaults for what `--emit megatron` leaves out and `--from` a Megatron-LM script
// assumes when a flag is absent (TransformerConfig and arguments.py, read at d98e8a6).
#pragma once

namespace preflight::megatron_defaults {

// TransformerConfig.layernorm_epsilon, --norm-epsilon (Megatron-DeepSpeed's --layernorm-epsilon has
// the same default): every LayerNorm and RMSNorm of the model.
inline constexpr double kNormEpsilon = 1e-5;

}  // namespace preflight::megatron_defaults
