#!/usr/bin/env bash
# The shape sweep on the GPU machine, from a copy of the repo with the build
# folder carried as build-release/ (or GDL_BENCH_BIN):
#
#   bash bench/sweep.sh OUT [DATA_DIR]
#
# 1. Record the machine in OUT/env.txt (as bench/run.sh).
# 2. bench/sweep.py prepare: the programs, the manifest and the input files
#    under DATA_DIR (default /tmp/gdl-sweep-data; weights and caches are
#    fills, made on the GPU), the ceilings, PyTorch's outputs and times
#    (OUT/torch.json).
# 3. gdl_bench --sweep: per row, gdl's output checked against PyTorch's,
#    then its device time and host time per run (OUT/gdl.json).
# 4. bench/sweep.py report: the table and the targets (printed last),
#    OUT/sweep.json and OUT/sweep.md.
# Steps 2 and 3 have a time limit of 250 s each and start no row after
# 200 s, so the whole run ends within 9 minutes; both rewrite their JSON
# after every row, and a step that fails does not stop the later ones.
# Each step's output is also in OUT/NAME.log. Exit status 1 if a step failed.
#
# Environment: GDL_BENCH_BIN (default build-release/bench/gdl_bench),
# GDL_BENCH_COMPILE_CACHE (an NVRTC cache folder: `python3 bench/sweep.py
# programs DIR` writes the programs to compile into it beforehand),
# GDL_SWEEP_ONLY (comma-separated substrings of row names, e.g.
# `linear_k4096,attn_b16`), GDL_SWEEP_RUNS (timed runs per mode, default 50),
# GDL_SWEEP_DRY_RUN=1 (no GPU: pure-Python data and references, fake
# PyTorch times, gdl_bench --cpu-check on a few small rows).
set -uo pipefail

OUT=${1:?usage: bash bench/sweep.sh OUT [DATA_DIR]}
DATA=${2:-/tmp/gdl-sweep-data}
cd "$(dirname "$0")/.."
mkdir -p "$OUT" "$DATA"
OUT=$(cd "$OUT" && pwd)
DATA=$(cd "$DATA" && pwd)
BIN=${GDL_BENCH_BIN:-build-release/bench/gdl_bench}
RUNS=${GDL_SWEEP_RUNS:-50}
prepare_args=(--runs "$RUNS" --warmup 10 --time-budget-s 200)
gdl_args=(--sweep --runs "$RUNS" --warmup 10 --time-budget-s 200)
if [ -n "${GDL_SWEEP_ONLY:-}" ]; then
  prepare_args+=(--only "$GDL_SWEEP_ONLY")
  gdl_args+=(--only "$GDL_SWEEP_ONLY")
fi
if [ -n "${GDL_BENCH_COMPILE_CACHE:-}" ]; then
  gdl_args+=(--compile-cache "$GDL_BENCH_COMPILE_CACHE")
fi
if [ "${GDL_SWEEP_DRY_RUN:-0}" = 1 ]; then
  prepare_args+=(--dry-run)
  gdl_args=(--cpu-check ${GDL_SWEEP_ONLY:+--only "$GDL_SWEEP_ONLY"})
fi
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
failed=0
start_all=$(date +%s)
source bench/bench_lib.sh  # bench_env, step

bench_env "$BIN" >"$OUT/env.txt"
step prepare 250 python3 bench/sweep.py prepare --data "$DATA" --out "$OUT/torch.json" "${prepare_args[@]}"
if [ -x "$BIN" ]; then
  step gdl 250 "$BIN" --data "$DATA" --out "$OUT/gdl.json" --repo . "${gdl_args[@]}"
else
  echo "== gdl: $BIN is missing (build it here: cmake --build build-release --target gdl_bench)" | tee "$OUT/gdl.log"
  failed=1
fi
step report 60 python3 bench/sweep.py report --torch "$OUT/torch.json" --gdl "$OUT/gdl.json" \
  --out "$OUT/sweep.json" --md "$OUT/sweep.md"
echo "sweep: $(($(date +%s) - start_all))s in all; files in $OUT"
exit "$failed"
