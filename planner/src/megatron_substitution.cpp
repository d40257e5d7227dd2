// The launch-script reader's $(command) (megatron_shell.hpp): the few commands whose output
// follows from their words and the working folder alone, which launch scripts run to find the
// files beside them (`source "$(dirname "$0")/common.sh"`,
// `DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`). Any other command's output is not known.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron_shell.hpp"

namespace preflight::megatron_script::shell {

namespace {

std::string_view strip_trailing_slashes(std::string_view p) {
    while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
    return p;
}

bool all_slashes(std::string_view p) { return !p.empty() && p.find_first_not_of('/') == std::string_view::npos; }

// Words after a command's name: its options (words from "-" on, up to "--") and its operands.
struct Split {
    std::vector<std::string> options, operands;
};
Split split_words(const std::vector<std::string>& words) {
    Split s;
    bool operands = false;
    for (std::size_t i = 1; i < words.size(); ++i) {
        if (!operands && words[i] == "--") operands = true;
        else if (!operands && words[i].size() > 1 && words[i][0] == '-') s.options.push_back(words[i]);
        else operands = true, s.operands.push_back(words[i]);
    }
    return s;
}

// Every option is made of `allowed`'s letters, and (where `needed` is given) one holds a letter of `needed`.
bool options_within(const std::vector<std::string>& options, std::string_view allowed, std::string_view needed = {}) {
    bool has_needed = needed.empty();
    for (const std::string& o : options) {
        if (o.size() < 2 || o[1] == '-') return false;  // long options: not read
        for (std::size_t i = 1; i < o.size(); ++i) {
            if (allowed.find(o[i]) == std::string_view::npos) return false;
            has_needed = has_needed || needed.find(o[i]) != std::string_view::npos;
        }
    }
    return has_needed;
}

}  // namespace

// POSIX dirname (XCU "dirname"): trailing slashes and the last component removed; "." for a name
// without a slash, "/" for the root.
std::string dirname_of(std::string_view p) {
    if (p.empty()) return ".";
    if (all_slashes(p)) return "/";
    p = strip_trailing_slashes(p);
    const std::size_t slash = p.rfind('/');
    if (slash == std::string_view::npos) return ".";
    return std::string(strip_trailing_slashes(p.substr(0, slash + 1)));
}

// POSIX basename (XCU "basename"): the last component, a `suffix` it ends with (and is not all
// of) removed.
std::string basename_of(std::string_view p, std::string_view suffix) {
    if (p.empty()) return "";
    if (all_slashes(p)) return "/";
    p = strip_trailing_slashes(p);
    const std::size_t slash = p.rfind('/');
    std::string_view last = slash == std::string_view::npos ? p : p.substr(slash + 1);
    if (!suffix.empty() && last.size() > suffix.size() && last.substr(last.size() - suffix.size()) == suffix)
        last.remove_suffix(suffix.size());
    return std::string(last);
}

// `p` from `pwd` when relative, "." and ".." resolved by name (bash's logical `cd`, and realpath
// without reading the disk: a symbolic link is not followed).
std::string absolute_of(std::string_view p, std::string_view pwd) {
    const std::string whole = !p.empty() && p[0] == '/' ? std::string(p) : std::string(pwd) + "/" + std::string(p);
    std::vector<std::string_view> parts;
    std::string_view rest = whole;
    while (!rest.empty()) {
        const std::size_t slash = rest.find('/');
        const std::string_view part = rest.substr(0, slash);
        rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            if (!parts.empty()) parts.pop_back();
            continue;
        }
        parts.push_back(part);
    }
    std::string out;
    for (const std::string_view part : parts) out.append("/").append(part);
    return out.empty() ? "/" : out;
}

// The output of one command, or of `cd DIR && pwd` (two), given the working folder (nullopt: not
// known); nullopt where it is none of these or needs the folder it is not given. `needs_pwd` (when
// given) says whether the folder was what it lacked.
std::optional<std::string> path_command_output(const std::vector<std::vector<std::string>>& commands,
                                               const std::optional<std::string>& pwd, bool* needs_pwd) {
    if (needs_pwd) *needs_pwd = false;
    const auto from_pwd = [&](const std::string& p) -> std::optional<std::string> {
        if (!p.empty() && p[0] == '/') return absolute_of(p, "/");
        if (!pwd) {
            if (needs_pwd) *needs_pwd = true;
            return std::nullopt;
        }
        return absolute_of(p, *pwd);
    };
    const auto is_pwd = [](const std::vector<std::string>& w) {
        if (w.empty() || w[0] != "pwd") return false;
        const Split s = split_words(w);
        return options_within(s.options, "LP") && s.operands.empty();
    };
    if (commands.size() == 2 && !commands[0].empty() && commands[0][0] == "cd" && is_pwd(commands[1])) {
        const Split cd = split_words(commands[0]);
        if (!options_within(cd.options, "LP") || cd.operands.size() != 1 || cd.operands[0] == "-") return std::nullopt;
        return from_pwd(cd.operands[0]);
    }
    if (commands.size() != 1 || commands[0].empty()) return std::nullopt;
    const std::vector<std::string>& w = commands[0];
    const Split s = split_words(w);
    if (w[0] == "dirname" && s.options.empty() && s.operands.size() == 1) return dirname_of(s.operands[0]);
    if (w[0] == "basename" && s.options.empty() && (s.operands.size() == 1 || s.operands.size() == 2))
        return basename_of(s.operands[0], s.operands.size() == 2 ? s.operands[1] : "");
    if (is_pwd(w)) {
        if (!pwd && needs_pwd) *needs_pwd = true;
        return pwd;
    }
    // realpath, readlink -f / -e / -m: the name made absolute (readlink without them prints a
    // link's target, which only the disk knows).
    const bool canonical = (w[0] == "realpath" && options_within(s.options, "emsLPqz")) ||
                           (w[0] == "readlink" && options_within(s.options, "femnqsvz", "fem"));
    if (canonical && s.operands.size() == 1) return from_pwd(s.operands[0]);
    return std::nullopt;
}

// $(COMMAND): the output of one of the commands above (its words expanded as bash expands them,
// redirections dropped), split as an unquoted expansion is; else COMMAND's output is not known
// and the word is unresolved. The working folder is $PWD: the script's folder, which the reader
// takes as the one the script runs from (Interpreter::Interpreter), as it does for `source`.
void Expander::substitution(std::string_view inner, std::string_view written) {
    const std::vector<Raw> toks = lex(inner);
    std::vector<std::vector<std::string>> commands(1);
    int branch = 0;
    for (std::size_t t = 0; t < toks.size(); ++t) {
        const Raw& r = toks[t];
        if (r.kind == Tok::redirect) {  // `> /dev/null`, `2>&1`: its target goes with it
            ++t;
            continue;
        }
        if ((r.kind == Tok::separator && r.text != "&") || (r.kind == Tok::op && r.text == "&&")) {
            if (!commands.back().empty()) commands.emplace_back();
            continue;
        }
        if (r.kind != Tok::word) return unresolved(written, "$(...)");
        const Value v = nested().joined(r.text);
        const Word w = v.word();
        if (!w.unresolved.empty())
            return unresolved(written, open_through(written, w.unresolved));
        branch = branch != 0 ? branch : w.branch;
        commands.back().push_back(w.text);
    }
    if (commands.back().empty()) commands.pop_back();
    std::optional<std::string> pwd;
    std::string pwd_open = kNoFolder;
    if (const std::optional<Word> w = var_word(vars_, "PWD")) {
        if (w->unresolved.empty()) pwd = w->text, branch = branch != 0 ? branch : w->branch;
        else pwd_open = open_reference(w->unresolved);
    }
    bool needs_pwd = false;
    std::optional<std::string> out = path_command_output(commands, pwd, &needs_pwd);
    if (!out) return unresolved(written, needs_pwd ? std::string(written) + kOpenWhy + "which needs the working folder: " + pwd_open
                                                   : std::string("$(...)"));
    while (!out->empty() && out->back() == '\n') out->pop_back();  // as $( ) removes them
    add(*out, dq_, line_, {}, branch);
}

}  // namespace preflight::megatron_script::shell
