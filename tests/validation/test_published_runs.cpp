// Published benchmark tables as external data sets (published-runs schema): each checked-in
// data set parses to the rows its source states, bad rows are refused naming the file, the
// line and the column, and the evaluation-only check gates on the data set's targets.
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include <gtest/gtest.h>

#include "catalog_fixture.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/validation/external_eval.hpp"
#include "preflight/validation/external_runs.hpp"
#include "preflight/validation/throughput_fit.hpp"
#include "run_cli.hpp"

using namespace preflight;
using namespace preflight::validation;
namespace fs = std::filesystem;

namespace {

const fs::path kExternal = test::data_dir() / "measurements" / "external";

const char* kHeader =
    "source_ref,model,model_config,gpu,nodes,gpus,dp,tp,pp,cp,vpp,micro_batch_size,grad_accum,seq_len,"
    "global_batch_tokens,zero_stage,sequence_parallel,recompute,recompute_source,precision,precision_source,compile,"
    "tokens_per_s_per_gpu,mfu_pct,hfu_pct,peak_mem_gib,peak_mem_kind,num_params,outcome";
// llm-foundry README.md:138 (H100 BF16 table: MPT-1B, seq 2048, 8 GPUs, mbs 14, ga 1).
const char* kRow =
    "README.md:138,1b,mpt-1b,h100-sxm-80gb,,8,8,1,1,1,1,14,1,2048,229376,3,0,none,activation_checkpointing=False,"
    "bf16-mixed,amp_bf16/DEFAULT,0,45455,41.82,41.82,,,1315950592,ok";

fs::path temp_dir() {
    const fs::path d = fs::temp_directory_path() / ("preflight-pub-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

fs::path write_csv(const std::string& name, const std::string& row) {
    const fs::path f = temp_dir() / name;
    std::ofstream(f) << kHeader << "\n" << row << "\n";
    return f;
}

std::string error_of(const std::string& name, const std::string& row) {
    try {
        read_published_runs_csv(write_csv(name, row), test::data_dir());
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

// kRow with its `index`-th field (0-based) replaced.
std::string with_field(std::size_t index, const std::string& value) {
    std::string row = kRow;
    std::size_t begin = 0;
    for (std::size_t i = 0; i < index; ++i) begin = row.find(',', begin) + 1;
    const std::size_t end = row.find(',', begin);
    return row.replace(begin, end - begin, value);
}

const ExternalRun& by_ref(const ExternalDataset& d, const std::string& ref) {
    for (const auto& r : d.runs)
        if (r.source_ref == ref) return r;
    throw std::runtime_error("no row " + ref);
}

}  // namespace

TEST(PublishedRuns, RowBecomesModelAndPlan) {
    const auto runs = read_published_runs_csv(write_csv("one.csv", kRow), test::data_dir());
    ASSERT_EQ(runs.size(), 1u);
    const ExternalRun& r = runs[0];
    EXPECT_EQ(r.id, "one.csv:2");
    EXPECT_EQ(r.source_ref, "README.md:138");
    EXPECT_EQ(r.gpu, "h100-sxm-80gb");
    EXPECT_EQ(r.model.hidden, 2048);  // mpt-1b.yaml: d_model 2048, 24 layers, 16 heads
    EXPECT_EQ(r.model.layers, 24);
    EXPECT_EQ(r.model.heads, 16);
    EXPECT_EQ(r.model.max_positions, 2048);
    EXPECT_EQ(r.plan.dp, 8);
    EXPECT_EQ(r.plan.mbs, 14);
    EXPECT_EQ(r.plan.zero, 3);
    EXPECT_EQ(r.plan.recompute, Recompute::none);
    EXPECT_EQ(r.plan.precision, Precision::bf16_mixed);
    EXPECT_EQ(r.nodes, 0);  // not stated by the source: unknown
    EXPECT_TRUE(r.not_modelled.empty());
    EXPECT_DOUBLE_EQ(*r.tokens_per_s_per_gpu, 45455.0);
    EXPECT_DOUBLE_EQ(*r.tokens_per_s, 45455.0 * 8);
    EXPECT_DOUBLE_EQ(*r.mfu, 0.4182);
    EXPECT_FALSE(r.peak_reserved_bytes);
    EXPECT_EQ(*r.reported_params, 1315950592);
}

TEST(PublishedRuns, BadRowsNameFileLineAndColumn) {
    // Column indices: 2 model_config, 3 gpu, 5 gpus, 14 global_batch_tokens, 17 recompute,
    // 19 precision, 25 peak_mem_gib, 27 num_params.
    EXPECT_NE(error_of("cfg.csv", with_field(2, "mpt-2b")).find("cfg.csv:2 column 'model_config'"), std::string::npos);
    EXPECT_NE(error_of("gpu.csv", with_field(3, "h100-nvl")).find("gpu.csv:2 column 'gpu'"), std::string::npos);
    EXPECT_NE(error_of("gpus.csv", with_field(5, "16")).find("gpus.csv:2 column 'gpus'"), std::string::npos);
    EXPECT_NE(error_of("gbt.csv", with_field(14, "229377")).find("gbt.csv:2 column 'global_batch_tokens'"),
              std::string::npos);
    EXPECT_NE(error_of("rc.csv", with_field(17, "some")).find("rc.csv:2 column 'recompute'"), std::string::npos);
    EXPECT_NE(error_of("prec.csv", with_field(19, "bf17")).find("prec.csv:2 column 'precision'"), std::string::npos);
    // A memory figure must say what was measured.
    EXPECT_NE(error_of("kind.csv", with_field(25, "40.0")).find("kind.csv:2 column 'peak_mem_kind'"),
              std::string::npos);
    // The stated parameter count must be what the model config gives (one parameter off).
    const std::string params = error_of("params.csv", with_field(27, "1315950593"));
    EXPECT_NE(params.find("params.csv:2 column 'num_params'"), std::string::npos);
    EXPECT_NE(params.find("1315950592"), std::string::npos);
    EXPECT_NE(error_of("num.csv", with_field(22, "45k")).find("num.csv:2 column 'tokens_per_s_per_gpu'"),
              std::string::npos);
    // An unexpressible recompute policy is kept, with the reason.
    const auto runs = read_published_runs_csv(write_csv("na.csv", with_field(17, "n/a")), test::data_dir());
    EXPECT_NE(runs[0].not_modelled.find("no planner mode"), std::string::npos);
}

TEST(PublishedRuns, LlmFoundryHoldsItsReadmeTables) {
    const ExternalDataset d = read_external_dataset(kExternal / "llm-foundry", test::data_dir());
    EXPECT_EQ(d.schema, "published-runs");
    EXPECT_TRUE(d.evaluation_only);
    EXPECT_EQ(d.framework, "pytorch");
    // Tables: H100 large scale 18, H100 BF16 52, H100 FP8 7, A100-80GB 61, A100-40GB 78 rows; the
    // A100-40GB rows are excluded here ("exclude_rows"): data set llm-foundry-a100-40gb fits on them.
    ASSERT_EQ(d.runs.size(), 216u - 78u);
    std::map<std::string, int> per_gpu;
    int fp8 = 0;
    for (const auto& r : d.runs) {
        ++per_gpu[r.gpu];
        if (r.plan.precision == Precision::fp8_mixed) ++fp8;
        EXPECT_TRUE(r.reported_params.has_value()) << r.id;  // every row's NumParams reproduced
    }
    EXPECT_EQ(per_gpu["h100-sxm-80gb"], 77);
    EXPECT_EQ(per_gpu["a100-sxm-80gb"], 61);
    EXPECT_EQ(per_gpu.count("a100-sxm-40gb"), 0u);
    EXPECT_EQ(fp8, 7);
    const ExternalDataset fitted = read_external_dataset(kExternal / "llm-foundry-a100-40gb", test::data_dir());
    EXPECT_FALSE(fitted.evaluation_only);
    EXPECT_EQ(fitted.gpu, "a100-sxm-40gb");
    ASSERT_EQ(fitted.runs.size(), 78u);  // the same CSV's other rows, each in one data set only
    for (const auto& r : fitted.runs) EXPECT_EQ(r.gpu, "a100-sxm-40gb") << r.id;
    // README.md:75: 70b, seq 2048, 512 GPUs, MFU 41.25, HFU 55.0, mbs 8, ga 1, 1007 tokens/s/GPU.
    const ExternalRun& big = by_ref(d, "README.md:75");
    EXPECT_EQ(big.plan.dp, 512);
    EXPECT_EQ(big.plan.mbs, 8);
    EXPECT_EQ(big.plan.recompute, Recompute::full);
    EXPECT_DOUBLE_EQ(*big.tokens_per_s_per_gpu, 1007.0);
    EXPECT_DOUBLE_EQ(*big.mfu, 0.4125);
    EXPECT_DOUBLE_EQ(*big.hfu, 0.55);
    EXPECT_EQ(*big.reported_params, 64862437376);
    // README.md:87: 3b on 512 GPUs with SHARD_GRAD_OP (ZeRO-2), 21664 tokens/s/GPU.
    const ExternalRun& zero2 = by_ref(d, "README.md:87");
    EXPECT_EQ(zero2.plan.zero, 2);
    EXPECT_DOUBLE_EQ(*zero2.tokens_per_s_per_gpu, 21664.0);
    // 7b at seq 65536 on H100 (README.md:114) has 6918905856
    // parameters: 6658859008 + (65536 - 2048) * 4096 learned positions.
    const ExternalRun& longseq = by_ref(d, "README.md:114");
    EXPECT_EQ(longseq.plan.seq, 65536);
    EXPECT_EQ(*longseq.reported_params, 6658859008 + (65536 - 2048) * 4096);
}

TEST(PublishedRuns, TorchtitanHoldsItsBenchmarkTables) {
    const ExternalDataset d = read_external_dataset(kExternal / "torchtitan", test::data_dir());
    EXPECT_EQ(d.framework, "torchtitan");
    // 18 H100 rows (tables 1-6) + 8 A100 rows (docs/performance.md) + 12 async-TP rows
    // (3 precisions x vanilla/async x 2 models) + 2 H200 rows.
    ASSERT_EQ(d.runs.size(), 40u);
    int not_modelled = 0, with_memory = 0;
    for (const auto& r : d.runs) {
        not_modelled += !r.not_modelled.empty();
        with_memory += r.peak_reserved_bytes.has_value();
    }
    EXPECT_EQ(not_modelled, 3);  // two "selective layer" rows, one interleaved 1F1B of unstated depth
    EXPECT_EQ(with_memory, 20);
    // Table 1, FSDP: 8B on 8 GPUs, local batch 2, 5,762 tokens/s/GPU, 82.4 GiB reserved.
    const ExternalRun& t1 = by_ref(d, "benchmarks/llama3_h100_202412_torchtitan.md:27");
    EXPECT_EQ(t1.plan.dp, 8);
    EXPECT_EQ(t1.plan.mbs, 2);
    EXPECT_EQ(t1.plan.seq, 8192);
    EXPECT_EQ(t1.plan.recompute, Recompute::selective);
    EXPECT_FALSE(t1.compiled);
    EXPECT_DOUBLE_EQ(*t1.tokens_per_s_per_gpu, 5762.0);
    EXPECT_EQ(*t1.peak_reserved_bytes, 88476326298);  // round(82.4 * 2^30)
    // Table 2, FSDP 1 x CP 8 at seq 262144: 548 tokens/s/GPU.
    const ExternalRun& cp = by_ref(d, "benchmarks/llama3_h100_202412_torchtitan.md:38");
    EXPECT_EQ(cp.plan.cp, 8);
    EXPECT_EQ(cp.plan.dp, 1);
    EXPECT_EQ(cp.plan.seq, 262144);
    EXPECT_EQ(cp.plan.precision, Precision::fp8_mixed);
    EXPECT_TRUE(cp.compiled);
    // Table 5, 1F1B: 405B, FSDP 8 x TP 8 x PP 8, local batch 32 in 8 micro-batches, 100 tokens/s/GPU.
    const ExternalRun& pp = by_ref(d, "benchmarks/llama3_h100_202412_torchtitan.md:59");
    EXPECT_EQ(pp.plan.gpus(), 512);
    EXPECT_EQ(pp.plan.mbs, 4);
    EXPECT_EQ(pp.plan.grad_acc, 8);
    EXPECT_TRUE(pp.plan.sp);
    EXPECT_EQ(pp.gpus_per_node, 8);
    // docs/performance.md:28: Llama 2 13B, batch 2, no AC, 2162 tokens/s/GPU, MFU 61.1 %.
    const ExternalRun& a100 = by_ref(d, "docs/performance.md:28");
    EXPECT_EQ(a100.gpu, "a100-sxm-80gb");
    EXPECT_EQ(a100.plan.recompute, Recompute::none);
    EXPECT_DOUBLE_EQ(*a100.mfu, 0.611);
    EXPECT_EQ(a100.nodes, 0);  // unstated
    // asyncTP file line 33: 8B on 64 H100 (FSDP 8 x TP 8), local batch 12, float8 tensorwise,
    // vanilla TP 5078.1 tokens/s (the first of the line's two rows).
    const ExternalRun& tp = by_ref(d, "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md:33");
    EXPECT_EQ(tp.plan.tp, 8);
    EXPECT_EQ(tp.plan.dp, 8);
    EXPECT_EQ(tp.plan.mbs, 12);
    EXPECT_EQ(tp.precision_source, "float8 tensorwise");
    EXPECT_EQ(tp.plan.fp8_scaling, Fp8Scaling::tensorwise);
    EXPECT_DOUBLE_EQ(*tp.tokens_per_s_per_gpu, 5078.1);
    // Line 34: the same layout with torchao's rowwise recipe, 3708.5 tokens/s.
    const ExternalRun& rowwise = by_ref(d, "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md:34");
    EXPECT_EQ(rowwise.plan.precision, Precision::fp8_mixed);
    EXPECT_EQ(rowwise.plan.fp8_scaling, Fp8Scaling::rowwise);
    EXPECT_DOUBLE_EQ(*rowwise.tokens_per_s_per_gpu, 3708.5);
    // H200 (Trainy / WhiteFiber) line 46: 4 nodes, 10938 tokens/s/GPU, 47.96 GiB reserved on rank 0.
    const ExternalRun& h200 = by_ref(d, "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md:46");
    EXPECT_EQ(h200.gpu, "h200-sxm-141gb");
    EXPECT_EQ(h200.gpus, 32);
    EXPECT_EQ(h200.nodes, 4);
    EXPECT_DOUBLE_EQ(*h200.tokens_per_s_per_gpu, 10938.0);
    EXPECT_EQ(*h200.peak_reserved_bytes, 51496657879);  // round(47.96 * 2^30)
    // torchtitan e7c0cae (June 2025) compiles the loss with --training.compile; 9dec370 (December
    // 2024) had that line commented out.
    EXPECT_TRUE(h200.compiled);
    EXPECT_TRUE(h200.loss_compiled);
    EXPECT_TRUE(cp.compiled);
    EXPECT_FALSE(cp.loss_compiled);
    int loss_compiled = 0;
    for (const auto& r : d.runs) loss_compiled += r.loss_compiled;
    EXPECT_EQ(loss_compiled, 14);  // the 12 async-TP rows (torchtitan 820504e) and the 2 H200 rows
}

// The optional loss_compiled column: absent or empty is 0; 1 needs compile 1.
TEST(PublishedRuns, LossCompiledIsAnOptionalColumn) {
    EXPECT_FALSE(read_published_runs_csv(write_csv("nolc.csv", kRow), test::data_dir())[0].loss_compiled);
    const fs::path f = temp_dir() / "lc.csv";
    auto with_lc = [&](const std::string& compile, const std::string& lc) {
        std::string row = with_field(21, compile);
        std::ofstream(f) << kHeader << ",loss_compiled\n" << row << "," << lc << "\n";
        return read_published_runs_csv(f, test::data_dir())[0];
    };
    EXPECT_TRUE(with_lc("1", "1").loss_compiled);
    EXPECT_FALSE(with_lc("1", "").loss_compiled);
    EXPECT_FALSE(with_lc("1", "0").loss_compiled);
    try {
        with_lc("0", "1");
        ADD_FAILURE() << "loss_compiled 1 with compile 0 was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("lc.csv:2 column 'loss_compiled'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(with_lc("1", "yes"), InputError);
}

// Optional columns tp_comm_overlap and p2p_overlap (Megatron's communication overlaps): absent = 0,
// and each refused (naming file:line and column) on a row where it cannot run. kRow re-laid out as
// dp 4 x tp 2 with sequence parallelism (114,688 tokens a step), and as dp 4 x pp 2 x vpp 2.
TEST(PublishedRuns, CommunicationOverlapsAreOptionalColumns) {
    const auto plain = read_published_runs_csv(write_csv("noov.csv", kRow), test::data_dir())[0];
    EXPECT_FALSE(plain.tp_comm_overlap);
    EXPECT_FALSE(plain.p2p_overlap);
    const fs::path f = temp_dir() / "ov.csv";
    auto read = [&](const std::vector<std::pair<std::size_t, std::string>>& fields, const std::string& tp_ov,
                    const std::string& p2p_ov) {
        std::string row = kRow;
        for (const auto& [index, value] : fields) {
            std::size_t begin = 0;
            for (std::size_t i = 0; i < index; ++i) begin = row.find(',', begin) + 1;
            row.replace(begin, row.find(',', begin) - begin, value);
        }
        std::ofstream(f) << kHeader << ",tp_comm_overlap,p2p_overlap\n" << row << "," << tp_ov << "," << p2p_ov << "\n";
        return read_published_runs_csv(f, test::data_dir())[0];
    };
    const std::vector<std::pair<std::size_t, std::string>> tp2_sp = {{6, "4"}, {7, "2"}, {14, "114688"}, {16, "1"}};
    const std::vector<std::pair<std::size_t, std::string>> pp2_vpp2 = {{6, "4"}, {8, "2"}, {10, "2"}, {14, "114688"}};
    EXPECT_TRUE(read(tp2_sp, "1", "").tp_comm_overlap);
    EXPECT_FALSE(read(tp2_sp, "0", "0").tp_comm_overlap);
    EXPECT_TRUE(read(pp2_vpp2, "", "1").p2p_overlap);
    auto refused = [&](const std::vector<std::pair<std::size_t, std::string>>& fields, const std::string& tp_ov,
                       const std::string& p2p_ov, const std::string& column) {
        try {
            read(fields, tp_ov, p2p_ov);
            ADD_FAILURE() << column << " accepted where it cannot run";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("ov.csv:2 column '" + column + "'"), std::string::npos) << e.what();
        }
    };
    refused({}, "1", "", "tp_comm_overlap");         // tp 1
    refused(pp2_vpp2, "1", "", "tp_comm_overlap");   // tp 1 again, with a pipeline
    refused(tp2_sp, "", "1", "p2p_overlap");         // no pipeline
    refused({{6, "4"}, {8, "2"}, {14, "114688"}}, "", "1", "p2p_overlap");  // pp 2 without interleaving
}

TEST(PublishedRuns, MegatronBridgeHoldsItsLlamaRows) {
    const ExternalDataset d = read_external_dataset(kExternal / "megatron-bridge", test::data_dir());
    EXPECT_EQ(d.framework, "megatron");
    // 25.11 tables: 2 B200 + 3 H100 rows; 26.x: four H100 70B rows.
    ASSERT_EQ(d.runs.size(), 9u);
    // Line 590: DGX-H100, LLAMA3_70B, 64 GPUs, FP8-CS, GBS 128, MBS 1, TP 4, PP 8, CP 1, VP 5,
    // GA 64, 1602 tokens/s/GPU.
    const ExternalRun& r = by_ref(d, "docs/performance-summary-archive.md:590");
    EXPECT_EQ(r.plan.tp, 4);
    EXPECT_EQ(r.plan.pp, 8);
    EXPECT_EQ(r.plan.vpp, 5);
    EXPECT_EQ(r.plan.pp_schedule, PpSchedule::interleaved);
    EXPECT_EQ(r.plan.dp, 2);  // 64 / (4 * 8)
    EXPECT_EQ(r.plan.grad_acc, 64);
    EXPECT_EQ(r.plan.global_batch_tokens(), 128 * 8192);
    EXPECT_EQ(r.plan.zero, 1);  // distributed optimizer
    EXPECT_TRUE(r.plan.sp);
    EXPECT_DOUBLE_EQ(*r.tokens_per_s_per_gpu, 1602.0);
    // Its recipe turns on TransformerEngine's TP overlap (recipes/llama/llama3.py
    // llama3_70b_pretrain_config: CommOverlapConfig(tp_comm_overlap=True)) and, with vpp > 1, the
    // p2p overlap (training/comm_overlap.py); the 8B rows (tp 1) have neither.
    EXPECT_TRUE(r.tp_comm_overlap);
    EXPECT_TRUE(r.p2p_overlap);
    EXPECT_FALSE(by_ref(d, "docs/performance-summary-archive.md:578").tp_comm_overlap);
    EXPECT_FALSE(by_ref(d, "docs/performance-summary-archive.md:578").p2p_overlap);
    // Line 589: 8B on H100 recomputes 5 of 32 layers: kept, not modelled.
    EXPECT_FALSE(by_ref(d, "docs/performance-summary-archive.md:589").not_modelled.empty());
    // Line 207 (26.04.01): the same 70B layout at GBS 256 = 1 x 128 x dp 2, 1664 tokens/s/GPU.
    const ExternalRun& gbs256 = by_ref(d, "docs/performance-summary-archive.md:207");
    EXPECT_EQ(gbs256.plan.grad_acc, 128);
    EXPECT_DOUBLE_EQ(*gbs256.tokens_per_s_per_gpu, 1664.0);
    // The evaluation compares 8 rows: both 405B layouts (pp 8 x vpp 8 = 64 chunks, 126 layers)
    // are modelled with the embedding and the loss taking a layer slot each (128 / 64 = 2 per
    // chunk); only line 589's partial recompute is not.
    const ExternalEvaluation ev = evaluate_external_dataset(d, test::data_dir());
    EXPECT_EQ(ev.tokens.n, 8);
    EXPECT_EQ(ev.skipped, 1);
}

TEST(PublishedRuns, EveryDataSetIsFound) {
    const auto found = find_external_datasets(test::data_dir() / "measurements");
    ASSERT_EQ(found.size(), 5u);
    EXPECT_EQ(found[0].filename(), "llm-foundry");
    EXPECT_EQ(found[1].filename(), "llm-foundry-a100-40gb");
    EXPECT_EQ(found[2].filename(), "megatron-bridge");
    EXPECT_EQ(found[3].filename(), "nanotron-h100");
    EXPECT_EQ(found[4].filename(), "torchtitan");
}

TEST(PublishedRuns, EvaluationGatesOnTargets) {
    const fs::path folder = temp_dir() / "eval";
    fs::create_directories(folder);
    std::ofstream(folder / "runs.csv") << kHeader << "\n" << kRow << "\n" << with_field(17, "n/a") << "\n";
    auto manifest = [&](const std::string& targets) {
        std::ofstream(folder / "dataset.json")
            << R"({"name": "t", "csv": "runs.csv", "schema": "published-runs", "evaluation_only": true,
                  "framework": "pytorch", "gpu": "h100-sxm-80gb", "source": "test", "targets": )"
            << targets << "}";
    };
    manifest(R"({"tokens_per_s_per_gpu_error_p50_max": 100.0, "compared_rows_min": 1})");
    ExternalDataset d = read_external_dataset(folder, test::data_dir());
    ExternalEvaluation ev = evaluate_external_dataset(d, test::data_dir());
    EXPECT_EQ(ev.tokens.n, 1);
    EXPECT_EQ(ev.skipped, 1);
    ASSERT_TRUE(ev.rows[0].predicted_tokens_per_s_per_gpu);
    EXPECT_GT(*ev.rows[0].predicted_tokens_per_s_per_gpu, 0);
    EXPECT_TRUE(ev.failures.empty());
    // A target no prediction can meet fails, naming the figure.
    manifest(R"({"tokens_per_s_per_gpu_error_p50_max": 0.0})");
    d = read_external_dataset(folder, test::data_dir());
    ev = evaluate_external_dataset(d, test::data_dir());
    ASSERT_EQ(ev.failures.size(), 1u);
    EXPECT_NE(ev.failures[0].find("P50"), std::string::npos);
    // So does a quantity compared on fewer rows than compared_rows_min, whatever its figures; the
    // minimum holds for every quantity in view: the memory one here, which a target names and no
    // row states (was: only tokens/s counted).
    manifest(R"({"tokens_per_s_per_gpu_error_p50_max": 100.0, "peak_memory_error_p50_max": 100.0, "compared_rows_min": 2})");
    d = read_external_dataset(folder, test::data_dir());
    ev = evaluate_external_dataset(d, test::data_dir());
    ASSERT_EQ(ev.failures.size(), 2u);
    EXPECT_NE(ev.failures[0].find("tokens/s per GPU: only 1 rows compared, target 2 (compared_rows_min)"),
              std::string::npos) << ev.failures[0];
    EXPECT_NE(ev.failures[1].find("reserved peak: no row compared"), std::string::npos) << ev.failures[1];
    manifest(R"({"tokens_per_s_per_gpu_error_p50_max": "low"})");  // refused on load, naming the key
    EXPECT_THROW(read_external_dataset(folder, test::data_dir()), InputError);
    // A key this kind of set never reads is refused, not ignored: the cross-validation's gates and
    // folds on an evaluation-only set.
    for (const char* key : {"memory_verdict_accuracy_min", "reserved_range_inside_fraction_min", "folds"}) {
        manifest(std::string(R"({")") + key + R"(": 2})");
        try {
            read_external_dataset(folder, test::data_dir());
            ADD_FAILURE() << key << " accepted";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("targets.") + key), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("evaluation_only"), std::string::npos) << e.what();
        }
    }
}

TEST(PublishedRuns, ValidateCheckGatesAndCalibrateListsEvaluationOnlySets) {
    const fs::path folder = temp_dir() / "cli" / "set";
    fs::create_directories(folder);
    std::ofstream(folder / "runs.csv") << kHeader << "\n" << kRow << "\n";
    auto manifest = [&](double p50_max) {
        std::ofstream(folder / "dataset.json")
            << R"({"name": "cli-set", "csv": "runs.csv", "schema": "published-runs", "evaluation_only": true,
                  "framework": "pytorch", "gpu": "h100-sxm-80gb", "source": "test",
                  "targets": {"tokens_per_s_per_gpu_error_p50_max": )"
            << p50_max << "}}";
    };
    const std::string dir = (temp_dir() / "cli").string();
    manifest(100.0);
    auto r = test::run_preflight("validate --check '" + dir + "' --no-report-files");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("# external data set cli-set (1 rows, pytorch)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("| tokens/s per GPU | 1 |"), std::string::npos) << r.out;
    manifest(0.0);
    r = test::run_preflight("validate --check '" + dir + "' --no-report-files");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("OUT OF TARGET: tokens/s per GPU |error| P50"), std::string::npos) << r.out;
    r = test::run_preflight("calibrate '" + dir + "'");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("never fitted on, not used by the fit"), std::string::npos) << r.out;
}

TEST(PublishedRuns, BadManifestNamesTheField) {
    const fs::path folder = temp_dir() / "manifest";
    fs::create_directories(folder);
    std::ofstream(folder / "runs.csv") << kHeader << "\n" << kRow << "\n";
    auto error_with = [&](const std::string& extra) -> std::string {
        std::ofstream(folder / "dataset.json")
            << R"({"name": "m", "csv": "runs.csv", "framework": "pytorch", "gpu": "h100-sxm-80gb", "source": "test")"
            << extra << "}";
        try {
            read_external_dataset(folder, test::data_dir());
        } catch (const InputError& e) {
            return e.what();
        }
        return "";
    };
    EXPECT_NE(error_with(R"(, "schema": "tables")").find("\"schema\" must be nanotron-sweep or published-runs"),
              std::string::npos);
    EXPECT_NE(error_with(R"(, "schema": "published-runs", "evaluation_only": "yes")").find("\"evaluation_only\""),
              std::string::npos);
    // Without a schema the CSV is read as the nanotron sweep's: its columns are missing.
    EXPECT_NE(error_with("").find("missing column 'params_b'"), std::string::npos);
    EXPECT_EQ(error_with(R"(, "schema": "published-runs")"), "");
    // An interleaved row with the chunk count left empty is kept, not modelled.
    const auto runs = read_published_runs_csv(write_csv("vpp.csv", with_field(10, "")), test::data_dir());
    EXPECT_NE(runs[0].not_modelled.find("unstated number of model chunks"), std::string::npos);
    // A memory figure with its kind is read; a kind without a figure is refused.
    std::string mem = with_field(25, "40.5");
    std::size_t begin = 0;
    for (int i = 0; i < 26; ++i) begin = mem.find(',', begin) + 1;
    mem.insert(begin, "reserved_rank0");
    const auto with_mem = read_published_runs_csv(write_csv("mem.csv", mem), test::data_dir());
    EXPECT_EQ(*with_mem[0].peak_reserved_bytes, 43486543872);  // 40.5 * 2^30
    EXPECT_NE(error_of("kindonly.csv", with_field(26, "reserved_rank0")).find("column 'peak_mem_kind'"),
              std::string::npos);
}

TEST(PublishedRuns, RowSelectionSplitsOneTableBetweenDataSets) {
    const fs::path root = temp_dir() / "split";
    for (const char* sub : {"table", "fitted", "eval"}) fs::create_directories(root / sub);
    std::ofstream(root / "table" / "runs.csv") << kHeader << "\n" << kRow << "\n"
                                               << with_field(0, "README.md:139") << "\n"
                                               << with_field(3, "a100-sxm-40gb") << "\n";
    auto manifest = [&](const char* sub, const std::string& fields) {
        std::ofstream(root / sub / "dataset.json")
            << R"({"name": "s", "schema": "published-runs", "framework": "pytorch", "gpu": "a100-sxm-40gb",
                  "source": "test", )"
            << fields << "}";
    };
    auto error_of_set = [&](const char* sub) -> std::string {
        try {
            read_external_dataset(root / sub, test::data_dir());
        } catch (const InputError& e) {
            return e.what();
        }
        return "";
    };
    manifest("fitted", R"("csv": "../table/runs.csv", "rows": {"gpu": ["a100-sxm-40gb"]})");
    manifest("eval", R"("csv": "../table/runs.csv", "exclude_rows": {"gpu": ["a100-sxm-40gb"]}, "evaluation_only": true)");
    const ExternalDataset fitted = read_external_dataset(root / "fitted", test::data_dir());
    ASSERT_EQ(fitted.runs.size(), 1u);
    EXPECT_EQ(fitted.runs[0].gpu, "a100-sxm-40gb");
    const ExternalDataset eval = read_external_dataset(root / "eval", test::data_dir());
    ASSERT_EQ(eval.runs.size(), 2u);
    for (const auto& r : eval.runs) EXPECT_EQ(r.gpu, "h100-sxm-80gb");
    // Only a file beside the manifest or in a sibling folder; only the "gpu" selector.
    for (const char* csv : {"../../runs.csv", "/tmp/runs.csv", "table/runs.csv", "../table/../table/runs.csv"}) {
        manifest("fitted", std::string(R"("csv": ")") + csv + "\"");
        EXPECT_NE(error_of_set("fitted").find("sibling data set"), std::string::npos) << csv;
    }
    manifest("fitted", R"("csv": "../table/runs.csv", "rows": {"model": ["1b"]})");
    EXPECT_NE(error_of_set("fitted").find(R"("rows" must be {"gpu": [GPU names]})"), std::string::npos);
    manifest("fitted", R"("csv": "../table/runs.csv", "rows": {"gpu": ["b200"]})");
    EXPECT_NE(error_of_set("fitted").find("no row is left"), std::string::npos);
    // A fitted data set calibrates one GPU's constants: a row on another GPU is refused.
    manifest("fitted", R"("csv": "../table/runs.csv")");
    const ExternalDataset mixed = read_external_dataset(root / "fitted", test::data_dir());
    EXPECT_THROW(throughput_gate(mixed, load_gpu("a100-sxm-40gb", test::data_dir())), InputError);
}

TEST(PublishedRuns, WriteSpecNeedsOneFittedDataSet) {
    // Each fitted data set calibrates its own GPU's spec: over a folder holding two of them
    // (nanotron-h100, llm-foundry-a100-40gb) --write-spec is refused before any fit, and
    // nothing is written.
    const fs::path out = temp_dir() / "never-written.json";
    const auto r = test::run_preflight("calibrate " + kExternal.string() + " --write-spec " + out.string());
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE((r.out + r.err).find("2 data sets are fitted here"), std::string::npos) << r.out << r.err;
    EXPECT_FALSE(fs::exists(out));
}
