#!/usr/bin/env bash
# Run HERE (the machine without a GPU) before a device session: stages what the device
# machine lacks (it has nvcc, CMake, ninja, PyTorch, but no Debian packages and no
# network) into .deps/ (git-ignored) and prints the `run` calls to make.
#   .deps/include/{nlohmann,CLI}          header-only nlohmann-json and CLI11
#   .deps/cmake/{nlohmann_json,CLI11}/    minimal CMake package configs pointing at them
#   .deps/googletest/                     GoogleTest sources (built on the device), when present here
# Usage: bash runtime/prepare_gpu_session.sh
# Env: NLOHMANN_INCLUDE (default /usr/include/nlohmann), CLI11_INCLUDE (/usr/include/CLI),
#      GOOGLETEST_SRC (/usr/src/googletest).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
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
# Staged by runtime/prepare_gpu_session.sh: header-only $name $version under .deps/include.
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

if [[ -f $gtest/CMakeLists.txt ]]; then
    cp -rL "$gtest" "$deps/googletest"
    gtest_note="GoogleTest sources from $gtest (built on the device)"
else
    gtest_note="no GoogleTest sources at $gtest: the device session builds without tests (PREFLIGHT_TESTS=OFF)"
fi

# .deps/ must stay out of git (and is carried explicitly).
grep -qxF '.deps/' "$root/.gitignore" 2>/dev/null || echo '.deps/' >>"$root/.gitignore"

size_kib=$(du -sk "$deps" | cut -f1)
echo "staged $deps: nlohmann-json $json_ver, CLI11 $cli_ver; $gtest_note; $((size_kib / 1024)) MiB (carry limit 64 MiB)"
[[ $size_kib -lt $((60 * 1024)) ]] || { echo "error: .deps is over 60 MiB" >&2; exit 1; }

cat <<'EOF'

Device calls (the `run` tool, from the repository root; each <= 10 min of which the script uses
at most PREFLIGHT_BUDGET_S = 540 s: it starts no new work past it and packs everything into
$OUT/preflight-gpu-<stamp>.tar.gz + $OUT/summary.txt):

  1) build (sm_90, Release, GUI off), gpu-labelled tests, compute-sanitizer memcheck, then the
     measured set from group A (the llama-3.2-1b MFU headline run first), ours + PyTorch per plan:
       run(command="bash runtime/gpu_session.sh build test memcheck measure:A", carry=[".deps"], timeout_s=600)
  2) and 3) the rest of the measured set (plans already recorded are skipped: resume):
       run(command="bash runtime/gpu_session.sh measure", carry=[".deps"], timeout_s=600)

After EVERY call, unpack its records here before the next call (so the next copy of the working
tree carries them and the resume skips them), then read the summary:
  tar xzf <files_at>/preflight-gpu-*.tar.gz -C /work/main      # -> data/measurements/<gpu>/...
  cat <files_at>/summary.txt     # stages, test results, per-plan peak / step-time errors, MFU vs PyTorch
The build folder (build-gpu/, git-ignored) stays on the machine while it is warm; a fresh machine
rebuilds the `preflight` target only (about a minute) before measuring.
EOF
