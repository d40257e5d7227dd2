// Runs the built `preflight` binary and captures its output and exit code.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace preflight::test {

struct CliResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs a shell command line; fills stdout and the exit code (stderr goes where `cmd` sends it).
inline CliResult run_shell(const std::string& cmd) {
    CliResult r;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) return r;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// `env` is prepended to the command line, e.g. "CUDA_VISIBLE_DEVICES=" to hide GPUs.
inline CliResult run_preflight(const std::string& args, const std::string& env = "") {
    // A unique stderr file made by mkstemp (tmpnam can race between parallel tests).
    std::string err_file = "/tmp/preflight-test-XXXXXX";
    const int fd = mkstemp(err_file.data());
    if (fd < 0) return CliResult{};
    close(fd);
    const std::string cmd = env + " PREFLIGHT_DATA_DIR='" + PREFLIGHT_TEST_DATA_DIR + "' '" + PREFLIGHT_EXE +
                            "' " + args + " 2>'" + err_file + "'";
    CliResult r = run_shell(cmd);
    std::array<char, 4096> buf{};
    std::size_t n;
    if (FILE* e = std::fopen(err_file.c_str(), "r")) {
        while ((n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
        std::fclose(e);
    }
    std::remove(err_file.c_str());
    return r;
}

}  // namespace preflight::test
