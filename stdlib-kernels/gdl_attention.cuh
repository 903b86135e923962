// Attention over a KV cache with run-time valid lengths (decode, prefill).
//
// q [rows, D] -> out [rows, DV], where rows is every leading dim of q
// (sequences, query positions, heads). Row r reads its k and v rows through
// a KV layout (`kv`, below): a contiguous cache (KvRows: query head h of a
// sequence reads k/v head h / group, `group` query heads sharing one;
// grouped-query attention) or a paged one (KvPages: fixed-size blocks of
// positions found through a block table; KvPagesBySequence: the same for
// a ragged batch of tokens, each naming its table row). Per row r, with L = clamp(len(r),
// 0, T) read from the device at run time (one for every row or one per
// sequence; causal rows see only the positions up to their own, CausalLen;
// a padded T comes with a len source that is already clamped, ClampedLen):
//   out[r] = sum_t softmax_t(scale * q[r] . k_t) * v_t,  t < L, t stored
// and a zero row when no position counts. Positions t >= L are never read,
// nor are paged positions whose block id is outside the pool.
//
// Two kernels compute it: attention_split (this comment, any head dims) and
// attention_stream (further down: static head dims of whole 16-byte vectors,
// k and v moved by bulk copies); kernel_choice.cc picks one per step.
//
// attention_split: the positions of a row are split across `splits` blocks
// so that small row counts still fill the GPU: task (row, split) takes
// positions [split * c, min(L, (split + 1) * c)), c = ceil(L / splits). A
// block:
//  1. stages q * scale * log2(e) in shared memory (scores in base 2, so
//     exp2f does the exponentials);
//  2. per chunk of up to CHUNK positions: scores, each warp taking RPW
//     positions per load step (LPR lanes per row of k, 16-byte loads, U
//     steps in flight), a shuffle reduction over the row's lanes;
//  3. the chunk's maximum updates the running maximum m; the running sum l
//     and the accumulators are rescaled by exp2(m_old - m); p_t = exp2(s_t - m);
//  4. threads split into SLICES slices of TPR_V threads: a thread owns
//     16-byte column vectors of the output and sums p_t * v[t] over the
//     positions t = slice, slice + SLICES, ... (coalesced rows of v);
//  5. the slices are added in shared memory. With one split the block
//     writes acc / l; otherwise it stores (m, l, acc) as its part and the
//     last block of the row to arrive (gdl_split_tiles.cuh) combines the
//     parts: M = max m_i,
//     out = sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i.
// An empty part (m = -inf, l = 0) weighs nothing. Requires blockDim.x ==
// kAttentionThreads, D <= D_MAX, DV <= DV_MAX, splits <= kAttentionMaxSplits.
#pragma once

#include "gdl_reduce.cuh"
#include "gdl_split.cuh"

namespace gdl {

constexpr int kAttentionThreads = 256;
constexpr int kAttentionMaxSplits = 64;

// Where attention row `row` finds position t: the index of that position's
// row in k ([.., D]) and in v ([.., DV]), or -1 when it is not stored.
// Rows are ordered (sequence, query, head); `queries` is 1 without a query axis.
struct KvRows {  // k [sequences, kv_heads, positions, D]
  long long heads, queries, kv_heads, group, positions;
  static constexpr bool kPaged = false;
  template <int P> static constexpr bool stages_contiguous() { return true; }
  template <typename I> GDL_DEV I at(I row, I t) const {
    const I sequence = row / (I)(heads * queries), kv_head = row % (I)heads / (I)group;
    return (sequence * (I)kv_heads + kv_head) * (I)positions + t;
  }
};
// A paged cache (vLLM's layout): k [pool_blocks, kv_heads, BLOCK, D]; position
// t of a sequence is row t % BLOCK of pool block table[sequence][t / BLOCK]:
// that row for k/v head kv_head of a sequence whose block ids are `blocks`
// (-1: a block outside the pool).
template <int BLOCK, typename I>
GDL_DEV I paged_row(const int* blocks, long long pool_blocks, long long kv_heads, I kv_head, I t) {
  const int id = blocks[t / BLOCK];
  if (id < 0 || (long long)id >= pool_blocks) return (I)-1;
  return ((I)id * (I)kv_heads + kv_head) * (I)BLOCK + t % BLOCK;
}
template <int BLOCK> struct KvPages {
  const int* table;  // [sequences, max_blocks]
  long long heads, queries, kv_heads, group, max_blocks, pool_blocks;
  static constexpr bool kPaged = true;
  // A stage of P positions lies in one block.
  template <int P> static constexpr bool stages_contiguous() { return BLOCK % P == 0; }
  template <typename I> GDL_DEV I at(I row, I t) const {
    const I sequence = row / (I)(heads * queries), kv_head = row % (I)heads / (I)group;
    return paged_row<BLOCK>(table + sequence * (I)max_blocks, pool_blocks, kv_heads, kv_head, t);
  }
};
// A paged cache read by a ragged batch of tokens (paged_attention's
// `sequence` form): q's rows are (token, head), and token x reads the block
// table's row sequence[x]. A sequence id outside [0, sequences) stores no
// position (the valid count of a padded sequence axis: its padding rows
// hold stale ids).
template <int BLOCK> struct KvPagesBySequence {
  const int* table;     // [sequences, max_blocks]
  const int* sequence;  // [tokens]
  long long heads, kv_heads, group, max_blocks, pool_blocks, sequences;
  static constexpr bool kPaged = true;
  template <int P> static constexpr bool stages_contiguous() { return BLOCK % P == 0; }
  template <typename I> GDL_DEV I at(I row, I t) const {
    const int s = sequence[(long long)row / heads];
    if (s < 0 || (long long)s >= sequences) return (I)-1;
    const I kv_head = row % (I)heads / (I)group;
    return paged_row<BLOCK>(table + (I)s * (I)max_blocks, pool_blocks, kv_heads, kv_head, t);
  }
};

// Which tokens of a ragged batch attention_prefill serves together
// (paged_attention_shared), the others being left to the decode kernels:
// the blocks of `block` consecutive tokens (its query blocks) that are
// whole valid tokens of one sequence, in a step of at least `min_tokens`
// valid tokens (fewer, and its tasks would not fill the GPU: the decode
// kernels split a row's positions over blocks, it does not).
struct SharedTokenBlocks {
  const int* sequence;  // [tokens]
  long long tokens;     // the valid ones
  int block, min_tokens;
  template <typename I> GDL_DEV bool shared(I first) const {  // first: a multiple of block
    if (tokens < min_tokens || (long long)first + block > tokens) return false;
    const int s = sequence[first];
    bool one = true;  // no early exit: the loads go out together
    for (int i = 1; i < block; ++i) one &= sequence[first + i] == s;
    return one;
  }
};
// A token's length in a ragged batch: none where its sequence id is outside
// [0, sequences), nor (for the decode kernels, with shared.block > 0) where
// attention_prefill serves its block.
template <typename L> struct SequenceLen {
  L len;
  const int* sequence;  // [tokens]
  long long heads, sequences;
  SharedTokenBlocks shared;  // block 0: none is served elsewhere
  template <typename I> GDL_DEV int get(I row) const {
    const long long token = (long long)row / heads;
    const int s = sequence[token];
    if (s < 0 || (long long)s >= sequences) return 0;
    if (shared.block > 0 && shared.shared(token / shared.block * shared.block)) return 0;
    return len.get(row);
  }
};

namespace att {
constexpr float kLog2e = 1.4426950408889634f;  // scores in base 2: exp2f does the exponentials
__host__ __device__ constexpr int pow2_at_least(int n) { return n <= 1 ? 1 : 2 * pow2_at_least((n + 1) / 2); }
__host__ __device__ constexpr int min_of(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_of(int a, int b) { return a < b ? b : a; }

// The block's result for (row, split) of HEADS consecutive rows (the query
// heads of one k/v head, which share a length, so their splits): for row
// row + h, value(h, d) = sum_t p_t * v[t][d] over the block's positions,
// stats(h) = {m, l}: its maximum score m and l = sum_t p_t. With one part
// the block writes each row value(h, d) / l; otherwise it stores (m, l,
// value) as its part and the last of the `parts` blocks to arrive combines
// the parts (splits 0 .. parts - 1; the scratch holds S a row):
// M = max m_i, out = sum_i exp2(m_i - M) acc_i / sum_i exp2(m_i - M) l_i.
// The rows take one ticket (the first row's) and one combine, not one per
// row: each ticket is a fence and an atomic round trip that the block waits
// for, and the last block's combine one more trip to L2.
// An empty part (m = -inf, l = 0) weighs nothing, and a row with no stored
// position is zero. Called by every thread. Every one of the rows' parts
// reaches the ticket, so rows of parts > 1 always have a last block.
template <int HEADS, typename I, typename TO, typename Value, typename Stats>
GDL_DEV void write_parts(TO* o, const Value& value, const Stats& stats, I row, I split, I rows, int S, I DV,
                         SplitScratch sk, int parts) {
  const int tid = threadIdx.x, BLOCK = blockDim.x;
  float* part_ml = S > 1 ? sk.partials : nullptr;                 // [rows][splits][2]: m, l
  float* part_acc = S > 1 ? sk.partials + rows * S * 2 : nullptr;  // [rows][splits][DV]
  const I n = (I)HEADS * DV;
  for (I e = tid; e < n; e += BLOCK) {
    const int h = HEADS == 1 ? 0 : (int)(e / DV);  // one row: no division (the split and streamed kernels)
    const I d = HEADS == 1 ? e : e - (I)h * DV;
    const float sum = value(h, d);
    if (parts == 1) {
      const float l = stats(h).y;
      o[e] = cvt<TO>(l > 0.0f ? sum / l : 0.0f);
    } else {
      __stcg(part_acc + ((row + (I)h) * S + split) * DV + d, sum);
    }
  }
  if (parts == 1) return;
  if (tid < HEADS) {
    const float2 ml = stats(tid);
    __stcg(part_ml + ((row + (I)tid) * S + split) * 2, ml.x);
    __stcg(part_ml + ((row + (I)tid) * S + split) * 2 + 1, ml.y);
  }
  if (!split_arrive(sk.tickets + row, parts)) return;
  // The parts in rounds of kRound, each round's loads issued together (one
  // trip to L2 per round, not one per part and quantity: the combine is
  // the kernel's tail), merged as the online softmax merges positions.
  constexpr int kRound = 8;
  for (I e = tid; e < n; e += BLOCK) {
    const I r = HEADS == 1 ? row : row + e / DV, d = HEADS == 1 ? e : e % DV;
    float peak = -inf_f32(), weight_sum = 0.0f, sum = 0.0f;
    for (int first = 0; first < parts; first += kRound) {
      float m[kRound], l[kRound], acc[kRound];
#pragma unroll
      for (int j = 0; j < kRound; ++j) {
        const I i = r * S + first + j;
        const bool in = first + j < parts;
        m[j] = in ? __ldcg(part_ml + i * 2) : -inf_f32();
        l[j] = in ? __ldcg(part_ml + i * 2 + 1) : 0.0f;
        acc[j] = in ? __ldcg(part_acc + i * DV + d) : 0.0f;
      }
      float round_peak = peak;
#pragma unroll
      for (int j = 0; j < kRound; ++j) round_peak = fmaxf(round_peak, m[j]);
      if (round_peak == -inf_f32()) continue;
      const float rescale = exp2f(peak - round_peak);  // 0 while peak is -inf, when the sums are still 0
      weight_sum *= rescale;
      sum *= rescale;
#pragma unroll
      for (int j = 0; j < kRound; ++j) {
        if (m[j] == -inf_f32()) continue;
        const float w = exp2f(m[j] - round_peak);
        weight_sum += l[j] * w;
        sum += acc[j] * w;
      }
      peak = round_peak;
    }
    o[e] = cvt<TO>(weight_sum > 0.0f ? sum / weight_sum : 0.0f);
  }
}

// write_parts for one row: value(d), its m and l.
template <typename I, typename TO, typename Value>
GDL_DEV void write_part(TO* o, const Value& value, float m, float l, I row, I split, I rows, int S, I DV,
                        SplitScratch sk, int parts) {
  write_parts<1>(o, [&](int, I d) { return value(d); }, [&](int) { return make_float2(m, l); }, row, split, rows, S,
                 DV, sk, parts);
}
}  // namespace att

template <int D_MAX, int DV_MAX, int CHUNK, typename I, typename T, typename TO, typename Len, typename Kv>
GDL_DEV void attention_split(const T* q, const T* k, const T* v, TO* out, Len len_source, Kv kv, I rows, I positions,
                             I D, I DV, float scale, SplitScratch sk) {
  constexpr int BLOCK = kAttentionThreads, WARPS = BLOCK / 32;
  constexpr int V = Vec16<T>::n;
  // Scores: a row of k is QV vectors, LPR lanes per row, NQ vectors per lane, RPW rows per warp step.
  constexpr int QV = (D_MAX + V - 1) / V;
  constexpr int LPR = att::min_of(32, att::pow2_at_least(QV));
  constexpr int NQ = (QV + LPR - 1) / LPR;
  constexpr int RPW = 32 / LPR;
  constexpr int U = att::max_of(1, 8 / NQ);
  // Weighted sum: a row of v is VV vectors, TPR_V threads per row, NV vectors per thread.
  constexpr int VV = (DV_MAX + V - 1) / V;
  constexpr int TPR_V = att::min_of(BLOCK, att::pow2_at_least(VV));
  constexpr int NV = (VV + TPR_V - 1) / TPR_V;
  constexpr int SLICES = BLOCK / TPR_V;
  constexpr int UV = att::max_of(1, 8 / NV);
  constexpr int ROW_W = TPR_V * NV * V;  // floats of one slice's accumulators
  using att::kLog2e;
  __shared__ __align__(16) float q_s[QV * V];
  __shared__ float p_s[CHUNK];
  __shared__ __align__(16) float slice_s[SLICES * ROW_W];

  if (blockDim.x != BLOCK) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int sub = lane % LPR, rw = lane / LPR;
  const int cv = tid % TPR_V, slice = tid / TPR_V;
  const int S = sk.splits;
  const bool vec = D % V == 0 && DV % V == 0 && aligned16(k) && aligned16(v);
  const I tasks = rows * S;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I row = task / S, split = task % S;
    const int len = len_source.get(row);
    const I valid = len <= 0 ? (I)0 : ((I)len < positions ? (I)len : positions);
    TO* o = out + row * DV;
    if (valid <= 0) {
      if (split == 0)
        for (I d = tid; d < DV; d += BLOCK) o[d] = cvt<TO>(0.0f);
      continue;
    }
    const I chunk = ceil_div(valid, (I)S);
    const I p_lo = split * chunk;
    const I p_hi = valid < p_lo + chunk ? valid : p_lo + chunk;
    for (int d = tid; d < QV * V; d += BLOCK) q_s[d] = (I)d < D ? num(q[row * D + d]) * scale * kLog2e : 0.0f;
    __syncthreads();

    float m = -inf_f32(), l = 0.0f;
    float acc[NV][V];
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[i][j] = 0.0f;

    for (I c0 = p_lo; c0 < p_hi; c0 += CHUNK) {
      const int n = (int)(p_hi - c0 < (I)CHUNK ? p_hi - c0 : (I)CHUNK);
      // 2. scores (base 2)
      for (int t0 = warp * RPW; t0 < n; t0 += U * WARPS * RPW) {
        uint4 kr[U][NQ];
        I at[U];  // the positions' rows in k; -1: not stored (scores -inf)
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int t = t0 + u * WARPS * RPW + rw;
          at[u] = t < n ? kv.at(row, c0 + t) : (I)-1;
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const int vi = sub + i * LPR;
            kr[u][i] = at[u] >= 0 && vi < QV ? load16(k + at[u] * D + vi * V, vec_valid<V>((I)(vi * V), D), vec)
                                             : zero16();
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const int vi = sub + i * LPR;
            if (vi < QV) {
              float f[V];
              widen<T>(kr[u][i], f);
#pragma unroll
              for (int j = 0; j < V; ++j) dot = fmaf(q_s[vi * V + j], f[j], dot);
            }
          }
#pragma unroll
          for (int offset = LPR / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
          const int t = t0 + u * WARPS * RPW + rw;
          if (sub == 0 && t < n) p_s[t] = at[u] >= 0 ? dot : -inf_f32();
        }
      }
      __syncthreads();
      // 3. running maximum and probabilities
      float peak = -inf_f32();
      for (int t = tid; t < n; t += BLOCK) peak = fmaxf(peak, p_s[t]);
      peak = block_reduce<FloatPeak>(peak);
      const float m_new = fmaxf(m, peak);
      const float rescale = m == m_new ? 1.0f : exp2f(m - m_new);
      float total = 0.0f;
      for (int t = tid; t < n; t += BLOCK) {
        const float e = p_s[t] == -inf_f32() ? 0.0f : exp2f(p_s[t] - m_new);  // m_new is -inf when all are
        p_s[t] = e;
        total += e;
      }
      total = block_reduce<FloatSum>(total);  // its barriers also publish p_s
      l = l * rescale + total;
      m = m_new;
      // 4. weighted sum of v
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[i][j] *= rescale;
      for (int t0 = slice; t0 < n; t0 += UV * SLICES) {
        uint4 vv[UV][NV];
        float pt[UV];
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          const int t = t0 + u * SLICES;
          pt[u] = t < n ? p_s[t] : 0.0f;
          const I at = pt[u] > 0.0f ? kv.at(row, c0 + t) : (I)-1;  // a skipped position weighs 0
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            const int vi = cv + i * TPR_V;
            vv[u][i] = at >= 0 && vi < VV ? load16(v + at * DV + vi * V, vec_valid<V>((I)(vi * V), DV), vec)
                                          : zero16();
          }
        }
#pragma unroll
        for (int u = 0; u < UV; ++u)
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            float f[V];
            widen<T>(vv[u][i], f);
#pragma unroll
            for (int j = 0; j < V; ++j) acc[i][j] = fmaf(pt[u], f[j], acc[i][j]);
          }
      }
      __syncthreads();  // p_s is rewritten by the next chunk
    }

    // 5. add the slices; write the row or this split's part
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) slice_s[slice * ROW_W + (cv + i * TPR_V) * V + j] = acc[i][j];
    __syncthreads();
    auto value = [&](I d) {
      float sum = 0.0f;
#pragma unroll
      for (int sl = 0; sl < SLICES; ++sl) sum += slice_s[sl * ROW_W + (int)d];
      return sum;
    };
    att::write_part(o, value, m, l, row, split, rows, S, DV, sk, S);
    __syncthreads();  // q_s and slice_s are rewritten by the next task
  }
}

// ------------------------------------------------------------ streamed
// attention_stream: the same result for static head dims D and DV whose
// rows are whole 16-byte vectors (at most 32 of them), with q, k and v
// 16-byte aligned. Made for decode, where the kernel only has to read the K
// and V bytes at the copy rate: a block's positions are contiguous rows of
// k and of v, so one thread moves a stage of positions of each with two
// bulk copies into a ring of kStages stages in shared memory, and the ring
// stays full while the block computes (bytes in flight without registers;
// the split kernel above waits for its loads once per chunk and reached
// about half the DRAM rate on the H200). A stage is computed by one of two
// math paths (below), each in groups of lanes that keep their own running
// maximum m, sum l and accumulators, so no block barrier separates the
// scores from the weighted sum of v; then a __syncthreads, and the issuing
// thread refills the stage. At the end the groups' (m, l, acc) are
// combined through shared memory (the ring, idle by then) and written by
// att::write_part, as above.
// 16 bytes of shared memory as one load (a uint4 dereference may be split into four).
GDL_DEV uint4 load_shared16(const void* p) {
  uint4 r;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(bulk::shared_address(p))
               : "memory");  // after the barrier wait that makes the bytes visible
  return r;
}

namespace att {

template <bool C, typename A, typename B> struct Pick { using type = A; };
template <typename A, typename B> struct Pick<false, A, B> { using type = B; };

// f16 and bf16 heads of 64, 128, 192 or 256 take the tensor-core scores.
template <typename T, int D, int DV> struct StreamUsesMma {
  static constexpr bool value = sizeof(T) == 2 && D % 64 == 0 && DV % 64 == 0;
};

// One online-softmax update of a group with the scores (base 2) of its
// positions in a stage; `v_row(i, f)` widens position i's part of v into f.
// Positions with a score of -inf (past the valid ones) weigh nothing and
// are not read.
template <int N, int E, typename VRow>
GDL_DEV void softmax_update(const float (&score)[N], float& m, float& l, float (&acc)[E], const VRow& v_row) {
  float peak = score[0];
#pragma unroll
  for (int i = 1; i < N; ++i) peak = fmaxf(peak, score[i]);
  if (peak == -inf_f32()) return;  // the same in every lane of the group
  const float m_new = fmaxf(m, peak);
  const float rescale = exp2f(m - m_new);  // 0 while m is -inf, when acc and l are still 0
  l *= rescale;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] *= rescale;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (score[i] == -inf_f32()) continue;
    const float p = exp2f(score[i] - m_new);
    l += p;
    float f[E];
    if (v_row(i, f))
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(p, f[e], acc[e]);
  }
  m = m_new;
}

// CUDA-core path: a group of LPR lanes takes positions g, g + GROUPS, ... of
// a stage; its lanes hold one 16-byte vector of q (times scale * log2 e) in
// registers and read the position's row of k from shared memory, a shuffle
// reduction gives the score in every lane of the group, and each lane
// accumulates one 16-byte vector of the output.
template <int D, int DV, typename T, int P> struct StreamLanes {
  static constexpr int V = Vec16<T>::n;
  static constexpr int QV = D / V, VV = DV / V;  // 16-byte vectors per row of k and of v
  static constexpr int LPR = pow2_at_least(max_of(QV, VV));
  static constexpr int kGroups = kAttentionThreads / LPR;
  static constexpr int G = P / kGroups;  // positions of one group per stage
  static_assert(P % kGroups == 0, "every group takes as many positions of a stage");
  static_assert(QV <= 32 && VV <= 32, "rows of at most 32 vectors");

  int sub = (int)threadIdx.x % LPR, group = (int)threadIdx.x / LPR;
  float qf[V];
  float m, l, acc[V];

  GDL_DEV void start(const T* q_row, float q_scale) {
    const uint4 raw = sub < QV ? __ldg(reinterpret_cast<const uint4*>(q_row) + sub) : zero16();
    widen<T>(raw, qf);
#pragma unroll
    for (int e = 0; e < V; ++e) qf[e] *= q_scale;
    m = -inf_f32(), l = 0.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
  }

  GDL_DEV void stage(const unsigned char* ks, const unsigned char* vs, int n) {
    float score[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int t = group + g * kGroups;
      float dot = 0.0f;
      if (t < n && sub < QV) {
        float f[V], half_dot[2] = {0.0f, 0.0f};  // two chains of FMAs in flight
        widen<T>(load_shared16(ks + (t * D + sub * V) * (int)sizeof(T)), f);
#pragma unroll
        for (int e = 0; e < V; ++e) half_dot[e & 1] = fmaf(qf[e], f[e], half_dot[e & 1]);
        dot = half_dot[0] + half_dot[1];
      }
#pragma unroll
      for (int offset = LPR / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      score[g] = t < n ? dot : -inf_f32();
    }
    softmax_update(score, m, l, acc, [&](int g, float (&f)[V]) {
      if (sub >= VV) return false;
      widen<T>(load_shared16(vs + ((group + g * kGroups) * DV + sub * V) * (int)sizeof(T)), f);
      return true;
    });
  }

  // (m, l) of each group and its accumulators, into ml [kGroups][2] and accs [kGroups][DV].
  GDL_DEV void publish(float* ml, float* accs) const {
    if (sub == 0) ml[2 * group] = m, ml[2 * group + 1] = l;
    if (sub < VV)
#pragma unroll
      for (int e = 0; e < V; ++e) accs[group * DV + sub * V + e] = acc[e];
  }
};

// Tensor-core path (f16, bf16): the scores of 16 positions are one
// mma.m16n8k16 per 16 of D, k's rows as A and q in B's fragment. Rows of k
// are D * 2 bytes apart, a multiple of 128, so the same words of eight rows
// share a bank; instead lane (g = lane / 4, t = lane % 4) reads, for k step
// j, the word pair m = (4 j + t + 4 g) mod (D / 4) of rows g and g + 8 (one
// 8-byte load each, conflict-free), and holds the same pair of q as B's
// column g. Row r of A and column n of B then sum the same products when
// n = r mod 8, so the scores are C's diagonal C[r][r mod 8], one per
// position, held by lane 4 (r mod 8) + (r mod 8) / 2. The stage's 16-row
// tiles are shared by kWarps / tiles warps each (each computes its tile's
// scores) that take the tile's positions in parts for v, a warp per group:
// every lane holds DV / 32 output columns.
template <int D, int DV, typename T, int P> struct StreamMma {
  static constexpr int kWarps = kAttentionThreads / 32;
  static constexpr int kGroups = kWarps;
  static constexpr int kTiles = P / 16, kWarpsPerTile = kWarps / kTiles, PW = 16 / kWarpsPerTile;
  static constexpr int KS = D / 16, DP = D / 4, VL = DV / 32;  // k steps, word pairs per row, v columns per lane
  static_assert(P % 16 == 0 && kWarps % kTiles == 0, "16-row tiles, each shared by whole warps");
  static_assert(D % 64 == 0 && DV % 64 == 0 && sizeof(T) == 2, "f16 or bf16, heads of 64, 128, 192 or 256");

  int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
  int g = lane >> 2, t = lane & 3;
  unsigned qb[KS][2];  // B's fragment of q for each k step
  float q_scale_;
  float m, l, acc[VL];

  GDL_DEV int pair(int j) const { return (4 * j + t + 4 * g) % DP; }

  GDL_DEV void start(const T* q_row, float q_scale) {
    const uint2* pairs = reinterpret_cast<const uint2*>(q_row);
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      const uint2 w = __ldg(pairs + pair(j));
      qb[j][0] = w.x, qb[j][1] = w.y;
    }
    q_scale_ = q_scale;
    m = -inf_f32(), l = 0.0f;
#pragma unroll
    for (int e = 0; e < VL; ++e) acc[e] = 0.0f;
  }

  GDL_DEV void stage(const unsigned char* ks, const unsigned char* vs, int n) {
    const int tile = (warp / kWarpsPerTile) * 16, first = tile + (warp % kWarpsPerTile) * PW;
    float score[PW];
#pragma unroll
    for (int i = 0; i < PW; ++i) score[i] = -inf_f32();
    if (tile < n) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const unsigned char* row_g = ks + (tile + g) * D * 2;
#pragma unroll
      for (int j = 0; j < KS; ++j) {
        const uint2 lo = load_shared8(row_g + pair(j) * 8), hi = load_shared8(row_g + 8 * D * 2 + pair(j) * 8);
        const unsigned a[4] = {lo.x, hi.x, lo.y, hi.y};
        mma16816(c, a, qb[j][0], qb[j][1], T{});
      }
      const float diag_lo = g & 1 ? c[1] : c[0], diag_hi = g & 1 ? c[3] : c[2];  // rows g and g + 8, if t == g / 2
#pragma unroll
      for (int i = 0; i < PW; ++i) {
        const int r = first - tile + i, owner = 4 * (r & 7) + ((r & 7) >> 1);
        const float s = __shfl_sync(0xffffffffu, r < 8 ? diag_lo : diag_hi, owner);
        if (first + i < n) score[i] = s * q_scale_;
      }
    }
    softmax_update(score, m, l, acc, [&](int i, float (&f)[VL]) {
      widen_n<T, VL>(vs + ((first + i) * DV + lane * VL) * 2, f);
      return true;
    });
  }

  GDL_DEV void publish(float* ml, float* accs) const {
    if (lane == 0) ml[2 * warp] = m, ml[2 * warp + 1] = l;
#pragma unroll
    for (int e = 0; e < VL; ++e) accs[warp * DV + lane * VL + e] = acc[e];
  }

  // 8 bytes of shared memory as one load.
  static GDL_DEV uint2 load_shared8(const void* p) {
    uint2 r;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];"
                 : "=r"(r.x), "=r"(r.y)
                 : "r"(bulk::shared_address(p))
                 : "memory");
    return r;
  }
  // N (2, 4 or 8) 16-bit elements of shared memory, widened.
  template <typename U, int N> static GDL_DEV void widen_n(const unsigned char* p, float (&f)[N]) {
    unsigned w[4];
    if constexpr (N == 8) {
      const uint4 r = load_shared16(p);
      w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
    } else if constexpr (N == 4) {
      const uint2 r = load_shared8(p);
      w[0] = r.x, w[1] = r.y;
    } else {
      asm volatile("ld.shared.b32 %0, [%1];" : "=r"(w[0]) : "r"(bulk::shared_address(p)) : "memory");
    }
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      f[2 * i] = Vec16<U>::elem(w[i], 0);
      f[2 * i + 1] = Vec16<U>::elem(w[i], 1);
    }
  }
};

}  // namespace att

template <int D, int DV, typename T, int POSITIONS, int STAGES> struct AttentionStream {
  static constexpr bool kMma = att::StreamUsesMma<T, D, DV>::value;  // gdlc asks the same (kernel_choice.cc)
  using Math =
      typename att::Pick<kMma, att::StreamMma<D, DV, T, POSITIONS>, att::StreamLanes<D, DV, T, POSITIONS>>::type;
  static constexpr int kPositions = POSITIONS;  // per stage; chosen by gdlc (kernel_choice.cc)
  static constexpr int k_bytes = kPositions * D * (int)sizeof(T);
  static constexpr int stage_bytes = k_bytes + kPositions * DV * (int)sizeof(T);
  static constexpr int kStages = STAGES;  // chosen by gdlc (kernel_choice.cc): how many blocks share a multiprocessor
  static constexpr int bytes = kStages * stage_bytes;  // the dynamic shared memory of a block
  static_assert(D % Vec16<T>::n == 0 && DV % Vec16<T>::n == 0, "rows of whole 16-byte vectors");
  static_assert(STAGES >= 2, "a stage computed while the next one lands");
  static_assert(Math::kGroups * (2 + DV) * 4 <= bytes, "the groups' results fit in the ring");
};

namespace att {
// The stages of task (row, split) for `valid` positions: `stages` stages of
// the row from stage `lo` (fewer or none at the end of the row), at least
// `least` stages a split. The first `parts` splits hold stages, the others
// none: a short row is computed by as many blocks as it has stages (over
// `least`) at most, and only those parts are added.
template <typename I, int P> struct StreamRange {
  I lo = 0, valid = 0;
  int stages = 0, parts = 0;
  StreamRange() = default;
  GDL_DEV StreamRange(I valid_positions, I split, int S, int least = 1) : valid(valid_positions) {
    const I row_stages = ceil_div(valid, (I)P);
    const I even = ceil_div(row_stages, (I)S);
    const I chunk = even > (I)least ? even : (I)least;
    lo = split * chunk;
    const I left = lo < row_stages ? row_stages - lo : (I)0;
    stages = (int)(left < chunk ? left : chunk);
    parts = chunk > 0 ? (int)ceil_div(row_stages, chunk) : 0;
  }
  GDL_DEV I first(int j) const { return (lo + (I)j) * (I)P; }
  GDL_DEV int count(int j) const { return (int)(valid - first(j) < (I)P ? valid - first(j) : (I)P); }
};

// Whether a streamed task has nothing to compute: its HEADS rows (at o)
// have no valid position, and split 0 writes them as zeros; or the rows'
// positions end before this split's stages (nothing to add).
template <int HEADS, typename I, typename TO>
GDL_DEV bool task_without_work(TO* o, I valid, I split, int stages, I DV) {
  if (valid <= 0) {
    if (split == 0)
      for (I d = (I)threadIdx.x; d < (I)HEADS * DV; d += kAttentionThreads) o[d] = cvt<TO>(0.0f);
    return true;
  }
  return stages == 0;
}
}  // namespace att

// KV_EARLY (k and v are params, which no kernel writes): the kernel waits
// for the kernels it depends on itself (gdl_abi.cuh), after issuing its
// first task's first stages as if every position were valid; once the
// length is known, those stages are kept where they match the real ones and
// waited out otherwise. The copies then run while the kernels before this
// one (the input copy) finish.
//
// HEADS query rows share a task (grouped-query attention: consecutive query
// heads that read the same k/v head, of one query, so one length): each
// stage of k and v is copied once for all of them and each keeps its own
// running maximum, sum and accumulators. rows is a multiple of HEADS.
template <int D, int DV, int POSITIONS, int STAGES, bool KV_EARLY, int HEADS = 1, typename I, typename T, typename TO,
          typename Len, typename Kv>
GDL_DEV void attention_stream(const T* q, const T* k, const T* v, TO* out, Len len_source, Kv kv, I rows,
                              I positions, float scale, SplitScratch sk, unsigned char* ring) {
  using A = AttentionStream<D, DV, T, POSITIONS, STAGES>;
  using Math = typename A::Math;
  using Range = att::StreamRange<I, A::kPositions>;
  static_assert(Kv::template stages_contiguous<A::kPositions>(), "a stage is one run of positions of k and of v");
  static_assert(!(KV_EARLY && Kv::kPaged), "the block table is an input: read after the wait");
  constexpr int NS = A::kStages, GROUPS = Math::kGroups;
  using att::kLog2e;
  __shared__ unsigned long long full[NS];

  if (blockDim.x != kAttentionThreads) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x;
  if (tid == 0)
    for (int s = 0; s < NS; ++s) bulk::barrier_init(&full[s]);
  __syncthreads();
  static_assert(HEADS >= 1, "query rows per task");
  const int S = sk.splits;
  const I tasks = rows / (I)HEADS * S;
  unsigned used = 0;  // stages consumed by this block so far: stage j of a task is ring slot (used + j) % NS
  Math math[HEADS];
  // Stage j of a task: its positions' first row in k and v (-1: not stored,
  // a paged position with a block id outside the pool) and how many it holds.
  auto stage_at = [&](I row, const Range& range, int j) { return kv.at(row, range.first(j)); };
  auto stage_count = [&](I at, const Range& range, int j) { return at < 0 ? 0 : range.count(j); };
  // Stage j of a task (its row's k and v, its range) into its slot; thread 0 only.
  auto issue = [&](I row, const Range& range, int j) {
    const unsigned slot = (used + j) % NS;
    const I at = stage_at(row, range, j);
    const int n = stage_count(at, range, j);
    unsigned char* dst = ring + slot * A::stage_bytes;
    bulk::expect_bytes(&full[slot], (unsigned)(n * (D + DV) * (int)sizeof(T)));
    if (n == 0) return;  // the arrival alone completes the phase
    bulk::copy(dst, k + at * D, (unsigned)(n * D * (int)sizeof(T)), &full[slot]);
    bulk::copy(dst + A::k_bytes, v + at * DV, (unsigned)(n * DV * (int)sizeof(T)), &full[slot]);
  };

  Range early;  // KV_EARLY: the first task's range as issued before the wait (stages: how many)
  if constexpr (KV_EARLY) {
    const I task = task_first<I>();
    if (task < tasks) {
      const I row = task / S * (I)HEADS;
      early = Range(positions, task % S, S);
      early.stages = early.stages < NS ? early.stages : NS;
      if (tid == 0)
        for (int j = 0; j < early.stages; ++j) issue(row, early, j);
    }
    allow_dependents();
    wait_for_producers();
  }

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I row = task / S * (I)HEADS, split = task % S;  // the task's first row: the others share its k, v and length
    const int len = len_source.get(row);
    const I valid = len <= 0 ? (I)0 : ((I)len < positions ? (I)len : positions);
    const Range range(valid, split, S);
    int in_flight = 0;  // stages of this task issued already (before the wait)
    if (early.stages > 0) {
      bool same = range.lo == early.lo && range.stages >= early.stages;
      for (int j = 0; same && j < early.stages; ++j) same = range.count(j) == early.count(j);
      if (same) {
        in_flight = early.stages;
      } else {  // land them, unread, before the ring is used again
        for (int j = 0; j < early.stages; ++j) bulk::wait(&full[(used + j) % NS], ((used + j) / NS) & 1u);
        used += (unsigned)early.stages;
      }
      early.stages = 0;
    }
    TO* o = out + row * DV;
    if (att::task_without_work<HEADS>(o, valid, split, range.stages, (I)DV)) continue;
    const int stages = range.stages;
    if (tid == 0)
      for (int j = in_flight; j < NS && j < stages; ++j) issue(row, range, j);

#pragma unroll
    for (int h = 0; h < HEADS; ++h)
      math[h].start(q + (row + (I)h) * D, scale * kLog2e);  // scores in base 2: exp2f does the exponentials
    for (int j = 0; j < stages; ++j) {
      const unsigned slot = (used + j) % NS;
      bulk::wait(&full[slot], ((used + j) / NS) & 1u);
      const unsigned char* ks = ring + slot * A::stage_bytes;
      const int count = stage_count(stage_at(row, range, j), range, j);
#pragma unroll
      for (int h = 0; h < HEADS; ++h) math[h].stage(ks, ks + A::k_bytes, count);
      __syncthreads();  // every group is done with the slot
      if (tid == 0 && j + NS < stages) issue(row, range, j + NS);
    }
    used += (unsigned)stages;

    // Each row's groups' results, in the idle ring: ml [GROUPS][2] (m, l), accs [GROUPS][DV].
    float* ml = reinterpret_cast<float*>(ring);
    float* accs = ml + 2 * GROUPS;
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
      math[h].publish(ml, accs);
      __syncthreads();
      float block_m = -inf_f32();
#pragma unroll
      for (int i = 0; i < GROUPS; ++i) block_m = fmaxf(block_m, ml[2 * i]);
      float block_l = 0.0f, weight[GROUPS];
#pragma unroll
      for (int i = 0; i < GROUPS; ++i) {
        weight[i] = ml[2 * i] == -inf_f32() ? 0.0f : exp2f(ml[2 * i] - block_m);
        block_l += weight[i] * ml[2 * i + 1];
      }
      auto value = [&](I d) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < GROUPS; ++i) sum += weight[i] * accs[i * DV + (int)d];
        return sum;
      };
      att::write_part(o + (I)h * DV, value, block_m, block_l, row + (I)h, split, rows, S, (I)DV, sk, range.parts);
      __syncthreads();  // the ring holds the next row's results, then the next task's stages
    }
    // The groups' results were written to the ring through the generic
    // proxy; the next task's bulk copies write it through the async proxy.
    if (tid == 0) bulk::fence_shared_for_copies();
  }
}

}  // namespace gdl
