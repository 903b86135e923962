#!/usr/bin/env bash
# Runs one libFuzzer target of the sanitized build (docs/reliability.md):
#
#   scripts/fuzz.sh source|artifact|gdlrun_args|weights SECONDS [libFuzzer options...]
#
# The target starts from its seed corpus, copied into a scratch directory,
# so the repository is never written; what the run adds to the corpus is
# dropped at the end, unless FUZZ_CORPUS=DIR names a directory to keep it
# in (and to start from the next time). libFuzzer's output goes to
# $BUILD_DIR/fuzz-findings/TARGET.log; a summary is printed. A crash, a
# sanitizer report, a timeout or running out of memory stops the run with a
# non-zero status, prints the end of the log (the report) and leaves the
# input in $BUILD_DIR/fuzz-findings/TARGET/ (crash-*, timeout-*, oom-*);
# $BUILD_DIR/tests/fuzzers/fuzz_TARGET FILE runs it again.
# BUILD_DIR defaults to build-asan; scripts/sanitize.sh --build-only makes it.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh source|artifact|gdlrun_args|weights SECONDS [libFuzzer options...]"
target=${1:?$usage}
seconds=${2:?$usage}
shift 2
case "$target" in
  source | artifact | gdlrun_args | weights) ;;
  *) echo "error: no fuzz target '$target'; $usage" >&2; exit 2 ;;
esac
BUILD_DIR=${BUILD_DIR:-build-asan}
[ -f "$BUILD_DIR/build.ninja" ] || scripts/sanitize.sh --build-only
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target "fuzz_$target" gdlc
source scripts/sanitizer-options.sh

corpus=$(mktemp -d "${TMPDIR:-/tmp}/gdl-fuzz-$target.XXXXXX")
trap 'rm -rf "$corpus"' EXIT
if [ -n "${FUZZ_CORPUS:-}" ]; then
  mkdir -p "$FUZZ_CORPUS"
  cp -r "$FUZZ_CORPUS/." "$corpus/"
fi

case "$target" in
  source)
    # Every program the repository has: the examples, one per diagnostic,
    # the random-program regressions. Named by their path, as two folders
    # may hold files of the same name. Left out: the program that unrolls
    # to the limit of IR nodes on purpose (20 s a run under ASan; its
    # mutants as slow), which the CPU tests run.
    while IFS= read -r file; do
      cp "$file" "$corpus/$(echo "$file" | tr / _)"
    done < <(find examples tests/errors tests/fuzz/regressions -name '*.gdl' ! -name unroll_too_many_nodes.gdl | sort)
    dictionary=(-dict=tests/fuzzers/gdl.dict)
    ;;
  artifact)
    # Artifacts of the current format version, written by this gdlc (NVRTC
    # needs no GPU): small programs with one to a few kernels, run-time
    # dims, random draws and a state. Committed ones would go stale with
    # every version bump.
    for program in examples/chain.gdl examples/rolling_conv.gdl tests/fuzz/regressions/*.gdl; do
      "$BUILD_DIR/gdlc" "$program" -o "$corpus/$(basename "$program" .gdl).gdlx" \
        --cache-dir="$BUILD_DIR/nvrtc-cache" >/dev/null 2>&1 ||
        { echo "error: gdlc cannot compile $program for the seed corpus" >&2; exit 1; }
    done
    dictionary=()
    ;;
  gdlrun_args)
    # Inputs as the fuzzer reads them (tests/fuzzers/gdlrun_args_fuzzer.cc):
    # two bytes giving the input file's size, the file, then NUL-separated
    # arguments. The program's inputs: x f32[B, 3], h f16[2, B], g bf16[4],
    # n i32[B], m bool[2]; param w f32[3, 3]; scalars s i32, t f32.
    seed() { printf "$2" >"$corpus/$1"; }
    seed plain '\0\0p.gdl\0--cpu'
    seed dims '\0\0p.gdl\0--dim\0B=3\0--seed\x007\0--print\x004'
    seed fills '\0\0p.gdl\0--set\0n=5\0--scalar\0s=-2\0--scalar\0t=0.25\0--set\0x=1.5'
    seed file_f32 '\x0c\0\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40p.gdl\0--dim\0B=1\0--input\0x=in.bin'
    seed file_bool '\x02\0\x01\x00p.gdl\0--input\0m=m.bin\0--policy\0update'
    seed file_i32 '\x08\0\x01\0\0\0\xff\xff\xff\xffp.gdl\0--dim\0B=2\0--input\0n=n.bin\0--gpu'
    seed file_param '\x24\0\0\0\x80\x3f\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x80\x3f\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x80\x3fp.gdl\0--param\0w=w.bin'
    seed fallback '\0\0p.gdl\0--dim\0B=20\0--fallback\0--explain\0--stats\0--check\0--out\0out'
    dictionary=()
    ;;
  weights)
    # Safetensors files (an 8-byte little-endian header length, the JSON
    # header, the bytes), a config.json and a weight mapping.
    python3 - "$corpus" <<'PY'
import json, struct, sys
d = sys.argv[1]
def st(name, tensors, data):
    h = json.dumps(tensors).encode()
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", len(h)) + h + data)
st("one", {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, bytes(range(24)))
st("two", {"a": {"dtype": "F32", "shape": [1, 3], "data_offsets": [0, 12]},
           "b": {"dtype": "F32", "shape": [1, 3], "data_offsets": [12, 24]}, "__metadata__": {"format": "pt"}}, bytes(24))
st("bf16", {"w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, 12]}, "x": {"dtype": "I64", "shape": [], "data_offsets": [12, 20]}}, bytes(20))
open(f"{d}/config", "w").write(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}, "torch_dtype": "bfloat16", "eos_token_id": [1, 2]}))
open(f"{d}/mapping", "w").write("w[l] a.{l}.q a.{l}.k|a.{l}.kk  # fused\nlm lm_head.weight|embed\n")
PY
    dictionary=()
    ;;
esac

findings="$BUILD_DIR/fuzz-findings/$target"
log="$BUILD_DIR/fuzz-findings/$target.log"
mkdir -p "$findings"
echo "fuzz_$target: $(find "$corpus" -type f | wc -l) seed inputs, $seconds s; libFuzzer's output goes to $log"
# -timeout: the slowest input the compiler must take, one unrolled to its
# limit of IR nodes, takes about 20 s under the sanitizers.
if "$BUILD_DIR/tests/fuzzers/fuzz_$target" "$corpus" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 \
  -artifact_prefix="$findings/" -print_final_stats=1 "${dictionary[@]}" "$@" >"$log" 2>&1; then
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::' "$log"
else
  status=$?
  tail -n 80 "$log"
  echo "fuzz_$target: a finding (exit $status); its input is in $findings/, libFuzzer's output in $log" >&2
  exit "$status"
fi
if [ -n "${FUZZ_CORPUS:-}" ]; then cp -r "$corpus/." "$FUZZ_CORPUS/"; fi
