// The `preflight` command line as a function: parses argv, runs the command, returns the
// exit code (docs/interface.md); output goes to std::cout / std::cerr.
#pragma once

namespace preflight::cli {

int run_command_line(int argc, const char* const* argv);

}  // namespace preflight::cli
