#!/usr/bin/env bash
# compute-sanitizer memcheck over two small `preflight run`s (2 steps each): a Llama-style
# model (GQA, RoPE, SwiGLU, flash attention, selective recompute, bf16-mixed with fp32
# gradient accumulation over 2 micro-batches) and a GPT-2-style one (LayerNorm, GeLU,
# biases, tied embeddings, eager attention, full recompute, fp32). Any memcheck error
# fails the test (--error-exitcode 1). Both run with --allocator pool: each buffer is then an
# allocation of its own, so a kernel that reads or writes past a buffer is caught; inside the
# default arena it would land in a neighbouring buffer, which memcheck cannot see.
# Usage: memcheck.sh PREFLIGHT_EXE TEST_DATA_DIR   (ctest: label gpu, SKIP_RETURN_CODE 77)
set -u
exe=$1
data=$2
skip() { echo "SKIPPED: $*"; exit 77; }

sanitizer=$(command -v compute-sanitizer || true)
[[ -z $sanitizer && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
[[ -n $sanitizer ]] || skip "compute-sanitizer not found (it ships with the CUDA toolkit): memcheck test skipped"
command -v nvidia-smi >/dev/null 2>&1 || skip "nvidia-smi not found: no CUDA device, memcheck test skipped"
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip "no CUDA device present: memcheck test skipped"

status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
    echo "+ $sanitizer --tool memcheck --error-exitcode 1 $exe run $* --steps 2 --warmup 0 --allocator pool"
    "$sanitizer" --tool memcheck --error-exitcode 1 "$exe" run "$@" --steps 2 --warmup 0 --allocator pool 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    # preflight run exits 3 with these messages when the build has no CUDA runtime or sees no
    # device; any other exit 3 is a CUDA failure during the run, which fails the test.
    if [[ $rc -eq 3 ]] && grep -q -e 'no CUDA device is available' -e 'this build has no CUDA runtime' "$log"; then
        skip "preflight run found no CUDA runtime or device (exit 3)"
    fi
    echo "exit code $rc"
    [[ $rc -eq 0 ]] || status=1
}
run --model "$data/tiny-llama.json" --gpu h100-sxm-80gb --seq 128 --mbs 2 --grad-acc 2 --attention flash \
    --recompute selective --precision bf16-mixed-fp32-grads
run --model "$data/tiny-gpt2.json" --gpu h100-sxm-80gb --seq 64 --mbs 2 --attention eager --recompute full \
    --precision fp32
exit $status
