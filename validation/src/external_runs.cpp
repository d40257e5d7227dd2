#include "preflight/validation/external_runs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <span>
#include <sstream>

#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/limits.hpp"
#include "preflight/planner/plan_extensions.hpp"
#include "preflight/planner/user_file.hpp"
#include "preflight/validation/external_memory.hpp"

namespace preflight::validation {

namespace fs = std::filesystem;

std::string_view to_string(RunOutcome o) {
    switch (o) {
        case RunOutcome::ok: return "ok";
        case RunOutcome::oom: return "oom";
        case RunOutcome::failed_other: return "failed_other";
        case RunOutcome::ok_metrics_but_oom_in_log: return "ok_metrics_but_oom_in_log";
    }
    return "?";
}

std::optional<RunOutcome> parse_outcome(std::string_view s) {
    for (RunOutcome o : {RunOutcome::ok, RunOutcome::oom, RunOutcome::failed_other,
                         RunOutcome::ok_metrics_but_oom_in_log})
        if (to_string(o) == s) return o;
    return std::nullopt;
}

std::string ExternalRun::configuration_key() const {
    std::ostringstream k;
    k << model_label << "/h" << model.hidden << "/L" << model.layers << "/a" << model.heads << "/kv" << model.kv_heads
      << "/f" << model.ffn_hidden << "/V" << model.vocab << "/n" << nodes << "/dp" << plan.dp << "/tp" << plan.tp
      << "/pp" << plan.pp << "/mbs" << plan.mbs << "/ga" << plan.grad_acc << "/z" << plan.zero << "/s" << plan.seq;
    return k.str();
}

namespace {

// A data set's "targets": every key one a gate reads (a misspelt key would otherwise gate nothing),
// fractions finite and non-negative, counts positive integers, folds in [2, kMaxFolds].
void check_targets(const nlohmann::json& t, const std::string& manifest) {
    static const std::set<std::string> fractions = {
        "tokens_per_s_per_gpu_error_p50_max", "tokens_per_s_per_gpu_error_p95_max", "peak_memory_error_p50_max",
        "peak_memory_error_p95_max", "memory_verdict_accuracy_min", "fit_but_oom_fraction_max",
        "reserved_peak_abs_error_p50_max", "reserved_peak_abs_error_p95_max",
        "reserved_peak_abs_error_p95_tp_inside_node_max", "optimizer_allocated_abs_error_p95_max",
        "reserved_range_inside_fraction_min", "reserved_range_median_width_max"};
    for (const auto& [key, v] : t.items()) {
        const std::string where = manifest + ": targets." + key;
        if (fractions.count(key)) {
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
                throw InputError(where, "must be a finite, non-negative number (a fraction: 0.05 = 5 %)");
        } else if (key == "compared_rows_min" || key == "folds") {
            const std::int64_t lo = key == "folds" ? 2 : 1, hi = key == "folds" ? limits::kMaxFolds : std::int64_t{1} << 30;
            if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
                throw InputError(where, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        } else {
            std::string known;
            for (const std::string& k : fractions) known += k + ", ";
            throw InputError(where, "unknown target (known: " + known + "compared_rows_min, folds)");
        }
    }
}

// The gates each kind of data set reads: an evaluation-only set gates memory on peak_memory_error_*
// (external_eval.cpp); a fitted one on its memory cross-validation's figures (external_memory_gate.cpp,
// a framework with an allocator model: nanotron) and reads "folds". A key the set's kind never reads
// would gate nothing: refused.
void check_target_kinds(const ExternalDataset& d, const std::string& manifest) {
    static const std::set<std::string> cross_validated_memory = {
        "memory_verdict_accuracy_min", "fit_but_oom_fraction_max", "reserved_peak_abs_error_p50_max",
        "reserved_peak_abs_error_p95_max", "reserved_peak_abs_error_p95_tp_inside_node_max",
        "optimizer_allocated_abs_error_p95_max", "reserved_range_inside_fraction_min", "reserved_range_median_width_max"};
    for (const auto& [key, v] : d.targets.items()) {
        const std::string where = manifest + ": targets." + key;
        const bool cv_memory = cross_validated_memory.count(key) > 0;
        if (d.evaluation_only && (cv_memory || key == "folds"))
            throw InputError(where, "gates a cross-validated data set, and this one is evaluation_only (its memory gates: "
                                    "peak_memory_error_p50_max, peak_memory_error_p95_max)");
        if (!d.evaluation_only && key.rfind("peak_memory_error_", 0) == 0)
            throw InputError(where, "gates an evaluation-only data set; a fitted one gates memory with the "
                                    "reserved_peak_abs_error_* figures of its cross-validation");
        if (!d.evaluation_only && cv_memory && !has_memory_model(d))
            throw InputError(where, "gates the memory cross-validation, which needs a framework with an allocator "
                                    "model (nanotron), got '" + d.framework + "'");
    }
}

// Splits one CSV line on commas. The data sets have no quoted fields; a quote is refused
// rather than mis-parsed.
std::vector<std::string> split_csv(const std::string& line, const std::string& where) {
    if (line.find('"') != std::string::npos)
        throw InputError(where, "quoted CSV fields are not supported");
    std::vector<std::string> out;
    std::string cell;
    for (char c : line) {
        if (c == ',') {
            out.push_back(cell);
            cell.clear();
        } else if (c != '\r') {
            cell.push_back(c);
        }
    }
    out.push_back(cell);
    return out;
}

struct Row {
    const std::map<std::string, std::size_t>* columns;
    const std::vector<std::string>* cells;
    std::string where;  // "file:line"

    const std::string& raw(const std::string& col) const {
        return (*cells)[columns->at(col)];
    }
    bool has(const std::string& col) const { return columns->count(col) > 0; }
    InputError error(const std::string& col, const std::string& msg) const {
        return InputError(where + " column '" + col + "'", msg);
    }
    std::int64_t integer(const std::string& col, std::int64_t min_value = 1) const {
        const std::string& s = raw(col);
        std::int64_t v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size())
            throw error(col, "'" + s + "' is not an integer");
        if (v < min_value) throw error(col, "must be >= " + std::to_string(min_value) + ", got " + s);
        return v;
    }
    // Empty cell -> nullopt (not measured).
    std::optional<double> number(const std::string& col) const {
        const std::string& s = raw(col);
        if (s.empty()) return std::nullopt;
        double v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
            throw error(col, "'" + s + "' is not a number");
        if (v < 0) throw error(col, "must not be negative, got " + s);
        return v;
    }
    bool flag(const std::string& col) const {
        const std::string& s = raw(col);
        if (s == "0") return false;
        if (s == "1") return true;
        throw error(col, "must be 0 or 1, got '" + s + "'");
    }
};

constexpr const char* kColumns[] = {
    "model", "params_b", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "ffn_hidden_size",
    "vocab_size", "tied_embeddings", "nodes", "gpus", "dp", "tp", "pp", "micro_batch_size", "grad_accum",
    "seq_len", "global_batch_tokens", "zero_stage", "recompute", "dtype", "grad_accum_dtype", "optimizer",
    "sequence_parallel", "peak_mem_reserved_gib", "peak_mem_alloc_gib", "mfu_pct", "tokens_per_s_per_gpu",
    "tokens_per_s", "outcome", "oom_in_log"};

std::optional<std::int64_t> gib_to_bytes(std::optional<double> gib) {
    if (!gib) return std::nullopt;
    if (*gib > 1e6) return std::nullopt;  // guarded by the caller's range check
    return static_cast<std::int64_t>(std::llround(*gib * static_cast<double>(std::int64_t{1} << 30)));
}

// A measured quantity of a row: empty is unknown; zero or a negative number is no measurement
// (a 0 GiB peak or 0 tokens/s would enter the fits as a real job), an error naming the column.
std::optional<double> measured_positive(const Row& r, const char* col) {
    const auto v = r.number(col);
    if (v && !(*v > 0)) throw r.error(col, "must be a positive measurement (empty when unknown), got " + r.raw(col));
    return v;
}

// A run named by where its row stands ("file:line").
ExternalRun run_at(const std::string& file, std::int64_t line) {
    ExternalRun run;
    run.file = file;
    run.line = line;
    run.id = file + ":" + std::to_string(line);
    return run;
}

// Far above any real shape; keeps products in range.
constexpr std::int64_t kImplausible = std::int64_t{1} << 24;

// The model columns: a Llama-shaped model (RMSNorm, SwiGLU, RoPE) of the row's sizes.
void parse_model_columns(const Row& r, ExternalRun& run) {
    ModelConfig& m = run.model;
    m.name = "external-" + run.model_label;
    m.family = ModelFamily::llama;
    m.norm = NormKind::rmsnorm;
    m.mlp = MlpKind::swiglu;
    m.position = PositionKind::rope;
    m.hidden = r.integer("hidden_size");
    m.layers = r.integer("num_layers");
    m.heads = r.integer("num_heads");
    m.kv_heads = r.integer("num_kv_heads");
    m.ffn_hidden = r.integer("ffn_hidden_size");
    m.vocab = r.integer("vocab_size");
    m.tied_embeddings = r.flag("tied_embeddings");
    if (m.hidden % m.heads != 0)
        throw r.error("num_heads", std::to_string(m.heads) + " does not divide hidden_size " + std::to_string(m.hidden));
    m.head_dim = m.hidden / m.heads;
    const std::int64_t limit = kImplausible;
    for (auto [col, v] : {std::pair{"hidden_size", m.hidden}, {"num_layers", m.layers}, {"ffn_hidden_size", m.ffn_hidden},
                          {"vocab_size", m.vocab}, {"num_heads", m.heads}})
        if (v > limit) throw r.error(col, "is implausibly large (" + std::to_string(v) + ")");
}

// The parallel degrees, batch shape, global batch, ZeRO stage and SP columns that both CSV
// forms share, checked against each other. The nanotron form has no cp column (cp = 1) and
// always names the node count; in the published form an empty nodes cell means unknown.
void parse_layout_and_batch(const Row& r, ExternalRun& run, bool has_cp, bool nodes_required) {
    Plan& p = run.plan;
    run.gpus = r.integer("gpus");
    p.dp = r.integer("dp");
    p.tp = r.integer("tp");
    p.pp = r.integer("pp");
    if (has_cp) p.cp = r.integer("cp");
    p.mbs = r.integer("micro_batch_size");
    p.grad_acc = r.integer("grad_accum");
    p.seq = r.integer("seq_len");
    for (auto [col, v] : {std::pair{"gpus", run.gpus}, {"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}, {"cp", p.cp},
                          {"micro_batch_size", p.mbs}, {"grad_accum", p.grad_acc}, {"seq_len", p.seq}})
        if (v > kImplausible) throw r.error(col, "is implausibly large (" + std::to_string(v) + ")");
    if (p.gpus() != run.gpus)
        throw r.error("gpus", r.raw("gpus") + " != dp*tp*pp*cp = " + std::to_string(p.gpus()));
    if (nodes_required || !r.raw("nodes").empty()) {
        run.nodes = r.integer("nodes");
        if (run.nodes > kImplausible) throw r.error("nodes", "is implausibly large (" + r.raw("nodes") + ")");
        if (run.gpus % run.nodes != 0)
            throw r.error("gpus", r.raw("gpus") + " GPUs do not split evenly over " + r.raw("nodes") + " nodes");
        run.gpus_per_node = run.gpus / run.nodes;
    }  // else: the source does not say; 0 = unknown (the GPU spec's node size is used)
    const std::int64_t gbt = r.integer("global_batch_tokens");
    if (gbt != p.global_batch_tokens())
        throw r.error("global_batch_tokens", r.raw("global_batch_tokens") + " != seq*mbs*grad_acc*dp = " +
                                                 std::to_string(p.global_batch_tokens()));
    const std::optional<ZeroStage> zero = zero_stage(r.integer("zero_stage", 0));
    if (!zero) throw r.error("zero_stage", "must be 0..3, got " + r.raw("zero_stage"));
    p.zero = *zero;
    p.sp = r.flag("sequence_parallel");
    if (p.sp && p.tp == 1) throw r.error("sequence_parallel", "is 1 with tp 1");
}

// The recompute, precision and optimizer columns.
void parse_recipe_columns(const Row& r, Plan& p) {
    const std::string rc = r.raw("recompute");
    const auto recompute = parse_recompute(rc);
    if (!recompute) throw r.error("recompute", "unknown mode '" + rc + "' (none | selective | full)");
    p.recompute = *recompute;
    const std::string dtype = r.raw("dtype"), acc = r.raw("grad_accum_dtype");
    if (dtype == "bf16" && acc == "fp32")
        p.precision = Precision::bf16_mixed_fp32_grads;  // bf16 compute, fp32 master + fp32 grad accumulation
    else if (dtype == "bf16" && (acc == "bf16" || acc.empty()))
        p.precision = Precision::bf16_mixed;
    else
        throw r.error("dtype", "unsupported dtype/grad_accum_dtype pair '" + dtype + "'/'" + acc + "'");
    const std::string opt = r.raw("optimizer");
    const auto optimizer = parse_optimizer(opt);
    if (!optimizer) throw r.error("optimizer", "unknown optimizer '" + opt + "'");
    p.optimizer = *optimizer;
    p.attention = AttentionKind::flash;
}

// The outcome and measured columns (memory in GiB, throughput, MFU in percent).
void parse_measured_columns(const Row& r, ExternalRun& run) {
    const std::string oc = r.raw("outcome");
    const auto outcome = parse_outcome(oc);
    if (!outcome)
        throw r.error("outcome", "unknown outcome '" + oc + "' (ok | oom | failed_other | ok_metrics_but_oom_in_log)");
    run.outcome = *outcome;
    run.oom_in_log = r.flag("oom_in_log");
    auto memory_bytes = [&r](const char* col) {
        const auto v = measured_positive(r, col);
        if (v && *v > 1e5) throw r.error(col, "is implausibly large (" + r.raw(col) + " GiB)");
        return gib_to_bytes(v);
    };
    run.peak_reserved_bytes = memory_bytes("peak_mem_reserved_gib");
    run.peak_allocated_after_backward_bytes = memory_bytes("peak_mem_alloc_gib");
    run.tokens_per_s_per_gpu = measured_positive(r, "tokens_per_s_per_gpu");
    run.tokens_per_s = measured_positive(r, "tokens_per_s");
    if (auto mfu = r.number("mfu_pct")) {
        if (*mfu > 100 || *mfu < 0) throw r.error("mfu_pct", "must lie in [0, 100] % (" + r.raw("mfu_pct") + ")");
        run.mfu = *mfu / 100.0;
    }
    if (run.outcome == RunOutcome::ok && !run.peak_reserved_bytes)
        throw r.error("peak_mem_reserved_gib", "is empty for a job with outcome ok");
}

ExternalRun parse_row(const Row& r, const std::string& file, std::int64_t line) {
    ExternalRun run = run_at(file, line);
    run.model_label = r.raw("model");
    if (run.model_label.empty()) throw r.error("model", "is empty");
    run.reported_params_b = r.number("params_b").value_or(0);
    parse_model_columns(r, run);
    parse_layout_and_batch(r, run, /*has_cp=*/false, /*nodes_required=*/true);
    run.model.max_positions = run.plan.seq;
    parse_recipe_columns(r, run.plan);
    parse_measured_columns(r, run);
    try {
        validate_model(run.model);
    } catch (const InputError& e) {
        throw InputError(r.where, std::string("model shape: ") + e.what());
    }
    return run;
}

constexpr const char* kPublishedColumns[] = {
    "source_ref", "model", "model_config", "gpu", "nodes", "gpus", "dp", "tp", "pp", "cp", "vpp",
    "micro_batch_size", "grad_accum", "seq_len", "global_batch_tokens", "zero_stage", "sequence_parallel",
    "recompute", "recompute_source", "precision", "precision_source", "compile", "tokens_per_s_per_gpu",
    "mfu_pct", "hfu_pct", "peak_mem_gib", "peak_mem_kind", "num_params", "outcome"};

// Layout and batch (shared columns) plus what the published form fixes: flash attention, AdamW.
void parse_published_layout(const Row& r, ExternalRun& run) {
    Plan& p = run.plan;
    parse_layout_and_batch(r, run, /*has_cp=*/true, /*nodes_required=*/false);
    // The sequence the run trained at is the model's context here (benchmarks stretch it).
    run.model.max_positions = std::max(run.model.max_positions, p.seq);
    if (run.model.position == PositionKind::learned) run.model.max_positions = p.seq;
    p.attention = AttentionKind::flash;
    p.optimizer = Optimizer::adamw;
}

// Recipe: recompute, interleaving, precision, compile; what the planner cannot express is
// recorded in run.not_modelled.
void parse_published_recipe(const Row& r, ExternalRun& run) {
    Plan& p = run.plan;
    run.recompute_source = r.raw("recompute_source");
    const std::string rc = r.raw("recompute");
    if (rc == "n/a") {
        run.not_modelled = "recompute policy '" + run.recompute_source + "' has no planner mode";
    } else {
        const auto recompute = parse_recompute(rc);
        if (!recompute) throw r.error("recompute", "unknown mode '" + rc + "' (none | selective | full | n/a)");
        p.recompute = *recompute;
    }
    if (r.raw("vpp").empty()) {
        if (run.not_modelled.empty()) run.not_modelled = "interleaved pipeline with an unstated number of model chunks";
    } else {
        p.vpp = r.integer("vpp");
        if (p.vpp > 1) p.pp_schedule = PpSchedule::interleaved;
    }
    run.precision_source = r.raw("precision_source");
    const std::string prec = r.raw("precision");
    const auto precision = parse_precision(prec);
    if (!precision) throw r.error("precision", "unknown precision '" + prec + "'");
    p.precision = *precision;
    // torchao's Float8 recipe, where the source names it ("float8 rowwise"); tensorwise is its default.
    if (p.precision == Precision::fp8_mixed && run.precision_source.find("rowwise") != std::string::npos)
        p.fp8_scaling = Fp8Scaling::rowwise;
    run.compiled = r.flag("compile");
    // Optional 0/1 columns (empty or absent: 0). The loss ran under torch.compile as well:
    auto optional_flag = [&](const char* column) { return r.has(column) && !r.raw(column).empty() && r.flag(column); };
    run.loss_compiled = optional_flag("loss_compiled");
    if (run.loss_compiled && !run.compiled) throw r.error("loss_compiled", "is 1 but compile is 0");
    // Megatron's communication overlaps (ThroughputOptions::tp_comm_overlap and p2p_overlap), each
    // on only where it can run.
    run.tp_comm_overlap = optional_flag("tp_comm_overlap");
    if (run.tp_comm_overlap && !(p.tp > 1 && p.sp))
        throw r.error("tp_comm_overlap", "is 1 but the row has no tensor parallelism with sequence parallelism");
    run.p2p_overlap = optional_flag("p2p_overlap");
    if (run.p2p_overlap && p.pp_schedule != PpSchedule::interleaved)
        throw r.error("p2p_overlap", "is 1 but the row's pipeline is not interleaved (vpp > 1)");
}

// Outcome and measured figures; the stated parameter count is checked against the config.
void parse_published_measured(const Row& r, ExternalRun& run, const std::string& config) {
    const Plan& p = run.plan;
    const std::string oc = r.raw("outcome");
    const auto outcome = parse_outcome(oc);
    if (!outcome)
        throw r.error("outcome", "unknown outcome '" + oc + "' (ok | oom | failed_other | ok_metrics_but_oom_in_log)");
    run.outcome = *outcome;
    run.tokens_per_s_per_gpu = measured_positive(r, "tokens_per_s_per_gpu");
    if (run.tokens_per_s_per_gpu && *run.tokens_per_s_per_gpu > 1e9)
        throw r.error("tokens_per_s_per_gpu", "is implausibly large (" + r.raw("tokens_per_s_per_gpu") + ")");
    if (run.tokens_per_s_per_gpu) run.tokens_per_s = *run.tokens_per_s_per_gpu * static_cast<double>(run.gpus);
    for (const char* col : {"mfu_pct", "hfu_pct"})
        if (auto v = r.number(col); v && (*v > 100 || *v < 0))
            throw r.error(col, "must lie in [0, 100] % (" + r.raw(col) + ")");
    if (auto v = r.number("mfu_pct")) run.mfu = *v / 100.0;
    if (auto v = r.number("hfu_pct")) run.hfu = *v / 100.0;
    const auto mem = measured_positive(r, "peak_mem_gib");
    if (mem && *mem > 1e5) throw r.error("peak_mem_gib", "is implausibly large (" + r.raw("peak_mem_gib") + " GiB)");
    const std::string kind = r.raw("peak_mem_kind");
    if (mem && kind != "reserved_max_over_ranks" && kind != "reserved_rank0")
        throw r.error("peak_mem_kind", "must say what was measured (reserved_max_over_ranks | reserved_rank0), got '" +
                                           kind + "'");
    if (!mem && !kind.empty()) throw r.error("peak_mem_kind", "is set but peak_mem_gib is empty");
    run.peak_reserved_bytes = gib_to_bytes(mem);
    if (run.outcome == RunOutcome::ok && !run.tokens_per_s_per_gpu && !mem)
        throw r.error("tokens_per_s_per_gpu", "a job with outcome ok needs a measured tokens/s or peak memory");
    if (!r.raw("num_params").empty()) {
        run.reported_params = r.integer("num_params");
        const std::int64_t ours = count_params(run.model).total;
        if (ours != *run.reported_params)
            throw r.error("num_params", "the source counts " + r.raw("num_params") + " parameters, model config '" +
                                            config + "' at seq " + std::to_string(p.seq) + " has " +
                                            std::to_string(ours));
    }
    run.reported_params_b = static_cast<double>(run.reported_params.value_or(count_params(run.model).total)) / 1e9;
}

// One row of a published benchmark table (schema in external_runs.hpp; columns in each
// data set's README). Unstated fields are empty cells and stay unknown.
ExternalRun parse_published_row(const Row& r, const std::string& file, std::int64_t line, const fs::path& data_dir) {
    ExternalRun run = run_at(file, line);
    run.source_ref = r.raw("source_ref");
    if (run.source_ref.empty()) throw r.error("source_ref", "is empty: every row names where the source states it");
    run.model_label = r.raw("model");
    if (run.model_label.empty()) throw r.error("model", "is empty");
    const std::string config = r.raw("model_config");
    try {
        run.model = load_model(config, data_dir);
    } catch (const InputError& e) {
        throw r.error("model_config", std::string("'") + config + "': " + e.what());
    }
    run.gpu = r.raw("gpu");
    try {
        (void)load_gpu(run.gpu, data_dir);
    } catch (const InputError& e) {
        throw r.error("gpu", std::string("'") + run.gpu + "': " + e.what());
    }

    parse_published_layout(r, run);
    parse_published_recipe(r, run);
    parse_published_measured(r, run, config);
    return run;
}

}  // namespace

namespace {

// Reads a CSV with a header line: every column of `required` must be present; each data
// row goes through `parse` (empty lines skipped). Errors name the file and the line.
template <class Parse>
std::vector<ExternalRun> read_rows(const fs::path& csv, std::span<const char* const> required, Parse parse) {
    // Read whole, within its limit (a FIFO is refused: it would block the read forever).
    std::istringstream in(
        read_user_text_file(csv, csv.string(), limits::kMaxDataSetCsvBytes, "a data set's CSV", "limits::kMaxDataSetCsvBytes"));
    const std::string file = csv.filename().string();
    std::string line;
    if (!std::getline(in, line)) throw InputError(csv.string(), "is empty (no header line)");
    const auto header = split_csv(line, file + ":1");
    std::map<std::string, std::size_t> columns;
    for (std::size_t i = 0; i < header.size(); ++i) columns[header[i]] = i;
    for (const char* c : required)
        if (!columns.count(c)) throw InputError(file + ":1", std::string("missing column '") + c + "'");
    std::vector<ExternalRun> runs;
    std::int64_t n = 1;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty() || line == "\r") continue;
        const std::string where = file + ":" + std::to_string(n);
        const auto cells = split_csv(line, where);
        if (cells.size() != header.size())
            throw InputError(where, std::to_string(cells.size()) + " fields, the header has " +
                                        std::to_string(header.size()));
        runs.push_back(parse(Row{&columns, &cells, where}, file, n));
    }
    if (runs.empty()) throw InputError(csv.string(), "has a header but no rows");
    return runs;
}

}  // namespace

std::vector<ExternalRun> read_external_csv(const fs::path& csv) { return read_rows(csv, kColumns, parse_row); }

std::vector<ExternalRun> read_published_runs_csv(const fs::path& csv, const fs::path& data_dir) {
    return read_rows(csv, kPublishedColumns, [&](const Row& r, const std::string& file, std::int64_t line) {
        return parse_published_row(r, file, line, data_dir);
    });
}

namespace {

// "file.csv" or "../folder/file.csv": a data set may read a sibling data set's CSV (one
// table split between a fitted and an evaluation-only data set by "rows"/"exclude_rows").
bool csv_path_allowed(const fs::path& p) {
    std::vector<std::string> parts;
    for (const auto& c : p) parts.push_back(c.string());
    if (parts.size() == 1) return parts[0] != ".." && parts[0] != ".";
    return parts.size() == 3 && parts[0] == ".." && parts[1] != ".." && parts[1] != "." && parts[2] != ".." &&
           parts[2] != "." && !p.is_absolute();
}

// dataset.json "rows": {"gpu": [...]} keeps only the rows on those GPUs; "exclude_rows":
// {"gpu": [...]} drops them. A row without a GPU column is on the data set's GPU.
void select_rows(ExternalDataset& d, const nlohmann::json& j, const std::string& manifest) {
    for (const char* key : {"rows", "exclude_rows"}) {
        if (!j.contains(key)) continue;
        const nlohmann::json& f = j.at(key);
        if (!f.is_object() || f.size() != 1 || !f.contains("gpu") || !f.at("gpu").is_array() || f.at("gpu").empty())
            throw InputError(manifest, std::string("\"") + key + "\" must be {\"gpu\": [GPU names]}");
        std::set<std::string> gpus;
        for (const auto& g : f.at("gpu")) {
            if (!g.is_string()) throw InputError(manifest, std::string("\"") + key + "\".gpu must list GPU names");
            gpus.insert(g.get<std::string>());
        }
        const bool keep = std::string(key) == "rows";
        std::erase_if(d.runs, [&](const ExternalRun& r) { return gpus.count(r.gpu.empty() ? d.gpu : r.gpu) != keep; });
    }
    if (d.runs.empty()) throw InputError(manifest, "no row is left after \"rows\" / \"exclude_rows\"");
}

}  // namespace

ExternalDataset read_external_dataset(const fs::path& folder) {
    return read_external_dataset(folder, default_data_dir());
}

ExternalDataset read_external_dataset(const fs::path& folder, const fs::path& data_dir) {
    const fs::path manifest = folder / "dataset.json";
    nlohmann::json j = read_json_file(manifest, manifest.string());
    ExternalDataset d;
    d.folder = folder;
    auto str = [&](const char* key) -> std::string {
        if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
            throw InputError(manifest.string(), std::string("needs a non-empty string \"") + key + "\"");
        return j[key].get<std::string>();
    };
    d.name = str("name");
    d.framework = str("framework");
    d.gpu = str("gpu");
    d.source = str("source");
    const std::string csv = str("csv");
    if (!csv_path_allowed(fs::path(csv)))
        throw InputError(manifest.string(), "\"csv\" must name a file in the same folder or in a sibling data set's "
                                            "folder (../<folder>/<file>), got '" + csv + "'");
    if (j.contains("targets")) {
        if (!j["targets"].is_object()) throw InputError(manifest.string(), "\"targets\" must be an object");
        check_targets(j["targets"], manifest.string());
        d.targets = j["targets"];
    }
    if (j.contains("schema")) d.schema = str("schema");
    if (d.schema != "nanotron-sweep" && d.schema != "published-runs")
        throw InputError(manifest.string(), "\"schema\" must be nanotron-sweep or published-runs, got '" + d.schema + "'");
    if (j.contains("evaluation_only")) {
        if (!j["evaluation_only"].is_boolean()) throw InputError(manifest.string(), "\"evaluation_only\" must be true or false");
        d.evaluation_only = j["evaluation_only"].get<bool>();
    }
    check_target_kinds(d, manifest.string());
    d.runs = d.schema == "published-runs" ? read_published_runs_csv(folder / csv, data_dir) : read_external_csv(folder / csv);
    select_rows(d, j, manifest.string());
    return d;
}

std::vector<fs::path> find_external_datasets(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    for (fs::recursive_directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
        if (it->is_regular_file(ec) && it->path().filename() == "dataset.json") out.push_back(it->path().parent_path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string ExternalRun::family_key() const {
    return model_label + "/tp" + std::to_string(plan.tp) + "/pp" + std::to_string(plan.pp);
}

int family_fold(const std::string& key, int k) {
    if (k <= 1) return 0;
    std::uint64_t z = 14695981039346656037ull;  // FNV-1a 64 (Fowler, Noll, Vo)
    for (unsigned char c : key) {
        z ^= c;
        z *= 1099511628211ull;
    }
    // FNV-1a's low bits follow the last characters (names differing in one digit share
    // their parity), so its bits are mixed first (splitmix64's finaliser, Steele et al. 2014).
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<int>(z % static_cast<std::uint64_t>(k));
}

int fold_of(const ExternalRun& run, int k) { return family_fold(run.family_key(), k); }

}  // namespace preflight::validation
