#include "preflight/runtime/run_report.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include <unistd.h>

#include "preflight/planner/memory_categories.hpp"
#include "preflight/planner/report.hpp"
#include "preflight/runtime/walker.hpp"

namespace preflight::runtime {

using nlohmann::json;

double peak_relative_error(const RunReport& r) {
    const double p = static_cast<double>(r.predicted.tracked_peak_bytes);
    if (p <= 0) return 0;
    return std::abs(static_cast<double>(r.measured.tracked_peak_bytes) - p) / p;
}

json category_bytes_to_json(const CategoryBytes& b) {
    json j = json::object();
    for (int c = 0; c < kCategoryCount; ++c) j[std::string(to_string(static_cast<Category>(c)))] = b[static_cast<std::size_t>(c)];
    return j;
}

json contract_bytes_to_json(const CategoryBytes& b, std::int64_t overhead) {
    json j = json::object();
    for (const auto& c : memory_categories()) j[std::string(c.key)] = std::int64_t{0};
    j["overhead"] = overhead;
    for (int c = 0; c < kCategoryCount; ++c) {
        const std::string key(contract_category(static_cast<Category>(c)));
        j[key] = j[key].get<std::int64_t>() + b[static_cast<std::size_t>(c)];
    }
    return j;
}

namespace {

template <class T>
json opt(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

json timeline_json(const std::vector<TimelineSample>& t) {
    json a = json::array();
    for (const auto& e : t) {
        json b = json::array();
        for (auto v : e.bytes) b.push_back(v);
        a.push_back({{"seq", e.seq}, {"time_s", e.time_s}, {"phase", std::string(to_string(e.phase))},
                     {"op", e.label}, {"total_bytes", total(e.bytes)}, {"bytes", b}});
    }
    return a;
}

}  // namespace

namespace {

json device_json(const std::optional<DeviceInfo>& device) {
    if (!device) return nullptr;
    return {{"name", device->name},
            {"driver", device->driver},
            {"runtime", device->runtime},
            {"memory_bytes", device->memory_bytes},
            {"compute_capability", device->compute_capability}};
}

// A label the run did not record (a dry run reads no driver) is unknown: null, not "".
json label(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json driver_memory_json(const DriverMemory& d) {
    return {{"baseline_bytes", opt(d.baseline_bytes)},
            {"baseline_source", label(d.baseline_source)},
            {"context_bytes", opt(d.context_bytes)},
            {"libraries_bytes", opt(d.libraries_bytes)},
            {"after_setup_bytes", opt(d.after_setup_bytes)},
            {"at_peak_op_bytes", opt(d.at_peak_op_bytes)},
            {"peak_op", label(d.peak_op)},
            {"after_warmup_bytes", opt(d.after_warmup_bytes)},
            {"used_peak_bytes", opt(d.used_peak_bytes)},
            {"pool_reserved_peak_bytes", opt(d.pool_reserved_peak_bytes)},
            {"pool_used_peak_bytes", opt(d.pool_used_peak_bytes)},
            {"nvml_used_peak_bytes", opt(d.nvml_used_peak_bytes)},
            {"nvml", label(d.nvml)},
            {"samples", d.samples}};
}

json measured_json(const RunReport& r) {
    const Measured& m = r.measured;
    const std::int64_t m_overhead = m.overhead_bytes.value_or(0);
    json mj;
    mj["source"] = r.mode == "device" ? "device" : "dry-run (tracking allocator, no device)";
    mj["peak_bytes"] = m.tracked_peak_bytes + m_overhead;
    mj["tracked_peak_bytes"] = m.tracked_peak_bytes;
    mj["peak_op"] = m.peak_where;
    mj["bytes_by_category"] = category_bytes_to_json(m.peak_breakdown);
    mj["per_gpu_bytes"] = contract_bytes_to_json(m.peak_breakdown, m_overhead);
    // Without a device the memory outside the tensors is unknown (overhead_bytes null): not 0.
    if (!m.overhead_bytes) mj["per_gpu_bytes"]["overhead"] = nullptr;
    mj["overhead_bytes"] = opt(m.overhead_bytes);
    mj["pool_peak_bytes"] = opt(m.pool_peak_bytes);
    mj["allocator"] = m.allocator.empty() ? json(nullptr) : json(m.allocator);
    mj["arena_bytes"] = opt(m.arena_bytes);
    mj["arena_live_peak_bytes"] = opt(m.arena_live_peak_bytes);
    mj["device_used_peak_bytes"] = opt(m.device_used_peak_bytes);
    mj["driver"] = driver_memory_json(m.driver);
    mj["debug_sync"] = m.debug_sync;
    mj["attention_backend"] = m.attention_backend.empty() ? json(nullptr) : json(m.attention_backend);
    mj["step_time_s"] = opt(m.step_time_s);
    mj["step_times_s"] = m.step_times_s;
    mj["warmup_steps"] = m.warmup_steps;
    mj["loss"] = m.losses;
    mj["tokens_per_s"] = opt(m.tokens_per_s);
    mj["mfu"] = opt(m.mfu);
    mj["hfu"] = opt(m.hfu);
    mj["op_times"] = m.op_times ? op_times_to_json(*m.op_times) : json(nullptr);
    return mj;
}

json predicted_json(const Predicted& p) {
    json pj;
    pj["profile"] = "preflight-runtime";
    pj["peak_bytes"] = p.memory.peak_bytes;
    pj["tracked_peak_bytes"] = p.tracked_peak_bytes;
    pj["peak_phase"] = describe(p.memory.peak_phase);
    pj["per_gpu_bytes"] = breakdown_to_json(p.memory.at_peak);
    pj["activations_per_layer_bytes"] = p.memory.activations_per_layer_bytes;
    pj["fits"] = p.memory.fits;
    pj["step_time_s"] = opt(p.step_time_s);
    pj["dp_communication_s"] = opt(p.dp_communication_s);
    pj["tp_communication_s"] = opt(p.tp_communication_s);
    pj["pp_communication_s"] = opt(p.pp_communication_s);
    pj["pipeline_bubble_s"] = opt(p.pipeline_bubble_s);
    pj["cp_communication_s"] = opt(p.cp_communication_s);
    pj["ep_communication_s"] = opt(p.ep_communication_s);
    pj["emulated_step_time_s"] = opt(p.emulated_step_time_s);
    pj["most_loaded_stage"] = p.most_loaded_stage ? json{{"stage", p.most_loaded_stage->stage},
                                                         {"peak_bytes", p.most_loaded_stage->peak_bytes},
                                                         {"fits", p.most_loaded_stage->fits}}
                                                  : json(nullptr);
    pj["tokens_per_s"] = opt(p.tokens_per_s);
    pj["mfu"] = opt(p.mfu);
    pj["hfu"] = opt(p.hfu);
    pj["model_flops_per_step"] = p.model_flops_per_step;
    pj["hardware_flops_per_step"] = p.hardware_flops_per_step;
    return pj;
}

json parallel_json(const ParallelInfo& p) {
    return {{"world_size", p.world_size},
            {"rank", p.rank},
            {"dp_rank", p.dp_rank},
            {"tp_rank", p.tp_rank},
            {"pp_rank", p.pp_rank},
            {"cp_rank", p.cp_rank},
            {"backend", p.backend},
            {"nccl", p.nccl.empty() ? json(nullptr) : json(p.nccl)},
            {"nccl_world1_bytes", opt(p.nccl_world1_bytes)},
            {"collectives_per_step", p.collectives_per_step},
            {"collective_bytes_per_step", p.collective_bytes_per_step},
            {"all_reduce_s", opt(p.all_reduce_s)},
            {"reduce_scatter_s", opt(p.reduce_scatter_s)},
            {"all_gather_s", opt(p.all_gather_s)},
            {"step_time_with_predicted_communication_s", opt(p.step_time_with_predicted_communication_s)}};
}

json failure_json(const FailureInfo& f) {
    json op = nullptr;
    if (f.op)
        op = {{"section", f.op->section}, {"index", f.op->index},
              {"kind", f.op->kind},        {"layer", f.op->layer},
              {"micro_batch", f.op->micro_batch}, {"step", f.op->step},
              {"label", f.op->label},      {"synchronised", f.op->synchronised}};
    return {{"kind", f.kind},
            {"op", op},
            {"code", f.code},
            {"where", f.where},
            {"buffer", f.buffer},
            {"category", f.category},
            {"requested_bytes", f.requested_bytes},
            {"free_bytes", f.free_bytes},
            {"in_use_bytes", f.in_use_bytes},
            {"message", f.message}};
}

}  // namespace

json run_report_to_json(const RunReport& r) {
    json j;
    j["schema_version"] = kSchemaVersion;
    j["command"] = "run";
    j["mode"] = r.mode;
    j["status"] = r.status;
    j["model"] = {{"name", r.model.name}, {"params", r.predicted.memory.params.total},
                  {"params_active", r.predicted.memory.params.active}};
    j["gpu"] = {{"name", r.gpu.name}, {"memory_bytes", r.gpu.memory_bytes}};
    j["plan"] = plan_to_json(r.plan);
    j["steps"] = r.steps;
    j["seed"] = r.seed;
    j["device"] = device_json(r.device);
    j["parallel"] = parallel_json(r.parallel);
    j["measured"] = measured_json(r);
    j["predicted"] = predicted_json(r.predicted);
    j["agreement"] = {{"tracked_peak_relative_error", peak_relative_error(r)}};
    if (r.failure) j["failure"] = failure_json(*r.failure);
    json cats = json::array();
    for (int c = 0; c < kCategoryCount; ++c) cats.push_back(std::string(to_string(static_cast<Category>(c))));
    // The samples cover the step's own ops and its first and last micro-batch (walker.hpp,
    // timeline_keeps); the micro-batches between repeat the first and are counted here.
    const std::int64_t omitted = r.timeline.empty() ? 0 : timeline_omitted_micro_batches(r.plan.grad_acc);
    j["timeline"] = {{"categories", cats}, {"omitted_micro_batches", omitted}, {"samples", timeline_json(r.timeline)}};
    return j;
}

namespace {

// Writes into an existing file that rename() must not replace: a device such as /dev/null, a
// FIFO, a terminal (what a shell redirection does with them).
void write_in_place(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error(path.string() + ": cannot open it for writing");
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(path.string() + ": write failed");
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path_given, const std::string& text) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path_given, ec);  // follows symbolic links
    if (fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st)) return write_in_place(path_given, text);
    // A symbolic link is written through: the file it names is replaced, the link is kept.
    // A link may dangle (its file not written yet), so each hop is read rather than canonicalised.
    fs::path path = path_given;
    for (int hops = 0; fs::is_symlink(fs::symlink_status(path, ec)); ++hops) {
        const fs::path target = fs::read_symlink(path, ec);
        if (ec || hops == 40) throw std::runtime_error(path_given.string() + ": cannot follow the symbolic link");
        path = target.is_absolute() ? target : path.parent_path() / target;
    }
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string tmp_name = ".";  // hidden sibling, same filesystem, so rename() is atomic
    tmp_name += path.filename().string();
    tmp_name += ".tmp.";
    tmp_name += std::to_string(::getpid());
    const std::filesystem::path tmp = dir / tmp_name;
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw std::runtime_error(path.string() + ": cannot create " + tmp.string());
        out << text;
        out.flush();
        if (!out) {
            std::filesystem::remove(tmp, ec);
            throw std::runtime_error(path.string() + ": write failed");
        }
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        const std::string why = ec.message();  // before remove() reuses ec
        std::filesystem::remove(tmp, ec);
        throw std::runtime_error(path.string() + ": cannot write the report there: " + why);
    }
}

}  // namespace preflight::runtime
