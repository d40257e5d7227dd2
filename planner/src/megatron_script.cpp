// A small reader of the shell that Megatron-LM launch scripts are written in (megatron_script.hpp):
// the lexer and word expansion of megatron_shell.cpp, then an interpreter that walks the
// grammar of bash's compound commands (GNU Bash manual, "Shell Commands": lists, pipelines,
// if, case, while / until / for, groups), keeps variables and arrays, runs the branches a
// decided test takes and finds the launch line. Our own code (no shell is run).
#include "megatron_script.hpp"

#include <initializer_list>
#include <map>
#include <optional>
#include <set>

#include "megatron_shell.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::megatron_script {

namespace {

using namespace shell;

// Compound commands nested deeper than this are read as plain words (no script nests so deep;
// it bounds the recursion on arbitrary input).
constexpr int kMaxNesting = 200;

// NAME=value / NAME+=value: the name, whether it appends, and the value as written.
struct Assignment {
    std::string name;
    bool append = false;
    std::string_view value;
};
std::optional<Assignment> assignment(std::string_view word) {
    if (word.empty() || !name_start(word[0])) return std::nullopt;
    std::size_t j = 0;
    while (j < word.size() && name_char(word[j])) ++j;
    const bool append = word.substr(j, 2) == "+=";
    if (!append && (j >= word.size() || word[j] != '=')) return std::nullopt;
    return Assignment{std::string(word.substr(0, j)), append, word.substr(j + (append ? 2 : 1))};
}

// Words a command starts with that do not change what it runs.
bool prefix_word(const std::string& w) {
    static const std::set<std::string> words{"export", "local", "readonly", "declare", "typeset", "time", "exec", "nohup",
                                             "env", "eval"};
    return words.count(w) > 0 || (w.size() > 1 && w[0] == '-' && w[1] != '-');
}
// Commands that never launch training (their words may still name a .py file).
bool inert_command(const std::string& w) {
    static const std::set<std::string> words{"echo", "printf", "mkdir", "cd", "exit", "set", "source", ".", "cp", "rm",
                                             "ls", "cat", "return", "shift", "trap", "wait", "sleep", "unset", "read",
                                             "break", "continue"};
    return words.count(w) > 0;
}
// Reserved words that close or continue a compound command: a list stops before them.
bool closing_word(const std::string& w) {
    static const std::set<std::string> words{"then", "elif", "else", "fi", "do", "done", "esac", "}"};
    return words.count(w) > 0;
}

int first(int a, int b) { return a != 0 ? a : b; }

// Whether commands run here, and the line of the innermost undecided conditional around them.
struct Ctx {
    bool run = true;
    int branch = 0;
};

// A simple command's word, or an array assignment NAME=( elements ).
struct Item {
    const Raw* word = nullptr;
    bool array = false;
    std::vector<const Raw*> elements;
};

using Ends = std::initializer_list<std::string_view>;

class Interpreter {
public:
    explicit Interpreter(std::vector<Raw> toks) : toks_(std::move(toks)) {}
    Script run();

private:
    const Raw* peek(std::size_t ahead = 0) const { return at_ + ahead < toks_.size() ? &toks_[at_ + ahead] : nullptr; }
    bool kind_at(Tok k, std::size_t ahead = 0) const { return peek(ahead) && peek(ahead)->kind == k; }
    bool word_at(std::string_view w) const { return kind_at(Tok::word) && peek()->text == w; }
    bool op_at(std::string_view o) const { return kind_at(Tok::op) && peek()->text == o; }
    void eat_word(std::string_view w) { at_ += word_at(w) ? 1 : 0; }
    void skip_separators() { while (kind_at(Tok::separator)) ++at_; }
    bool ends_here(Ends ends) const;

    Status list(Ctx c, Ends ends);
    Status and_or(Ctx c);
    Status pipeline(Ctx c);
    Status command(Ctx c);
    Status compound(Ctx c);
    Status if_clause(Ctx c);
    Status case_clause(Ctx c);
    Truth patterns(const Word& subject);
    Status while_loop(Ctx c);
    Status for_loop(Ctx c);
    Status group(Ctx c, Tok close);
    Status arithmetic_command();
    Status double_bracket(Ctx c);
    Status simple(Ctx c);
    Status execute(Ctx c, const std::vector<Item>& items);
    Status single_bracket(const std::vector<Item>& items, std::size_t k);
    void assign(const Raw& w, const Assignment& a, int branch);
    void assign_array(const Assignment& a, const Item& item, int branch);
    void launch(const std::vector<Word>& all, std::size_t script_at, int line);
    int note(int line, std::string what);

    std::vector<Raw> toks_;
    std::size_t at_ = 0;
    int depth_ = 0;
    Vars vars_;
    shell::Budget budget_;  // what the script's expansions produce in all (kMaxScriptChars)
    Script script_;
    std::map<int, std::size_t> noted_;  // line -> its entry in script_.undecided
    std::vector<Word> plain_;  // commands that are --flags (an arguments file)
};

Script Interpreter::run() {
    while (peek()) list({}, {});
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

Status Interpreter::pipeline(Ctx c) {
    bool negate = false;
    for (; word_at("!"); ++at_) negate = !negate;
    Status st = command(c);
    while (op_at("|")) {
        ++at_;
        skip_separators();
        st = command(c);
    }
    if (negate && st.truth != Truth::unknown) st.truth = st.truth == Truth::yes ? Truth::no : Truth::yes;
    return st;
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
    // A function's body is read where it is defined (launch scripts call theirs once).
    at_ += (keyword ? 2 : 1) + (parens ? 2 : 0);
    skip_separators();
    return command(c);
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
        subject = Expander(vars_, peek()->line, false, 0, &budget_).joined(peek()->text).word();
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

// while / until TEST; do BODY; done: the body is read once (not where the test never holds), marked.
Status Interpreter::while_loop(Ctx c) {
    const int line = peek()->line;
    const bool until = peek()->text == "until";
    ++at_;
    const Status test = list(c, {"do"});
    eat_word("do");
    Ctx body{c.run && test.truth != (until ? Truth::yes : Truth::no), c.branch};
    if (body.run) body.branch = note(line, "loop not evaluated: its body is read once");
    list(body, {"done"});
    eat_word("done");
    return {};
}

// for NAME in WORDS / for (( ... )); do BODY; done: the body is read once, marked.
Status Interpreter::for_loop(Ctx c) {
    const int line = peek()->line;
    int parens = 0;
    for (++at_; peek() && !(parens == 0 && (kind_at(Tok::separator) || word_at("do"))); ++at_)
        parens += kind_at(Tok::open) ? 1 : kind_at(Tok::close) ? -1 : 0;
    skip_separators();
    eat_word("do");
    Ctx body = c;
    if (c.run) body.branch = note(line, "loop not evaluated: its body is read once");
    list(body, {"done"});
    eat_word("done");
    return {};
}

// { LIST } (close: the word "}") or ( LIST ) (close: the ")" token).
Status Interpreter::group(Ctx c, Tok close) {
    ++at_;
    const Status st = list(c, {close == Tok::word ? "}" : ")"});
    at_ += (close == Tok::word ? word_at("}") : kind_at(Tok::close)) ? 1 : 0;
    return st;
}

// (( EXPRESSION )): passed over; its status is not decided.
Status Interpreter::arithmetic_command() {
    int depth = 0;
    do depth += kind_at(Tok::open) ? 1 : kind_at(Tok::close) ? -1 : 0;
    while (++at_ < toks_.size() && depth > 0);
    return {Truth::unknown, 0};
}

// [[ EXPRESSION ]]: && || ( ) < > are its operators there, its words are not split.
Status Interpreter::double_bracket(Ctx c) {
    std::vector<TestArg> args;
    for (++at_; peek() && !word_at("]]") && !kind_at(Tok::separator); ++at_) {
        const Raw& t = *peek();
        if (t.kind == Tok::word) args.push_back({Expander(vars_, t.line, false, 0, &budget_).joined(t.text).word(), false});
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
    while (const Raw* t = peek()) {
        if (t->kind == Tok::redirect) {
            at_ += kind_at(Tok::word, 1) ? 2 : 1;  // and its target
            continue;
        }
        if (t->kind != Tok::word) break;
        ++at_;
        Item item{t, false, {}};
        const auto a = assignment(t->text);
        if (a && a->value.empty() && kind_at(Tok::open)) {
            // NAME=( ... ) / NAME+=( ... ): an array, its elements split as words are.
            item.array = true;
            for (++at_; peek() && !kind_at(Tok::close); ++at_)
                if (kind_at(Tok::word)) item.elements.push_back(peek());
            at_ += kind_at(Tok::close) ? 1 : 0;
        }
        items.push_back(std::move(item));
    }
    return c.run ? execute(c, items) : Status{};
}

// [ EXPRESSION ] / test EXPRESSION: its words split as a command's are.
Status Interpreter::single_bracket(const std::vector<Item>& items, std::size_t k) {
    std::vector<TestArg> args;
    for (std::size_t i = k + 1; i < items.size(); ++i)
        for (const Value& v : Expander(vars_, items[i].word->line, true, 0, &budget_).run(items[i].word->text)) args.push_back({v.word(), false});
    if (items[k].word->text == "[") {
        if (args.empty() || args.back().word.text != "]") return {Truth::unknown, 0};
        args.pop_back();
    }
    return evaluate_test(args, false, vars_);
}

// A simple command: its status is a test's, yes for assignments and the commands that set up a
// launch (cd, mkdir, echo: taken to succeed, so `cd DIR && torchrun ...` is read plainly), and
// not decided for any other command (its exit status is not known here).
Status Interpreter::execute(Ctx c, const std::vector<Item>& items) {
    std::size_t k = 0;
    while (k < items.size() && !items[k].array && prefix_word(items[k].word->text)) ++k;
    if (k == items.size()) return {};
    const std::string& head = items[k].word->text;
    if (head == "[" || head == "test") return single_bracket(items, k);
    if (head == "false") return {Truth::no, 0};
    if (inert_command(head) || head == "true" || head == ":") return {};
    for (std::optional<Assignment> a; k < items.size() && (a = assignment(items[k].word->text)); ++k) {
        if (items[k].array) assign_array(*a, items[k], c.branch);
        else assign(*items[k].word, *a, c.branch);
    }
    if (k == items.size()) return {};
    const Status ran{Truth::unknown, 0};
    std::vector<Word> all;
    for (std::size_t i = k; i < items.size(); ++i)
        for (const Value& v : Expander(vars_, items[i].word->line, true, 0, &budget_).run(items[i].word->text)) {
            all.push_back(v.word());
            all.back().branch = first(all.back().branch, c.branch);
        }
    if (all.empty()) return {};
    if (all[0].text.rfind("--", 0) == 0) {
        plain_.insert(plain_.end(), all.begin(), all.end());
        return {};
    }
    for (std::size_t p = 0; p < all.size(); ++p) {
        const std::string& t = all[p].text;
        if (t.size() > 3 && t.compare(t.size() - 3, 3, ".py") == 0 && t[0] != '-' &&
            t.find_first_of(" \t") == std::string::npos) {
            launch(all, p, items[k].word->line);
            break;
        }
    }
    return ran;
}

// Pieces without a branch of their own take the one they were assigned under.
void mark(Value& v, int branch) {
    for (Piece& p : v.pieces) p.branch = first(p.branch, branch);
}

// NAME="$NAME rest" (or "${NAME}rest") on a scalar NAME is NAME+="rest": the rest, extended in
// place (bash copies the value; reading it so keeps a value built line by line linear).
std::optional<std::string> self_append_rest(const Assignment& a, const Vars& vars) {
    const auto it = vars.find(a.name);
    if (a.append || it == vars.end() || it->second.array || it->second.values.size() != 1) return std::nullopt;
    const std::string_view raw = a.value;
    for (const std::string& ref : {"\"$" + a.name, "\"${" + a.name + "}"}) {
        if (raw.substr(0, ref.size()) != ref) continue;
        const std::size_t end = ref.size();
        if (ref.back() != '}' && end < raw.size() && name_char(raw[end])) continue;  // "$NAMEX": another name
        return "\"" + std::string(raw.substr(end));
    }
    return std::nullopt;
}

void Interpreter::assign(const Raw& w, const Assignment& a_in, int branch) {
    const std::optional<std::string> rest = self_append_rest(a_in, vars_);  // a.value views it
    Assignment a = a_in;
    if (rest) a.value = *rest, a.append = true;
    Value value = Expander(vars_, w.line, false, 0, &budget_).joined(a.value);
    mark(value, branch);
    Var& v = vars_[a.name];
    if (a.append && v.array) {
        if (v.values.size() >= shell::kMaxArrayElements)
            throw InputError(std::to_string(w.line), "array " + a.name + " grows past " +
                                                         std::to_string(shell::kMaxArrayElements) +
                                                         " elements (kMaxArrayElements)");
        v.values.push_back(std::move(value));
        return;
    }
    if (a.append && !v.values.empty()) {  // extended in place: no copy of what it holds
        Value& whole = v.values[0];
        for (Piece& p : value.pieces) add_piece(whole, std::move(p), w.line, &budget_);
        v.values.resize(1);
        v.array = false;
        return;
    }
    v = Var{{std::move(value)}, false};
}

void Interpreter::assign_array(const Assignment& a, const Item& item, int branch) {
    // Bash expands the elements before it assigns: NAME=("${NAME[@]}" more) keeps NAME's own.
    std::vector<Value> values;
    for (const Raw* e : item.elements)
        for (Value& v : Expander(vars_, e->line, true, 0, &budget_).run(e->text)) {
            mark(v, branch);
            values.push_back(std::move(v));
        }
    Var& v = vars_[a.name];
    if (!a.append) v = Var{{}, true};
    v.array = true;  // NAME+=( ... ) on a scalar: its value is element 0
    std::size_t chars = 0;
    for (const Value& x : v.values) chars += x.chars;
    for (Value& x : values) {
        chars += x.chars;
        if (v.values.size() >= shell::kMaxArrayElements || chars > shell::kMaxValueChars)
            throw InputError(std::to_string(item.word ? item.word->line : 0), "array " + a.name + " grows past " +
                                                           std::to_string(shell::kMaxArrayElements) + " elements or " +
                                                           std::to_string(shell::kMaxValueChars) +
                                                           " characters (kMaxArrayElements, kMaxValueChars)");
        v.values.push_back(std::move(x));
    }
}

void Interpreter::launch(const std::vector<Word>& all, std::size_t script_at, int line) {
    if (script_.launches++ > 0) return;
    std::string name = all[0].text.substr(all[0].text.find_last_of('/') + 1);
    // The words between the launcher and the script (none when the line starts with the script:
    // "pretrain_gpt.py --num-layers ..."; fuzz finding: that range was reversed).
    script_.launcher.clear();
    if (script_at > 0) script_.launcher.assign(all.begin() + 1, all.begin() + static_cast<std::ptrdiff_t>(script_at));
    for (const Word& w : script_.launcher)
        if (w.text == "torch.distributed.run" || w.text == "torch.distributed.launch") name = "torchrun";
    script_.launcher_name = script_at == 0 ? "python" : name;
    script_.launch_line = line;
    script_.arguments.assign(all.begin() + static_cast<std::ptrdiff_t>(script_at) + 1, all.end());
}

}  // namespace

Script read_script(std::string_view text) { return Interpreter(lex(text)).run(); }

}  // namespace preflight::megatron_script
