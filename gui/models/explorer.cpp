#include "explorer.hpp"

#include <algorithm>
#include <numeric>

#include <QElapsedTimer>
#include <QThread>

#include "item_models.hpp"
#include "preflight/planner/catalog.hpp"
#include "preflight/planner/error.hpp"
#include "preflight/planner/plan_schema.hpp"
#include "preflight/planner/profiles.hpp"
#include "preflight/planner/report.hpp"

namespace preflight::gui {

namespace {

QStringList to_qt(const std::vector<std::string>& v) {
    QStringList out;
    for (const auto& s : v) out << QString::fromStdString(s);
    return out;
}

// What the verdict weighs for `plan` under each recompute mode (fit_bytes, as `preflight memory`
// counts it) and the verdict; nullopt and "" where the planner rejects it.
void sweep_point(const ModelConfig& model, const GpuSpec& gpu, const FrameworkProfile& profile, Plan plan, Sweep& sweep) {
    MemoryOptions opt;  // no timeline: only the peak and the device need are needed
    opt.profile = profile;
    sweep.device_need = profile.verdict_on_reserved;
    for (std::size_t r = 0; r < 3; ++r) {
        plan.recompute = all_recomputes()[r];
        std::optional<std::int64_t> bytes;
        std::string_view verdict;
        try {
            validate_plan(plan, model);
            const MemoryReport m = evaluate_memory(model, gpu, plan, opt);
            bytes = fit_bytes(m, profile);
            verdict = memory_verdict(m);
        } catch (const InputError&) {
        }
        sweep.peaks[r].push_back(bytes);
        sweep.verdicts[r].push_back(verdict);
    }
}

// Sequence lengths from one step to the model's context (capped at 32k), on a grid the
// layout can take (2 * cp, and tp * cp under SP); the current seq included.
Sweep seq_sweep(const ModelConfig& model, const GpuSpec& gpu, const FrameworkProfile& profile, const Plan& plan) {
    Sweep s;
    s.axis = QStringLiteral("seq");
    s.current_x = plan.seq;
    std::int64_t upper = std::max<std::int64_t>(plan.seq * 2, 16384);
    upper = std::min<std::int64_t>(upper, std::max<std::int64_t>(std::min<std::int64_t>(model.max_positions, 32768), plan.seq));
    std::int64_t grain = upper >= 4096 ? 256 : 64;
    // Lengths the plan's layout can take (validate_plan_extensions): 2 * cp chunks per sequence,
    // and under SP each rank's seq / cp split over tp (was: tp only, so with cp 3 two points in
    // three read "invalid").
    if (plan.cp > 1) grain = std::lcm(grain, 2 * plan.cp);
    if (plan.sp && plan.tp > 1) grain = std::lcm(grain, plan.tp * plan.cp);
    const std::int64_t step = std::max<std::int64_t>(grain, (upper / 20 + grain - 1) / grain * grain);
    for (std::int64_t x = step; x <= upper; x += step) s.xs.push_back(x);
    if (s.xs.empty() || s.xs.back() != upper) s.xs.push_back(upper);
    s.xs.push_back(plan.seq);
    std::sort(s.xs.begin(), s.xs.end());
    s.xs.erase(std::unique(s.xs.begin(), s.xs.end()), s.xs.end());
    for (const auto x : s.xs) {
        Plan p = plan;
        p.seq = x;
        sweep_point(model, gpu, profile, p, s);
    }
    return s;
}

// Micro-batch sizes 1..16 (and the current one).
Sweep mbs_sweep(const ModelConfig& model, const GpuSpec& gpu, const FrameworkProfile& profile, const Plan& plan) {
    Sweep s;
    s.axis = QStringLiteral("mbs");
    s.current_x = plan.mbs;
    const std::int64_t upper = std::max<std::int64_t>(16, std::min<std::int64_t>(plan.mbs, 64));
    for (std::int64_t x = 1; x <= upper; ++x) s.xs.push_back(x);
    if (plan.mbs > upper) s.xs.push_back(plan.mbs);
    for (const auto x : s.xs) {
        Plan p = plan;
        p.mbs = x;
        sweep_point(model, gpu, profile, p, s);
    }
    return s;
}

}  // namespace

Explorer::Explorer(std::filesystem::path data_dir, QObject* parent)
    : QObject(parent),
      data_dir_(std::move(data_dir)),
      breakdown_(new BreakdownModel(this)),
      seq_sweep_(new SweepModel(this)),
      mbs_sweep_(new SweepModel(this)),
      timeline_(new TimelineModel(this)),
      candidates_(new CandidatesModel(this)),
      rejected_(new RejectedModel(this)) {}

Explorer::~Explorer() {
    if (search_thread_) search_thread_->wait();
}

QStringList Explorer::catalogModels() const {
    try {
        return to_qt(catalog_models(data_dir_));
    } catch (const std::exception&) {
        return {};
    }
}

QStringList Explorer::catalogGpus() const {
    try {
        return to_qt(catalog_gpus(data_dir_));
    } catch (const std::exception&) {
        return {};
    }
}

void Explorer::setError(const QString& msg) {
    if (msg == error_) return;
    error_ = msg;
    emit errorChanged(error_);
}

bool Explorer::setModel(const QString& spec) {
    try {
        ModelConfig m = load_model(spec.toStdString(), data_dir_);
        model_ = std::move(m);
        model_spec_ = spec;
    } catch (const std::exception& e) {
        setError(QString::fromUtf8(e.what()));
        return false;
    }
    return evaluate();
}

bool Explorer::setGpu(const QString& spec) {
    try {
        GpuSpec g = load_gpu(spec.toStdString(), data_dir_);
        gpu_ = std::move(g);
        gpu_spec_ = spec;
    } catch (const std::exception& e) {
        setError(QString::fromUtf8(e.what()));
        return false;
    }
    return evaluate();
}

bool Explorer::setPlan(const Plan& plan) {
    plan_ = plan;
    return evaluate();
}

bool Explorer::setAll(const QString& model_spec, const QString& gpu_spec, const Plan& plan) {
    plan_ = plan;
    try {
        ModelConfig m = load_model(model_spec.toStdString(), data_dir_);
        GpuSpec g = load_gpu(gpu_spec.toStdString(), data_dir_);
        model_ = std::move(m);
        gpu_ = std::move(g);
        model_spec_ = model_spec;
        gpu_spec_ = gpu_spec;
    } catch (const std::exception& e) {
        setError(QString::fromUtf8(e.what()));
        return false;
    }
    return evaluate();
}

QStringList Explorer::frameworks() { return to_qt(framework_names()); }

bool Explorer::setFramework(const QString& name) {
    if (!profile_by_name(name.toStdString())) {
        setError(QStringLiteral("--framework: unknown framework '%1' (%2)").arg(name, frameworks().join(QStringLiteral(", "))));
        return false;
    }
    framework_ = name;
    return evaluate();
}

QString Explorer::setUpKey() const {
    return current_ ? QStringLiteral("%1 | %2 | %3")
                          .arg(QString::fromStdString(current_->model.name), QString::fromStdString(current_->gpu.name),
                               framework_)
                    : QString();
}

void Explorer::evaluateMemory(Evaluation& ev, const Plan& plan) const {
    // As `preflight memory --framework F` builds its options (cli/cmd_memory.cpp run_memory).
    ev.profile = *profile_by_name(framework_.toStdString());
    if (deepspeed_zero_ && ev.profile.deepspeed_zero_optimizer) ev.profile.deepspeed_zero = *deepspeed_zero_;
    ev.model = *model_;
    ev.gpu = gpu_for_profile(*gpu_, ev.profile);
    ev.plan = resolve_defaults(plan, *model_);
    validate_plan(ev.plan, ev.model);
    MemoryOptions opt;
    opt.profile = ev.profile;
    opt.timeline = true;  // as `preflight memory` does
    ev.memory = evaluate_memory(ev.model, ev.gpu, ev.plan, opt);
}

QString Explorer::planRefusal(const Plan& plan) const {
    if (!model_ || !gpu_) return {};
    Evaluation ev;
    try {
        evaluateMemory(ev, plan);
    } catch (const InputError& e) {
        // A field's flag named by its key, as `preflight memory --plan` blames the file's field
        // (cli/plan_file.cpp blame_plan_file): "seq: 100000000000 exceeds ...".
        for (const PlanField& f : plan_fields())
            if (f.flag == e.subject()) return QString::fromStdString(std::string(f.key) + ": " + e.detail());
        return QString::fromUtf8(e.what());
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    return {};
}

bool Explorer::evaluate() {
    if (!model_ || !gpu_) return false;
    QElapsedTimer timer;
    timer.start();
    auto ev = std::make_unique<Evaluation>();
    try {
        evaluateMemory(*ev, plan_);
    } catch (const std::exception& e) {
        setError(QString::fromUtf8(e.what()));
        return false;
    }
    ev->seq_sweep = seq_sweep(ev->model, ev->gpu, ev->profile, ev->plan);
    ev->mbs_sweep = mbs_sweep(ev->model, ev->gpu, ev->profile, ev->plan);
    try {
        // The profile's default overlap of the interleaved schedule's pipeline sends (Megatron-LM's
        // is on): `plan` judges so.
        ThroughputOptions base;
        base.p2p_overlap = ev->profile.p2p_overlap_by_default;
        ev->throughput = estimate_throughput(ev->model, ev->gpu, ev->plan,
                                             throughput_options_for(ev->profile, ev->model, ev->plan, base));
        ev->has_throughput = true;
    } catch (const std::exception& e) {
        ev->throughput_note = QString::fromUtf8(e.what());
    }
    ev->eval_ms = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    current_ = std::move(ev);
    setError({});
    pushToModels();
    emit evaluated();
    if (!searched_for_.isEmpty() && searched_for_ != setUpKey() && !search_thread_) {
        candidates_->setRows({});
        rejected_->setRows({});
        search_suggestions_.clear();
        search_summary_ = QStringLiteral("Results of the search for %1 cleared: the set-up changed").arg(searched_for_);
        searched_for_.clear();
        emit searchCleared();
    }
    return true;
}

void Explorer::pushToModels() {
    const MemoryReport* r = current_ ? &current_->memory : nullptr;
    std::optional<ReportSide> measured;
    if (report_ && report_->measured) measured = report_->measured;
    breakdown_->setData(r, measured);
    timeline_->setData(r, measured);
    seq_sweep_->setSweep(current_ ? &current_->seq_sweep : nullptr, r ? r->capacity_bytes : 0);
    mbs_sweep_->setSweep(current_ ? &current_->mbs_sweep : nullptr, r ? r->capacity_bytes : 0);
}

nlohmann::json Explorer::planJson() const {
    return current_ ? plan_to_json(current_->plan) : nlohmann::json();
}

nlohmann::json Explorer::memoryDocument() const {
    if (!current_) return {};
    return memory_document(current_->model, current_->gpu, current_->plan, current_->memory, current_->profile.name);
}

bool Explorer::openRunReport(const QString& path) {
    try {
        setRunReport(load_run_report(path));
    } catch (const std::exception& e) {
        setError(QString::fromUtf8(e.what()));
        return false;
    }
    return true;
}

void Explorer::setRunReport(std::optional<RunReport> report) {
    report_ = std::move(report);
    pushToModels();
    emit runReportChanged();
    if (current_) emit evaluated();
}

std::optional<Plan> Explorer::candidatePlan(int row) const {
    const auto& rows = candidates_->rows();
    if (row < 0 || row >= static_cast<int>(rows.size())) return std::nullopt;
    return rows[static_cast<std::size_t>(row)].plan;
}

bool Explorer::startSearch(std::int64_t gpus, std::int64_t gbs_tokens) {
    if (search_thread_ || !current_) return false;
    SearchRequest req;
    req.gpus = gpus;
    req.gbs_tokens = gbs_tokens;
    req.seq = current_->plan.seq;
    req.headroom = kHeadroom;
    req.top_k = 25;
    // The framework chosen; current_->gpu is already the GPU as its profile sees it.
    req.memory.profile = current_->profile;
    // The training recipe stays as chosen; the search picks the layout.
    req.pins.precision = current_->plan.precision;
    req.pins.optimizer = current_->plan.optimizer;
    req.pins.attention = current_->plan.attention;
    req.pins.dropout = current_->plan.dropout;
    // Settings no search varies are carried as chosen (as the CLI's PlanFlags::pin carries them):
    // without them the ranking was another plan's (rowwise fp8 ranked at tensorwise speed).
    req.pins.fixed.fp8_scaling = current_->plan.fp8_scaling;
    req.pins.moe_capacity_factor = current_->plan.moe_capacity_factor;
    // Fine-tuning is the job, not a search axis; an offload mode chosen here is kept.
    req.pins.finetune = current_->plan.finetune;
    req.pins.lora = current_->plan.lora;
    if (current_->plan.offload != Offload::none) req.pins.offload = current_->plan.offload;
    struct Outcome {
        std::optional<SearchResult> result;
        QString error;
        double ms = 0;
    };
    auto outcome = std::make_shared<Outcome>();
    const ModelConfig model = current_->model;
    const GpuSpec gpu = current_->gpu;
    searched_for_ = setUpKey();
    search_thread_ = QThread::create([outcome, model, gpu, req] {
        QElapsedTimer t;
        t.start();
        try {
            outcome->result = search_plans(model, gpu, req);
        } catch (const std::exception& e) {
            outcome->error = QString::fromUtf8(e.what());
        }
        outcome->ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
    });
    search_thread_->setParent(this);
    connect(search_thread_, &QThread::finished, this, [this, outcome, gpus, gbs_tokens, profile = req.memory.profile] {
        search_thread_->deleteLater();
        search_thread_ = nullptr;
        search_suggestions_.clear();
        if (outcome->result) {
            std::vector<CandidateRow> rows;
            for (const auto& c : outcome->result->candidates)
                rows.push_back({c.plan, judged_bytes(c.memory, profile),  // what the search judged
                                c.memory.capacity_bytes, c.throughput.step_time_s,
                                c.throughput.tokens_per_s, c.throughput.mfu, c.batch_error,
                                QString::fromUtf8(std::string(memory_verdict(c.memory)).c_str()),
                                free_bytes(c.memory, profile)});  // as `preflight memory` counts it
            std::vector<RejectedRow> rejected;
            for (const auto& r : outcome->result->rejected)
                rejected.push_back({QString::fromStdString(r.family), QString::fromStdString(r.reason), r.plan});
            candidates_->setRows(std::move(rows), profile.verdict_on_reserved);
            rejected_->setRows(std::move(rejected));
            for (const auto& s : outcome->result->suggestions) search_suggestions_ << QString::fromStdString(s);
            search_summary_ = QStringLiteral("%1 GPUs, %2 tokens per step: %3 plans evaluated in %4 ms, %5 kept")
                                  .arg(gpus)
                                  .arg(groupDigits(gbs_tokens))
                                  .arg(outcome->result->plans_evaluated)
                                  .arg(outcome->ms, 0, 'f', 0)
                                  .arg(outcome->result->candidates.size());
        } else {
            // A failed search leaves no rows of an earlier one to be taken for its answer.
            candidates_->setRows({});
            rejected_->setRows({});
            searched_for_.clear();
            search_summary_ = QStringLiteral("Search failed: ") + outcome->error;
        }
        emit searchFinished(outcome->error);
    });
    emit searchStarted();
    search_thread_->start();
    return true;
}

}  // namespace preflight::gui
