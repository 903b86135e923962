#!/usr/bin/env bash
# Builds the GPU binaries here (Release) and stages them under .device/ (git
# ignored) for the GPU machine, with an NVRTC cache filled by compiling every
# GPU test program once here, so the GPU machine spends its time running.
# Then, on the GPU machine, from the repo root (carry build-pack):
#   tar xzf build-pack/device.tgz
#   BUILD=.device/build-release GDL_CACHE_DIR=$PWD/.device/cache scripts/gpu-check.sh tests
#   bash bench/run.sh OUT          (GDL_BENCH_BIN=.device/build-release/bench/gdl_bench)
#   bash bench/sweep.sh OUT        (the same, and GDL_BENCH_COMPILE_CACHE=$PWD/.device/bench-cache)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-release}
targets=(gdl_gpu_tests run_mlp run_chain run_attention hello_host load_and_run llama_generate gdlc gdlrun gdl_bench)
[ -f bench/dynamic_bench.cc ] && targets+=(gdl_dynamic_bench)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${targets[@]}"
stage=.device/build-release
rm -rf "$stage"
mkdir -p "$stage/tests" "$stage/examples" "$stage/bench" "$stage/artifacts" .device/cache
cp "$BUILD/tests/gdl_gpu_tests" "$stage/tests/"
cp "$BUILD"/examples/run_{mlp,chain,attention} "$BUILD"/examples/{hello_host,load_and_run,llama_generate} "$stage/examples/"
cp "$BUILD/gdlc" "$BUILD/gdlrun" "$stage/"
cp "$BUILD/bench/gdl_bench" "$stage/bench/"
# What the binaries were built from (bench/run.sh copies it into env.txt).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . && echo '' || echo ' with uncommitted changes')" \
  >"$stage/bench/built-from.txt"
[ -x "$BUILD/bench/gdl_dynamic_bench" ] && cp "$BUILD/bench/gdl_dynamic_bench" "$stage/bench/"
# Fill the NVRTC cache: the GPU tests' CPU-only mode compiles every test program.
GDL_SOURCE_DIR=$PWD GDL_CACHE_DIR=$PWD/.device/cache GDL_GPU_TESTS_CPU_ONLY=1 \
  "$stage/tests/gdl_gpu_tests" -tc="ops:*,reduce ops:*,state:*,random:*,examples:*,kernels:*,chain:*,attention*,paged_attention*,runtime values*,matmul layouts*,soak:*,faults:*,fuzz: saved*" >/dev/null || true
# The benchmark's programs into their own cache (GDL_BENCH_COMPILE_CACHE=$PWD/.device/bench-cache).
mkdir -p .device/bench-cache
for program in bench/workloads/*.gdl bench/l2_flush.gdl; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$stage/gdlc" "$program" -o /tmp/stage-device.gdlx --cache-dir=.device/bench-cache >/dev/null
done
# The shape sweep's programs (bench/sweep.sh), into the same cache.
rm -rf /tmp/stage-device-sweep
python3 bench/sweep.py programs /tmp/stage-device-sweep >/dev/null
for program in /tmp/stage-device-sweep/*.gdl; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$stage/gdlc" "$program" -o /tmp/stage-device.gdlx --cache-dir=.device/bench-cache >/dev/null
done
rm -rf /tmp/stage-device.gdlx /tmp/stage-device-sweep
# The examples as artifacts, for the hosts that link the runtime alone
# (hello_host, load_and_run: gpu-check.sh examples).
for ex in chain mlp attention; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$stage/gdlc" "examples/$ex.gdl" -o "$stage/artifacts/$ex.gdlx" --arch=sm_90 \
    --cache-dir=.device/cache >/dev/null
done
# What the GPU machine does not run goes; the rest is stripped and packed:
# the device tool carries at most 64 MiB, the pack about a third of that.
# On the GPU machine, from the repo root: tar xzf build-pack/device.tgz
rm -f "$stage/gdlc" "$stage/bench/gdl_dynamic_bench"
strip --strip-debug "$stage"/tests/gdl_gpu_tests "$stage"/examples/* "$stage/bench/gdl_bench" "$stage/gdlrun"
mkdir -p build-pack
tar czf build-pack/device.tgz .device
du -sh .device build-pack/device.tgz
