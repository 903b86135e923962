// attention_group: the attention of gdl_attention.cuh for the query heads
// of one k/v head together (grouped-query attention), on tensor cores: the
// decode kernel for f16/bf16 heads whose dims are multiples of 64. It must
// read K and V at the copy rate, so per byte of K and V it may do little:
// each is read from shared memory once (or once per column part, below),
// the scores of every head of the group come out of one mma, and so does
// the weighted sum of v.
//
// A task is (HEADS consecutive rows of q: the heads of one query that share
// a k/v head, so one length; a split of the positions, att::StreamRange, of
// at least least_split_stages stages: a shorter row takes fewer splits).
// Its positions come in stages of P, copied by every thread with 16-byte
// cp.async into a ring of STAGES stages, STAGES - 1 in flight while one is
// computed. In shared memory the 16-byte chunks of a row are XOR-swizzled
// by the row (chunk c of row t at c ^ (t % 8)), so the eight rows an
// ldmatrix phase reads lie in distinct banks; positions past the stage's
// count are zero-filled, so every v row a product reads is finite.
//
// Per stage, warp w takes the 16 positions of slice w % (P / 16) and the
// output columns of part w / (P / 16) (DV / parts of them; the warps of a
// slice each compute its scores):
//  1. S = Q K^T by mma.m16n8k16: the heads are A's 16 rows (rows past HEADS
//     are zero), the slice's k rows (ldmatrix) B's columns, two 8-position
//     tiles. C holds S[head][position] as A's fragment wants P;
//  2. online softmax per head: the running maximum m (the four lanes of a
//     row agree through two shuffles), a partial sum l per lane, scores in
//     base 2 (exp2f);
//  3. O += P V by mma.m16n8k16: P rounded to T as A, straight from the
//     score registers, and the slice's v rows (ldmatrix.trans) as B.
// At the end the warps' (m, l, O) are merged per head through shared
// memory (the ring, idle by then) and written by att::write_parts, which
// also combines the rows' splits, one ticket for the task's heads.
#pragma once

#include "gdl_attention.cuh"
#include "gdl_cp_async.cuh"

namespace gdl {

template <int D, int DV, typename T, int P, int STAGES, int HEADS> struct AttentionGroup {
  static constexpr int kWarps = kAttentionThreads / 32;
  static constexpr int kSlices = P / 16;            // 16-position slices of a stage
  static constexpr int kParts = kWarps / kSlices;   // warps sharing a slice, each with its columns
  static constexpr int kColumns = DV / kParts;      // output columns of a warp
  static constexpr int k_bytes = P * D * 2;
  static constexpr int stage_bytes = P * (D + DV) * 2;
  static constexpr int bytes = STAGES * stage_bytes;  // the dynamic shared memory of a block
  static constexpr int merge_bytes = kSlices * HEADS * (2 + DV) * 4;
  static_assert(sizeof(T) == 2, "f16 or bf16");
  static_assert(D % 64 == 0 && DV % 64 == 0, "rows of whole 128-byte lines, which the swizzle permutes within");
  static_assert(P % 16 == 0 && P <= 16 * kWarps && kWarps % kSlices == 0, "16-position slices, whole warps each");
  static_assert(kColumns % 16 == 0, "a warp's columns in pairs of 8-column tiles");
  static_assert(HEADS >= 1 && HEADS <= 16, "the heads are A's 16 rows");
  static_assert(STAGES >= 2, "a stage computed while the next one lands");
  static_assert(merge_bytes <= bytes, "the warps' results fit in the ring");
};

namespace att {
// The shared-memory byte offset of 16-byte chunk c of row t, rows of ROW bytes.
template <int ROW> GDL_DEV unsigned swizzled(int t, int c) { return (unsigned)(t * ROW + ((c ^ (t & 7)) << 4)); }

// n rows of x (width W), row t of the stage from row row_at(t) of x, into
// the swizzled stage rows at shared address `slot`, zeros for the rows
// from n to ROWS (every product reads finite values); THREADS threads take
// part.
template <int ROWS, int W, int THREADS, typename T, typename RowAt>
GDL_DEV void copy_mapped_rows(unsigned slot, const T* x, const RowAt& row_at, int n) {
  constexpr int C = W / 8, CHUNKS = ROWS * C;  // 16-byte chunks of a row, of the stage
#pragma unroll
  for (int i0 = 0; i0 < CHUNKS; i0 += THREADS) {
    const int i = i0 + (int)threadIdx.x;
    if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
    const int t = i / C, c = i % C;
    const bool whole = t < n;
    cp_async16_or_zero(slot + swizzled<W * 2>(t, c), x + (whole ? row_at(t) * W + c * 8 : 0), whole);
  }
}
// The same for n consecutive rows of x from row `at`.
template <int ROWS, int W, int THREADS, typename T, typename I>
GDL_DEV void copy_rows(unsigned slot, const T* x, I at, int n) {
  copy_mapped_rows<ROWS, W, THREADS>(slot, x, [&](int t) { return at + (I)t; }, n);
}

// A ring of STAGES stage slots filled by cp.async: ring_start issues the
// first STAGES - 1 stages of `stages` (one commit group each, empty past
// the end); ring_next, at the top of stage j, waits for stage j's copies
// (every thread's: a barrier, after which every warp is also done with
// stage j - 1's slot) and issues stage j + STAGES - 1 into that slot.
// issue(j) copies stage j into slot j % STAGES; every thread calls both.
template <int STAGES, typename Issue> GDL_DEV void ring_start(int stages, const Issue& issue) {
#pragma unroll
  for (int j = 0; j < STAGES - 1; ++j) {
    if (j < stages) issue(j);
    cp_async_commit();
  }
}
template <int STAGES, typename Issue> GDL_DEV void ring_next(int j, int stages, const Issue& issue) {
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  if (j + STAGES - 1 < stages) issue(j + STAGES - 1);
  cp_async_commit();
}
}  // namespace att

template <int D, int DV, int P, int STAGES, int HEADS, typename I, typename T, typename TO, typename Len, typename Kv>
GDL_DEV void attention_group(const T* q, const T* k, const T* v, TO* out, Len len_source, Kv kv, I rows, I positions,
                             float scale, SplitScratch sk, unsigned char* ring, int least_split_stages) {
  using A = AttentionGroup<D, DV, T, P, STAGES, HEADS>;
  using Range = att::StreamRange<I, P>;
  static_assert(Kv::template stages_contiguous<P>(), "a stage is one run of positions of k and of v");
  constexpr int KS = D / 16;                // k steps of the scores
  constexpr int NT = A::kColumns / 8;       // 8-column output tiles of a warp
  constexpr bool kHigh = HEADS > 8;         // A's rows 8-15 hold heads

  if (blockDim.x != kAttentionThreads) __trap();  // a launch that breaks the LaunchRule
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;  // the fragment's row (head) and column pair
  const int slice = warp % A::kSlices, part = warp / A::kSlices;
  const int S = sk.splits;
  const I tasks = rows / (I)HEADS * S;
  const unsigned ring_at = bulk::shared_address(ring);
  const float q_scale = scale * att::kLog2e;

  for (I task = task_first<I>(); task < tasks; task += task_stride<I>()) {
    const I row = task / S * (I)HEADS, split = task % S;  // the task's first row: the others share its k, v and length
    const int len = len_source.get(row);
    const I valid = len <= 0 ? (I)0 : ((I)len < positions ? (I)len : positions);
    const Range range(valid, split, S, least_split_stages);
    TO* o = out + row * DV;
    if (att::task_without_work<HEADS>(o, valid, split, range.stages, (I)DV)) continue;
    const int stages = range.stages;
    // Stage j's positions held (0: none stored, a paged block outside the pool) and its first rows in k and v.
    auto stage_count = [&](int j, I& at) {
      at = kv.at(row, range.first(j));
      return at < 0 ? 0 : range.count(j);
    };
    auto issue = [&](int j) {
      I at;
      const int n = stage_count(j, at);
      const unsigned slot = ring_at + (unsigned)(j % STAGES) * A::stage_bytes;
      att::copy_rows<P, D, kAttentionThreads>(slot, k, at, n);
      att::copy_rows<P, DV, kAttentionThreads>(slot + A::k_bytes, v, at, n);
    };
    att::ring_start<STAGES>(stages, issue);

    // A's fragment of q for each k step: rows g and g + 8 (heads), elements 2 tq, 2 tq + 1 and 8 further.
    unsigned qa[KS][4];
    const unsigned* q_words = reinterpret_cast<const unsigned*>(q + row * D);
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      const int w = 8 * j + tq;
      qa[j][0] = g < HEADS ? __ldg(q_words + g * (D / 2) + w) : 0u;
      qa[j][2] = g < HEADS ? __ldg(q_words + g * (D / 2) + w + 4) : 0u;
      qa[j][1] = kHigh && g + 8 < HEADS ? __ldg(q_words + (g + 8) * (D / 2) + w) : 0u;
      qa[j][3] = kHigh && g + 8 < HEADS ? __ldg(q_words + (g + 8) * (D / 2) + w + 4) : 0u;
    }
    float m[2] = {-inf_f32(), -inf_f32()}, l[2] = {0.0f, 0.0f};  // rows g and g + 8
    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;

    const int p0 = slice * 16, r8 = lane & 7, tile = lane >> 3;  // ldmatrix: lane gives row r8 of tile `tile`
    for (int j = 0; j < stages; ++j) {
      att::ring_next<STAGES>(j, stages, issue);
      I at;
      const int n = stage_count(j, at);
      if (p0 >= n) continue;  // nothing of this slice in the stage (the same for the whole warp)
      const unsigned ks = ring_at + (unsigned)(j % STAGES) * A::stage_bytes, vs = ks + A::k_bytes;

      // 1. scores of positions p0 + 0..7 (s[0]) and p0 + 8..15 (s[1]); tiles: rows +0/+8 x chunks 2 j, 2 j + 1
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      const int k_row = p0 + ((tile >> 1) << 3) + r8;
#pragma unroll
      for (int jk = 0; jk < KS; ++jk) {
        unsigned b[4];
        ldmatrix_x4(b, ks + att::swizzled<D * 2>(k_row, 2 * jk + (tile & 1)));
        mma16816(s[0], qa[jk], b[0], b[1], T{});
        mma16816(s[1], qa[jk], b[2], b[3], T{});
      }
      // 2. online softmax; s[i][e]: row g (e < 2) or g + 8, position p0 + 8 i + 2 tq + e % 2
      float peak[2] = {-inf_f32(), -inf_f32()};
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[i][e] = p0 + 8 * i + 2 * tq + (e & 1) < n ? s[i][e] * q_scale : -inf_f32();
          peak[e >> 1] = fmaxf(peak[e >> 1], s[i][e]);
        }
      float rescale[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        peak[h] = fmaxf(peak[h], __shfl_xor_sync(0xffffffffu, peak[h], 1));
        peak[h] = fmaxf(peak[h], __shfl_xor_sync(0xffffffffu, peak[h], 2));
        const float m_new = fmaxf(m[h], peak[h]);  // finite: position p0 is valid
        rescale[h] = exp2f(m[h] - m_new);          // 0 while m is -inf, when l and acc are still 0
        m[h] = m_new;
        l[h] *= rescale[h];
      }
      float p[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const bool head = g + 8 * h < HEADS;  // rows past the group hold zeros of q: they weigh nothing
          p[i][e] = !head || s[i][e] == -inf_f32() ? 0.0f : exp2f(s[i][e] - m[h]);
          l[h] += p[i][e];
        }
      const unsigned pa[4] = {Vec16<T>::pack(p[0][0], p[0][1]), Vec16<T>::pack(p[0][2], p[0][3]),
                              Vec16<T>::pack(p[1][0], p[1][1]), Vec16<T>::pack(p[1][2], p[1][3])};
      // 3. O += P V over this warp's columns; tiles: positions +0/+8 x chunks c, c + 1
      const int v_row = p0 + ((tile & 1) << 3) + r8, first_chunk = part * (A::kColumns / 8);
#pragma unroll
      for (int i = 0; i < NT; i += 2) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] *= rescale[e >> 1], acc[i + 1][e] *= rescale[e >> 1];
        unsigned b[4];
        ldmatrix_x4_trans(b, vs + att::swizzled<DV * 2>(v_row, first_chunk + i + (tile >> 1)));
        mma16816(acc[i], pa, b[0], b[1], T{});
        mma16816(acc[i + 1], pa, b[2], b[3], T{});
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring

    // The warps' results per head: ml [slices][HEADS][2] (m, l), accs [slices][HEADS][DV].
    float* ml = reinterpret_cast<float*>(ring);
    float* accs = ml + A::kSlices * HEADS * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const int head = g + 8 * h;
      if (head >= HEADS) continue;
      if (part == 0 && tq == 0) {
        ml[(slice * HEADS + head) * 2] = m[h];
        ml[(slice * HEADS + head) * 2 + 1] = l[h];
      }
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        float* to = accs + (slice * HEADS + head) * DV + part * A::kColumns + 8 * i + 2 * tq;
        to[0] = acc[i][2 * h];
        to[1] = acc[i][2 * h + 1];
      }
    }
    __syncthreads();
    // Head h's (m, l) over the slices, and the weight of slice i's results in it.
    auto block_m = [&](int h) {
      float most = -inf_f32();
#pragma unroll
      for (int i = 0; i < A::kSlices; ++i) most = fmaxf(most, ml[(i * HEADS + h) * 2]);
      return most;
    };
    auto weight = [&](int i, int h, float most) {
      const float slice_m = ml[(i * HEADS + h) * 2];
      return slice_m == -inf_f32() ? 0.0f : exp2f(slice_m - most);
    };
    auto stats = [&](int h) {
      const float most = block_m(h);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < A::kSlices; ++i) sum += weight(i, h, most) * ml[(i * HEADS + h) * 2 + 1];
      return make_float2(most, sum);
    };
    auto value = [&](int h, I d) {
      const float most = block_m(h);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < A::kSlices; ++i) sum += weight(i, h, most) * accs[(i * HEADS + h) * DV + (int)d];
      return sum;
    };
    att::write_parts<HEADS>(o, value, stats, row, split, rows, S, (I)DV, sk, range.parts);
    __syncthreads();  // the next task's copies overwrite the ring
  }
}

}  // namespace gdl
