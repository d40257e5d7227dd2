// A config file of any of the four formats -> plan values: read, detect, parse, import.
#include "preflight/config_readers/config_readers.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/user_file.hpp"

namespace preflight {

ImportedConfig import_config_text(std::string_view text, const std::string& file, std::optional<ConfigFormat> forced,
                                  const ImportContext& context) {
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
    return import_config_text(text, path, forced, context);
}

}  // namespace preflight
