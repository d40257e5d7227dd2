// An evaluation-only external data set never passes on nothing (docs/interface.md, `validate
// --check`): every quantity its rows measure rests on at least compared_rows_min compared rows
// (default 1) whether or not a figure target names it, and a figure over no row prints N/A.
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/validation/external_eval.hpp"
#include "preflight/validation/external_runs.hpp"
#include "run_cli.hpp"

using namespace preflight;
using namespace preflight::validation;
namespace fs = std::filesystem;

namespace {

const char* kHeader =
    "source_ref,model,model_config,gpu,nodes,gpus,dp,tp,pp,cp,vpp,micro_batch_size,grad_accum,seq_len,"
    "global_batch_tokens,zero_stage,sequence_parallel,recompute,recompute_source,precision,precision_source,compile,"
    "tokens_per_s_per_gpu,mfu_pct,hfu_pct,peak_mem_gib,peak_mem_kind,num_params,outcome";
// llm-foundry README.md:138 (H100 BF16 table: MPT-1B, seq 2048, 8 GPUs, mbs 14, ga 1), without its
// outcome column: each test appends one.
const std::string kRowStem =
    "README.md:138,1b,mpt-1b,h100-sxm-80gb,,8,8,1,1,1,1,14,1,2048,229376,3,0,none,activation_checkpointing=False,"
    "bf16-mixed,amp_bf16/DEFAULT,0,45455,41.82,41.82,";

// A data set folder of `rows` (CSV lines after the header) and `targets` (a JSON object, or ""
// for none), under its own parent so `validate --check` on the parent sees it alone.
fs::path write_set(const std::string& name, const std::string& rows, const std::string& targets) {
    const fs::path root = fs::temp_directory_path() / ("preflight-evalgate-" + std::to_string(::getpid())) / name;
    const fs::path folder = root / "set";
    fs::create_directories(folder);
    std::ofstream(folder / "runs.csv") << kHeader << "\n" << rows;
    std::ofstream(folder / "dataset.json")
        << R"({"name": ")" << name << R"(", "csv": "runs.csv", "schema": "published-runs", "evaluation_only": true,
              "framework": "pytorch", "gpu": "h100-sxm-80gb", "source": "test")"
        << (targets.empty() ? "" : ", \"targets\": " + targets) << "}";
    return folder;
}

// Two rows that state tokens/s (45,455) and a reserved peak (40 GiB), both failed: none is compared.
std::string failed_rows() {
    const std::string row = kRowStem + "40.0,reserved_max_over_ranks,1315950592,failed_other\n";
    return row + row;
}

ExternalEvaluation evaluate(const fs::path& folder) {
    return evaluate_external_dataset(read_external_dataset(folder, test::data_dir()), test::data_dir());
}

bool has(const std::vector<std::string>& v, const std::string& text) {
    for (const std::string& s : v)
        if (s.find(text) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST(EvaluationOnlyGates, NoTargetsAndNoRowComparedFails) {
    const fs::path folder = write_set("none", failed_rows(), "");
    const ExternalEvaluation ev = evaluate(folder);
    EXPECT_EQ(ev.tokens.n, 0);
    EXPECT_EQ(ev.memory.n, 0);
    EXPECT_EQ(ev.skipped, 2);
    // Both measured quantities, each on no row (the default minimum is 1).
    ASSERT_EQ(ev.failures.size(), 2u);
    EXPECT_TRUE(has(ev.failures, "tokens/s per GPU: no row compared")) << ev.failures[0];
    EXPECT_TRUE(has(ev.failures, "reserved peak: no row compared")) << ev.failures[1];
    const auto r = test::run_preflight("validate --check '" + folder.parent_path().string() + "' --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("OUT OF TARGET: tokens/s per GPU: no row compared"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("within the data set's targets"), std::string::npos) << r.out;
}

TEST(EvaluationOnlyGates, RowsMinimumHoldsWithoutFigureTargets) {
    // compared_rows_min alone, and no row compared: fails (was: passed, the minimum being read
    // only beside a figure target).
    fs::path folder = write_set("min5", failed_rows(), R"({"compared_rows_min": 5})");
    ExternalEvaluation ev = evaluate(folder);
    ASSERT_EQ(ev.failures.size(), 2u);
    EXPECT_TRUE(has(ev.failures, "tokens/s per GPU: no row compared"));
    auto r = test::run_preflight("validate --check '" + folder.parent_path().string() + "' --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    // One ok row that states tokens/s only, against a minimum of 2: 1 < 2 fails; a minimum of 1 passes.
    const std::string ok_row = kRowStem + ",,1315950592,ok\n";
    folder = write_set("min2", ok_row, R"({"compared_rows_min": 2})");
    ev = evaluate(folder);
    ASSERT_EQ(ev.failures.size(), 1u);
    EXPECT_NE(ev.failures[0].find("tokens/s per GPU: only 1 rows compared, target 2 (compared_rows_min)"),
              std::string::npos) << ev.failures[0];
    folder = write_set("min1", ok_row, R"({"compared_rows_min": 1})");
    EXPECT_TRUE(evaluate(folder).failures.empty());
    r = test::run_preflight("validate --check '" + folder.parent_path().string() + "' --no-report-files");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(EvaluationOnlyGates, FiguresOverNoRowPrintNotAvailable) {
    const fs::path folder = write_set("na", failed_rows(), "");
    const ExternalEvaluation ev = evaluate(folder);
    // Unknown, not 0.0 %: both quantities' rows, since both are measured.
    EXPECT_NE(ev.markdown.find("| tokens/s per GPU | 0 | N/A | N/A | N/A | N/A |"), std::string::npos) << ev.markdown;
    EXPECT_NE(ev.markdown.find("| peak reserved memory | 0 | N/A | N/A | N/A | N/A |"), std::string::npos)
        << ev.markdown;
    EXPECT_EQ(ev.markdown.find("0.0 %"), std::string::npos) << ev.markdown;
    EXPECT_TRUE(ev.summary["tokens_per_s_per_gpu_error"]["p50"].is_null());
    EXPECT_TRUE(ev.summary["tokens_per_s_per_gpu_median_signed_error"].is_null());
    EXPECT_TRUE(ev.summary["peak_reserved_median_signed_error"].is_null());
}
