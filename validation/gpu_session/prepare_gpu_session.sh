#!/usr/bin/env bash
# Run HERE (the machine without a GPU) before a device session: stages what the device
# machine lacks (it has nvcc, CMake, ninja, PyTorch, but no Debian packages and no
# network) into .deps/ (git-ignored) and prints the `run` calls to make.
#   .deps/include/{nlohmann,CLI}          header-only nlohmann-json and CLI11
#   .deps/cmake/{nlohmann_json,CLI11}/    minimal CMake package configs pointing at them
#   .deps/googletest/                     GoogleTest sources (built on the device), when present here
#   .deps/tomlplusplus/include/toml++     header-only toml++ (the --from TOML reader)
#   .deps/yaml-cpp/{include,lib}          yaml-cpp headers and static library (the --from YAML reader)
# Usage: bash validation/gpu_session/prepare_gpu_session.sh
# Env: NLOHMANN_INCLUDE (default /usr/include/nlohmann), CLI11_INCLUDE (/usr/include/CLI),
#      GOOGLETEST_SRC (/usr/src/googletest).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps=$root/.deps
nlohmann=${NLOHMANN_INCLUDE:-/usr/include/nlohmann}
cli11=${CLI11_INCLUDE:-/usr/include/CLI}
gtest=${GOOGLETEST_SRC:-/usr/src/googletest}

[[ -f $nlohmann/json.hpp ]] || { echo "error: $nlohmann/json.hpp not found (set NLOHMANN_INCLUDE)" >&2; exit 2; }
[[ -f $cli11/CLI.hpp ]] || { echo "error: $cli11/CLI.hpp not found (set CLI11_INCLUDE)" >&2; exit 2; }

rm -rf "$deps"
mkdir -p "$deps/include" "$deps/cmake/nlohmann_json" "$deps/cmake/CLI11"
cp -rL "$nlohmann" "$deps/include/nlohmann"
cp -rL "$cli11" "$deps/include/CLI"

ver() {  # ver FILE MACRO_PREFIX -> X.Y.Z
    local f=$1 p=$2
    printf '%s.%s.%s' "$(awk -v m="${p}MAJOR" '$1=="#define" && $2==m {print $3; exit}' "$f")" \
        "$(awk -v m="${p}MINOR" '$1=="#define" && $2==m {print $3; exit}' "$f")" "$(awk -v m="${p}PATCH" '$1=="#define" && $2==m {print $3; exit}' "$f")"
}
json_ver=$(ver "$deps/include/nlohmann/detail/abi_macros.hpp" NLOHMANN_JSON_VERSION_ 2>/dev/null || true)
[[ $json_ver =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || json_ver=$(ver "$deps/include/nlohmann/json.hpp" NLOHMANN_JSON_VERSION_)
cli_ver=$(ver "$deps/include/CLI/Version.hpp" CLI11_VERSION_)

# package_config NAME TARGET VERSION: an INTERFACE IMPORTED target on .deps/include.
package_config() {
    local name=$1 target=$2 version=$3 dir=$deps/cmake/$1
    cat >"$dir/${name}Config.cmake" <<EOF
# Staged by validation/gpu_session/prepare_gpu_session.sh: header-only $name $version under .deps/include.
get_filename_component(_pf_inc "\${CMAKE_CURRENT_LIST_DIR}/../../include" ABSOLUTE)
if(NOT TARGET $target)
  add_library($target INTERFACE IMPORTED)
  set_target_properties($target PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "\${_pf_inc}")
endif()
set(${name}_FOUND TRUE)
EOF
    cat >"$dir/${name}ConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
}
package_config nlohmann_json nlohmann_json::nlohmann_json "$json_ver"
package_config CLI11 CLI11::CLI11 "$cli_ver"

# cuDNN 9 headers (the device's PyTorch wheel ships the library; its include/ may be absent):
# the build needs only the headers, libcudnn is loaded at run time.
cudnn_inc=${CUDNN_INCLUDE:-/usr/local/cuda/include}
if [[ -f $cudnn_inc/cudnn_graph.h ]]; then
    mkdir -p "$deps/cudnn/include"
    cp -L "$cudnn_inc"/cudnn*.h "$deps/cudnn/include/"
    cudnn_note="cuDNN headers $(awk '$2=="CUDNN_MAJOR"{a=$3}$2=="CUDNN_MINOR"{b=$3}$2=="CUDNN_PATCHLEVEL"{c=$3}END{print a"."b"."c}' "$cudnn_inc/cudnn_version.h")"
else
    cudnn_note="no cuDNN headers at $cudnn_inc (set CUDNN_INCLUDE): the device build uses the wheel's, if any"
fi

# The --from readers: toml++ (header-only) and yaml-cpp (static, so the binaries need no .so there).
toml_inc=${TOMLPP_INCLUDE:-/usr/include/toml++}
yaml_inc=${YAMLCPP_INCLUDE:-/usr/include/yaml-cpp}
yaml_lib=${YAMLCPP_LIB:-/usr/lib/x86_64-linux-gnu/libyaml-cpp.a}
for f in "$toml_inc/toml.h" "$yaml_inc/yaml.h" "$yaml_lib"; do
    [[ -f $f ]] || { echo "error: $f not found (apt-get install libtomlplusplus-dev libyaml-cpp-dev)" >&2; exit 2; }
done
mkdir -p "$deps/tomlplusplus/include" "$deps/yaml-cpp/include" "$deps/yaml-cpp/lib"
cp -rL "$toml_inc" "$deps/tomlplusplus/include/toml++"
cp -rL "$yaml_inc" "$deps/yaml-cpp/include/yaml-cpp"
cp -L "$yaml_lib" "$deps/yaml-cpp/lib/libyaml-cpp.a"

# NCCL's header (the device has the library in PyTorch's nvidia.nccl wheel, loaded at run time).
nccl_inc=${NCCL_INCLUDE:-/usr/local/cuda/include}
if [[ -f $nccl_inc/nccl.h ]]; then
    mkdir -p "$deps/nccl/include"
    cp -L "$nccl_inc/nccl.h" "$deps/nccl/include/"
    nccl_note="NCCL header $(awk '$2=="NCCL_MAJOR"{a=$3}$2=="NCCL_MINOR"{b=$3}$2=="NCCL_PATCH"{c=$3}END{print a"."b"."c}' "$nccl_inc/nccl.h")"
else
    nccl_note="no NCCL header at $nccl_inc (set NCCL_INCLUDE): the device build uses the toolkit's, if any"
fi

if [[ -f $gtest/CMakeLists.txt ]]; then
    cp -rL "$gtest" "$deps/googletest"
    gtest_note="GoogleTest sources from $gtest (built on the device)"
else
    gtest_note="no GoogleTest sources at $gtest: the device session builds without tests (PREFLIGHT_TESTS=OFF)"
fi

# .deps/ must stay out of git (and is carried explicitly).
grep -qxF '.deps/' "$root/.gitignore" 2>/dev/null || echo '.deps/' >>"$root/.gitignore"

size_kib=$(du -sk "$deps" | cut -f1)
echo "staged $deps: nlohmann-json $json_ver, CLI11 $cli_ver, toml++ and yaml-cpp; $cudnn_note; $nccl_note; $gtest_note; $((size_kib / 1024)) MiB (carry limit 64 MiB)"
[[ $size_kib -lt $((60 * 1024)) ]] || { echo "error: .deps is over 60 MiB" >&2; exit 1; }

cat <<'EOF'

Device calls (the `run` tool, from the repository root; each <= 10 min, of which the script uses
at most PREFLIGHT_BUDGET_S = 540 s: it starts no new work past it and packs everything into
$OUT/preflight-gpu-<stamp>.tar.gz + $OUT/summary.txt). See README.md, "GPU session runbook".

  What is still to run on a GPU (2026-12-04; the curves of issue 34 and 64 of the 66 gpu tests
  ran that day): the gpu tests again, for MoeKernels/*.RouteMatchesTheReferenceExactly (its
  routing table was sized with E and k swapped, mended since); the curves stage, which resumes
  and runs only the early offset's next diagnostic, PyTorch with --bf16-norm-weights beside the
  two other flags (the initial weights again, 19 s, and one run of about 60 s); then the 15 ranks
  of the measure-mp set not yet recorded (it resumes: the interleaved Llama-3-8B stages, the cp
  ranks, Mixtral's, Qwen3's, OLMoE's and OLMo 2's, Phi-3's windowed one, the interleaved
  Llama-3.2-1B stage at 64 micro-batches; about 10-140 s each):
       run(command="PREFLIGHT_BUDGET_S=540 bash validation/gpu_session/gpu_session.sh check build test curves measure-mp", carry=[".deps"], timeout_s=600)
  then, with what is left on the warm machine (it goes back after 30 s idle; the call restores
  the records of the last call that its copy of the tree lacks, from build-gpu/), B = the
  `status` tool's budget_left_s less 60:
       run(command="PREFLIGHT_BUDGET_S=B bash validation/gpu_session/gpu_session.sh measure-mp", carry=[".deps"], timeout_s=B+60)
  and give_back.

  1) libraries, build, every gpu-labelled test, the headline plan (ours vs PyTorch eager and
     torch.compile):
       run(command="bash validation/gpu_session/gpu_session.sh check build test headline", carry=[".deps"], timeout_s=600)
  2) the 50-step loss curve against PyTorch, memcheck, measured group A:
       run(command="bash validation/gpu_session/gpu_session.sh losscurve memcheck measure:A", carry=[".deps"], timeout_s=600)
  3) and 4) the rest of the measured set (plans already recorded are skipped: resume):
       run(command="bash validation/gpu_session/gpu_session.sh measure", carry=[".deps"], timeout_s=600)
  Data parallelism (loopback parity and NCCL at world size 1 are gpu-labelled tests, so in
  `test`; then the emulated ranks and the launcher's NCCL run):
       run(command="bash validation/gpu_session/gpu_session.sh check build test measure-dp nccl", carry=[".deps"], timeout_s=600)
  Tensor, sequence and pipeline parallelism (device loopback parity is in `test`; then the emulated
  tensor-/pipeline-parallel ranks):
       run(command="bash validation/gpu_session/gpu_session.sh measure-mp", carry=[".deps"], timeout_s=600)
  fp8-mixed (its gpu tests are in `test`; then the pairs, the 200-step curves and the band):
       run(command="bash validation/gpu_session/gpu_session.sh fp8 curves", carry=[".deps"], timeout_s=600)
  Per-op times for the plans recorded before --op-times (new runs record them anyway):
       run(command="bash validation/gpu_session/gpu_session.sh optimes", carry=[".deps"], timeout_s=600)

After EVERY call, unpack its records here (a fresh machine's copy of the working tree carries
only what is here; a warm machine's next call also restores the last call's records itself),
then read the summary. Unpack the calls in order, each over the one before:
  tar xzf <files_at>/preflight-gpu-*.tar.gz -C <repo root>      # -> data/measurements/<gpu>/...
  cat <files_at>/summary.txt
EOF
