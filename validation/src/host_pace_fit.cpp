// The host-pace model's fit (external_memory.hpp fit_host_pace_model; allocator_model.hpp HostPaceModel).
#include <algorithm>
#include <array>
#include <cmath>

#include "linear_solve.hpp"
#include "preflight/validation/external_memory.hpp"

namespace preflight::validation {

HostPaceModel fit_host_pace_model(const std::vector<ExternalRun>& runs, const std::vector<std::size_t>& train,
                                  const GpuSpec& gpu) {
    // Logistic regression by Newton's method (iteratively reweighted least squares) on the jobs
    // whose pace was read off their step time; a 1e-3 ridge keeps the coefficients finite when the
    // labels separate.
    constexpr int N = kHostPaceInputs;
    constexpr double kRidge = 1e-3;
    std::vector<std::array<double, N>> x;
    std::vector<double> waits;
    for (std::size_t i : train) {
        const ExternalRun& r = runs[i];
        if (!r.stall_per_micro_batch_s) continue;
        x.push_back(host_pace_inputs(r.plan.gpus(), r.plan.tp, r.plan.pp, gpu.gpus_per_node));
        waits.push_back(r.host_pace == HostPace::waits_each_micro_batch ? 1.0 : 0.0);
    }
    HostPaceModel m;
    if (x.empty()) return m;
    double w[N] = {};
    for (int round = 0; round < 50; ++round) {
        double h[N][N] = {}, g[N] = {};
        for (std::size_t j = 0; j < x.size(); ++j) {
            double z = 0;
            for (int a = 0; a < N; ++a) z += w[a] * x[j][a];
            const double p = 1.0 / (1.0 + std::exp(-std::clamp(z, -30.0, 30.0)));
            for (int a = 0; a < N; ++a) {
                g[a] += (p - waits[j]) * x[j][a];
                for (int b = 0; b < N; ++b) h[a][b] += p * (1.0 - p) * x[j][a] * x[j][b];
            }
        }
        for (int a = 0; a < N; ++a) {
            g[a] += kRidge * w[a];
            h[a][a] += kRidge;
        }
        double step[N];
        if (!solve_linear<N>(h, g, step)) break;
        double largest = 0;
        for (int a = 0; a < N; ++a) {
            w[a] -= step[a];
            largest = std::max(largest, std::fabs(step[a]));
        }
        if (largest < 1e-10) break;
    }
    m.intercept = w[0];
    m.per_log2_nodes = w[1];
    m.per_log2_tp_nodes_in_pipeline = w[2];
    m.per_log2_tp_nodes_single_stage = w[3];
    return m;
}

}  // namespace preflight::validation
