# Shared by bench/run.sh and bench/sweep.sh, which source it from the
# repository root: the record of the machine and the time-limited steps.

# bench_env BIN: date, commit, Python and PyTorch versions, nvidia-smi and
# BIN's libraries, for OUT/env.txt.
bench_env() {
  local bin=$1 built_from
  echo "date: $(date -u)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) (this copy of the repository)"
  # Binaries built elsewhere name their own sources (scripts/stage-device.sh,
  # stage-variant.sh): the GPU machine's copy may report another HEAD.
  built_from="$(dirname "$bin")/built-from.txt"
  [ -f "$built_from" ] && echo "binaries built from: $(cat "$built_from")"
  echo "python: $(python3 --version 2>&1)"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  nvidia-smi 2>&1 || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1
  ls -la "$bin" 2>&1
  ldd "$bin" 2>&1
}

# step NAME SECONDS COMMAND...: COMMAND under a time limit, its output to
# OUT/NAME.log and the terminal; a failure sets failed=1 (OUT and failed
# are the caller's).
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $name: $* (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 124 ] && echo "== $name: killed after ${limit}s" | tee -a "$OUT/$name.log"
  echo "== $name: rc=$rc in $(($(date +%s) - start))s"
  [ "$rc" -ne 0 ] && failed=1
  return 0
}
