// The whole `preflight` command line in one call (main() and the fuzz target use it).
#include <algorithm>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "command_line.hpp"

#include "commands.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/shown_value.hpp"

#ifndef PREFLIGHT_VERSION
#define PREFLIGHT_VERSION "unknown"
#endif

namespace preflight::cli {

namespace {

constexpr const char* kFooter = R"(
Exit codes: 0 success (memory: the plan fits), 1 the plan does not fit or a check
failed (run: measured and predicted disagree; validate: out of tolerance),
2 bad usage or bad input (the message names the flag, file or field),
3 the GPU or a library it needs is unavailable, 4 internal error (a bug).
Every byte figure in JSON is an integer number of bytes; times are seconds;
ratios are fractions. Run `preflight SUBCOMMAND --help` for each command's flags.

Example:
  preflight memory --model llama-3-8b --gpu h100-sxm-80gb --dp 8 --zero 1 --seq 4096
  preflight plan --model llama-3-8b --gpu h100-sxm-80gb --gpus 8 --gbs-tokens 4194304
  preflight run --model llama-3.2-1b --seq 2048 --mbs 2 --dry-run)";

// CLI11's wording for the two errors it words least plainly, said as the other messages are:
// what is wrong with which flag, and how to write it.
std::string plain_parse_error(const CLI::ParseError& e, const CLI::App& app) {
    const std::string what = e.what();
    // Arguments no option takes: named in the order given, with where the command's options are.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !app.get_subcommands().empty()) {
        const CLI::App& sub = *app.get_subcommands().front();
        std::string given;
        for (const std::string& a : sub.remaining()) given += (given.empty() ? "" : " ") + a;
        if (given.empty()) return what;
        return "not an option of `preflight " + sub.get_name() + "`: " + given + " (`preflight " + sub.get_name() +
               " --help` lists what it takes)";
    }
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
        const std::size_t colon = what.find(": At Most 1 required");
        if (colon != std::string::npos) return what.substr(0, colon) + ": given more than once; give it once";
    }
    if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr && what.rfind("Could not convert: ", 0) == 0) {
        const std::string rest = what.substr(19);  // "--sp = banana"
        const std::size_t eq = rest.find(" = ");
        if (eq != std::string::npos)
            return rest.substr(0, eq) + ": a switch is on or off, got '" + rest.substr(eq + 3) + "' (write " +
                   rest.substr(0, eq) + " alone for on, " + rest.substr(0, eq) + "=false or nothing for off)";
    }
    return what;
}

// A command-line value a message shows is cut to about a line (docs/interface.md): its first
// kShownValueChars bytes (not inside a UTF-8 sequence), then "... (N characters)". Every
// message passes here, so a 100 kB --model or --framework does not flood a CI log.
std::string cut_long_arguments(std::string message, int argc, const char* const* argv) {
    std::vector<std::string> longs;
    for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]).size() > 2 * kShownValueChars) longs.emplace_back(argv[i]);
    std::sort(longs.begin(), longs.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const std::string& arg : longs) {
        std::size_t keep = kShownValueChars;
        while (keep > 0 && (static_cast<unsigned char>(arg[keep]) & 0xC0) == 0x80) --keep;
        const std::string shown = arg.substr(0, keep) + "... (" + std::to_string(arg.size()) + " characters)";
        for (std::size_t at = message.find(arg); at != std::string::npos; at = message.find(arg, at + shown.size()))
            message.replace(at, arg.size(), shown);
    }
    return message;
}

// CLI11 reads `--flag=` (nothing after '=') as `--flag` and takes the next argument as its
// value, so `--emit= --format json` would mean `--emit --format`: refused instead, as is an empty
// argument, which would read as "not given" for some options (CLI11 leaves an optional empty) and
// so use the default silently. No flag takes an empty value. "" when neither is there.
std::string empty_value_problem(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") break;
        if (arg.empty())
            return "an empty argument" + (i > 1 ? std::string(" after ") + argv[i - 1] : std::string()) +
                   ": give a value or leave the flag out";
        if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1)
            return arg + ": nothing after '=' (write " + arg + "VALUE or " + arg.substr(0, arg.size() - 1) + " VALUE)";
    }
    return "";
}

}  // namespace

int run_command_line(int argc, const char* const* argv) {
    CLI::App app{"preflight: before you burn a GPU-hour, will this LLM training job fit, how should\n"
                 "micro-batch, accumulation, parallelism, ZeRO, precision and recompute be set,\n"
                 "and how fast will it run?",
                 "preflight"};
    app.footer(kFooter);
    app.set_version_flag("--version", std::string("preflight ") + PREFLIGHT_VERSION);
    app.require_subcommand(1);

    // One line per subcommand.
    const std::vector<Command> commands = {
        add_memory_command(app),
        add_models_command(app),
        add_gpus_command(app),
        add_run_command(app),
        add_plan_command(app),
        add_validate_command(app),
        add_calibrate_command(app),
    };

    // Name an unknown command instead of CLI11's generic "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const auto& c : commands) {
            known = known || c.sub->get_name() == argv[1];
            names += (names.empty() ? "" : ", ") + c.sub->get_name();
        }
        if (!known) {
            std::cerr << cut_long_arguments("preflight: error: unknown command '" + std::string(argv[1]) +
                                                "' (commands: " + names + ")\n", argc, argv);
            return kExitBadInput;
        }
    }

    if (const std::string why = empty_value_problem(argc, argv); !why.empty()) {
        std::cerr << cut_long_arguments("preflight: error: " + why, argc, argv) << "\n";
        return kExitBadInput;
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        std::cout << e.what() << "\n";
        return kExitOk;
    } catch (const CLI::ParseError& e) {
        std::cerr << cut_long_arguments("preflight: error: " + plain_parse_error(e, app), argc, argv) << "\n";
        if (app.get_subcommands().empty()) std::cerr << "Run `preflight --help` for the commands.\n";
        return kExitBadInput;
    }

    try {
        for (const auto& c : commands)
            if (c.sub->parsed()) return c.run();
    } catch (const preflight::InputError& e) {
        std::cerr << cut_long_arguments(std::string("preflight: error: ") + e.what(), argc, argv) << "\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << "preflight: internal error (please report it with the command line): " << e.what() << "\n";
        return kExitInternal;
    }
    return kExitBadInput;
}

}  // namespace preflight::cli
