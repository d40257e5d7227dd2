#!/usr/bin/env bash
# .ci/setup on a machine that lacks a package: a stand-in dpkg-query reports the
# packages named in $ABSENT as not installed (everything else installed), and the
# dry run must list exactly those for installation. Also checks that the package
# list carries what Qt6 Charts' CMake config, the fuzz target and the length test need.
set -euo pipefail
root="$1"
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat >"$fake/dpkg-query" <<'SH'
#!/usr/bin/env bash
pkg="${@: -1}"
for a in $ABSENT; do
  if [ "$pkg" = "$a" ]; then echo "unknown ok not-installed"; exit 1; fi
done
echo "install ok installed"
SH
chmod +x "$fake/dpkg-query"

fail() { echo "FAIL: $*"; exit 1; }

out=$(ABSENT="libqt6opengl6-dev" PATH="$fake:$PATH" PREFLIGHT_SETUP_DRY_RUN=1 bash "$root/.ci/setup")
echo "$out"
grep -q "^# setup: installing libqt6opengl6-dev$" <<<"$out" || fail "libqt6opengl6-dev not listed as missing"
grep -q "apt-get install -y --no-install-recommends libqt6opengl6-dev$" <<<"$out" || fail "no install command"

out=$(ABSENT="qt6-charts-dev clang libclang-rt-14-dev" PATH="$fake:$PATH" PREFLIGHT_SETUP_DRY_RUN=1 bash "$root/.ci/setup")
echo "$out"
grep -q "^# setup: installing qt6-charts-dev clang libclang-rt-14-dev$" <<<"$out" || fail "Qt Charts / clang not listed"

out=$(ABSENT="python3" PATH="$fake:$PATH" PREFLIGHT_SETUP_DRY_RUN=1 bash "$root/.ci/setup")
echo "$out"
grep -q "^# setup: installing python3$" <<<"$out" || fail "python3 (fuzz seeds, code-length test) not listed"

out=$(ABSENT="" PATH="$fake:$PATH" PREFLIGHT_SETUP_DRY_RUN=1 bash "$root/.ci/setup")
echo "$out"
grep -q "every package is installed" <<<"$out" || fail "complete machine reported as missing something"

# .ci/test must require both components (a missing dependency fails the configure).
grep -q "PREFLIGHT_GUI=ON PREFLIGHT_CUDA=ON bash .ci/setup" "$root/.ci/test" || fail ".ci/test does not require GUI and CUDA"
echo "PASS"
