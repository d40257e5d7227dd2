// The device backend of `preflight run` and of the validation matrix: counting devices and
// running a plan on one. Which implementation a program has is chosen at link time:
// preflight::runtime_backend is the loader of the CUDA executor module (runtime/loader/,
// device_module.hpp; built when CMake finds nvcc), or the no-device backend
// (runtime/no_device/, no CUDA at all), so callers need no preprocessor switch. The GPU
// tests link the executor itself (preflight::runtime). This header includes no CUDA header.
#pragma once

#include <string_view>
#include <vector>

#include "preflight/runtime/runtime.hpp"

namespace preflight::runtime {

// Why this build cannot run on a device ("" when the backend can: the CUDA executor
// is built and its module loads).
std::string_view device_backend_unavailable_reason();

// Number of CUDA devices (0 when none, no driver, or the no-device backend).
int device_count();

// Runs the plan on device 0: set-up, warm-up + measured steps, teardown. Never throws
// for a failed allocation: the report comes back with status "allocation-failed".
// The no-device backend throws std::logic_error (check device_backend_unavailable_reason first).
RunReport run_on_device(const ModelConfig& model, const GpuSpec& gpu, const Plan& plan, const RunOptions& options);

// Test hook: set-up and one optimizer step (step 1, `options.seed`) on device 0, with
// the device's parameters and gradients read back in the program's flat layout.
struct StepGradients {
    std::vector<double> weights;    // the compute copy of the parameters before the step
    std::vector<double> gradients;  // after the step's backward: the fp32 accumulation buffer when the
                                    // recipe has one (bf16-mixed-fp32-grads), else the gradient buffer
    double loss = 0;                // the step's mean loss, as the run report's losses
};
// Throws std::runtime_error on any CUDA failure (including a failed allocation) and on the
// no-device backend.
StepGradients capture_step_gradients(const ModelConfig& model, const Plan& plan, const RunOptions& options);

// Test hook (the loopback backend): `steps` steps of every rank of the plan (dp x tp), each
// driven by a thread of this process with its own streams on device 0, exchanging through
// device memory, from one initial model (`options.seed`). Returns each rank's losses and the
// parameters assembled from every rank's shards and slices, in the layout of the plan's
// single-GPU program (build_program(model, single_gpu_plan(plan))). Throws on any failure (the
// other ranks are woken and stopped) and on the no-device backend.
std::vector<RankResult> run_ranks_on_device(const ModelConfig& model, const Plan& plan, const RunOptions& options,
                                            int steps);

}  // namespace preflight::runtime
