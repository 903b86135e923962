#!/usr/bin/env bash
# Times builds against each other on the GPU machine, in one call: each
# round runs every build's gdl_bench once, in the order given, on the same
# data (graph replay, median of RUNS runs per workload), and the table
# prints each build's median per round. Every result is checked against
# PyTorch's before it is timed, as in bench/run.sh ("FAIL" marks one that
# was not).
#   scripts/bench-ab.sh OUT ONLY NAME=BIN:CACHE [NAME=BIN:CACHE ...]
# ONLY: comma-separated substrings of variant names (gdl_bench --only).
# Needs PyTorch's outputs under DATA (default /tmp/gdl-bench-data): run
# bench/run.sh first, or
#   python3 bench/torch_bench.py --data DATA --out OUT/torch.json --only ONLY --refs-only
# Environment: ROUNDS (default 2), RUNS (default 100), DATA.
set -uo pipefail
OUT=${1:?usage: scripts/bench-ab.sh OUT ONLY NAME=BIN:CACHE ...}
ONLY=${2:?usage: scripts/bench-ab.sh OUT ONLY NAME=BIN:CACHE ...}
shift 2
mkdir -p "$OUT"
DATA=${DATA:-/tmp/gdl-bench-data}
names=()
for round in $(seq 1 "${ROUNDS:-2}"); do
  for build in "$@"; do
    name=${build%%=*} spec=${build#*=}
    bin=${spec%%:*} cache=${spec#*:}
    [ "$round" = 1 ] && names+=("$name")
    timeout 120 "$bin" --data "$DATA" --out "$OUT/${name}_$round.json" --runs "${RUNS:-100}" --only "$ONLY" \
      --compile-cache "$cache" >"$OUT/${name}_$round.log" 2>&1 || echo "bench-ab: $name round $round failed (rc $?)"
  done
done
python3 - "$OUT" "${ROUNDS:-2}" "${names[@]}" <<'PY'
import json, os, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
cells, workloads = {}, []
for name in names:
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"{name}_{r}.json")
        if not os.path.exists(path):
            continue
        for w, v in json.load(open(path)).get("variants", {}).items():
            if w not in workloads:
                workloads.append(w)
            median = (v.get("graph") or {}).get("median_us")
            ok = (v.get("check") or {}).get("passed")
            cells.setdefault((w, name), []).append(
                "-" if median is None else f"{median:.2f}" + ("" if ok else " FAIL"))
print("| workload | " + " | ".join(names) + " |")
print("|---|" + "---:|" * len(names))
for w in workloads:
    print(f"| {w} | " + " | ".join(" / ".join(cells.get((w, n), ["-"])) for n in names) + " |")
PY
