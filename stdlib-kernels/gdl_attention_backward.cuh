// Attention's derivative on tensor cores, streaming the positions (the
// probabilities are recomputed a tile at a time and never stored), for
// f16/bf16 heads of 64 or 128 over a cache of contiguous rows. With p the
// forward's probabilities, o its output and do o's adjoint, per query row r
// and position t < L_r (the row's length, as the forward counts it):
//   lse_r = log sum_t exp(scale q_r.k_t),  delta_r = do_r . o_r
//   p_rt = exp(scale q_r.k_t - lse_r),     ds_rt = p_rt (do_r . v_t - delta_r) scale
//   dq_r = sum_t ds_rt k_t,  dk_t = sum_r ds_rt q_r,  dv_t = sum_r p_rt do_r
// Three kernels, each one step:
//   attention_backward_stats  (lse, delta) per row: the forward's scores
//                             again, without v;
//   attention_backward_q      dq, over tasks of query blocks (the forward's
//                             tasks, att::query_rows), k and v in stages;
//   attention_backward_kv     dk and dv side by side ([.., T, D + DV]), over
//                             tasks of 16 * WARPS positions of a k/v head,
//                             the rows of its query heads in stages.
// The stats kernel runs first; the other two read its result and may run
// at once. Products are mma.m16n8k16 with f32 accumulators; p and ds are
// rounded to T as their operands (as the forward rounds p).
#pragma once

#include "gdl_attention_prefill.cuh"

namespace gdl {

template <int D, int DV, typename T, int P, int STAGES, int WARPS> struct AttentionBackward {
  static constexpr int kThreads = 32 * WARPS;
  static_assert(sizeof(T) == 2, "f16 or bf16");
  static_assert(D % 64 == 0 && DV % 64 == 0 && D <= 128 && DV <= 128,
                "rows of whole 128-byte lines (the swizzle); the fragments in registers");
  static_assert(P % 16 == 0 && P <= 64, "16-row slices");
  static_assert(STAGES >= 2, "a stage computed while the next one lands");
  // The query kernels' stages (stats: k alone; q: k and v), positions of P rows.
  static constexpr int k_bytes = P * D * 2;
  static constexpr int stats_bytes = STAGES * k_bytes;
  static constexpr int q_stage_bytes = P * (D + DV) * 2;
  static constexpr int q_bytes = STAGES * q_stage_bytes;
  // The k/v kernel's stages: P query rows of q and do, their lse, delta and length.
  static constexpr int rows_q_bytes = P * D * 2, rows_do_bytes = P * DV * 2;
  static constexpr int kv_stage_bytes = rows_q_bytes + rows_do_bytes + P * 12;
  static constexpr int kv_bytes = STAGES * kv_stage_bytes;
};

namespace att {
// The sum of row h (0: g, 1: g + 8) of a . b over the lane's columns of
// rows of W elements (the output layout of stage_products_nn), over the
// four lanes of the row.
template <int W, typename T> GDL_DEV float row_dot(const T* a, const T* b) {
  const int tq = threadIdx.x & 3;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < W / 8; ++i) {
    const unsigned wa = *reinterpret_cast<const unsigned*>(a + 8 * i + 2 * tq);
    const unsigned wb = *reinterpret_cast<const unsigned*>(b + 8 * i + 2 * tq);
    sum = fmaf(Vec16<T>::elem(wa, 0), Vec16<T>::elem(wb, 0), sum);
    sum = fmaf(Vec16<T>::elem(wa, 1), Vec16<T>::elem(wb, 1), sum);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  return sum;
}
}  // namespace att

// stats [rows, 2]: (lse, delta) of every query row; lse = 0 for a row with
// no position (its probabilities are all masked). The forward's tasks and
// scores (attention_prefill), with k alone in the stages.
template <int D, int DV, int P, int STAGES, int WARPS, typename I, typename T, typename Len, typename Kv>
GDL_DEV void attention_backward_stats(const T* q, const T* k, const T* o, const T* dout, float* stats, Len len_source,
                                      Kv kv, I rows, I heads, I queries, I kv_heads, I positions, int query_block,
                                      float scale, unsigned char* ring) {
  using A = AttentionBackward<D, DV, T, P, STAGES, WARPS>;
  static_assert(Kv::template stages_contiguous<P>(), "a stage is one run of positions of k");
  constexpr int NP = P / 16;
  __shared__ int warp_most[WARPS];
  if (blockDim.x != A::kThreads) __trap();  // a launch that breaks the LaunchRule
  const int tq = threadIdx.x & 3;
  const I tasks = att::query_tasks(rows, heads, queries, kv_heads, query_block);
  const unsigned ring_at = bulk::shared_address(ring);
  const float q_scale = scale * att::kLog2e;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const att::QueryRows<I> r =
        att::query_rows<WARPS>(att::query_task(task, rows, heads, queries, kv_heads, query_block), len_source,
                               heads, queries, kv_heads, positions, query_block, warp_most);
    const int stages = (r.most + P - 1) / P;
    auto issue = [&](int j) {
      att::copy_rows<P, D, A::kThreads>(ring_at + (unsigned)(j % STAGES) * A::k_bytes, k,
                                        kv.at(r.first_row, (I)(j * P)), min(P, r.most - j * P));
    };
    att::ring_start<STAGES>(stages, issue);
    unsigned qa[D / 16][4];
    att::row_fragments<D>(q, r.row_of, qa);
    float m[2] = {-inf_f32(), -inf_f32()}, l[2] = {0.0f, 0.0f};
    for (int j = 0; j < stages; ++j) {
      att::ring_next<STAGES>(j, stages, issue);
      const int p_lo = j * P;
      if (p_lo >= r.warp_len) continue;
      const int live = min(NP, (r.warp_len - p_lo + 15) / 16);
      float s[2 * NP][4], rescale[2];
      att::zero(s);
      att::stage_products_nt<D, NP, T>(s, qa, ring_at + (unsigned)(j % STAGES) * A::k_bytes, live);
      att::mask_scores(s, p_lo, P, r.len, q_scale);
      att::update_maxima(s, m, l, rescale);
      att::exponentiate(s, m, l);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring (and with warp_most)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const I row = r.row_of[h] < 0 ? (I)0 : r.row_of[h];
      const float delta = att::row_dot<DV>(o + row * DV, dout + row * DV);  // every lane of the warp takes part
      if (r.row_of[h] >= 0 && tq == 0) {
        stats[row * 2] = l[h] > 0.0f ? (m[h] + log2f(l[h])) / att::kLog2e : 0.0f;
        stats[row * 2 + 1] = delta;
      }
    }
  }
}

// dq [rows, D] over the forward's tasks: per stage of positions, s = q k^T
// and dp = do v^T, ds = p (dp - delta) scale, dq += ds k.
template <int D, int DV, int P, int STAGES, int WARPS, typename I, typename T, typename Len, typename Kv>
GDL_DEV void attention_backward_q(const T* q, const T* k, const T* v, const T* dout, const float* stats, T* dq,
                                  Len len_source, Kv kv, I rows, I heads, I queries, I kv_heads, I positions,
                                  int query_block, float scale, unsigned char* ring) {
  using A = AttentionBackward<D, DV, T, P, STAGES, WARPS>;
  static_assert(Kv::template stages_contiguous<P>(), "a stage is one run of positions of k and of v");
  constexpr int NP = P / 16;
  __shared__ int warp_most[WARPS];
  if (blockDim.x != A::kThreads) __trap();  // a launch that breaks the LaunchRule
  const int tq = threadIdx.x & 3;
  const I tasks = att::query_tasks(rows, heads, queries, kv_heads, query_block);
  const unsigned ring_at = bulk::shared_address(ring);
  const float q_scale = scale * att::kLog2e;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const att::QueryRows<I> r =
        att::query_rows<WARPS>(att::query_task(task, rows, heads, queries, kv_heads, query_block), len_source,
                               heads, queries, kv_heads, positions, query_block, warp_most);
    const int stages = (r.most + P - 1) / P;
    auto issue = [&](int j) {
      const I at = kv.at(r.first_row, (I)(j * P));
      const int n = min(P, r.most - j * P);
      const unsigned slot = ring_at + (unsigned)(j % STAGES) * A::q_stage_bytes;
      att::copy_rows<P, D, A::kThreads>(slot, k, at, n);
      att::copy_rows<P, DV, A::kThreads>(slot + A::k_bytes, v, at, n);
    };
    att::ring_start<STAGES>(stages, issue);
    unsigned qa[D / 16][4], da[DV / 16][4];
    att::row_fragments<D>(q, r.row_of, qa);
    att::row_fragments<DV>(dout, r.row_of, da);
    float lse[2], delta[2];  // lse in base 2
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lse[h] = r.row_of[h] >= 0 ? stats[r.row_of[h] * 2] * att::kLog2e : 0.0f;
      delta[h] = r.row_of[h] >= 0 ? stats[r.row_of[h] * 2 + 1] : 0.0f;
    }
    float acc[D / 8][4];
    att::zero(acc);
    for (int j = 0; j < stages; ++j) {
      att::ring_next<STAGES>(j, stages, issue);
      const int p_lo = j * P;
      if (p_lo >= r.warp_len) continue;
      const int live = min(NP, (r.warp_len - p_lo + 15) / 16);
      const unsigned ks = ring_at + (unsigned)(j % STAGES) * A::q_stage_bytes, vs = ks + A::k_bytes;
      float s[2 * NP][4], dp[2 * NP][4];
      att::zero(s);
      att::zero(dp);
      att::stage_products_nt<D, NP, T>(s, qa, ks, live);
      att::stage_products_nt<DV, NP, T>(dp, da, vs, live);
#pragma unroll
      for (int i = 0; i < 2 * NP; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const bool valid = p_lo + 8 * i + 2 * tq + (e & 1) < r.len[h];
          // ds; a masked position is 0 whatever v and do hold there
          s[i][e] = valid ? exp2f(s[i][e] * q_scale - lse[h]) * (dp[i][e] - delta[h]) * scale : 0.0f;
        }
      att::stage_products_nn<D, NP, T>(acc, s, ks, live);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring (and with warp_most)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (r.row_of[h] >= 0) att::write_row<D>(dq + r.row_of[h] * D, acc, h, 1.0f);
  }
}

// dkv [.., T, D + DV] (dk then dv for each position of k's rows): a task
// is 16 * WARPS positions of a sequence's k/v head, warp w's 16 of them as
// A's rows (k and v in registers), against the rows of the head's query
// heads (row i: query i / G, head i % G) in stages of P: their q and do
// rows, lse, delta and length. Per stage: s^T = k q^T, dp^T = v do^T,
// p^T and ds^T from them, dv += p^T do, dk += ds^T q. Only the stages from
// the first row that reaches the task's first position are read (causal
// rows before it see none of them).
template <int D, int DV, int P, int STAGES, int WARPS, typename I, typename T, typename Len, typename Kv>
GDL_DEV void attention_backward_kv(const T* q, const T* k, const T* v, const T* dout, const float* stats, T* dkv,
                                   Len len_source, Kv kv, I rows, I heads, I queries, I kv_heads, I positions,
                                   float scale, unsigned char* ring) {
  using A = AttentionBackward<D, DV, T, P, STAGES, WARPS>;
  constexpr int NR = P / 16;  // 16-row slices of a stage
  constexpr int PB = 16 * WARPS;
  __shared__ int first_s;
  if (blockDim.x != A::kThreads) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const I group = heads / kv_heads, sequences = rows / (heads * queries);
  const I task_rows = group * queries;  // query rows of a k/v head
  const I blocks = ceil_div(positions, (I)PB);
  const I tasks = blocks * sequences * kv_heads;
  const unsigned ring_at = bulk::shared_address(ring);
  const float q_scale = scale * att::kLog2e;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I block = task / (sequences * kv_heads);  // position block 0 first: every causal row reads it
    const I sequence = task / kv_heads % sequences, kv_head = task % kv_heads;
    const I first_row = sequence * queries * heads + kv_head * group;  // task row 0
    auto row_at = [&](I i) { return first_row + (i / group) * heads + i % group; };  // task row i's row of q
    const I p_block = block * (I)PB;
    // The first task row that reads a position of the block.
    if (tid == 0) first_s = 0x7fffffff;
    __syncthreads();
    int first = 0x7fffffff;
    for (I i = tid; i < task_rows; i += A::kThreads)
      if ((I)len_source.get(row_at(i)) > p_block) {
        first = (int)i;
        break;
      }
    if (first != 0x7fffffff) atomicMin(&first_s, first);
    __syncthreads();
    first = first_s;
    const I from = first == 0x7fffffff ? task_rows : (I)(first / P * P);
    const int stages = (int)ceil_div(task_rows - from, (I)P);

    auto issue = [&](int j) {
      const I lo = from + (I)j * P;
      const int n = (int)min((I)P, task_rows - lo);
      const unsigned slot = ring_at + (unsigned)(j % STAGES) * A::kv_stage_bytes;
      // q and do rows of a stage are not one run (the query heads of other k/v heads lie between).
      auto stage_row = [&](int t) { return row_at(lo + (I)t); };
      att::copy_mapped_rows<P, D, A::kThreads>(slot, q, stage_row, n);
      att::copy_mapped_rows<P, DV, A::kThreads>(slot + A::rows_q_bytes, dout, stage_row, n);
      float* st = reinterpret_cast<float*>(ring + (j % STAGES) * A::kv_stage_bytes + A::rows_q_bytes + A::rows_do_bytes);
      for (int t = tid; t < P; t += A::kThreads) {
        const bool whole = t < n;
        const I row = whole ? row_at(lo + t) : (I)0;
        const int len = whole ? len_source.get(row) : 0;
        st[t] = whole ? stats[row * 2] * att::kLog2e : 0.0f;
        st[P + t] = whole ? stats[row * 2 + 1] : 0.0f;
        reinterpret_cast<int*>(st)[2 * P + t] = len <= 0 ? 0 : ((I)len < positions ? len : (int)positions);
      }
    };
    att::ring_start<STAGES>(stages, issue);
    // This warp's 16 positions as A: rows g and g + 8 (-1: past T).
    const I t0 = p_block + (I)(warp * 16);
    I pos_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) pos_row[h] = t0 + g + 8 * h < positions ? kv.at(first_row, t0 + g + 8 * h) : (I)-1;
    unsigned ka[D / 16][4], va[DV / 16][4];
    att::row_fragments<D>(k, pos_row, ka);
    att::row_fragments<DV>(v, pos_row, va);
    float dk[D / 8][4], dv[DV / 8][4];
    att::zero(dk);
    att::zero(dv);
    for (int j = 0; j < stages; ++j) {
      att::ring_next<STAGES>(j, stages, issue);  // stage j is in, its plain stores too (before the barrier)
      const unsigned qs = ring_at + (unsigned)(j % STAGES) * A::kv_stage_bytes, do_at = qs + A::rows_q_bytes;
      const float* st = reinterpret_cast<const float*>(ring + (j % STAGES) * A::kv_stage_bytes + A::rows_q_bytes +
                                                       A::rows_do_bytes);
      const int* len = reinterpret_cast<const int*>(st + 2 * P);
      float s[2 * NR][4], dp[2 * NR][4];
      att::zero(s);
      att::zero(dp);
      att::stage_products_nt<D, NR, T>(s, ka, qs, NR);
      att::stage_products_nt<DV, NR, T>(dp, va, do_at, NR);
      // s[i][e]: position t0 + g (e < 2) or + 8, stage row 8 i + 2 tq + e % 2
#pragma unroll
      for (int i = 0; i < 2 * NR; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = 8 * i + 2 * tq + (e & 1);
          const bool valid = t0 + g + 8 * (e >> 1) < (I)len[row];
          const float p = valid ? exp2f(s[i][e] * q_scale - st[row]) : 0.0f;
          s[i][e] = p;
          dp[i][e] = valid ? p * (dp[i][e] - st[P + row]) * scale : 0.0f;  // ds: 0 where masked, whatever v and do hold
        }
      att::stage_products_nn<DV, NR, T>(dv, s, do_at, NR);
      att::stage_products_nn<D, NR, T>(dk, dp, qs, NR);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (pos_row[h] < 0) continue;
      att::write_row<D>(dkv + pos_row[h] * (D + DV), dk, h, 1.0f);
      att::write_row<DV>(dkv + pos_row[h] * (D + DV) + D, dv, h, 1.0f);
    }
  }
}

}  // namespace gdl
