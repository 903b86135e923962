#!/usr/bin/env bash
# Per-kernel split of sweep rows, gdl beside PyTorch, on the GPU machine:
#
#   bash bench/split.sh OUT ROW [ROW ...]
#
# For each ROW (a sweep row name, e.g. block_h4096_f16_m64): sweep.py
# prepare for that row alone (its data in a folder of its own) under
# bench/kernel_split.py, keeping the kernels of PyTorch's timed graph
# replays; then gdl_bench --sweep on that data under kernel_split.py,
# keeping the kernels of the row's program's runs. Both tables go to
# OUT/ROW.txt and to stdout (times under ncu: per kernel only; the graphs'
# own times come from bench/sweep.sh).
# Environment: GDL_BENCH_BIN, GDL_BENCH_COMPILE_CACHE (as bench/sweep.sh);
# others (GDL_ATTENTION_GROUPED=0, ...) reach gdl_bench's compile as usual.
set -uo pipefail
OUT=${1:?usage: bash bench/split.sh OUT ROW [ROW ...]}
shift
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
BIN=${GDL_BENCH_BIN:-build-release/bench/gdl_bench}
cache=()
[ -n "${GDL_BENCH_COMPILE_CACHE:-}" ] && cache=(--compile-cache "$GDL_BENCH_COMPILE_CACHE")
export PYTHONUNBUFFERED=1
failed=0
for row in "$@"; do
  program=$(echo "$row" | sed -E 's/_(m|kv)[0-9]+$//')
  data=$(mktemp -d /tmp/gdl-split.XXXXXX)
  report="$OUT/$row.txt"
  {
    echo "== $row: PyTorch's graph replays (3 runs)"
    python3 bench/kernel_split.py --runs 3 --nvtx "torch graph" -- python3 bench/sweep.py prepare --data "$data" \
      --out "$data/torch.json" --only "$row\$" --runs 3 --warmup 1 >"$data/prepare.log" 2>&1 ||
      { failed=1; echo "(failed: $(tail -3 "$data/prepare.log"))"; }
    sed -n '/^launches/,$p' "$data/prepare.log" | sed 's/^/torch /'
    echo "== $row: gdl's runs (10 runs)"
    python3 bench/kernel_split.py --runs 10 --nvtx "gdl@run $program" -- "$BIN" --data "$data" --out "$data/gdl.json" \
      --repo . --sweep --runs 3 --warmup 1 ${cache[@]+"${cache[@]}"} >"$data/gdl.log" 2>&1 ||
      { failed=1; echo "(failed: $(tail -3 "$data/gdl.log"))"; }
    sed -n '/^launches/,$p' "$data/gdl.log" | sed 's/^/gdl   /'
  } >"$report"
  cat "$report"
  rm -rf "$data"
done
exit $failed
