// Reading a framework's own training config into plan values: torchtitan job TOML, Megatron-LM
// arguments (launch script or arguments file), DeepSpeed ds_config JSON, nanotron YAML.
// This is the mapping half (pure, nlohmann/json only). The TOML and YAML text parsers live in
// planner/config_readers (target preflight::config_readers), which turns a file into a ConfigTree
// and calls these functions (docs/architecture.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "preflight/planner/memory.hpp"
#include "preflight/planner/model.hpp"
#include "preflight/planner/plan_schema.hpp"

namespace preflight {

enum class ConfigFormat { torchtitan, megatron, deepspeed, nanotron };
std::string_view to_string(ConfigFormat f);
std::optional<ConfigFormat> parse_config_format(std::string_view s);

// A config file's values as a tree: TOML tables and YAML mappings become JSON objects, arrays
// arrays, scalars JSON scalars (TOML/YAML integers -> integers, floats -> floats, booleans ->
// booleans, everything else -> strings). `lines` maps each key's JSON pointer
// ("/training/seq_len") to the 1-based line it was written on.
struct ConfigTree {
    std::string file;  // as the user named it, for messages
    nlohmann::json root = nlohmann::json::object();
    std::map<std::string, int> lines;
    int line_of(const std::string& pointer) const;  // 0 when unknown
};

// A key as a JSON pointer reference token: '~' -> "~0", '/' -> "~1" (RFC 6901, sec. 3); every
// ConfigTree reader builds its `lines` keys with it.
std::string json_pointer_token(std::string_view key);

// Where an imported value came from: file, key as the format writes it, line.
struct ConfigSpot {
    std::string file;
    std::string key;  // "[training] seq_len", "--micro-batch-size", "zero_optimization.stage", "parallelism.tp"
    int line = 0;     // 1-based; 0 when unknown
    // "train.toml:12: [training] seq_len" (the subject of an InputError about this value).
    std::string text() const;
};

// One plan field (plan_schema.hpp key, e.g. "seq", "zero", "recompute") the config sets.
struct ImportedField {
    std::string key;
    FieldValue value;  // of the field's FieldType: integer, real, toggle or the command-line name
    ConfigSpot from;
};

// What the user gave beside --from that an importer needs.
struct ImportContext {
    std::optional<std::int64_t> gpus;  // --gpus: torchtitan's -1 degrees, Megatron's dp = gpus / (tp pp cp)
    bool dp_given = false;             // --dp beside --from: the data-parallel degree is the flag's
    // --grad-acc (or plan's --gbs-tokens) beside --from: the batch is the flags', so a global
    // batch the config leaves open (Megatron's --global-batch-size $4) is not needed.
    bool batch_given = false;
    // --model beside --from: its decoder layers (torchtitan's virtual stages per rank need them).
    std::optional<std::int64_t> model_layers = std::nullopt;
    // Gives the catalog's models (`preflight models`, load_catalog_models): a Megatron-LM shape
    // whose tokenizer's size the script leaves open (a --tokenizer-model path it does not define)
    // takes the vocabulary of the catalog model with the same layers, said in a warning. Called
    // only for such a shape, at most once per import, so other configs never read the catalog.
    // Unset (or giving none): the vocabulary must come from --vocab-size, a tokenizer of known
    // size or --model.
    std::function<std::vector<ModelConfig>()> catalog = nullptr;
    // Reads a file a Megatron-LM launch script sources (`source FILE`, `. FILE`), FILE as the
    // script names it: its text, or InputError saying why it cannot be read. import_config_file
    // sets it (a relative FILE from the script's folder); empty: sourced files are not read (said).
    std::function<std::string(const std::string& path)> read_sourced = nullptr;
    // The launch script's folder, absolute (import_config_file sets it beside read_sourced; empty:
    // not known). The script is read as run from there: $PWD, and $0 its file name, for the
    // $(dirname "$0"), $(cd ... && pwd) and relative `source` lines that find the files beside it.
    std::string script_folder = {};
    // The launch script's command-line words ($1, $2 ...: `--from-arg`), all of them; nullopt: not
    // given, so its $1 ..., "$@" and $# are not known (a value read from them is exit 2 naming it).
    std::optional<std::vector<std::string>> script_args = std::nullopt;
};

struct ImportedConfig {
    ConfigFormat format = ConfigFormat::torchtitan;
    std::string file;
    std::optional<std::string> model;            // catalog name the config names ("llama-3-8b")
    std::optional<nlohmann::json> model_config;  // or a Hugging Face config.json built from it (Megatron's shape)
    std::optional<ConfigSpot> model_from;        // where the model came from
    // The framework sizes the model's context from the training sequence (torchtitan's
    // update_from_config): a catalog model's max_position_embeddings does not bound --seq.
    bool context_follows_seq = false;
    std::optional<std::int64_t> gpus;            // the world size the config implies (torchrun line, degrees)
    std::optional<std::int64_t> global_batch_sequences;  // the global batch the config names, when it names one
    std::optional<std::string> framework;        // the profile it implies: torchtitan, megatron, deepspeed, nanotron
    // The config compiles the loss (torchtitan [compile] enable with "loss" among its components, or
    // the older [training] compile): the CLI turns on --compiled-loss (MemoryOptions::compiled_loss).
    bool compiled_loss = false;
    // Megatron's communication overlaps (--tp-comm-overlap; the p2p overlap unless
    // --no-overlap-p2p-communication): the step
    // time options ThroughputOptions::tp_comm_overlap / p2p_overlap (EmitOptions writes them back).
    bool tp_comm_overlap = false;
    bool overlap_p2p_comm = false;
    // Whether the framework runs sequence parallelism whenever tp > 1 in this config (Megatron's
    // --sequence-parallel, torchtitan always, nanotron's tp_mode REDUCE_SCATTER); nullopt when the
    // config has no say (DeepSpeed). A --tp beside --from applies it at the new degree.
    std::optional<bool> sp_with_tp;
    // A ds_config's bucket settings (reduce_bucket_size, overlap_comm): the deepspeed profile's
    // FrameworkProfile::deepspeed_zero under --from. nullopt for the other formats.
    std::optional<DeepSpeedZeroSettings> deepspeed_zero;
    std::vector<ImportedField> fields;           // in file order; each field at most once
    std::vector<std::string> ignored;            // keys known and ignored on purpose ("[checkpoint] enable")
    std::vector<std::string> warnings;           // keys that change memory or speed that are not modelled
    // The field with this key (nullptr when the config does not set it).
    const ImportedField* field(std::string_view key) const;
};

// `plan` with every imported field written onto it (set_field; an InputError names the field's
// ConfigSpot). The importers emit plan_schema keys only: any other key is an InputError too.
Plan apply_imported_fields(const ImportedConfig& c, Plan plan);

// Each throws InputError whose subject is ConfigSpot::text() (file, key, line) for a value it
// cannot honour; a missing required piece names the file and the key it needs.
ImportedConfig import_torchtitan(const ConfigTree& tree, const ImportContext& context);
ImportedConfig import_deepspeed(const ConfigTree& tree, const ImportContext& context);
ImportedConfig import_nanotron(const ConfigTree& tree, const ImportContext& context);
// Megatron-LM arguments: a launch script (backslash continuations, bash arrays, NAME=value
// variables, a torchrun line) or an arguments file.
ImportedConfig import_megatron(std::string_view text, const std::string& file, const ImportContext& context);

// A JSON document as a ConfigTree, with the line of every key (InputError naming file and line
// for a syntax error).
ConfigTree json_config_tree(std::string_view text, const std::string& file);

// The format of a config from its text: '[section]' tables -> torchtitan, '--flag' arguments ->
// megatron, a JSON object -> deepspeed, 'key:' mappings -> nanotron. nullopt when none matches.
std::optional<ConfigFormat> detect_config_format(std::string_view text);

}  // namespace preflight
