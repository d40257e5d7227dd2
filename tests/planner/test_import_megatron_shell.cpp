// The launch-script reader's shell functions, ${NAME:=word} defaults and eval (audit of
// 2026-11-30, helper-43): each gave a wrong plan or no plan, silently. Hand-written scripts in the
// shapes real launch scripts use; the plan's values are asserted.
#include <gtest/gtest.h>

#include <string>

#include "megatron_script_test_helpers.hpp"
#include "preflight/planner/error.hpp"

using namespace preflight;
using namespace preflight::test::megatron_script;

// Gap 1: a function's body was read where it was defined, before TP and PP were set: tp and pp
// came out unresolved (exit 2) or as an earlier value. It is read at the call now, with the
// variables as they are there and the call's words as $1 and "$@".
TEST(ImportMegatronScript, AFunctionBodyIsReadAtItsCall) {
    const ImportedConfig c = import_text(
        "TP=1\n"
        "run() {\n"
        "  " + kLaunch + "\\\n"
        "    --tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} \"$@\"\n"
        "}\n"
        "TP=4\n"
        "PP=2\n"
        "run --seq-length 2048\n"
        "run_small() { local TP=2; run --seq-length 512; }\n");
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_EQ(integer(c, "pp"), 2);
    EXPECT_EQ(integer(c, "dp"), 1);
    EXPECT_EQ(c.field("tp")->from.line, 4);  // the flag's line, in the body
    EXPECT_EQ(integer(c, "seq"), 2048);       // "$@"
    EXPECT_FALSE(contains(c.warnings, "never called"));  // run_small is never called: not read (a launch was found)
    EXPECT_FALSE(contains(c.warnings, "launch lines"));
    // Positional parameters and `local` end with the call; `return` ends the body.
    const ImportedConfig p = import_text(
        "TP=8\n"
        "setup() {\n"
        "  local TP=$1\n"
        "  PP=$2\n"
        "  return\n"
        "  PP=16\n"
        "}\n"
        "if [ \"$TP\" = 8 ]; then setup 2 1; fi\n" +
        kLaunch + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n");
    EXPECT_EQ(integer(p, "tp"), 8);  // local TP ended with the call
    EXPECT_EQ(integer(p, "pp"), 1);  // the body ended at return (PP=16 not read)
    EXPECT_FALSE(contains(p.warnings, "not evaluated"));
    // Called twice: two launch lines, the first read (as bash would run both).
    const ImportedConfig twice = import_text("go() { " + kLaunch + "--tensor-model-parallel-size $1; }\ngo 2\ngo 4\n");
    EXPECT_EQ(integer(twice, "tp"), 2);
    EXPECT_TRUE(contains(twice.warnings, "the script runs 2 launch lines: the first is read"));
    // A function defined in a branch that does not run is not defined: the launch after it is read.
    const ImportedConfig skipped = import_text("if false; then torchrun() { :; }; fi\n" + kLaunch +
                                               "--tensor-model-parallel-size 2\n");
    EXPECT_EQ(integer(skipped, "tp"), 2);
}

// A function no command calls does not run in bash; where the script launches nothing else its
// body is read at the end (a launcher that calls it from outside the script), with the
// variables as the script leaves them, and the values read through it are said.
TEST(ImportMegatronScript, AnUncalledFunctionIsReadAtTheEndOnlyWhenNothingElseLaunches) {
    const ImportedConfig c = import_text(
        "launch() {\n"                                                        // 1
        "  " + kLaunch + "--tensor-model-parallel-size $TP\n"                 // 2
        "}\n"                                                                 // 3
        "TP=8\n");                                                            // 4
    EXPECT_EQ(integer(c, "tp"), 8);
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: function launch is defined but never called: its body is read at "
                                     "the end, called with no arguments (the torchrun launch line, --micro-batch-size"));
    // Beside a launch line of its own, the uncalled function's assignments do not apply.
    const ImportedConfig top = import_text("big() { TP=8; }\nTP=2\n" + kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_EQ(integer(top, "tp"), 2);
    EXPECT_FALSE(contains(top.warnings, "never called"));
}

// Calls are bounded: one that calls itself is not read past kMaxCallNesting; calls that double
// at every level are refused at kMaxCallTokens, naming the line.
TEST(ImportMegatronScript, FunctionCallsStayBounded) {
    const ImportedConfig r = import_text("f() { f; }\nf\n" + kLaunch + "--tensor-model-parallel-size 2\n");
    EXPECT_EQ(integer(r, "tp"), 2);
    std::string doubling = "f0() { :; }\n";
    for (int i = 1; i <= 40; ++i)
        doubling += "f" + std::to_string(i) + "() { f" + std::to_string(i - 1) + "; f" + std::to_string(i - 1) + "; }\n";
    doubling += "f40\n" + kLaunch + "\n";
    test::tree_import::expect_input_error([&] { import_text(doubling); }, {"bad.sh:", "kMaxCallTokens"});
}

// Gap 2: `: ${TP:=2}` assigns TP where it is unset or empty, ${TP=2} only where it is unset,
// ${TP:-2} never (bash "Shell Parameter Expansion"); was: TP unresolved, exit 2.
TEST(ImportMegatronScript, AssignDefaultExpansionsSetTheVariable) {
    const ImportedConfig c = import_text(
        ": ${TP:=2}\n"
        ": \"${PP:=4}\"\n"
        "CP=\n"
        "X=${CP:=2}\n"          // inside a word: CP is set too
        "GBS=\"\"\n"
        ": ${GBS=999}\n"         // set (empty): not assigned
        ": ${SEQ:-8192}\n"       // :- never assigns
        "echo \"mbs ${MBS:=2}\"\n"
        "torchrun --nproc_per_node 16 pretrain_gpt.py --tensor-model-parallel-size $TP "
        "--pipeline-model-parallel-size $PP --context-parallel-size $CP --micro-batch-size $MBS "
        "--global-batch-size ${GBS:-32} --seq-length ${SEQ:-1024}\n");
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_EQ(integer(c, "pp"), 4);
    EXPECT_EQ(integer(c, "cp"), 2);
    EXPECT_EQ(integer(c, "mbs"), 2);
    EXPECT_EQ(integer(c, "dp"), 1);
    EXPECT_EQ(integer(c, "grad_acc"), 16);  // 32 / (2 x dp 1)
    EXPECT_EQ(integer(c, "seq"), 1024);
    // A value the script sets stands; one assigned in an undecided branch is said.
    const ImportedConfig set = import_text("TP=4\n: ${TP:=2}\nif [ \"$1\" = x ]; then : ${PP:=2}; fi\n" + kLaunch +
                                           "--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP:-1}\n");
    EXPECT_EQ(integer(set, "tp"), 4);
    EXPECT_EQ(integer(set, "pp"), 2);
    EXPECT_TRUE(contains(set.warnings, "bad.sh:3: if-condition not evaluated: both branches are read "
                                       "(--pipeline-model-parallel-size)"));
    // ${TP=2} on an unset name assigns, in the launch line itself too.
    const ImportedConfig inline_default = import_text(kLaunch + "--tensor-model-parallel-size ${TP=2} "
                                                                "--pipeline-model-parallel-size $TP\n");
    EXPECT_EQ(integer(inline_default, "tp"), 2);
    EXPECT_EQ(integer(inline_default, "pp"), 2);
}

// Gap 3: eval "$CMD" with CMD holding the launch line found no launch line (one word with
// spaces). The evaluated text is read again as commands (bash "Bourne Shell Builtins": eval):
// quotes inside it group, references left in single quotes expand at the eval.
TEST(ImportMegatronScript, EvalReadsTheLaunchLineItHolds) {
    const ImportedConfig c = import_text(
        "ARGS=\"--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2\"\n"                  // 1
        "CMD=\"torchrun --nproc_per_node 16 pretrain_gpt.py $ARGS --data-path \\\"my data\\\"\"\n"  // 2
        "CMD=\"$CMD --micro-batch-size 2 --global-batch-size 64\"\n"                                  // 3
        "eval \"$CMD\"\n");                                                                           // 4
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_EQ(integer(c, "pp"), 2);
    EXPECT_EQ(integer(c, "dp"), 2);
    EXPECT_EQ(integer(c, "grad_acc"), 16);
    EXPECT_EQ(c.field("tp")->from.line, 2);  // the line the evaluated text's line starts on
    EXPECT_FALSE(contains(c.warnings, "is not a --flag"));  // "my data" is one word
    const ImportedConfig late = import_text(
        "CMD='torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP $EXTRA'\n"
        "TP=2\nEXTRA=\"--micro-batch-size 1 --global-batch-size 16\"\n"
        "eval $CMD --pipeline-model-parallel-size 2\n");
    EXPECT_EQ(integer(late, "tp"), 2);
    EXPECT_EQ(integer(late, "pp"), 2);
    EXPECT_EQ(integer(late, "dp"), 2);
    EXPECT_EQ(integer(late, "grad_acc"), 8);
    // eval inside a function, its text in an array.
    const ImportedConfig f = import_text("L=(torchrun --nproc_per_node 4 pretrain_gpt.py)\n"
                                         "go() { eval \"${L[@]}\" --tensor-model-parallel-size $1 --micro-batch-size 1; }\n"
                                         "go 4\n");
    EXPECT_EQ(integer(f, "tp"), 4);
    EXPECT_EQ(integer(f, "dp"), 1);
}

// A variable the script never defines, alone where arguments go (bash splits it into words, which
// the launch environment may fill), is said not to be read; the first value of a flag is that
// flag's (refused only when its value is read: --data-path $4 is not).
TEST(ImportMegatronScript, AnUndefinedVariableWhereArgumentsGoIsSaid) {
    const ImportedConfig c = import_text(kLaunch + "--data-path $DATA $MORE_ARGS\n");
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: $MORE_ARGS is not defined in the script: the arguments it holds are "
                                     "not read"));
    EXPECT_FALSE(contains(c.warnings, "$DATA is not defined"));
    EXPECT_TRUE(contains(import_text("torchrun --nproc_per_node 8 pretrain_gpt.py ${EXTRA} --micro-batch-size 1 "
                                     "--global-batch-size 64\n").warnings,
                         "${EXTRA} is not defined in the script"));
    // After a toggle (--sequence-parallel takes no value) the first word is not a value either.
    const ImportedConfig t = import_text(kLaunch + "--tensor-model-parallel-size 2 --sequence-parallel $MORE_ARGS\n");
    EXPECT_TRUE(contains(t.warnings, "$MORE_ARGS is not defined in the script"));
}

// `source FILE` / `. FILE` was passed over: a variable the sourced file sets was "not defined by
// the script" (exit 2). The file's commands are read where it is sourced now, in the script's
// scope, through ImportContext::read_sourced; one the reader cannot name or read is said.
TEST(ImportMegatronScript, ASourcedFileIsReadWhereItIsSourced) {
    const auto files = [](const std::string& name) -> std::string {
        if (name == "./cfg.sh") return "TP=4\nsize() { PP=$1; }\nARGS=\"--seq-length 2048\"\n";
        if (name == "/etc/cluster.sh") return "NODES=2\n";
        throw InputError(name, "cannot open '" + name + "': no such file");
    };
    ImportContext context;
    context.read_sourced = files;
    const std::string line = kLaunch + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP $ARGS\n";
    const ImportedConfig c = import_megatron("source ./cfg.sh\nsize 2\n" + line, "run.sh", context);
    EXPECT_EQ(integer(c, "tp"), 4);   // assigned in the sourced file
    EXPECT_EQ(integer(c, "pp"), 2);   // a function it defines, called by the script
    EXPECT_EQ(integer(c, "seq"), 2048);
    EXPECT_EQ(c.field("tp")->from.line, 3);  // the flag's line in the script
    EXPECT_FALSE(contains(c.warnings, "source"));
    // `. FILE` with an absolute name; the sourced assignment stands until the script's own.
    const ImportedConfig dot = import_megatron(". /etc/cluster.sh\nTP=8\ntorchrun --nnodes $NODES --nproc_per_node 8 "
                                               "pretrain_gpt.py --micro-batch-size 1 --global-batch-size 64 "
                                               "--tensor-model-parallel-size $TP\n",
                                               "run.sh", context);
    EXPECT_EQ(dot.gpus, 16);
    EXPECT_EQ(integer(dot, "tp"), 8);
    // A file that cannot be read, a name the reader cannot know, no reader (standard input): the
    // script is read on, and the error its missing variable gives says so.
    const auto refused = [&](const std::string& text, const ImportContext& ctx, const std::string& why) {
        try {
            (void)import_megatron(text + line, "run.sh", ctx);
            ADD_FAILURE() << text << ": read";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("$TP, which the script does not define; run.sh:1: " + why), std::string::npos)
                << e.what();
        }
    };
    refused("source ./missing.sh\n", context, "source ./missing.sh: ./missing.sh: cannot open './missing.sh': no such file: "
                                              "what it sets is not read");
    refused(". $CONFIG\n", context, ". $CONFIG: its file is not known ($CONFIG, which the script does not define)");
    refused("source ./cfg.sh\n", ImportContext{}, "source ./cfg.sh: the script's folder is not known");
    // A file that sources itself stops at the nesting bound, said.
    ImportContext self;
    self.read_sourced = [](const std::string&) { return std::string("TP=2\nsource ./again.sh\n"); };
    const ImportedConfig loop =
        import_megatron("source ./again.sh\n" + kLaunch + "--tensor-model-parallel-size $TP\n", "run.sh", self);
    EXPECT_EQ(integer(loop, "tp"), 2);
    EXPECT_TRUE(contains(loop.warnings, "run.sh:1: source ./again.sh: past 32 nested calls, evals and sourced files"));
}

// A Python line before the training launch that is no launch (a data preprocessor, a checker) was
// read as the launch, the training line after it as a second launch "not read". It is set aside,
// said, when its script's name says neither train nor finetune and its words, all known, hold
// none of the flags every training launch is given.
TEST(ImportMegatronScript, AHelperPythonLineIsNoLaunch) {
    const ImportedConfig c = import_text(
        "python tools/preprocess_data.py --input corpus.json --output-prefix my-gpt2 --workers 8\n"  // 1
        "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
        "--micro-batch-size 1 --global-batch-size 64\n");                                          // 2
    EXPECT_EQ(integer(c, "tp"), 2);
    EXPECT_EQ(integer(c, "dp"), 4);         // 8 GPUs / tp 2: the torchrun line is the launch
    EXPECT_EQ(integer(c, "grad_acc"), 16);  // 64 / (1 x dp 4)
    EXPECT_TRUE(contains(c.warnings, "bad.sh:1: runs preprocess_data.py with none of Megatron-LM's model, batch or "
                                     "parallel flags"));
    EXPECT_FALSE(contains(c.warnings, "launch lines: the first is read"));
    // A script with nothing else launches nothing, and says which line it set aside.
    try {
        import_text("python check_copyright.py --from-year 2019\n");
        FAIL() << "a checker is no launch";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("no Megatron arguments found"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad.sh:1: runs check_copyright.py"), std::string::npos) << e.what();
    }
    // A training flag, a name that says train, or a word the script leaves open: a launch, as before.
    EXPECT_EQ(integer(import_text("python my_gpt.py --micro-batch-size 2 --global-batch-size 8\n"), "mbs"), 2);
    EXPECT_EQ(integer(import_text("python examples/multimodal/train.py --data-path x --micro-batch-size 3\n"), "mbs"), 3);
    EXPECT_FALSE(contains(import_text("python run.py $ARGS --micro-batch-size 1 --global-batch-size 4\n").warnings,
                          "with none of Megatron-LM's"));
}
