// The ops that move elements without arithmetic: transpose, reshape,
// slice (x[...] subscripts), concat, gather and take_along_axis, and the
// ones that make elements from their positions: arange and one_hot. A
// reshape, and a slice whose elements are one contiguous run, are views
// that run nothing (plan/schedule.cc); otherwise each is one elementwise
// kernel of its own whose element i is loaded from where it lies in the
// operand (or made from i; arange may join the elementwise kernel of its
// consumers, plan/fuse.cc).
//  - slice: a stop of -1 means "to the end of the axis" (a run-time dim
//    sliced whole); a run-time dim is sliced whole or by a constant range
//    below its lower bound.
//  - gather(table, ids, axis = 0): numpy's take; the result is
//    table.shape[:axis] + ids.shape + table.shape[axis + 1:], and ids
//    outside [0, V) (V the table's extent along the axis) give zeros.
//  - take_along_axis(x, index, axis = -1): numpy's take_along_axis,
//    torch.gather: index has x's rank, each dim off the axis equal to x's
//    or 1 (broadcast); out[..., j, ...] = x[..., index[..., j, ...], ...],
//    zero where the index is outside [0, V).
//  - arange: i32 start + i * step; its extent may be a run-time dim.
//  - one_hot: ids outside [0, n) give an all-zero row.
#include <algorithm>
#include <limits>
#include <optional>

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// --------------------------------------------------------------- type rules

TypeResult infer_transpose(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "transpose");
  if (!x) return TypeResult::failed();
  const int rank = x->rank();
  std::vector<int64_t> perm;
  if (!q.given(1)) {
    if (rank < 2)
      return q.error(0, "transpose swaps the last two dims, but " + q.text(*x) + " has fewer than two",
                     "give perm = [...] explicitly, or reshape first");
    for (int i = 0; i < rank; ++i) perm.push_back(i);
    std::swap(perm[static_cast<size_t>(rank - 1)], perm[static_cast<size_t>(rank - 2)]);
  } else {
    std::vector<int64_t> written;
    if (!q.integers(1, "perm", &written)) return TypeResult::failed();
    if (static_cast<int>(written.size()) != rank)
      return q.error(1, "perm has " + std::to_string(written.size()) + " entries for " + q.text(*x) + " of rank " +
                            std::to_string(rank),
                     "give one entry per dim");
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (int64_t k : written) {
      int64_t axis = k < 0 ? k + rank : k;
      if (axis < 0 || axis >= rank || seen[static_cast<size_t>(axis)])
        return q.error(1, "perm is not a permutation of the axes 0.." + std::to_string(rank - 1) + " of " + q.text(*x),
                       "list every axis exactly once");
      seen[static_cast<size_t>(axis)] = true;
      perm.push_back(axis);
    }
  }
  Shape s;
  for (int64_t a : perm) s.push_back(x->shape[static_cast<size_t>(a)]);
  q.attrs().ints = perm;
  return TensorType{x->dtype, s};
}

// The exact product of extents >= 1 as decimal text: a shape as written
// may hold more than 2^64 elements.
std::string product_text(const std::vector<int64_t>& extents) {
  constexpr uint32_t kBase = 1'000'000'000;
  std::vector<uint32_t> limbs{1};  // base 10^9, least significant first
  for (int64_t e : extents) {
    unsigned __int128 carry = 0;
    for (uint32_t& limb : limbs) {
      const unsigned __int128 v = static_cast<unsigned __int128>(limb) * static_cast<uint64_t>(e) + carry;
      limb = static_cast<uint32_t>(v % kBase);
      carry = v / kBase;
    }
    for (; carry != 0; carry /= kBase) limbs.push_back(static_cast<uint32_t>(carry % kBase));
  }
  std::string out = std::to_string(limbs.back());
  for (size_t i = limbs.size() - 1; i-- > 0;) {
    const std::string part = std::to_string(limbs[i]);
    out += std::string(9 - part.size(), '0') + part;
  }
  return out;
}

// "B*4096", the element count of a shape for messages.
std::string count_text(const TypeQuery& q, const Shape& s) {
  std::vector<int64_t> constants;
  std::vector<std::string> names;
  for (const Dim& d : s) {
    if (d.is_runtime())
      names.push_back(q.dims()[static_cast<size_t>(d.symbol)].name);
    else
      constants.push_back(d.extent);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += n + "*";
  return out + product_text(constants);
}

// Same count for every binding: equal constant products and the same
// run-time dims, each as often.
TypeResult infer_reshape(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "reshape");
  Shape s;
  if (!x || !q.shape(1, &s)) return TypeResult::failed();
  // The constant product, or nullopt past 2^62: x's own is at most 2^48
  // (the element bound), so a larger one can never match it.
  auto split = [](const Shape& sh) {
    std::optional<int64_t> constant = 1;
    std::vector<int> symbols;
    for (const Dim& d : sh) {
      if (d.is_runtime()) {
        symbols.push_back(d.symbol);
      } else if (d.extent != -1 && constant) {
        int64_t product = 0;
        if (__builtin_mul_overflow(*constant, d.extent, &product) || product > (int64_t{1} << 62))
          constant.reset();
        else
          constant = product;
      }
    }
    std::sort(symbols.begin(), symbols.end());
    return std::make_pair(constant, symbols);
  };
  // One -1: the extent that keeps the element count, when the run-time dims match and it divides.
  auto inferred = std::find(s.begin(), s.end(), Dim::constant(-1));
  if (inferred != s.end()) {
    const auto [have, have_symbols] = split(x->shape);
    const auto [rest, rest_symbols] = split(s);
    if (have_symbols != rest_symbols || !have || !rest || *have % *rest != 0)
      return q.error(kAtOp,
                     "reshape cannot work out the -1 in " + q.text(s) + ": " + q.text(*x) + " holds " +
                         count_text(q, x->shape) + " elements",
                     "the other dims must divide the element count and keep every run-time dim");
    *inferred = Dim::constant(*have / *rest);
  }
  const auto [want, want_symbols] = split(s);
  const auto [have, have_symbols] = split(x->shape);
  if (!want || !have || *want != *have || want_symbols != have_symbols)
    return q.error(kAtOp,
                   "reshape changes the element count: " + q.text(*x) + " holds " + count_text(q, x->shape) +
                       " elements, " + q.text(s) + " holds " + count_text(q, s),
                   "the new shape must hold the same elements for every value of the run-time dims");
  return TensorType{x->dtype, s};
}

// Bounds are [start, stop) per axis; a whole run-time axis is [0, -1). A
// constant range of a run-time dim must fit its smallest value.
TypeResult infer_slice(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "slice");
  std::vector<int64_t> b;
  if (!x || !q.integers(1, "bounds", &b)) return TypeResult::failed();
  if (b.size() != 2 * x->shape.size()) return q.error(1, "a slice needs one [start, stop] pair per axis");
  const std::vector<SubscriptForm> forms = q.subscript_forms();
  Shape s;
  for (size_t axis = 0; axis < x->shape.size(); ++axis) {
    const Dim& d = x->shape[axis];
    const int64_t start = b[2 * axis], stop = b[2 * axis + 1];
    const bool runtime = d.is_runtime();
    const int64_t limit = runtime ? q.dims()[static_cast<size_t>(d.symbol)].lo : d.extent;  // what every binding allows
    const std::string dim_name = runtime ? "dim " + q.dims()[static_cast<size_t>(d.symbol)].name : "extent " + std::to_string(d.extent);
    const std::string where = "axis " + std::to_string(axis) + " of " + q.text(*x);
    const std::string smallest = runtime ? q.dims()[static_cast<size_t>(d.symbol)].name + " can be as small as " +
                                               std::to_string(limit)
                                         : "";
    const auto slot = static_cast<int>(axis);
    const SubscriptForm form =
        axis < forms.size() ? forms[axis] : stop == -1 ? SubscriptForm::kToEnd : SubscriptForm::kRange;
    if (form == SubscriptForm::kIndex) {  // x[i]: one element of the axis
      if (start < 0 || start >= limit)
        return q.error(slot,
                       runtime ? "index " + std::to_string(start) + " may be outside " + where + ": " + smallest
                               : "index " + std::to_string(start) + " is outside " + where,
                       runtime ? "a run-time dim is only known to be at least its lower bound " + std::to_string(limit) +
                                     "; index below it"
                               : "indices run from 0 to " + std::to_string(d.extent - 1));
      s.push_back(Dim::constant(1));
      continue;
    }
    if (form == SubscriptForm::kToEnd && stop == -1) {  // to the end of the axis
      if (runtime && start != 0) {
        TypeError e = q.error(slot,
                              "slice " + std::to_string(start) + ": of run-time " + dim_name + " would have a run-time length",
                              "slice a run-time dim whole with ':', or with a constant range below its lower bound " +
                                  std::to_string(limit));
        e.at_start = true;
        return e;
      }
      if (start < 0 || (!runtime && start >= d.extent))
        return q.error(slot, "slice " + std::to_string(start) + ": is outside " + where);
      s.push_back(runtime ? d : Dim::constant(d.extent - start));
      continue;
    }
    if (const int symbol = runtime_length_symbol(stop); symbol >= 0) {  // x[0:T]: the first T elements of a static axis
      const DimInfo& length = q.dims().at(static_cast<size_t>(symbol));
      const std::string range = std::to_string(start) + ":" + length.name;
      if (runtime)
        return q.error(slot, "slice " + range + " of run-time " + dim_name + " would compare two run-time extents",
                       "slice a run-time dim whole with ':'");
      if (start != 0) {
        TypeError e = q.error(slot, "slice " + range + " would have the run-time length " + length.name + " - " +
                                        std::to_string(start) + ", which is not a dim",
                              "slice from 0 (x[0:" + length.name + "]), or shift with gather(x, " +
                                  std::to_string(start) + " + arange(" + length.name + "), axis = " + std::to_string(axis) + ")");
        e.at_start = true;
        return e;
      }
      if (length.hi > d.extent)
        return q.error(slot, "slice " + range + " may run past " + where + ": " + length.name + " can be as large as " +
                                 std::to_string(length.hi),
                       "a slice 0:T needs the upper bound of T <= " + std::to_string(d.extent));
      s.push_back(Dim::runtime(symbol));
      continue;
    }
    if (start < 0 || start >= stop || stop > limit) {
      const std::string range = std::to_string(start) + ":" + std::to_string(stop);
      const bool past_bound = runtime && start >= 0 && start < stop;
      return q.error(slot,
                     past_bound ? "slice " + range + " may run past " + where + ": " + smallest
                                : "slice " + range + " is outside " + where,
                     runtime ? "a run-time dim is only known to be at least its lower bound " + std::to_string(limit) +
                                   "; keep the slice below it, or use ':' for the whole dim"
                             : "a slice a:b needs 0 <= a < b <= " + std::to_string(d.extent));
    }
    s.push_back(Dim::constant(stop - start));
  }
  q.attrs().ints = b;
  return TensorType{x->dtype, s};
}

TypeResult infer_concat(TypeQuery& q) {
  const size_t parts = q.operand_count();
  std::vector<const TensorType*> types;
  for (size_t i = 0; i < parts; ++i) {
    const TensorType* t = q.tensor(i, "concat");
    if (!t) return TypeResult::failed();
    types.push_back(t);
  }
  const TensorType& first = *types[0];
  int axis = 0;
  if (q.given(parts)) {
    if (std::optional<TypeResult> bad = axis_of(q, parts, first.rank(), &axis)) return *bad;
  } else if (first.rank() == 0) {
    return q.error(0, "concat cannot join rank-0 values", "reshape them to [1] first");
  }
  const auto a = static_cast<size_t>(axis);
  Shape s = first.shape;
  int64_t total = 0;
  for (size_t i = 0; i < parts; ++i) {
    const TensorType& t = *types[i];
    const auto slot = static_cast<int>(i);
    if (t.dtype != first.dtype || t.rank() != first.rank())
      return q.error(slot, "concat arguments differ in dtype or rank: " + q.text(first) + " and " + q.text(t),
                     "cast or reshape them to agree");
    for (size_t k = 0; k < t.shape.size(); ++k)
      if (k != a && !(t.shape[k] == first.shape[k]))
        return q.error(slot,
                       "concat arguments differ in dim " + std::to_string(k) + ": " + q.text(first) + " and " + q.text(t),
                       "every dim except the concat axis must agree");
    if (t.shape[a].is_runtime() && parts > 1)
      return q.error(slot,
                     "cannot concat along the run-time dim '" + q.dims()[static_cast<size_t>(t.shape[a].symbol)].name + "'",
                     "concat along an axis of compile-time extent");
    total += t.shape[a].extent;
  }
  if (parts > 1) s[a] = Dim::constant(total);
  q.attrs().axis = axis;
  return TensorType{first.dtype, s};
}

// Operands 0 and 1 of gather and take_along_axis: a tensor of rank >= 1
// to read from and the i32 positions (called `index_name` in messages).
// nullopt when they fit, else what the rule returns.
std::optional<TypeResult> read_by_index(TypeQuery& q, const std::string& index_name, const TensorType** x,
                                        const TensorType** index) {
  *x = q.tensor(0, q.what());
  if (!*x) return TypeResult::failed();
  std::string described;
  *index = q.value(1, q.what(), DType::kI32, &described);
  if (!*index && described.empty()) return TypeResult::failed();
  if ((*x)->rank() == 0)
    return TypeResult(q.error(0, q.what() + " reads from a tensor of rank >= 1, got " + q.text(**x),
                              "reshape it to [1] first"));
  if (!*index || (*index)->dtype != DType::kI32)
    return TypeResult(q.error(1, q.what() + " " + index_name + " must be i32, got " +
                                     (*index ? q.text(**index) : described),
                              "convert with cast(" + index_name + ", i32)"));
  return std::nullopt;
}

TypeResult infer_gather(TypeQuery& q) {
  const TensorType *table = nullptr, *ids = nullptr;
  if (std::optional<TypeResult> bad = read_by_index(q, "ids", &table, &ids)) return *bad;
  int axis = 0;
  if (q.given(2))
    if (std::optional<TypeResult> bad = axis_of(q, 2, table->rank(), &axis)) return *bad;
  if (table->rank() - 1 + ids->rank() > kMaxRank)
    return q.error(1, "gather of " + q.text(*ids) + " from " + q.text(*table) + " would have rank " +
                          std::to_string(table->rank() - 1 + ids->rank()) + ", more than " + std::to_string(kMaxRank),
                   "flatten the ids or the table first");
  Shape s(table->shape.begin(), table->shape.begin() + axis);
  s.insert(s.end(), ids->shape.begin(), ids->shape.end());
  s.insert(s.end(), table->shape.begin() + axis + 1, table->shape.end());
  q.attrs().axis = axis;
  return TensorType{table->dtype, s};
}

// take_along_axis(x, index, axis = -1): x's shape with index's extent
// along the axis. Off the axis the index's dims equal x's or are 1, so the
// result's coordinates read the index by broadcasting.
TypeResult infer_take_along_axis(TypeQuery& q) {
  const TensorType *x = nullptr, *index = nullptr;
  if (std::optional<TypeResult> bad = read_by_index(q, "index", &x, &index)) return *bad;
  int axis = x->rank() - 1;
  if (q.given(2))
    if (std::optional<TypeResult> bad = axis_of(q, 2, x->rank(), &axis)) return *bad;
  if (index->rank() != x->rank())
    return q.error(1,
                   "take_along_axis needs an index of x's rank " + std::to_string(x->rank()) + ", got " +
                       q.text(*index) + " for " + q.text(*x),
                   "reshape the index, e.g. [B, 1] for one position per row of x [B, V]");
  Shape s = x->shape;
  for (size_t d = 0; d < s.size(); ++d) {
    if (d == static_cast<size_t>(axis)) {
      s[d] = index->shape[d];
      continue;
    }
    if (!(index->shape[d] == x->shape[d]) && !(index->shape[d] == Dim::constant(1)))
      return q.error(1,
                     "dim " + std::to_string(d) + " of the index " + q.text(*index) + " is neither x's (" +
                         q.text(*x) + ") nor 1",
                     "off axis " + std::to_string(axis) + " the index's dims equal x's or are 1 (broadcast)");
  }
  q.attrs().axis = axis;
  return TensorType{x->dtype, s};
}

// arange(n): 0, 1, ..., n - 1, where n is a compile-time integer or a
// run-time dim (the result then has that dim); arange(start, stop, step = 1):
// start, start + step, ... up to stop (exclusive), compile-time integers.
// The node keeps [start, stop, step] (stop 0 for a run-time dim).
TypeResult infer_arange(TypeQuery& q) {
  int64_t start = 0, step = 1;
  Dim stop;
  const bool range = q.given(1);
  if (range) {
    if (!q.integer(0, "start", &start) || !q.extent(1, "stop", 0, &stop)) return TypeResult::failed();
    if (q.given(2) && !q.integer(2, "step", &step)) return TypeResult::failed();
  } else if (!q.extent(0, "n", 0, &stop)) {
    return TypeResult::failed();
  }
  const int stop_slot = range ? 1 : 0;
  if (stop.is_runtime()) {
    const std::string name = q.dims()[static_cast<size_t>(stop.symbol)].name;
    if (start != 0 || step != 1)
      return q.error(stop_slot, "arange up to the run-time dim '" + name + "' counts from 0 by 1",
                     "shift and scale it instead: start + step * arange(" + name + ")");
    q.attrs().ints = {0, 0, 1};
    return TensorType{DType::kI32, {stop}};
  }
  constexpr int64_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  for (auto [slot, v] : {std::pair<int, int64_t>{0, start}, {stop_slot, stop.extent}})
    if (v < lo || v > hi)
      return q.error(slot, "arange's bounds must fit i32, got " + std::to_string(v), "arange makes i32 values");
  if (step == 0) return q.error(2, "arange's step must not be 0", "count up with a positive step, down with a negative one");
  const int64_t span = stop.extent - start;
  if (step > 0 ? span <= 0 : span >= 0)
    return q.error(kAtOp,
                   "arange from " + std::to_string(start) + " to " + std::to_string(stop.extent) + " by " +
                       std::to_string(step) + " holds no element",
                   "stop must lie past start in the direction of step");
  const int64_t count = (span + step + (step > 0 ? -1 : 1)) / step;  // ceil(span / step)
  q.attrs().ints = {start, stop.extent, step};
  return TensorType{DType::kI32, {Dim::constant(count)}};
}

// one_hot(ids, n, dtype = f32): ids.shape + [n], 1 where the last index
// equals the id.
TypeResult infer_one_hot(TypeQuery& q) {
  std::string described;
  const TensorType* ids = q.value(0, "one_hot", DType::kI32, &described);
  if (!ids && described.empty()) return TypeResult::failed();
  if (!ids || ids->dtype != DType::kI32)
    return q.error(0, "one_hot ids must be i32, got " + (ids ? q.text(*ids) : described), "convert them with cast(ids, i32)");
  int64_t n = 0;
  if (!q.integer(1, "n", &n)) return TypeResult::failed();
  if (n < 1) return q.error(1, "one_hot needs n >= 1 classes, got " + std::to_string(n), "n is the length of each row");
  DType dtype = DType::kF32;
  if (q.given(2) && !q.dtype(2, &dtype)) return TypeResult::failed();
  Shape s = ids->shape;
  s.push_back(Dim::constant(n));
  q.attrs().ints = {n};
  return TensorType{dtype, s};
}

std::string perm_attr(const ir::Attrs& a) { return "perm=" + ints_text(a.ints); }
std::string bounds_attr(const ir::Attrs& a) { return "bounds=" + ints_text(a.ints); }
std::string axis_attr(const ir::Attrs& a) { return "axis=" + std::to_string(a.axis); }
// gather's axis shows only when it is not the default 0.
std::string gather_attr(const ir::Attrs& a) { return a.axis == 0 ? "" : axis_attr(a); }
// The count is the result's extent.
std::string arange_attr(const ir::Attrs& a) {
  return a.ints.size() == 3 ? "start=" + std::to_string(a.ints[0]) + ", step=" + std::to_string(a.ints[2]) : "?";
}
std::string one_hot_attr(const ir::Attrs& a) { return "n=" + std::to_string(a.ints.empty() ? 0 : a.ints[0]); }

// ---------------------------------------------------------------- CPU rules

void eval_transpose(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const auto& perm = n.attrs.ints;
  GDL_INTERNAL_ASSERT(perm.size() == x.shape.size(), "transpose perm length differs from the rank");
  host::Extents in_strides = host::row_major_strides(x.shape), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    GDL_INTERNAL_ASSERT(out.shape[i] == x.shape[static_cast<size_t>(perm[i])], "transpose result shape");
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  host::copy_strided(x, 0, strides, out);
}

void eval_reshape(const Node&, const EvalArgs& in, HostTensor& out) {
  GDL_INTERNAL_ASSERT(in.values[0]->data.size() == out.data.size(), "reshape changes the element count");
  out.data = in.values[0]->data;
}

void eval_slice(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  const auto& bounds = n.attrs.ints;
  GDL_INTERNAL_ASSERT(bounds.size() == 2 * x.shape.size(), "slice needs one [start, stop] pair per axis");
  host::Extents strides = host::row_major_strides(x.shape);
  int64_t base = 0;
  for (size_t axis = 0; axis < x.shape.size(); ++axis) {
    const int64_t start = bounds[2 * axis];
    const int64_t written = bounds[2 * axis + 1];
    const int64_t stop = written == -1                              ? x.shape[axis]
                         : runtime_length_symbol(written) >= 0 ? start + out.shape[axis]  // x[a:T]
                                                               : written;
    GDL_INTERNAL_ASSERT(0 <= start && start <= stop && stop <= x.shape[axis] && out.shape[axis] == stop - start,
                        "slice bounds do not fit " + host::extents_text(x.shape));
    base += start * strides[axis];
  }
  host::copy_strided(x, base, strides, out);
}

void eval_concat(const Node& n, const EvalArgs& in, HostTensor& out) {
  host::AxisView v = host::view_around(out.shape, n.attrs.axis);
  int64_t written_axis = 0;
  for (const HostTensor* a : in.values) {
    host::AxisView av = host::view_around(a->shape, n.attrs.axis);
    GDL_INTERNAL_ASSERT(av.outer == v.outer && av.inner == v.inner, "concat operands disagree off the axis");
    for (int64_t o = 0; o < v.outer; ++o) {
      const double* src = a->data.data() + o * av.len * v.inner;
      std::copy(src, src + av.len * v.inner, out.data.data() + (o * v.len + written_axis) * v.inner);
    }
    written_axis += av.len;
  }
  GDL_INTERNAL_ASSERT(written_axis == v.len, "concat result length along the axis");
}

// The table as [outer, V, inner] around the axis: out[o, p, r] = table[o, ids[p], r].
void eval_gather(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &table = *in.values[0], &ids = *in.values[1];
  GDL_INTERNAL_ASSERT(!table.shape.empty(), "gather from a rank-0 table");
  const host::AxisView t = host::view_around(table.shape, n.attrs.axis);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == t.outer * ids.size() * t.inner, "gather result size");
  const int64_t rows = in.valid(0, static_cast<int>(n.attrs.axis));  // padded rows are out of range too
  for (int64_t o = 0; o < t.outer; ++o)
    for (int64_t p = 0; p < ids.size(); ++p) {
      auto id = static_cast<int64_t>(ids.data[static_cast<size_t>(p)]);
      if (id < 0 || id >= rows) continue;  // out of range (padding included): the row stays zero
      const double* src = table.data.data() + (o * t.len + id) * t.inner;
      std::copy(src, src + t.inner, out.data.data() + (o * ids.size() + p) * t.inner);
    }
}

void eval_take_along_axis(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &x = *in.values[0], &index = *in.values[1];
  const host::AxisView xv = host::view_around(x.shape, n.attrs.axis), ov = host::view_around(out.shape, n.attrs.axis);
  GDL_INTERNAL_ASSERT(xv.outer == ov.outer && xv.inner == ov.inner, "take_along_axis result differs from x off the axis");
  host::BroadcastCursor cursor(out.shape, {index.shape});  // the index element of each result element, in order
  const int64_t len = in.valid(0, static_cast<int>(n.attrs.axis));  // padded positions are out of range too
  for (int64_t o = 0; o < ov.outer; ++o)
    for (int64_t j = 0; j < ov.len; ++j)
      for (int64_t r = 0; r < ov.inner; ++r, cursor.next()) {
        const auto id = static_cast<int64_t>(index.data[static_cast<size_t>(cursor.offset(0))]);
        if (id >= 0 && id < len)  // out of range: stays zero
          out.data[static_cast<size_t>((o * ov.len + j) * ov.inner + r)] =
              x.data[static_cast<size_t>((o * xv.len + id) * xv.inner + r)];
      }
}

void eval_arange(const Node& n, const EvalArgs&, HostTensor& out) {
  const int64_t start = n.attrs.ints.at(0), step = n.attrs.ints.at(2);
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = static_cast<double>(start + static_cast<int64_t>(i) * step);
}

void eval_one_hot(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& ids = *in.values[0];
  const int64_t classes = n.attrs.ints.at(0);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == ids.size() * classes, "one_hot result size");
  for (int64_t i = 0; i < ids.size(); ++i) {
    const auto id = static_cast<int64_t>(ids.data[static_cast<size_t>(i)]);
    if (id >= 0 && id < classes) out.data[static_cast<size_t>(i * classes + id)] = 1;  // out of range: all zero
  }
}

// -------------------------------------------------------- element emitters

// Same elements in the same row-major order: a reshape, a single-operand
// concat, or any of these over a rank-0 operand.
std::string plain_copy(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0);
  std::string src = e.is_inline_leaf(x) ? e.inline_value(x) : "gdl::ld(" + e.pointer(x) + "[i])";
  if (!e.is_inline_leaf(x) && statically_one_element(e.g.node(x).type.shape)) src = "gdl::ld(" + e.pointer(x) + "[0])";
  return "    const " + std::string(compute_type(n.type.dtype)) + " r" + std::to_string(v) + " = " + src + ";\n";
}

bool over_rank0(const StepEmitter& e, ValueId v) { return e.g.node(e.g.node(v).args.at(0)).type.shape.empty(); }

std::string element_transpose(StepEmitter& e, ValueId v) {
  if (over_rank0(e, v)) return plain_copy(e, v);
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0);
  const std::string in = e.input_strides(x);
  const std::string st = "st" + std::to_string(v);
  std::string init;
  for (size_t i = 0; i < n.attrs.ints.size(); ++i) init += (i ? ", " : "") + in + ".s[" + std::to_string(n.attrs.ints[i]) + "]";
  e.prologue += "  const gdl::Strides<" + std::to_string(e.rank) + ", " + e.idx + "> " + st + "{{" + init +
                "}};  // input strides in result axis order\n";
  e.needs_coords = true;
  return "    const " + std::string(compute_type(n.type.dtype)) + " r" + std::to_string(v) + " = gdl::ld(" + e.pointer(x) +
         "[" + st + ".at(c)]);\n";
}

std::string element_slice(StepEmitter& e, ValueId v) {
  if (over_rank0(e, v)) return plain_copy(e, v);
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0);
  const Shape& xs = e.g.node(x).type.shape;
  const std::string in = e.input_strides(x);
  std::string base;
  for (size_t axis = 0; axis < xs.size(); ++axis) {
    int64_t start = n.attrs.ints.at(2 * axis);
    if (start != 0) base += (base.empty() ? "" : " + ") + std::to_string(start) + " * " + in + ".s[" + std::to_string(axis) + "]";
  }
  if (base.empty()) base = "0";
  const std::string b = "base" + std::to_string(v);
  e.prologue += "  const " + e.idx + " " + b + " = " + base + ";  // offset of the slice's first element\n";
  e.needs_coords = true;
  return "    const " + std::string(compute_type(n.type.dtype)) + " r" + std::to_string(v) + " = gdl::ld(" + e.pointer(x) +
         "[" + b + " + " + in + ".at(c)]);\n";
}

std::string element_concat(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  if (over_rank0(e, v) || n.args.size() == 1) return plain_copy(e, v);
  const std::string c_type = compute_type(n.type.dtype);
  const std::string r = "r" + std::to_string(v);
  const auto axis = static_cast<size_t>(n.attrs.axis);
  e.needs_coords = true;
  std::string out = "    " + c_type + " " + r + ";\n    {\n";
  out += "      gdl::Coords<" + std::to_string(e.rank) + ", " + e.idx + "> at = c;\n";
  out += "      const " + e.idx + " along = c.c[" + std::to_string(axis) + "];\n";
  std::string start;  // first index of operand k along the axis
  for (size_t k = 0; k < n.args.size(); ++k) {
    const ValueId a = n.args[k];
    const Shape& as = e.g.node(a).type.shape;
    const std::string end = start.empty() ? e.dim(as[axis]) : start + " + " + e.dim(as[axis]);
    const bool last = k + 1 == n.args.size();
    out += std::string("      ") + (k == 0 ? "" : "else ") + (last ? "" : "if (along < " + end + ") ") + "{\n";
    if (!start.empty()) out += "        at.c[" + std::to_string(axis) + "] = along - (" + start + ");\n";
    const std::string p = e.pointer(a);
    const std::string st = e.input_strides(a);
    out += "        " + r + " = gdl::ld(" + p + "[" + st + ".at(at)]);\n";
    out += "      }\n";
    start = end;
  }
  return out + "    }\n";
}

// The ids a gather or take_along_axis may read along `axis`: its extent, or
// for a run-time dim its valid count this run, so that under buckets an id
// into the padded rows reads zero, as past the end of an unpadded run.
std::string indexed_bound(StepEmitter& e, ValueId v, const Dim& axis) {
  if (!axis.is_runtime()) return e.dim(axis);
  const std::string name = "valid" + std::to_string(v);
  e.prologue += "  const int " + name + " = " + valid_count_expr(axis.symbol) + ";  // ids past it read zero\n";
  return name;
}

// Element i of the result is (outer, p, column) over [outer, ids, inner]:
// the table's element (outer, ids[p], column), or 0 for an id out of range.
std::string element_gather(StepEmitter& e, ValueId v) {
  if (over_rank0(e, v)) return plain_copy(e, v);
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0), ids = n.args.at(1);
  const Shape& xs = e.g.node(x).type.shape;
  const auto axis = static_cast<size_t>(n.attrs.axis);
  const std::string c_type = compute_type(n.type.dtype);
  const std::string inner = "inner" + std::to_string(v);
  e.prologue += "  const " + e.idx + " " + inner + " = " + e.product(xs, axis + 1, xs.size()) + ";  // elements per row\n";
  const std::string bound = indexed_bound(e, v, xs[axis]);
  const std::string table = e.pointer(x);
  std::string out = "    const " + e.idx + " row = i / " + inner + ";\n";
  out += "    const " + e.idx + " column = i - row * " + inner + ";\n";
  std::string id_at = "row", first = "";  // the id's position, and the table's offset of the outer index
  if (axis > 0) {
    const Shape& is = e.g.node(ids).type.shape;
    const std::string count = "ids" + std::to_string(v);
    e.prologue += "  const " + e.idx + " " + count + " = " + e.product(is, 0, is.size()) + ";  // ids per outer index\n";
    out += "    const " + e.idx + " outer = row / " + count + ";\n";
    out += "    const " + e.idx + " at = row - outer * " + count + ";\n";
    id_at = "at";
    first = "outer * " + e.dim(xs[axis]) + " + ";  // the layout's rows of the table
  }
  std::string id_expr;
  if (e.is_inline_leaf(ids)) id_expr = e.inline_value(ids);
  else if (statically_one_element(e.g.node(ids).type.shape)) id_expr = "gdl::ld(" + e.pointer(ids) + "[0])";
  else id_expr = "gdl::ld(" + e.pointer(ids) + "[" + id_at + "])";
  out += "    const int id = " + id_expr + ";\n";
  out += "    const " + c_type + " r" + std::to_string(v) + " = id >= 0 && id < " + bound + " ? gdl::ld(" + table + "[(" +
         first + "(" + e.idx + ")id) * " + inner + " + column]) : (" + c_type + ")0;  // out of range: 0\n";
  return out;
}

// The result's coordinates read the index (broadcast) and, with the axis's
// coordinate replaced by the id, x.
std::string element_take_along_axis(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  const ValueId x = n.args.at(0), index = n.args.at(1);
  const auto axis = std::to_string(n.attrs.axis);
  const std::string c_type = compute_type(n.type.dtype);
  const std::string in = e.input_strides(x);
  const std::string len = indexed_bound(e, v, e.g.node(x).type.shape[static_cast<size_t>(n.attrs.axis)]);
  e.needs_coords = true;
  std::string out = "    const int id = " + e.broadcast_load(index) + ";\n";
  out += "    const " + c_type + " r" + std::to_string(v) + " = id >= 0 && id < " + len + " ? gdl::ld(" + e.pointer(x) +
         "[" + in + ".at(c) + ((" + e.idx + ")id - c.c[" + axis + "]) * " + in + ".s[" + axis + "]]) : (" + c_type +
         ")0;  // out of range: 0\n";
  return out;
}

std::string element_arange(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  return "    const int r" + std::to_string(v) + " = (int)((long long)" + int_literal(n.attrs.ints.at(0)) +
         " + (long long)i * " + int_literal(n.attrs.ints.at(2)) + ");\n";
}

std::string element_one_hot(StepEmitter& e, ValueId v) {
  const Node& n = e.g.node(v);
  const ValueId ids = n.args.at(0);
  const std::string c_type = compute_type(n.type.dtype);
  const std::string classes = std::to_string(n.attrs.ints.at(0));
  std::string id_expr;
  if (e.is_inline_leaf(ids)) id_expr = e.inline_value(ids);
  else if (statically_one_element(e.g.node(ids).type.shape)) id_expr = "gdl::ld(" + e.pointer(ids) + "[0])";
  else id_expr = "gdl::ld(" + e.pointer(ids) + "[i / " + classes + "])";
  return "    const " + c_type + " r" + std::to_string(v) + " = " + id_expr + " == (int)(i % " + classes + ") ? (" +
         c_type + ")1 : (" + c_type + ")0;  // an id outside [0, " + classes + ") matches no column\n";
}

// -------------------------------------------------- padding and identities

// (constant product, run-time symbol) pairs in order; the last symbol is -1.
std::vector<std::pair<int64_t, int>> layout_groups(const Shape& s) {
  std::vector<std::pair<int64_t, int>> groups;
  int64_t constant = 1;
  for (const Dim& d : s) {
    if (!d.is_runtime()) {
      constant *= d.extent;
      continue;
    }
    groups.emplace_back(constant, d.symbol);
    constant = 1;
  }
  groups.emplace_back(constant, -1);
  return groups;
}

// A reshape keeps a padded layout meaningful only if it keeps every
// run-time dim where it was relative to the others: the same sequence of
// run-time dims, and the same product of constant extents before the
// first, between consecutive ones and after the last. Then an element's
// flat index is the same function of its coordinates before and after,
// whatever the capacities. Otherwise every run-time dim it holds is blocked.
void reshape_blocks_padding(const ir::Graph& g, const Node& n, const PaddingBlock& block) {
  const Shape& from = g.node(n.args.at(0)).type.shape;
  if (layout_groups(from) == layout_groups(n.type.shape)) return;
  for (const Dim& d : from)
    if (d.is_runtime())
      block(d.symbol, " moves dim " + g.dims[static_cast<size_t>(d.symbol)].name + " across other axes (" +
                          shape_to_string(from, g.dims) + " to " + shape_to_string(n.type.shape, g.dims) +
                          "): a padded layout would mix padding into valid rows");
}

// The type rule refuses it; kept for IR made by hand.
void concat_blocks_padding(const ir::Graph& g, const Node& n, const PaddingBlock& block) {
  const auto axis = static_cast<size_t>(n.attrs.axis);
  if (n.args.size() > 1 && axis < n.type.shape.size() && n.type.shape[axis].is_runtime())
    block(n.type.shape[axis].symbol, " joins along dim " + g.dims[static_cast<size_t>(n.type.shape[axis].symbol)].name);
}

bool identity_permutation(const Node& n, const Node& arg) {
  for (size_t i = 0; i < n.attrs.ints.size(); ++i)
    if (n.attrs.ints[i] != static_cast<int64_t>(i)) return false;
  return n.type == arg.type;
}

// --------------------------------------------------------- derivative rules

using autodiff::AdjointBuilder;

void vjp_reshape(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  d[0] = b.reshape(dy, b.shape(b.node(y).args[0]));
}
void vjp_transpose(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const std::vector<int64_t> perm = b.node(y).attrs.ints;
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  d[0] = b.transpose(dy, std::move(inverse));
}
// dx is dy where the slice read and zero elsewhere: dy written into zeros
// (update_slice) over x's compile-time axes that the slice cut. An axis
// whose extent changes between compile-time and run-time (x[0:T] of a fixed
// axis, x[0:2] of a run-time one) is widened after, by a gather of
// positions arange(x's extent) - start, which read zero outside the slice.
void vjp_slice(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  const Shape xs = b.shape(n.args[0]);
  Shape region = xs;
  std::vector<int64_t> bounds;
  std::vector<std::pair<size_t, int64_t>> widened;  // (axis, start)
  for (size_t axis = 0; axis < xs.size(); ++axis) {
    const Dim& out = n.type.shape[axis];
    const int64_t start = n.attrs.ints.at(2 * axis);
    if (out.is_runtime() != xs[axis].is_runtime()) {
      widened.emplace_back(axis, start);
      region[axis] = out;
      bounds.insert(bounds.end(), {0, out.is_runtime() ? -1 : out.extent});
    } else if (out.is_runtime()) {  // a run-time axis whole
      bounds.insert(bounds.end(), {0, -1});
    } else {
      bounds.insert(bounds.end(), {start, start + out.extent});
    }
  }
  ValueId dx = dy;
  if (!(region == n.type.shape)) {
    ir::Attrs at;
    at.ints = bounds;
    dx = b.emit(Op::kUpdateSlice, {b.zeros({n.type.dtype, region}), dy}, at);
  }
  for (auto [axis, start] : widened) {
    ir::Attrs along;
    along.axis = static_cast<int>(axis);
    ValueId positions = b.arange(xs[axis]);
    if (start != 0) positions = b.sub(positions, b.constant(static_cast<double>(start), DType::kI32));
    dx = b.emit(Op::kGather, {dx, positions}, along);
  }
  d[0] = dx;
}
// Each part takes its stretch of dy along the axis.
void vjp_concat(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  const auto axis = static_cast<size_t>(n.attrs.axis);
  int64_t offset = 0;
  for (size_t k = 0; k < n.args.size(); ++k) {
    const Shape part = b.shape(n.args[k]);
    std::vector<int64_t> bounds;
    for (size_t a = 0; a < part.size(); ++a) {
      if (a == axis) bounds.insert(bounds.end(), {offset, offset + part[a].extent});
      else if (part[a].is_runtime()) bounds.insert(bounds.end(), {0, -1});
      else bounds.insert(bounds.end(), {0, part[a].extent});
    }
    d[k] = n.args.size() == 1 ? dy : b.slice(dy, std::move(bounds));
    offset += part[axis].extent;
  }
}

// The rows read are added back where they were read from: dtable =
// scatter_add(zeros, ids, dy) along the axis, in f32 (ids outside the
// table read zero and add nothing). ids takes 1s for the table's dims
// before the axis, as scatter's index does.
void vjp_gather(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  const TensorType table = b.type(n.args[0]);
  for (const Dim& dim : table.shape)
    if (dim.is_runtime()) {
      b.refused = "whose table has a run-time dim (its gradient is added into a table of fixed shape)";
      return;
    }
  const Shape ids = b.shape(n.args[1]);
  for (size_t k = 1; k < ids.size(); ++k)
    if (ids[k].is_runtime()) {
      b.refused = "whose ids have a run-time dim after their first (its gradient's scatter_add takes one, first)";
      return;
    }
  Shape index(static_cast<size_t>(n.attrs.axis), Dim::constant(1));
  index.insert(index.end(), ids.begin(), ids.end());
  ir::Attrs along;
  along.axis = n.attrs.axis;
  const ValueId rows = b.reshape(n.args[1], index);
  // Rows read many times (a frequent token) add up in f32: in f16 or bf16
  // the small parts would round away against the sum.
  const ValueId sums = b.emit(Op::kScatterAdd, {b.zeros({DType::kF32, table.shape}), rows, b.cast(dy, DType::kF32)}, along);
  d[0] = b.cast(sums, table.dtype);
}
void vjp_take_along_axis(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ir::Node n = b.node(y);
  d[0] = take_along_axis_part(b, n.args[0], n.args[1], n.attrs.axis, dy);
}

OpDef movement(Op op, const char* callable, std::vector<const char*> params, InferFn infer, EvalFn eval, ElementFn element) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kDataMovement;
  d.callable = callable;
  d.params = std::move(params);
  d.operands = 1;
  d.required = d.params.size();
  d.min_args = d.max_args = 1;
  d.infer = infer;
  d.eval = eval;
  d.element = element;
  return d;
}

// gather and take_along_axis: what to read, the i32 positions, an optional axis.
OpDef indexed(Op op, const char* callable, std::vector<const char*> params, InferFn infer, EvalFn eval,
              ElementFn element, std::string (*attr_text)(const ir::Attrs&)) {
  OpDef d = movement(op, callable, std::move(params), infer, eval, element);
  d.operands = d.required = 2;
  d.min_args = d.max_args = 2;
  d.attr_text = attr_text;
  return d;
}

}  // namespace

// Each element read is added back at its index: along the axis,
// dx[e] = sum over j of dy[j] where index[j] == e. Written as a comparison
// with arange(E) over a new axis after it and a sum over the axis: no
// scatter, so x may have run-time dims and the sums keep a fixed order;
// it costs J x E per row, which for a cross-entropy's one pick (J = 1) is
// x's own size.
ValueId take_along_axis_part(AdjointBuilder& b, ValueId x_value, ValueId index, int axis_attr, ValueId dy) {
  const TensorType x = b.type(x_value);
  const auto axis = static_cast<size_t>(axis_attr);
  if (x.rank() + 1 > kMaxRank) {
    b.refused = "of a rank-" + std::to_string(x.rank()) + " x (its gradient needs one more dim, at most " +
                std::to_string(kMaxRank) + ")";
    return ir::kNoValue;
  }
  const auto widened = [&](ValueId v) {  // a 1 inserted after the axis
    Shape s = b.shape(v);
    s.insert(s.begin() + static_cast<ptrdiff_t>(axis) + 1, Dim::constant(1));
    return b.reshape(v, s);
  };
  Shape positions(static_cast<size_t>(x.rank()) + 1, Dim::constant(1));
  positions[axis + 1] = x.shape[axis];
  const ValueId along = b.reshape(b.arange(x.shape[axis]), positions);
  const ValueId picked = b.binary(Op::kEq, widened(index), along);
  const ValueId parts = b.where_else_zero(picked, widened(dy));
  return b.sum_to(b.reduce(Op::kSum, parts, {static_cast<int64_t>(axis)}, false), x.shape);
}

void add_data_movement_ops(std::vector<OpDef>& defs) {
  OpDef transpose = movement(Op::kTranspose, "transpose", {"x", "perm"}, infer_transpose, eval_transpose, element_transpose);
  transpose.required = 1;
  transpose.attr_text = perm_attr;
  transpose.is_identity = identity_permutation;
  transpose.vjp = vjp_transpose;
  defs.push_back(transpose);
  OpDef reshape = movement(Op::kReshape, "reshape", {"x", "shape"}, infer_reshape, eval_reshape, plain_copy);
  reshape.blocks_padding = reshape_blocks_padding;
  reshape.is_identity = same_type;
  reshape.vjp = vjp_reshape;
  defs.push_back(reshape);
  OpDef slice = movement(Op::kSlice, nullptr, {"x", "bounds"}, infer_slice, eval_slice, element_slice);  // x[...]
  slice.attr_text = bounds_attr;
  slice.vjp = vjp_slice;
  defs.push_back(slice);
  OpDef concat = movement(Op::kConcat, "concat", {"axis"}, infer_concat, eval_concat, element_concat);
  concat.operands = 0;  // variadic: concat(a, b, ..., axis = 0)
  concat.required = 0;
  concat.max_args = SIZE_MAX;
  concat.attr_text = axis_attr;
  concat.blocks_padding = concat_blocks_padding;
  concat.vjp = vjp_concat;
  defs.push_back(concat);
  OpDef gather = indexed(Op::kGather, "gather", {"table", "ids", "axis"}, infer_gather, eval_gather, element_gather,
                         gather_attr);
  gather.vjp = vjp_gather;
  defs.push_back(gather);
  OpDef take_along_axis = indexed(Op::kTakeAlongAxis, "take_along_axis", {"x", "index", "axis"}, infer_take_along_axis,
                                  eval_take_along_axis, element_take_along_axis, axis_attr);
  take_along_axis.vjp = vjp_take_along_axis;
  defs.push_back(take_along_axis);
  OpDef arange = movement(Op::kArange, "arange", {"start", "stop", "step"}, infer_arange, eval_arange, element_arange);
  arange.operands = 0;  // arange(n) or arange(start, stop, step)
  arange.required = 1;
  arange.min_args = arange.max_args = 0;
  arange.attr_text = arange_attr;
  arange.joins_elementwise = true;
  defs.push_back(arange);
  OpDef one_hot = movement(Op::kOneHot, "one_hot", {"ids", "n", "dtype"}, infer_one_hot, eval_one_hot, element_one_hot);
  one_hot.required = 2;
  one_hot.attr_text = one_hot_attr;
  defs.push_back(one_hot);
}

}  // namespace gdl::ops
