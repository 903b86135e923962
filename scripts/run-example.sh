#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, compile an example program to
# an artifact with gdlc, and run it with gdlrun: on the GPU where there is one,
# otherwise on the CPU reference interpreter.
#   scripts/run-example.sh [examples/NAME.gdl] [gdlrun options...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target gdlc gdlrun
program=${1:-examples/mlp.gdl}
shift || true
artifact="$BUILD_DIR/$(basename "${program%.gdl}").gdlx"
"$BUILD_DIR/gdlc" "$program" -o "$artifact"
"$BUILD_DIR/gdlrun" "$artifact" "$@"
