#!/usr/bin/env bash
# Builds the GPU binaries here (Release) and stages them under .device/ (git
# ignored) for the GPU machine, with an NVRTC cache filled by compiling every
# GPU test program once here, so the GPU machine spends its time running.
# Then, on the GPU machine, from the repo root (carry build-pack/tests.tgz
# for the GPU tests, build-pack/device.tgz for the examples and the rest of
# gpu-check.sh, build-pack/bench.tgz for the benchmarks):
#   tar xzf build-pack/tests.tgz
#   BUILD=.device/build-release GDL_CACHE_DIR=$PWD/.device/cache scripts/gpu-check.sh tests
#   (device.tgz: the same with examples, consumer, python, ...)
#   bash bench/run.sh OUT          (GDL_BENCH_BIN=.device/build-release/bench/gdl_bench)
#   bash bench/sweep.sh OUT        (the same, and GDL_BENCH_COMPILE_CACHE=$PWD/.device/bench-cache)
#   bash bench/train.sh OUT        (GDL_BENCH_COMPILE_CACHE=$PWD/.device/bench-cache)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-release}
targets=(gdl_gpu_tests run_mlp run_chain run_attention hello_host load_and_run llama_generate gdlc gdlrun gdl_bench
  gdl_train_bench)
[ -f bench/dynamic_bench.cc ] && targets+=(gdl_dynamic_bench)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${targets[@]}"
stage=.device/build-release
rm -rf "$stage"
mkdir -p "$stage/tests" "$stage/examples" "$stage/bench" "$stage/artifacts" .device/cache
cp "$BUILD/tests/gdl_gpu_tests" "$stage/tests/"
cp "$BUILD"/examples/run_{mlp,chain,attention} "$BUILD"/examples/{hello_host,load_and_run,llama_generate} "$stage/examples/"
cp "$BUILD/gdlc" "$BUILD/gdlrun" "$stage/"
cp "$BUILD/bench/gdl_bench" "$BUILD/bench/gdl_train_bench" "$stage/bench/"
# What the binaries were built from (bench/run.sh copies it into env.txt).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . && echo '' || echo ' with uncommitted changes')" \
  >"$stage/bench/built-from.txt"
[ -x "$BUILD/bench/gdl_dynamic_bench" ] && cp "$BUILD/bench/gdl_dynamic_bench" "$stage/bench/"
# The caches keep entries of older builds too: what goes into the packs is
# what this staging opened (traced) or wrote (newer than the stamp).
trace_dir=$(mktemp -d)
touch "$trace_dir/stamp"
traced() { strace -f -qq -e trace=openat -o "$trace_dir/trace.$((++traces))" "$@"; }
traces=0
# Fill the NVRTC cache: the GPU tests' CPU-only mode compiles every test program
# (the cases that need a session fail there after compiling theirs; --no-breaks:
# doctest would stop the traced process at the first failure).
GDL_SOURCE_DIR=$PWD GDL_CACHE_DIR=$PWD/.device/cache GDL_GPU_TESTS_CPU_ONLY=1 \
  traced "$stage/tests/gdl_gpu_tests" --no-breaks=true -tc="ops:*,reduce ops:*,state:*,grad:*,training:*,random:*,examples:*,kernels:*,chain:*,attention*,paged_attention*,runtime values*,matmul layouts*,soak:*,faults:*,fuzz: saved*,embedding*,dynamic*,semantics*,limits*,harness*" >/dev/null || true
# The benchmark's programs into their own cache (GDL_BENCH_COMPILE_CACHE=$PWD/.device/bench-cache).
mkdir -p .device/bench-cache
for program in bench/workloads/*.gdl bench/l2_flush.gdl; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 traced "$stage/gdlc" "$program" -o /tmp/stage-device.gdlx --cache-dir=.device/bench-cache >/dev/null
done
# The shape sweep's programs (bench/sweep.sh), into the same cache.
rm -rf /tmp/stage-device-sweep
python3 bench/sweep.py programs /tmp/stage-device-sweep >/dev/null
for program in /tmp/stage-device-sweep/*.gdl; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 traced "$stage/gdlc" "$program" -o /tmp/stage-device.gdlx --cache-dir=.device/bench-cache >/dev/null
done
# The training benchmark's program at each of its configs (bench/train.sh).
for sizes in "-D DT=bf16" "-D DT=bf16 -D L=4 -D H=1024 -D NH=16 -D KVH=4 -D HD=64 -D F=2816 -D V=8192 -D S=512 -D B=8"; do
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 traced "$stage/gdlc" examples/train_lm.gdl $sizes -o /tmp/stage-device.gdlx \
    --cache-dir=.device/bench-cache >/dev/null
done
rm -rf /tmp/stage-device.gdlx /tmp/stage-device-sweep
# The examples as artifacts, for the hosts that link the runtime alone
# (hello_host, load_and_run: gpu-check.sh examples).
for ex in chain mlp attention; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$stage/gdlc" "examples/$ex.gdl" -o "$stage/artifacts/$ex.gdlx" --arch=sm_90 \
    --cache-dir=.device/cache >/dev/null
done
# The consumer project (examples/consumer) built against an installed tree,
# as scripts/test-consumer.sh does here; gpu-check.sh consumer runs it with
# the installed runtime library beside it.
rm -rf /tmp/stage-device-consumer
cmake --install "$BUILD" --prefix /tmp/stage-device-consumer/prefix >/dev/null
cmake -S examples/consumer -B /tmp/stage-device-consumer/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH=/tmp/stage-device-consumer/prefix >/dev/null
GDL_CACHE_DIR=$PWD/.device/cache cmake --build /tmp/stage-device-consumer/build -j "${JOBS:-2}" >/dev/null
mkdir -p "$stage/consumer"
cp /tmp/stage-device-consumer/build/consumer /tmp/stage-device-consumer/build/consumer_jit "$stage/consumer/"
cp -P /tmp/stage-device-consumer/prefix/lib*/libgdl_runtime.so* "$stage/consumer/"
rm -rf /tmp/stage-device-consumer
# The Python module is built on the GPU machine, for its own Python
# (gpu-check.sh python): the archives it links, the headers it includes
# beyond include/, and ANTLR's shared runtime (Debian's static one is not
# position independent).
py=$stage/python
mkdir -p "$py/lib" "$py/include/gdl" "$py/include/dlpack"
cp "$BUILD"/libgdl_{jit,runtime,compiler,core,antlr_parser}.a "$py/lib/"
cp "$(readlink -f /usr/lib/x86_64-linux-gnu/libantlr4-runtime.so)" "$py/lib/"
cp "$BUILD/generated/include/gdl/version.h" "$py/include/gdl/"
cp /usr/include/dlpack/dlpack.h "$py/include/dlpack/"
strip --strip-debug "$py"/lib/*.a
# What the GPU machine does not run goes; the rest is stripped and packed.
rm -f "$stage/gdlc" "$stage/bench/gdl_dynamic_bench"
strip --strip-debug "$stage"/tests/gdl_gpu_tests "$stage"/examples/* "$stage"/bench/gdl_{bench,train_bench} "$stage/gdlrun" \
  "$stage"/consumer/consumer "$stage"/consumer/consumer_jit
# Three packs, each under the device tool's 64 MiB: tests.tgz for the GPU
# tests (their binary and the cache entries), device.tgz for the examples,
# the consumer and the Python module (the other binaries and the same
# entries), bench.tgz for the benchmarks (gdl_bench, gdl_train_bench, gdlrun
# and the bench cache's entries).
used_entries() {  # CACHE: its entries this staging opened or wrote, relative to the repo
  { grep -h -v ' = -1 ' "$trace_dir"/trace.* | grep -oE "\.device/$1/[^\"]+" || true
    find ".device/$1" -type f -newer "$trace_dir/stamp"; } | sort -u | while read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done  # (a last missing entry must not fail the loop)
}
mkdir -p build-pack
used_entries cache >"$trace_dir/cache.list"
used_entries bench-cache >"$trace_dir/bench.list"
tar czf build-pack/tests.tgz .device/build-release/tests -T "$trace_dir/cache.list"
tar czf build-pack/device.tgz --exclude=.device/build-release/bench/gdl_bench \
  --exclude=.device/build-release/bench/gdl_train_bench --exclude=.device/build-release/tests .device/build-release \
  -T "$trace_dir/cache.list"
tar czf build-pack/bench.tgz .device/build-release/bench .device/build-release/gdlrun -T "$trace_dir/bench.list"
rm -rf "$trace_dir"
ls -l build-pack/tests.tgz build-pack/device.tgz build-pack/bench.tgz
for pack in tests device bench; do
  [ "$(stat -c %s "build-pack/$pack.tgz")" -le $((64 << 20)) ] || echo "build-pack/$pack.tgz is over 64 MiB, more than one command to the GPU machine carries" >&2
done
