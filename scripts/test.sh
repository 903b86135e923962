#!/usr/bin/env bash
# Sets up a fresh machine and passes the tests: installs the Debian packages,
# builds everything, and runs the CPU tests through ctest. The GPU test binary
# is run too; without a GPU it reports itself skipped, with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}"
