// attention_prefill: the attention of gdl_attention.cuh for many causal
// queries of a sequence at once (prefill, a training step's forward), on
// tensor cores, for f16/bf16 heads of 64 or 128. The decode kernels take one
// query's heads a task and read the k and v rows up to its position again
// for every query; here a task takes a block of queries, so each stage of k
// and v is read once for all of them and the scores are whole 16 x 8 tiles
// of an mma.
//
// A task is (query block, sequence, k/v head): the QB queries of the block
// times the G query heads that read the k/v head, as 16 * WARPS rows of A
// (row r: query QB * block + r / G, head G * kv_head + r % G; rows past QB *
// G or past the sequence's queries are padding). Each row has its own
// length L (len_source: causal, clamped), and the task reads the positions
// below the largest L of its rows, in stages of P, copied by every thread
// with 16-byte cp.async into a ring of STAGES stages (the swizzled layout
// of gdl_attention_group.cuh; positions past the stage's count are zero),
// STAGES - 1 in flight while one is computed. Query blocks go out in
// decreasing order (the causal tasks with the most positions first), so
// the short ones fill the tail of the launch.
//
// Per stage, warp w takes its 16 rows against every position of the stage:
//  1. S = Q K^T by mma.m16n8k16: q's fragments in registers for the whole
//     task, k's rows by ldmatrix as B;
//  2. online softmax per row in base 2 (exp2f): scores at positions t >= L
//     of their row, or past the stage's count, are -inf and weigh nothing;
//  3. O += P V by mma.m16n8k16: P rounded to T as A, straight from the
//     score registers, v's rows by ldmatrix.trans as B.
// A warp whose rows all end before the stage skips it. At the end each row
// is O / l (a row with no position: zeros), written by the lanes that hold
// it. No splits: the kernel is chosen where the tasks alone fill the GPU
// (kernel_choice.cc).
//
// paged_attention_shared takes it for a ragged batch of tokens (one
// sequence axis, the step's tokens as its queries, each with its own
// length): a task filter (SharedBlocksOnly) keeps the query blocks whose
// tokens all belong to one sequence, decided at run time, and copies the
// decode kernels' rows of the others.
#pragma once

#include "gdl_attention_group.cuh"

namespace gdl {

template <int D, int DV, typename T, int P, int STAGES, int WARPS> struct AttentionPrefill {
  static constexpr int kThreads = 32 * WARPS;
  static constexpr int kRows = 16 * WARPS;  // rows of a task
  static constexpr int k_bytes = P * D * 2;
  static constexpr int stage_bytes = P * (D + DV) * 2;
  static constexpr int bytes = STAGES * stage_bytes;  // the dynamic shared memory of a block
  static_assert(sizeof(T) == 2, "f16 or bf16");
  static_assert(D % 64 == 0 && DV % 64 == 0 && D <= 128 && DV <= 128,
                "rows of whole 128-byte lines (the swizzle); q and the accumulators in registers");
  static_assert(P % 16 == 0 && P <= 128, "16-position slices");
  static_assert(STAGES >= 2, "a stage computed while the next one lands");
};

namespace att {

// The rows of a task of attention_prefill (and of the backward's kernels
// over blocks of queries, gdl_attention_backward.cuh) as this lane holds
// them: rows g and g + 8 of its warp's 16 (-1: padding) and their lengths,
// the most positions a row of the warp reads, and of the block.
template <typename I> struct QueryRows {
  I row_of[2];
  int len[2];
  int warp_len, most;
  I first_row;  // the task's first row: its sequence and k/v head locate the stages of k and v
};

// The tasks of a kernel over blocks of query_block queries of `rows` query
// rows (sequence, query, head), and task `task`: query blocks in
// decreasing order (the longest causal tasks first), then sequences, then
// k/v heads.
template <typename I> struct QueryTask {
  I block, sequence, kv_head;
};
template <typename I> GDL_DEV I query_tasks(I rows, I heads, I queries, I kv_heads, int query_block) {
  return ceil_div(queries, (I)query_block) * (rows / (heads * queries)) * kv_heads;
}
template <typename I> GDL_DEV QueryTask<I> query_task(I task, I rows, I heads, I queries, I kv_heads, int query_block) {
  const I sequences = rows / (heads * queries);
  return {ceil_div(queries, (I)query_block) - 1 - task / (sequences * kv_heads), task / kv_heads % sequences,
          task % kv_heads};
}

// The rows of task t. Called by every thread (a barrier: warp_most is the
// block's shared memory of WARPS ints, free again after the task's next
// barrier).
template <int WARPS, typename I, typename Len>
GDL_DEV QueryRows<I> query_rows(const QueryTask<I>& t, const Len& len_source, I heads, I queries, I kv_heads,
                                I positions, int query_block, int* warp_most) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const I group = heads / kv_heads, block = t.block, sequence = t.sequence, kv_head = t.kv_head;
  QueryRows<I> r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int at = warp * 16 + g + 8 * h;
    const I query = block * (I)query_block + (I)at / group;
    const bool real = (I)at < (I)query_block * group && query < queries;
    r.row_of[h] = real ? (sequence * queries + query) * heads + kv_head * group + (I)at % group : (I)-1;
    const int l = real ? len_source.get(r.row_of[h]) : 0;
    r.len[h] = l <= 0 ? 0 : ((I)l < positions ? l : (int)positions);
  }
  int most = max(r.len[0], r.len[1]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) most = max(most, __shfl_xor_sync(0xffffffffu, most, offset));
  r.warp_len = most;
  if (lane == 0) warp_most[warp] = most;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < WARPS; ++w) most = max(most, warp_most[w]);
  r.most = most;
  r.first_row = (sequence * queries + block * (I)query_block) * heads + kv_head * group;
  return r;
}

// A's fragments (mma.m16n8k16) of this lane's two rows of x (width W; row
// -1: zeros): for k step j, rows g and g + 8, elements 2 tq, 2 tq + 1 and 8 further.
template <int W, typename T, typename I>
GDL_DEV void row_fragments(const T* x, const I (&row_of)[2], unsigned (&a)[W / 16][4]) {
  const int tq = threadIdx.x & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const unsigned* words = reinterpret_cast<const unsigned*>(x + (row_of[h] < 0 ? (I)0 : row_of[h]) * W);
#pragma unroll
    for (int j = 0; j < W / 16; ++j) {
      a[j][h] = row_of[h] >= 0 ? __ldg(words + 8 * j + tq) : 0u;
      a[j][h + 2] = row_of[h] >= 0 ? __ldg(words + 8 * j + tq + 4) : 0u;
    }
  }
}

// S = A X^T for the 16-row slices below `live` of a stage of X (swizzled
// rows of W at shared address xs): s[2 i + h8][e] is row g (e < 2) or g + 8
// against stage row 16 i + 8 h8 + 2 tq + e % 2. Slices from `live` on are
// left as they are.
template <int W, int NS, typename T>
GDL_DEV void stage_products_nt(float (&s)[2 * NS][4], const unsigned (&a)[W / 16][4], unsigned xs, int live) {
  const int lane = threadIdx.x & 31, r8 = lane & 7, tile = lane >> 3;  // ldmatrix: lane gives row r8 of tile `tile`
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    if (i >= live) break;
    const int row = 16 * i + ((tile >> 1) << 3) + r8;
#pragma unroll
    for (int j = 0; j < W / 16; ++j) {
      unsigned b[4];
      ldmatrix_x4(b, xs + swizzled<W * 2>(row, 2 * j + (tile & 1)));
      mma16816(s[2 * i], a[j], b[0], b[1], T{});
      mma16816(s[2 * i + 1], a[j], b[2], b[3], T{});
    }
  }
}

// acc += P X for the 16-row slices below `live` of a stage of X (swizzled
// rows of W at xs), P the slices' values of s (the layout above) rounded
// to T as A; acc[c][e]: row g (e < 2) or g + 8, column 8 c + 2 tq + e % 2.
template <int W, int NS, typename T>
GDL_DEV void stage_products_nn(float (&acc)[W / 8][4], const float (&s)[2 * NS][4], unsigned xs, int live) {
  const int lane = threadIdx.x & 31, r8 = lane & 7, tile = lane >> 3;
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    if (i >= live) break;
    const unsigned pa[4] = {Vec16<T>::pack(s[2 * i][0], s[2 * i][1]), Vec16<T>::pack(s[2 * i][2], s[2 * i][3]),
                            Vec16<T>::pack(s[2 * i + 1][0], s[2 * i + 1][1]),
                            Vec16<T>::pack(s[2 * i + 1][2], s[2 * i + 1][3])};
    const int row = 16 * i + ((tile & 1) << 3) + r8;
#pragma unroll
    for (int c = 0; c < W / 8; c += 2) {
      unsigned b[4];
      ldmatrix_x4_trans(b, xs + swizzled<W * 2>(row, c + (tile >> 1)));
      mma16816(acc[c], pa, b[0], b[1], T{});
      mma16816(acc[c + 1], pa, b[2], b[3], T{});
    }
  }
}

template <int N> GDL_DEV void zero(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[i][e] = 0.0f;
}

// A stage's scores of rows g and g + 8 (s[i][e]: row g for e < 2, else g +
// 8; stage position 8 i + 2 tq + e % 2) in base 2, times q_scale; -inf at
// the positions past the stage's n or at p_lo + t >= the row's length.
template <int N> GDL_DEV void mask_scores(float (&s)[N][4], int p_lo, int n, const int (&len)[2], float q_scale) {
  const int tq = threadIdx.x & 3;
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = 8 * i + 2 * tq + (e & 1);
      s[i][e] = t < n && p_lo + t < len[e >> 1] ? s[i][e] * q_scale : -inf_f32();
    }
}

// The online softmax's step over a stage of masked scores for rows g and g
// + 8: the running maxima m (the four lanes of a row agree through two
// shuffles), the sums l rescaled to them, and each row's rescale of what
// came before (1 while the row has no position: its sums are still 0).
template <int N> GDL_DEV void update_maxima(const float (&s)[N][4], float (&m)[2], float (&l)[2], float (&rescale)[2]) {
  float peak[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) peak[e >> 1] = fmaxf(peak[e >> 1], s[i][e]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    peak[h] = fmaxf(peak[h], __shfl_xor_sync(0xffffffffu, peak[h], 1));
    peak[h] = fmaxf(peak[h], __shfl_xor_sync(0xffffffffu, peak[h], 2));
    const float m_new = fmaxf(m[h], peak[h]);
    rescale[h] = m_new == -inf_f32() ? 1.0f : exp2f(m[h] - m_new);
    m[h] = m_new;
    l[h] *= rescale[h];
  }
}

// Each score in place as its probability's numerator exp2(s - m) (0 where
// masked), added to its row's l.
template <int N> GDL_DEV void exponentiate(float (&s)[N][4], const float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[i][e] = s[i][e] == -inf_f32() ? 0.0f : exp2f(s[i][e] - m[e >> 1]);
      l[e >> 1] += s[i][e];
    }
}

// Row h (0: g, 1: g + 8) of acc times `factor`, written to o (a row of W) by the lane's columns.
template <int W, typename TO> GDL_DEV void write_row(TO* o, const float (&acc)[W / 8][4], int h, float factor) {
  o += 2 * (threadIdx.x & 3);
#pragma unroll
  for (int i = 0; i < W / 8; ++i) {
    const float lo = acc[i][2 * h] * factor, hi = acc[i][2 * h + 1] * factor;
    if constexpr (sizeof(TO) == 2) {  // the pair as one word
      *reinterpret_cast<unsigned*>(o + 8 * i) = Vec16<TO>::pack(lo, hi);
    } else {
      o[8 * i] = cvt<TO>(lo);
      o[8 * i + 1] = cvt<TO>(hi);
    }
  }
}

// Which tasks attention_prefill computes: every one.
struct EveryTask {
  template <typename I> GDL_DEV bool takes(const QueryTask<I>&, int) const { return true; }
};

}  // namespace att

// paged_attention_shared's tasks (the queries are the step's tokens, one
// sequence axis): the query blocks of one sequence that SharedTokenBlocks
// gives it; every other block's rows are the decode kernels' result
// `partial`, copied (16-byte chunks: a row is 128 or 256 bytes).
template <int DV, typename TO> struct SharedBlocksOnly {
  SharedTokenBlocks shared;
  const TO* partial;
  TO* out;
  long long tokens, heads, group;  // tokens: every one of the layout, padding included
  static_assert(DV * sizeof(TO) % 16 == 0, "whole 16-byte chunks");
  template <typename I> GDL_DEV bool takes(const att::QueryTask<I>& t, int query_block) const {
    const long long first = (long long)t.block * query_block;
    if (shared.shared(first)) return true;
    constexpr long long kChunk = 16 / sizeof(TO);   // elements of a 16-byte chunk
    const long long span = group * DV / kChunk;     // chunks of a token's rows of this k/v head
    const long long count = (tokens - first < query_block ? tokens - first : query_block) * span;
    const uint4* from = reinterpret_cast<const uint4*>(partial);
    uint4* to = reinterpret_cast<uint4*>(out);
    for (long long i = threadIdx.x; i < count; i += blockDim.x) {
      const long long at = ((first + i / span) * heads + (long long)t.kv_head * group) * DV / kChunk + i % span;
      to[at] = from[at];
    }
    return false;
  }
};

template <int D, int DV, int P, int STAGES, int WARPS, typename I, typename T, typename TO, typename Len, typename Kv,
          typename Tasks = att::EveryTask>
GDL_DEV void attention_prefill(const T* q, const T* k, const T* v, TO* out, Len len_source, Kv kv, I rows,
                               I heads, I queries, I kv_heads, I positions, int query_block, float scale,
                               unsigned char* ring, Tasks tasks_taken = {}) {
  using A = AttentionPrefill<D, DV, T, P, STAGES, WARPS>;
  static_assert(Kv::template stages_contiguous<P>(), "a stage is one run of positions of k and of v");
  constexpr int NP = P / 16;  // 16-position slices of a stage
  constexpr int NT = DV / 8;  // 8-column output tiles
  __shared__ int warp_most[WARPS];

  if (blockDim.x != A::kThreads) __trap();  // a launch that breaks the LaunchRule
  const I tasks = att::query_tasks(rows, heads, queries, kv_heads, query_block);
  const unsigned ring_at = bulk::shared_address(ring);
  const float q_scale = scale * att::kLog2e;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const att::QueryTask<I> t = att::query_task(task, rows, heads, queries, kv_heads, query_block);
    if (!tasks_taken.takes(t, query_block)) continue;  // the same for every thread
    const att::QueryRows<I> r =
        att::query_rows<WARPS>(t, len_source, heads, queries, kv_heads, positions, query_block, warp_most);
    const int stages = (r.most + P - 1) / P;
    auto stage_count = [&](int j, I& at) {
      at = kv.at(r.first_row, (I)(j * P));
      return at < 0 ? 0 : min(P, r.most - j * P);
    };
    auto issue = [&](int j) {
      I at;
      const int n = stage_count(j, at);
      const unsigned slot = ring_at + (unsigned)(j % STAGES) * A::stage_bytes;
      att::copy_rows<P, D, A::kThreads>(slot, k, at, n);
      att::copy_rows<P, DV, A::kThreads>(slot + A::k_bytes, v, at, n);
    };
    att::ring_start<STAGES>(stages, issue);

    unsigned qa[D / 16][4];
    att::row_fragments<D>(q, r.row_of, qa);
    float m[2] = {-inf_f32(), -inf_f32()}, l[2] = {0.0f, 0.0f};  // rows g and g + 8
    float acc[NT][4];
    att::zero(acc);

    for (int j = 0; j < stages; ++j) {
      att::ring_next<STAGES>(j, stages, issue);
      I at;
      const int n = stage_count(j, at);
      const int p_lo = j * P;
      if (p_lo >= r.warp_len || n == 0) continue;  // no row of this warp reads the stage (the same for the whole warp)
      const unsigned ks = ring_at + (unsigned)(j % STAGES) * A::stage_bytes, vs = ks + A::k_bytes;
      // Slices past the warp's positions are skipped (their scores are masked below).
      const int live = min(NP, (min(r.warp_len - p_lo, n) + 15) / 16);

      // 1. scores
      float s[2 * NP][4];
      att::zero(s);
      att::stage_products_nt<D, NP, T>(s, qa, ks, live);
      // 2. online softmax
      att::mask_scores(s, p_lo, n, r.len, q_scale);
      float rescale[2];
      att::update_maxima(s, m, l, rescale);
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] *= rescale[e >> 1];
      att::exponentiate(s, m, l);
      // 3. O += P V
      att::stage_products_nn<DV, NP, T>(acc, s, vs, live);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring (and with warp_most)

    // Each row: O / l over its four lanes' sums (no position: zeros).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      if (r.row_of[h] >= 0) att::write_row<DV>(out + r.row_of[h] * DV, acc, h, l[h] > 0.0f ? 1.0f / l[h] : 0.0f);
    }
  }
}

}  // namespace gdl
