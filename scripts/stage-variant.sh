#!/usr/bin/env bash
# Packs the current working tree's gdl_bench, with an NVRTC cache of the
# benchmark's programs filled here, as build-pack/NAME.tgz: a variant to
# time against the staged binaries in the same device call
# (scripts/bench-ab.sh). The cache is keyed by the embedded device headers
# (nvrtc_compile.cc), so each build needs its own; without one the first
# round compiles every program on the GPU machine (10-13 s each).
#   scripts/stage-variant.sh NAME [BUILD]    (BUILD: default build-release)
# On the GPU machine: tar xzf build-pack/NAME.tgz -C /tmp  ->  /tmp/NAME/{gdl_bench,bench-cache}
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/stage-variant.sh NAME [BUILD]}
BUILD=${2:-build-release}
cmake --build "$BUILD" -j "${JOBS:-2}" --target gdl_bench gdlc
dir=$(mktemp -d)
mkdir -p "$dir/$name/bench-cache"
cp "$BUILD/bench/gdl_bench" "$dir/$name/"
strip "$dir/$name/gdl_bench"
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . && echo '' || echo ' with uncommitted changes')" \
  >"$dir/$name/built-from.txt"
for program in bench/workloads/*.gdl bench/l2_flush.gdl; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$BUILD/gdlc" "$program" -o "$dir/program.gdlx" \
    --cache-dir="$dir/$name/bench-cache" >/dev/null
done
mkdir -p build-pack
tar czf "build-pack/$name.tgz" -C "$dir" "$name"
rm -rf "$dir"
du -sh "build-pack/$name.tgz"
