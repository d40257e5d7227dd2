// Megatron-LM's arguments as flags with their values and lines (argparse semantics: the last
// occurrence wins, --flag=value and --flag value alike), read by import_megatron.cpp and
// megatron_model.cpp. Every flag read is marked, so the unread ones can be listed.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "megatron_script.hpp"
#include "preflight/planner/config_import.hpp"

namespace preflight::megatron_script {

struct Flag {
    std::string name;         // "--micro-batch-size"
    int line = 0;             // where the flag was written
    std::vector<Word> values;  // the words after it up to the next --flag
    int branch = 0;           // the name's Word::branch: an undecided conditional it was read through
};

// The reference a word needed and the script does not define, as written: "$DATA", "$(...)", "`...`".
std::string reference(const Word& w);

class Flags {
public:
    Flags(const std::vector<Word>& arguments, std::string file);

    // The flag's last occurrence (nullptr when absent); marks it read.
    const Flag* get(std::string_view name);
    bool has(std::string_view name) { return get(name) != nullptr; }
    ConfigSpot spot(const Flag& f) const { return {file_, f.name, f.line}; }
    // The spot of an absent flag whose Megatron default applies ("--bf16 (absent: fp32)").
    ConfigSpot default_spot(std::string_view what) const { return {file_, std::string(what), 0}; }

    // The flag's value as text: an InputError naming the flag and its line when it has none,
    // or when the value uses a variable the script does not define.
    std::string text(const Flag& f) const;
    std::optional<std::string> text(std::string_view name);
    std::optional<std::int64_t> integer(std::string_view name, std::int64_t min, std::int64_t max,
                                        std::string_view what = {});
    std::optional<double> real(std::string_view name, double min, double max);

    // Each flag's last occurrence (the one argparse keeps), in the order written.
    std::vector<const Flag*> last() const;
    // Flags never read, in the order written (their last occurrence), and words before the first flag.
    std::vector<const Flag*> unread() const;
    bool was_read(std::string_view name) const { return read_.count(name) > 0; }
    // Read for its value (text, integer, real), not only for its presence (a toggle).
    bool value_was_read(std::string_view name) const { return value_read_.count(name) > 0; }
    const std::vector<Word>& stray() const { return stray_; }
    const std::vector<Flag>& all() const { return list_; }
    const std::string& file() const { return file_; }

private:
    std::string file_;
    std::vector<Flag> list_;
    std::vector<Word> stray_;
    std::set<std::string, std::less<>> read_;
    mutable std::set<std::string, std::less<>> value_read_;
};

}  // namespace preflight::megatron_script
