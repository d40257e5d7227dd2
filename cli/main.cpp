// preflight: will this LLM training job fit, how should it be set up, how fast will it run.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "preflight/planner/error.hpp"

namespace {

constexpr const char* kFooter = R"(
Exit codes: 0 success (memory: the plan fits), 1 the plan does not fit,
2 bad usage or bad input (the message names the flag, file or field),
3 the GPU or a library it needs is unavailable.
Every byte figure in JSON is an integer number of bytes; times are seconds;
ratios are fractions.)";

}  // namespace

int main(int argc, char** argv) {
    using namespace preflight::cli;
    CLI::App app{"preflight: predicts whether an LLM training plan fits on a GPU, per memory category\n"
                 "(weights, master weights, gradients, optimizer states, activations, logits, buffers,\n"
                 "overhead), and at which phase of the step the peak occurs.",
                 "preflight"};
    app.footer(kFooter);
    app.require_subcommand(1);

    PlanFlags memory_flags;
    bool timeline = false;
    auto* memory = app.add_subcommand(
        "memory", "Per-GPU memory of one training step for a plan: each category, the peak and its phase");
    add_plan_flags(*memory, memory_flags);
    memory->add_option("--format", memory_flags.format, "table (default) | json | csv")
        ->check(CLI::IsMember({"table", "json", "csv"}));
    memory->add_flag("--timeline", timeline, "Also print the phase-by-phase timeline of one step (table format)");
    memory->footer(
        "Example:\n  preflight memory --model llama-3-8b --gpu h100-sxm-80gb --zero 1 --dp 8 --seq 4096 "
        "--recompute selective\n"
        "Exits 1 when the peak exceeds the GPU's memory.");

    std::string catalog_dir, catalog_format = "table";
    auto* models = app.add_subcommand("models", "List the model catalog (data/models) with exact parameter counts");
    auto* gpus = app.add_subcommand("gpus", "List the GPU catalog (data/gpus): memory, dense peaks, bandwidths");
    for (auto* sub : {models, gpus}) {
        sub->add_option("--data-dir", catalog_dir, "Catalog folder (default: $PREFLIGHT_DATA_DIR or built-in)");
        sub->add_option("--format", catalog_format, "table (default) | json")->check(CLI::IsMember({"table", "json"}));
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "preflight: " << e.what() << "\n";
        return kExitBadInput;
    }

    try {
        if (memory->parsed()) return run_memory(memory_flags, timeline);
        if (models->parsed()) return run_models(catalog_dir, catalog_format);
        if (gpus->parsed()) return run_gpus(catalog_dir, catalog_format);
    } catch (const preflight::InputError& e) {
        std::cerr << "preflight: error: " << e.what() << "\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << "preflight: internal error: " << e.what() << "\n";
        return kExitBadInput;
    }
    return kExitBadInput;
}
