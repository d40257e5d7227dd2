// The launch-script reader's positional parameters, loops, subshells and bounds (audit of
// 2026-11-30, helper-46: shift / set -- ignored, calls cut by the nesting bound unsaid, subshell
// and pipeline assignments leaking, uncalled helpers applied, calls costing the whole variable
// table). Hand-written scripts; the values asserted are the ones bash uses.
#include <gtest/gtest.h>

#include <string>

#include "megatron_script_test_helpers.hpp"
#include "preflight/planner/error.hpp"

using namespace preflight;
using namespace preflight::test::megatron_script;

// A1: `shift` and `set --` were ignored in a function: $1 and "$@" kept the call's words, tp 2
// was read where bash uses 4, silently. They now change the parameters as bash's builtins do.
TEST(ImportMegatronScript, ShiftAndSetChangeThePositionalParameters) {
    const ImportedConfig c = import_text(
        "launch() {\n"
        "  local nodes=$1; shift\n"
        "  local tp=$1; shift\n"
        "  local pp=$1; shift\n"
        "  " + kLaunch + "--tensor-model-parallel-size $tp --pipeline-model-parallel-size $pp \"$@\"\n"
        "}\n"
        "launch 2 4 2 --sequence-parallel\n");
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_EQ(integer(c, "pp"), 2);
    EXPECT_EQ(integer(c, "dp"), 1);
    EXPECT_TRUE(test::tree_import::bool_field(c, "sp"));
    EXPECT_FALSE(contains(c.warnings, "is not a --flag"));  // "$@" no longer holds 2 4 2
    const ImportedConfig set = import_text("f() { set -- 8 1; " + kLaunch +
                                           "--tensor-model-parallel-size $1 --pipeline-model-parallel-size $2; }\nf 2 4\n");
    EXPECT_EQ(integer(set, "tp"), 8);
    EXPECT_EQ(integer(set, "pp"), 1);
    // shift 2 with one parameter left shifts nothing (bash: status 1); $# counts what is left.
    const ImportedConfig over = import_text("f() { shift 2; " + kLaunch + "--tensor-model-parallel-size $1 "
                                            "--pipeline-model-parallel-size $#; }\nf 4\n");
    EXPECT_EQ(integer(over, "tp"), 4);
    EXPECT_EQ(integer(over, "pp"), 1);
    // At the top level `set --` gives the script's own parameters; set -e leaves them.
    const ImportedConfig top = import_text("set -e -o pipefail\nset -- 4 2\nshift\n" + kLaunch +
                                           "--tensor-model-parallel-size $1 --pipeline-model-parallel-size ${2:-1}\n");
    EXPECT_EQ(integer(top, "tp"), 2);
    EXPECT_EQ(integer(top, "pp"), 1);
    // Past a word the reader does not know ($EXTRA may be any number of words) $N is not known:
    // exit 2 naming it, never a stale value.
    test::tree_import::expect_input_error(
        [] { import_text("f() { shift 2; " + kLaunch + "--tensor-model-parallel-size $1; }\nf $EXTRA 2 4\n"); },
        {"bad.sh:", "--tensor-model-parallel-size", "uses $1"});
}

// A1: the argument loop inside a function read its body once: the first arm ran, pp stayed 1
// where bash uses 2. A loop whose test is decided is now run pass by pass; one that is not
// reads every arm and names every flag it sets.
TEST(ImportMegatronScript, AnArgumentLoopIsRunOrSaidForEveryFlag) {
    const std::string parse =
        "TP=1; PP=1\n"                                                   // 1
        "parse_args() {\n"                                               // 2
        "  while [[ $# -gt 0 ]]; do\n"                                   // 3
        "    case \"$1\" in\n"                                           // 4
        "      --tp) TP=\"$2\"; shift 2;;\n"                             // 5
        "      --pp) PP=\"$2\"; shift 2;;\n"                             // 6
        "      --big) TP=2; PP=4; shift;;\n"                             // 7
        "      *) shift;;\n"                                             // 8
        "    esac\n"                                                     // 9
        "  done\n"                                                       // 10
        "}\n";                                                           // 11
    const std::string line = kLaunch + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n";
    const ImportedConfig c = import_text(parse + "parse_args --tp 4 --seed 3 --pp 2\n" + line);
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_EQ(integer(c, "pp"), 2);
    EXPECT_FALSE(contains(c.warnings, "not evaluated"));
    // `while true` with `break` in an arm: run until the break.
    const ImportedConfig brk = import_text(
        "TP=1\nf() { while true; do case $1 in --tp) TP=$2; shift 2;; *) break;; esac; done; }\nf --tp 2\n" +
        kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_EQ(integer(brk, "tp"), 2);
    EXPECT_FALSE(contains(brk.warnings, "not evaluated"));
    // A break under a test the reader cannot decide: the pass is read as undecided, said.
    const ImportedConfig maybe = import_text("TP=1\nwhile true; do\n  if [ -f x ]; then break; fi\n  TP=2; break\ndone\n" +
                                             kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_EQ(integer(maybe, "tp"), 2);
    EXPECT_TRUE(contains(maybe.warnings, "bad.sh:2: loop not evaluated: a break or continue in it is not decided; its "
                                         "body is read once (--tensor-model-parallel-size)"));
    // An argument the reader does not know: $# is not known, every arm is read and each flag
    // any arm sets is named.
    const ImportedConfig open = import_text(parse + "parse_args --big $EXTRA\n" + line);
    EXPECT_TRUE(contains(open.warnings, "bad.sh:4: case not evaluated: every branch is read "
                                        "(--tensor-model-parallel-size, --pipeline-model-parallel-size)"));
    // A counting loop runs its passes.
    const ImportedConfig count = import_text("i=0; A=\nwhile [ $i -lt 2 ]; do A=\"$A --sequence-parallel\"; i=$((i + 1)); done\n" +
                                             kLaunch + "--tensor-model-parallel-size $i $A\n");
    EXPECT_EQ(integer(count, "tp"), 2);
    EXPECT_FALSE(contains(count.warnings, "not evaluated"));
    // One that never ends is read as undecided after kMaxLoopPasses passes.
    const ImportedConfig endless = import_text("TP=1\nwhile true; do TP=2; done\n" + kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_TRUE(contains(endless.warnings, "bad.sh:2: loop not evaluated after 1000 passes: its body is read once more "
                                           "(--tensor-model-parallel-size)"));
}

// A for loop over known words was read once with its variable undefined: a sweep
// `for TP in 2 4; do torchrun ... $TP; done` gave "$TP, which the script does not define". It runs
// as bash runs it now: each word in turn, break and continue followed, the first launch read and
// the passes after it said.
TEST(ImportMegatronScript, AForLoopOverKnownWordsRunsItsPasses) {
    const std::string line = kLaunch + "--tensor-model-parallel-size $TP\n";
    const ImportedConfig sweep = import_text("for TP in 2 4 8; do\n  " + line + "done\n");
    EXPECT_EQ(integer(sweep, "tp"), 2);
    EXPECT_TRUE(contains(sweep.warnings, "bad.sh:1: the for loop launches on its pass with TP=2, which is read; its later "
                                         "passes (TP=4, 8) are not"));
    EXPECT_FALSE(contains(sweep.warnings, "not evaluated"));
    // Without a launch in it, the variable keeps the last word; the words split as bash splits
    // them ("$SIZES" unquoted: three words); break and continue are followed.
    const ImportedConfig last = import_text("SIZES=\"1 2 4\"\nfor TP in $SIZES; do :; done\n" + line);
    EXPECT_EQ(integer(last, "tp"), 4);
    const ImportedConfig brk = import_text(
        "for t in 1 2 4 8; do\n  TP=$t\n  if [ $t -ge 2 ]; then break; fi\ndone\n" + line);
    EXPECT_EQ(integer(brk, "tp"), 2);
    const ImportedConfig cont = import_text(
        "A=\nfor t in 1 2 3; do\n  if [ $t = 2 ]; then continue; fi\n  A=\"$A$t\"\ndone\n" + kLaunch + "--seq-length $A\n");
    EXPECT_EQ(integer(cont, "seq"), 13);  // passes 1 and 3
    // A break inside a function ends no loop of its caller (bash: break is only meaningful in a
    // loop of the function itself): every pass runs.
    const ImportedConfig callee = import_text("stop() { break; }\nfor t in 1 2 8; do TP=$t; stop; done\n" + line);
    EXPECT_EQ(integer(callee, "tp"), 8);
    // An empty list runs no pass; a loop in a branch that does not run sets nothing.
    const ImportedConfig none = import_text("TP=2\nEMPTY=\nfor TP in $EMPTY; do TP=8; done\n" + line);
    EXPECT_EQ(integer(none, "tp"), 2);
    const ImportedConfig off = import_text("TP=2\nif false; then for TP in 4; do :; done; fi\n" + line);
    EXPECT_EQ(integer(off, "tp"), 2);
    // A list the reader cannot know (a command's output, a glob, an undefined variable, a brace
    // expansion it does not expand): read
    // once, said, and the variable's use names the loop.
    for (const std::string list : {"$(seq 2 4)", "configs/*.sh", "$UNDEFINED", "{2..4}"}) {
        const std::string text = "for TP in " + list + "; do\n  " + line + "done\n";
        try {
            (void)import_text(text);
            ADD_FAILURE() << list << ": read without its loop variable";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("$TP, which the for loop at line 1 sets from a list it cannot evaluate"),
                      std::string::npos)
                << e.what();
        }
    }
    // for (( )) and `for NAME` over "$@" stay read once, marked.
    const ImportedConfig arith = import_text("TP=1\nfor ((i = 0; i < 2; i++)); do TP=2; done\n" + line);
    EXPECT_EQ(integer(arith, "tp"), 2);
    EXPECT_TRUE(contains(arith.warnings, "bad.sh:2: loop not evaluated: its body is read once (--tensor-model-parallel-size)"));
}

// A2: a call past 32 nested calls was dropped silently (tp 2 where bash uses 8), and a launch
// line under it gave "no Megatron arguments found" without naming the bound.
TEST(ImportMegatronScript, ACallCutByTheNestingBoundIsSaid) {
    const ImportedConfig c = import_text(
        "TP=2\n"
        "pick() { if [ \"$1\" -gt 0 ]; then pick $(($1 - 1)); else TP=8; fi; }\n"
        "pick 40\n" +
        kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_TRUE(contains(c.warnings, "bad.sh:2: function pick is called past 32 nested calls and evals: its body is not "
                                     "read there"));
    test::tree_import::expect_input_error(
        [] {
            import_text("go() { if [ \"$1\" -gt 0 ]; then go $(($1 - 1)); else " + kLaunch + "; fi; }\ngo 40\n");
        },
        {"no Megatron arguments found", "bad.sh:1: function go is called past 32 nested calls"});
}

// A3: ( ... ) and the commands of a pipeline run in subshells; their assignments leaked.
TEST(ImportMegatronScript, SubshellsAndPipelinesKeepTheirAssignments) {
    const std::string line = kLaunch + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n";
    const ImportedConfig sub = import_text("TP=2; PP=1\n( TP=8; echo x )\n" + line);
    EXPECT_EQ(integer(sub, "tp"), 2);
    const ImportedConfig pipe = import_text("TP=2; PP=1\nsetup() { TP=8; PP=4; }\nsetup | tee /dev/null\n"
                                            "{ PP=2; } | cat\n" + line);
    EXPECT_EQ(integer(pipe, "tp"), 2);
    EXPECT_EQ(integer(pipe, "pp"), 1);
    // Not piped: a group or an if runs in the script itself; a launch in a pipeline is read.
    const ImportedConfig kept = import_text("TP=2; PP=1\n{ TP=4; }\nif true; then PP=2; fi\n" + line);
    EXPECT_EQ(integer(kept, "tp"), 4);
    EXPECT_EQ(integer(kept, "pp"), 2);
    const ImportedConfig logged = import_text("TP=4\nrun() { " + kLaunch + "--tensor-model-parallel-size $TP; }\n"
                                              "run 2>&1 | tee train.log\n");
    EXPECT_EQ(integer(logged, "tp"), 4);
    // A value extended, then overwritten, in a subshell is put back as it was; one extended in
    // a group or an if that is not piped is kept.
    const ImportedConfig built = import_text(
        "ARGS=\"--tensor-model-parallel-size 2\"\n"
        "( ARGS=\"$ARGS --sequence-parallel\"; ARGS=bad )\n"
        "{ ARGS+=\" --pipeline-model-parallel-size 4\"; } | cat\n"
        "if true; then ARGS=\"$ARGS --context-parallel-size 1\"; fi\n"
        "( if true; then ARGS=\"$ARGS x\"; fi; ARGS=y )\n" +
        kLaunch + "$ARGS\n");
    EXPECT_EQ(integer(built, "tp"), 2);
    EXPECT_EQ(integer(built, "pp"), 1);
    EXPECT_EQ(integer(built, "cp"), 1);
    EXPECT_FALSE(test::tree_import::bool_field(built, "sp"));
    EXPECT_FALSE(contains(built.warnings, "is not a --flag"));
    // set -- and functions defined in a subshell stay there too.
    const ImportedConfig args = import_text("f() { ( set -- 8 ); TP=$1; }\nf 2\n" + kLaunch + "--tensor-model-parallel-size $TP\n");
    EXPECT_EQ(integer(args, "tp"), 2);
}

// A4: every uncalled function was read in order on one state: a helper bash never runs set tp 1.
TEST(ImportMegatronScript, AnUncalledHelperChangesNothing) {
    const ImportedConfig c = import_text(
        "TP=4\n"
        "debug_settings() { TP=1; }\n"
        "train() { " + kLaunch + "--tensor-model-parallel-size $TP; }\n"
        "\"$@\"\n");
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_TRUE(contains(c.warnings, "bad.sh:3: function train is defined but never called: its body is read at the end, "
                                     "called with no arguments (the torchrun launch line"));
    EXPECT_FALSE(contains(c.warnings, "debug_settings"));
}

// A5: each call walked every variable and `local` copied a hidden value: 10,000 variables and a
// doubling chain of calls took 80 s. A call now costs what its words hold.
TEST(ImportMegatronScript, CallsDoNotCostTheVariableTable) {
    std::string text;
    for (int i = 0; i < 20000; ++i) text += "V" + std::to_string(i) + "=x\n";
    text += "B=x\n";
    for (int i = 0; i < 20; ++i) text += "B=\"$B$B\"\n";  // 1 MiB
    text += "f0() { local B; }\n";
    for (int i = 1; i <= 15; ++i)
        text += "f" + std::to_string(i) + "() { f" + std::to_string(i - 1) + "; f" + std::to_string(i - 1) + "; }\n";
    text += "f15\n" + kLaunch + "--tensor-model-parallel-size 2\n";
    // Read to the end (about 0.2 s where it took minutes; tests assert no wall-clock time).
    const ImportedConfig c = import_text(text);
    EXPECT_EQ(integer(c, "tp"), 2);
}

// A6, A7: eval -- WORDS reads WORDS; (( NAME = EXPR )) and let assign, or leave NAME unresolved.
TEST(ImportMegatronScript, EvalDashDashAndArithmeticAssignments) {
    const ImportedConfig e = import_text("CMD=\"" + kLaunch + "--tensor-model-parallel-size 2\"\neval -- \"$CMD\"\n");
    EXPECT_EQ(integer(e, "tp"), 2);
    EXPECT_EQ(integer(e, "dp"), 4);
    EXPECT_FALSE(contains(e.warnings, "is not a --flag"));
    const ImportedConfig a = import_text("TP=2; (( TP = TP * 2 )); let PP=1 'CP += 1'; ((PP++))\n" + kLaunch +
                                         "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n");
    EXPECT_EQ(integer(a, "tp"), 4);
    EXPECT_EQ(integer(a, "pp"), 2);
    test::tree_import::expect_input_error(
        [] { import_text("TP=2\n(( TP = TP > 1 ))\n" + kLaunch + "--tensor-model-parallel-size $TP\n"); },
        {"bad.sh:", "--tensor-model-parallel-size", "$(( TP = TP > 1 ))"});
}
