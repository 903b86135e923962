// kv_read_patterns.cu - how fast can W3's K and V (two [32][4096][128] f16
// tensors, 64 MiB) be read, by access pattern? The attention kernel
// (gdl::attention_stream) moves them by bulk copies into a ring of shared
// memory at about 22 us where the floor is 15.8 us (docs/performance.md);
// this separates the pattern from the copy mechanism.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o kv_read_patterns bench/experiments/kv_read_patterns.cu
// Run:   ./kv_read_patterns
//
// Every variant reads every 32-bit word of K and V once and adds them into
// one 64-bit sum (integer addition: any order gives the same sum, a word
// read twice or missed does not), checked against a reference kernel. A
// "chunk" is 64 positions of one head: 16 KiB of K and 16 KiB of V; there
// are 32 x 64 = 2048 of each. Before each timed launch a 256 MiB read empties
// the L2 (clean lines, as gdl_bench's read flush). Median of the timed
// launches, CUDA events around the launch alone.
//   grid        plain grid-stride read of both tensors, 4 x 16 B in flight per thread
//   plain/split the attention kernel's split: block b = (head b / 8, split b % 8)
//               reads its 8 contiguous chunks (512 positions) of K and V with
//               plain 16-byte loads, 8 in flight per thread
//   plain/inter block b reads chunks b, b + 256, ... (at each moment the 256
//               blocks read 256 neighbouring chunks)
//   ring/split  the attention kernel's copies: one thread issues a stage
//               (P positions of K and of V, two cp.async.bulk) into a ring of
//               NS stages; every thread waits on the stage's mbarrier, reads
//               its part, __syncthreads, the stage is refilled; same chunks
//               as plain/split
//   ring/inter  the same ring over plain/inter's chunks, the pipeline running
//               across chunks
//   ring/persist a grid of 2 blocks per SM, block b taking chunks b, b + G, ...
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_bench.cuh"

constexpr int HEADS = 32, T = 4096, D = 128;
constexpr size_t TENSOR_BYTES = (size_t)HEADS * T * D * 2;  // 32 MiB
constexpr int CHUNK_POS = 64;
constexpr int CHUNKS = HEADS * T / CHUNK_POS;  // 2048 per tensor
constexpr size_t CHUNK_BYTES = (size_t)CHUNK_POS * D * 2;  // 16 KiB
constexpr int THREADS = 256;
constexpr int WARMUP = 5, TIMED = 40;

__device__ __forceinline__ unsigned long long word_sum(uint4 v) {
  return (unsigned long long)v.x + v.y + v.z + v.w;
}

__device__ __forceinline__ void block_add(unsigned long long s, unsigned long long* out) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

__global__ void reference_sum(const uint4* a, size_t vectors, unsigned long long* out) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors; i += (size_t)gridDim.x * blockDim.x)
    s += word_sum(a[i]);
  block_add(s, out);
}

__global__ void flush_read(const uint4* a, size_t vectors, unsigned long long* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < vectors; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcs(a + i);
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) *sink = 1;  // keeps the loads
}

__global__ void grid_read(const uint4* k, const uint4* v, unsigned long long* out) {
  constexpr size_t n = TENSOR_BYTES / 16;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < 2 * n; i += 4 * stride) {
    uint4 r[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t j = i + u * stride;
      r[u] = j < 2 * n ? __ldg(j < n ? k + j : v + (j - n)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) s += word_sum(r[u]);
  }
  block_add(s, out);
}

// Chunk `c` of block b's list under each mapping: split (8 contiguous chunks
// of one head) or interleaved (b, b + G, ...).
__device__ __forceinline__ int chunk_of(bool interleaved, int j) {
  return interleaved ? j * gridDim.x + blockIdx.x : blockIdx.x * (CHUNKS / gridDim.x) + j;
}
__device__ __forceinline__ int chunks_of(bool interleaved) {
  return interleaved ? (CHUNKS - (int)blockIdx.x + gridDim.x - 1) / gridDim.x : CHUNKS / gridDim.x;
}

__global__ void plain_chunks(const uint4* k, const uint4* v, bool interleaved, unsigned long long* out) {
  constexpr int per_chunk = CHUNK_BYTES / 16;  // 1024 vectors: 4 per thread per tensor
  unsigned long long s = 0;
  const int n = chunks_of(interleaved);
  for (int j = 0; j < n; ++j) {
    const size_t base = (size_t)chunk_of(interleaved, j) * per_chunk;
    uint4 r[8];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      r[u] = __ldg(k + base + u * THREADS + threadIdx.x);
      r[4 + u] = __ldg(v + base + u * THREADS + threadIdx.x);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) s += word_sum(r[u]);
  }
  block_add(s, out);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Stages of P positions (P a divisor or multiple of CHUNK_POS within a chunk
// list: here P <= CHUNK_POS, so a stage never crosses a chunk), NS of them.
template <int P, int NS>
__global__ void ring_chunks(const unsigned char* k, const unsigned char* v, bool interleaved, unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ unsigned long long full[NS];
  constexpr int half = P * D * 2, stage_bytes = 2 * half, per_chunk = CHUNK_POS / P;
  if (threadIdx.x == 0) {
    for (int i = 0; i < NS; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[i])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int stages = chunks_of(interleaved) * per_chunk;
  auto issue = [&](int j) {
    const int slot = j % NS;
    const size_t at = (size_t)chunk_of(interleaved, j / per_chunk) * CHUNK_BYTES + (size_t)(j % per_chunk) * half;
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(
                     smem_addr(&full[slot])),
                 "r"(stage_bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(ring + slot * stage_bytes)),
                 "l"(k + at), "r"(half), "r"(smem_addr(&full[slot]))
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(ring + slot * stage_bytes + half)),
                 "l"(v + at), "r"(half), "r"(smem_addr(&full[slot]))
                 : "memory");
  };
  if (threadIdx.x == 0)
    for (int j = 0; j < NS && j < stages; ++j) issue(j);
  unsigned long long s = 0;
  for (int j = 0; j < stages; ++j) {
    const int slot = j % NS;
    unsigned done = 0;
    while (!done)
      asm volatile(
          "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(smem_addr(&full[slot])), "r"((unsigned)(j / NS) & 1u)
          : "memory");
    const uint4* st = reinterpret_cast<const uint4*>(ring + slot * stage_bytes);
    for (int i = threadIdx.x; i < stage_bytes / 16; i += THREADS) s += word_sum(st[i]);
    __syncthreads();
    if (threadIdx.x == 0 && j + NS < stages) issue(j + NS);
  }
  block_add(s, out);
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b)); }
};

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned char *k, *v, *flush;
  const size_t flush_bytes = size_t(256) << 20;
  unsigned long long *sum, *sink;
  CK(cudaMalloc(&k, TENSOR_BYTES));
  CK(cudaMalloc(&v, TENSOR_BYTES));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&sum, 8));
  CK(cudaMalloc(&sink, 8));
  fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(k), TENSOR_BYTES / 2, 11, 1.0f);
  fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(v), TENSOR_BYTES / 2, 12, 1.0f);
  fill_half<<<1024, 256>>>(reinterpret_cast<__half*>(flush), flush_bytes / 2, 13, 1.0f);
  CK(cudaMemset(sum, 0, 8));
  reference_sum<<<1024, 256>>>(reinterpret_cast<const uint4*>(k), TENSOR_BYTES / 16, sum);
  reference_sum<<<1024, 256>>>(reinterpret_cast<const uint4*>(v), TENSOR_BYTES / 16, sum);
  unsigned long long want = 0;
  CK(cudaMemcpy(&want, sum, 8, cudaMemcpyDeviceToHost));
  std::printf("device SMs %d; K and V %zu MiB each; chunk %zu KiB of each; timed %d launches\n", sms, TENSOR_BYTES >> 20,
              CHUNK_BYTES >> 10, TIMED);

  Timer timer;
  auto measure = [&](const char* name, auto launch) {
    std::vector<float> times;
    bool ok = true;
    for (int i = 0; i < WARMUP + TIMED; ++i) {
      flush_read<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, sink);
      CK(cudaMemsetAsync(sum, 0, 8));
      CK(cudaEventRecord(timer.a));
      launch();
      CK(cudaEventRecord(timer.b));
      CK(cudaGetLastError());
      CK(cudaEventSynchronize(timer.b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, timer.a, timer.b));
      unsigned long long got = 0;
      CK(cudaMemcpy(&got, sum, 8, cudaMemcpyDeviceToHost));
      ok &= got == want;
      if (i >= WARMUP) times.push_back(ms * 1000.0f);
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf("%-28s %7.2f us (p10 %6.2f, p90 %6.2f)  %5.2f TB/s  %s\n", name, median, times[times.size() / 10],
                times[times.size() * 9 / 10], 2.0 * TENSOR_BYTES / (median * 1e-6) / 1e12,
                ok ? "sum ok" : "SUM WRONG");
  };
  auto empty = [] {};
  measure("nothing (event pair)", empty);
  const uint4* k4 = reinterpret_cast<const uint4*>(k);
  const uint4* v4 = reinterpret_cast<const uint4*>(v);
  for (int blocks_per_sm : {2, 4, 8}) {
    char name[64];
    std::snprintf(name, sizeof name, "grid %dx%d", sms, blocks_per_sm);
    measure(name, [&] { grid_read<<<sms * blocks_per_sm, THREADS>>>(k4, v4, sum); });
  }
  measure("plain/split 256", [&] { plain_chunks<<<256, THREADS>>>(k4, v4, false, sum); });
  measure("plain/inter 256", [&] { plain_chunks<<<256, THREADS>>>(k4, v4, true, sum); });
  measure("plain/inter 512", [&] { plain_chunks<<<512, THREADS>>>(k4, v4, true, sum); });
  measure("plain/inter 1024", [&] { plain_chunks<<<1024, THREADS>>>(k4, v4, true, sum); });

  auto ring = [&](const char* name, auto kernel, int stage_bytes, int stages, int blocks, bool interleaved) {
    const int bytes = stage_bytes * stages;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    char full_name[64];
    std::snprintf(full_name, sizeof full_name, "%s %d KiB x%d", name, bytes >> 10, blocks);
    measure(full_name, [&] { kernel<<<blocks, THREADS, bytes>>>(k, v, interleaved, sum); });
  };
  constexpr int S64 = 2 * 64 * D * 2, S32 = 2 * 32 * D * 2;
  ring("ring/split P64 NS3", ring_chunks<64, 3>, S64, 3, 256, false);
  ring("ring/split P32 NS6", ring_chunks<32, 6>, S32, 6, 256, false);
  ring("ring/inter P64 NS3", ring_chunks<64, 3>, S64, 3, 256, true);
  ring("ring/inter P32 NS6", ring_chunks<32, 6>, S32, 6, 256, true);
  ring("ring/persist P64 NS3", ring_chunks<64, 3>, S64, 3, 2 * sms, true);
  ring("ring/persist P32 NS6", ring_chunks<32, 6>, S32, 6, 2 * sms, true);
  ring("ring/persist P64 NS6", ring_chunks<64, 6>, S64, 6, sms, true);
  ring("ring/inter P64 NS2", ring_chunks<64, 2>, S64, 2, 512, true);
  ring("ring/persist P64 NS2", ring_chunks<64, 2>, S64, 2, 3 * sms, true);
  return 0;
}
