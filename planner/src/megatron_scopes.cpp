// The launch-script reader's scopes (megatron_interpreter.hpp): positional parameters (shift,
// set --), `local` names, subshells whose assignments are put back, a loop's break and
// continue, and arithmetic assignments, as bash runs them (GNU Bash manual, "Positional
// Parameters", "Bourne Shell Builtins", "Command Execution Environment", "Shell Arithmetic").
// Our own code (no shell is run).
#include <algorithm>
#include <iterator>

#include "megatron_interpreter.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::megatron_script::interp {

// The parameters are no longer known: "$@" is one unresolved word, $1 ... and $# unresolved.
void lose(Args& a) {
    Value v;
    v.pieces.push_back({"$@", "$@", 0, 0});
    v.chars = 2;
    a.values.clear();
    a.values.push_back(std::move(v));
    a.sure = 0;
    a.script = false;
    a.all = true;
}

namespace {

// $1 .. up to the first word with an unresolved reference are known (it may split into any number).
std::size_t sure_words(const std::vector<Value>& values) {
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!values[i].word().unresolved.empty()) return i;
    return values.size();
}

// A count as written (shift 2): nullopt when it is not a plain number.
std::optional<std::size_t> count(const Value& v) {
    const Word w = v.word();
    if (!w.unresolved.empty() || w.text.empty() || w.text.size() > 6 ||
        w.text.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    return std::stoul(w.text);
}

}  // namespace

// shift [N] drops the first N positional parameters, `set -- WORDS` (or `set WORDS` after its
// options) makes WORDS the parameters (bash "Bourne Shell Builtins": shift; "The Set Builtin").
// Where N or the number of parameters is not known, the ones left are not known either.
Status Interpreter::positional(const std::vector<Item>& items, std::size_t k, int branch) {
    std::vector<Value> words;
    for (std::size_t i = k + 1; i < items.size(); ++i)
        for (Value& v : expander(items[i].word->line, true, branch).run(items[i].word->text)) words.push_back(std::move(v));
    Args& a = args();
    if (items[k].word->text == "shift") {
        const std::optional<std::size_t> n = words.empty() ? std::optional<std::size_t>(1) : count(words[0]);
        if (a.script) return {Truth::unknown, 0};  // the script's own stay not known
        journal_args();
        if (n && *n <= a.sure) {
            a.values.erase(a.values.begin(), a.values.begin() + static_cast<std::ptrdiff_t>(*n));
            a.sure -= *n;
            return {};
        }
        if (n && a.sure == a.values.size()) return {Truth::no, 0};  // N > $#: nothing shifted, status 1
        lose(a);
        return {Truth::unknown, 0};
    }
    std::size_t i = 0;
    bool given = false;
    for (; i < words.size() && !given; ++i) {
        const std::string t = words[i].text();
        given = t == "--" || t == "-";
        if (!given && (t.empty() || (t[0] != '-' && t[0] != '+'))) given = true, --i;  // the first parameter
        else if (t == "-o" || t == "+o") ++i;
    }
    if (!given) return {};  // options only (set -e, set -o pipefail)
    journal_args();
    a.values.assign(std::make_move_iterator(words.begin() + static_cast<std::ptrdiff_t>(i)),
                    std::make_move_iterator(words.end()));
    a.sure = sure_words(a.values);
    a.script = false;
    a.all = true;
    return {};
}

// break / continue in a while or until loop being run (bash "Bourne Shell Builtins"): the pass
// ends there. Under a test the reader did not decide, or as `break N`, whether the loop goes on
// is not known: it is read as undecided after this pass.
Status Interpreter::loop_control(const std::vector<Item>& items, std::size_t k, int branch) {
    if (loops_.empty() || loops_.back().frames != frames_.size() || loops_.back().once) return {};
    Loop& l = loops_.back();
    if (branch != l.branch || (k + 1 < items.size() && items[k + 1].word->text != "1")) l.undecided = true;
    else l.stop = items[k].word->text == "break" ? 1 : 2;
    return {};
}

namespace {

// NAME OP EXPR in an arithmetic expression: the name, the expression that gives its new value
// ("TP * 2" for TP *= 2, "TP + 1" for TP++); nullopt where it assigns nothing.
std::optional<std::pair<std::string, std::string>> arithmetic_assignment(std::string e) {
    const auto trim = [](std::string s) {
        const std::size_t b = s.find_first_not_of(" \t\n"), x = s.find_last_not_of(" \t\n");
        return b == std::string::npos ? std::string() : s.substr(b, x - b + 1);
    };
    e = trim(e);
    if (e.rfind("++", 0) == 0 || e.rfind("--", 0) == 0) e = e.substr(2) + e.substr(0, 2);
    std::size_t j = 0;
    while (j < e.size() && name_char(e[j])) ++j;
    if (j == 0 || !name_start(e[0])) return std::nullopt;
    const std::string name = e.substr(0, j), rest = trim(e.substr(j));
    if (rest == "++" || rest == "--") return std::make_pair(name, name + " " + rest[0] + " 1");
    for (const char* op : {"=", "+=", "-=", "*=", "/=", "%="}) {
        const std::size_t n = std::char_traits<char>::length(op);
        if (rest.compare(0, n, op) != 0 || rest.compare(0, 2, "==") == 0) continue;
        const std::string rhs = rest.substr(n);
        return std::make_pair(name, n == 1 ? rhs : name + " " + op[0] + " (" + rhs + ")");
    }
    return std::nullopt;
}

}  // namespace

// (( NAME = EXPR )), NAME op= EXPR, NAME++ / --, and `let EXPR ...` (bash "Shell Arithmetic",
// "Bash Builtins": let): the value $(( )) evaluates is assigned; one it cannot (a comparison,
// a name the script leaves open) leaves NAME unresolved, so a later use is said, never read
// stale. The status is the last value's (0: false).
Status Interpreter::arithmetic_assign(const std::vector<Item>& items, std::size_t k, int branch) {
    std::vector<Value> exprs;
    const bool let = items[k].word->text == "let";
    for (std::size_t i = let ? k + 1 : k; i < items.size(); ++i)
        exprs.push_back(expander(items[i].word->line, false, branch).joined(items[i].word->text));
    Status st{Truth::unknown, 0};
    for (Value& v : exprs) {
        std::string e = v.text();
        if (!let) e = e.size() >= 4 ? e.substr(2, e.size() - 4) : std::string();
        const auto a = arithmetic_assignment(e);
        std::string why;
        const auto value = arithmetic(a ? a->second : e, vars_, &why);
        const bool step = e.find("++") != std::string::npos || e.find("--") != std::string::npos;  // i++: the old value's
        st = {value && !step ? (*value != 0 ? Truth::yes : Truth::no) : Truth::unknown, 0};
        if (!a) continue;
        const int from = first(v.word().branch, arithmetic_names_branch(a->second, vars_));
        Value out;
        out.line = items[k].word->line;
        const std::string text = value ? std::to_string(*value) : "$((" + e + "))";
        const std::string inside = v.word().unresolved;
        const std::string open = value            ? std::string()
                                 : inside.empty() ? text + kOpenWhy + "which cannot be evaluated: " + why
                                                  : open_through(text, inside);
        add_piece(out, {text, open, first(from, branch), out.line}, out.line, &budget_);
        set_var(a->first, Var{{std::move(out)}, false});
    }
    return st;
}

// `local NAME` in a call: NAME's value is moved aside (not copied), to be put back at return.
void Interpreter::save_local(const std::string& name) {
    Frame& f = frames_.back();
    if (f.saved.count(name) > 0) return;  // local already: `local X` again keeps its value
    const auto it = vars_.find(name);
    if (it == vars_.end()) {
        f.saved.emplace(name, std::nullopt);
        return;
    }
    f.saved.emplace(name, std::move(it->second));
    vars_.erase(it);
}

Var Interpreter::not_known(const std::string& name, int line, const std::string& why) {
    Value v;
    v.line = line;
    const std::string ref = "$" + name;
    add_piece(v, {ref, ref + kOpenWhy + why, 0, line}, line, &budget_);
    return Var{{std::move(v)}, false};
}

void Interpreter::set_var(const std::string& name, Var v) { var_for_write(name) = std::move(v); }

Var& Interpreter::var_for_write(const std::string& name, bool extend) {
    journal_var(name, extend);
    return vars_[name];
}

namespace {

Extent extent_of(const Var& v) {
    Extent e;
    e.values = v.values.size();
    e.array = v.array;
    if (e.values > 0) {
        const Value& last = v.values.back();
        e.pieces = last.pieces.size();
        e.text = e.pieces > 0 ? last.pieces.back().text.size() : 0;
        e.chars = last.chars;
    }
    return e;
}

// `v` cut back to what it was at `e` (it was only extended since).
Var cut_back(Var v, const Extent& e) {
    v.values.resize(e.values);
    v.array = e.array;
    if (e.values > 0) {
        Value& last = v.values.back();
        last.pieces.resize(e.pieces);
        if (e.pieces > 0) last.pieces.back().text.resize(e.text);
        last.chars = e.chars;
    }
    return v;
}

}  // namespace

// Before a subshell first changes NAME, what it was is kept to be put back: the old value moved
// out (the caller overwrites it), or where NAME is extended in place, its extent (no copy).
// Not for a `local` of a call made inside it: that is put back at the call's return.
void Interpreter::journal_var(const std::string& name, bool extend) {
    if (journals_.empty()) return;
    Journal& j = journals_.back();
    const auto it = vars_.find(name);
    if (const auto at = j.vars.find(name); at != j.vars.end()) {
        if (at->second.extent && !extend && it != vars_.end())  // overwritten now: keep what it was
            at->second = {cut_back(std::move(it->second), *at->second.extent), std::nullopt};
        return;
    }
    for (std::size_t i = j.frames; i < frames_.size(); ++i)
        if (frames_[i].saved.count(name) > 0) return;
    if (it == vars_.end()) j.vars.emplace(name, Saved{});
    else if (extend) j.vars.emplace(name, Saved{std::nullopt, extent_of(it->second)});
    else j.vars.emplace(name, Saved{std::move(it->second), std::nullopt});
}

// Before a subshell first shifts or sets the positional parameters of the call it began in.
void Interpreter::journal_args() {
    if (journals_.empty() || journals_.back().frames != frames_.size() || journals_.back().args) return;
    for (const Value& v : args().values) {  // a copy, counted in the script's budget
        budget_.chars += v.chars;
        budget_.pieces += v.pieces.size();
    }
    if (budget_.chars > kMaxScriptChars || budget_.pieces > kMaxScriptPieces)
        throw InputError(std::to_string(peek() ? peek()->line : 0),
                         "the script's expansions pass " + std::to_string(kMaxScriptChars) + " characters or " +
                             std::to_string(kMaxScriptPieces) + " parts (kMaxScriptChars, kMaxScriptPieces): its "
                                                                "subshells copy its parameters without end");
    journals_.back().args = args();
}

void Interpreter::begin_subshell() {
    Journal j;
    j.frames = frames_.size();
    journals_.push_back(std::move(j));
}

// The subshell ends: what it changed is put back, or (keep: it was not one after all) kept.
void Interpreter::end_subshell(bool keep) {
    Journal j = std::move(journals_.back());
    journals_.pop_back();
    if (keep) return keep_journal(j);
    for (auto& [name, saved] : j.vars) {
        if (saved.extent) vars_[name] = cut_back(std::move(vars_[name]), *saved.extent);
        else if (saved.var) vars_[name] = std::move(*saved.var);
        else vars_.erase(name);
    }
    for (auto& [name, f] : j.functions) {
        if (f) functions_[name] = std::move(*f);
        else functions_.erase(name);
    }
    if (j.args) args() = std::move(*j.args);
}

// A trial that was not a subshell: what it kept goes to the subshell around it, whose own
// record of a name stands (one only extended there, then overwritten here, is cut back from
// what this one kept).
void Interpreter::keep_journal(Journal& j) {
    if (journals_.empty()) return;
    Journal& outer = journals_.back();
    for (auto& [name, saved] : j.vars) {
        bool local = false;
        for (std::size_t i = outer.frames; i < frames_.size() && !local; ++i) local = frames_[i].saved.count(name) > 0;
        if (local) continue;
        const auto at = outer.vars.find(name);
        if (at == outer.vars.end()) outer.vars.emplace(name, std::move(saved));
        else if (at->second.extent && !saved.extent && saved.var)
            at->second = {cut_back(std::move(*saved.var), *at->second.extent), std::nullopt};
    }
    for (auto& [name, f] : j.functions) outer.functions.emplace(name, std::move(f));
    if (j.args && !outer.args && outer.frames == j.frames) outer.args = std::move(j.args);
}

// The simple command at the reader is followed by | (a pipeline: it runs in a subshell).
bool Interpreter::simple_piped() const {
    const auto at = [this](std::size_t k) { return k < toks_->size() ? &(*toks_)[k] : nullptr; };
    std::size_t i = at_;
    for (const Raw* t = at(i); t; t = at(i)) {
        if (t->kind == Tok::redirect) {
            i += at(i + 1) && at(i + 1)->kind == Tok::word ? 2 : 1;
        } else if (t->kind == Tok::word) {
            const auto a = assignment(t->text);
            ++i;
            if (a && a->value.empty() && at(i) && at(i)->kind == Tok::open) {  // NAME=( ... )
                while (at(i) && at(i)->kind != Tok::close) ++i;
                ++i;
            }
        } else {
            return t->kind == Tok::op && t->text == "|";
        }
    }
    return false;
}

}  // namespace preflight::megatron_script::interp
