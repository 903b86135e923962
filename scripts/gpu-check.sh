#!/usr/bin/env bash
# The one script run on the GPU machine. It gets a copy of the repo and the
# build folder made here by scripts/build-release.sh (carried as
# build-release/), runs from the repo root, and writes every log under $OUT.
#
#   scripts/gpu-check.sh [all | tests | fuzz | soak | llama | sanitizers | examples | consumer | python | probes | stalls | nvtx | stream | kvread | persistent | tmastream | clusterrows | sanitizer | sanitizer-examples | sanitizer-tests | sanitizer-chain | sanitizer-attention | attention-grouped | collectives]
#
# `all` can take longer than one 10-minute device command; run the parts
# one per command if so (tests, examples, sanitizer-examples, sanitizer-tests).
#
# 1. tests:     build-release/tests/gdl_gpu_tests -s (every assertion logged)
# 1b. fuzz:     random programs (tests/gpu/fuzz_test.cc): GDL_FUZZ_GPU_COUNT
#               of them (default 500) from GDL_FUZZ_FIRST_SEED (default 1),
#               in GDL_FUZZ_PROCS processes (default 4) for at most
#               GDL_FUZZ_SECONDS (570), each under both dim policies against
#               the CPU reference; the shrunk failures land in $OUT/fuzz/,
#               stacks of a stalled process in $OUT/fuzz_N.stacks; not part
#               of `all`
# 1d. llama:    the Llama decoder against Hugging Face transformers (see the
#               llama block below; with two GPUs also the tensor-parallel
#               decoder over both); not part of `all`
# 1c. soak:     tests/gpu/soak_test.cc at length (10^6 replays, 8 threads
#               for 60 s, 10^4 sessions) and tests/gpu/faults_test.cc; not
#               part of `all`
# 2. examples:  build-release/examples/run_{mlp,chain,attention}, and
#               hello_host and load_and_run on artifacts/*.gdlx
# 2b. consumer: examples/consumer as built against an installed tree by
#               scripts/stage-device.sh (the embedded program, and gdl::jit)
# 2c. python:  the Python module built here for this machine's Python, and
#               tests/python/gdl_test.py with its GPU cases required; not
#               part of `all`
# 3. probes:    build-release/gdlrun --explain on each bench/probes/*.gdl
# 3b. stalls:   ncu's duration, DRAM throughput and stall reasons (cycles
#               per issued instruction) of the matmul probes p3 (rows
#               kernel, fixed B), p10 (rows kernel, B at run time), p4 (rows
#               or tensor cores at run time), p7 (4096-wide rows kernel) and
#               of one W2 layer at B=1, 8 and 64; not part of `all`
# 3h. nvtx:     the gdl domain's NVTX ranges and the kernel names in nsys's
#               summary (where nsys is installed) and ncu's NVTX context,
#               over gdlrun --explain on examples/mlp.gdl; not part of `all`
# 3c-3g: the standalone CUDA experiments in bench/experiments/ (README.md
#     there says what each asks), each built here with the device's nvcc;
#     none is part of `all`.
# 3c. stream:   bench/experiments/stream_patterns.cu: a 32 MiB weight stream
#               per launch by access pattern, and a pure read (the ceiling
#               of one W2 H=4096 layer)
# 3d. persistent: bench/experiments/persistent_mlp.cu: W2's eight H=4096
#               layers in one cooperative launch by design, the load paths
#               of one block per SM and the grid barrier (the experiment
#               behind gdl_chain.cuh)
# 3e. kvread:   bench/experiments/kv_read_patterns.cu: W3's 64 MiB of K and
#               V read by access pattern (grid-stride, the attention
#               kernel's splits, chunks interleaved across blocks) and
#               mechanism (plain loads, a ring of bulk copies)
# 3f. tmastream: bench/experiments/tma_stream.cu: W2's H=4096 weight stream
#               through the chain's ring, filled by cp.async producer warps,
#               by one thread's 2-D tensor copies (TMA), from packed (per
#               block contiguous) weights, or by 64-byte row bulk copies,
#               with and without a cap on slots in flight, with the latency
#               of L2 loads between the steps
# 3g. clusterrows: bench/experiments/cluster_rows.cu: whether the chain's
#               cooperative launch can also be a cluster launch of two
#               blocks (directly and as a graph node), and a step's 64 KiB
#               of rows read by each of 128 blocks, by half of them, or once
#               per pair by multicast bulk copies
# 4. sanitizer: compute-sanitizer memcheck on the examples (quick mode) and on
#               a subset of the GPU tests; racecheck on the examples and on
#               the norm prologue and softmax tests
# 4a. sanitizers: memcheck, initcheck, racecheck and synccheck
#               (SANITIZER_TOOLS) over every example binary and the GPU
#               tests (SANITIZER_TEST_SECONDS each, default 400); more than
#               one 10-minute command: run one tool per command; not part
#               of `all`
# 4b. sanitizer-chain: memcheck on the chain kernel's GPU tests, racecheck on
#               the small chains of probes p11, p12 (row groups) and p13
#               (K = 2048: the grid barrier between steps); not part
#               of `all`
# 4c. sanitizer-attention: memcheck and racecheck on the attention GPU
#               tests (both kernels of gdl_attention.cuh: the streamed one's
#               ring of bulk copies, the split one's shared scores) and
#               racecheck on W3's probe p9; not part of `all`
# 4d. attention-grouped: the tensor-core group kernel (gdl_attention_group.cuh,
#               the default) beside the streamed one (GDL_ATTENTION_GROUPED=0): with the
#               tests' binary, the attention GPU tests (which run both) and
#               memcheck and racecheck on its edge cases; with gdl_bench, the
#               sweep's attention rows under both (GDL_BENCH_BIN,
#               GDL_BENCH_COMPILE_CACHE as for bench/sweep.sh; PyTorch's side
#               measured once), reports in $OUT/attn-streamed and
#               $OUT/attn-grouped; not part of `all`
# 4e. collectives: the collective GPU tests (a group of one rank, the
#               tensor-parallel Llama decoder at TP=1 against llama.gdl; with
#               two GPUs or more also the multi-gpu:* cases: a
#               tensor-parallel MLP and the decoder at TP=2 on two GPUs,
#               ranks whose programs differ) and memcheck
#               over the one-rank case. NCCL comes from GDL_NCCL_LIBRARY, or
#               the loader's path, or PyTorch's wheel (nvidia-nccl); NVLink
#               multicast stays off (NCCL_NVLS_ENABLE=0); and PyTorch's
#               tensor-parallel decode of bench/llama.sh on a tiny model over
#               every GPU; not part of `all`
# Then a short summary: one line per step with its exit code and time, and
# the lines that matter from each log.
set -uo pipefail

what=${1:-all}
OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${BUILD:-build-release}
mkdir -p "$OUT"
# The tests find examples/*.gdl through this (the repo is not at the path it
# was built at); NVRTC output is cached outside $OUT.
export GDL_SOURCE_DIR=$PWD
export GDL_CACHE_DIR=${GDL_CACHE_DIR:-/tmp/gdl-cache}
# libnvrtc.so.13: the binaries' RUNPATH is this build machine's /usr/local/cuda/lib.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

summary=()
failed=0

# step NAME SECONDS COMMAND...: runs COMMAND with a time limit, log in $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local log=$OUT/$name.log start end rc
  start=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/steps.txt"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  [ "$rc" -eq 124 ] && echo "(killed after ${limit}s)" >>"$log"
  summary+=("$(printf '%-34s rc=%-3s %4ss' "$name" "$rc" "$((end - start))")")
  [ "$rc" -ne 0 ] && failed=1
  return 0
}

{
  echo "date: $(date -u)"
  nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo "compute-sanitizer: $SANITIZER"
  ls -la "$BUILD/tests/gdl_gpu_tests" "$BUILD"/examples/run_* 2>&1
} >"$OUT/machine.txt"

if [[ $what == all || $what == tests ]]; then
  step gpu_tests 540 "$BUILD/tests/gdl_gpu_tests" -s --duration=true
fi

if [[ $what == llama ]]; then
  # The Llama decoder against transformers: tests/gpu/llama_reference.py
  # builds an f32 and a bf16 model with random weights (init std
  # LLAMA_INIT_STD, large enough that logits are peaked), saves them with
  # save_pretrained and records transformers' logits and greedy tokens;
  # the GPU test (tests/gpu/llama_test.cc) loads them through gdl's loader
  # and compares; llama_generate serves the bf16 one with continuous
  # batching and checks each sequence against its solo run. The models live
  # outside $OUT.
  models=${LLAMA_MODELS:-/tmp/gdl-llama-models}
  std=${LLAMA_INIT_STD:-0.3}
  step llama_reference_f32 300 python3 tests/gpu/llama_reference.py --out "$models/f32" --dtype f32 --init-std "$std"
  step llama_reference_bf16 300 python3 tests/gpu/llama_reference.py --out "$models/bf16" --dtype bf16 --init-std "${LLAMA_BF16_INIT_STD:-0.03}" --tie
  step llama_test 400 env GDL_LLAMA_REFERENCE="$models/f32,$models/bf16" "$BUILD/tests/gdl_gpu_tests" -s -tc='llama:*'
  step llama_generate 200 "$BUILD/examples/llama_generate" --model "$models/bf16/model" --max-new 24 --max-seqs 4 \
    --max-context 128 --max-tokens 64 --arrive-every 3 --solo-check --prompt "1 2 3 4 5" --prompt "17 300 42 9 11 800 3" \
    --prompt "5 6 7" --prompt "900 901 902 903 904 905 906 907 908 909 910 911"
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then  # the tensor-parallel decoder (llama_tp.gdl) over two GPUs
    export NCCL_NVLS_ENABLE=0
    step llama_tp_test 400 env GDL_LLAMA_REFERENCE="$models/f32,$models/bf16" "$BUILD/tests/gdl_gpu_tests" -s \
      '-tc=multi-gpu: the tensor-parallel decoder over two GPUs*'
    step llama_generate_tp2 200 "$BUILD/examples/llama_generate" --model "$models/bf16/model" --tp 2 --max-new 24 \
      --max-seqs 4 --max-context 128 --max-tokens 64 --arrive-every 3 --solo-check --prompt "1 2 3 4 5" \
      --prompt "17 300 42 9 11 800 3"
  fi
fi

if [[ $what == fuzz ]]; then
  # GDL_FUZZ_PROCS processes (default 4) side by side, each over its share
  # of the seeds and compiling on its share of the cores. A process whose
  # log stops moving for 60 s gets its threads' stacks dumped (gdb or
  # cuda-gdb) into $OUT/fuzz_N.stacks before the time limit ends it.
  mkdir -p "$OUT/fuzz"
  procs=${GDL_FUZZ_PROCS:-4} count=${GDL_FUZZ_GPU_COUNT:-500} first=${GDL_FUZZ_FIRST_SEED:-1}
  limit=${GDL_FUZZ_SECONDS:-570}
  per=$(((count + procs - 1) / procs))
  jobs=$(($(nproc) / procs > 0 ? $(nproc) / procs : 1))
  DEBUGGER=$(command -v gdb || command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
  start=$(date +%s)
  pids=()
  for p in $(seq 0 $((procs - 1))); do
    GDL_FUZZ_OUT="$OUT/fuzz" GDL_FUZZ_FIRST_SEED=$((first + p * per)) GDL_FUZZ_GPU_COUNT=$per GDL_FUZZ_TRACE=1 \
      GDL_FUZZ_JOBS=$jobs timeout --kill-after=10 "$limit" "$BUILD/tests/gdl_gpu_tests" -tc='fuzz:*' \
      >"$OUT/fuzz_$p.log" 2>&1 &
    pids+=($!)
  done
  declare -A last_size=() still=()
  while :; do
    running=0
    for p in "${!pids[@]}"; do
      kill -0 "${pids[$p]}" 2>/dev/null || continue
      running=1
      size=$(stat -c %s "$OUT/fuzz_$p.log")
      if [ "$size" = "${last_size[$p]:-}" ]; then still[$p]=$((${still[$p]:-0} + 5)); else still[$p]=0; fi
      last_size[$p]=$size
      if [ "${still[$p]}" -eq 60 ]; then  # once per stall
        child=$(pgrep -P "${pids[$p]}" gdl_gpu_tests || echo "${pids[$p]}")
        { echo "no progress for 60 s after: $(tail -1 "$OUT/fuzz_$p.log")"
          for t in /proc/"$child"/task/*; do echo "$t $(cut -d' ' -f3,14,15 "$t/stat") $(cat "$t/wchan" 2>/dev/null)"; done
          timeout 60 "$DEBUGGER" -p "$child" -batch -ex "thread apply all bt 30" 2>&1 | tail -400
        } >"$OUT/fuzz_$p.stacks" 2>&1
      fi
    done
    [ "$running" -eq 0 ] && break
    sleep 5
  done
  rcs=""
  for p in "${!pids[@]}"; do wait "${pids[$p]}"; rc=$?; rcs+=" $rc"; [ "$rc" -ne 0 ] && failed=1; done
  summary+=("$(printf '%-34s rc=%-3s %4ss' "fuzz ($procs processes)" "${rcs# }" "$(($(date +%s) - start))")")
fi

if [[ $what == soak ]]; then
  # The long soak (tests/gpu/soak_test.cc) and the injected faults.
  GDL_SOAK_REPLAYS=${GDL_SOAK_REPLAYS:-1000000} GDL_SOAK_SECONDS=${GDL_SOAK_SECONDS:-60} \
    GDL_SOAK_SESSIONS=${GDL_SOAK_SESSIONS:-10000} step soak 570 "$BUILD/tests/gdl_gpu_tests" -tc='soak:*,faults:*' -s
fi

if [[ $what == all || $what == examples ]]; then
  for ex in mlp chain attention; do
    step "example_$ex" 120 "$BUILD/examples/run_$ex"
  done
  step example_mlp_B64 120 "$BUILD/examples/run_mlp" B=64
  # Hosts that link gdl_runtime alone, on artifacts compiled before staging.
  if [ -d "$BUILD/artifacts" ]; then
    step hello_host 60 "$BUILD/examples/hello_host" "$BUILD/artifacts/chain.gdlx"
    for ex in chain mlp attention; do
      step "load_and_run_$ex" 60 "$BUILD/examples/load_and_run" "$BUILD/artifacts/$ex.gdlx"
    done
  fi
fi

if [[ $what == all || $what == probes ]]; then
  # bench/probes: single-kernel programs that take one W2 or W3 cost apart
  # (gdlrun --explain: per-node device time of eager launches, warm L2).
  for p in bench/probes/*.gdl; do
    dims=()
    grep -q '^dim B' "$p" && dims=(--dim B=1)
    grep -q '^input len' "$p" && dims+=(--set len=4096)
    step "probe_$(basename "$p" .gdl)" 60 "$BUILD/gdlrun" "$p" --gpu --explain "${dims[@]}"
  done
fi

if [[ $what == nvtx ]]; then
  # The NVTX ranges in the gdl domain as a profiler sees them: nsys's range
  # summary where nsys is installed, else ncu's NVTX context of each
  # kernel (--nvtx), over gdlrun --explain (graph runs, and eager runs whose
  # kernels sit inside "step N: OPS"); and the kernel names.
  NSYS=$(command -v nsys || true)
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  if [[ -n $NSYS ]]; then
    step nvtx_nsys 240 "$NSYS" profile --trace=cuda,nvtx --force-overwrite=true -o "$OUT/nvtx_mlp" \
      "$BUILD/gdlrun" examples/mlp.gdl --gpu --explain --dim B=8
    step nvtx_nsys_stats 120 "$NSYS" stats --report nvtx_sum,cuda_gpu_kern_sum "$OUT/nvtx_mlp.nsys-rep"
  fi
  step nvtx_ncu 240 "$NCU" --nvtx --print-nvtx-rename kernel --launch-count 12 --metrics gpu__time_duration.sum \
    "$BUILD/gdlrun" examples/mlp.gdl --gpu --explain --dim B=8
fi

if [[ $what == all || $what == consumer ]]; then
  # The consumer project (examples/consumer), built against an installed
  # tree by scripts/stage-device.sh: the embedded program run at two batch
  # sizes, and the program compiled in the process (gdl::jit).
  if [ -d "$BUILD/consumer" ]; then
    step consumer 60 env LD_LIBRARY_PATH="$BUILD/consumer:$LD_LIBRARY_PATH" "$BUILD/consumer/consumer"
    step consumer_jit 120 env LD_LIBRARY_PATH="$BUILD/consumer:$LD_LIBRARY_PATH" "$BUILD/consumer/consumer_jit" \
      examples/consumer/scale.gdl
  fi
fi

if [[ $what == python ]]; then
  # The Python module built here for this machine's Python (PYTHON, default
  # python3) from python/gdl_module.cc and the archives staged by
  # scripts/stage-device.sh, against pybind11's headers (the pybind11
  # package, else the copy inside torch), then tests/python/gdl_test.py
  # with its GPU cases required. The module lands in /tmp/gdl-python.
  PY=${PYTHON:-python3}
  lib=$BUILD/python/lib
  pyinc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  pybind=$("$PY" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null ||
    "$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
  suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  mkdir -p /tmp/gdl-python
  cp "$lib"/libantlr4-runtime.so* /tmp/gdl-python/
  step python_build 300 g++ -std=c++20 -O2 -DNDEBUG -shared -fPIC -fvisibility=hidden -I include -I "$BUILD/python/include" \
    -isystem "$pyinc" -isystem "$pybind" python/gdl_module.cc -o "/tmp/gdl-python/gdl$suffix" \
    -Wl,--start-group "$lib"/libgdl_jit.a "$lib"/libgdl_runtime.a "$lib"/libgdl_compiler.a "$lib"/libgdl_core.a \
    "$lib"/libgdl_antlr_parser.a -Wl,--end-group /tmp/gdl-python/libantlr4-runtime.so* -Wl,-rpath,'$ORIGIN' -Wl,-rpath,/usr/local/cuda/lib64 \
    -L/usr/local/cuda/lib64 -lcublasLt -lnvrtc /usr/local/cuda/lib64/libcudart_static.a -lrt -ldl -lpthread
  step python_test 300 env PYTHONPATH=/tmp/gdl-python GDL_PYTHON_REQUIRE_GPU=1 "$PY" tests/python/gdl_test.py
fi

if [[ $what == stalls ]]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  metrics="regex:^(gpu__time_duration.sum|dram__throughput.avg.pct_of_peak_sustained_elapsed|dram__bytes_read.sum"
  metrics+="|smsp__average_warp_latency_per_inst_issued.ratio|smsp__average_warps_issue_stalled_.*_per_issue_active.ratio)$"
  # stall NAME PROGRAM KERNEL DIMS...: one launch of KERNEL (a regex) in PROGRAM.
  stall() {
    local name=$1 program=$2 kernel=$3
    shift 3
    step "stalls_$name" 120 "$NCU" --kernel-name "regex:$kernel" --launch-count 1 --csv --page raw \
      --metrics "$metrics" "$BUILD/gdlrun" "$program" --gpu --print 0 "$@"
  }
  stall p3_mm1024_rows bench/probes/p3_mm1024_rows.gdl gdl_s0_matmul
  stall p10_mm1024_rows_dynamic bench/probes/p10_mm1024_rows_dynamic.gdl gdl_s0_matmul --dim B=1
  stall p4_mm1024_hybrid bench/probes/p4_mm1024_hybrid.gdl gdl_s0_matmul --dim B=1
  stall p7_mm4096_rows bench/probes/p7_mm4096_rows.gdl gdl_s0_matmul
  # A middle layer of W2 (norm prologue, rows kernel at B=1 and 8, tiled
  # kernel at B=64, epilogue).
  for B in 1 8 64; do
    stall "w2_h4096_f16_b$B" bench/workloads/w2_mlp_h4096_f16.gdl gdl_s3_matmul --dim "B=$B"
    stall "w2_h1024_f16_b$B" bench/workloads/w2_mlp_h1024_f16.gdl gdl_s3_matmul --dim "B=$B"
  done
fi

if [[ $what == stream ]]; then
  # bench/experiments/stream_patterns.cu: how fast a GEMV-like kernel can
  # stream a 32 MiB f16 weight matrix per launch, by access pattern, against
  # a pure read; built here with the device's nvcc (it needs no gdl library).
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step stream_build 180 "$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$OUT/stream_patterns" bench/experiments/stream_patterns.cu
  step stream_patterns 120 "$OUT/stream_patterns"
fi

if [[ $what == kvread ]]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step kvread_build 180 "$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$OUT/kv_read_patterns" bench/experiments/kv_read_patterns.cu
  step kv_read_patterns 120 "$OUT/kv_read_patterns"
fi

if [[ $what == tmastream ]]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step tma_stream_build 240 "$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$OUT/tma_stream" bench/experiments/tma_stream.cu
  step tma_stream 120 "$OUT/tma_stream"
fi

if [[ $what == clusterrows ]]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step cluster_rows_build 180 "$NVCC" -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o "$OUT/cluster_rows" bench/experiments/cluster_rows.cu
  step cluster_rows 120 "$OUT/cluster_rows"
fi

if [[ $what == persistent ]]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step persistent_build 240 "$NVCC" -O3 -std=c++17 -arch=sm_90 -o "$OUT/persistent_mlp" bench/experiments/persistent_mlp.cu
  step persistent_mlp 120 "$OUT/persistent_mlp"
fi

if [[ $what == all || $what == sanitizer || $what == sanitizer-examples ]]; then
  for ex in chain mlp attention; do
    step "memcheck_example_$ex" 240 env GDL_EXAMPLE_QUICK=1 \
      "$SANITIZER" --tool memcheck --error-exitcode 99 "$BUILD/examples/run_$ex"
  done
  for ex in chain mlp; do
    step "racecheck_example_$ex" 240 env GDL_EXAMPLE_QUICK=1 \
      "$SANITIZER" --tool racecheck --error-exitcode 99 "$BUILD/examples/run_$ex"
  done
fi

if [[ $what == all || $what == sanitizer || $what == sanitizer-tests ]]; then
  # The semantics tests (bind, dims, scalars, concurrency) and a few op
  # families with shared memory and edge handling. The 10,000-replay test is
  # left out: it only repeats one graph.
  step memcheck_gpu_tests 540 "$SANITIZER" --tool memcheck --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" \
    "--test-case=semantics:*,ops: matmul,ops: reductions,ops: attention*,ops: data movement*,ops: softmax*,kernels: a norm fused*" \
    "--test-case-exclude=*000 replays*"
  # Shared memory of the norm prologue and of the register-held rows.
  step racecheck_gpu_tests 300 "$SANITIZER" --tool racecheck --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" "--test-case=ops: softmax*,kernels: a norm fused*"
fi

if [[ $what == sanitizers ]]; then
  # compute-sanitizer's tools (SANITIZER_TOOLS, default all four) over every
  # example binary and the GPU test binary. memcheck and initcheck take the
  # tests of every op family and runtime path; racecheck and synccheck
  # (shared memory and barriers) those of the kernels that use them. Left
  # out: the soak, fuzz, timing and 10,000-replay cases, which repeat these
  # kernels at length.
  broad="semantics:*,ops:*,reduce ops:*,state:*,runtime values*,dynamic:*,random:*,kernels:*,matmul layouts*,chain:*,attention*,paged_attention*,faults:*,fuzz: saved*"
  shared="ops: softmax*,ops: reductions,reduce ops:*,kernels: a norm*,kernels: attention*,kernels: matmul, tiled*,chain: kernels before*,attention*"
  exclude="*000 replays*,kernels: device time*,dynamic: per-node*,chain: 200 replays*"
  for tool in ${SANITIZER_TOOLS:-memcheck initcheck racecheck synccheck}; do
    for ex in chain mlp attention; do
      step "${tool}_example_$ex" 180 env GDL_EXAMPLE_QUICK=1 "$SANITIZER" --tool "$tool" --error-exitcode 99 "$BUILD/examples/run_$ex"
    done
    if [ -d "$BUILD/artifacts" ]; then
      step "${tool}_hello_host" 60 "$SANITIZER" --tool "$tool" --error-exitcode 99 "$BUILD/examples/hello_host" "$BUILD/artifacts/chain.gdlx"
      step "${tool}_load_and_run" 60 "$SANITIZER" --tool "$tool" --error-exitcode 99 "$BUILD/examples/load_and_run" "$BUILD/artifacts/mlp.gdlx"
    fi
    cases=$broad skip=$exclude
    [[ $tool == racecheck || $tool == synccheck ]] && cases=$shared
    # initcheck tracks every byte: the W2 chain test (8 layers of 4096 x
    # 4096 weights) does not finish under it in 400 s; its small chains do.
    [[ $tool == initcheck ]] && skip+=",chain: W2*"
    step "${tool}_gpu_tests" "${SANITIZER_TEST_SECONDS:-400}" env GDL_GPU_SHARED=1 "$SANITIZER" --tool "$tool" \
      --error-exitcode 99 "$BUILD/tests/gdl_gpu_tests" "--test-case=$cases" "--test-case-exclude=$skip"
    [[ $tool == initcheck ]] && step initcheck_chain_p11 120 "$SANITIZER" --tool initcheck --error-exitcode 99 \
      "$BUILD/gdlrun" bench/probes/p11_chain_h1024.gdl --gpu --check --dim B=3 --print 0
  done
fi

if [[ $what == sanitizer-chain ]]; then
  # The chain kernel (gdl_chain.cuh): memcheck on the GPU tests around and
  # over many replays of chains; racecheck on the small chains of the probes
  # (racecheck on the 4096-wide chains did not finish in a minute).
  step memcheck_chain_tests 300 "$SANITIZER" --tool memcheck --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" "--test-case=chain: kernels before*,chain: 200 replays*"
  for B in 1 8; do
    step "racecheck_chain_p11_b$B" 240 "$SANITIZER" --tool racecheck --error-exitcode 99 \
      "$BUILD/gdlrun" bench/probes/p11_chain_h1024.gdl --gpu --check --dim "B=$B" --print 0
  done
  # The kernel in row groups: 64 rows (eight full groups of 8) and, under
  # node updates, 37 (four full groups, one of 5 rows, three without rows).
  for B in 64 37; do
    step "racecheck_chain_p12_b$B" 240 "$SANITIZER" --tool racecheck --error-exitcode 99 \
      "$BUILD/gdlrun" bench/probes/p12_chain_h1024_rows64.gdl --gpu --check --policy update --dim "B=$B" --print 0
  done
  # The grid barrier's path (K above 1024): probe p13 at K = 2048.
  step racecheck_chain_p13_b3 240 "$SANITIZER" --tool racecheck --error-exitcode 99 \
    "$BUILD/gdlrun" bench/probes/p13_chain_h2048.gdl --gpu --check --dim B=3 --print 0
fi

if [[ $what == sanitizer-attention ]]; then
  step memcheck_attention_tests 360 "$SANITIZER" --tool memcheck --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" "--test-case=kernels: attention*,ops: attention*,dynamic: a KV length*"
  step racecheck_attention_tests 300 "$SANITIZER" --tool racecheck --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" "--test-case=kernels: attention with head dims*,ops: attention*"
  step racecheck_attention_p9 240 "$SANITIZER" --tool racecheck --error-exitcode 99 \
    "$BUILD/gdlrun" bench/probes/p9_attention.gdl --gpu --check --set len=4096 --print 0
fi

if [[ $what == attention-grouped ]]; then
  if [ -x "$BUILD/tests/gdl_gpu_tests" ]; then
    step attention_tests 400 "$BUILD/tests/gdl_gpu_tests" --duration=true \
      "--test-case=attention*,paged_attention*,kernels: attention*"
    step memcheck_grouped 200 env GDL_ATTENTION_GROUPED=1 "$SANITIZER" --tool memcheck --error-exitcode 99 \
      "$BUILD/tests/gdl_gpu_tests" "--test-case=attention: grouped heads on*"
    step racecheck_grouped 300 env GDL_ATTENTION_GROUPED=1 "$SANITIZER" --tool racecheck --error-exitcode 99 \
      "$BUILD/tests/gdl_gpu_tests" "--test-case=attention: grouped heads on*,paged_attention*"
  fi
  bench_bin=${GDL_BENCH_BIN:-$BUILD/bench/gdl_bench}
  if [ -x "$bench_bin" ]; then
    data=/tmp/gdl-sweep-data
    step sweep_attn_streamed 420 env GDL_ATTENTION_GROUPED=0 GDL_SWEEP_ONLY=attn GDL_SWEEP_RUNS=30 bash bench/sweep.sh \
      "$OUT/attn-streamed" "$data"
    mkdir -p "$OUT/attn-grouped"
    step sweep_attn_grouped 260 "$bench_bin" --data "$data" \
      --out "$OUT/attn-grouped/gdl.json" --repo . --sweep --runs 30 --warmup 10 --time-budget-s 200 --only attn \
      ${GDL_BENCH_COMPILE_CACHE:+--compile-cache "$GDL_BENCH_COMPILE_CACHE"}
    step sweep_attn_grouped_report 60 python3 bench/sweep.py report --torch "$OUT/attn-streamed/torch.json" \
      --gdl "$OUT/attn-grouped/gdl.json" --out "$OUT/attn-grouped/sweep.json" --md "$OUT/attn-grouped/sweep.md"
  fi
fi

if [[ $what == collectives ]]; then
  export NCCL_NVLS_ENABLE=0  # the device machines' rule: no NVLink multicast
  if [ -z "${GDL_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
    found=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__ or nvidia.nccl.__path__[0]))' 2>/dev/null)
    found=$(find ${found:+"$found"} /opt /usr/local -name 'libnccl.so.2' 2>/dev/null | head -1)
    [ -n "$found" ] && export GDL_NCCL_LIBRARY=$found
  fi
  echo "NCCL: ${GDL_NCCL_LIBRARY:-libnccl.so.2 on the library path}" | tee "$OUT/nccl.txt"
  nvidia-smi --query-gpu=index,name --format=csv >> "$OUT/nccl.txt" 2>&1
  step collective_tests 400 "$BUILD/tests/gdl_gpu_tests" --duration=true -s \
    "--test-case=collectives*,multi-gpu:*,semantics: a group of one rank*,semantics: wrong communicators*,semantics: the tensor-parallel*"
  # NCCL's initialization asks cudaFuncGetAttributes of kernels it has no
  # image for on this GPU (8 such API errors on the H200, all inside
  # ncclCommInitAll): API errors are not reported here, memory errors are.
  step memcheck_collectives 300 "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 99 \
    "$BUILD/tests/gdl_gpu_tests" "--test-case=collectives: a group of one rank*"
  # PyTorch's side of the tensor-parallel benchmark (bench/llama.sh), on a
  # tiny model (2 k/v heads) over two GPUs, or one rank on one.
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$gpus" -gt 2 ] && gpus=2
  step torch_tp_save 200 python3 bench/llama_torch.py --config tiny --modes eager --batches 1 --contexts 64 --prefill "" \
    --quick --save-dir /tmp/gdl-torch-tp-tiny --json "$OUT/torch_tiny.json"
  step torch_tp_decode 200 python3 -m torch.distributed.run --standalone --nproc-per-node "$gpus" bench/llama_torch.py \
    --config tiny --tp-load /tmp/gdl-torch-tp-tiny --modes eager,graph --batches 1,8 --contexts 64,512 --quick \
    --json "$OUT/torch_tp_tiny.json"
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then  # gdlrun: every rank on its GPU, checked against the reference
    printf '%s\n' 'program tp;' 'group world ranks(2);' 'dim B in [1, 16];' 'input x : bf16[B, 256];' \
      'param w_up : bf16[256, 512];' 'param w_down : bf16[512, 256];' 'output y : bf16[B, 256];' \
      'output g : bf16[B, 1024];' 'let u = silu(x @ w_up);' 'y = all_reduce(u @ w_down);' 'g = all_gather(u, axis = 1);' \
      > "$OUT/tp.gdl"
    step gdlrun_two_ranks 200 "$BUILD/gdlrun" "$OUT/tp.gdl" --gpu --check --dim B=5 --print 0
  fi
fi

echo
echo "================ gpu-check summary ($what) ================"
for line in "${summary[@]}"; do echo "$line"; done
echo "---------------- details ----------------"
for log in "$OUT"/*.log; do
  name=$(basename "$log" .log)
  case $name in
    gpu_tests)
      grep -E "^gdl_gpu_tests:|test cases:|assertions:|Status:" "$log" | sed "s/^/$name: /"
      grep -E "ERROR|FAILED|error:" "$log" | head -20 | sed "s/^/$name: /" ;;
    example_*)
      grep -E "^program|nodes|graph replay|eager launch|input copy|graph: build|MISMATCH|match the CPU|no GPU|error" "$log" |
        sed "s/^/$name: /" ;;
    hello_host|load_and_run_*)
      head -6 "$log" | sed "s/^/$name: /" ;;
    probe_*)
      grep -E "gdl_s[0-9]+_|graph run|eager run|error" "$log" | sed "s/^/$name: /" ;;
    stalls_*)  # the three largest stall reasons, in cycles per issued instruction
      python3 - "$log" <<'PY' | sed "s/^/$name: /"
import csv, io, sys
rows = list(csv.reader(io.StringIO("".join(l for l in open(sys.argv[1]) if l.startswith('"')))))
if len(rows) < 3:
    sys.exit(print("no ncu data"))
d = dict(zip(rows[0], rows[2]))
num = lambda v: float(v.replace(",", "") or 0)
stalls = {k[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")]: num(v)
          for k, v in d.items() if k.startswith("smsp__average_warps_issue_stalled_")}
top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
print("duration", d.get("gpu__time_duration.sum"), "ns; DRAM", d.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
      "% of peak,", d.get("dram__bytes_read.sum"), "read; cycles/instruction",
      d.get("smsp__average_warp_latency_per_inst_issued.ratio"), ";", ", ".join(f"{k} {v:.1f}" for k, v in top))
PY
      ;;
    stream_patterns)
      grep -E "^(device|pattern|strip|warp|block|ceiling|pdl)" "$log" | sed "s/^/$name: /" ;;
    kv_read_patterns|cluster_rows)
      sed "s/^/$name: /" "$log" ;;
    tma_stream)
      grep -E "^(cp.async|tma|256 MiB)" "$log" | sed "s/^/$name: /" ;;
    persistent_mlp)
      grep -E "^(mma|split|stream|str-nx|mma-nx|sstrm|load|grid|plain)" "$log" | sed "s/^/$name: /" ;;
    fuzz_*)
      grep -E "programs checked|random programs passed|ERROR|seed [0-9]+:|test cases:" "$log" | tail -8 | sed "s/^/$name: /" ;;
    soak)
      grep -E "replays in|threads,|sessions created|each failed in turn|after every fault|ERROR|test cases:|assertions:" "$log" |
        sed "s/^/$name: /" ;;
    nvtx_*)
      grep -E "gdl|step [0-9]+:|run |bind " "$log" | sort | uniq -c | sort -rn | head -20 | sed "s/^/$name: /" ;;
    memcheck_*|racecheck_*|initcheck_*|synccheck_*)
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases:|MISMATCH|match the CPU|killed" "$log" | sed "s/^/$name: /"
      grep -E "Invalid|out of bounds|Race reported|Hazard" "$log" | head -10 | sed "s/^/$name: /" ;;
  esac
done
echo "logs: $OUT"
if [ "$failed" -ne 0 ]; then echo "gpu-check: FAILED (a step exited non-zero)"; exit 1; fi
echo "gpu-check: OK"
