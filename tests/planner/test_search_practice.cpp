// The plan search against published practice (plan-search audit, 2026-11-30): the recipes it
// offers unpinned, context parallelism at 8k tokens, every interleaved chunk count Megatron-LM
// accepts, a pipeline split Megatron-LM refuses replaced by its interleaved form, and Megatron-FSDP
// kept apart from tensor/context parallelism before Blackwell.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/frameworks.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/search.hpp"

using namespace preflight;

namespace {
const std::filesystem::path kData = PREFLIGHT_TEST_DATA_DIR;

SearchResult search(const std::string& model, const std::string& gpu, const SearchRequest& r) {
    return search_plans(load_model(model, kData), load_gpu(gpu, kData), r);
}

// Llama-3-70B on 64 GPUs, 2M tokens a step at seq 8192 (Megatron-Bridge's Llama-3 70B pretraining
// shape), the top 100 plans.
SearchRequest llama3_70b_on_64_gpus() {
    SearchRequest r;
    r.gpus = 64;
    r.gbs_tokens = 1 << 21;
    r.seq = 8192;
    r.top_k = 100;
    return r;
}
}  // namespace

// Megatron-Bridge's Llama-3.1-405B H100 layout pins tp 8, pp 8, cp 2 (its recipe: vpp 8). The 126
// layers split over 8 stages only with the embedding and the loss in the split, which the
// interleaved schedule takes (pp x vpp divides 126 + 2 = 128) and 1F1B does not (Megatron-LM's
// validate_args). The search answered "NOTHING FITS": the 1F1B plans outscored their interleaved
// forms and were then dropped.
TEST(SearchPractice, APipelineMegatronCannotSplitIsReplacedByItsInterleavedForm) {
    SearchRequest r;
    r.gpus = 1024;
    r.gbs_tokens = 4'194'304;
    r.seq = 8192;
    r.pins.tp = 8, r.pins.pp = 8, r.pins.cp = 2;
    const SearchResult res = search("llama-3.1-405b", "h100-sxm-80gb", r);
    ASSERT_FALSE(res.candidates.empty());
    for (const Candidate& c : res.candidates) {
        EXPECT_EQ(c.plan.pp_schedule, PpSchedule::interleaved);
        EXPECT_EQ(128 % (8 * c.plan.vpp), 0) << c.plan.vpp;
    }
}

// Unpinned, the recipes the frameworks train with by default (fp32 master weights): no pure bf16,
// no fp16-mixed where the GPU has a bf16 peak. Llama-3-8B on 8 A100-80GB used to rank pure bf16
// first (it ties bf16-mixed on speed and holds less).
TEST(SearchPractice, UnpinnedItOffersTheRecipesWithMasterWeights) {
    SearchRequest r;
    r.gpus = 8;
    r.gbs_tokens = 1 << 20;
    r.seq = 4096;
    r.top_k = 100;
    for (const std::string& framework : {"megatron", "deepspeed", "nanotron", "torchtitan"}) {
        r.memory.profile = *profile_by_name(framework);
        const SearchResult res = search("llama-3-8b", "a100-sxm-80gb", r);
        ASSERT_FALSE(res.candidates.empty()) << framework;
        for (const Candidate& c : res.candidates) {
            EXPECT_NE(c.plan.precision, Precision::bf16) << framework;
            EXPECT_NE(c.plan.precision, Precision::fp16_mixed) << framework;
        }
    }
    // Pinned, it is searched.
    r.memory.profile = *profile_by_name("deepspeed");
    r.pins.precision = Precision::bf16;
    const SearchResult pinned = search("llama-3-8b", "a100-sxm-80gb", r);
    ASSERT_FALSE(pinned.candidates.empty());
    EXPECT_EQ(pinned.candidates.front().plan.precision, Precision::bf16);
}

// When nothing fits and pure bf16 would, the suggestions say so. Llama-3-70B on 8 H100 under
// nanotron: its mixed recipe keeps 18 B a parameter (bf16 weights, fp32 gradient accumulator, fp32
// master and moments), at best 70.55 B x 18 B / 8 = 159 GB a GPU at 8-way model parallelism (ZeRO-1
// over dp shards the 12 B of master and moments but leaves 8 / dp-way model parallelism): nothing
// fits. Pure bf16 (bf16 weights and moments) at tp 8 does (72 GiB device need).
TEST(SearchPractice, PureBf16IsASuggestionWhenNothingElseFits) {
    SearchRequest r;
    r.gpus = 8;
    r.gbs_tokens = 1 << 20;
    r.seq = 4096;
    r.memory.profile = *profile_by_name("nanotron");
    const SearchResult res = search("llama-3-70b", "h100-sxm-80gb", r);
    EXPECT_TRUE(res.candidates.empty());
    bool offered = false;
    for (const std::string& s : res.suggestions) offered = offered || s.rfind("--precision bf16 (pure bf16", 0) == 0;
    EXPECT_TRUE(offered);
}

// Context parallelism from 8k tokens where each rank keeps 4,096 of them (Megatron-Bridge's Llama-3
// recipes run cp 2 at 8,192): cp 2 is searched at seq 8192, cp 4 (2,048 tokens a rank) is not; from
// 32k tokens any cp up to 16.
TEST(SearchPractice, ContextParallelismIsSearchedFromEightThousandTokens) {
    SearchRequest r = llama3_70b_on_64_gpus();
    const SearchResult res = search("llama-3-70b", "h100-sxm-80gb", r);
    bool cp2 = false;
    for (const Candidate& c : res.candidates) {
        cp2 = cp2 || c.plan.cp == 2;
        EXPECT_LE(c.plan.cp, 2);
    }
    EXPECT_TRUE(cp2);
    r.seq = 4096;
    for (const Candidate& c : search("llama-3-70b", "h100-sxm-80gb", r).candidates) EXPECT_EQ(c.plan.cp, 1);
}

// Every chunk count whose split Megatron-LM accepts is tried: Llama-3-70B's 80 layers at pp 8 (10
// a stage) take 2, 5 or 10 chunks (pp x vpp divides 80; 82 = 2 x 41 adds none), and Megatron-Bridge's
// recipe runs 5, which the refinement never tried when it took only 2 and 4.
TEST(SearchPractice, TheInterleavedRefinementTriesEveryChunkCountThatSplits) {
    SearchRequest r = llama3_70b_on_64_gpus();
    r.pins.tp = 4, r.pins.pp = 8, r.pins.cp = 1, r.pins.sp = true;
    const SearchResult res = search("llama-3-70b", "h100-sxm-80gb", r);
    ASSERT_FALSE(res.candidates.empty());
    bool five_or_ten = false;
    for (const Candidate& c : res.candidates) {
        if (c.plan.pp_schedule != PpSchedule::interleaved) continue;
        EXPECT_TRUE(c.plan.vpp == 2 || c.plan.vpp == 5 || c.plan.vpp == 10) << c.plan.vpp;
        five_or_ten = five_or_ten || c.plan.vpp == 5 || c.plan.vpp == 10;
    }
    EXPECT_TRUE(five_or_ten);
}

// Before Blackwell Megatron-LM warns against tp or cp beside Megatron-FSDP (sequence parallelism
// wants CUDA_DEVICE_MAX_CONNECTIONS=1, FSDP asserts it is not): unpinned, the search leaves ZeRO-2/3
// with tp or cp > 1 out on Hopper, keeps it on Blackwell, and keeps it when --zero pins it.
TEST(SearchPractice, MegatronFsdpIsKeptApartFromTensorParallelismBeforeBlackwell) {
    SearchRequest r = llama3_70b_on_64_gpus();
    const auto fsdp_beside_tp = [](const SearchResult& res) {
        int n = 0;
        for (const Candidate& c : res.candidates)
            n += c.plan.zero >= zero_gradients && (c.plan.tp > 1 || c.plan.cp > 1) ? 1 : 0;
        return n;
    };
    EXPECT_EQ(fsdp_beside_tp(search("llama-3-70b", "h100-sxm-80gb", r)), 0);
    EXPECT_GT(fsdp_beside_tp(search("llama-3-70b", "b200", r)), 0);
    r.pins.zero = zero_weights;
    r.pins.tp = 2;
    const SearchResult pinned = search("llama-3-70b", "h100-sxm-80gb", r);
    ASSERT_FALSE(pinned.candidates.empty());
    EXPECT_EQ(fsdp_beside_tp(pinned), static_cast<int>(pinned.candidates.size()));
}

// The "nothing fits" suggestions name plans Megatron-LM can split: Llama-3.1-405B's 126 layers on
// 64 H100 fit nowhere, and the more-GPUs change used to name a 1F1B pipeline of 16 stages (126 is
// no multiple of 16) from the cp variant's own search, which skipped the interleaved refinement.
TEST(SearchPractice, SuggestedPipelinesSplitAsMegatronSplitsThem) {
    SearchRequest r;
    r.gpus = 64;
    r.gbs_tokens = 1 << 22;
    r.seq = 8192;
    r.memory.profile = megatron_profile();  // what `plan` ranks by (FrameworkProfile{} splits unevenly)
    const ModelConfig m = load_model("llama-3.1-405b", kData);
    const SearchResult res = search_plans(m, load_gpu("h100-sxm-80gb", kData), r);
    EXPECT_TRUE(res.candidates.empty());
    ASSERT_FALSE(res.suggested.empty());
    for (const SuggestedPlan& s : res.suggested)
        EXPECT_EQ(pipeline_split_problem(megatron_profile(), m, s.plan), "") << s.change;
}

// A pinned interleaved schedule tries every chunk count that can split the layers (Llama-3.1-405B:
// 126 or 128 = 126 + 2 slots; 2, 3, 4, 6, 7, 8, 9, 14, 16) and lists each rejected family once,
// at the count that came closest, with its context-parallel label kept.
TEST(SearchPractice, APinnedInterleavedScheduleListsEachRejectedFamilyOnce) {
    SearchRequest r;
    r.gpus = 1024;
    r.gbs_tokens = 1 << 22;
    r.seq = 8192;
    r.memory.profile = megatron_profile();
    r.pins.pp_schedule = PpSchedule::interleaved;
    const SearchResult res = search("llama-3.1-405b", "h100-sxm-80gb", r);
    ASSERT_FALSE(res.candidates.empty());
    std::map<std::string, int> rows;
    for (const Rejection& j : res.rejected) {
        std::string base = j.family;
        if (const std::size_t at = base.find(", vpp "); at != std::string::npos) {
            const std::size_t next = base.find(", ", at + 2);
            base.erase(at, next == std::string::npos ? std::string::npos : next - at);
        }
        EXPECT_EQ(++rows[base], 1) << j.family;
        if (j.plan.cp > 1) EXPECT_NE(j.family.find(", cp " + std::to_string(j.plan.cp)), std::string::npos) << j.family;
    }
}
