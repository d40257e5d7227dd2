// Fitted constants of the nanotron profile's caching-allocator model, copied from
// `preflight validate --check data/measurements --format json` -> external[0].memory.fitted_on_all
// (fit on every job of data/measurements/external/nanotron-h100, 2026-11-23). The same fit's
// held-out figures under 5-fold cross-validation by configuration are in that data set's README;
// the check refits on each training split, so these values never judge themselves.
#include "preflight/planner/frameworks.hpp"

namespace preflight {

AllocatorConstants nanotron_allocator_constants() {
    AllocatorConstants c;
    c.activation_fragmentation = 0.1020;        // reserved bytes per allocated activation byte, extra
    c.logits_fragmentation = 0.8407;            // extra per byte of the loss's 8 B/logit working set
    c.reserved_constant_bytes = 294'415'237;    // ~0.27 GiB
    c.non_pytorch_bytes = -1;                   // the GPU spec's overhead_bytes (CUDA context, NCCL, workspaces)
    c.verdict_margin_bytes = 13'891'534'848;    // ~12.94 GiB
    c.provenance =
        "fitted on the nanotron H100 sweep (1,622 jobs; 833 ok jobs for the reserved peak, 1,424 ok/oom jobs for "
        "the verdict margin), 2026-11-23";
    return c;
}

}  // namespace preflight
