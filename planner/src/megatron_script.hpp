// The shell subset Megatron-LM launch scripts are written in (examples/llama/*.sh,
// examples/gpt3/train_gpt3_175b_distributed.sh): NAME=value and NAME=${NAME:-default}
// variables, bash arrays NAME=( ... ) and NAME+=( ... ), $NAME / ${NAME} / ${ARR[@]} and
// $(( )) arithmetic, quotes, comments, backslash continuations and a torchrun (or python,
// deepspeed) line running pretrain_*.py. A plain arguments file (one --flag per line, as
// preflight's --emit megatron writes it) is a script whose commands are all --flags.
// Conditionals and loops are not evaluated: every branch's assignments are read, in order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace preflight::megatron_script {

// One word after expansion, with the line it was written on (an array element keeps the
// line of its definition). `unresolved` names the variable the word needed and the script
// does not define ("CHECKPOINT_PATH", "$(...)"); the word then holds the reference as written.
struct Word {
    std::string text;
    int line = 0;
    std::string unresolved;
};

struct Script {
    std::vector<Word> launcher;   // the launcher's own arguments (torchrun --nproc_per_node 8 ...)
    std::string launcher_name;    // "torchrun", "python", "deepspeed"; empty without a launch line
    int launch_line = 0;          // the line of the launch command
    std::vector<Word> arguments;  // the training script's arguments (--num-layers 32 ...)
    int launches = 0;             // launch lines seen (the first one is read)
};

Script read_script(std::string_view text);

}  // namespace preflight::megatron_script
