#!/usr/bin/env bash
# Installs what gdl needs to build and test on a fresh Debian 12 machine.
# The CUDA toolkit (nvcc, NVRTC, cudart) is expected at /usr/local/cuda.
set -euo pipefail
# CLI11 parses every tool's command line; dlpack.h is the DLPack exchange
# format of gdl/dlpack.h. pybind11, Python's headers and NumPy build and
# test the Python module. clang and its sanitizer and libFuzzer run-time libraries are for
# scripts/sanitize.sh (libclang-rt-14-dev is only a recommendation of clang's).
packages=(cmake ninja-build g++ antlr4 libantlr4-runtime-dev uuid-dev doctest-dev nlohmann-json3-dev python3 clang libclang-rt-14-dev
          pkgconf libcli11-dev libdlpack-dev pybind11-dev python3-dev python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -d /usr/local/cuda ]; then
  echo "error: the CUDA toolkit was not found at /usr/local/cuda (gdl needs NVRTC and cudart from it)" >&2
  exit 1
fi
