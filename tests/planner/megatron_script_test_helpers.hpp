// Shared by the launch-script reader's suites (test_import_megatron_shell.cpp,
// test_import_megatron_scopes.cpp): a script read as `preflight --from bad.sh` reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preflight/planner/config_import.hpp"
#include "tree_import_helpers.hpp"

namespace preflight::test::megatron_script {

inline ImportedConfig import_text(const std::string& text) { return import_megatron(text, "bad.sh", ImportContext{}); }
inline std::int64_t integer(const ImportedConfig& c, const std::string& key) { return tree_import::int_field(c, key); }
inline bool contains(const std::vector<std::string>& v, const std::string& needle) {
    return tree_import::any_contains(v, needle);
}

// A torchrun launch line up to the flags each test adds.
inline const std::string kLaunch =
    "torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 --global-batch-size 64 ";

}  // namespace preflight::test::megatron_script
