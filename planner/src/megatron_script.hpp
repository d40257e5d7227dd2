// The shell subset Megatron-LM launch scripts are written in (examples/llama/*.sh,
// examples/gpt3/train_gpt3_175b_distributed.sh): NAME=value and NAME=${NAME:-default}
// variables, bash arrays NAME=( ... ) and NAME+=( ... ), $NAME / ${NAME} / ${ARR[@]} and
// $(( )) arithmetic, quotes, comments, backslash continuations, here-documents (skipped) and a
// torchrun (or python, deepspeed) line running pretrain_*.py. A plain arguments file (one
// --flag per line, as preflight's --emit megatron writes it) is a script whose commands are
// all --flags.
// if/elif/else, case and && / || run the branch their test takes where the test can be decided
// ([ ], [[ ]], test: = == != -n -z -eq -ne -lt -le -gt -ge, ! && || -a -o; case with literal
// patterns and *); where it cannot (a variable the script leaves open, a file test, a command's
// status), every branch is read in order and the words read through it name that line. A while
// / until loop whose test is decided runs pass by pass (break, continue); other loop bodies are
// read once, so marked too.
// A function's body is read at each call, with the variables as they are there, its words as
// $1 ..., "$@" and $# (shift and set -- change them), `local` names and `return` honoured (one no
// command calls is read at the end on trial, marked, only where nothing else launches); ( ) and
// the commands of a pipeline keep their assignments; ${NAME:=word}, ${NAME=word}, (( NAME = ... ))
// and let assign (`: ${TP:=2}`); eval reads its words again as commands (eval "$CMD" with CMD
// holding the launch line).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace preflight::megatron_script {

// One word after expansion, with the line it was written on (a word from a variable keeps the
// line of its definition, each line of a string over several lines its own). `unresolved`
// names the variable the word needed and the script does not define ("CHECKPOINT_PATH",
// "$(...)"); the word then holds the reference as written.
// `branch` is the line of a conditional the reader could not decide (Script::undecided) that
// the word's value passed through, 0 when none.
struct Word {
    std::string text;
    int line = 0;
    std::string unresolved;
    int branch = 0;
};

// Word::unresolved of a reference the reader does not evaluate ("$((SEQ<<1))", "${SEQ%96}")
// holds, after this mark, the clause that says why ("which cannot be evaluated: '<<' is ...");
// without it, the name or reference is one the script does not define.
inline constexpr char kOpenWhy = '\x1f';
// A positional parameter the reader has no words for ($1, "$@", $#): the script's own, which the
// user gives with --from-arg (ImportContext::script_args), or an uncalled function's.
inline constexpr const char* kWordsNotGiven = "a command-line word the reader is not given (a script's own: --from-arg)";
bool positional_reference(std::string_view written);  // $1 ..., ${1}, $@, $*, $#, as written (not $0)
// The reference of Word::unresolved as a message shows it: $NAME, or as written.
std::string shown_reference(const std::string& unresolved);
// Word::unresolved of `written` (an arithmetic, a command substitution) that needs `inside`, an
// unresolved reference: "$((SEQ*2)), whose $SEQ the script does not define".
std::string open_through(std::string_view written, const std::string& inside);
// What the reader says where it needs the script's folder and was not given one.
inline constexpr const char* kNoFolder = "the script's folder is not known (it was read from standard input)";
// What a word uses and why it is open: "$SEQ, which the script does not define",
// "$((SEQ<<1)), which cannot be evaluated: '<<' is an operator ...".
std::string open_reference(const std::string& unresolved);

// A conditional or loop whose test was not decided: every branch was read.
struct Undecided {
    int line = 0;
    std::string what;  // "if-condition not evaluated: both branches are read"
};

struct Script {
    std::vector<Word> launcher;   // the launcher's own arguments (torchrun --nproc_per_node 8 ...)
    std::string launcher_name;    // "torchrun", "python", "deepspeed"; empty without a launch line
    int launch_line = 0;          // the line of the launch command
    std::vector<Word> arguments;  // the training script's arguments (--num-layers 32 ...)
    int launches = 0;             // launch lines seen (the first one is read)
    std::vector<Undecided> undecided;  // in the order met; each line once
    std::vector<Undecided> not_read;   // calls and evals past the nesting bound, files sourced and not read,
                                       // loop passes after a launch: always said
};

// A file the script sources: its text, or InputError saying why it cannot be read (ImportContext::read_sourced).
using SourceReader = std::function<std::string(const std::string& path)>;

// How the script is run: from its folder (absolute; empty: not known, as for standard input),
// by its file name, with its command-line words. The reader takes the script as run from its own
// folder, as `source` does: $PWD is the folder, $0 and ${BASH_SOURCE[0]} the file name. Its $1 ...,
// "$@" and $# are `arguments` where given (ImportContext::script_args), else not known.
struct ScriptRun {
    std::string folder;
    std::string name;
    std::optional<std::vector<std::string>> arguments = std::nullopt;
};

Script read_script(std::string_view text, const SourceReader& read_sourced = nullptr, const ScriptRun& place = {});

}  // namespace preflight::megatron_script
