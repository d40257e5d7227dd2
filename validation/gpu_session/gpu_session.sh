#!/usr/bin/env bash
# The GPU session runbook: ONE script the device machine runs (via the `run` tool, from
# the repository root, with carry [".deps"] staged by validation/gpu_session/prepare_gpu_session.sh).
#
#   bash validation/gpu_session/gpu_session.sh STAGE...
#     check        libraries first: cuBLAS/cuBLASLt (toolkit), cuDNN 9 (PyTorch's nvidia-cudnn wheel:
#                  its include/ and lib/ are exported as CUDNN_INCLUDE_DIR / LD_LIBRARY_PATH for the
#                  build and every run), NCCL (reported; the single-GPU runtime does not use it),
#                  compute-sanitizer, NVML; writes libraries.txt. Always runs first.
#     build        configure + build (sm_90, Release, GUI off) with the carried header-only
#                  deps; GoogleTest built from .deps/googletest when carried, else no tests
#     test         ctest -L gpu (every kernel vs its CPU reference, gradients vs the
#                  whole-model CPU reference, loss falls, tracked peak == dry run), memcheck excluded
#     memcheck     ctest -R runtime_memcheck (compute-sanitizer --tool memcheck on 2-step runs)
#     cputest      ctest -LE gpu (optional; the CPU suites also run without a GPU)
#     measure[:G]  the measured set of validation/gpu_session/gpu_session_configs.json (all, group G, or
#                  measure:id1,id2): per plan `preflight run --report data/measurements/<gpu>/<id>.json`
#                  with its evidence (<id>.log: command, nvidia-smi header and state, full output),
#                  then the same model and plan in PyTorch (validation/pytorch/train.py, when present)
#                  in the same call: <id>.pytorch.json / <id>.pytorch.log
#     headline     the headline plan (configs' "headline": llama-3.2-1b, bf16-mixed, seq 2048, flash):
#                  ours, PyTorch eager and PyTorch torch.compile, same GPU, same call, but only for the
#                  runs not yet recorded on this GPU kind (PREFLIGHT_REMEASURE=1 measures all three again); MFU of each
#     losscurve    same model, data, seed and initial weights: `preflight run --save-init` 50 steps, then
#                  train.py --init-from --data preflight 50 steps, compared by compare_loss.py
#                  (PREFLIGHT_LOSS_MODEL (a catalog name or a config.json path) / _SEQ / _MBS / _PRECISION /
#                  _LR, default llama-3.2-1b 512 4
#                  bf16-mixed-fp32-grads 1e-3; PREFLIGHT_LOSS_BF16_RESIDUAL=1: PyTorch's residual stream
#                  rounded to bf16 as ours, train.py --bf16-residual; PREFLIGHT_LOSS_OURS_VARIANTS
#                  "--no-cudnn;--no-fused-epilogues": one curve of ours per flag set; PREFLIGHT_LOSS_PYTORCH_FROM:
#                  compare with that recorded PyTorch curve instead of running train.py)
#     debug        one small plan with --debug-sync (names the failing op if a kernel faults)
#     measure-dp[:id,id]  the emulated data-parallel ranks of gpu_session_dp_configs.json: per plan
#                  `preflight run --emulate-rank R --report data/measurements/<gpu>/dp/<id>.json` with its
#                  evidence (<id>.log); PREFLIGHT_DP_STEPS (3) and PREFLIGHT_DP_WARMUP (1) per plan
#     measure-mp[:id,id]  the same for the tensor-, sequence- and pipeline-parallel ranks of
#                  gpu_session_mp_configs.json, into data/measurements/<gpu>/mp/
#     nccl         NCCL at world size 1 through the launcher (`preflight run --nproc-per-node 1`, ZeRO-1 and
#                  ZeRO-3 gpt2): data/measurements/<gpu>/dp/nccl-ws1-*.json and logs (a world of one
#                  writes the report under its own name, no .rankN suffix: cmd_run.cpp)
#     fp8          fp8-mixed against bf16-mixed: every pair of gpu_session_fp8_configs.json back to back
#                  (data/measurements/<gpu>/fp8/<id>_<precision>.json and logs)
#     optimes[:G]  per-op times (`preflight run --op-times`, 1 warm-up + 3 steps) for the plans of
#                  gpu_session_configs.json already recorded on this GPU kind without them: added to
#                  each report's measured.op_times with the call and log they come from (<id>.optimes.log).
#                  measure, measure-dp/-mp and fp8 record op times with every new run.
#     curves       200-step loss curves (PREFLIGHT_CURVE_STEPS) of llama-3.2-1b: ours in fp8-mixed and
#                  bf16-mixed from one start, PyTorch in bf16-mixed and fp32 from it twice each (train.py
#                  --split 1 and 2: only the reduction order differs), the band of correct runs
#                  (compare_band.py) and curves.svg, in data/measurements/<gpu>/curves/; a curve already
#                  recorded there is not run again (PREFLIGHT_REMEASURE=1 runs it again). Last, budget
#                  allowing, PyTorch bf16-mixed rounded where ours rounds (train.py --bf16-residual
#                  --bf16-param-grads), judged against ours and against PyTorch by the same band: is the
#                  early offset of ours from PyTorch where the two round? Then the same with each norm's
#                  weight read as its bf16 copy too (--bf16-norm-weights), and each curve's distance from
#                  the fp32 one (distance_from_fp32.py).
#     all          check build test headline losscurve memcheck measure
#
# Everything recorded lands under data/measurements/<gpu>/ (session logs in
# data/measurements/<gpu>/session-<stamp>/) and is packed after every step into
# $OUT/preflight-gpu-<stamp>.tar.gz (unpack with `tar xzf ... -C <repo root>`) with a short
# $OUT/summary.txt (the device tool returns few files, shallow).
# The tarball is also left in $PREFLIGHT_BUILD_DIR/records-of-the-last-call/, and a later call on the
# same (warm) machine restores from it the record files its copy of the tree lacks.
#
# Env: PREFLIGHT_DEPS (.deps), PREFLIGHT_BUILD_DIR (build-gpu), PREFLIGHT_BUDGET_S (540: no new
# work starts past it; running commands are cut off at it), PREFLIGHT_GPU (catalog name; default
# from nvidia-smi), PREFLIGHT_STEPS (10), PREFLIGHT_WARMUP (2), PREFLIGHT_PYTORCH (1; 0 = skip),
# PREFLIGHT_JOBS (nproc), PREFLIGHT_REMEASURE (0: plans already recorded on a device are skipped, so a
# later call continues where the budget guard stopped an earlier one), OUT (the device tool's output
# folder; default /tmp/preflight-gpu-out).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
start_s=$SECONDS
budget_s=${PREFLIGHT_BUDGET_S:-540}
deps=$(realpath -m "${PREFLIGHT_DEPS:-.deps}")
build=$(realpath -m "${PREFLIGHT_BUILD_DIR:-build-gpu}")
steps=${PREFLIGHT_STEPS:-10}
warmup=${PREFLIGHT_WARMUP:-2}
pytorch=${PREFLIGHT_PYTORCH:-1}
jobs=${PREFLIGHT_JOBS:-$(nproc 2>/dev/null || echo 8)}
out=${OUT:-/tmp/preflight-gpu-out}
configs=validation/gpu_session/gpu_session_configs.json
dp_configs=validation/gpu_session/gpu_session_dp_configs.json
fp8_configs=validation/gpu_session/gpu_session_fp8_configs.json
mp_configs=validation/gpu_session/gpu_session_mp_configs.json
dp_steps=${PREFLIGHT_DP_STEPS:-3}
dp_warmup=${PREFLIGHT_DP_WARMUP:-1}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$out"

elapsed() { echo $((SECONDS - start_s)); }
left() { echo $((budget_s - (SECONDS - start_s))); }
note() { echo "[gpu_session +$(elapsed)s] $*" | tee -a "$summary"; }

# ---- the GPU and where its records go ---------------------------------------------------
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [[ -n ${PREFLIGHT_GPU:-} ]]; then
    gpu=$PREFLIGHT_GPU
else
    case "$gpu_name" in
        # The NVL cards have other peaks and memory than the SXM specs; the catalog has no spec for them.
        *H200*NVL* | *H100*NVL*)
            echo "gpu_session: '$gpu_name' has no spec in data/gpus (the NVL cards' peaks differ from the SXM" \
                 "ones); add one and set PREFLIGHT_GPU to its name" >&2
            exit 3 ;;
        *H200*) gpu=h200-sxm-141gb ;;
        *H100*PCIe*) gpu=h100-pcie-80gb ;;
        *H100*) gpu=h100-sxm-80gb ;;
        *A100*80GB*) gpu=a100-sxm-80gb ;;
        *A100*) gpu=a100-sxm-40gb ;;
        *) gpu=$(python3 -c "import json;print(json.load(open('$configs'))['gpu_default'])" 2>/dev/null || echo h100-sxm-80gb) ;;
    esac
fi
mdir=data/measurements/$gpu
sdir=$mdir/session-$stamp
mkdir -p "$sdir"
summary=$sdir/summary.txt
tarball=$out/preflight-gpu-$stamp.tar.gz
carry_dir=$build/records-of-the-last-call  # see restore_last_call

pack() {  # everything recorded so far -> one tarball + summary.txt in $OUT
    python3 validation/gpu_session/gpu_session_summary.py "$mdir" "$configs" >"$sdir/measurements.txt" 2>&1 || true
    # Weight files (curves' init.bin: 4.9 GB for llama-3.2-1b) stay on the device: packing one
    # outlasted a call's limit on 2026-11-28 and nothing came back.
    tar czf "$tarball.tmp" --exclude='*.bin' --exclude='*.f32' "$mdir" 2>/dev/null && mv -f "$tarball.tmp" "$tarball"
    { cat "$summary"; echo; cat "$sdir/measurements.txt"; } >"$out/summary.txt" 2>/dev/null
    [[ -f $tarball ]] && mkdir -p "$carry_dir" && cp -f "$tarball" "$carry_dir/latest.tar.gz"
}
trap pack EXIT
# Records of an earlier call on this machine: the device copies the working tree afresh for each
# call, so what an earlier call recorded is gone unless it was unpacked on the other side first,
# which the 30 s a warm machine waits seldom allows (on 2026-12-04 a second call lacked the first's
# fp32 curves, and its comparisons with them failed). Each pack leaves its tarball (the whole
# records folder) in the build folder, which is git-ignored and kept between calls; at the start of
# a call the files the tree lacks are restored from it, never over the tree's own.
restore_last_call() {
    [[ -f $carry_dir/latest.tar.gz ]] || return 0
    local before after
    before=$(find "$mdir" -type f | wc -l)
    tar xzf "$carry_dir/latest.tar.gz" --skip-old-files 2>/dev/null
    after=$(find "$mdir" -type f | wc -l)
    (( after > before )) && note "restored $((after - before)) record files of the last call on this machine, missing from this tree ($carry_dir)"
    return 0
}

{
    echo "# preflight GPU session $stamp: stages: $*"
    echo "# gpu: ${gpu_name:-none} -> catalog $gpu; budget ${budget_s}s; steps $steps + warm-up $warmup; jobs $jobs"
} >"$summary"
restore_last_call
{
    echo "## nvidia-smi"; nvidia-smi 2>&1
    echo "## nvidia-smi -q"; nvidia-smi -q 2>&1
    echo "## nvcc --version"; nvcc --version 2>&1
    echo "## cmake --version"; cmake --version 2>&1
    echo "## ninja --version"; ninja --version 2>&1
    echo "## compute-sanitizer --version"; (compute-sanitizer --version || /usr/local/cuda/bin/compute-sanitizer --version) 2>&1
    echo "## python / torch / transformers"
    python3 -c "import sys,torch;print(sys.version);print('torch',torch.__version__,'cuda',torch.version.cuda)" 2>&1
    python3 -c "import transformers;print('transformers',transformers.__version__)" 2>&1
    echo "## uname -a"; uname -a; echo "## nproc"; nproc; echo "## free -g"; free -g 2>&1
} >"$sdir/environment.txt" 2>&1
# The evidence header of every measured run: nvidia-smi -q down to the first GPU's state.
smi_header=$(nvidia-smi -q 2>/dev/null | sed -n '1,/^ *Performance State/p' | head -60)

# ---- libraries: found before anything is built or run ------------------------------------
do_check() {
    local f=$sdir/libraries.txt
    {
        echo "## cuBLAS / cuBLASLt (CUDA toolkit)"
        ls -l /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libcublas.so* 2>&1 | head -6
        echo "## cuDNN (PyTorch's nvidia-cudnn wheel)"
        python3 -c "import nvidia.cudnn as m, os; p = list(m.__path__)[0]; print(p); print(sorted(os.listdir(os.path.join(p, 'lib'))))" 2>&1
        python3 -c "import torch; print('torch cudnn', torch.backends.cudnn.version())" 2>&1
        echo "## NCCL"
        python3 -c "import nvidia.nccl as m, os; p = list(m.__path__)[0]; print(p, sorted(os.listdir(os.path.join(p, 'lib'))))" 2>&1
        python3 -c "import torch; print('torch nccl', torch.cuda.nccl.version())" 2>&1
        echo "## NVML"; ls -l /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* /usr/local/nvidia/lib64/libnvidia-ml.so* 2>&1 | head -4
        echo "## compute-sanitizer"; command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>&1
    } >"$f" 2>&1
    # libcudnn.so.9: the nvidia.cudnn wheel (nvidia/cudnn/lib, or a CUDA-13 layout elsewhere
    # under site-packages/nvidia), else torch's own lib folder.
    local cudnn_lib="" site
    cudnn_lib=$(python3 -c "import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
    if [[ ! -e $cudnn_lib/libcudnn.so.9 ]]; then
        site=$(python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))" 2>/dev/null)
        cudnn_lib=$(find "$site/nvidia" "$site/torch/lib" -name 'libcudnn.so.9' 2>/dev/null | head -1 | xargs -r dirname)
    fi
    if [[ -n $cudnn_lib && -e $cudnn_lib/libcudnn.so.9 ]]; then
        export LD_LIBRARY_PATH="$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        local inc
        inc=$(find "$cudnn_lib/.." -maxdepth 2 -name cudnn_graph.h 2>/dev/null | head -1 | xargs -r dirname)
        if [[ -n $inc ]]; then
            export CUDNN_INCLUDE_DIR=$inc
        elif [[ -f $deps/cudnn/include/cudnn_graph.h ]]; then
            export CUDNN_INCLUDE_DIR=$deps/cudnn/include  # carried headers (the wheel has none)
        fi
        note "cuDNN: $cudnn_lib/libcudnn.so.9; headers ${CUDNN_INCLUDE_DIR:-none}"
    elif [[ -f /usr/local/cuda/include/cudnn_graph.h ]]; then
        note "cuDNN: from the CUDA toolkit folder"
    else
        note "cuDNN: NOT FOUND (bf16 flash attention will use the runtime's own kernel; the report says so)"
    fi
    # libnccl.so.2 for the nccl backend and the emulated ranks' world-size-1 measurement: the
    # nvidia.nccl wheel (dlopen'ed by the runtime); its header comes from the toolkit or .deps/nccl.
    local nccl_lib
    nccl_lib=$(python3 -c "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
    if [[ -n $nccl_lib && -e $nccl_lib/libnccl.so.2 ]]; then
        export LD_LIBRARY_PATH="$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        note "NCCL: $nccl_lib/libnccl.so.2"
    else
        note "NCCL: no nvidia.nccl wheel (the nccl backend and the world-size-1 measurement report themselves unavailable)"
    fi
    [[ -e /usr/local/cuda/lib64/libcublasLt.so ]] || ls /usr/local/cuda/lib64/libcublasLt.so.* >/dev/null 2>&1 ||
        note "cuBLASLt: NOT FOUND under /usr/local/cuda/lib64 (the build will fail)"
    note "libraries: $(grep -c . "$f") lines in libraries.txt"
}
do_check

# ---- stages -----------------------------------------------------------------------------
built=""  # "full" or "cli" once this invocation has built
build_failed=0  # a failed build is not retried by each later stage
do_build() {
    local gtest_dir="" tests=OFF
    if [[ -f $deps/googletest/CMakeLists.txt ]]; then
        if [[ ! -f $build/_gtest/install/lib/cmake/GTest/GTestConfig.cmake && ! -f $build/_gtest/install/lib64/cmake/GTest/GTestConfig.cmake ]]; then
            note "building GoogleTest from $deps/googletest"
            { cmake -S "$deps/googletest" -B "$build/_gtest/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
                  -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$build/_gtest/install" &&
              cmake --build "$build/_gtest/build" -j "$jobs" && cmake --install "$build/_gtest/build"; } \
                >"$sdir/googletest-build.log" 2>&1 || note "GoogleTest build FAILED (see googletest-build.log)"
        fi
        for d in "$build/_gtest/install/lib/cmake/GTest" "$build/_gtest/install/lib64/cmake/GTest"; do
            [[ -f $d/GTestConfig.cmake ]] && gtest_dir=$d && tests=ON
        done
    else
        note "no GoogleTest sources carried ($deps/googletest): building without tests"
    fi
    local args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPREFLIGHT_GUI=OFF -DPREFLIGHT_CUDA=ON
                -DCMAKE_CUDA_ARCHITECTURES=90 -DPREFLIGHT_BENCH=OFF -DPREFLIGHT_TESTS=$tests
                -Dnlohmann_json_DIR="$deps/cmake/nlohmann_json" -DCLI11_DIR="$deps/cmake/CLI11"
                -DPREFLIGHT_TOMLPP_ROOT="$deps/tomlplusplus" -DPREFLIGHT_YAMLCPP_ROOT="$deps/yaml-cpp")
    [[ -n $gtest_dir ]] && args+=(-DGTest_DIR="$gtest_dir")
    [[ -n ${CUDNN_INCLUDE_DIR:-} ]] && args+=(-DCUDNN_INCLUDE_DIR="$CUDNN_INCLUDE_DIR")
    note "configure: cmake ${args[*]}"
    if ! cmake "${args[@]}" >"$sdir/configure.log" 2>&1; then
        note "configure FAILED (tail of configure.log):"; tail -25 "$sdir/configure.log" | tee -a "$summary"; return 1
    fi
    local target=()
    [[ ${1:-} == cli-only ]] && target=(--target preflight)
    local t0=$SECONDS
    # `timeout 0` is no limit at all: with the budget spent, no build starts.
    if (( $(left) < 30 )); then note "build SKIPPED (budget: $(left)s left)"; build_failed=1; return 1; fi
    note "build: cmake --build $build -j $jobs ${target[*]}"
    if ! timeout "$(left)" cmake --build "$build" -j "$jobs" "${target[@]}" >"$sdir/build.log" 2>&1; then
        note "build FAILED (tail of build.log):"; grep -E "error|FAILED" "$sdir/build.log" | head -30 | tee -a "$summary"
        build_failed=1; return 1
    fi
    note "build ok in $((SECONDS - t0))s ($(grep -c 'warning' "$sdir/build.log") warning lines)"
    built=${1:-full}
    return 0
}

# Full build (incremental: a no-op when up to date) unless this invocation did it already;
# `cli-only` is enough for the measurements and accepts an existing binary.
ensure_built() {
    if (( build_failed )); then note "no build: it failed or was skipped earlier in this call"; return 1; fi
    if [[ ${1:-} == cli-only ]]; then
        [[ -n $built || -x $build/cli/preflight ]] && return 0
        do_build cli-only
    else
        [[ $built == full ]] && return 0
        do_build
    fi
}

do_ctest() {  # do_ctest NAME CTEST_ARGS...
    local name=$1; shift
    if [[ ! -f $build/CTestTestfile.cmake ]] || ! grep -q "PREFLIGHT_TESTS:BOOL=ON" "$build/CMakeCache.txt"; then
        note "$name: skipped (this build has no tests: GoogleTest was not carried or failed to build)"; return 0
    fi
    if (( $(left) < 60 )); then note "$name: skipped (budget: $(left)s left)"; return 0; fi
    note "$name: ctest $*"
    (cd "$build" && timeout "$(left)" ctest --output-on-failure -V --timeout 900 --output-junit "$root/$sdir/$name.junit.xml" "$@") \
        >"$sdir/$name.log" 2>&1
    local rc=$?
    note "$name: exit $rc; $(grep -E '^[0-9]+% tests passed|tests passed,' "$sdir/$name.log" | tail -1)"
    grep -E 'Test +#[0-9]+: .*\*\*\*|[0-9]+: SKIPPED: ' "$sdir/$name.log" | head -30 | sed 's/^ */    /' | tee -a "$summary"
    pack
}

# Runs one command with the evidence log: command line, nvidia-smi header and state, full output.
evidence_run() {  # evidence_run LOG TIMEOUT_S CMD...
    local log=$1 limit=$2; shift 2
    # `timeout 0` is no limit at all (and a negative one an error): with under 5 s left nothing starts.
    if (( limit < 5 )); then
        { echo "# command: $*"; echo "# SKIPPED: ${limit}s of the session budget left"; } >"$log"
        return 124
    fi
    {
        echo "# command: $*"
        echo "# cwd: $root"
        echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)"
        echo "# nvidia-smi -q (header):"; echo "$smi_header"
        echo "# nvidia-smi (before the run):"; nvidia-smi 2>&1
        echo "# ---- output (stdout + stderr) ----"
    } >"$log"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    {
        echo "# ---- end of output ----"
        echo "# exit code: $rc$([[ $rc -eq 124 ]] && echo ' (cut off by the session budget guard)')"
        echo "# wall time: $((SECONDS - t0)) s"
        echo "# nvidia-smi (after the run):"; nvidia-smi --query-gpu=name,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm --format=csv 2>&1
    } >>"$log"
    return $rc
}

# The plans of gpu_session_configs.json that SELECTOR picks (all | a group letter | id,id,...),
# one line each: id model seq mbs grad_acc recompute precision attention.
select_configs() {
    python3 - "$configs" "$1" <<'EOF'
import json, sys
cfg = json.load(open(sys.argv[1]))["configs"]
sel = sys.argv[2]
for c in cfg:
    if sel == "all" or c["group"] == sel or c["id"] in sel.split(","):
        print(c["id"], c["model"], c["seq"], c["mbs"], c["grad_acc"], c["recompute"], c["precision"], c["attention"])
EOF
}

do_measure() {  # do_measure SELECTOR (all | group letter | id,id,...)
    local sel=${1:-all}
    ensure_built cli-only || { note "measure: no preflight binary"; return 1; }
    local pre=$build/cli/preflight train=validation/pytorch/train.py
    [[ -f $train ]] || note "measure: $train not present: PyTorch comparison skipped"
    local lines
    lines=$(select_configs "$sel")
    [[ -n $lines ]] || { note "measure: no configuration matches '$sel'"; return 1; }
    note "measure '$sel': $(echo "$lines" | wc -l) plans on $gpu"
    # Local: the caller's variables (do_headline's id) must survive the loop's reads.
    local id model seq mbs ga rc prec attn
    while read -r id model seq mbs ga rc prec attn; do
        # Resume: a plan already recorded on a device by today's runtime (report ok, its memory from the
        # arena allocator, and PyTorch's report there or not applicable) is not run again unless
        # PREFLIGHT_REMEASURE=1. Reports of the cudaMallocAsync pool era (before the arena, no
        # measured.allocator) are measured again: their driver peaks describe a runtime gone since.
        if [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] && python3 - "$mdir/$id.json" "$mdir/$id.pytorch.json" "$rc" "$pytorch" "$train" <<'PY'
import json, os, sys
ours, theirs, rc, pytorch, train = sys.argv[1:]
try:
    r = json.load(open(ours))
except (OSError, ValueError):
    sys.exit(1)
done = r.get("mode") == "device" and r.get("status") == "ok" and (r.get("measured") or {}).get("allocator") == "arena"
needs_pt = pytorch == "1" and os.path.exists(train) and rc != "selective"
sys.exit(0 if done and (not needs_pt or os.path.exists(theirs)) else 1)
PY
        then
            note "$id: already recorded (set PREFLIGHT_REMEASURE=1 to measure again)"; continue
        fi
        local plan=(--model "$model" --gpu "$gpu" --seq "$seq" --mbs "$mbs" --grad-acc "$ga" --recompute "$rc"
                    --precision "$prec" --attention "$attn")
        # Time estimate from the prediction: set-up ~20 s + (warm-up + steps) x 3 x predicted step, same for PyTorch.
        local pred est
        pred=$("$pre" run "${plan[@]}" --dry-run --format json 2>/dev/null |
               python3 -c "import json,sys; print(json.load(sys.stdin)['predicted'].get('step_time_s') or 0.5)" 2>/dev/null || echo 0.5)
        est=$(python3 -c "print(int(20 + ($warmup + $steps) * 3 * $pred))")
        local need=$est
        [[ $pytorch == 1 && -f $train ]] && need=$((2 * est + 20))
        if (( $(left) < need )); then
            note "$id: SKIPPED (budget: needs ~${need}s, $(left)s left)"; continue
        fi
        local cmd=("$pre" run "${plan[@]}" --steps "$steps" --warmup "$warmup" --op-times --report "$mdir/$id.json")
        evidence_run "$mdir/$id.log" "$(left)" "${cmd[@]}"
        local code=$?
        note "$id: preflight run exit $code ($(python3 validation/gpu_session/gpu_session_summary.py --one "$mdir/$id.json" 2>/dev/null))"
        if [[ $pytorch == 1 && -f $train ]]; then
            if [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] && python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get('status') in ('ok', 'allocation-failed') else 1)" "$mdir/$id.pytorch.json" 2>/dev/null; then
                note "$id: PyTorch already recorded (set PREFLIGHT_REMEASURE=1 to measure again)"
            elif [[ $rc == selective ]]; then
                note "$id: PyTorch SKIPPED (HF transformers has no selective recompute; train.py exits 2 on it)"
            elif (( $(left) < est + 10 )); then
                note "$id: PyTorch SKIPPED (budget: $(left)s left)"
            else
                # The same model (its catalog config.json) and plan in PyTorch eager (validation/pytorch/train.py).
                local pcmd=(python3 "$train" --config "data/models/$model.json" --model-name "$model" --gpu "$gpu"
                            --seq "$seq" --mbs "$mbs" --grad-acc "$ga" --recompute "$rc" --precision "$prec"
                            --attention "$attn" --steps "$steps" --warmup "$warmup" --report "$mdir/$id.pytorch.json")
                evidence_run "$mdir/$id.pytorch.log" "$(left)" "${pcmd[@]}"
                note "$id: PyTorch exit $? ($(python3 validation/gpu_session/gpu_session_summary.py --one "$mdir/$id.pytorch.json" 2>/dev/null))"
            fi
        fi
        pack
    done <<<"$lines"
}

# write_gate DIR MIN ABOUT: DIR's gate.json (validate --check judges the folder's device runs as a
# set: driver-peak error P50 <= 1 %, P95 <= 3 %, over at least MIN runs), unless it has one.
write_gate() {
    [[ -f $1/gate.json ]] && return 0
    printf '{\n  "about": "%s",\n  "source": "preflight-runtime",\n  "peak_abs_error_p50_max": 0.01,\n  "peak_abs_error_p95_max": 0.03,\n  "compared_runs_min": %d\n}\n' \
        "$3" "$2" >"$1/gate.json"
}

do_measure_ranks() {  # do_measure_ranks STAGE CONFIGS SUBDIR SELECTOR (all | id,id,...): emulated ranks of a plan
    local stage=$1 cfg=$2 sub=$3 sel=${4:-all}
    ensure_built cli-only || { note "$stage: no preflight binary"; return 1; }
    local pre=$build/cli/preflight ddir=$mdir/$sub lines
    mkdir -p "$ddir"
    if [[ $sub == dp ]]; then
        write_gate "$ddir" 12 "issue 32: the emulated data-parallel ranks (and NCCL world-size-1 runs), driver-measured peak against the preflight-runtime prediction"
    else
        write_gate "$ddir" 8 "issue 33: the emulated tensor-, sequence- and pipeline-parallel ranks, driver-measured peak against the preflight-runtime prediction"
    fi
    lines=$(python3 - "$cfg" "$sel" <<'EOF'
import json, sys
sel = sys.argv[2]
for c in json.load(open(sys.argv[1]))["configs"]:
    if sel == "all" or c["id"] in sel.split(","):
        print(c["id"], c["model"], c["seq"], c["mbs"], c["grad_acc"], c["dp"], c.get("tp", 1), c.get("pp", 1),
              "--sp" if c.get("sp") else "-", c["zero"], c["rank"], c["recompute"], c["precision"], c["attention"],
              c.get("pp_schedule", "1f1b"), c.get("vpp", 1), c.get("cp", 1), c.get("ep", 1))
EOF
)
    [[ -n $lines ]] || { note "$stage: no configuration matches '$sel'"; return 1; }
    note "$stage '$sel': $(echo "$lines" | wc -l) emulated ranks on $gpu"
    local id model seq mbs ga dp tp pp sp zero rank rc prec attn sched vpp cp ep
    while read -r id model seq mbs ga dp tp pp sp zero rank rc prec attn sched vpp cp ep; do
        if [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r.get('mode') == 'device' and r.get('status') == 'ok' else 1)" "$ddir/$id.json" 2>/dev/null; then
            note "$id: already recorded (set PREFLIGHT_REMEASURE=1 to measure again)"; continue
        fi
        local plan=(--model "$model" --gpu "$gpu" --seq "$seq" --mbs "$mbs" --grad-acc "$ga" --dp "$dp" --tp "$tp" --pp "$pp"
                    --zero "$zero" --recompute "$rc" --precision "$prec" --attention "$attn" --emulate-rank "$rank")
        [[ $sp == --sp ]] && plan+=(--sp)
        [[ $sched == 1f1b ]] || plan+=(--pp-schedule "$sched" --vpp "$vpp")
        [[ $cp == 1 ]] || plan+=(--cp "$cp")
        [[ $ep == 1 ]] || plan+=(--ep "$ep")
        local pred need
        pred=$("$pre" run "${plan[@]}" --dry-run --format json 2>/dev/null |
               python3 -c "import json,sys; print(json.load(sys.stdin)['predicted'].get('step_time_s') or 0.5)" 2>/dev/null || echo 0.5)
        need=$(python3 -c "print(int(25 + ($dp_warmup + $dp_steps) * 3 * $pred))")
        if (( $(left) < need )); then
            note "$id: SKIPPED (budget: needs ~${need}s, $(left)s left)"; continue
        fi
        evidence_run "$ddir/$id.log" "$(left)" "$pre" run "${plan[@]}" --steps "$dp_steps" --warmup "$dp_warmup" --op-times \
            --report "$ddir/$id.json"
        note "$id: preflight run exit $? ($(python3 validation/gpu_session/gpu_session_summary.py --one "$ddir/$id.json" 2>/dev/null))"
        pack
    done <<<"$lines"
}

do_nccl() {  # NCCL at world size 1, through the launcher (the one NCCL run a single GPU allows)
    ensure_built cli-only || { note "nccl: no preflight binary"; return 1; }
    local pre=$build/cli/preflight ddir=$mdir/dp z
    mkdir -p "$ddir"
    for z in 1 3; do
        if [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r.get('mode')=='device' and r.get('status')=='ok' else 1)" "$ddir/nccl-ws1-gpt2-z$z.json" 2>/dev/null; then
            note "nccl ZeRO-$z: already recorded (set PREFLIGHT_REMEASURE=1 to measure again)"; continue
        fi
        (( $(left) > 60 )) || { note "nccl ZeRO-$z: SKIPPED (budget)"; continue; }
        evidence_run "$ddir/nccl-ws1-gpt2-z$z.log" "$(left)" "$pre" run --model gpt2 --gpu "$gpu" --seq 1024 --mbs 4 \
            --grad-acc 2 --zero "$z" --nproc-per-node 1 --steps "$dp_steps" --warmup "$dp_warmup" --report "$ddir/nccl-ws1-gpt2-z$z.json"
        note "nccl ZeRO-$z: exit $? ($(python3 validation/gpu_session/gpu_session_summary.py --one "$ddir/nccl-ws1-gpt2-z$z.json" 2>/dev/null))"
        pack
    done
}

do_optimes() {  # do_optimes SELECTOR: per-op times for plans measured before --op-times existed
    local sel=${1:-all}
    ensure_built cli-only || { note "optimes: no preflight binary"; return 1; }
    local pre=$build/cli/preflight lines tmp=${TMPDIR:-/tmp}/preflight-optimes-$$.json
    lines=$(select_configs "$sel")
    local id model seq mbs ga rc prec attn
    while read -r id model seq mbs ga rc prec attn; do
        [[ -n $id ]] || continue
        # Only into a report this GPU kind already holds, and only where it has no op times yet.
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r.get('mode') == 'device' and r.get('status') == 'ok' and not r['measured'].get('op_times') else 1)" \
            "$mdir/$id.json" 2>/dev/null || { note "$id: optimes not needed (no report here, or it has op times)"; continue; }
        (( $(left) > 60 )) || { note "$id: optimes SKIPPED (budget: $(left)s left)"; continue; }
        rm -f "$tmp"
        evidence_run "$mdir/$id.optimes.log" "$(left)" "$pre" run --model "$model" --gpu "$gpu" --seq "$seq" --mbs "$mbs" \
            --grad-acc "$ga" --recompute "$rc" --precision "$prec" --attention "$attn" --steps 3 --warmup 1 --op-times \
            --report "$tmp"
        # The op times join the plan's report, saying which call and log they come from; the
        # report's measured step is still the one recorded with it.
        python3 - "$mdir/$id.json" "$tmp" "$id.optimes.log" "$stamp" <<'PY' && note "$id: op times added" || note "$id: optimes run failed"
import json, os, sys
target, tmp, log, stamp = sys.argv[1:]
if not os.path.exists(tmp):
    sys.exit(1)
run = json.load(open(tmp))
if run.get("status") != "ok" or not run["measured"].get("op_times"):
    sys.exit(1)
report = json.load(open(target))
ops = run["measured"]["op_times"]
ops["recorded"] = {"call": stamp, "log": log, "device": run["device"]["name"],
                   "that_call_step_time_s": run["measured"]["step_time_s"],
                   "note": "a later call than this report's measured steps, same plan, same GPU kind"}
report["measured"]["op_times"] = ops
with open(target, "w") as f:
    f.write(json.dumps(report, indent=2) + "\n")
PY
        pack
    done <<<"$lines"
}

do_fp8() {  # fp8 / bf16 pairs of gpu_session_fp8_configs.json, each pair back to back on this GPU
    ensure_built cli-only || { note "fp8: no preflight binary"; return 1; }
    local pre=$build/cli/preflight fdir=$mdir/fp8 lines
    mkdir -p "$fdir"
    write_gate "$fdir" 12 "issue 34: the fp8-mixed runs and their bf16-mixed pairs, driver-measured peak against the preflight-runtime prediction"
    # A config with "dp" runs one rank of that plan alone (--emulate-rank), its ZeRO stage "zero".
    lines=$(python3 -c "import json,sys; [print(c['id'], c['model'], c['seq'], c['mbs'], c['grad_acc'], c['recompute'], c['attention'], ('--dp %d --zero %d --emulate-rank %d' % (c['dp'], c.get('zero', 0), c.get('rank', 0))) if c.get('dp', 1) > 1 else '') for c in json.load(open(sys.argv[1]))['configs']]" "$fp8_configs")
    local id model seq mbs ga rc attn extra pr
    while read -r id model seq mbs ga rc attn extra; do
        for pr in bf16-mixed fp8-mixed; do
            local rid="${id}_$pr"
            if [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r.get('status') == 'ok' else 1)" "$fdir/$rid.json" 2>/dev/null; then
                note "$rid: already recorded"; continue
            fi
            (( $(left) > 90 )) || { note "$rid: SKIPPED (budget: $(left)s left)"; continue; }
            evidence_run "$fdir/$rid.log" "$(left)" "$pre" run --model "$model" --gpu "$gpu" --seq "$seq" --mbs "$mbs" \
                --grad-acc "$ga" --recompute "$rc" --attention "$attn" --precision "$pr" --steps "$steps" --warmup "$warmup" \
                $extra --op-times --report "$fdir/$rid.json"
            note "$rid: exit $? ($(python3 validation/gpu_session/gpu_session_summary.py --one "$fdir/$rid.json" 2>/dev/null))"
            pack
        done
    done <<<"$lines"
}

curve_recorded() {  # curve_recorded REPORT: a curve with status ok, kept unless PREFLIGHT_REMEASURE=1
    [[ ${PREFLIGHT_REMEASURE:-0} != 1 ]] &&
        python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get('status') == 'ok' else 1)" "$1" 2>/dev/null
}

do_curves() {  # 200-step loss curves: ours (fp8-mixed, bf16-mixed) and PyTorch's band (bf16-mixed, fp32)
    ensure_built cli-only || { note "curves: no preflight binary"; return 1; }
    local pre=$build/cli/preflight cdir=$mdir/curves n=${PREFLIGHT_CURVE_STEPS:-200} train=validation/pytorch/train.py
    mkdir -p "$cdir"
    local plan=(--model llama-3.2-1b --gpu "$gpu" --seq 512 --mbs 4 --lr 1e-3 --seed 1234)
    local as_ours=pytorch-bf16-mixed-rounded-as-ours-split1  # the diagnostic runs, last
    local as_ours_norms=pytorch-bf16-mixed-rounded-as-ours-norm-weights-split1
    local pt_args=(--config data/models/llama-3.2-1b.json --model-name llama-3.2-1b --gpu "$gpu" --seq 512 --mbs 4
        --steps "$n" --warmup 0 --lr 1e-3 --seed 1234 --init-from "$cdir/init.bin" --data preflight)
    # Resumable: a curve already recorded (status ok) is not run again unless PREFLIGHT_REMEASURE=1.
    # The initial weights are not kept between calls (4x the parameters); when our bf16 curve is
    # recorded but a PyTorch one is missing, a one-step run of the same plan and seed writes them
    # again (the runtime draws them from --seed at set-up, before any step).
    if curve_recorded "$cdir/ours-bf16-mixed.json"; then
        note "curves: ours bf16-mixed already recorded"
        if ! curve_recorded "$cdir/pytorch-fp32-split1.report" || ! curve_recorded "$cdir/pytorch-fp32-split2.report" ||
            ! curve_recorded "$cdir/pytorch-bf16-mixed-split1.report" || ! curve_recorded "$cdir/pytorch-bf16-mixed-split2.report" ||
            ! curve_recorded "$cdir/$as_ours.report" || ! curve_recorded "$cdir/$as_ours_norms.report"; then
            evidence_run "$sdir/curves-init.log" "$(left)" "$pre" run "${plan[@]}" --precision bf16-mixed --steps 1 --warmup 0 \
                --save-init "$cdir/init.bin"
            note "curves: initial weights written again (one step, seed 1234) exit $?"
        fi
    else
        evidence_run "$cdir/ours-bf16-mixed.log" "$(left)" "$pre" run "${plan[@]}" --precision bf16-mixed --steps "$n" --warmup 0 \
            --save-init "$cdir/init.bin" --report "$cdir/ours-bf16-mixed.json"
        note "curves: ours bf16-mixed exit $?"
        pack  # each run's log is kept even if the call is cut off later
    fi
    if curve_recorded "$cdir/ours-fp8-mixed.json"; then
        note "curves: ours fp8-mixed already recorded"
    else
        evidence_run "$cdir/ours-fp8-mixed.log" "$(left)" "$pre" run "${plan[@]}" --precision fp8-mixed --steps "$n" --warmup 0 \
            --report "$cdir/ours-fp8-mixed.json"
        note "curves: ours fp8-mixed exit $?"
        pack
    fi
    # PyTorch's curves are loss records, kept as *.report: `validate --check` re-predicts every
    # *.json report's memory, and a --split 2 run's peak is not the plan's.
    local prec split guard
    for prec in bf16-mixed fp32; do
        guard=$([[ $prec == fp32 ]] && echo 120 || echo 75)  # what one 200-step run takes, with margin
        for split in 1 2; do  # the same recipe, data and start; only the reduction order differs
            curve_recorded "$cdir/pytorch-$prec-split$split.report" && { note "curves: PyTorch $prec split $split already recorded"; continue; }
            [[ -f $cdir/init.bin ]] || { note "curves: PyTorch $prec split $split SKIPPED (no init.bin: our bf16 run failed)"; continue; }
            (( $(left) > guard )) || { note "curves: PyTorch $prec split $split SKIPPED (budget: $(left)s left)"; continue; }
            evidence_run "$cdir/pytorch-$prec-split$split.log" "$(left)" python3 "$train" "${pt_args[@]}" \
                --precision "$prec" --split "$split" --report "$cdir/pytorch-$prec-split$split.report"
            note "curves: PyTorch $prec split $split exit $?"
            pack
        done
    done
    python3 validation/pytorch/compare_band.py "$cdir/pytorch-bf16-mixed-split1.report" "$cdir/pytorch-bf16-mixed-split2.report" \
        --ours "$cdir/ours-bf16-mixed.json" --pytorch "$cdir/pytorch-bf16-mixed-split1.report" --json "$cdir/band-bf16-mixed.json" \
        >"$cdir/band-bf16-mixed.txt" 2>&1
    note "curves: bf16 band: $(tail -1 "$cdir/band-bf16-mixed.txt")"
    python3 validation/pytorch/compare_band.py "$cdir/pytorch-fp32-split1.report" "$cdir/pytorch-fp32-split2.report" \
        --json "$cdir/band-fp32.json" >"$cdir/band-fp32.txt" 2>&1
    note "curves: fp32 band: $(tail -1 "$cdir/band-fp32.txt")"
    # Diagnostics (README, "Loss curves": the early offset): PyTorch rounding the residual stream,
    # its gradient and every parameter gradient to bf16 where ours does; then also reading each norm's
    # weight as its bf16 copy, as ours does (2026-12-04's candidate for the rest of the offset).
    # Ours against each, and each against PyTorch, judged by the band and by the window medians.
    local diag name tag flags ab=("$cdir/pytorch-bf16-mixed-split1.report" "$cdir/pytorch-bf16-mixed-split2.report")
    for diag in "$as_ours|rounded-as-ours|--bf16-residual --bf16-param-grads" \
        "$as_ours_norms|rounded-as-ours-norm-weights|--bf16-residual --bf16-param-grads --bf16-norm-weights"; do
        IFS='|' read -r name tag flags <<<"$diag"
        if curve_recorded "$cdir/$name.report"; then
            note "curves: PyTorch bf16-mixed $tag already recorded"
        elif [[ ! -f $cdir/init.bin ]]; then
            note "curves: PyTorch bf16-mixed $tag SKIPPED (no init.bin)"
        elif (( $(left) <= 75 )); then
            note "curves: PyTorch bf16-mixed $tag SKIPPED (budget: $(left)s left)"
        else
            # shellcheck disable=SC2086  # the flags are words
            evidence_run "$cdir/$name.log" "$(left)" python3 "$train" "${pt_args[@]}" --precision bf16-mixed --split 1 \
                $flags --report "$cdir/$name.report"
            note "curves: PyTorch bf16-mixed $tag exit $?"
            pack
        fi
        [[ -f $cdir/$name.report ]] || continue
        python3 validation/pytorch/compare_band.py "${ab[@]}" --ours "$cdir/ours-bf16-mixed.json" \
            --pytorch "$cdir/$name.report" --json "$cdir/band-ours-vs-$tag.json" >"$cdir/band-ours-vs-$tag.txt" 2>&1
        note "curves: ours vs PyTorch $tag: $(grep '^# steps 1-' "$cdir/band-ours-vs-$tag.txt")"
        python3 validation/pytorch/compare_band.py "${ab[@]}" --ours "$cdir/$name.report" \
            --pytorch "${ab[0]}" --json "$cdir/band-$tag-vs-pytorch.json" >"$cdir/band-$tag-vs-pytorch.txt" 2>&1
        note "curves: PyTorch $tag vs PyTorch: $(grep '^# steps 1-' "$cdir/band-$tag-vs-pytorch.txt")"
    done
    # Every curve's distance from the fp32 one (where the fp32 pair agrees, fp32 is known): ours in
    # bf16 judged by PyTorch's bf16 runs' own distance, a yardstick that also sees steps 1-3.
    local far=("ours bf16-mixed=$cdir/ours-bf16-mixed.json" "PyTorch bf16-mixed split 1=$cdir/pytorch-bf16-mixed-split1.report"
        "PyTorch bf16-mixed split 2=$cdir/pytorch-bf16-mixed-split2.report" "ours fp8-mixed=$cdir/ours-fp8-mixed.json")
    [[ -f $cdir/$as_ours.report ]] && far+=("PyTorch bf16-mixed rounded as ours=$cdir/$as_ours.report")
    [[ -f $cdir/$as_ours_norms.report ]] && far+=("PyTorch bf16-mixed rounded as ours, norm weights too=$cdir/$as_ours_norms.report")
    python3 validation/pytorch/distance_from_fp32.py "$cdir/pytorch-fp32-split1.report" "$cdir/pytorch-fp32-split2.report" \
        "${far[@]}" --json "$cdir/distance-from-fp32.json" >"$cdir/distance-from-fp32.txt" 2>&1
    note "curves: distance from fp32: $(sed -n 3p "$cdir/distance-from-fp32.txt")"
    python3 validation/pytorch/plot_curves.py "$cdir/curves.svg" --title "llama-3.2-1b, seq 512, mbs 4: loss per step" \
        "ours fp8-mixed=$cdir/ours-fp8-mixed.json" "ours bf16-mixed=$cdir/ours-bf16-mixed.json" \
        "PyTorch bf16-mixed=$cdir/pytorch-bf16-mixed-split1.report" "PyTorch fp32=$cdir/pytorch-fp32-split1.report" 2>>"$summary"
    rm -f "$cdir/init.bin"  # 4x the model's parameters: not kept (its index .json stays)
    pack
}

do_headline() {
    local id
    id=$(python3 -c "import json;print(next(c['id'] for c in json.load(open('$configs'))['configs'] if c.get('headline')))")
    do_measure "$id"
    ensure_built cli-only || return 1
    local row
    row=$(python3 -c "import json;c=next(c for c in json.load(open('$configs'))['configs'] if c.get('headline'));print(c['model'],c['seq'],c['mbs'],c['grad_acc'],c['recompute'],c['precision'],c['attention'])")
    read -r model seq mbs ga rc prec attn <<<"$row"
    if [[ -f $mdir/$id.pytorch-compile.json && ${PREFLIGHT_REMEASURE:-0} != 1 ]]; then
        note "$id: torch.compile already recorded"; return 0
    fi
    if (( $(left) < 150 )); then note "$id: torch.compile SKIPPED (budget: $(left)s left)"; return 0; fi
    evidence_run "$mdir/$id.pytorch-compile.log" "$(left)" python3 validation/pytorch/train.py --config "data/models/$model.json" \
        --model-name "$model" --gpu "$gpu" --seq "$seq" --mbs "$mbs" --grad-acc "$ga" --recompute "$rc" --precision "$prec" \
        --attention "$attn" --steps "$steps" --warmup 3 --compile --report "$mdir/$id.pytorch-compile.json"
    note "$id: PyTorch torch.compile exit $? ($(python3 validation/gpu_session/gpu_session_summary.py --one "$mdir/$id.pytorch-compile.json" 2>/dev/null))"
    pack
}

do_losscurve() {
    ensure_built cli-only || return 1
    local model=${PREFLIGHT_LOSS_MODEL:-llama-3.2-1b} seq=${PREFLIGHT_LOSS_SEQ:-512} mbs=${PREFLIGHT_LOSS_MBS:-4}
    # Default bf16-mixed-fp32-grads: fp32 gradient accumulation as PyTorch's autocast keeps it. At
    # one micro-batch per step it is the same as bf16-mixed (each micro-batch's gradients are bf16
    # in both); both curves left PyTorch's after 18 steps on 2026-11-24/25, while fp32 agreed
    # within 0.30 % over 50 (README, "Loss curves").
    local prec=${PREFLIGHT_LOSS_PRECISION:-bf16-mixed-fp32-grads} lr=${PREFLIGHT_LOSS_LR:-1e-3} n=50 dir=$mdir/losscurve
    mkdir -p "$dir"
    # PREFLIGHT_LOSS_MODEL is a catalog name or a config.json path (both commands take either), e.g.
    # validation/gpu_session/models/llama-3.2-1b-untied.json.
    # `validate --check` re-predicts every *.json report with a catalog model, so a diagnostic
    # model's reports are kept as *.report (the same JSON; compare_loss.py reads either).
    local config=data/models/$model.json name=$model ext=json
    if [[ -f $model ]]; then config=$model; name=$(basename "$model" .json); ext=report; fi
    local base=${name}_s${seq}_b${mbs}_${prec} pt_args=()
    [[ $lr == 1e-3 ]] || base=${base}_lr${lr}
    # PREFLIGHT_LOSS_BF16_RESIDUAL=1: PyTorch rounds its residual stream to bf16 as the runtime keeps it
    # (train.py --bf16-residual, a diagnostic of where the two bf16-mixed curves part).
    if [[ ${PREFLIGHT_LOSS_BF16_RESIDUAL:-0} == 1 ]]; then base=${base}_pt-bf16-residual; pt_args+=(--bf16-residual); fi
    # PREFLIGHT_LOSS_OURS_VARIANTS="--no-cudnn;--no-fused-epilogues": one curve of ours per ';'-separated set of
    # extra `preflight run` flags, each compared with one PyTorch curve (same seed, so same
    # initial weights and tokens); PREFLIGHT_LOSS_PYTORCH_FROM=FILE compares with a curve already
    # recorded instead of running train.py.
    local variants=${PREFLIGHT_LOSS_OURS_VARIANTS:-} pt_json=${PREFLIGHT_LOSS_PYTORCH_FROM:-} v vlist=()
    IFS=';' read -r -a vlist <<<"${variants:-}"
    (( ${#vlist[@]} )) || vlist=("")
    for v in "${vlist[@]}"; do
        local tag=$base ours_args=()
        read -r -a ours_args <<<"$v"
        (( ${#ours_args[@]} )) && tag=${base}_ours$(printf '%s' "${ours_args[*]}" | tr -d ' ')
        if (( $(left) < 75 )); then note "losscurve $tag: SKIPPED (budget: $(left)s left)"; continue; fi
        evidence_run "$dir/$tag.preflight.log" "$(left)" "$build/cli/preflight" run --model "$model" --gpu "$gpu" \
            --seq "$seq" --mbs "$mbs" --precision "$prec" --attention flash --steps "$n" --warmup 0 --seed 1234 \
            --lr "$lr" "${ours_args[@]}" --save-init "$dir/$tag.init.f32" --report "$dir/$tag.preflight.$ext"
        local ours_rc=$?
        note "losscurve $tag: preflight run exit $ours_rc"
        pack
        if [[ ! -f $dir/$tag.init.f32 ]]; then  # exit 1 (peak off the prediction) still ran and saved them
            note "losscurve $tag: PyTorch's curve SKIPPED (our run, exit $ours_rc, left no initial weights to start it from)"
            continue
        fi
        if [[ -z $pt_json ]]; then
            pt_json=$dir/$tag.pytorch.$ext
            evidence_run "$dir/$tag.pytorch.log" "$(left)" python3 validation/pytorch/train.py \
                --config "$config" --model-name "$name" --gpu "$gpu" --seq "$seq" --mbs "$mbs" \
                --precision "$prec" --attention flash --steps "$n" --warmup 0 --seed 1234 --lr "$lr" \
                --init-from "$dir/$tag.init.f32" --data preflight "${pt_args[@]}" --report "$pt_json"
            note "losscurve $tag: train.py exit $?"
        fi
        python3 validation/pytorch/compare_loss.py "$dir/$tag.preflight.$ext" "$pt_json" --steps "$n" \
            >"$dir/$tag.compare.txt" 2>&1
        local rc=$?
        note "losscurve $tag: compare with $(basename "$pt_json") exit $rc ($(tail -1 "$dir/$tag.compare.txt"))"
        rm -f "$dir/$tag.init.f32"  # 2x the model in fp32: not kept (the index .json stays)
        pack
    done
}

do_debug() {
    ensure_built cli-only || return 1
    evidence_run "$sdir/debug-sync.log" "$(left)" "$build/cli/preflight" run --model llama-3.2-1b --gpu "$gpu" --seq 512 \
        --mbs 1 --precision bf16-mixed --attention flash --steps 2 --warmup 1 --debug-sync --report "$sdir/debug-sync.json"
    note "debug-sync run exit $?"
}

[[ $# -gt 0 ]] || set -- all
stages=()
for s in "$@"; do
    if [[ $s == all ]]; then stages+=(build test headline losscurve memcheck measure); else stages+=("$s"); fi
done
for s in "${stages[@]}"; do
    case "$s" in
        check) ;;  # done above, before any stage
        build) do_build ;;
        headline) do_headline ;;
        losscurve) do_losscurve ;;
        debug) do_debug ;;
        test) ensure_built && do_ctest gpu-tests -L gpu -E runtime_memcheck ;;
        memcheck) ensure_built && do_ctest memcheck -R runtime_memcheck ;;
        cputest) ensure_built && do_ctest cpu-tests -LE gpu -j "$jobs" ;;
        measure) do_measure all ;;
        measure:*) do_measure "${s#measure:}" ;;
        measure-dp) do_measure_ranks measure-dp "$dp_configs" dp all ;;
        measure-dp:*) do_measure_ranks measure-dp "$dp_configs" dp "${s#measure-dp:}" ;;
        measure-mp) do_measure_ranks measure-mp "$mp_configs" mp all ;;
        measure-mp:*) do_measure_ranks measure-mp "$mp_configs" mp "${s#measure-mp:}" ;;
        nccl) do_nccl ;;
        fp8) do_fp8 ;;
        optimes) do_optimes all ;;
        optimes:*) do_optimes "${s#optimes:}" ;;
        curves) do_curves ;;
        *) note "unknown stage '$s' (check build test headline losscurve debug memcheck cputest measure[:GROUP|:id,...] measure-dp[:id,...] measure-mp[:id,...] nccl fp8 optimes[:GROUP|:id,...] curves all)"; exit 2 ;;
    esac
    pack
done
note "done in $(elapsed)s; packed into $tarball"
