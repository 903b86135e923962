// Selection along one axis: argmax, argmin and topk.
//
// Every op picks in one strict order (Order): NaN before any number (the
// lower index first among NaNs), then the larger value for argmax and topk
// (the smaller for argmin), ties to the lower index. So argmax and argmin
// give the first NaN when there is one (as torch does), and topk lists its
// k elements best first.
//
// A tensor is viewed as [outer, len, inner] around the axis.
//  - inner == 1 (the last axis): one block per row; each thread keeps the
//    best of its positions, then the block combines them (block_best).
//    Where the rows leave the GPU idle a row is read in parts by several
//    blocks, and the last part to arrive picks from theirs
//    (compiler/plan/kernel_choice.h choose_selection).
//  - inner > 1: one thread per column, over the positions in order.
// topk along the last axis (one block per row) finds its k elements by a
// radix select on an order-preserving 32-bit key of each element (four
// passes of one byte each), gathers them (of the ties at the k-th key, the
// lower positions) and ranks the k in shared memory: five passes over the
// row whatever k is; a row in parts keeps each part's k best, and the last
// part to arrive selects from those. Along another axis (a thread per
// column) it picks in k rounds, each the best of the positions after the
// previous pick in the order; neither needs working memory.
//
// Padding (buckets): `valid` (<= len) is how many positions along the axis
// hold data; only those are candidates. topk's type rule keeps k <= valid.
#pragma once

#include "gdl_index.cuh"
#include "gdl_ops.cuh"
#include "gdl_split_tiles.cuh"

namespace gdl {

template <bool kLargest> struct Order {
  // Whether a at position ia comes before b at ib.
  static GDL_DEV bool before(float a, int ia, float b, int ib) {
    const bool na = is_nan(a), nb = is_nan(b);
    if (na || nb) return na && (!nb || ia < ib);
    if (a != b) return kLargest ? a > b : a < b;
    return ia < ib;
  }
  static GDL_DEV bool before(int a, int ia, int b, int ib) {
    if (a != b) return kLargest ? a > b : a < b;
    return ia < ib;
  }
};

// The value type an element is compared in: float, or int for i32.
template <typename T> struct select_value { typedef float type; };
template <> struct select_value<int> { typedef int type; };

// (v, i) becomes (ov, oi) when that comes first; i < 0 means no element yet.
template <typename O, typename A> GDL_DEV void keep_better(A& v, int& i, A ov, int oi) {
  if (oi >= 0 && (i < 0 || O::before(ov, oi, v, i))) v = ov, i = oi;
}

// Every thread of the block gets the first (v, i) in the order over all
// threads' (i < 0 when none had one). blockDim.x must be a multiple of 32
// (row_block's are); every thread of the block must call it.
template <typename O, typename A> GDL_DEV void block_best(A& v, int& i) {
  __shared__ A part_v[32];
  __shared__ int part_i[32];
  __shared__ A best_v;
  __shared__ int best_i;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (unsigned offset = 16; offset > 0; offset >>= 1) {
    const A ov = __shfl_down_sync(0xffffffffu, v, offset);
    const int oi = __shfl_down_sync(0xffffffffu, i, offset);
    keep_better<O>(v, i, ov, oi);
  }
  __syncthreads();  // readers of part_* and best_* from an earlier call are done
  if (lane == 0) part_v[warp] = v, part_i[warp] = i;
  __syncthreads();
  if (warp == 0) {
    i = lane < warps ? part_i[lane] : -1;
    v = part_v[lane < warps ? lane : 0];
#pragma unroll
    for (unsigned offset = 16; offset > 0; offset >>= 1) {
      const A ov = __shfl_down_sync(0xffffffffu, v, offset);
      const int oi = __shfl_down_sync(0xffffffffu, i, offset);
      keep_better<O>(v, i, ov, oi);
    }
    if (lane == 0) best_v = v, best_i = i;
  }
  __syncthreads();
  v = best_v;
  i = best_i;
}

// ------------------------------------------------------------ argmax, argmin
// A row's `valid` positions split into `parts` runs (the last ones shorter
// or empty): run `part`'s first position and its count.
template <typename I> struct RowPart {
  I first, count;
  GDL_DEV RowPart(I valid, I parts, I part) {
    const I chunk = (valid + parts - 1) / parts;
    first = min_of(part * chunk, valid);
    count = min_of(chunk, valid - first);
  }
};

// f(row, part, run) for every part of every row that this block takes (a
// task each); every thread of the block calls it.
template <typename I, typename F> GDL_DEV void for_each_row_part(I rows, I valid, I parts, F f) {
  for (I task = task_first<I>(); task < rows * parts; task += task_stride<I>())
    f(task / parts, task % parts, RowPart<I>(valid, parts, task % parts));
}

// x [rows, len] -> y [rows] (i32 positions). With sk.splits > 1 each row
// is read in that many parts by as many blocks, each keeping its part's
// best in the scratch, and the last of them to arrive picks the row's.
template <typename O, typename I, typename TX>
GDL_DEV void arg_rows(const TX* x, int* y, I rows, I len, I valid, SplitScratch sk) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  const I parts = (I)sk.splits;
  for_each_row_part(rows, valid, parts, [&](I row, I part, const RowPart<I>& run) {
    const TX* xr = x + row * len;
    A v = 0;
    int i = -1;
    for (I j = (I)threadIdx.x; j < run.count; j += (I)blockDim.x)
      keep_better<O>(v, i, (A)num(xr[run.first + j]), (int)(run.first + j));
    block_best<O>(v, i);
    if (parts > 1) {
      // The scratch: [rows][parts] values, then [rows][parts] positions (-1: an empty part).
      A* const part_v = reinterpret_cast<A*>(sk.partials) + row * parts;
      int* const part_i = reinterpret_cast<int*>(sk.partials) + rows * parts + row * parts;
      if (threadIdx.x == 0) __stcg(part_v + part, v), __stcg(part_i + part, i);
      if (!split_arrive(sk.tickets + row, (int)parts)) return;
      v = 0, i = -1;
      for (I p = (I)threadIdx.x; p < parts; p += (I)blockDim.x)
        keep_better<O>(v, i, __ldcg(part_v + p), __ldcg(part_i + p));
      block_best<O>(v, i);
    }
    if (threadIdx.x == 0) y[row] = i;
  });
}

// x [outer, len, inner] -> y [outer, inner]: a thread per column.
template <typename O, typename I, typename TX>
GDL_DEV void arg_cols(const TX* x, int* y, I outer, I len, I inner, I valid) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner;
    const TX* xc = x + o * len * inner + (c - o * inner);
    A v = 0;
    int i = -1;
    for (I r = 0; r < valid; ++r) keep_better<O>(v, i, (A)num(xc[r * inner]), (int)r);
    y[c] = i;
  }
}

// ------------------------------------------------------------ topk
// What topk writes for the pick at position i of a line of elements
// `stride` apart: the element itself, or its position.
struct TopValues {
  template <typename TX, typename I> static GDL_DEV TX of(const TX* line, int i, I stride) { return line[(I)i * stride]; }
};
struct TopIndices {
  template <typename TX, typename I> static GDL_DEV int of(const TX*, int i, I) { return i; }
};

// The most elements topk selects (compiler/ops/select.cc kMaxTopK).
constexpr int kTopKMax = 256;

// A key whose unsigned order is Order<true>'s for values: NaN above
// everything, then the larger value; -0 and +0 are one value (ties between
// equal keys go to the lower position, as Order's do).
GDL_DEV unsigned topk_key(float v) {
  if (is_nan(v)) return 0xffffffffu;
  if (v == 0.0f) v = 0.0f;
  const unsigned b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
GDL_DEV unsigned topk_key(int v) { return static_cast<unsigned>(v) ^ 0x80000000u; }

// Block-wide exclusive prefix count of `flag` in thread order, and the
// block's total. Every thread of the block calls it; blockDim.x is a
// multiple of 32.
GDL_DEV unsigned block_prefix_count(bool flag, unsigned* total) {
  __shared__ unsigned warp_counts[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // an earlier call's readers are done
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  unsigned before = __popc(ballot & ((1u << lane) - 1u)), all = 0;
  for (unsigned w = 0; w < warps; ++w) {
    if (w < warp) before += warp_counts[w];
    all += warp_counts[w];
  }
  *total = all;
  return before;
}

// The elements topk selects from, a line in position order: element j's
// key, whether it is a candidate at all, and its position in the row.
// TopkRow is a run of a row of x (the whole row, or one part of a split
// row); TopkCandidates is what the parts of a split row kept, part after
// part, each part's best first (so that the elements of any one key stay in
// position order), an absent element where a part held fewer than k.
template <typename A, typename TX, typename I> struct TopkRow {
  const TX* row;
  I first;  // the line's first position in the row
  GDL_DEV unsigned key(I j) const { return topk_key((A)num(row[first + j])); }
  GDL_DEV bool present(I) const { return true; }
  GDL_DEV int position(I j) const { return (int)(first + j); }
};
struct TopkCandidates {
  const unsigned* keys;
  const int* positions;  // -1: absent
  // Written by other blocks of this launch (split_arrive): read past L1.
  template <typename I> GDL_DEV unsigned key(I j) const { return __ldcg(keys + j); }
  template <typename I> GDL_DEV bool present(I j) const { return __ldcg(positions + j) >= 0; }
  template <typename I> GDL_DEV int position(I j) const { return __ldcg(positions + j); }
};

// f(key, j, present) for every element j < count of a line, this thread's
// share, four loads in flight at a time (a line is read by one block: its
// rate is the loads it keeps in flight). Every thread of a warp calls f the
// same number of times (present false past the end), so f may use
// warp-wide intrinsics.
template <typename Line, typename I, typename F>
GDL_DEV void for_each_key(const Line& line, I count, F f) {
  const I step = (I)blockDim.x;
  const I rounds = (count + 4 * step - 1) / (4 * step);
  for (I r = 0; r < rounds; ++r) {
    unsigned keys[4];
    bool present[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const I j = (r * 4 + (I)u) * step + (I)threadIdx.x;
      present[u] = j < count && line.present(j);
      keys[u] = present[u] ? line.key(j) : 0u;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) f(keys[u], (r * 4 + (I)u) * step + (I)threadIdx.x, present[u]);
  }
}

// topk_line's shared memory: one per kernel, whichever lines it selects from.
struct TopkShared {
  unsigned histogram[256];
  unsigned chosen_prefix, chosen_need;
  unsigned cand_key[kTopKMax];
  int cand_pos[kTopKMax];
  int equal_pos[kTopKMax];
  unsigned count_above, count_equal;
};

// The k best elements of a line of `count` (k at most its present ones),
// best first: emit(rank, key, position) for each rank in 0 .. k-1, by
// whichever thread holds it. Every thread of the block calls it.
template <typename Line, typename I, typename Emit>
GDL_DEV void topk_line(TopkShared& sh, const Line& line, I count, int k, Emit emit) {
  unsigned* const histogram = sh.histogram;
  unsigned* const cand_key = sh.cand_key;
  int* const cand_pos = sh.cand_pos;
  int* const equal_pos = sh.equal_pos;
  // 1. The k-th largest key, a byte at a time from the top: `need` is how
  // many of the elements that match `prefix` so far are still to be taken.
  unsigned prefix = 0, mask = 0, need = (unsigned)k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (unsigned b = threadIdx.x; b < 256u; b += blockDim.x) histogram[b] = 0;
    __syncthreads();
    for_each_key(line, count, [&](unsigned key, I, bool present) {
      const bool counted = present && (key & mask) == prefix;
      const unsigned digit = counted ? (key >> shift) & 255u : 256u;
      // Logits share their top bits: one atomic per distinct digit in the warp.
      const unsigned same = __match_any_sync(0xffffffffu, digit);  // for_each_key: every lane calls f
      if (counted && (__ffs(same) - 1) == (int)(threadIdx.x & 31u)) atomicAdd(&histogram[digit], (unsigned)__popc(same));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned above = 0;
      int b = 255;
      for (; b > 0 && above + histogram[b] < need; --b) above += histogram[b];
      sh.chosen_prefix = prefix | ((unsigned)b << shift);
      sh.chosen_need = need - above;
    }
    __syncthreads();
    prefix = sh.chosen_prefix;
    need = sh.chosen_need;
    mask |= 255u << shift;
  }
  // 2. The k elements: every key above the k-th (in any order: step 3
  // ranks them), and the first `need` elements in line order holding the
  // k-th key. Those are gathered unordered when at most kTopKMax elements
  // hold it (then ranked by position), else in line order, chunk by chunk.
  const unsigned above = (unsigned)k - need;
  if (threadIdx.x == 0) sh.count_above = 0, sh.count_equal = 0;
  __syncthreads();
  for_each_key(line, count, [&](unsigned key, I j, bool present) {
    if (present && key > prefix) {
      const unsigned at = atomicAdd(&sh.count_above, 1u);
      cand_key[at] = key, cand_pos[at] = line.position(j);
    } else if (present && key == prefix) {
      const unsigned at = atomicAdd(&sh.count_equal, 1u);
      if (at < (unsigned)kTopKMax) equal_pos[at] = line.position(j);
    }
  });
  __syncthreads();
  const unsigned equal = sh.count_equal;
  if (equal <= (unsigned)kTopKMax) {
    for (unsigned e = threadIdx.x; e < equal; e += blockDim.x) {
      const int pos = equal_pos[e];
      unsigned before = 0;
      for (unsigned f = 0; f < equal; ++f) before += equal_pos[f] < pos;
      if (before < need) cand_key[above + before] = prefix, cand_pos[above + before] = pos;
    }
  } else {
    unsigned taken = 0;
    for (I base = 0; base < count && taken < need; base += (I)blockDim.x) {  // block-uniform
      const I j = base + (I)threadIdx.x;
      const bool is_equal = j < count && line.present(j) && line.key(j) == prefix;
      unsigned total = 0;
      const unsigned at = taken + block_prefix_count(is_equal, &total);
      if (is_equal && at < need) cand_key[above + at] = prefix, cand_pos[above + at] = line.position(j);
      taken += total;
    }
  }
  __syncthreads();
  // 3. Each candidate's rank: the candidates before it in the order.
  for (int c = (int)threadIdx.x; c < k; c += (int)blockDim.x) {
    const unsigned key = cand_key[c];
    const int pos = cand_pos[c];
    int rank = 0;
    for (int d = 0; d < k; ++d) rank += cand_key[d] > key || (cand_key[d] == key && cand_pos[d] < pos);
    emit(rank, key, pos);
  }
  __syncthreads();  // the candidates are read before the next line writes them
}

// x [rows, len] -> y [rows, k], best first (topk is always largest first:
// O is Order<true>). With sk.splits > 1 each row is read in that many parts
// by as many blocks, each keeping its part's k best (or all it holds) in
// the scratch, and the last of them to arrive selects the row's k from
// those: a row that one block would read alone is read by a row's worth of
// SMs.
template <typename O, typename W, typename I, typename TX, typename TY>
GDL_DEV void topk_rows(const TX* x, TY* y, I rows, I len, I valid, int k, SplitScratch sk) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  __shared__ TopkShared shared;
  const I parts = (I)sk.splits;
  for_each_row_part(rows, valid, parts, [&](I row, I part, const RowPart<I>& run) {
    const TX* xr = x + row * len;
    auto write_row = [&](int rank, unsigned, int pos) { y[row * (I)k + rank] = W::of(xr, pos, (I)1); };
    if (parts == 1) {
      topk_line(shared, TopkRow<A, TX, I>{xr, 0}, valid, k, write_row);
      return;
    }
    // The scratch: [rows][parts * k] keys, then [rows][parts * k] positions.
    const I kept_per_row = parts * (I)k;
    unsigned* const keys = reinterpret_cast<unsigned*>(sk.partials) + row * kept_per_row;
    int* const positions = reinterpret_cast<int*>(sk.partials) + rows * kept_per_row + row * kept_per_row;
    const int kept = (int)min_of((I)k, run.count);
    unsigned* const part_keys = keys + part * (I)k;
    int* const part_positions = positions + part * (I)k;
    if (kept > 0)
      topk_line(shared, TopkRow<A, TX, I>{xr, run.first}, run.count, kept, [&](int rank, unsigned key, int pos) {
        __stcg(part_keys + rank, key);
        __stcg(part_positions + rank, pos);
      });
    for (int r = kept + (int)threadIdx.x; r < k; r += (int)blockDim.x) __stcg(part_positions + r, -1);
    if (!split_arrive(sk.tickets + row, (int)parts)) return;
    topk_line(shared, TopkCandidates{keys, positions}, kept_per_row, k, write_row);
  });
}

// x [outer, len, inner] -> y [outer, k, inner]: a thread per column.
template <typename O, typename W, typename I, typename TX, typename TY>
GDL_DEV void topk_cols(const TX* x, TY* y, I outer, I len, I inner, I valid, int k) {
  typedef typename select_value<TX>::type A;
  valid = min_of(valid, len);
  const I columns = outer * inner;
  const I threads = (I)blockDim.x;
  for (I c = task_first<I>() * threads + (I)threadIdx.x; c < columns; c += task_stride<I>() * threads) {
    const I o = c / inner, col = c - o * inner;
    const TX* xc = x + o * len * inner + col;
    A last_v = 0;
    int last_i = -1;
    for (int r = 0; r < k; ++r) {
      A v = 0;
      int i = -1;
      for (I j = 0; j < valid; ++j) {
        const A e = (A)num(xc[j * inner]);
        if (last_i < 0 || O::before(last_v, last_i, e, (int)j)) keep_better<O>(v, i, e, (int)j);
      }
      y[(o * (I)k + r) * inner + col] = W::of(xc, i, inner);
      last_v = v, last_i = i;
    }
  }
}

}  // namespace gdl
