// Export a plan as a framework configuration.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/gpu.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan.hpp"

namespace preflight {

enum class EmitFormat { deepspeed, megatron, torchtitan, preflight, peft, nanotron };
std::string_view to_string(EmitFormat f);
std::optional<EmitFormat> parse_emit_format(std::string_view s);

// What the plan was judged under beyond the Plan itself, which the artifact must reproduce.
struct EmitOptions {
    bool compiled_loss = false;  // memory judged with a torch.compile'd loss (MemoryOptions::compiled_loss)
    // Step time judged with Megatron's communication overlaps (ThroughputOptions::tp_comm_overlap,
    // p2p_overlap): the Megatron arguments carry them, other formats warn.
    bool tp_comm_overlap = false;
    bool overlap_p2p_comm = false;
    // GPUs per node (GpuSpec::gpus_per_node; emit_plan sets it from the GPU): the Megatron launch
    // line's --nnodes x --nproc-per-node. 0: every GPU on one node.
    std::int64_t gpus_per_node = 0;
    // The framework profile the plan was ranked under: the preflight plan document records it.
    std::string framework;
    // What the preflight plan document records as its model and GPU, so that `--plan` loads the
    // same ones: the --model / --gpu as given (a catalog name, or the file the user named, whose
    // display name may be a catalog name's). Empty: ModelConfig::name / GpuSpec::name.
    std::string model_reference, gpu_reference;
    // A model shape a --from config spells out (no file or catalog entry to name): the preflight
    // plan document carries it as "model_config" (Hugging Face config.json form), which --plan reads.
    std::optional<nlohmann::json> model_config;
    // The bucket settings the deepspeed profile judged the plan with (a --from ds_config's, or the
    // defaults): the ds_config carries them.
    DeepSpeedZeroSettings deepspeed_zero;
};

struct Emitted {
    std::string text;                   // the artifact (JSON, arguments, TOML), ends with a newline
    std::vector<std::string> warnings;  // where the framework cannot express the plan exactly
};

// DeepSpeed ds_config: train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps, zero_optimization.stage, bf16/fp16, activation_checkpointing.
nlohmann::json deepspeed_config(const Plan& plan, std::vector<std::string>* warnings = nullptr,
                                const DeepSpeedZeroSettings& buckets = {});
// Megatron-LM pretrain_gpt.py arguments, one flag per line, after a torchrun launch line that
// starts the plan's world size (so `--from` reads dp back), with '#' comments.
std::string megatron_arguments(const ModelConfig& model, const Plan& plan, std::vector<std::string>* warnings = nullptr,
                               const EmitOptions& options = {});
// torchtitan job-config TOML fragment ([training], [parallelism], [activation_checkpoint], ...).
std::string torchtitan_toml(const ModelConfig& model, const Plan& plan, std::vector<std::string>* warnings = nullptr,
                           const EmitOptions& options = {});
// nanotron YAML fragment (model.dtype and model_config, parallelism, tokens, optimizer), the keys
// of src/nanotron/config/config.py; warnings for what nanotron cannot run (fp8, offload, ZeRO-2/3,
// interleaved schedules, LoRA, non-Llama models).
std::string nanotron_yaml(const ModelConfig& model, const Plan& plan, std::vector<std::string>* warnings = nullptr);
// The plan document `preflight run` reads: plan_to_json's object (readable by
// plan_from_json) plus schema_version, the model and GPU (EmitOptions::model_reference /
// gpu_reference, else their names), and the framework profile it was ranked under
// (EmitOptions::framework; left out when empty).
nlohmann::json preflight_plan_document(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                       const EmitOptions& options = {});

// Hugging Face PEFT LoraConfig (+ BitsAndBytesConfig for QLoRA) and the Trainer's batch,
// precision and gradient-checkpointing settings, as one JSON object. Fine-tuning plans only.
nlohmann::json peft_config(const ModelConfig& model, const Plan& plan, std::vector<std::string>* warnings = nullptr);

// With options.compiled_loss, torchtitan's TOML turns training.compile on (it compiles the loss
// with the model); the other formats warn that their loss keeps more than was planned.
Emitted emit_plan(EmitFormat format, const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                  const EmitOptions& options = {});

}  // namespace preflight
