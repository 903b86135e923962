#!/usr/bin/env bash
# Installs the build in BUILD_DIR into a temporary prefix, then configures,
# builds and runs examples/consumer against it (find_package(gdl CONFIG),
# gdl_add_program(... EMBED), gdl::runtime, gdl::jit). A ctest
# (tests/CMakeLists.txt); without a GPU the consumer loads its program and
# stops, with one it runs it; consumer_jit compiles the program in the
# process and checks the CPU reference's outputs.
#   scripts/test-consumer.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "${1:?usage: scripts/test-consumer.sh BUILD_DIR}" && pwd)
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export GDL_CACHE_DIR="$WORK/nvrtc-cache"  # gdlc and consumer_jit compile afresh, and leave nothing behind
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log"
cmake -S examples/consumer -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" >"$WORK/configure.log" || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/build" -j "${JOBS:-2}" >"$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
# The binary finds the installed runtime through its RPATH (CMake sets it for the build tree).
"$WORK/build/consumer"
"$WORK/build/consumer_jit" examples/consumer/scale.gdl
# pkg-config: a program built from gdl.pc's flags alone.
printf '#include "gdl/gdl.h"\nint main() { return gdl::Program::load("/nonexistent.gdlx").status().code() == gdl::StatusCode::kNotFound ? 0 : 1; }\n' \
  >"$WORK/pc.cc"
pc_file=$(find "$WORK/prefix" -name gdl.pc)
export PKG_CONFIG_PATH=$(dirname "$pc_file")
flags=$(pkg-config --cflags --libs gdl)
libdir=$(pkg-config --variable=libdir gdl)
c++ -std=c++20 "$WORK/pc.cc" -o "$WORK/pc" $flags -Wl,-rpath,"$libdir"
"$WORK/pc"
echo "consumer: pkg-config build runs"
