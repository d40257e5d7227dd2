// Errors the planner raises for bad input. Every message names the offending
// field, flag or file so a user (or a script reading stderr) can fix it.
#pragma once

#include <stdexcept>
#include <string>

namespace preflight {

// Malformed or inconsistent input: a config field, a plan flag, a file.
// The CLI maps it to exit code 2.
class InputError : public std::runtime_error {
public:
    InputError(std::string subject, const std::string& message)
        : std::runtime_error(subject + ": " + message), subject_(std::move(subject)), detail_(message) {}
    // The field, flag or file the message is about (e.g. "--tp", "hidden_size").
    const std::string& subject() const noexcept { return subject_; }
    // The message without "subject: ": to say the same of another subject (a key, a file). Kept
    // apart, not cut from what(): a subject quoting input with a NUL byte ends what() early.
    const std::string& detail() const noexcept { return detail_; }

private:
    std::string subject_;
    std::string detail_;
};

}  // namespace preflight
