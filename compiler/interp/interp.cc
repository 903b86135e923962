// The CPU reference interpreter.
//
// 1. validate_bindings: run-time dims inside their bounds, every input and
//    param bound with its dtype and concrete shape, no unknown names.
// 2. interpret: walk the nodes in topological order. Leaves come from the
//    bindings (inputs, params, run-time scalars) or from attrs.value
//    (constants, scalar defaults). Every other node goes through eval_node.
//    A value is released after its last use, so a long program holds only
//    its live values (params are read in place when already rounded).
// 3. eval_node: compute the op in double (reductions, matmul, softmax and
//    norms accumulate in double), then round every element to the node's
//    dtype with round_to_dtype.
//
// Semantic choices the lowering and the GPU kernels must match:
//  - i32 neg/abs/add/sub/mul/sum wrap around (two's complement), as 32-bit
//    integer arithmetic does on the GPU. i32 div truncates toward zero;
//    division by zero gives 0 and INT_MIN / -1 gives INT_MIN. i32 pow is
//    std::pow rounded like a cast (toward zero, saturating).
//  - min, max, reduce_max and relu propagate NaN.
//  - gelu is the exact erf form 0.5 * x * (1 + erf(x / sqrt(2))).
//  - Comparisons with NaN are false except `ne`; results are bool 0/1.
//  - slice: a stop of -1 means "to the end of the axis".
//  - layernorm/rmsnorm: args are x [, weight [, bias]]; weight and bias hold
//    either one element per position of the last axis or a single element.
//    The variance is the biased one (divide by the axis length).
//  - attention: the number of valid positions is clamp(len, 0, T); no valid
//    position gives a zero row. The output is q.shape[:-1] + [v.shape[-1]].
//  - gather: ids outside [0, V) give a zero row.
//
// Capacity mode (Bindings::valid_dims, the buckets policy):
// values are laid out at the capacity dims; eval_node gets the valid extents
// of each argument and combines only valid positions along the combined
// axis: reductions and softmax over it, norms over the last axis, matmul's
// K, attention's positions (len is clamped to the valid T). Positions past
// the valid count are computed from the padding like any other (softmax of
// a padded position uses the valid rows' peak and sum), so they hold
// garbage that no valid result reads.
#include "interp/interp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "passes/padding.h"
#include "internal_error.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using Extents = std::vector<int64_t>;

int64_t product(const Extents& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) n *= s[i];
  return n;
}

Extents row_major_strides(const Extents& shape) {
  Extents strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::string extents_text(const Extents& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

HostTensor make_tensor(DType dtype, Extents shape) {
  HostTensor t;
  t.dtype = dtype;
  t.data.assign(static_cast<size_t>(product(shape)), 0.0);
  t.shape = std::move(shape);
  return t;
}

// Two's complement wrap-around of an integer result to 32 bits.
double wrap_i32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

// Visits the indices of `out_shape` in row-major order and keeps, for each
// operand, the flat offset of the element that numpy broadcasting maps there.
class BroadcastCursor {
 public:
  BroadcastCursor(const Extents& out_shape, const std::vector<Extents>& operand_shapes)
      : out_shape_(out_shape), index_(out_shape.size(), 0), offsets_(operand_shapes.size(), 0) {
    for (const Extents& s : operand_shapes) {
      GDL_INTERNAL_ASSERT(s.size() <= out_shape.size(), "broadcast operand has a higher rank than the result");
      Extents own = row_major_strides(s);
      Extents aligned(out_shape.size(), 0);
      size_t lead = out_shape.size() - s.size();
      for (size_t i = 0; i < s.size(); ++i) {
        GDL_INTERNAL_ASSERT(s[i] == out_shape[lead + i] || s[i] == 1,
                            "shape " + extents_text(s) + " does not broadcast to " + extents_text(out_shape));
        aligned[lead + i] = s[i] == 1 ? 0 : own[i];
      }
      strides_.push_back(std::move(aligned));
    }
  }

  int64_t offset(size_t operand) const { return offsets_[operand]; }

  void next() {
    for (size_t axis = out_shape_.size(); axis-- > 0;) {
      ++index_[axis];
      for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] += strides_[o][axis];
      if (index_[axis] < out_shape_[axis]) return;
      for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] -= strides_[o][axis] * out_shape_[axis];
      index_[axis] = 0;
    }
  }

 private:
  Extents out_shape_;
  Extents index_;
  Extents offsets_;
  std::vector<Extents> strides_;
};

// out[i] = in[base + sum_k index_k * strides[k]] over the indices of
// out.shape: the common core of transpose and slice.
void copy_strided(const HostTensor& in, int64_t base, const Extents& strides, HostTensor& out) {
  Extents index(out.shape.size(), 0);
  int64_t offset = base;
  for (double& v : out.data) {
    v = in.data[static_cast<size_t>(offset)];
    for (size_t axis = out.shape.size(); axis-- > 0;) {
      ++index[axis];
      offset += strides[axis];
      if (index[axis] < out.shape[axis]) break;
      offset -= strides[axis] * out.shape[axis];
      index[axis] = 0;
    }
  }
}

// ------------------------------------------------------------- elementwise

double apply_unary(Op op, double x, DType dtype) {
  bool integer = dtype == DType::kI32;
  switch (op) {
    case Op::kNeg: return integer ? wrap_i32(-static_cast<int64_t>(x)) : -x;
    case Op::kNot: return x == 0 ? 1.0 : 0.0;
    case Op::kExp: return std::exp(x);
    case Op::kLog: return std::log(x);
    case Op::kSqrt: return std::sqrt(x);
    case Op::kRsqrt: return 1.0 / std::sqrt(x);
    case Op::kTanh: return std::tanh(x);
    case Op::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Op::kRelu: return x < 0 ? 0.0 : x;  // NaN stays NaN
    case Op::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Op::kSilu: return x / (1.0 + std::exp(-x));
    case Op::kAbs: return integer ? wrap_i32(std::abs(static_cast<int64_t>(x))) : std::fabs(x);
    case Op::kCast: return x;  // the final rounding to the result dtype is the cast
    default: break;
  }
  internal_error(__FILE__, __LINE__, std::string("not a unary op: ") + ir::op_name(op));
}

double apply_binary(Op op, double a, double b, DType operand_dtype) {
  bool integer = operand_dtype == DType::kI32;
  // Only i32 operands are converted: casting NaN or a huge float is undefined.
  int64_t ia = integer ? static_cast<int64_t>(a) : 0, ib = integer ? static_cast<int64_t>(b) : 0;
  switch (op) {
    case Op::kAdd: return integer ? wrap_i32(ia + ib) : a + b;
    case Op::kSub: return integer ? wrap_i32(ia - ib) : a - b;
    case Op::kMul: return integer ? wrap_i32(ia * ib) : a * b;
    case Op::kDiv:
      if (!integer) return a / b;
      return ib == 0 ? 0.0 : wrap_i32(ia / ib);  // C truncation; x / 0 is defined as 0
    case Op::kMin: return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
    case Op::kMax: return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
    case Op::kPow: return std::pow(a, b);
    case Op::kLt: return a < b;
    case Op::kLe: return a <= b;
    case Op::kGt: return a > b;
    case Op::kGe: return a >= b;
    case Op::kEq: return a == b;
    case Op::kNe: return a != b;
    case Op::kAnd: return a != 0 && b != 0;
    case Op::kOr: return a != 0 || b != 0;
    default: break;
  }
  internal_error(__FILE__, __LINE__, std::string("not a binary op: ") + ir::op_name(op));
}

void eval_unary(const Node& n, const HostTensor& x, HostTensor& out) {
  GDL_INTERNAL_ASSERT(x.shape == out.shape, "unary op changes the shape");
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = apply_unary(n.op, x.data[i], x.dtype);
}

void eval_binary(const Node& n, const HostTensor& a, const HostTensor& b, HostTensor& out) {
  BroadcastCursor cursor(out.shape, {a.shape, b.shape});
  for (double& v : out.data) {
    v = apply_binary(n.op, a.data[cursor.offset(0)], b.data[cursor.offset(1)], a.dtype);
    cursor.next();
  }
}

void eval_where(const HostTensor& cond, const HostTensor& a, const HostTensor& b, HostTensor& out) {
  BroadcastCursor cursor(out.shape, {cond.shape, a.shape, b.shape});
  for (double& v : out.data) {
    v = cond.data[cursor.offset(0)] != 0 ? a.data[cursor.offset(1)] : b.data[cursor.offset(2)];
    cursor.next();
  }
}

// ---------------------------------------------------------------- matmul

// [..., M, K] @ [..., K, N]: for each batch, row i of the result is the sum
// over k < k_valid of a[i, k] * b[k, :], accumulated in double in increasing
// k (the i-k-j order walks b row by row, which keeps large weights
// cache-friendly).
void eval_matmul(const HostTensor& a, const HostTensor& b, HostTensor& out, int64_t k_valid) {
  size_t ra = a.shape.size(), rb = b.shape.size(), ro = out.shape.size();
  GDL_INTERNAL_ASSERT(ra >= 2 && rb >= 2 && ro >= 2, "matmul needs rank >= 2");
  int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  GDL_INTERNAL_ASSERT(b.shape[rb - 2] == k && out.shape[ro - 2] == m && out.shape[ro - 1] == n,
                      "matmul shapes disagree: " + extents_text(a.shape) + " @ " + extents_text(b.shape) +
                          " -> " + extents_text(out.shape));
  Extents batch(out.shape.begin(), out.shape.end() - 2);
  BroadcastCursor cursor(batch, {Extents(a.shape.begin(), a.shape.end() - 2),
                                 Extents(b.shape.begin(), b.shape.end() - 2)});
  std::vector<double> row(static_cast<size_t>(n));
  int64_t batches = product(batch);
  for (int64_t bi = 0; bi < batches; ++bi, cursor.next()) {
    const double* pa = a.data.data() + cursor.offset(0) * m * k;
    const double* pb = b.data.data() + cursor.offset(1) * k * n;
    double* po = out.data.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < k_valid; ++kk) {
        double aik = pa[i * k + kk];
        const double* brow = pb + kk * n;
        for (int64_t j = 0; j < n; ++j) row[j] += aik * brow[j];
      }
      std::copy(row.begin(), row.end(), po + i * n);
    }
  }
}

// ------------------------------------------------------------ reductions

// A tensor viewed as [outer, len, inner] around one axis.
struct AxisView {
  int64_t outer, len, inner;
};
AxisView view_around(const Extents& shape, int axis) {
  GDL_INTERNAL_ASSERT(axis >= 0 && static_cast<size_t>(axis) < shape.size(), "axis out of range");
  auto a = static_cast<size_t>(axis);
  return {product(shape, 0, a), shape[a], product(shape, a + 1)};
}

// Over the first `valid` positions of the axis.
void eval_reduce(const Node& n, const HostTensor& x, HostTensor& out, int64_t valid) {
  AxisView v = view_around(x.shape, n.attrs.axis);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == v.outer * v.inner, "reduction result size");
  bool integer = x.dtype == DType::kI32;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      const double* p = x.data.data() + o * v.len * v.inner + in;
      double result;
      if (n.op == Op::kReduceMax) {
        result = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < valid; ++i) {
          double e = p[i * v.inner];
          if (std::isnan(e)) { result = e; break; }
          result = std::max(result, e);
        }
      } else if (integer) {
        int64_t total = 0;
        for (int64_t i = 0; i < valid; ++i) total += static_cast<int64_t>(p[i * v.inner]);
        result = n.op == Op::kSum ? wrap_i32(total) : static_cast<double>(total) / static_cast<double>(valid);
      } else {
        double total = 0;
        for (int64_t i = 0; i < valid; ++i) total += p[i * v.inner];
        result = n.op == Op::kSum ? total : total / static_cast<double>(valid);
      }
      out.data[static_cast<size_t>(o * v.inner + in)] = result;
    }
  }
}

// Peak and sum over the first `valid` positions of the axis; every position
// (padding too) gets exp(x - peak) / sum.
void eval_softmax(const Node& n, const HostTensor& x, HostTensor& out, int64_t valid) {
  AxisView v = view_around(x.shape, n.attrs.axis);
  std::vector<double> e(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      int64_t base = o * v.len * v.inner + in;
      double peak = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < valid; ++i) peak = std::max(peak, x.data[base + i * v.inner]);
      double total = 0;
      for (int64_t i = 0; i < v.len; ++i) e[i] = std::exp(x.data[base + i * v.inner] - peak);
      for (int64_t i = 0; i < valid; ++i) total += e[i];
      for (int64_t i = 0; i < v.len; ++i) out.data[base + i * v.inner] = e[i] / total;
    }
  }
}

// weight or bias of a norm: one element per position of the last axis, or a
// single element for all of them.
double per_column(const HostTensor* t, int64_t column, double absent) {
  if (!t) return absent;
  if (t->data.size() == 1) return t->data[0];
  return t->data[static_cast<size_t>(column)];
}

// Statistics over the first `valid` columns; every column is normalised.
void eval_norm(const Node& n, std::span<const HostTensor* const> args, HostTensor& out, int64_t valid) {
  const HostTensor& x = *args[0];
  const HostTensor* weight = args.size() > 1 ? args[1] : nullptr;
  const HostTensor* bias = args.size() > 2 ? args[2] : nullptr;
  GDL_INTERNAL_ASSERT(!x.shape.empty(), "norm of a rank-0 value");
  int64_t cols = x.shape.back(), rows = product(x.shape) / std::max<int64_t>(cols, 1);
  for (const HostTensor* t : {weight, bias})
    GDL_INTERNAL_ASSERT(!t || t->data.size() == 1 || static_cast<int64_t>(t->data.size()) == cols,
                        "norm weight/bias length differs from the last axis");
  double eps = n.attrs.value;
  for (int64_t r = 0; r < rows; ++r) {
    const double* p = x.data.data() + r * cols;
    double* q = out.data.data() + r * cols;
    double mean = 0, second = 0;
    if (n.op == Op::kLayerNorm) {
      for (int64_t c = 0; c < valid; ++c) mean += p[c];
      mean /= static_cast<double>(valid);
    }
    for (int64_t c = 0; c < valid; ++c) second += (p[c] - mean) * (p[c] - mean);
    double inv = 1.0 / std::sqrt(second / static_cast<double>(valid) + eps);
    for (int64_t c = 0; c < cols; ++c)
      q[c] = (p[c] - mean) * inv * per_column(weight, c, 1.0) + per_column(bias, c, 0.0);
  }
}

// ------------------------------------------------------------ data movement

void eval_transpose(const Node& n, const HostTensor& x, HostTensor& out) {
  const auto& perm = n.attrs.ints;
  GDL_INTERNAL_ASSERT(perm.size() == x.shape.size(), "transpose perm length differs from the rank");
  Extents in_strides = row_major_strides(x.shape), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    GDL_INTERNAL_ASSERT(out.shape[i] == x.shape[static_cast<size_t>(perm[i])], "transpose result shape");
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  copy_strided(x, 0, strides, out);
}

void eval_slice(const Node& n, const HostTensor& x, HostTensor& out) {
  const auto& bounds = n.attrs.ints;
  GDL_INTERNAL_ASSERT(bounds.size() == 2 * x.shape.size(), "slice needs one [start, stop] pair per axis");
  Extents strides = row_major_strides(x.shape);
  int64_t base = 0;
  for (size_t axis = 0; axis < x.shape.size(); ++axis) {
    int64_t start = bounds[2 * axis];
    int64_t stop = bounds[2 * axis + 1] == -1 ? x.shape[axis] : bounds[2 * axis + 1];
    GDL_INTERNAL_ASSERT(0 <= start && start <= stop && stop <= x.shape[axis] && out.shape[axis] == stop - start,
                        "slice bounds do not fit " + extents_text(x.shape));
    base += start * strides[axis];
  }
  copy_strided(x, base, strides, out);
}

void eval_concat(const Node& n, std::span<const HostTensor* const> args, HostTensor& out) {
  AxisView v = view_around(out.shape, n.attrs.axis);
  int64_t written_axis = 0;
  for (const HostTensor* a : args) {
    AxisView av = view_around(a->shape, n.attrs.axis);
    GDL_INTERNAL_ASSERT(av.outer == v.outer && av.inner == v.inner, "concat operands disagree off the axis");
    for (int64_t o = 0; o < v.outer; ++o) {
      const double* src = a->data.data() + o * av.len * v.inner;
      std::copy(src, src + av.len * v.inner, out.data.data() + (o * v.len + written_axis) * v.inner);
    }
    written_axis += av.len;
  }
  GDL_INTERNAL_ASSERT(written_axis == v.len, "concat result length along the axis");
}

void eval_gather(const HostTensor& table, const HostTensor& ids, HostTensor& out) {
  GDL_INTERNAL_ASSERT(!table.shape.empty(), "gather from a rank-0 table");
  int64_t rows = table.shape[0], row_size = product(table.shape, 1);
  GDL_INTERNAL_ASSERT(static_cast<int64_t>(out.data.size()) == ids.size() * row_size, "gather result size");
  for (int64_t i = 0; i < ids.size(); ++i) {
    auto id = static_cast<int64_t>(ids.data[static_cast<size_t>(i)]);
    if (id < 0 || id >= rows) continue;  // out of range: the row stays zero
    const double* src = table.data.data() + id * row_size;
    std::copy(src, src + row_size, out.data.data() + i * row_size);
  }
}

// q [..., NH, D], k and v [..., NH, T, D(v)], len rank 0: for every query row,
// softmax(scale * q.k_t) over t < clamp(len, 0, t_valid), weighted sum of v_t.
void eval_attention(const Node& n, std::span<const HostTensor* const> args, HostTensor& out, int64_t t_valid) {
  const HostTensor &q = *args[0], &k = *args[1], &v = *args[2], &len = *args[3];
  size_t rq = q.shape.size();
  GDL_INTERNAL_ASSERT(rq >= 2 && k.shape.size() == rq + 1 && v.shape.size() == rq + 1 && len.data.size() == 1,
                      "attention operand ranks");
  int64_t d = q.shape.back(), t_max = k.shape[rq - 1], dv = v.shape.back();
  GDL_INTERNAL_ASSERT(Extents(q.shape.begin(), q.shape.end() - 1) == Extents(k.shape.begin(), k.shape.end() - 2) &&
                          Extents(k.shape.begin(), k.shape.end() - 1) == Extents(v.shape.begin(), v.shape.end() - 1) &&
                          k.shape.back() == d,
                      "attention shapes disagree");
  int64_t valid = std::clamp<int64_t>(static_cast<int64_t>(len.data[0]), 0, std::min(t_max, t_valid));
  int64_t rows = product(q.shape) / std::max<int64_t>(d, 1);
  double scale = n.attrs.value;
  std::vector<double> score(static_cast<size_t>(valid));
  for (int64_t r = 0; r < rows; ++r) {
    const double* qr = q.data.data() + r * d;
    const double* kr = k.data.data() + r * t_max * d;
    const double* vr = v.data.data() + r * t_max * dv;
    double* o = out.data.data() + r * dv;  // stays zero when no position is valid
    double peak = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < valid; ++t) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += qr[i] * kr[t * d + i];
      score[t] = dot * scale;
      peak = std::max(peak, score[t]);
    }
    double total = 0;
    for (int64_t t = 0; t < valid; ++t) total += score[t] = std::exp(score[t] - peak);
    for (int64_t t = 0; t < valid; ++t)
      for (int64_t i = 0; i < dv; ++i) o[i] += score[t] / total * vr[t * dv + i];
  }
}

// ---------------------------------------------------------------- leaves

bool is_bound_leaf(Op op) { return op == Op::kInput || op == Op::kParam; }
const char* role_name(Op op) { return op == Op::kInput ? "input" : op == Op::kParam ? "param" : "scalar"; }

bool already_rounded(const HostTensor& t) {
  for (double v : t.data) {
    double r = round_to_dtype(v, t.dtype);
    if (!(r == v || (std::isnan(r) && std::isnan(v)))) return false;
  }
  return true;
}

HostTensor filled(DType dtype, Extents shape, double value) {
  HostTensor t = make_tensor(dtype, std::move(shape));
  std::fill(t.data.begin(), t.data.end(), round_to_dtype(value, dtype));
  return t;
}

}  // namespace

HostTensor eval_node(const ir::Node& node, std::span<const HostTensor* const> args,
                     const std::vector<int64_t>& dims, std::span<const std::vector<int64_t>> arg_valid) {
  HostTensor out = make_tensor(node.type.dtype, concrete_shape(node.type.shape, dims));
  auto arity = [&](size_t lo, size_t hi) {
    GDL_INTERNAL_ASSERT(args.size() >= lo && args.size() <= hi,
                        std::string(ir::op_name(node.op)) + ": wrong number of arguments");
    for (const HostTensor* a : args) GDL_INTERNAL_ASSERT(a != nullptr, "missing argument value");
    GDL_INTERNAL_ASSERT(arg_valid.empty() || arg_valid.size() == args.size(), "valid extents for some arguments only");
  };
  // The valid extent of axis `axis` (negative: from the end) of argument i.
  auto valid = [&](size_t i, int axis) {
    const std::vector<int64_t>& shape = arg_valid.empty() ? args[i]->shape : arg_valid[i];
    auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int>(shape.size()) : axis);
    GDL_INTERNAL_ASSERT(a < shape.size() && shape[a] <= args[i]->shape[a], "valid extent outside the value");
    return shape[a];
  };
  switch (ir::op_info(node.op).cls) {
    case ir::OpClass::kLeaf:
      internal_error(__FILE__, __LINE__, "eval_node called on a leaf");
    case ir::OpClass::kUnary: arity(1, 1); eval_unary(node, *args[0], out); break;
    case ir::OpClass::kBinary: arity(2, 2); eval_binary(node, *args[0], *args[1], out); break;
    case ir::OpClass::kWhere: arity(3, 3); eval_where(*args[0], *args[1], *args[2], out); break;
    case ir::OpClass::kStructured:
      switch (node.op) {
        case Op::kMatMul: arity(2, 2); eval_matmul(*args[0], *args[1], out, valid(0, -1)); break;
        case Op::kSum: case Op::kMean: case Op::kReduceMax:
          arity(1, 1);
          eval_reduce(node, *args[0], out, valid(0, node.attrs.axis));
          break;
        case Op::kSoftmax: arity(1, 1); eval_softmax(node, *args[0], out, valid(0, node.attrs.axis)); break;
        case Op::kLayerNorm: arity(1, 3); eval_norm(node, args, out, valid(0, -1)); break;
        case Op::kRmsNorm: arity(1, 2); eval_norm(node, args, out, valid(0, -1)); break;
        case Op::kTranspose: arity(1, 1); eval_transpose(node, *args[0], out); break;
        case Op::kReshape:
          arity(1, 1);
          GDL_INTERNAL_ASSERT(args[0]->data.size() == out.data.size(), "reshape changes the element count");
          out.data = args[0]->data;
          break;
        case Op::kSlice: arity(1, 1); eval_slice(node, *args[0], out); break;
        case Op::kConcat: arity(1, SIZE_MAX); eval_concat(node, args, out); break;
        case Op::kGather: arity(2, 2); eval_gather(*args[0], *args[1], out); break;
        case Op::kAttention: arity(4, 4); eval_attention(node, args, out, valid(1, -2)); break;
        default: internal_error(__FILE__, __LINE__, "unhandled structured op");
      }
      break;
  }
  for (double& v : out.data) v = round_to_dtype(v, out.dtype);
  return out;
}

namespace {

// The leading `count` block of `from` at the same coordinates of a tensor
// of shape `to_shape`, whose other elements are `fill`.
HostTensor copy_block(const HostTensor& from, const std::vector<int64_t>& count, std::vector<int64_t> to_shape, double fill) {
  HostTensor to = make_tensor(from.dtype, std::move(to_shape));
  std::fill(to.data.begin(), to.data.end(), fill);
  const Extents from_strides = row_major_strides(from.shape), to_strides = row_major_strides(to.shape);
  Extents index(count.size(), 0);
  for (int64_t n = product(count); n > 0; --n) {
    int64_t src = 0, dst = 0;
    for (size_t a = 0; a < index.size(); ++a) src += index[a] * from_strides[a], dst += index[a] * to_strides[a];
    to.data[static_cast<size_t>(dst)] = from.data[static_cast<size_t>(src)];
    for (size_t a = index.size(); a-- > 0;) {  // the next coordinates in row-major order
      if (++index[a] < count[a]) break;
      index[a] = 0;
    }
  }
  return to;
}

}  // namespace

HostTensor pad_to_capacity(const HostTensor& valid, const Shape& s, const std::vector<int64_t>& capacity, double fill) {
  GDL_INTERNAL_ASSERT(valid.shape.size() == s.size(), "pad_to_capacity: rank differs from the shape");
  return copy_block(valid, valid.shape, concrete_shape(s, capacity), fill);
}

HostTensor valid_part(const HostTensor& padded, const Shape& s, const std::vector<int64_t>& valid) {
  GDL_INTERNAL_ASSERT(padded.shape.size() == s.size(), "valid_part: rank differs from the shape");
  std::vector<int64_t> shape = concrete_shape(s, valid);
  return copy_block(padded, shape, shape, 0.0);
}

Status validate_bindings(const ir::Graph& g, const Bindings& b) {
  if (b.dims.size() != g.dims.size())
    return Status::InvalidArgument("expected " + std::to_string(g.dims.size()) + " run-time dim value(s), got " +
                                   std::to_string(b.dims.size()));
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const DimInfo& d = g.dims[i];
    if (b.dims[i] < d.lo || b.dims[i] > d.hi)
      return Status::OutOfRange("dim " + d.name + " = " + std::to_string(b.dims[i]) + " is outside [" +
                                std::to_string(d.lo) + ", " + std::to_string(d.hi) + "]");
  }
  if (!b.valid_dims.empty()) {
    if (b.valid_dims.size() != g.dims.size())
      return Status::InvalidArgument("expected " + std::to_string(g.dims.size()) + " valid dim value(s), got " +
                                     std::to_string(b.valid_dims.size()));
    std::vector<std::string> blockers = padding_blockers(g);
    for (size_t i = 0; i < g.dims.size(); ++i) {
      const DimInfo& d = g.dims[i];
      if (b.valid_dims[i] < d.lo || b.valid_dims[i] > b.dims[i])
        return Status::OutOfRange("dim " + d.name + " = " + std::to_string(b.valid_dims[i]) + " is outside [" +
                                  std::to_string(d.lo) + ", " + std::to_string(b.dims[i]) + "] (its capacity)");
      if (b.valid_dims[i] < b.dims[i] && !blockers[i].empty())
        return Status::FailedPrecondition("dim " + d.name + " cannot be padded: " + blockers[i]);
    }
  }
  for (const ir::Node& n : g.nodes) {
    if (!is_bound_leaf(n.op)) continue;
    std::string what = std::string(role_name(n.op)) + " '" + n.name + "'";
    auto it = b.tensors.find(n.name);
    if (it == b.tensors.end())
      return Status::NotFound("missing " + what + " : " + type_to_string(n.type, g.dims));
    const HostTensor& t = it->second;
    if (t.dtype != n.type.dtype)
      return Status::InvalidArgument(what + ": expected dtype " + dtype_name(n.type.dtype) + ", got " +
                                     dtype_name(t.dtype));
    Extents expected = concrete_shape(n.type.shape, b.dims);
    if (t.shape != expected)
      return Status::InvalidArgument(what + ": expected shape " + extents_text(expected) + " (" +
                                     type_to_string(n.type, g.dims) + "), got " + extents_text(t.shape));
    if (t.size() != product(expected))
      return Status::InvalidArgument(what + ": shape " + extents_text(expected) + " holds " +
                                     std::to_string(product(expected)) + " elements, but the data has " +
                                     std::to_string(t.size()));
  }
  auto leaf_named = [&](const std::string& name) -> const ir::Node* {
    for (const ir::Node& n : g.nodes)
      if (n.op != Op::kConstant && ir::op_info(n.op).cls == ir::OpClass::kLeaf && n.name == name) return &n;
    return nullptr;
  };
  for (const auto& [name, tensor] : b.tensors) {
    const ir::Node* leaf = leaf_named(name);
    if (!leaf) return Status::NotFound("unknown input or param '" + name + "'");
    if (!is_bound_leaf(leaf->op))
      return Status::InvalidArgument("'" + name + "' is a run-time scalar: bind it through Bindings::scalars");
  }
  for (const auto& [name, value] : b.scalars) {
    const ir::Node* leaf = leaf_named(name);
    if (!leaf) return Status::NotFound("unknown run-time scalar '" + name + "'");
    if (leaf->op != Op::kScalar)
      return Status::InvalidArgument("'" + name + "' is not a run-time scalar but a " + role_name(leaf->op) +
                                     ": bind it through Bindings::tensors");
  }
  return Status::Ok();
}

Expected<std::map<std::string, HostTensor>> interpret(const ir::Graph& g, const Bindings& b) {
  if (Status s = validate_bindings(g, b); !s.ok()) return s;
  failpoint("interpreter");

  // The last node that reads each value (itself when none does); outputs
  // are never released.
  size_t count = g.nodes.size();
  std::vector<size_t> last_use(count);
  for (size_t i = 0; i < count; ++i) {
    last_use[i] = i;
    for (ir::ValueId a : g.nodes[i].args) last_use[static_cast<size_t>(a)] = i;
  }
  for (const ir::Output& o : g.outputs) last_use.at(static_cast<size_t>(o.value)) = SIZE_MAX;

  std::vector<HostTensor> owned(count);
  std::vector<const HostTensor*> value(count, nullptr);
  std::vector<const HostTensor*> args;
  std::vector<std::vector<int64_t>> arg_valid;
  auto release = [&](size_t id) {
    owned[id] = HostTensor{};
    value[id] = nullptr;
  };
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    if (is_bound_leaf(n.op)) {
      const HostTensor& bound = b.tensors.at(n.name);
      if (already_rounded(bound)) {
        value[i] = &bound;  // read in place: weights are not copied
        continue;
      }
      owned[i] = bound;
      for (double& v : owned[i].data) v = round_to_dtype(v, owned[i].dtype);
    } else if (n.op == Op::kScalar) {
      auto it = b.scalars.find(n.name);
      owned[i] = filled(n.type.dtype, concrete_shape(n.type.shape, b.dims),
                        it != b.scalars.end() ? it->second : n.attrs.value);
    } else if (n.op == Op::kConstant) {
      owned[i] = filled(n.type.dtype, concrete_shape(n.type.shape, b.dims), n.attrs.value);
    } else {
      args.clear();
      for (ir::ValueId a : n.args) args.push_back(value.at(static_cast<size_t>(a)));
      arg_valid.clear();
      if (!b.valid_dims.empty())
        for (ir::ValueId a : n.args) arg_valid.push_back(concrete_shape(g.node(a).type.shape, b.valid_dims));
      owned[i] = eval_node(n, args, b.dims, arg_valid);
      for (ir::ValueId a : n.args)
        if (last_use[static_cast<size_t>(a)] == i) release(static_cast<size_t>(a));
    }
    value[i] = &owned[i];
    if (last_use[i] == i) release(i);  // nothing reads it: dead code
  }

  std::map<std::string, HostTensor> results;
  for (const ir::Output& o : g.outputs) results[o.name] = *value.at(static_cast<size_t>(o.value));
  return results;
}

}  // namespace gdl
