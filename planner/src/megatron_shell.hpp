// The pieces of the launch-script reader (megatron_script.hpp) below its interpreter: the lexer
// into words and operators with their lines, variables, the expansion of a word ($NAME, ${...},
// $(( )), quotes) and the tests of [ ], [[ ]] and case patterns. Internal to the planner.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron_script.hpp"

namespace preflight::megatron_script::shell {

// separator: newline ; & (text "\n", ";", "&"); op: && || | ;; ; redirect: < > (text "<" or ">").
enum class Tok { word, separator, op, open, close, redirect };

struct Raw {
    Tok kind = Tok::word;
    std::string text;  // a word as written (quotes and $ references kept); an operator's characters
    int line = 0;
};

// The script as tokens; a here-document's body is skipped (its delimiter stays as the target word).
std::vector<Raw> lex(std::string_view text);

// Text with what it needed: the variable the script does not define (Word::unresolved) and the
// line of the undecided conditional it passed through (Word::branch).
struct Piece {
    std::string text;
    std::string unresolved;
    int branch = 0;
    int line = 0;  // where the text was written (a string over several lines: each line's own)
};

// One word, or a variable's value: its pieces in order (one unresolved reference in a string
// leaves the other words of that string resolved).
struct Value {
    std::vector<Piece> pieces;
    int line = 0;
    std::size_t chars = 0;  // the pieces' text, summed (add_piece)
    std::string text() const;
    Word word() const;  // the first unresolved reference and branch of its pieces
};

// What one script's expansions may produce in all (every piece of text added to a word or value,
// copies included): bounds the reader's time and memory on any file (A="x$A" over 10^5 lines,
// A="$A$A", many variables), far above what launch scripts produce (kilobytes).
inline constexpr std::size_t kMaxScriptChars = std::size_t{1} << 27;
inline constexpr std::size_t kMaxScriptPieces = std::size_t{1} << 21;
struct Budget {
    std::size_t chars = 0;
    std::size_t pieces = 0;
};

// Adds `p` to a value's pieces, merged into the last where both carry the same marks (unresolved
// reference, undecided branch) and line; past kMaxPieces also where only the line differs (the
// merged text keeps the first's line), so a value built line by line stays a few pieces to copy.
// Pieces with other marks are never merged: an unresolved mark covers its own words only. Throws
// InputError naming `line` past kMaxValueChars or the script's budget (nullptr: none).
inline constexpr std::size_t kMaxPieces = 64;
inline constexpr std::size_t kMaxValueChars = std::size_t{1} << 24;
// An array holds at most this many elements, and their text at most kMaxValueChars together
// (A=("${A[@]}" "${A[@]}") doubles it each line; launch scripts' arrays hold tens).
inline constexpr std::size_t kMaxArrayElements = 4096;
void add_piece(Value& value, Piece p, int line, Budget* budget);

struct Var {
    std::vector<Value> values;  // a scalar holds one
    bool array = false;
};
using Vars = std::map<std::string, Var>;

// The positional parameters $1 ... of a function call, or of the script after `set --` (bash
// "Positional Parameters"). $1 .. $sure are known, and past them, where all are, $N is empty;
// past an unresolved word (which may split into any number of words), or a shift over one,
// they are not known. `script`: not given here (the script's own, an uncalled function's): $#
// unresolved, $N past `sure` as an unset variable (${1:-word} its word); `all`: "$@" is
// `values` (false for the script's own: unresolved).
struct Args {
    std::vector<Value> values;
    std::size_t sure = 0;
    bool script = false;
    bool all = true;
};

// NAME's value as one word (an array's first element); nullopt where NAME is unset or holds none.
std::optional<Word> var_word(const Vars& vars, const std::string& name);

bool name_start(char c);
bool name_char(char c);
// A name bash can assign: a letter or _, then letters, digits and _.
bool valid_name(std::string_view w);

// $(( )) over 64-bit integers (megatron_arithmetic.cpp): + - * / % and parentheses, numbers as
// bash reads them (0x hex, a leading 0 octal, BASE#DIGITS) and variable names holding one;
// nullopt for anything else (another operator, a name not defined or holding no number, a
// division by zero, an overflow), `why` (when given) then saying which ("its SEQ is not defined
// by the script", "'<<' is not evaluated ...").
std::optional<std::int64_t> arithmetic(std::string_view expr, const Vars& vars, std::string* why = nullptr);
// The first undecided branch among the variables an arithmetic expression names bare (N in $((N+1))).
int arithmetic_names_branch(std::string_view expr, const Vars& vars);

// (megatron_substitution.cpp) What the few commands $( ) reads print: POSIX dirname and basename,
// a name made absolute from the working folder `pwd` with "." and ".." resolved by name (realpath,
// readlink -f, bash's `cd DIR && pwd`; symbolic links are not followed), and `pwd`. `commands`:
// one command's words, or `cd DIR` then `pwd`; nullopt for any other command, or where the
// working folder is needed and not known (then `needs_pwd`, when given, is set).
std::string dirname_of(std::string_view path);
std::string basename_of(std::string_view path, std::string_view suffix);
std::string absolute_of(std::string_view path, std::string_view pwd);
std::optional<std::string> path_command_output(const std::vector<std::vector<std::string>>& commands,
                                               const std::optional<std::string>& pwd, bool* needs_pwd = nullptr);

// Expands one raw word: quotes removed, references replaced, unquoted expansions split on
// whitespace when `split` (a command's words; an assignment's value and [[ ]] operands are not split).
class Expander {
public:
    // `depth`: the ${...} / $(( )) this expansion is nested in (past kMaxNesting: left unresolved,
    // which bounds the recursion on arbitrary input).
    Expander(const Vars& vars, int line, bool split, int depth = 0, Budget* budget = nullptr)
        : vars_(vars), budget_(budget), line_(line), split_(split), depth_(depth), cur_line_(line) {}
    static constexpr int kMaxNesting = 64;

    std::vector<Value> run(std::string_view raw);
    // The expansion as one value (an assignment's, a default's): its words joined by a space.
    Value joined(std::string_view raw);
    // ${NAME:=word} / ${NAME=word} assign NAME through `assign` (into the map this expansion
    // reads), the value marked with `branch`; without this call they only substitute.
    using Assign = std::function<void(const std::string&, Value)>;
    Expander& assigning(Assign assign, int branch) {
        assign_ = std::move(assign);
        assign_branch_ = branch;
        return *this;
    }
    // $1 ... "$@" $# from `args` (nullptr: the script's own, not known).
    Expander& with_args(const Args* args) {
        args_ = args;
        return *this;
    }

private:
    void end_word();
    void append(std::string_view t, int line, const std::string& unresolved = {}, int branch = 0);
    void add(std::string_view t, bool quoted, int line, const std::string& unresolved = {}, int branch = 0);
    void add_value(const Value& v, bool quoted);
    void literal(std::string_view t);  // text as written, its newlines counted
    void unresolved(std::string_view written, const std::string& name) { append(written, line_, name); }

    std::size_t step(std::string_view raw, std::size_t i);
    std::size_t reference(std::string_view raw, std::size_t i);
    void substitution(std::string_view inner, std::string_view written);  // $(inner)
    void parameter(std::string_view inner, std::string_view written);
    Expander nested() const;  // for a default's word or an arithmetic's text: one deeper, not split
    void assign_default(const std::string& name, const Value& v);
    // What a name refers to: a variable's values, or positional parameters ($1: one, "$@": all).
    struct Ref {
        const Value* begin = nullptr;
        const Value* end = nullptr;
        bool array = false;
    };
    enum class Found { set, unset, empty, unknown };  // empty: past a call's known parameters
    Found find(const std::string& name, bool arguments, Ref& ref) const;
    void add_var(const Ref& r, bool all_elements);

    const Vars& vars_;
    const Args* args_ = nullptr;
    Budget* budget_;
    Assign assign_;
    int assign_branch_ = 0;
    int line_;
    bool split_;
    int depth_;
    bool dq_ = false;
    std::vector<Value> out_;
    Value cur_;
    int cur_line_;
    std::size_t cur_chars_ = 0;
    bool have_ = false;
};

// A test's or a command's outcome: yes (status 0), no, or unknown (not decided), with the line
// of the undecided conditional its operands passed through (0: none).
enum class Truth { no, yes, unknown };
struct Status {
    Truth truth = Truth::yes;
    int branch = 0;
};

// One argument of a test: an expanded word, or (inside [[ ]]) an operator token: && || ( ) < >.
struct TestArg {
    Word word;
    bool op = false;
};

// (megatron_shell_conditions.cpp) The arguments of [ ... ] / test ... (double_bracket false) or
// [[ ... ]] (true), without the brackets: = == != (in [[ ]] a right side with * ? [ is a
// pattern: unknown), -n -z, a lone string, -eq -ne -lt -le -gt -ge over integers, ! ( ) and
// -a -o or && ||. File tests and anything else are unknown, and so is an operand the script
// leaves unresolved.
Status evaluate_test(const std::vector<TestArg>& args, bool double_bracket, const Vars& vars);

// A case pattern as written against the subject's value: a literal (quotes removed) or a lone
// unquoted *; any other glob is unknown.
Truth case_match(const Word& subject, std::string_view raw_pattern, const Vars& vars, int line);

}  // namespace preflight::megatron_script::shell
