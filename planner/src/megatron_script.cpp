// A small reader of the shell that Megatron-LM launch scripts are written in (megatron_script.hpp):
// the lexer and word expansion of megatron_shell.cpp, then an interpreter that walks the
// grammar of bash's compound commands (GNU Bash manual, "Shell Commands": lists, pipelines,
// if, case, while / until / for, groups), keeps variables and arrays, runs the branches a
// decided test takes and finds the launch line. Our own code (no shell is run).
#include "megatron_script.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "megatron_interpreter.hpp"

namespace preflight::megatron_script {

namespace interp {

namespace {

// Reserved words that close or continue a compound command: a list stops before them.
bool closing_word(const std::string& w) {
    static const std::set<std::string> words{"then", "elif", "else", "fi", "do", "done", "esac", "}"};
    return words.count(w) > 0;
}

}  // namespace

// A script read from a file runs from its folder (ScriptRun): $PWD, $0 and ${BASH_SOURCE[0]}; and
// with the words it was given, where they are.
Interpreter::Interpreter(std::vector<Raw> toks, SourceReader read_sourced, const ScriptRun& place)
    : toks_(&sources_.emplace_back(std::move(toks))), read_sourced_(std::move(read_sourced)) {
    const auto value = [](const std::string& text) { return Value{{shell::Piece{text, {}, 0, 0}}, 0, text.size()}; };
    if (place.arguments) {  // the words it was given: all known, $N past them empty (bash "Positional Parameters")
        script_args_ = Args{{}, place.arguments->size(), false, true};
        for (const std::string& w : *place.arguments) script_args_.values.push_back(value(w));
    }
    if (place.folder.empty()) return;
    vars_["PWD"] = Var{{value(place.folder)}, false};
    vars_["0"] = Var{{value(place.name)}, false};
    vars_["BASH_SOURCE"] = Var{{value(place.name)}, true};
}

Script Interpreter::run() {
    while (peek()) list({}, {});
    call_uncalled();
    if (script_.launches == 0) script_.arguments = std::move(plain_);
    return std::move(script_);
}

// The undecided conditional at `line` (said once per line: an if, case or loop there is named
// before a && / || list inside its test); returns the line.
int Interpreter::note(int line, std::string what) {
    const auto [at, added] = noted_.emplace(line, script_.undecided.size());
    if (added) {
        script_.undecided.push_back({line, std::move(what)});
    } else if (std::string& was = script_.undecided[at->second].what;
               was.rfind("condition before", 0) == 0 && what.rfind("condition before", 0) != 0) {
        was = std::move(what);
    }
    return line;
}

bool Interpreter::ends_here(Ends ends) const {
    const Raw* t = peek();
    for (const std::string_view e : ends)
        if (((t->kind == Tok::word || t->kind == Tok::op) && t->text == e) || (t->kind == Tok::close && e == ")"))
            return true;
    return false;
}

// Commands up to one of `ends` (not taken); the status of the last.
Status Interpreter::list(Ctx c, Ends ends) {
    Status last;
    while (true) {
        skip_separators();
        if (!peek() || ends_here(ends)) return last;
        const std::size_t before = at_;
        last = and_or(c);
        if (at_ == before) ++at_;  // a token no rule takes: passed over
    }
}

// a && b || c: each runs as the status before it says; after an undecided one, it is read, marked.
Status Interpreter::and_or(Ctx c) {
    Status st = pipeline(c);
    while (op_at("&&") || op_at("||")) {
        const bool both = op_at("&&");
        const int line = peek()->line;
        ++at_;
        skip_separators();
        const bool runs = st.truth != (both ? Truth::no : Truth::yes);
        Ctx next{c.run && runs, first(st.branch, c.branch)};
        if (next.run && st.truth == Truth::unknown)
            next.branch = note(line, std::string("condition before ") + (both ? "&&" : "||") + " not evaluated: what follows it is read");
        const Status rhs = pipeline(next);
        if (!runs) continue;
        const Truth stays = both ? Truth::no : Truth::yes;  // unknown && no is no; unknown || yes is yes
        st.truth = st.truth == Truth::unknown && rhs.truth != stays ? Truth::unknown : rhs.truth;
        st.branch = first(st.branch, rhs.branch);
    }
    return st;
}

// A | B | C: with more than one command each runs in a subshell (bash "Pipelines", "Command
// Execution Environment"), so what it assigns does not reach the rest of the script. Whether a
// compound command is piped is known only after it: it is read as a subshell on trial and kept.
Status Interpreter::pipeline(Ctx c) {
    bool negate = false;
    for (; word_at("!"); ++at_) negate = !negate;
    const bool trial = c.run && (compound_at() || simple_piped());
    if (trial) begin_subshell();
    Status st = command(c);
    if (trial) end_subshell(!op_at("|"));
    while (op_at("|")) {
        ++at_;
        skip_separators();
        if (c.run) begin_subshell();
        st = command(c);
        if (c.run) end_subshell(false);
    }
    if (negate && st.truth != Truth::unknown) st.truth = st.truth == Truth::yes ? Truth::no : Truth::yes;
    return st;
}

bool Interpreter::compound_at() const {
    if (!kind_at(Tok::word)) return false;
    static const std::set<std::string> words{"if", "case", "while", "until", "for", "select", "{", "function"};
    return words.count(peek()->text) > 0 || (kind_at(Tok::open, 1) && kind_at(Tok::close, 2));
}

Status Interpreter::command(Ctx c) {
    const Raw* t = peek();
    if (!t) return {};
    if (depth_ < kMaxNesting) {
        ++depth_;
        const std::size_t before = at_;
        const Status st = compound(c);
        --depth_;
        if (at_ != before) return st;
    }
    if ((t->kind == Tok::word && closing_word(t->text)) || t->kind == Tok::close || t->kind == Tok::op)
        return ++at_, Status{};  // a stray fi, done, ) or ;;: passed over
    return simple(c);
}

// if, case, loops, { } and ( ) groups, (( )), function definitions; nothing taken otherwise.
Status Interpreter::compound(Ctx c) {
    const Raw& t = *peek();
    if (t.kind == Tok::open) return kind_at(Tok::open, 1) ? arithmetic_command() : group(c, Tok::close);
    if (t.kind != Tok::word) return {};
    if (t.text == "if") return if_clause(c);
    if (t.text == "case") return case_clause(c);
    if (t.text == "while" || t.text == "until") return while_loop(c);
    if (t.text == "for") return for_loop(c);
    if (t.text == "{") return group(c, Tok::word);
    const bool keyword = t.text == "function";
    const bool parens = kind_at(Tok::open, keyword ? 2 : 1) && kind_at(Tok::close, keyword ? 3 : 2);
    if (!keyword && (!parens || assignment(t.text))) return {};  // NAME=() is an empty array
    return define(c, keyword, parens);
}

// NAME () BODY / function NAME [()] BODY: the body is passed over here and read at each call,
// with the variables as they are then (bash "Shell Functions": the body runs when the name is
// called). A definition in a branch that does not run defines nothing.
Status Interpreter::define(Ctx c, bool keyword, bool parens) {
    const Raw* name = keyword ? peek(1) : peek();
    const int line = peek()->line;
    at_ += (keyword ? 2 : 1) + (parens ? 2 : 0);
    skip_separators();
    const std::size_t start = at_;
    command({false, c.branch});
    if (c.run && !stopped() && name && name->kind == Tok::word) {
        if (!journals_.empty() && journals_.back().functions.count(name->text) == 0) {
            const auto was = functions_.find(name->text);
            journals_.back().functions.emplace(name->text, was == functions_.end() ? std::nullopt : std::optional<Function>(was->second));
        }
        functions_[name->text] = Function{toks_, start, line, c.branch, static_cast<int>(functions_.size()), name->text};
    }
    return {};
}

// if / elif / else / fi: the first branch whose test holds runs; an undecided test's branch is
// read, and so are the later ones, marked with its line.
Status Interpreter::if_clause(Ctx c) {
    bool taken = false;
    int taint = 0;
    do {
        const int line = peek()->line;
        ++at_;  // if / elif
        const bool live = c.run && !taken;
        const Status test = list({live, c.branch}, {"then"});
        eat_word("then");
        Ctx body{false, c.branch};
        if (live) {
            if (test.truth == Truth::unknown) taint = first(note(line, "if-condition not evaluated: both branches are read"), taint);
            taint = first(taint, test.branch);
            body = {test.truth != Truth::no, first(taint, c.branch)};
            taken = test.truth == Truth::yes;
        }
        list(body, {"elif", "else", "fi"});
    } while (word_at("elif"));
    if (word_at("else")) {
        ++at_;
        list({c.run && !taken, first(taint, c.branch)}, {"fi"});
    }
    eat_word("fi");
    return {};
}

// case WORD in PATTERN) ... ;; esac: the first arm a pattern matches runs; undecided ones are read, marked.
Status Interpreter::case_clause(Ctx c) {
    const int line = peek()->line;
    ++at_;
    Word subject;
    if (kind_at(Tok::word)) {
        subject = expander(peek()->line, false, c.branch).joined(peek()->text).word();
        ++at_;
    }
    eat_word("in");
    bool taken = false;
    int taint = subject.branch;
    if (c.run && !subject.unresolved.empty()) taint = note(line, "case not evaluated: every branch is read");
    while (true) {
        skip_separators();
        if (!peek() || word_at("esac")) break;
        const std::size_t before = at_;
        const int arm = peek()->line;
        const Truth m = patterns(subject);
        Ctx body{false, c.branch};
        if (c.run && !taken) {
            if (m == Truth::unknown && subject.unresolved.empty())
                taint = first(note(arm, "case pattern not evaluated: its branch is read"), taint);
            body = {m != Truth::no, first(taint, c.branch)};
            taken = m == Truth::yes;
        }
        list(body, {";;", "esac"});
        if (op_at(";;")) ++at_;
        if (at_ == before) ++at_;
    }
    eat_word("esac");
    return {};
}

// ( PATTERN | PATTERN ... ): yes when one matches, unknown when one may.
Truth Interpreter::patterns(const Word& subject) {
    if (kind_at(Tok::open)) ++at_;
    Truth m = Truth::no;
    while (kind_at(Tok::word)) {
        const Truth p = case_match(subject, peek()->text, vars_, peek()->line);
        if (p == Truth::yes) m = Truth::yes;
        else if (p == Truth::unknown && m == Truth::no) m = Truth::unknown;
        ++at_;
        if (!op_at("|")) break;
        ++at_;
    }
    if (kind_at(Tok::close)) ++at_;
    return m;
}

// while / until TEST; do BODY; done, run as bash runs it while its test is decided (bash
// "Looping Constructs"): the test read again after each pass, `break` and `continue` followed,
// at most kMaxLoopPasses passes (their words counted in kMaxCallTokens); a pass that launches
// ends it (later passes cannot change the launch read). Where the test is not decided, or a
// break is under one, the body is read once more, marked (loop_once).
Status Interpreter::while_loop(Ctx c) {
    const int line = peek()->line;
    const bool until = peek()->text == "until";
    ++at_;
    const std::size_t test_at = at_;
    if (stopped()) c.run = false;
    loops_.push_back({c.branch, frames_.size()});
    for (int pass = 0;; ++pass) {
        at_ = test_at;
        const Status test = list(c, {"do"});
        eat_word("do");
        const std::size_t body = at_;
        Truth holds = test.truth;
        if (until && holds != Truth::unknown) holds = holds == Truth::yes ? Truth::no : Truth::yes;
        if (!c.run || holds == Truth::no || returned()) {
            list({false, c.branch}, {"done"});
            break;
        }
        const bool spent = call_tokens_ > kMaxCallTokens / 2;  // leave the rest to calls after the loop
        if (holds == Truth::unknown || test.branch != 0 || pass >= kMaxLoopPasses || spent) {
            loop_once(c, line, test_at, body,
                      pass == 0 ? "loop not evaluated: its body is read once"
                                : "loop not evaluated after " + std::to_string(pass) + " passes: its body is read once more");
            break;
        }
        if (!loop_pass(c, line, test_at, body, test_at, pass)) break;
    }
    loops_.pop_back();
    eat_word("done");
    return {};
}

// One pass of a decided loop's body, read from `from` (a while loop's test, a for loop's body):
// whether the loop goes on. A pass with a break or continue under an undecided test is undone
// and the body read once, marked (loop_once); a break, a return or a launch ends the loop.
bool Interpreter::loop_pass(Ctx c, int line, std::size_t head, std::size_t body, std::size_t from, int pass) {
    const int launches = script_.launches;
    begin_subshell();
    list(c, {"done"});
    const bool undecided = loops_.back().undecided;
    end_subshell(!undecided);
    if (pass > 0) spend(at_ - from, line);
    if (undecided) {
        loop_once(c, line, head, body, "loop not evaluated: a break or continue in it is not decided; its body is read once");
        return false;
    }
    return std::exchange(loops_.back().stop, 0) != 1 && !returned() && script_.launches == launches;
}

// An undecided loop's body, read once marked with its line. A loop that shifts or sets the
// positional parameters (an argument loop) makes them not known first, so a `case "$1"` in it
// reads every branch and each flag it sets is said.
void Interpreter::loop_once(Ctx c, int line, std::size_t test, std::size_t body, std::string what) {
    at_ = body;
    list({false, c.branch}, {"done"});
    for (std::size_t i = test; i < at_; ++i)
        if ((*toks_)[i].kind == Tok::word && ((*toks_)[i].text == "shift" || (*toks_)[i].text == "set")) {
            journal_args();
            lose(args());
            break;
        }
    at_ = body;
    loops_.back().once = true;
    loops_.back().stop = 0;
    list({true, note(line, std::move(what))}, {"done"});
}

// for NAME in WORDS; do BODY; done, run as bash runs it where every word of the list is known
// (bash "Looping Constructs": NAME takes each word in turn): `break` and `continue` followed, at
// most kMaxLoopPasses passes, a pass that launches ends it (the later passes' launches are said,
// not read), as while_loop runs its passes. A list with a word not known (an undefined variable,
// a command substitution, a glob or a brace expansion), `for NAME` over "$@" and
// `for (( ))` are read once, marked (loop_once), NAME then not known where it is used.
Status Interpreter::for_loop(Ctx c) {
    const int line = peek()->line;
    const std::size_t head = at_++;
    if (stopped()) c.run = false;
    std::optional<std::string> name;
    std::optional<std::vector<Value>> words;
    if (kind_at(Tok::word) && kind_at(Tok::word, 1) && peek(1)->text == "in" && !assignment(peek()->text) &&
        valid_name(peek()->text)) {
        name = peek()->text;
        at_ += 2;
        words = for_words(c);
    }
    int parens = 0;
    for (; peek() && !(parens == 0 && (kind_at(Tok::separator) || word_at("do"))); ++at_)
        parens += kind_at(Tok::open) ? 1 : kind_at(Tok::close) ? -1 : 0;
    skip_separators();
    eat_word("do");
    const std::size_t body = at_;
    loops_.push_back({c.branch, frames_.size()});
    if (!c.run || (words && words->empty())) {
        list({false, c.branch}, {"done"});
    } else if (!words) {
        if (name)
            set_var(*name, not_known(*name, line, "which the for loop at line " + std::to_string(line) +
                                                      " sets from a list it cannot evaluate"));
        loop_once(c, line, head, body, "loop not evaluated: its body is read once");
    } else {
        for_passes(c, line, head, body, *name, *words);
    }
    loops_.pop_back();
    eat_word("done");
    return {};
}

// The words of a for loop's list, expanded and split as bash does; nullopt where one is not known.
std::optional<std::vector<Value>> Interpreter::for_words(Ctx c) {
    std::vector<Value> out;
    bool known = true;
    for (; kind_at(Tok::word); ++at_) {
        if (!c.run) continue;
        for (Value& v : expander(peek()->line, true, c.branch).run(peek()->text)) {
            const std::string text = v.text();
            // A glob (*, ?, [) the file system decides, a brace expansion ({1..4}, {a,b}) not expanded here.
            if (!v.word().unresolved.empty() || text.find_first_of("*?[{") != std::string::npos) known = false;
            out.push_back(std::move(v));
        }
    }
    if (!known) return std::nullopt;
    return out;
}

void Interpreter::for_passes(Ctx c, int line, std::size_t head, std::size_t body, const std::string& name,
                             const std::vector<Value>& words) {
    for (std::size_t pass = 0; pass < words.size(); ++pass) {
        at_ = body;
        const bool spent = call_tokens_ > kMaxCallTokens / 2;  // leave the rest to calls after the loop
        if (pass >= static_cast<std::size_t>(kMaxLoopPasses) || spent) {
            loop_once(c, line, head, body, "loop not evaluated after " + std::to_string(pass) + " passes: its body is read once more");
            return;
        }
        set_var(name, Var{{words[pass]}, false});
        const int launches = script_.launches;
        const bool goes_on = loop_pass(c, line, head, body, body, static_cast<int>(pass));
        if (script_.launches != launches && pass + 1 < words.size()) {
            std::string later;
            for (std::size_t i = pass + 1; i < words.size() && i < pass + 4; ++i) later += (later.empty() ? "" : ", ") + words[i].text();
            if (words.size() > pass + 4) later += ", ...";
            script_.not_read.push_back({line, "the for loop launches on its pass with " + name + "=" + words[pass].text() +
                                                  ", which is read; its later passes (" + name + "=" + later + ") are not"});
        }
        if (!goes_on) return;
    }
}

// { LIST } (close: the word "}") or ( LIST ) (close: the ")" token: a subshell, what it assigns
// put back at its end; bash "Grouping Commands").
Status Interpreter::group(Ctx c, Tok close) {
    ++at_;
    const bool subshell = close == Tok::close && c.run;
    if (subshell) begin_subshell();
    const Status st = list(c, {close == Tok::word ? "}" : ")"});
    if (subshell) end_subshell(false);
    at_ += (close == Tok::word ? word_at("}") : kind_at(Tok::close)) ? 1 : 0;
    return st;
}

// (( EXPRESSION )): passed over; its status is not decided.
Status Interpreter::arithmetic_command() {
    int depth = 0;
    do depth += kind_at(Tok::open) ? 1 : kind_at(Tok::close) ? -1 : 0;
    while (++at_ < toks_->size() && depth > 0);
    return {Truth::unknown, 0};
}

// [[ EXPRESSION ]]: && || ( ) < > are its operators there, its words are not split.
Status Interpreter::double_bracket(Ctx c) {
    std::vector<TestArg> args;
    for (++at_; peek() && !word_at("]]") && !kind_at(Tok::separator); ++at_) {
        const Raw& t = *peek();
        if (t.kind == Tok::word) args.push_back({expander(t.line, false, c.branch).joined(t.text).word(), false});
        else args.push_back({Word{t.text, t.line, {}, 0}, true});
    }
    const bool closed = word_at("]]");
    eat_word("]]");
    if (!c.run) return {};
    if (!closed) return {Truth::unknown, 0};
    return evaluate_test(args, true, vars_);
}

Status Interpreter::simple(Ctx c) {
    if (word_at("[[")) return double_bracket(c);
    std::vector<Item> items;
    bool named = false;
    while (const Raw* t = peek()) {
        if (t->kind == Tok::redirect) {
            at_ += kind_at(Tok::word, 1) ? 2 : 1;  // and its target
            continue;
        }
        if (t->kind != Tok::word) break;
        ++at_;
        Item item{t, false, {}};
        const auto a = assignment(t->text);
        if (!named && !a && !prefix_word(t->text)) {
            named_.insert(t->text);  // the command's name, run or not (call_uncalled)
            named = true;
        }
        if (a && a->value.empty() && kind_at(Tok::open)) {
            // NAME=( ... ) / NAME+=( ... ): an array, its elements split as words are.
            item.array = true;
            for (++at_; peek() && !kind_at(Tok::close); ++at_)
                if (kind_at(Tok::word)) item.elements.push_back(peek());
            at_ += kind_at(Tok::close) ? 1 : 0;
        }
        items.push_back(std::move(item));
    }
    return c.run && !stopped() ? execute(c, items) : Status{};
}

// [ EXPRESSION ] / test EXPRESSION: its words split as a command's are.
Status Interpreter::single_bracket(const std::vector<Item>& items, std::size_t k, int branch) {
    std::vector<TestArg> args;
    for (std::size_t i = k + 1; i < items.size(); ++i)
        for (const Value& v : expander(items[i].word->line, true, branch).run(items[i].word->text))
            args.push_back({v.word(), false});
    if (items[k].word->text == "[") {
        if (args.empty() || args.back().word.text != "]") return {Truth::unknown, 0};
        args.pop_back();
    }
    return evaluate_test(args, false, vars_);
}

}  // namespace interp

Script read_script(std::string_view text, const SourceReader& read_sourced, const ScriptRun& place) {
    return interp::Interpreter(shell::lex(text), read_sourced, place).run();
}

bool positional_reference(std::string_view w) {
    if (w.rfind("${", 0) == 0 && w.size() > 3 && w.back() == '}') w = w.substr(2, w.size() - 3);
    else if (w.rfind('$', 0) == 0) w.remove_prefix(1);
    else return false;
    // $0 is the script's name, no command-line word.
    return w == "@" || w == "*" || w == "#" ||
           (!w.empty() && w != "0" && w.find_first_not_of("0123456789") == std::string_view::npos);
}

std::string open_through(std::string_view written, const std::string& inside) {
    return std::string(written) + kOpenWhy + "whose " + shown_reference(inside) + " the script does not define";
}

std::string shown_reference(const std::string& unresolved) {
    const std::string written = unresolved.substr(0, unresolved.find(kOpenWhy));
    const bool as_written = !written.empty() && (written[0] == '$' || written[0] == '`');
    return (as_written ? "" : "$") + written;
}

std::string open_reference(const std::string& unresolved) {
    const std::size_t mark = unresolved.find(kOpenWhy);
    return shown_reference(unresolved) + ", " +
           (mark == std::string::npos ? "which the script does not define" : unresolved.substr(mark + 1));
}

}  // namespace preflight::megatron_script
