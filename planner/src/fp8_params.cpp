// Megatron-LM's --fp8-param-gather (Plan::fp8_param_gather): the decoder layers' GEMM weights are
// Transformer Engine fp8 parameters (transformer_block.py builds each layer under
// get_fp8_context(..., is_init=True), fp8_utils.py: te.pytorch.fp8_model_init) instead of bf16
// parameters with an fp8 cache beside them. Read at Megatron-LM d98e8a6 and TransformerEngine
// d0067d0 (August 2026):
//  - the distributed optimizer's parameter buffer holds them as uint8, 1 B per element
//    (param_and_grad_buffer.py group_params_for_buffers: param_dtype torch.uint8 for quantized
//    storage; the fp8 data is remapped into param_data by modify_underlying_storage), and the
//    all-gather of updated weights moves that buffer;
//  - the gradient buffer keeps the parameters' nominal bf16 dtype (grad_dtype = param.dtype, or
//    fp32 with grad_reduce_in_fp32), and the fp32 main weights and Adam moments stay as they are
//    (distrib_optimizer.py: shard_main_param from the fp8 parameter's high-precision init value);
//  - on Hopper an fp8 GEMM takes only the TN layout (TE utils.py is_non_tn_fp8_gemm_supported:
//    compute capability 10.x or >= 13 only), so the parameter keeps its fp8 transpose beside its
//    data (float8_tensor_storage.py update_usage / _create_transpose, made again in place after
//    each all-gather by tensor/utils.py post_all_gather_processing): 1 B + 1 B per element, the
//    two bytes PrecisionBytes::fp8_weight_copies already charges for the cache (module/base.py
//    quantize_weight keeps a bf16 weight's fp8 workspace with its transpose across micro-batches).
// So the flag takes away exactly the 16-bit weight of each layer GEMM weight (memory.cpp
// add_model_states: the GEMM weights that carry an fp8 copy). The LM head (a plain
// ColumnParallelLinear, gpt_model.py), the embedding and the norms stay bf16.
#include <string>

#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

namespace {
constexpr const char* kFlag = "--fp8-param-gather";
}  // namespace

void validate_fp8_param_gather(const Plan& p) {
    if (!p.fp8_param_gather) return;
    // TransformerConfig.__post_init__: "fp8_param must be used together with fp8 mode".
    if (p.precision != Precision::fp8_mixed)
        throw InputError(kFlag, "keeps the GEMM weights in fp8 and needs --precision fp8-mixed (Megatron-LM refuses "
                                "it without fp8: 'fp8_param must be used together with fp8 mode'), got --precision " +
                                    std::string(to_string(p.precision)));
    // arguments.py validate_args: "--fp8-param-gather only supported with distributed optimizer, torch
    // fsdp2, megatron fsdp, or inference mode".
    if (p.zero == zero_none)
        throw InputError(kFlag, "needs Megatron-LM's distributed optimizer, --zero 1 (validate_args refuses it "
                                "without: 'only supported with distributed optimizer, torch fsdp2, megatron fsdp'), "
                                "got --zero 0");
    if (p.zero >= zero_gradients)
        throw InputError(kFlag, "with --zero " + std::to_string(p.zero) + " (Megatron-FSDP) is not modelled: the "
                                "planner models fp8 parameters under the distributed optimizer, --zero 1");
    if (p.finetune != Finetune::full)
        throw InputError(kFlag, "with --finetune " + std::string(to_string(p.finetune)) +
                                    " is not modelled: Megatron-LM trains every weight (--finetune full)");
    if (p.offload != Offload::none)
        throw InputError(kFlag, "with --offload " + std::string(to_string(p.offload)) +
                                    " is not modelled: the planner models fp8 parameters with the optimizer on the GPU");
}

void check_fp8_param_gather_profile(const Plan& plan, const FrameworkProfile& profile) {
    if (!plan.fp8_param_gather || profile.fp8_param_gather) return;
    // `preflight run` executes Preflight's own runtime (profile preflight-runtime), whatever --framework says.
    const std::string remedy = profile.fp8_runtime_recipe
                                   ? "Preflight's runtime keeps bf16 weights beside their fp8 casts: drop it from run "
                                     "(memory and plan model it under --framework megatron)"
                                   : "use --framework megatron";
    throw InputError(kFlag, "is Megatron-LM's (Transformer Engine fp8 parameters under its distributed optimizer): "
                            "the " + profile.name + " profile does not run it; " + remedy);
}

}  // namespace preflight
