// gdl_gpu_tests: decides at run time whether there is a GPU. Without one it
// prints why and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu_test_util.h"

int main(int argc, char** argv) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (e != cudaSuccess)
      std::printf("gdl_gpu_tests: SKIPPED: no usable GPU (%s: %s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    else
      std::printf("gdl_gpu_tests: SKIPPED: no usable GPU (cudaGetDeviceCount found 0 devices)\n");
    const char* dry = std::getenv("GDL_GPU_TESTS_CPU_ONLY");
    if (!dry || std::strcmp(dry, "1") != 0) return 77;
    std::printf("gdl_gpu_tests: GDL_GPU_TESTS_CPU_ONLY=1: compiling and running the CPU reference only "
                "(use -tc=\"ops:*,examples:*\")\n");
    gdl::gpu_test::cpu_only = true;
  }
  cudaDeviceProp prop{};
  if (!gdl::gpu_test::cpu_only && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("gdl_gpu_tests: %d device(s); device 0: %s, sm_%d%d, %.1f GiB\n", count, prop.name, prop.major,
                prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  doctest::Context context(argc, argv);
  if (gdl::gpu_test::cpu_only) {
    // Every step of these cases needs a session on a GPU; a dry run has none to give them.
    context.addFilter("test-case-exclude", "semantics:*");
    std::printf("gdl_gpu_tests: GDL_GPU_TESTS_CPU_ONLY=1: the semantics:* cases need a session and are left out\n");
  }
  if (count < 2) {
    // Their ranks run on two GPUs (NCCL runs one rank per GPU).
    context.addFilter("test-case-exclude", "multi-gpu:*");
    std::printf("gdl_gpu_tests: %d device(s): the multi-gpu:* cases need 2 and are left out\n", count);
  }
  return context.run();
}
