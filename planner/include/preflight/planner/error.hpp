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
        : std::runtime_error(subject + ": " + message), subject_(std::move(subject)) {}
    // The field, flag or file the message is about (e.g. "--tp", "hidden_size").
    const std::string& subject() const noexcept { return subject_; }
    // The message without "subject: ": to say the same of another subject (a key, a file).
    std::string detail() const { return std::string(what()).substr(subject_.size() + 2); }

private:
    std::string subject_;
};

}  // namespace preflight
