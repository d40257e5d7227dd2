// The launch-script reader's interpreter (megatron_script.hpp), shared by its two files:
// megatron_script.cpp walks the grammar of bash's compound commands, megatron_commands.cpp runs
// a simple command (assignments, the launch line, function calls, eval). Internal to the planner.
#pragma once

#include <deque>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "megatron_script.hpp"
#include "megatron_shell.hpp"

namespace preflight::megatron_script::interp {

using namespace shell;

// Compound commands nested deeper than this are read as plain words (no script nests so deep;
// it bounds the recursion on arbitrary input).
inline constexpr int kMaxNesting = 200;
// Function calls and evals nested deeper than this are not read, and said at the call's line (a
// function that calls itself with a test the reader cannot decide would not end); the tokens
// read through calls, evals and loops, in all, are bounded too (f1() { f0; f0; }, f2() { f1;
// f1; } ... doubles them at each level).
inline constexpr int kMaxCallNesting = 32;
inline constexpr std::size_t kMaxCallTokens = std::size_t{1} << 20;
// A while / until loop whose test is decided runs at most this many passes (its tokens after
// the first pass count in kMaxCallTokens); one still running is read as undecided.
inline constexpr int kMaxLoopPasses = 1000;

// NAME=value / NAME+=value: the name, whether it appends, and the value as written.
struct Assignment {
    std::string name;
    bool append = false;
    std::string_view value;
};
std::optional<Assignment> assignment(std::string_view word);

// Words a command starts with that do not change what it runs (eval among them: what follows is read).
bool prefix_word(const std::string& w);

inline int first(int a, int b) { return a != 0 ? a : b; }

// The positional parameters are no longer known (after a shift over an unresolved word, or in a
// loop that shifts and was not decided).
void lose(Args& a);

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

// A function the script defined: where its body's tokens are (read at each call).
struct Function {
    const std::vector<Raw>* source = nullptr;
    std::size_t start = 0;
    int line = 0;
    int branch = 0;  // the undecided conditional it was defined under
    int order = 0;
    std::string name;
};

// A function call being read: its positional parameters, and the `local` variables it hides,
// to be restored when it returns (nullopt: the name was not set before).
struct Frame {
    Args args;
    std::map<std::string, std::optional<Var>> saved;
    int branch = 0;  // the branch the call was read under: a `return` under it ends the body
    bool returned = false;
};

// A subshell being read (( LIST ), an element of a pipeline, an uncalled function read on
// trial): what it changed, as it was when it began, to be put back when it ends (bash "Command
// Execution Environment": a subshell's assignments do not reach its parent).
// A variable as a subshell found it: its value (nullopt: unset), or, where the subshell only
// extended it (NAME+=..., NAME="$NAME ..."), how long it was, to be cut back to.
struct Extent {
    std::size_t values = 0, pieces = 0, text = 0, chars = 0;  // the last value's pieces, the last piece's text
    bool array = false;
};
struct Saved {
    std::optional<Var> var;
    std::optional<Extent> extent;
};

struct Journal {
    std::map<std::string, Saved> vars;
    std::map<std::string, std::optional<Function>> functions;
    std::optional<Args> args;  // the positional parameters of the call it began in
    std::size_t frames = 0;    // the calls being read when it began
};

// A while / until loop being run: `break` / `continue` under its own branch end the pass.
struct Loop {
    int branch = 0;
    std::size_t frames = 0;  // the calls being read when it began (a break in a callee is not its)
    int stop = 0;            // 1: break, 2: continue
    bool undecided = false;  // a break under an undecided test, or break N
    bool once = false;       // read once (a for loop, an undecided one): break / continue not followed
};

class Interpreter {
public:
    Interpreter(std::vector<Raw> toks, SourceReader read_sourced, const ScriptRun& place);
    Script run();

private:
    const Raw* peek(std::size_t ahead = 0) const { return at_ + ahead < toks_->size() ? &(*toks_)[at_ + ahead] : nullptr; }
    bool kind_at(Tok k, std::size_t ahead = 0) const { return peek(ahead) && peek(ahead)->kind == k; }
    bool word_at(std::string_view w) const { return kind_at(Tok::word) && peek()->text == w; }
    bool op_at(std::string_view o) const { return kind_at(Tok::op) && peek()->text == o; }
    void eat_word(std::string_view w) { at_ += word_at(w) ? 1 : 0; }
    void skip_separators() { while (kind_at(Tok::separator)) ++at_; }
    bool ends_here(Ends ends) const;
    bool returned() const { return !frames_.empty() && frames_.back().returned; }
    // A return, break or continue ended what is being read.
    bool stopped() const {
        return returned() || (!loops_.empty() && loops_.back().frames == frames_.size() && loops_.back().stop != 0);
    }
    Args& args() { return frames_.empty() ? script_args_ : frames_.back().args; }
    // An expansion in this script: its budget, the positional parameters, and ${NAME:=word}
    // assigning under `branch`.
    Expander expander(int line, bool split, int branch) {
        Expander e(vars_, line, split, 0, &budget_);
        e.with_args(&args()).assigning([this](const std::string& name, Value v) { set_var(name, Var{{std::move(v)}, false}); }, branch);
        return e;
    }

    // megatron_script.cpp: the grammar.
    Status list(Ctx c, Ends ends);
    Status and_or(Ctx c);
    Status pipeline(Ctx c);
    Status command(Ctx c);
    Status compound(Ctx c);
    Status define(Ctx c, bool keyword, bool parens);
    Status if_clause(Ctx c);
    Status case_clause(Ctx c);
    Truth patterns(const Word& subject);
    Status while_loop(Ctx c);
    bool loop_pass(Ctx c, int line, std::size_t head, std::size_t body, std::size_t from, int pass);
    void loop_once(Ctx c, int line, std::size_t test, std::size_t body, std::string what);
    bool compound_at() const;  // a compound command (not a subshell) or a definition starts here
    Status for_loop(Ctx c);
    std::optional<std::vector<Value>> for_words(Ctx c);
    void for_passes(Ctx c, int line, std::size_t head, std::size_t body, const std::string& name,
                    const std::vector<Value>& words);
    // A value standing for NAME where the reader cannot know it: a use of it says `why`.
    Var not_known(const std::string& name, int line, const std::string& why);
    Status group(Ctx c, Tok close);
    Status arithmetic_command();
    Status double_bracket(Ctx c);
    Status simple(Ctx c);
    Status single_bracket(const std::vector<Item>& items, std::size_t k, int branch);
    int note(int line, std::string what);

    // megatron_commands.cpp: simple commands.
    Status execute(Ctx c, const std::vector<Item>& items);
    void expand_only(const std::vector<Item>& items, std::size_t from, int branch);
    bool make_local(const std::vector<Item>& items, std::size_t from);
    void assign(const Raw& w, const Assignment& a, int branch, bool local);
    void assign_array(const Assignment& a, const Item& item, int branch, bool local);
    void launch(const std::vector<Word>& all, std::size_t script_at, int line);
    static bool helper_python(const std::vector<Word>& all, std::size_t script_at);  // no training launch
    // given false: an uncalled function's, its words not known ("$@" empty, $# and $1 ... not known).
    Status call(const Function& f, std::vector<Value> args, Ctx c, int line, bool given = true);
    void restore(Frame& frame);
    Status eval(Ctx c, std::vector<Value> args, int line);
    // `source FILE` / `. FILE`: the file's commands read here, in the script's own scope.
    Status source(Ctx c, const std::vector<Item>& items, std::size_t k, int line);
    Status read_tokens(const std::vector<Raw>* source, std::size_t start, Ctx c, bool one_command, int line);
    void change_directory(const std::vector<Item>& items, std::size_t k, int branch, int line);  // cd: $PWD
    void spend(std::size_t tokens, int line);  // tokens read through calls, evals and loops (kMaxCallTokens)
    void cut(int line, std::string what);      // not read (a call or eval past kMaxCallNesting, a Python line that is no launch)
    void call_uncalled();

    // megatron_scopes.cpp: positional parameters, locals, subshells, loops' break, arithmetic.
    Status positional(const std::vector<Item>& items, std::size_t k, int branch);
    Status loop_control(const std::vector<Item>& items, std::size_t k, int branch);
    Status arithmetic_assign(const std::vector<Item>& items, std::size_t k, int branch);
    void save_local(const std::string& name);
    void set_var(const std::string& name, Var v);  // journalled
    // NAME about to be assigned (or, extend: appended to), journalled; the old value moved out.
    Var& var_for_write(const std::string& name, bool extend = false);
    void journal_var(const std::string& name, bool extend);
    void journal_args();
    void begin_subshell();
    void end_subshell(bool keep);
    void keep_journal(Journal& j);
    bool simple_piped() const;  // the simple command here is followed by |

    std::deque<std::vector<Raw>> sources_;  // the script's tokens, then each eval's and sourced file's (never moved: a deque)
    const std::vector<Raw>* toks_;          // the tokens being read
    std::size_t at_ = 0;
    int depth_ = 0;
    Vars vars_;
    shell::Budget budget_;  // what the script's expansions produce in all (kMaxScriptChars)
    Script script_;
    std::map<int, std::size_t> noted_;  // line -> its entry in script_.undecided
    std::vector<Word> plain_;  // commands that are --flags (an arguments file)
    std::map<std::string, Function> functions_;
    std::set<std::string> named_;  // the words commands start with, run or not (an uncalled function is none)
    std::vector<Frame> frames_;    // the function calls being read, innermost last
    Args script_args_{{}, 0, true, false};  // the script's own, or what `set --` made them
    std::vector<Journal> journals_;  // the subshells being read, innermost last
    std::vector<Loop> loops_;        // the loops being read, innermost last
    std::set<int> cut_lines_;        // lines where kMaxCallNesting cut a call or eval
    int calls_ = 0;                // function calls and evals nested now
    std::size_t call_tokens_ = 0;  // tokens read through calls, in all (kMaxCallTokens)
    SourceReader read_sourced_;    // empty: sourced files are not read
};

}  // namespace preflight::megatron_script::interp
