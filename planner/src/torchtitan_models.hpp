// Internal to the torchtitan emitter and importer (emit.cpp, import_torchtitan.cpp): the entries of
// torchtitan's model registry (job_config.py Model.name and Model.flavor) that are catalog models,
// as torchtitan v0.2.2 defines them: models/llama3/__init__.py llama3_configs,
// models/qwen3/__init__.py qwen3_configs, models/gpt_oss/__init__.py gptoss_configs. Each flavor's
// shape is the catalog file's (widths, layers, heads, experts, vocabulary; gpt-oss's sinks, biases,
// clamped gate and 128-key window on every second layer too). Every one of their ModelArgs sets
// max_seq_len to the training seq_len (update_from_config), so the context follows the sequence.
#pragma once

#include <cstdint>
#include <string_view>

namespace preflight::torchtitan_models {

struct Entry {
    std::string_view name, flavor, catalog;
    std::int64_t layers;  // the flavor's n_layers
};

inline constexpr Entry kEntries[] = {
    {"llama3", "8B", "llama-3-8b", 32},       {"llama3", "70B", "llama-3-70b", 80},
    {"llama3", "405B", "llama-3.1-405b", 126}, {"qwen3", "8B", "qwen3-8b", 36},
    {"qwen3", "30B-A3B", "qwen3-30b-a3b", 48}, {"gpt_oss", "20b", "gpt-oss-20b", 24},
    {"gpt_oss", "120b", "gpt-oss-120b", 36},
};

// The registry entry of a catalog model (nullptr when torchtitan has none).
inline const Entry* of_catalog(std::string_view catalog_name) {
    for (const Entry& e : kEntries)
        if (e.catalog == catalog_name) return &e;
    return nullptr;
}

}  // namespace preflight::torchtitan_models
