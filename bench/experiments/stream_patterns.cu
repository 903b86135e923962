// stream_patterns.cu - which access pattern lets a GEMV-like kernel stream a
// row-major f16 weight matrix W[4096][4096] (32 MiB) near DRAM bandwidth?
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o stream_patterns bench/experiments/stream_patterns.cu
// Run:   ./stream_patterns
//
// Every pattern computes y[m][n] = sum_k x[m][k] * W[k][n] (f32 accumulate)
// in ONE kernel: K is split across blocks and the last block to arrive at a
// column strip (atomic ticket) sums the partials in split order.
// The three patterns are instantiations of one kernel that differ only in the
// strip width SW (columns a block owns); SW fixes how the 256 threads lay out:
//   P1 strip128: SW=64   -> 8 threads per row,   32 row groups (rows g, g+32, ...)
//   P2 warp512:  SW=256  -> 32 threads per row,  8 row groups = warps
//   P3 block4k:  SW=2048 -> 256 threads per row, 1 row group (rows k, k+1, ...)
// P4 ring (gemv_ring, below) streams each thread's pieces of W through a
// ring of cp.async slots in shared memory, filled before the kernel waits
// for the previous launch (programmatic launch), as a layer could while the
// layer before it still runs.
// The ceiling lines are a plain read of the same 32 MiB per launch, back to
// back on one stream ("ceiling"; "ceil64MiB": 64 MiB per launch, the K and
// V of gdl's W3 attention), and with programmatic dependent launch
// ("pdl", "pdl-early"), which lets one launch's reads overlap the previous
// launch's tail the way gdl's graph edges do.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_bench.cuh"

constexpr int K = 4096, N = 4096;
constexpr int NMAT = 8;              // 8 x 32 MiB >> 50 MB L2: each launch reads cold W
constexpr int MMAX = 8;
constexpr int THREADS = 256, NWARPS = THREADS / 32;
constexpr int WARMUP = 16, TIMED = 64;
constexpr double PEAK_TBS = 4.8;
constexpr size_t MAT_ELEMS = (size_t)K * N;
constexpr size_t MAT_BYTES = MAT_ELEMS * sizeof(__half);
constexpr int MAX_SPLITS = 128;      // scratch sized for the largest S used (P3)

// ---------------------------------------------------------------- init kernels
__global__ void fill_float(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = hash_unit(i, seed);
}

// Reference: one thread per output, plain f32 loop (coalesced across n).
__global__ void gemv_ref(const __half* __restrict__ W, const float* __restrict__ x, float* __restrict__ y, int M) {
  int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N || m >= M) return;
  float s = 0.f;
  for (int k = 0; k < K; ++k) s = fmaf(x[m * K + k], __half2float(W[(size_t)k * N + n]), s);
  y[m * N + n] = s;
}

// ---------------------------------------------------------------- pattern kernel
// acc[m][0..7] += x[m][kk] * w[0..7] for one 16-byte chunk of 8 f16 weights.
template <int M>
__device__ __forceinline__ void fma8(float (&acc)[M][8], const uint4& w, const float* xs, int kk, int Kr) {
  const __half2* h = reinterpret_cast<const __half2*>(&w);
  float2 f[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __half22float2(h[i]);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float xv = xs[m * Kr + kk];  // same kk across a row group -> smem broadcast
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[m][2 * i] = fmaf(xv, f[i].x, acc[m][2 * i]);
      acc[m][2 * i + 1] = fmaf(xv, f[i].y, acc[m][2 * i + 1]);
    }
  }
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// A warp's M x 8 accumulators (its lane's 8 columns from `col`) into its
// M x SW sum in red, for store_warp_sums.
template <int M, int SW>
__device__ __forceinline__ void put_warp_sums(float* red, const float (&acc)[M][8], int warp, int col) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float4* r = reinterpret_cast<float4*>(red + (warp * M + m) * SW + col);
    r[0] = make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
    r[1] = make_float4(acc[m][4], acc[m][5], acc[m][6], acc[m][7]);
  }
}

// The block's M x SW partial (red: NWARPS such sums in shared memory, one
// per warp) added over the warps and stored at part (row stride N).
template <int M, int SW>
__device__ __forceinline__ void store_warp_sums(const float* red, float* part, int tid) {
  const float4* red4 = reinterpret_cast<const float4*>(red);
  for (int i = tid; i < M * SW / 4; i += THREADS) {
    float4 s = red4[i];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) s = add4(s, red4[w * M * SW / 4 + i]);
    const int m = i * 4 / SW, cc = i * 4 % SW;
    __stcg(reinterpret_cast<float4*>(part + m * N + cc), s);
  }
}

// The last block of a strip: its S partials (M x N apart in scratch) added
// in split order, so the result is deterministic, into y.
template <int M, int SW>
__device__ __forceinline__ void add_splits(const float* scratch, float* y, int col0, int S, int tid) {
  for (int i = tid; i < M * SW / 4; i += THREADS) {
    const int m = i * 4 / SW, cc = i * 4 % SW;
    const float* p = scratch + (size_t)m * N + col0 + cc;
    float4 s = __ldcg(reinterpret_cast<const float4*>(p));
#pragma unroll 4
    for (int sp = 1; sp < S; ++sp) s = add4(s, __ldcg(reinterpret_cast<const float4*>(p + (size_t)sp * M * N)));
    *reinterpret_cast<float4*>(y + m * N + col0 + cc) = s;
  }
}

// Block b owns strip (b % STRIPS) and K range (b / STRIPS) of S.
// Dynamic smem: xs[M][Kr] floats, then (if G > 1) red[NWARPS][M][SW] floats.
template <int SW, int U, int M>
__global__ void __launch_bounds__(THREADS, 2)
gemv_pattern(const __half* __restrict__ W, const float* __restrict__ x, float* __restrict__ y,
             float* __restrict__ scratch, unsigned* __restrict__ tickets, int S) {
  constexpr int TPR = SW / 8;         // threads covering one row of the strip (16 B each)
  constexpr int G = THREADS / TPR;    // row groups per block
  constexpr int STRIPS = N / SW;
  constexpr int ROWSTEP = G * N / 8;  // uint4s between one group's consecutive rows
  extern __shared__ float4 smem4[];   // float4 for 16-byte alignment
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ int s_last;

  const int tid = threadIdx.x;
  const int strip = blockIdx.x % STRIPS, split = blockIdx.x / STRIPS;
  const int Kr = K / S, k0 = split * Kr, col0 = strip * SW;
  const int g = tid / TPR, c = tid % TPR;

  // Stage this block's slice of x once; every row group reuses it.
  for (int i = tid; i < M * Kr; i += THREADS) {
    const int m = i / Kr;
    xs[i] = x[m * K + k0 + (i - m * Kr)];
  }
  __syncthreads();

  // Main stream: U 16-byte loads of the next step in flight while computing this one.
  const uint4* wp = reinterpret_cast<const uint4*>(W) + ((k0 + g) * N + col0) / 8 + c;
  const int iters = Kr / (G * U);
  float acc[M][8] = {};
  uint4 cur[U], nxt[U] = {};
#pragma unroll
  for (int u = 0; u < U; ++u) cur[u] = __ldg(wp + u * ROWSTEP);
  for (int it = 0; it < iters; ++it) {
    if (it + 1 < iters) {
#pragma unroll
      for (int u = 0; u < U; ++u) nxt[u] = __ldg(wp + ((it + 1) * U + u) * ROWSTEP);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) fma8<M>(acc, cur[u], xs, g + (it * U + u) * G, Kr);
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = nxt[u];
  }

  // Reduce the row groups; result: this split's partial strip in scratch[split][m][col].
  float* part = scratch + (size_t)split * M * N + col0;
  if constexpr (G > 1) {
    if constexpr (TPR < 32) {  // several row groups share a warp: fold them with shuffles
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int off = TPR; off < 32; off <<= 1) acc[m][j] += __shfl_xor_sync(0xffffffffu, acc[m][j], off);
    }
    float* red = xs + M * Kr;  // M*Kr*4 bytes is a multiple of 16
    const int warp = tid / 32, lane = tid % 32;
    if (lane < TPR) put_warp_sums<M, SW>(red, acc, warp, c * 8);
    __syncthreads();
    store_warp_sums<M, SW>(red, part, tid);
  } else {  // one row group (P3): each thread's accumulators already are the partial
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float4* p = reinterpret_cast<float4*>(part + m * N + c * 8);
      __stcg(p, make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
      __stcg(p + 1, make_float4(acc[m][4], acc[m][5], acc[m][6], acc[m][7]));
    }
  }

  // Split-K in one kernel: publish partial, take a ticket; the last arrival reduces.
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = (atomicAdd(&tickets[strip], 1u) == (unsigned)S - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();  // acquire side: see every other split's partial
  add_splits<M, SW>(scratch, y, col0, S, tid);
  if (tid == 0) tickets[strip] = 0;  // ready for the next launch
}

// ---------------------------------------------------------------- ring kernel
// P4 ring: a strip of 256 columns (a warp over 512 contiguous bytes of a
// row), warp w taking rows w, w + 8, ... of the block's K range. Each
// thread streams its 16-byte pieces through its own ring of NS slots in
// shared memory (cp.async), NS - 1 rows ahead of the one it multiplies, so
// the bytes in flight do not cost registers. The ring is filled BEFORE
// griddepcontrol.wait: with programmatic launch the next layer's blocks
// start streaming their weights while this layer still runs, and kEarly
// lets them launch as soon as every block of this one has started.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int P> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(P) : "memory"); }

template <int M, int NS, bool kEarly>
__global__ void __launch_bounds__(THREADS, 2)
gemv_ring(const __half* __restrict__ W, const float* __restrict__ x, float* __restrict__ y,
          float* __restrict__ scratch, unsigned* __restrict__ tickets, int S) {
  constexpr int SW = 256, STRIPS = N / SW;
  extern __shared__ float4 smem4[];
  uint4* ring = reinterpret_cast<uint4*>(smem4);                  // [NS][THREADS]
  float* xs = reinterpret_cast<float*>(smem4 + NS * THREADS);     // [M][Kr]
  __shared__ int s_last;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int strip = blockIdx.x % STRIPS, split = blockIdx.x / STRIPS;
  const int Kr = K / S, k0 = split * Kr, col0 = strip * SW;
  const int rows = Kr / NWARPS;
  const __half* wp = W + (size_t)(k0 + warp) * N + col0 + lane * 8;
  const auto issue = [&](int i) {
    if (i < rows) cp_async16(&ring[(i % NS) * THREADS + tid], wp + (size_t)i * NWARPS * N);
    cp_async_commit();
  };
  if (kEarly) asm volatile("griddepcontrol.launch_dependents;" :::);
#pragma unroll 1
  for (int i = 0; i < NS - 1; ++i) issue(i);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!kEarly) asm volatile("griddepcontrol.launch_dependents;" :::);
  for (int i = tid; i < M * Kr; i += THREADS) {
    const int m = i / Kr;
    xs[i] = x[m * K + k0 + (i - m * Kr)];
  }
  __syncthreads();
  float acc[M][8] = {};
  for (int i = 0; i < rows; ++i) {
    cp_async_wait<NS - 2>();
    issue(i + NS - 1);  // into the slot this thread read last
    fma8<M>(acc, ring[(i % NS) * THREADS + tid], xs, warp + i * NWARPS, Kr);
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring becomes the cross-warp sums
  float* red = reinterpret_cast<float*>(smem4);
  put_warp_sums<M, SW>(red, acc, warp, lane * 8);
  __syncthreads();
  store_warp_sums<M, SW>(red, scratch + (size_t)split * M * N + col0, tid);
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = (atomicAdd(&tickets[strip], 1u) == (unsigned)S - 1);
    if (s_last) { tickets[strip] = 0; __threadfence(); }
  }
  __syncthreads();
  if (!s_last) return;
  add_splits<M, SW>(scratch, y, col0, S, tid);
}

// ---------------------------------------------------------------- ceiling kernel
// Pure streaming read: grid-stride 16-byte loads, UNR in flight, folded by
// xor. Launched plainly ("ceiling"), griddepcontrol.wait is a no-op. With
// programmatic dependent launch (as gdl's graph edges are), the next launch
// may start on the SMs this one frees (kEarly: as soon as every block has
// started, the most overlap), and its blocks wait for this launch to finish
// only before their one write, the way a layer could stream its weights
// before its input is ready.
template <int UNR, bool kEarly>
__global__ void __launch_bounds__(THREADS) stream_read(const uint4* __restrict__ p, int n, unsigned* __restrict__ out) {
  if (kEarly) asm volatile("griddepcontrol.launch_dependents;" :::);
  const int stride = gridDim.x * blockDim.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned f = 0;
  for (; i + (UNR - 1) * stride < n; i += UNR * stride) {
    uint4 v[UNR];
#pragma unroll
    for (int u = 0; u < UNR; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNR; ++u) f ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldg(p + i);
    f ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  out[blockIdx.x * blockDim.x + threadIdx.x] = f;  // keeps the loads alive
}

// ---------------------------------------------------------------- host side
struct Bufs {
  __half* W;  // NMAT matrices back to back
  float *x, *y, *yref, *scratch;
  unsigned *tickets, *sink;
};

// Per-launch microseconds: WARMUP launches, then TIMED back to back, each on
// the next matrix (i % NMAT) so the one it reads is not L2 resident.
cudaStream_t g_stream;  // every launch and event (programmatic launches need a stream of their own)

template <class F>
float time_launches(F launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < WARMUP; ++i) launch(i);
  CK(cudaGetLastError());
  CK(cudaEventRecord(e0, g_stream));
  for (int i = 0; i < TIMED; ++i) launch(WARMUP + i);
  CK(cudaEventRecord(e1, g_stream));
  CK(cudaGetLastError());
  CK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms * 1000.f / TIMED;
}

void print_header() {
  printf("%-10s %2s %2s %4s %6s %8s %9s %9s %6s %6s %10s %5s\n", "pattern", "U", "M", "S", "blocks", "KB/block",
         "partialKB", "us/launch", "TB/s", "%peak", "maxrelerr", "check");
}

void print_bw(float us) {
  const double tbs = MAT_BYTES / (us * 1e-6) / 1e12;
  printf(" %9.2f %6.3f %5.1f%%", us, tbs, 100.0 * tbs / PEAK_TBS);
}

// One launch on matrix 0 (launch_on_w0) into a NaN-poisoned y, against
// gemv_ref: max |y - ref| / max |ref| over M rows (NaN anywhere: infinite).
template <class F>
double verify(int M, const Bufs& b, F launch_on_w0) {
  CK(cudaMemsetAsync(b.y, 0xFF, (size_t)M * N * sizeof(float), g_stream));  // NaN: unwritten outputs fail
  launch_on_w0();
  CK(cudaGetLastError());
  gemv_ref<<<dim3(N / 256, M), 256, 0, g_stream>>>(b.W, b.x, b.yref, M);
  CK(cudaGetLastError());
  std::vector<float> y((size_t)M * N), r((size_t)M * N);
  CK(cudaStreamSynchronize(g_stream));  // a non-blocking stream: the copies below do not wait for it
  CK(cudaMemcpy(y.data(), b.y, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), b.yref, r.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double maxref = 0.0, maxdiff = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    maxref = std::fmax(maxref, std::fabs((double)r[i]));
    const double d = std::fabs((double)y[i] - (double)r[i]);
    maxdiff = std::isnan(d) ? INFINITY : std::fmax(maxdiff, d);
  }
  return maxdiff / (maxref > 0 ? maxref : 1.0);
}

template <int SW, int U, int M>
void run_pattern(const char* name, int S, const Bufs& b) {
  constexpr int TPR = SW / 8, G = THREADS / TPR, STRIPS = N / SW;
  const int Kr = K / S;
  if (K % S || Kr % (G * U) || S > MAX_SPLITS) {
    printf("%-10s %2d %2d %4d  skipped: K/S=%d not a multiple of G*U=%d\n", name, U, M, S, Kr, G * U);
    return;
  }
  const int blocks = STRIPS * S;
  const size_t smem = (size_t)M * Kr * sizeof(float) + (G > 1 ? (size_t)NWARPS * M * SW * sizeof(float) : 0);
  auto kern = gemv_pattern<SW, U, M>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));

  const float us = time_launches([&](int i) {
    kern<<<blocks, THREADS, smem, g_stream>>>(b.W + (size_t)(i % NMAT) * MAT_ELEMS, b.x, b.y, b.scratch, b.tickets, S);
  });

  // Verify on matrix 0 after the timed launches (also checks the ticket reset).
  const double rel =
      verify(M, b, [&] { kern<<<blocks, THREADS, smem, g_stream>>>(b.W, b.x, b.y, b.scratch, b.tickets, S); });

  printf("%-10s %2d %2d %4d %6d %8zu %9zu", name, U, M, S, blocks, (size_t)Kr * SW * sizeof(__half) / 1024,
         (size_t)S * M * N * sizeof(float) / 1024);
  print_bw(us);
  printf(" %10.2e %5s\n", rel, rel <= 1e-3 ? "ok" : "FAIL");
}

// U in {4, 8} x M in {1, 8} for one pattern and split count.
template <int SW>
void run_all(const char* name, int S, const Bufs& b) {
  run_pattern<SW, 4, 1>(name, S, b);
  run_pattern<SW, 4, 8>(name, S, b);
  run_pattern<SW, 8, 1>(name, S, b);
  run_pattern<SW, 8, 8>(name, S, b);
}

// P4 ring, launched with programmatic dependent launch like gdl's graph edges
// (pdl = false: plain launches).
template <int M, int NS, bool kEarly>
void run_ring(int S, bool pdl, const Bufs& b) {
  constexpr int STRIPS = N / 256;
  const int Kr = K / S, blocks = STRIPS * S;
  const size_t ring_bytes = (size_t)NS * THREADS * 16, red_bytes = (size_t)NWARPS * M * 256 * 4;
  const size_t smem = (ring_bytes > red_bytes ? ring_bytes : red_bytes) + (size_t)M * Kr * 4;
  auto kern = gemv_ring<M, NS, kEarly>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = g_stream;
  cfg.attrs = pdl ? &attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const float us = time_launches([&](int i) {
    CK(cudaLaunchKernelEx(&cfg, kern, (const __half*)(b.W + (size_t)(i % NMAT) * MAT_ELEMS), (const float*)b.x, b.y,
                          b.scratch, b.tickets, S));
  });
  const double rel = verify(M, b, [&] {
    CK(cudaLaunchKernelEx(&cfg, kern, (const __half*)b.W, (const float*)b.x, b.y, b.scratch, b.tickets, S));
  });
  char name[32];
  snprintf(name, sizeof name, "ring%d%s", NS, pdl ? (kEarly ? "-early" : "-pdl") : "");
  printf("%-10s %2s %2d %4d %6d %8zu %9zu", name, "-", M, S, blocks, (size_t)Kr * 512 / 1024,
         (size_t)S * M * N * sizeof(float) / 1024);
  print_bw(us);
  printf(" %10.2e %5s\n", rel, rel <= 1e-3 ? "ok" : "FAIL");
}

// MATS matrices read per launch (2: 64 MiB, the K and V that W3 reads).
template <int UNR, int MATS = 1>
void run_ceiling(int blocks_per_sm, int sms, const Bufs& b) {
  const int blocks = blocks_per_sm * sms, n = (int)(MATS * MAT_BYTES / sizeof(uint4));
  const float us = time_launches([&](int i) {
    stream_read<UNR, false><<<blocks, THREADS, 0, g_stream>>>(
        reinterpret_cast<const uint4*>(b.W + (size_t)(i % (NMAT / MATS)) * MATS * MAT_ELEMS), n, b.sink);
  });
  printf("%-10s %2d %2s %4s %6d %8s %9s", MATS == 1 ? "ceiling" : "ceil64MiB", UNR, "-", "-", blocks, "-", "-");
  print_bw(us / MATS);
  printf(" %10s %5s  (%.2f us per launch)\n", "-", "-", us);
}

template <int UNR, bool kEarly>
void run_ceiling_overlapped(int blocks_per_sm, int sms, const Bufs& b) {
  const int blocks = blocks_per_sm * sms, n = (int)(MAT_BYTES / sizeof(uint4));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(THREADS);
  cfg.stream = g_stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const float us = time_launches([&](int i) {
    const uint4* w = reinterpret_cast<const uint4*>(b.W + (size_t)(i % NMAT) * MAT_ELEMS);
    CK(cudaLaunchKernelEx(&cfg, stream_read<UNR, kEarly>, w, n, b.sink));
  });
  printf("%-10s %2d %2s %4s %6d %8s %9s", kEarly ? "pdl-early" : "pdl", UNR, "-", "-", blocks, "-", "-");
  print_bw(us);
  printf(" %10s %5s\n", "-", "-");
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  printf("device: %s, %d SMs, L2 %.0f MB; W = %d x %d f16 = %zu MiB, %d matrices cycled; "
         "%d warm-up + %d timed launches\n",
         prop.name, sms, prop.l2CacheSize / 1e6, K, N, MAT_BYTES >> 20, NMAT, WARMUP, TIMED);
  printf("TB/s = 32 MiB of W / time per launch; %%peak of %.1f TB/s; partialKB = split-K scratch written per launch\n\n",
         PEAK_TBS);

  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  Bufs b;
  CK(cudaMalloc(&b.W, NMAT * MAT_BYTES));
  CK(cudaMalloc(&b.x, (size_t)MMAX * K * sizeof(float)));
  CK(cudaMalloc(&b.y, (size_t)MMAX * N * sizeof(float)));
  CK(cudaMalloc(&b.yref, (size_t)MMAX * N * sizeof(float)));
  CK(cudaMalloc(&b.scratch, (size_t)MAX_SPLITS * MMAX * N * sizeof(float)));
  CK(cudaMalloc(&b.tickets, 64 * sizeof(unsigned)));  // one per strip; at most N/64 strips
  CK(cudaMalloc(&b.sink, (size_t)8 * sms * THREADS * sizeof(unsigned)));
  CK(cudaMemset(b.tickets, 0, 64 * sizeof(unsigned)));
  fill_half<<<sms * 8, THREADS>>>(b.W, NMAT * MAT_ELEMS, 0x1234u, 1.0f / 64);
  CK(cudaGetLastError());
  fill_float<<<sms, THREADS>>>(b.x, (size_t)MMAX * K, 0xBEEFu);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  print_header();
  run_all<64>("strip128", 4, b);    // P1: 64 strips x 4 splits = 256 blocks
  run_all<64>("strip128", 8, b);    //     2x blocks
  run_all<256>("warp512", 16, b);   // P2: 16 strips x 16 splits = 256 blocks
  run_all<256>("warp512", 32, b);   //     2x blocks
  run_all<2048>("block4k", 128, b); // P3: 2 strips x 128 splits = 256 blocks
  // P4 ring: 16 strips x 8 splits = 128 blocks (one per SM, room for the
  // next launch beside it) or x 16 = 256; 1 and 8 rows.
  run_ring<1, 24, false>(8, false, b);
  run_ring<1, 24, false>(8, true, b);
  run_ring<1, 24, true>(8, true, b);
  run_ring<8, 24, false>(8, true, b);
  run_ring<1, 12, true>(16, true, b);
  run_ring<8, 12, true>(16, true, b);
  run_ceiling<4>(2, sms, b);
  run_ceiling<4>(4, sms, b);
  run_ceiling<8>(4, sms, b);
  run_ceiling<8>(8, sms, b);
  run_ceiling<4, 2>(4, sms, b);
  run_ceiling<8, 2>(4, sms, b);
  run_ceiling<8, 2>(8, sms, b);
  // With launch overlap: does the per-launch ceiling rise toward the copy rate?
  run_ceiling_overlapped<4, false>(4, sms, b);
  run_ceiling_overlapped<4, true>(4, sms, b);
  run_ceiling_overlapped<8, true>(4, sms, b);

  CK(cudaFree(b.W));
  CK(cudaFree(b.x));
  CK(cudaFree(b.y));
  CK(cudaFree(b.yref));
  CK(cudaFree(b.scratch));
  CK(cudaFree(b.tickets));
  CK(cudaFree(b.sink));
  CK(cudaStreamDestroy(g_stream));
  return 0;
}
