// The launch-script reader's script folder: $0, ${BASH_SOURCE[0]}, $PWD, the $(dirname ...),
// $(basename ...), $(readlink -f ...), $(realpath ...) and $(cd DIR && pwd) substitutions, and
// `cd`. Launch scripts find the files beside them so (Megatron-LM's
// examples/post_training/modelopt/finetune.sh: SCRIPT_DIR="$(dirname "$(readlink -f "$0")")",
// then source "${SCRIPT_DIR}/conf/arguments.sh"); before, each such word was "$(...)", not known.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "megatron_script_test_helpers.hpp"
#include "preflight/planner/error.hpp"

using namespace preflight;
using namespace preflight::test::megatron_script;

namespace {

// A script run.sh in /work/jobs, beside common.sh (TP=4) and conf/model.sh (PP=2, and it sources
// ../common.sh through its own ${BASH_SOURCE[0]}); the reader records each name it is handed.
struct Folder {
    std::map<std::string, std::string> files{
        {"/work/jobs/common.sh", "TP=4\n"},
        {"/work/jobs/conf/model.sh", "PP=2\nsource \"$(dirname \"${BASH_SOURCE[0]}\")/../common.sh\"\n"}};
    std::vector<std::string> asked;
    ImportContext context() {
        ImportContext c;
        c.script_folder = "/work/jobs";
        c.read_sourced = [this](const std::string& name) {
            asked.push_back(name);
            const auto it = files.find(std::filesystem::path(name).lexically_normal().string());
            if (it == files.end()) throw InputError(name, "cannot open '" + name + "': no such file");
            return it->second;
        };
        return c;
    }
};

const std::string kLine = kLaunch + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP:-1}\n";

std::string refusal(const std::string& text, const ImportContext& context) {
    try {
        (void)import_megatron(text, "run.sh", context);
    } catch (const InputError& e) {
        return e.what();
    }
    return "read";
}

}  // namespace

TEST(ImportMegatronPaths, TheScriptsFolderFindsTheFilesBesideIt) {
    Folder f;
    // $0 is the script's file name, the folder its working folder: dirname gives ".", read from there.
    const ImportedConfig dirname0 = import_megatron("source \"$(dirname \"$0\")/common.sh\"\n" + kLine, "run.sh", f.context());
    EXPECT_EQ(integer(dirname0, "tp"), 4);
    EXPECT_EQ(f.asked.back(), "/work/jobs/./common.sh");
    // The folder as an absolute path, by cd and pwd or by readlink -f; a sourced file's own
    // ${BASH_SOURCE[0]} is its name as sourced.
    const ImportedConfig cd_pwd = import_megatron(
        "DIR=$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" >/dev/null 2>&1 && pwd)\nsource $DIR/conf/model.sh\n" + kLine, "run.sh",
        f.context());
    EXPECT_EQ(integer(cd_pwd, "tp"), 4);  // from ../common.sh, found through conf/model.sh's own name
    EXPECT_EQ(integer(cd_pwd, "pp"), 2);
    EXPECT_EQ(f.asked.back(), "/work/jobs/conf/../common.sh");
    const ImportedConfig readlink = import_megatron(
        "SCRIPT_DIR=\"$(dirname \"$(readlink -f \"$0\")\")\"\nsource \"${SCRIPT_DIR}/conf/model.sh\"\n" + kLine, "run.sh",
        f.context());
    EXPECT_EQ(integer(readlink, "pp"), 2);
    EXPECT_FALSE(contains(readlink.warnings, "source"));
    // After the sourced file, ${BASH_SOURCE[0]} is the script's own again; $PWD is the folder.
    const ImportedConfig after = import_megatron(
        "source ./conf/model.sh\nsource \"$(dirname \"${BASH_SOURCE[0]}\")/common.sh\"\nCKPT=$PWD/ckpt\n" + kLine, "run.sh",
        f.context());
    EXPECT_EQ(f.asked.back(), "/work/jobs/./common.sh");
    EXPECT_EQ(integer(after, "tp"), 4);
}

// POSIX dirname and basename (XCU "dirname", "basename": trailing slashes and the last
// component; a suffix removed unless it is the whole name), realpath by name.
TEST(ImportMegatronPaths, PathCommandsPrintWhatPosixSays) {
    Folder f;
    const auto tp_of = [&](const std::string& word) {
        return integer(import_megatron("TP=" + word + "\n" + kLine, "run.sh", f.context()), "tp");
    };
    EXPECT_EQ(tp_of("$(basename $(dirname /opt/8/model.pt))"), 8);
    EXPECT_EQ(tp_of("$(dirname 2//x//)"), 2);           // trailing and doubled slashes
    EXPECT_EQ(tp_of("$(basename /runs/tp/4/)"), 4);     // the last component, trailing slash dropped
    EXPECT_EQ(tp_of("$(basename /runs/1.sh .sh)"), 1);
    EXPECT_EQ(tp_of("$(basename -- 2)"), 2);
    EXPECT_EQ(tp_of("$(basename $(realpath ../jobs/./8/../2))"), 2);  // /work/jobs/2
    EXPECT_EQ(tp_of("$(basename $(cd /a/b/../../8 && pwd -P))"), 8);  // /8
    // Names its words leave open, or a command whose output only the machine knows: unresolved.
    EXPECT_NE(refusal("TP=$(dirname $MODEL_DIR)\n" + kLine, f.context())
                  .find("$(dirname $MODEL_DIR), whose $MODEL_DIR the script does not define"),
              std::string::npos);
    EXPECT_NE(refusal("TP=$(nproc)\n" + kLine, f.context()).find("$(...), which the script does not define"),
              std::string::npos);
    EXPECT_NE(refusal("TP=$(readlink $LINK)\n" + kLine, f.context()).find("$LINK"), std::string::npos);
    EXPECT_NE(refusal("TP=$(readlink x)\n" + kLine, f.context()).find("$(...)"), std::string::npos);  // a link's target
}

// `cd DIR` moves $PWD (by name, as bash's logical cd); a folder it cannot know leaves $PWD, and
// what needs it, unknown and said. A script on standard input has no folder.
TEST(ImportMegatronPaths, CdMovesTheWorkingFolderAndUnknownFoldersAreSaid) {
    Folder f;
    const ImportedConfig moved = import_megatron("cd conf\nsource ../common.sh\n" + kLine, "run.sh", f.context());
    EXPECT_EQ(integer(moved, "tp"), 4);
    EXPECT_EQ(f.asked.back(), "/work/jobs/conf/../common.sh");
    const std::string lost = refusal("cd $MEGATRON_PATH\nsource ./common.sh\n" + kLine, f.context());
    EXPECT_NE(lost.find("run.sh:2: source ./common.sh: its folder is not known ($PWD, after the cd at line 1 ($MEGATRON_PATH, "
                        "which the script does not define)): what it sets is not read"),
              std::string::npos)
        << lost;
    const std::string pwd = refusal("cd $MEGATRON_PATH\nTP=$(pwd)\n" + kLine, f.context());
    EXPECT_NE(pwd.find("$(pwd), which needs the working folder: $PWD, after the cd at line 1"), std::string::npos) << pwd;
    const std::string undecided =
        refusal("if [ -d /scratch ]; then cd /scratch; fi\nsource ./common.sh\n" + kLine, f.context());
    EXPECT_NE(undecided.find("after the cd at line 1, under an undecided test"), std::string::npos) << undecided;
    ImportContext from_stdin;
    from_stdin.read_sourced = f.context().read_sourced;
    const std::string no_folder = refusal("TP=$(pwd)\n" + kLine, from_stdin);
    EXPECT_NE(no_folder.find("$(pwd), which needs the working folder: the script's folder is not known (it was read from "
                             "standard input)"),
              std::string::npos)
        << no_folder;
    EXPECT_NE(refusal("TP=$0\n" + kLine, from_stdin).find("$0, which the script does not define"), std::string::npos);
}

// `source FILE WORDS`: the words are FILE's $1 ... while it is read (bash "Bash Builtins":
// source), the caller's again after it; without words FILE sees the caller's (a function's).
TEST(ImportMegatronPaths, ASourcedFilesWordsAreItsPositionalParameters) {
    Folder f;
    f.files["/work/jobs/args.sh"] = "TP=$1\nPP=${2:-1}\n";
    const ImportedConfig given = import_megatron("source ./args.sh 4 2\n" + kLine, "run.sh", f.context());
    EXPECT_EQ(integer(given, "tp"), 4);
    EXPECT_EQ(integer(given, "pp"), 2);
    const ImportedConfig in_function =
        import_megatron("setup() { source ./args.sh; }\nsetup 2\n" + kLine, "run.sh", f.context());
    EXPECT_EQ(integer(in_function, "tp"), 2);  // the function's $1
    EXPECT_EQ(integer(in_function, "pp"), 1);
    // After it, $1 is the script's own again: not known.
    EXPECT_NE(refusal("source ./args.sh 4\nTP=$1\n" + kLine, f.context()).find("$1"), std::string::npos);
}

// The script's own words where the user gives them (`--from-arg`): $1 ..., "$@" and $# as bash
// gives them to `bash run.sh 4 2`; past them $N is empty. Without them $1 is not known.
TEST(ImportMegatronPaths, TheScriptsWordsAreThoseTheUserGives) {
    ImportContext given;
    given.script_args = std::vector<std::string>{"4", "2"};
    const std::string text = "TP=$1\nPP=$2\nEXTRA=\"$3\"\n[ $# -eq 2 ] && CP=1\n" + kLaunch +
                             "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
                             "--context-parallel-size $CP $EXTRA\n";
    const ImportedConfig c = import_megatron(text, "run.sh", given);
    EXPECT_EQ(integer(c, "tp"), 4);
    EXPECT_EQ(integer(c, "pp"), 2);
    EXPECT_EQ(integer(c, "cp"), 1);  // $# decided the test
    EXPECT_FALSE(contains(c.warnings, "EXTRA"));  // $3: empty, not unknown
    EXPECT_NE(refusal(text, ImportContext{}).find("$1, a command-line word the reader is not given (a script's own: "
                                                  "--from-arg)"),
              std::string::npos);
    // "$@" standing where arguments go, not given: said.
    const ImportedConfig rest = import_megatron(kLaunch + "\"$@\"\n", "run.sh", ImportContext{});
    EXPECT_TRUE(contains(rest.warnings, "run.sh:1: $@, a command-line word the reader is not given (a script's own: "
                                        "--from-arg): the arguments it holds are not read"));
    // "$@" passes them on; shift moves them.
    ImportContext one;
    one.script_args = std::vector<std::string>{"--tensor-model-parallel-size", "8"};
    EXPECT_EQ(integer(import_megatron(kLaunch + "\"$@\"\n", "run.sh", one), "tp"), 8);
    EXPECT_EQ(integer(import_megatron("shift\n" + kLaunch + "--tensor-model-parallel-size $1\n", "run.sh", one), "tp"), 8);
}
