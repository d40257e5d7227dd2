// preflight: will this LLM training job fit, how should it be set up, how fast will it run.
#include "command_line.hpp"

int main(int argc, char** argv) { return preflight::cli::run_command_line(argc, argv); }
