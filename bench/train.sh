#!/usr/bin/env bash
# The training benchmark on the GPU machine: one AdamW step of
# examples/train_lm.gdl's language model, gdl beside PyTorch, per config:
#   bash bench/train.sh OUT [small,base]
# For each config, bench/train_torch.py draws the weights and batches, runs
# PyTorch's step (its result for gdl to check) and times it eager and in a
# CUDA graph; then gdl_train_bench checks gdl's step against it and times
# the graph and eager launches; bench/train_report.py prints one table
# (OUT/train.md). Environment: GDL_TRAIN_BIN (default
# .device/build-release/bench/gdl_train_bench), GDL_BENCH_COMPILE_CACHE (an
# NVRTC cache folder), GDL_TRAIN_STEPS (timed steps, default 50),
# GDL_TRAIN_PROFILE=N (gdl's N slowest kernel nodes, in OUT/gdl_CONFIG.log).
set -uo pipefail
OUT=${1:?usage: bash bench/train.sh OUT [CONFIGS]}
configs=${2:-small,base}
cd "$(dirname "$0")/.."
BIN=${GDL_TRAIN_BIN:-.device/build-release/bench/gdl_train_bench}
STEPS=${GDL_TRAIN_STEPS:-50}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
mkdir -p "$OUT"
failed=0
for config in ${configs//,/ }; do
  data=/tmp/gdl-train-data/$config
  rm -rf "$data"  # gdl checks against this run's data only
  if ! python3 bench/train_torch.py --config "$config" --data "$data" --json "$OUT/torch_$config.json" \
    --steps "$STEPS" >"$OUT/torch_$config.log" 2>&1; then
    echo "torch $config failed (OUT/torch_$config.log); gdl not run"
    failed=1
    continue
  fi
  "$BIN" --data "$data" --program examples/train_lm.gdl --json "$OUT/gdl_$config.json" --steps "$STEPS" \
    ${GDL_BENCH_COMPILE_CACHE:+--cache-dir "$GDL_BENCH_COMPILE_CACHE"} --profile "${GDL_TRAIN_PROFILE:-0}" \
    >"$OUT/gdl_$config.log" 2>&1 ||
    { echo "gdl $config failed"; failed=1; }
done
python3 bench/train_report.py "$OUT" | tee "$OUT/train.md"
exit $failed
