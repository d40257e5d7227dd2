// Helpers of the tests on the files and paths users hand us (issue 37): a scratch folder
// and the refusal check (exit 2, the culprit named, no internal error, no result printed).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace preflight::test {

using nlohmann::json;

// A scratch folder removed at the end of each test.
class Scratch {
public:
    Scratch() {
        char tmpl[] = "/tmp/preflight-files-XXXXXX";
        dir_ = mkdtemp(tmpl);
    }
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    // Writes `j`; the number 123456.5 in it becomes `literal` (JSON text nlohmann cannot write).
    std::string write(const std::string& name, const json& j, const std::string& literal = "") const {
        std::string text = j.dump(2);
        if (!literal.empty()) text.replace(text.find("123456.5"), 8, literal);
        const std::filesystem::path p = dir_ / name;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p) << text;
        return p.string();
    }
    std::string write_text(const std::string& name, const std::string& text) const {
        const std::filesystem::path p = dir_ / name;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p) << text;
        return p.string();
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::string fifo(const std::string& name) const {
        const std::filesystem::path p = dir_ / name;
        std::filesystem::create_directories(p.parent_path());
        EXPECT_EQ(mkfifo(p.c_str(), 0600), 0) << p;
        return p.string();
    }
    const std::filesystem::path& dir() const { return dir_; }

private:
    std::filesystem::path dir_;
};

inline json catalog(const std::string& kind, const std::string& name) {
    std::ifstream in(std::string(PREFLIGHT_TEST_DATA_DIR) + "/" + kind + "/" + name + ".json");
    return json::parse(in);
}

// Exit 2 naming every one of `words`, none of `absent` in the message, no internal error and
// no result printed. Runs under `timeout`: a blocked read fails the test instead of hanging it.
inline void expect_refused(const std::string& args, std::initializer_list<std::string> words,
                    std::initializer_list<std::string> absent = {}) {
    const auto r = run_preflight(args, "timeout 60 env");
    EXPECT_EQ(r.exit_code, 2) << args << "\nstdout: " << r.out.substr(0, 400) << "\nstderr: " << r.err;
    for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << args << ": '" << w << "' not in: " << r.err;
    for (const auto& w : absent) EXPECT_EQ(r.err.find(w), std::string::npos) << args << ": '" << w << "' in: " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << args << ": printed a result: " << r.out.substr(0, 400);
}

}  // namespace preflight::test
