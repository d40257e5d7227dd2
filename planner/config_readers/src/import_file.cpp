// A config file of any of the four formats -> plan values: read, detect, parse, import.
#include "preflight/config_readers/config_readers.hpp"

#include <filesystem>

#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight {

namespace {

// torchtitan's configurations in Python (a function returning Trainer.Config, as its
// config_registry.py modules and torchtitan_recipes hold them): code, which no reader here runs.
bool torchtitan_python_config(std::string_view text) {
    return text.find("Trainer.Config") != std::string_view::npos && text.find("def ") != std::string_view::npos;
}

}  // namespace

ImportedConfig import_config_text(std::string_view text, const std::string& file, std::optional<ConfigFormat> forced,
                                  const ImportContext& context) {
    if ((!forced || *forced == ConfigFormat::torchtitan) && torchtitan_python_config(text))
        throw InputError(file, "a torchtitan configuration in Python (functions returning Trainer.Config) is code, "
                               "which --from does not run: give its plan as flags with --framework torchtitan "
                               "(--dp from data_parallel_shard_degree, --tp, --pp, --cp, --seq from "
                               "max_context_length, --mbs from num_tokens_per_microbatch_per_dp_rank / seq), or "
                               "a torchtitan TOML job file");
    const std::optional<ConfigFormat> format = forced ? forced : detect_config_format(text);
    if (!format)
        throw InputError(file, "cannot tell the config's format (none of a torchtitan TOML '[section]', Megatron "
                               "'--flag' arguments, a DeepSpeed JSON object or nanotron YAML 'key:' lines); name it "
                               "with --from-format torchtitan|megatron|deepspeed|nanotron");
    switch (*format) {
        case ConfigFormat::torchtitan: return import_torchtitan(toml_config_tree(text, file), context);
        case ConfigFormat::megatron: return import_megatron(text, file, context);
        case ConfigFormat::deepspeed: return import_deepspeed(json_config_tree(text, file), context);
        case ConfigFormat::nanotron: return import_nanotron(yaml_config_tree(text, file), context);
    }
    throw InputError(file, "unknown config format");
}

ImportedConfig import_config_file(const std::string& path, std::optional<ConfigFormat> forced,
                                  const ImportContext& context) {
    const std::string text =
        read_user_text_file(path, path, limits::kMaxConfigFileBytes, "a training config", "limits::kMaxConfigFileBytes");
    if (context.read_sourced) return import_config_text(text, path, forced, context);
    // A file a launch script sources: a relative name from the script's folder (the script run
    // from its own folder), each under the same size bound as the script.
    ImportContext with_sources = context;
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    std::error_code no_folder;  // the working folder gone: $PWD not known
    const std::filesystem::path absolute = std::filesystem::absolute(folder.empty() ? "." : folder, no_folder);
    if (!no_folder) with_sources.script_folder = absolute.lexically_normal().string();
    while (with_sources.script_folder.size() > 1 && with_sources.script_folder.back() == '/')
        with_sources.script_folder.pop_back();
    with_sources.read_sourced = [folder](const std::string& name) {
        const std::filesystem::path p = std::filesystem::path(name).is_absolute() ? std::filesystem::path(name) : folder / name;
        return read_user_text_file(p, p.string(), limits::kMaxConfigFileBytes, "a sourced script",
                                   "limits::kMaxConfigFileBytes");
    };
    return import_config_text(text, path, forced, with_sources);
}

}  // namespace preflight
