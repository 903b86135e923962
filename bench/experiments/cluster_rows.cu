// cluster_rows.cu - how should the chain's 128 blocks read a step's rows?
// At W2 H=4096 B=8 every block of gdl::MatmulChain reads the same 64 KiB
// of rows (8 rows of 4096 f16, written by all blocks in the step before)
// after each grid barrier, while its producer streams the weights. A
// measurement build of the chain where only half the blocks read them was
// about as fast as one where none did (docs/performance.md, "Targets"):
// the cost is shared, not each SM's own read. This probe asks whether
// the next step there can run, and how the rows' read
// compares by mechanism, outside the chain:
//  1. can a cooperative launch (the chain's grid barrier needs every block
//     resident) also be a cluster launch of 2 blocks, with the chain's
//     block (288 threads; here 512, about 200 KiB of shared memory), 128
//     blocks, directly and as a graph kernel node (as the runtime adds the
//     chain)? And how many clusters of 2 fit at once?
//  2. per step (a spin grid barrier over the computing warps, then the
//     rows into shared memory, then each block's 512 bytes of the next
//     step's rows written back), the time of:
//       none       the barrier and the write-back alone
//       plain      every block loads the 64 KiB with 16-byte __ldcg loads
//                  (as the chain does)
//       odd        only the odd blocks load them (as that measurement
//                  build, here with correct checks for the others)
//       multicast  each block of a cluster pair issues half of the rows as
//                  1-D bulk copies with .multicast::cluster, so every row
//                  is read from L2 once per pair and lands in both blocks
//     with and without 8 producer warps per block streaming 256 KiB of
//     other bytes per step from DRAM meanwhile (the weights: 32 MiB a step
//     over the grid, 8 steps).
// Every block checks what it staged: the 32-bit words of the rows it read
// each step summed (integer, order-free) against the sum of the source.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o cluster_rows bench/experiments/cluster_rows.cu
// Run:   ./cluster_rows
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_bench.cuh"

namespace {

constexpr int kBlocks = 128, kRows = 8, kK = 4096, kCols = kK / kBlocks;  // 32 columns a block
constexpr int kSteps = 8;
constexpr int kConsumers = 256, kProducers = 256, kThreads = kConsumers + kProducers;
constexpr int kUnroll = 16;  // a producer thread's loads in flight: 64 KiB a block
constexpr int kRowBytes = kK * 2, kRowsBytes = kRows * kRowBytes;  // 64 KiB
constexpr int kSmemBytes = 200 * 1024;                             // one block per SM, as the chain
constexpr size_t kSliceBytes = 256 * 1024;                         // a block's weights per step
constexpr size_t kStepWeightBytes = kSliceBytes * kBlocks;         // 32 MiB
enum Mode { kNone, kPlain, kOdd, kMulticast, kModes };
const char* const kModeNames[kModes] = {"none", "plain", "odd", "multicast"};

__device__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The computing warps' grid barrier: a counter that only grows.
__device__ void grid_barrier(unsigned* counter, unsigned target) {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

__device__ unsigned sum_words(uint4 v) { return v.x + v.y + v.z + v.w; }

// rows: two buffers of kRowsBytes (step parity); weights: kSteps x 32 MiB.
__global__ void rows_kernel(int mode, int stream, uint4* rows, const uint4* weights, unsigned* counter,
                            unsigned base, unsigned* sums, unsigned* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  uint4* staged = reinterpret_cast<uint4*>(smem);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem + kRowsBytes);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster.sync();  // both blocks' barriers exist before either multicasts into them

  if (threadIdx.x >= kConsumers) {  // the producer warps: the weights, as fast as they go
    if (!stream) return;
    const int t = threadIdx.x - kConsumers;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (int s = 0; s < kSteps; ++s) {
      const uint4* slice = weights + (s * kStepWeightBytes + blockIdx.x * kSliceBytes) / 16;
      for (int i = t; i < (int)(kSliceBytes / 16); i += kProducers * kUnroll) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(slice + i + u * kProducers);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
      }
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) sink[blockIdx.x] = 1;  // keeps the loads
    return;
  }

  unsigned total = 0;
  constexpr int kPerThread = kRowsBytes / 16 / kConsumers;  // 16 vectors
  for (int s = 0; s < kSteps; ++s) {
    grid_barrier(counter, base + (s + 1) * gridDim.x);
    const uint4* src = rows + (s & 1) * (kRowsBytes / 16);
    const bool reads = mode == kPlain || mode == kMulticast || (mode == kOdd && (blockIdx.x & 1));
    if (mode == kPlain || (mode == kOdd && (blockIdx.x & 1))) {
      uint4 v[kPerThread];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) v[j] = __ldcg(src + threadIdx.x + j * kConsumers);
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) staged[threadIdx.x + j * kConsumers] = v[j];
      asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
    } else if (mode == kMulticast) {
      if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(kRowsBytes)
                     : "memory");
        // Generic writes of the rows by other blocks, read here through the async proxy.
        asm volatile("fence.proxy.async.global;" ::: "memory");
        for (int r = rank; r < kRows; r += 2)
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
              "[%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(smem + r * kRowBytes)),
              "l"(reinterpret_cast<const unsigned char*>(src) + r * kRowBytes), "r"(kRowBytes), "r"(smem_addr(bar)),
              "h"((unsigned short)0x3)
              : "memory");
      }
      unsigned done = 0;
      while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(s & 1)
            : "memory");
    }
    if (reads)
      for (int j = 0; j < kPerThread; ++j) total += sum_words(staged[threadIdx.x + j * kConsumers]);
    // The block's columns of the next step's rows (the same values), as the
    // chain's store writes its outputs.
    if (threadIdx.x < kRows * kCols * 2 / 16) {
      const int row = threadIdx.x / (kCols * 2 / 16), piece = threadIdx.x % (kCols * 2 / 16);
      const size_t at = (size_t)row * (kRowBytes / 16) + blockIdx.x * (kCols * 2 / 16) + piece;
      rows[((s + 1) & 1) * (kRowsBytes / 16) + at] = __ldcg(src + at);
    }
    // Both blocks of a pair are done with `staged` before either's next
    // multicast lands in it: the next grid barrier orders that.
  }
  total = __reduce_add_sync(0xffffffffu, total);
  if ((threadIdx.x & 31) == 0) atomicAdd(&sums[blockIdx.x], total);
}

__global__ void source_sum(const uint4* rows, unsigned* out) {
  unsigned t = 0;
  for (int i = threadIdx.x; i < kRowsBytes / 16; i += blockDim.x) t += sum_words(rows[i]);
  t = __reduce_add_sync(0xffffffffu, t);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, t);
}

void set_attributes(cudaLaunchAttribute (&a)[2]) {
  a[0].id = cudaLaunchAttributeCooperative;
  a[0].val.cooperative = 1;
  a[1].id = cudaLaunchAttributeClusterDimension;
  a[1].val.clusterDim.x = 2, a[1].val.clusterDim.y = 1, a[1].val.clusterDim.z = 1;
}

}  // namespace

int main() {
  CK(cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[2];
  set_attributes(attrs);
  config.gridDim = dim3(kBlocks), config.blockDim = dim3(kThreads), config.dynamicSmemBytes = kSmemBytes;
  config.attrs = attrs + 1, config.numAttrs = 1;  // the cluster alone, for the occupancy query
  int clusters = 0;
  CK(cudaOccupancyMaxActiveClusters(&clusters, rows_kernel, &config));
  std::printf("clusters of 2 blocks (%d threads, %d KiB shared) resident at once: %d (the chain needs %d)\n", kThreads,
              kSmemBytes / 1024, clusters, kBlocks / 2);
  config.attrs = attrs, config.numAttrs = 2;

  uint4* rows;
  uint4* weights;
  unsigned *counter, *sums, *sink, *expect;
  CK(cudaMalloc(&rows, 2 * kRowsBytes));
  CK(cudaMalloc(&weights, kSteps * kStepWeightBytes));
  CK(cudaMalloc(&counter, 4));
  CK(cudaMalloc(&sums, kBlocks * 4));
  CK(cudaMalloc(&sink, kBlocks * 4));
  CK(cudaMalloc(&expect, 4));
  fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(rows), kRowsBytes / 2, 7u, 1.0f);
  CK(cudaMemcpy(reinterpret_cast<unsigned char*>(rows) + kRowsBytes, rows, kRowsBytes, cudaMemcpyDeviceToDevice));
  fill_half<<<4096, 256>>>(reinterpret_cast<__half*>(weights), kSteps * kStepWeightBytes / 2, 9u, 1.0f);
  CK(cudaMemset(counter, 0, 4));
  CK(cudaMemset(expect, 0, 4));
  source_sum<<<1, 1024>>>(rows, expect);
  unsigned want = 0;
  CK(cudaMemcpy(&want, expect, 4, cudaMemcpyDeviceToHost));
  CK(cudaDeviceSynchronize());

  unsigned launches = 0;  // the counter's base: it grows by kSteps x kBlocks a launch
  const auto launch = [&](int mode, int stream) {
    CK(cudaMemset(sums, 0, kBlocks * 4));
    const unsigned base = launches * kSteps * kBlocks;
    ++launches;
    return cudaLaunchKernelEx(&config, rows_kernel, mode, stream, rows, (const uint4*)weights, counter, base, sums, sink);
  };
  const auto check = [&](int mode) {
    std::vector<unsigned> got(kBlocks);
    CK(cudaMemcpy(got.data(), sums, kBlocks * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < kBlocks; ++b) {
      const bool reads = mode == kPlain || mode == kMulticast || (mode == kOdd && (b & 1));
      if (got[b] != (reads ? want * kSteps : 0u)) ++bad;
    }
    return bad;
  };

  // 1. The launch itself, directly.
  cudaError_t e = launch(kMulticast, 0);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::printf("cooperative + cluster launch (cudaLaunchKernelEx): %s\n", cudaGetErrorString(e));
  if (e != cudaSuccess) return 1;
  std::printf("  multicast staged rows: %d of %d blocks wrong\n", check(kMulticast), kBlocks);

  // 1b. As a graph kernel node with both attributes.
  {
    cudaGraph_t graph;
    CK(cudaGraphCreate(&graph, 0));
    const unsigned base = launches * kSteps * kBlocks;
    ++launches;
    int mode = kMulticast, stream = 0;
    const uint4* w = weights;
    void* args[] = {&mode, &stream, &rows, &w, &counter, (void*)&base, &sums, &sink};
    cudaKernelNodeParams p = {};
    p.func = reinterpret_cast<void*>(rows_kernel);
    p.gridDim = config.gridDim, p.blockDim = config.blockDim, p.sharedMemBytes = kSmemBytes, p.kernelParams = args;
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &p));
    cudaError_t ea = cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeCooperative, &attrs[0].val);
    cudaError_t eb = cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeClusterDimension, &attrs[1].val);
    cudaGraphExec_t exec = nullptr;
    cudaError_t ei = ea == cudaSuccess && eb == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : cudaErrorUnknown;
    CK(cudaMemset(sums, 0, kBlocks * 4));
    cudaError_t el = ei == cudaSuccess ? cudaGraphLaunch(exec, 0) : cudaErrorUnknown;
    if (el == cudaSuccess) el = cudaDeviceSynchronize();
    std::printf("as a graph kernel node: cooperative attribute %s, cluster attribute %s, instantiate %s, launch %s\n",
                cudaGetErrorString(ea), cudaGetErrorString(eb), cudaGetErrorString(ei), cudaGetErrorString(el));
    if (el == cudaSuccess) std::printf("  multicast staged rows: %d of %d blocks wrong\n", check(kMulticast), kBlocks);
    if (exec) CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
  }

  // 2. Time per launch of kSteps steps, median of 30 after 5 warm-up.
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  std::printf("\nus per launch of %d steps (median of 30), per step over 'none' in brackets; wrong blocks\n", kSteps);
  for (int stream = 0; stream <= 1; ++stream) {
    std::printf("%s\n", stream ? "with 8 producer warps streaming 32 MiB a step from DRAM"
                               : "rows alone (no weight stream)");
    float none_us = 0.0f;
    for (int mode = 0; mode < kModes; ++mode) {
      std::vector<float> times;
      int bad = 0;
      for (int i = 0; i < 35; ++i) {
        CK(cudaMemset(sums, 0, kBlocks * 4));
        const unsigned base = launches * kSteps * kBlocks;
        ++launches;
        CK(cudaEventRecord(t0));
        CK(cudaLaunchKernelEx(&config, rows_kernel, mode, stream, rows, (const uint4*)weights, counter, base, sums,
                              sink));
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (i >= 5) times.push_back(ms * 1000.0f);
        bad = std::max(bad, check(mode));
      }
      std::sort(times.begin(), times.end());
      const float median = times[times.size() / 2];
      if (mode == kNone) none_us = median;
      std::printf("  %-10s %8.2f us  (%+.3f us a step)  wrong blocks %d", kModeNames[mode], median,
                  (median - none_us) / kSteps, bad);
      if (stream && mode == kNone) std::printf("  (weights at %.2f TB/s)", kSteps * kStepWeightBytes / (median * 1e6));
      std::printf("\n");
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
