#include "emit_note.hpp"

#include "preflight/planner/error.hpp"
#include "preflight/planner/memory.hpp"
#include "preflight/planner/profiles.hpp"

namespace preflight::cli {

std::string emit_framework_note(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan,
                                const std::string& ranked_by, const std::string& own) {
    const std::optional<FrameworkProfile> profile = profile_by_name(own);
    if (!profile || ranked_by == own) return {};
    // Advice to rank by `own` only where its profile runs the plan (audit of 2026-11-30: the note
    // sent a plan pinned to Megatron-LM's uneven split to profiles that refuse it).
    MemoryOptions o;
    o.profile = *profile;
    try {
        (void)evaluate_memory(model, gpu_for_profile(gpu, *profile), plan, o);
    } catch (const InputError& e) {
        return "# note: ranked for --framework " + ranked_by + "; the " + own + " profile cannot run this plan as "
               "ranked (" + e.what() + ")\n";
    }
    return "# note: ranked for --framework " + ranked_by + "; add --framework " + own +
           " to rank by what it runs and holds\n";
}

}  // namespace preflight::cli
