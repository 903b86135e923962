#!/usr/bin/env bash
# The one benchmark command on the GPU machine, run from a copy of the repo
# with the build folder made here carried as build-release/:
#
#   bash bench/run.sh OUT [DATA_DIR]
#
# 1. Record the machine (nvidia-smi, versions) in OUT/env.txt.
# 2. bench/torch_bench.py: write the data (seeded; raw files + manifest.json
#    under DATA_DIR, default /tmp/gdl-bench-data, outside OUT because it is
#    about 1.2 GB), measure the ceilings, PyTorch's outputs and timings.
# 3. build-release/bench/gdl_bench: compile, check against PyTorch, time.
# 4. bench/report.py: the merged table (OUT/report.txt, printed last) and
#    OUT/performance.md.
# Each step has a time limit (torch 200 s, gdl 250 s) and a smaller budget
# after which it starts no new variant, so the whole run ends inside 8
# minutes; both rewrite their JSON after every variant, and a step that fails
# does not stop the later ones (the report shows what is missing).
# OUT receives 7 files: env.txt torch.log torch.json gdl.log gdl.json
# report.txt performance.md. Exit status 1 if any step failed.
#
# Environment: GDL_BENCH_BIN (default build-release/bench/gdl_bench),
# GDL_BENCH_RUNS (timed runs per mode, default 200), GDL_BENCH_ONLY (comma-
# separated substrings of variant names), GDL_BENCH_COMPILE_CACHE (an NVRTC
# cache folder for the compiles; default none, so compile ms is a real
# compile), GDL_BENCH_FLUSH (write or read: how both tools empty the L2
# before a timed run, bench/README.md; default read), GDL_BENCH_DRY_RUN=1 (no GPU: the
# data, pure-Python references and fake torch times, gdl_bench --cpu-check).
set -uo pipefail

OUT=${1:?usage: bash bench/run.sh OUT [DATA_DIR]}
DATA=${2:-/tmp/gdl-bench-data}
cd "$(dirname "$0")/.."
mkdir -p "$OUT" "$DATA"
OUT=$(cd "$OUT" && pwd)
BIN=${GDL_BENCH_BIN:-build-release/bench/gdl_bench}
RUNS=${GDL_BENCH_RUNS:-200}
FLUSH=${GDL_BENCH_FLUSH:-read}
torch_args=(--runs "$RUNS" --time-budget-s 170 --flush "$FLUSH")
gdl_args=(--runs "$RUNS" --time-budget-s 200 --flush "$FLUSH")
if [ -n "${GDL_BENCH_ONLY:-}" ]; then
  torch_args+=(--only "$GDL_BENCH_ONLY")
  gdl_args+=(--only "$GDL_BENCH_ONLY")
fi
if [ -n "${GDL_BENCH_COMPILE_CACHE:-}" ]; then
  gdl_args+=(--compile-cache "$GDL_BENCH_COMPILE_CACHE")
fi
if [ "${GDL_BENCH_DRY_RUN:-0}" = 1 ]; then
  torch_args+=(--dry-run)
  gdl_args+=(--cpu-check)
fi
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
failed=0
start_all=$(date +%s)
source bench/bench_lib.sh  # bench_env, step

bench_env "$BIN" >"$OUT/env.txt"

step torch 200 python3 bench/torch_bench.py --data "$DATA" --out "$OUT/torch.json" "${torch_args[@]}"
if [ -x "$BIN" ]; then
  step gdl 250 "$BIN" --data "$DATA" --out "$OUT/gdl.json" --repo . "${gdl_args[@]}"
else
  echo "== gdl: $BIN is missing (build it here: cmake --build build-release --target gdl_bench)" | tee "$OUT/gdl.log"
  failed=1
fi
python3 bench/report.py --torch "$OUT/torch.json" --gdl "$OUT/gdl.json" --md "$OUT/performance.md" >"$OUT/report.txt" 2>&1 ||
  failed=1
echo
cat "$OUT/report.txt"
echo "bench: $(($(date +%s) - start_all))s in all; files in $OUT"
exit "$failed"
