// The host runner's mixture-of-experts ops (program_moe.cpp) with the CPU reference
// (reference_moe.hpp). The routing table is held as doubles like every host buffer (its
// integers are exact in double) and read back as i64 for the reference.
#include <stdexcept>

#include "preflight/runtime/host_runner.hpp"
#include "preflight/runtime/reference_moe.hpp"

namespace preflight::runtime {

void HostRunner::run_moe(const Op& op) {
    // The router sees the ep block's tokens (its rows, ep x rows under expert parallelism); the
    // expert buffers hold this rank's experts' rows (ExpertSlots).
    const std::int64_t E = d.experts, k = d.topk, rows = d.route_rows(), pairs = rows * k, h = d.h;
    const ref::ExpertSlots es{d.expert0, d.local_experts, d.capacity};
    if (op.kind == OpKind::moe_route) {
        std::vector<std::int64_t> table(static_cast<std::size_t>(d.routing_elements()));
        ref::moe_route(at(op.v[0]), rows, E, k, d.renormalize_gates, at(op.v[1]), table.data());
        double* out = at(op.v[2]);
        for (std::size_t i = 0; i < table.size(); ++i) out[i] = static_cast<double>(table[i]);
        return;
    }
    // Every other op reads the routing table: v2, but v3 for the combine's backward.
    const View& rv = op.kind == OpKind::moe_combine_bwd ? op.v[3] : op.v[2];
    const double* rd = at(rv);
    std::vector<std::int64_t> table(rd, rd + d.routing_elements());
    const std::int64_t* r = table.data();
    switch (op.kind) {
        case OpKind::moe_dispatch: ref::moe_dispatch(at(op.v[0]), r, rows, k, E, h, es, at(op.v[1])); break;
        case OpKind::moe_linear_fwd:
            ref::moe_linear_fwd(at(op.v[0]), w(op.p0), r, pairs, E, op.v[1].cols, op.v[0].cols, es, at(op.v[1]));
            break;
        case OpKind::moe_linear_bwd_data: {  // dX may be a column window (the down dgrad into d(gate|up))
            const std::int64_t slots = op.v[1].rows;
            std::vector<double> dx(static_cast<std::size_t>(slots * op.v[1].cols));
            ref::moe_linear_bwd_data(at(op.v[0]), w(op.p0), r, pairs, E, op.v[0].cols, op.v[1].cols, es, dx.data());
            double* out = at(op.v[1]);
            for (std::int64_t s = 0; s < slots; ++s)
                for (std::int64_t c = 0; c < op.v[1].cols; ++c)
                    out[s * op.v[1].ld + c] = dx[static_cast<std::size_t>(s * op.v[1].cols + c)];
            break;
        }
        case OpKind::moe_linear_bwd_weight:
            ref::moe_linear_bwd_weight(at(op.v[0]), at(op.v[1]), r, pairs, E, op.v[0].cols, op.v[1].cols, es, g(op.p0),
                                       op.scale);
            break;
        case OpKind::moe_combine:
            ref::moe_combine(at(op.v[0]), at(op.v[1]), r, op.v[4].buffer == kNoBuffer ? nullptr : at(op.v[4]), rows, k,
                             E, h, es, at(op.v[3]));
            break;
        case OpKind::moe_combine_bwd:
            ref::moe_combine_bwd(at(op.v[0]), at(op.v[1]), at(op.v[2]), r, rows, k, E, h, es, at(op.v[4]), at(op.v[5]));
            break;
        case OpKind::moe_route_bwd:
            ref::moe_route_bwd(at(op.v[0]), at(op.v[1]), r, op.v[4].buffer == kNoBuffer ? nullptr : at(op.v[4]), rows,
                               E, k, at(op.v[3]));
            break;
        case OpKind::moe_dispatch_bwd:
            ref::moe_dispatch_bwd(at(op.v[0]), r, rows, k, E, h, es, at(op.v[1]), op.accumulate);
            break;
        default: throw std::logic_error("HostRunner: not a mixture-of-experts op");
    }
}

}  // namespace preflight::runtime
