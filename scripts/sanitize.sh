#!/usr/bin/env bash
# The sanitized build (docs/reliability.md): configures $BUILD_DIR
# (build-asan) with clang, AddressSanitizer, UndefinedBehaviorSanitizer and
# libFuzzer's coverage (GDL_SANITIZE, GDL_FUZZERS), builds what the CPU
# tests and the fuzzers need (no GPU tests, benchmarks or examples), runs
# the CPU tests under the sanitizers, then each fuzzer for FUZZ_SECONDS
# (60) from its seed corpus. Any sanitizer report fails it.
#   scripts/sanitize.sh               all of it (CI runs this)
#   scripts/sanitize.sh --build-only  configure and build
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-2}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
export BUILD_DIR JOBS

SECONDS=0
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGDL_SANITIZE=ON -DGDL_FUZZERS=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "sanitize: built in $SECONDS s"
[ "${1:-}" = --build-only ] && exit 0

source scripts/sanitizer-options.sh
# gdl_tests_all runs the whole binary again as one test (tests/CMakeLists.txt
# says why); every case of it already ran on its own here.
SECONDS=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -E '^gdl_tests_all$'
echo "sanitize: CPU tests passed in $SECONDS s"

SECONDS=0
for target in source artifact gdlrun_args weights; do
  scripts/fuzz.sh "$target" "$FUZZ_SECONDS"
done
echo "sanitize: fuzzers ran in $SECONDS s without a finding"
