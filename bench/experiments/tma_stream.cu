// How the chain kernel's weights could stream (gdl_chain.cuh): W2's eight
// H=4096 f16 weight matrices (256 MiB) through a ring of 18 slots of 8 KiB
// per block (128 rows of 32 columns), 128 blocks, filled either
//   - by four producer warps of per-lane 16-byte cp.async copies, each tile
//     of a computing warp with its own "landed" and "read" mbarriers (the
//     chain's producer before it took tensor copies), or
//   - by one thread issuing one 2-D tensor copy (TMA, cp.async.bulk.tensor)
//     per slot, with one "landed" mbarrier (expect_tx) and one "read"
//     mbarrier per slot (the chain's producer today, docs/performance.md),
//   - or, from weights packed so that each block's strip of a step is
//     contiguous (256 KiB; slot after slot of 8 KiB), by the same cp.async
//     producer warps, or by one thread issuing one 1-D bulk copy
//     (cp.async.bulk, no tensor map) per slot,
//   - or, from the row-major weights, by one warp issuing one 64-byte bulk
//     copy per row of the slot into rows padded to 80 bytes (ldmatrix's
//     eight rows of a phase then fall in distinct banks without a swizzle).
// The single-thread producers may cap their slots in flight (issued, not
// landed), so that the L2 loads between the steps do not queue behind a
// whole ring of copies.
// Eight computing warps wait for each slot, read a word of it and release
// it (no math). Between the steps ("the exchange"), every computing thread
// loads `rows` 16-byte vectors from a 256 KiB buffer that the L2 holds (a
// step's rows of a: 2 per thread is B=1, 16 is B=8) and thread 0 of block 0
// records the cycles of that phase. The question: does the exchange's load
// latency rise with the copies in flight, and does it less with TMA, whose
// copies do not take the load path?
//   nvcc -O3 -std=c++17 -arch=sm_90 -o tma_stream bench/experiments/tma_stream.cu
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <vector>

#include "cuda_bench.cuh"

namespace {

constexpr int kBlocks = 128, kK = 4096, kSteps = 8, kCols = 32, kSlotRows = 128, kSlots = 18;
constexpr int kStepSlots = kK / kSlotRows, kSlotBytes = kSlotRows * kCols * 2;
constexpr int kComputeWarps = 8, kProducerWarps = 4, kTileRows = kSlotRows / kComputeWarps;
constexpr int kRowsBufVectors = 256 * 1024 / 16;

struct Maps {
  CUtensorMap step[kSteps];
};

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* b, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}" ::"r"(smem(b)),
      "r"(parity)
      : "memory");
}

// One run of the whole stream. kTma: the TMA producer thread, else the
// cp.async producer warps. rows: vectors each computing thread loads per
// exchange (0: none). cycles[s]: thread 0 of block 0's exchange of step s.
// The producers: strided strips by cp.async or by 2-D tensor copies, or
// packed strips by cp.async or by 1-D bulk copies.
enum Mode { kCpAsync, kTensor, kPackedCpAsync, kPackedBulk, kRowBulk };
constexpr int kPaddedRow = 80;  // kRowBulk: bytes per row in the ring
template <Mode kMode> __host__ __device__ constexpr int slot_stride() { return kMode == kRowBulk ? kSlotRows * kPaddedRow : kSlotBytes; }

template <Mode kMode>
__global__ void __launch_bounds__(kComputeWarps * 32 + kProducerWarps * 32, 1)
    stream(const __grid_constant__ Maps maps, const __half* w, const uint4* rows_buf, int rows,
           long long* cycles, unsigned* sink, int inflight) {
  constexpr bool kTma = kMode == kTensor || kMode == kPackedBulk || kMode == kRowBulk;
  constexpr int kStride = slot_stride<kMode>();
  extern __shared__ __align__(1024) unsigned char ring[];
  // Per slot: TMA 2 barriers; cp.async 2 per computing warp.
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(ring + kSlots * kStride);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n0 = blockIdx.x * kCols;
  const int per_slot = kTma ? 2 : 2 * kComputeWarps;
  for (int i = threadIdx.x; i < kSlots * per_slot; i += blockDim.x)
    bar_init(bars + i, kTma ? (i % 2 == 0 ? 1 : kComputeWarps) : 32);
  __syncthreads();
  const int total = kSteps * kStepSlots;
  auto landed = [&](int slot, int cw) { return bars + slot * per_slot + (kTma ? 0 : 2 * cw); };
  auto read = [&](int slot, int cw) { return landed(slot, cw) + 1; };
  if (warp >= kComputeWarps) {  // producers
    if (kTma) {
      if (kMode != kRowBulk && threadIdx.x != kComputeWarps * 32) return;
      if (warp != kComputeWarps) return;
      for (int g = 0; g < total; ++g) {
        const int slot = g % kSlots, round = g / kSlots;
        if (lane == 0) {
          if (inflight > 0 && g >= inflight) bar_wait(landed((g - inflight) % kSlots, 0), ((g - inflight) / kSlots) & 1);
          if (round > 0) bar_wait(read(slot, 0), (round - 1) & 1);
          bar_expect(landed(slot, 0), kSlotBytes);
        }
        if (kMode == kRowBulk) {
          __syncwarp();
          for (int row = lane; row < kSlotRows; row += 32) {
            const __half* src = w + (size_t)(g / kStepSlots) * kK * kK + (size_t)((g % kStepSlots) * kSlotRows + row) * kK + n0;
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(
                    smem(ring + slot * kStride + row * kPaddedRow)),
                "l"(src), "r"(smem(landed(slot, 0)))
                : "memory");
          }
          continue;
        }
        const int x = n0, y = (g % kStepSlots) * kSlotRows;
        if (kMode == kPackedBulk) {
          const __half* src = w + (size_t)(g / kStepSlots) * kK * kK + (size_t)blockIdx.x * kK * kCols +
                              (size_t)(g % kStepSlots) * kSlotRows * kCols;
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                  smem(ring + slot * kSlotBytes)),
              "l"(src), "r"(kSlotBytes), "r"(smem(landed(slot, 0)))
              : "memory");
          continue;
        }
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
                smem(ring + slot * kSlotBytes)),
            "l"(reinterpret_cast<unsigned long long>(&maps.step[g / kStepSlots])), "r"(x), "r"(y),
            "r"(smem(landed(slot, 0)))
            : "memory");
      }
    } else {
      for (int g = 0; g < total; ++g) {
        const int slot = g % kSlots, round = g / kSlots;
        const __half* b = w + (size_t)(g / kStepSlots) * kK * kK;
        for (int cw = warp - kComputeWarps; cw < kComputeWarps; cw += kProducerWarps) {
          if (round > 0) bar_wait(read(slot, cw), (round - 1) & 1);
          unsigned char* tile = ring + slot * kSlotBytes + cw * kTileRows * kCols * 2;
#pragma unroll
          for (int j = 0; j < 2; ++j) {  // 16 rows of 4 pieces: two per lane
            const int q = lane + 32 * j, row = q / 4, piece = q % 4;
            const int k = (g % kStepSlots) * kSlotRows + cw * kTileRows + row;
            const __half* src = kMode == kPackedCpAsync ? b + (size_t)blockIdx.x * kK * kCols + (size_t)k * kCols + piece * 8
                                                        : b + (size_t)k * kK + n0 + piece * 8;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem(tile + row * kCols * 2 + piece * 16)),
                         "l"(src)
                         : "memory");
          }
          asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem(landed(slot, cw))) : "memory");
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
    return;
  }
  unsigned acc = 0;
  for (int s = 0; s < kSteps; ++s) {
    // The exchange: independent loads of L2-resident vectors, then a sum.
    const long long t0 = clock64();
    uint4 v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (j < rows) v[j] = __ldcg(rows_buf + ((threadIdx.x + 256 * j + 4096 * s + 997 * blockIdx.x) % kRowsBufVectors));
#pragma unroll
    for (int j = 0; j < 16; ++j)
      if (j < rows) acc += v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    asm volatile("bar.sync 1, %0;" ::"n"(kComputeWarps * 32) : "memory");
    if (threadIdx.x == 0 && blockIdx.x == 0) cycles[s] = clock64() - t0;
    for (int i = 0; i < kStepSlots; ++i) {
      const int g = s * kStepSlots + i, slot = g % kSlots;
      bar_wait(landed(slot, warp), (g / kSlots) & 1);
      acc += *reinterpret_cast<const unsigned*>(ring + slot * kStride + (warp * kTileRows + lane / 2) * (kStride / kSlotRows));
      if (kTma) {
        __syncwarp();
        if (lane == 0) bar_arrive(read(slot, warp));
      } else {
        bar_arrive(read(slot, warp));
      }
    }
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

template <Mode kMode>
void run(const char* name, const Maps& maps, const __half* w, const uint4* rows_buf, int rows, long long* cycles,
         unsigned* sink, int inflight = 0) {
  const int smem_bytes = kSlots * slot_stride<kMode>() + kSlots * 2 * kComputeWarps * 8;
  CK(cudaFuncSetAttribute(stream<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const int threads = kComputeWarps * 32 + kProducerWarps * 32;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 23; ++r) {
    CK(cudaEventRecord(a));
    stream<kMode><<<kBlocks, threads, smem_bytes>>>(maps, w, rows_buf, rows, cycles, sink, inflight);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (r >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  long long host[kSteps];
  CK(cudaMemcpy(host, cycles, sizeof(host), cudaMemcpyDeviceToHost));
  long long lo = host[1], hi = host[1];
  for (int s = 1; s < kSteps; ++s) lo = std::min(lo, host[s]), hi = std::max(hi, host[s]);
  const double us = ms[ms.size() / 2] * 1e3, bytes = (double)kSteps * kK * kK * 2;
  printf("%-16s in flight %2d, exchange loads %2d per thread: %7.1f us per launch (median of %zu), %.2f TB/s; exchange of steps "
         "1-7 %lld-%lld cycles\n",
         name, inflight, rows, us, ms.size(), bytes / us * 1e-6, lo, hi);
}

}  // namespace

int main() {
  __half* w = nullptr;
  uint4* rows_buf = nullptr;
  long long* cycles = nullptr;
  unsigned* sink = nullptr;
  const size_t elems = (size_t)kSteps * kK * kK;
  CK(cudaMalloc(&w, elems * 2));
  CK(cudaMalloc(&rows_buf, kRowsBufVectors * 16));
  CK(cudaMalloc(&cycles, kSteps * sizeof(long long)));
  CK(cudaMalloc(&sink, 4));
  fill_half<<<1024, 256>>>(w, elems, 7u, 1.0f);
  fill_half<<<64, 256>>>(reinterpret_cast<__half*>(rows_buf), kRowsBufVectors * 8, 9u, 1.0f);
  CK(cudaDeviceSynchronize());

  // The tensor maps: each step's [K rows, K columns] row-major matrix, a box
  // of 32 columns x 128 rows, the 64-byte swizzle (the ring's tile_at<32>).
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                      cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !encode) {
    fprintf(stderr, "no cuTensorMapEncodeTiled\n");
    return 1;
  }
  Maps maps{};
  for (int s = 0; s < kSteps; ++s) {
    const cuuint64_t dims[2] = {(cuuint64_t)kK, (cuuint64_t)kK};
    const cuuint64_t strides[1] = {(cuuint64_t)kK * 2};
    const cuuint32_t box[2] = {(cuuint32_t)kCols, (cuuint32_t)kSlotRows};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult r = encode(&maps.step[s], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, w + (size_t)s * kK * kK, dims, strides,
                              box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
      return 1;
    }
  }
  printf("256 MiB of f16 weights, 8 steps of 32 slots of 8 KiB per block, 128 blocks, a ring of %d slots\n", kSlots);
  for (int rows : {0, 2, 16}) {
    run<kCpAsync>("cp.async", maps, w, rows_buf, rows, cycles, sink);
    run<kPackedCpAsync>("packed cp.async", maps, w, rows_buf, rows, cycles, sink);
    for (int inflight : {0, 4, 6}) {  // 0: no cap
      run<kTensor>("tma", maps, w, rows_buf, rows, cycles, sink, inflight);
      run<kPackedBulk>("packed bulk", maps, w, rows_buf, rows, cycles, sink, inflight);
      run<kRowBulk>("row bulk", maps, w, rows_buf, rows, cycles, sink, inflight);
    }
  }
  return 0;
}
