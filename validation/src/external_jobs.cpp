#include "preflight/validation/external_jobs.hpp"

#include <cstdio>
#include <map>
#include <sstream>

#include "preflight/planner/error.hpp"

namespace preflight::validation {

namespace {
std::string number(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.10g", v);
    return b;
}
// RFC 4180: a field holding a comma, quote or line break is quoted, its quotes doubled.
std::string field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + '"';
}
}  // namespace

std::string external_jobs_csv(const std::vector<ExternalRun>& runs, const MemoryCrossValidation* memory,
                              const ThroughputCv& tokens) {
    if (memory && (memory->held_out.size() != runs.size() || memory->host_pace.size() != runs.size() ||
                   memory->stall_per_micro_batch_s.size() != runs.size()))
        throw InputError("external jobs", "the memory cross-validation does not cover these runs");
    std::map<std::string, const HeldOutTokens*> by_id;
    for (const HeldOutTokens& t : tokens.per_sample) by_id[t.id] = &t;
    std::ostringstream o;
    o << "id,model,hidden_size,num_layers,nodes,gpus,dp,tp,pp,mbs,grad_acc,zero_stage,outcome,memory_fold,measured_reserved_bytes,"
         "predicted_reserved_bytes,predicted_device_need_bytes,predicted_fits,tokens_fold,"
         "measured_tokens_per_s_per_gpu,predicted_tokens_per_s_per_gpu,host_pace,stall_per_micro_batch_s,"
         "predicted_reserved_low_bytes,predicted_reserved_high_bytes\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const ExternalRun& r = runs[i];
        const Plan& p = r.plan;
        o << field(r.id) << ',' << field(r.model_label) << ',' << r.model.hidden << ',' << r.model.layers << ',';
        if (r.nodes > 0) o << r.nodes;  // 0: the source does not state it
        o << ',' << r.gpus << ',' << p.dp << ',' << p.tp << ','
          << p.pp << ',' << p.mbs << ',' << p.grad_acc << ',' << static_cast<int>(p.zero) << ',' << to_string(r.outcome)
          << ',';
        if (memory) o << fold_of(r, memory->folds);
        o << ',';
        if (r.peak_reserved_bytes) o << *r.peak_reserved_bytes;
        o << ',';
        if (memory && memory->held_out[i].modelled) {
            const MemoryPrediction& m = memory->held_out[i];
            o << m.measured_rank_reserved_bytes << ',' << m.device_need_bytes << ',' << (m.fits ? "yes" : "no");
        } else {
            o << ",,";
        }
        o << ',';
        const auto t = by_id.find(r.id);
        if (t != by_id.end())
            o << t->second->fold << ',' << number(t->second->measured_tokens_per_s_per_gpu) << ','
              << number(t->second->predicted_tokens_per_s_per_gpu);
        else
            o << ",,";
        o << ',';
        if (memory) {
            o << to_string(memory->host_pace[i]) << ',';
            if (memory->stall_per_micro_batch_s[i]) o << number(*memory->stall_per_micro_batch_s[i]);
        } else {
            o << ',';
        }
        // The two ends of the held-out range (external_memory.hpp held_out_low / held_out_high).
        o << ',';
        if (memory && i < memory->held_out_low.size() && memory->held_out_low[i].modelled)
            o << memory->held_out_low[i].measured_rank_reserved_bytes;
        o << ',';
        if (memory && i < memory->held_out_high.size() && memory->held_out_high[i].modelled)
            o << memory->held_out_high[i].measured_rank_reserved_bytes;
        o << '\n';
    }
    return o.str();
}

}  // namespace preflight::validation
