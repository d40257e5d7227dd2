#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "format.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::cli {

namespace {

// A catalog entry that does not load, blamed on the folder that brought it in (--data-dir or
// PREFLIGHT_DATA_DIR), not on --model/--gpu, which a listing never reads.
// The message names the file, as for any file a user hands us (docs/interface.md).
template <class Load>
auto load_listed(const std::string& data_dir_flag, const std::filesystem::path& file, Load load) {
    try {
        return load();
    } catch (const InputError& e) {
        const std::string what = e.detail();
        throw InputError(data_dir_flag.empty() ? "PREFLIGHT_DATA_DIR" : "--data-dir",
                         what.find(file.string()) != std::string::npos ? what : file.string() + ": " + what);
    }
}

}  // namespace

int run_models(const std::string& data_dir_flag, const std::string& format) {
    const auto dir = data_dir_of(data_dir_flag);
    nlohmann::json list = nlohmann::json::array();
    Table t;
    t.header = {"name", "family", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "context", "window"};
    t.units = {"", "", "[count]", "[count]", "", "", "", "", "[tokens]", "[tokens]", "[keys]"};
    const auto names = catalog_models(dir);
    if (names.empty())
        throw InputError(data_dir_flag.empty() ? "PREFLIGHT_DATA_DIR" : "--data-dir",
                         "no model configs in '" + (dir / "models").string() + "' (no *.json files there)");
    for (const auto& name : names) {
        const ModelConfig m = load_listed(data_dir_flag, dir / "models" / (name + ".json"), [&] { return load_model(name, dir); });
        const ParamCounts c = count_params(m);
        list.push_back({{"name", name},
                        {"family", to_string(m.family)},
                        {"params", c.total},
                        {"params_active", c.active},
                        {"layers", m.layers},
                        {"hidden", m.hidden},
                        {"heads", m.heads},
                        {"kv_heads", m.kv_heads},
                        {"ffn_hidden", m.ffn_hidden},
                        {"vocab", m.vocab},
                        {"max_positions", m.max_positions},
                        // keys a query attends to under sliding-window attention; null: the whole sequence
                        {"sliding_window", m.sliding_window > 0 ? nlohmann::json(m.sliding_window) : nlohmann::json()},
                        {"experts", m.experts}});
        t.rows.push_back({name, std::string(to_string(m.family)), group_digits(c.total), group_digits(c.active),
                          std::to_string(m.layers), std::to_string(m.hidden),
                          std::to_string(m.heads) + "/" + std::to_string(m.kv_heads), std::to_string(m.ffn_hidden),
                          std::to_string(m.vocab), std::to_string(m.max_positions),
                          m.sliding_window > 0 ? std::to_string(m.sliding_window) : "none"});
    }
    if (format == "json")
        std::cout << nlohmann::json{{"schema_version", 1}, {"models", list}}.dump(2) << "\n";
    else
        std::cout << "# models in " << (dir / "models").string() << "\n" << t.render();
    return kExitOk;
}

int run_gpus(const std::string& data_dir_flag, const std::string& format) {
    const auto dir = data_dir_of(data_dir_flag);
    nlohmann::json list = nlohmann::json::array();
    Table t;
    t.header = {"name", "memory", "fp32", "tf32", "bf16", "fp16", "fp8", "HBM", "intra-node", "inter-node",
                "overhead", "step-time constants"};
    t.units = {"", "[binary]", "[TFLOP/s]", "[TFLOP/s]", "[TFLOP/s]", "[TFLOP/s]", "[TFLOP/s]", "[GB/s]", "[GB/s]",
               "[GB/s]", "[binary]", ""};
    auto tf = [](std::optional<double> v) { return v ? std::optional<double>(*v / 1e12) : std::nullopt; };
    auto opt_json = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    const auto names = catalog_gpus(dir);
    if (names.empty())
        throw InputError(data_dir_flag.empty() ? "PREFLIGHT_DATA_DIR" : "--data-dir",
                         "no GPU specs in '" + (dir / "gpus").string() + "' (no *.json files there)");
    for (const auto& name : names) {
        const GpuSpec g = load_listed(data_dir_flag, dir / "gpus" / (name + ".json"), [&] { return load_gpu(name, dir); });
        list.push_back({{"name", name},
                        {"display_name", g.display_name},
                        {"memory_bytes", g.memory_bytes},
                        {"peak_fp32_flops_per_s", opt_json(g.peak.fp32_flops_per_s)},
                        {"peak_tf32_flops_per_s", opt_json(g.peak.tf32_flops_per_s)},
                        {"peak_bf16_flops_per_s", opt_json(g.peak.bf16_flops_per_s)},
                        {"peak_fp16_flops_per_s", opt_json(g.peak.fp16_flops_per_s)},
                        {"peak_fp8_flops_per_s", opt_json(g.peak.fp8_flops_per_s)},
                        {"hbm_bandwidth_bytes_per_s", g.hbm_bandwidth_bytes_per_s},
                        {"intra_node_bandwidth_bytes_per_s", g.intra_node_bandwidth_bytes_per_s},
                        {"inter_node_bandwidth_bytes_per_s", g.inter_node_bandwidth_bytes_per_s},
                        {"gpus_per_node", g.gpus_per_node},
                        {"overhead_bytes", g.overhead_bytes},
                        {"step_time_constants", efficiency_origin(g)},
                        {"step_time_constants_provenance", g.efficiency.provenance}});
        t.rows.push_back({name, format_bytes(g.memory_bytes), format_rate(tf(g.peak.fp32_flops_per_s), ""),
                          format_rate(tf(g.peak.tf32_flops_per_s), ""), format_rate(tf(g.peak.bf16_flops_per_s), ""),
                          format_rate(tf(g.peak.fp16_flops_per_s), ""), format_rate(tf(g.peak.fp8_flops_per_s), ""),
                          format_rate(g.hbm_bandwidth_bytes_per_s / 1e9, ""),
                          format_rate(g.intra_node_bandwidth_bytes_per_s / 1e9, ""),
                          format_rate(g.inter_node_bandwidth_bytes_per_s / 1e9, ""), format_bytes(g.overhead_bytes),
                          efficiency_origin(g)});
    }
    if (format == "json")
        std::cout << nlohmann::json{{"schema_version", 1}, {"gpus", list}}.dump(2) << "\n";
    else
        std::cout << "# GPUs in " << (dir / "gpus").string()
                  << " (dense peaks; bandwidths per GPU per direction; N/A = not published)\n"
                  << "# step-time constants: fitted on measured runs | from <gpu> (its fit, calibration_from) | "
                     "defaults (uncalibrated); provenance: --format json\n"
                  << t.render();
    return kExitOk;
}

}  // namespace preflight::cli

namespace preflight::cli {

namespace {
struct CatalogState {
    std::string data_dir;
    std::string format = "table";
};
CLI::App* add_catalog_sub(CLI::App& app, const char* name, const char* help, CatalogState& st) {
    auto* sub = app.add_subcommand(name, help);
    sub->add_option("--data-dir", st.data_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or built-in)");
    sub->add_option("--format", st.format, "table (default) | json")->check(CLI::IsMember({"table", "json"}));
    return sub;
}
}  // namespace

Command add_models_command(CLI::App& app) {
    auto st = std::make_shared<CatalogState>();
    auto* sub = add_catalog_sub(app, "models", "List the model catalog (data/models) with exact parameter counts", *st);
    sub->footer("Example:\n  preflight models                       # the catalog: names for --model, counts in parameters\n"
                "  preflight models --data-dir my-data     # your own folder with models/*.json (Hugging Face config.json)\n"
                "  preflight models --format json | jq '.models[].name'");
    return {sub, [st] { return run_models(st->data_dir, st->format); }};
}

Command add_gpus_command(CLI::App& app) {
    auto st = std::make_shared<CatalogState>();
    auto* sub = add_catalog_sub(app, "gpus", "List the GPU catalog (data/gpus): memory, dense peaks, bandwidths", *st);
    sub->footer("Example:\n  preflight gpus                         # names for --gpu, memory in GiB, dense peaks in TFLOP/s\n"
                "  preflight gpus --format json           # figures in bytes and FLOP/s, and where the step-time constants come from");
    return {sub, [st] { return run_gpus(st->data_dir, st->format); }};
}

}  // namespace preflight::cli
