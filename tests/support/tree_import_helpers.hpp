// Test helpers for the config importers (--from): fixtures, field reads, error checks.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "preflight/planner/config_import.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_schema.hpp"

namespace preflight::test::tree_import {

inline std::filesystem::path config_dir() { return PREFLIGHT_TEST_CONFIG_DIR; }

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline std::int64_t int_field(const ImportedConfig& c, const std::string& key) {
    const ImportedField* f = c.field(key);
    if (f == nullptr) ADD_FAILURE() << "no field " << key;
    return f ? std::get<std::int64_t>(f->value) : -1;
}
inline std::string name_field(const ImportedConfig& c, const std::string& key) {
    const ImportedField* f = c.field(key);
    if (f == nullptr) ADD_FAILURE() << "no field " << key;
    return f ? std::get<std::string>(f->value) : "";
}
inline bool bool_field(const ImportedConfig& c, const std::string& key) {
    const ImportedField* f = c.field(key);
    if (f == nullptr) ADD_FAILURE() << "no field " << key;
    return f ? std::get<bool>(f->value) : false;
}

// The imported fields written onto a default plan.
inline Plan plan_of(const ImportedConfig& c) { return apply_imported_fields(c, Plan{}); }

// Every named plan field (plan_schema keys) is the same in `got` as in `want`, compared as the
// command line writes it.
inline void expect_same_fields(const Plan& got, const Plan& want, std::initializer_list<std::string_view> keys) {
    for (std::string_view key : keys) {
        const PlanField* f = plan_field(key);
        ASSERT_NE(f, nullptr) << key;
        EXPECT_EQ(field_text(*f, got), field_text(*f, want)) << key;
    }
}

inline bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }
inline bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
    for (const std::string& s : v)
        if (contains(s, needle)) return true;
    return false;
}

// `run` throws an InputError whose message holds every needle (file, key, line, ...).
inline void expect_input_error(const std::function<void()>& run, const std::vector<std::string>& needles) {
    try {
        run();
        ADD_FAILURE() << "no InputError (expected one naming " << (needles.empty() ? "" : needles.front()) << ")";
    } catch (const InputError& e) {
        for (const std::string& n : needles) EXPECT_TRUE(contains(e.what(), n)) << "'" << n << "' not in: " << e.what();
    }
}

}  // namespace preflight::test::tree_import
