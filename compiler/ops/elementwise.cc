// The elementwise ops: unary (exp ... abs, cos ... sign, neg, not, cast),
// binary with numpy broadcasting (+ - * / min max pow, comparisons, && ||,
// the integer operators // % & | ^ << >>), where, clamp, and broadcast_to
// (its operand repeated to a shape). Each computes one element from the
// elements its operands broadcast to it, so fusion chains them into one kernel (plan/fuse.cc) and codegen calls
// their gdl::op::<name> functions (stdlib-kernels/gdl_ops.cuh) inside one
// loop over the result.
//
// Semantics the lowering, the CPU rules and the kernels share:
//  - i32 neg/abs/add/sub/mul wrap around (two's complement), as 32-bit
//    integer arithmetic does on the GPU; i32 div truncates toward zero,
//    x / 0 is 0 and INT_MIN / -1 is INT_MIN; i32 pow is std::pow rounded like
//    a cast (toward zero, saturating).
//  - i32 // and % are Python's floor division and remainder: the quotient
//    rounds toward -infinity, the remainder takes the divisor's sign, and
//    a == b * (a // b) + a % b always holds, so x // 0 is 0 (as x / 0) and
//    x % 0 is x; INT_MIN // -1 wraps to INT_MIN. They and the bitwise
//    operators take i32 only.
//  - x << n is floor(x * 2^n) wrapped to 32 bits and x >> n is floor(x / 2^n)
//    (an arithmetic shift), for every n: a count of 32 or more shifts
//    everything out (<< gives 0, >> gives 0 or -1), a negative count shifts
//    the other way.
//  - min, max, relu, sign and clamp propagate NaN; clamp(x, lo, hi) is
//    min(max(x, lo), hi), so lo > hi gives hi.
//  - round rounds half to even (rint), as torch.round does.
//  - gelu is the exact erf form 0.5 * x * (1 + erf(x / sqrt(2))).
//  - Comparisons with NaN are false except `ne`; results are bool 0/1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autodiff/adjoint_builder.h"
#include "interp/host_ops.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Op;
using ir::ValueId;

// --------------------------------------------------------------- type rules

// exp, log, ... : a float tensor (relu and abs take i32 too), the same type.
template <bool kIntegerOk>
TypeResult infer_unary(TypeQuery& q) {
  const TensorType* x = q.tensor(0, q.what());
  if (!x) return TypeResult::failed();
  if (!is_float(x->dtype) && !(kIntegerOk && x->dtype == DType::kI32))
    return q.error(0, q.what() + " needs a float tensor, got " + q.text(*x), "convert it with cast(x, f32)");
  return *x;
}

// a // b, a % b, a & b, ...: i32 on both sides, broadcast shapes.
template <Op kOp>
TypeResult infer_integer_binary(TypeQuery& q) {
  if (!q.unify(0, 1)) return TypeResult::failed();
  const TensorType* a = q.tensor(0, q.what());
  const TensorType* b = a ? q.tensor(1, q.what()) : nullptr;
  if (!a || !b) return TypeResult::failed();
  if (a->dtype != DType::kI32 || b->dtype != DType::kI32) {
    const bool floats = is_float(a->dtype) || is_float(b->dtype);
    std::string hint = !floats                ? "cast(x, i32) first, or use && and || on bools"
                       : kOp == Op::kFloorDiv ? "for floats write floor(a / b)"
                       : kOp == Op::kMod      ? "for floats write a - floor(a / b) * b"
                                              : "cast(x, i32) first";
    return q.error(kAtOp, q.what() + " needs i32 tensors, got " + q.text(*a) + " and " + q.text(*b), hint);
  }
  std::optional<Shape> shape = broadcast_shapes(a->shape, b->shape);
  if (!shape)
    return q.error(kAtOp, "cannot broadcast " + q.text(*a) + " with " + q.text(*b) + " in " + q.what(),
                   "shapes broadcast like numpy: aligned from the right, each pair of dims equal or one of them 1 "
                   "(a run-time dim matches only itself or 1)");
  return TensorType{DType::kI32, *shape};
}

// clamp(x, lo, hi): x float or i32, lo and hi of its dtype, all three broadcast.
TypeResult infer_clamp(TypeQuery& q) {
  if (!q.unify(0, 1) || !q.unify(0, 2)) return TypeResult::failed();
  const TensorType* x = q.tensor(0, "clamp");
  const TensorType* lo = x ? q.tensor(1, "clamp") : nullptr;
  const TensorType* hi = lo ? q.tensor(2, "clamp") : nullptr;
  if (!x || !lo || !hi) return TypeResult::failed();
  if (!is_float(x->dtype) && x->dtype != DType::kI32)
    return q.error(0, "clamp needs a float or i32 tensor, got " + q.text(*x), "convert it with cast(x, f32)");
  for (const TensorType* bound : {lo, hi})
    if (bound->dtype != x->dtype)
      return q.error(bound == lo ? 1 : 2,
                     "dtype mismatch in clamp: " + q.text(*x) + " and its bound " + q.text(*bound),
                     "the bounds need x's dtype; convert with cast(x, " + std::string(dtype_name(x->dtype)) + ")");
  std::optional<Shape> xl = broadcast_shapes(x->shape, lo->shape);
  std::optional<Shape> all = xl ? broadcast_shapes(*xl, hi->shape) : std::nullopt;
  if (!all)
    return q.error(kAtOp, "cannot broadcast " + q.text(*x) + ", " + q.text(*lo) + " and " + q.text(*hi) + " in clamp",
                   "shapes broadcast like numpy: aligned from the right, each dim equal or 1");
  return TensorType{x->dtype, *all};
}

// stop_gradient: any tensor, the same type.
TypeResult infer_any(TypeQuery& q) {
  const TensorType* x = q.tensor(0, q.what());
  if (!x) return TypeResult::failed();
  return *x;
}

TypeResult infer_neg(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "unary -");
  if (!x) return TypeResult::failed();
  if (x->dtype == DType::kBool)
    return q.error(kAtOp, "unary - needs a number, got " + q.text(*x), "use ! to negate a bool");
  return *x;
}

TypeResult infer_not(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "!");
  if (!x) return TypeResult::failed();
  if (x->dtype != DType::kBool)
    return q.error(kAtOp, "! needs a bool, got " + q.text(*x), "compare first, for example !(x > 0.0)");
  return *x;
}

TypeResult infer_cast(TypeQuery& q) {
  DType target;
  if (!q.dtype(1, &target)) return TypeResult::failed();
  const TensorType* x = q.tensor(0, "cast");
  if (!x) return TypeResult::failed();
  return TensorType{target, x->shape};
}

bool is_comparison(Op op) { return op >= Op::kLt && op <= Op::kNe; }
bool is_logical(Op op) { return op == Op::kAnd || op == Op::kOr; }

// a op b: one dtype, broadcast shapes; comparisons and && || give bool.
template <Op kOp>
TypeResult infer_binary(TypeQuery& q) {
  if (!q.unify(0, 1)) return TypeResult::failed();
  const TensorType* a = q.tensor(0, q.what());
  const TensorType* b = a ? q.tensor(1, q.what()) : nullptr;
  if (!a || !b) return TypeResult::failed();
  const std::string& what = q.what();
  if (a->dtype != b->dtype)
    return q.error(kAtOp, "dtype mismatch in " + what + ": " + q.text(*a) + " and " + q.text(*b),
                   "both sides need one dtype; convert one with cast(x, " + std::string(dtype_name(a->dtype)) + ")");
  if (is_logical(kOp) && a->dtype != DType::kBool)
    return q.error(kAtOp, what + " needs bools, got " + q.text(*a) + " and " + q.text(*b), "compare first to get bools");
  if (!is_logical(kOp) && !is_comparison(kOp) && a->dtype == DType::kBool)
    return q.error(kAtOp, what + " does arithmetic, which bools do not have: " + q.text(*a) + " and " + q.text(*b),
                   "use && and || on bools, or cast(x, f32) first");
  std::optional<Shape> shape = broadcast_shapes(a->shape, b->shape);
  if (!shape)
    return q.error(kAtOp, "cannot broadcast " + q.text(*a) + " with " + q.text(*b) + " in " + what,
                   "shapes broadcast like numpy: aligned from the right, each pair of dims equal or one of them 1 "
                   "(a run-time dim matches only itself or 1)");
  return TensorType{is_logical(kOp) || is_comparison(kOp) ? DType::kBool : a->dtype, *shape};
}

// where(cond, a, b): a bool condition, a and b of one dtype, all three broadcast.
TypeResult infer_where(TypeQuery& q) {
  std::string described;
  const TensorType* c = q.value(0, "where", DType::kBool, &described);
  if (!c || c->dtype != DType::kBool)
    return q.error(0, "the condition of where must be bool, got " + (c ? q.text(*c) : described),
                   "compare to get a bool: where(x > 0.0, a, b)");
  if (!q.unify(1, 2)) return TypeResult::failed();
  const TensorType* a = q.tensor(1, "where");
  const TensorType* b = a ? q.tensor(2, "where") : nullptr;
  if (!a || !b) return TypeResult::failed();
  if (a->dtype != b->dtype)
    return q.error(kAtOp, "dtype mismatch in where: " + q.text(*a) + " and " + q.text(*b),
                   "both branches need one dtype; convert one with cast(x, " + std::string(dtype_name(a->dtype)) + ")");
  std::optional<Shape> ab = broadcast_shapes(a->shape, b->shape);
  std::optional<Shape> all = ab ? broadcast_shapes(c->shape, *ab) : std::nullopt;
  if (!all)
    return q.error(kAtOp, "cannot broadcast " + q.text(*c) + ", " + q.text(*a) + " and " + q.text(*b) + " in where",
                   "shapes broadcast like numpy: aligned from the right, each dim equal or 1");
  return TensorType{a->dtype, *all};
}

// broadcast_to(x, shape): x repeated along the axes it lacks or has as 1
// (numpy's broadcast_to); a number is an f32 constant.
TypeResult infer_broadcast_to(TypeQuery& q) {
  Shape s;
  if (!q.shape(1, &s)) return TypeResult::failed();
  std::string described;
  const TensorType* x = q.value(0, "broadcast_to", DType::kF32, &described);
  if (!x && described.empty()) return TypeResult::failed();
  if (!x) return q.error(0, "broadcast_to needs a tensor or a number, got " + described);
  std::optional<Shape> all = broadcast_shapes(x->shape, s);
  if (std::find(s.begin(), s.end(), Dim::constant(-1)) != s.end() || !all || !(*all == s))
    return q.error(kAtOp, "cannot broadcast " + q.text(*x) + " to " + q.text(s),
                   "aligned from the right, each dim of x must equal the target's or be 1 "
                   "(a run-time dim matches only itself)");
  return TensorType{x->dtype, s};
}

// ---------------------------------------------------------------- CPU rules

double neg(double x, DType t) { return t == DType::kI32 ? host::wrap_i32(-static_cast<int64_t>(x)) : -x; }
double logical_not(double x, DType) { return x == 0 ? 1.0 : 0.0; }
double exp(double x, DType) { return std::exp(x); }
double log(double x, DType) { return std::log(x); }
double sqrt(double x, DType) { return std::sqrt(x); }
double rsqrt(double x, DType) { return 1.0 / std::sqrt(x); }
double tanh(double x, DType) { return std::tanh(x); }
double sigmoid(double x, DType) { return 1.0 / (1.0 + std::exp(-x)); }
double relu(double x, DType) { return x < 0 ? 0.0 : x; }  // NaN stays NaN
double gelu(double x, DType) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double silu(double x, DType) { return x / (1.0 + std::exp(-x)); }
double abs(double x, DType t) { return t == DType::kI32 ? host::wrap_i32(std::abs(static_cast<int64_t>(x))) : std::fabs(x); }
double cast(double x, DType) { return x; }  // the rounding to the result's dtype is the cast
double cos(double x, DType) { return std::cos(x); }
double sin(double x, DType) { return std::sin(x); }
double erf(double x, DType) { return std::erf(x); }
double floor(double x, DType) { return std::floor(x); }
double ceil(double x, DType) { return std::ceil(x); }
double round(double x, DType) { return std::nearbyint(x); }  // the default rounding mode: half to even
double sign(double x, DType) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }  // 0 stays 0, NaN stays NaN

// Only i32 operands are converted: casting NaN or a huge float is undefined.
template <typename F>
double integer_or_float(double a, double b, DType t, F on_ints, double on_floats) {
  if (t != DType::kI32) return on_floats;
  return on_ints(static_cast<int64_t>(a), static_cast<int64_t>(b));
}
double add(double a, double b, DType t) {
  return integer_or_float(a, b, t, [](int64_t x, int64_t y) { return host::wrap_i32(x + y); }, a + b);
}
double sub(double a, double b, DType t) {
  return integer_or_float(a, b, t, [](int64_t x, int64_t y) { return host::wrap_i32(x - y); }, a - b);
}
double mul(double a, double b, DType t) {
  return integer_or_float(a, b, t, [](int64_t x, int64_t y) { return host::wrap_i32(x * y); }, a * b);
}
double div(double a, double b, DType t) {  // C truncation; x / 0 is defined as 0
  return integer_or_float(a, b, t, [](int64_t x, int64_t y) { return y == 0 ? 0.0 : host::wrap_i32(x / y); }, a / b);
}
double min(double a, double b, DType) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b); }
double max(double a, double b, DType) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b); }
double pow(double a, double b, DType) { return std::pow(a, b); }
double lt(double a, double b, DType) { return a < b; }
double le(double a, double b, DType) { return a <= b; }
double gt(double a, double b, DType) { return a > b; }
double ge(double a, double b, DType) { return a >= b; }
double eq(double a, double b, DType) { return a == b; }
double ne(double a, double b, DType) { return a != b; }
double logical_and(double a, double b, DType) { return a != 0 && b != 0; }
double logical_or(double a, double b, DType) { return a != 0 || b != 0; }

// The integer operators, on exact 64-bit integers: i32 operands for the CPU
// rules (wrapped back to 32 bits), compile-time integers for folding.
int64_t floor_div_exact(int64_t a, int64_t b) {  // b != 0, not INT64_MIN / -1
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
int64_t floor_mod_exact(int64_t a, int64_t b) {  // b != 0
  if (b == -1) return 0;  // INT64_MIN % -1 would trap
  const int64_t r = a % b;
  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}
// floor(x * 2^n); nullopt where it leaves int64.
std::optional<int64_t> shift_exact(int64_t x, int64_t n) {
  if (n <= -64) return x < 0 ? -1 : 0;
  if (n < 0) return x >> -n;  // arithmetic: floor(x / 2^-n)
  if (x == 0) return 0;
  if (n >= 64) return std::nullopt;
  const int64_t r = static_cast<int64_t>(static_cast<uint64_t>(x) << n);
  if ((r >> n) != x) return std::nullopt;
  return r;
}

int64_t i64(double v) { return static_cast<int64_t>(v); }  // an i32 operand, exact in a double
double floor_div(double a, double b, DType) {
  return i64(b) == 0 ? 0.0 : host::wrap_i32(floor_div_exact(i64(a), i64(b)));  // INT_MIN // -1 wraps to INT_MIN
}
double floor_mod(double a, double b, DType) {
  return i64(b) == 0 ? a : static_cast<double>(floor_mod_exact(i64(a), i64(b)));
}
double bit_and(double a, double b, DType) { return static_cast<double>(i64(a) & i64(b)); }
double bit_or(double a, double b, DType) { return static_cast<double>(i64(a) | i64(b)); }
double bit_xor(double a, double b, DType) { return static_cast<double>(i64(a) ^ i64(b)); }
// An i32 shifted by 32 or more places is all shifted out, so clamping the
// count to [-32, 32] changes nothing and keeps x * 2^n inside int64.
int64_t shift_count(double n) { return std::clamp<int64_t>(i64(n), -32, 32); }
double shl(double a, double b, DType) { return host::wrap_i32(*shift_exact(i64(a), shift_count(b))); }
double shr(double a, double b, DType) { return host::wrap_i32(*shift_exact(i64(a), -shift_count(b))); }

void eval_clamp(const ir::Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor &x = *in.values[0], &lo = *in.values[1], &hi = *in.values[2];
  host::BroadcastCursor cursor(out.shape, {x.shape, lo.shape, hi.shape});
  const DType t = n.type.dtype;
  for (double& v : out.data) {
    v = min(max(x.data[cursor.offset(0)], lo.data[cursor.offset(1)], t), hi.data[cursor.offset(2)], t);
    cursor.next();
  }
}

void eval_where(const ir::Node&, const EvalArgs& in, HostTensor& out) {
  const HostTensor &cond = *in.values[0], &a = *in.values[1], &b = *in.values[2];
  host::BroadcastCursor cursor(out.shape, {cond.shape, a.shape, b.shape});
  for (double& v : out.data) {
    v = cond.data[cursor.offset(0)] != 0 ? a.data[cursor.offset(1)] : b.data[cursor.offset(2)];
    cursor.next();
  }
}

// Compile-time integers (64-bit, lowering's folding).
std::optional<int64_t> abs_int(int64_t x) {
  if (x == std::numeric_limits<int64_t>::min()) return std::nullopt;
  return x < 0 ? -x : x;
}
std::optional<int64_t> relu_int(int64_t x) { return std::max<int64_t>(x, 0); }
std::optional<int64_t> min_int(int64_t a, int64_t b) { return std::min(a, b); }
std::optional<int64_t> max_int(int64_t a, int64_t b) { return std::max(a, b); }
std::optional<int64_t> sign_int(int64_t x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
// Lowering reports a compile-time division by zero before folding; these
// still follow the i32 rules there (x // 0 is 0, x % 0 is x).
std::optional<int64_t> floor_div_int(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return std::nullopt;
  return floor_div_exact(a, b);
}
std::optional<int64_t> floor_mod_int(int64_t a, int64_t b) { return b == 0 ? a : floor_mod_exact(a, b); }
std::optional<int64_t> bit_and_int(int64_t a, int64_t b) { return a & b; }
std::optional<int64_t> bit_or_int(int64_t a, int64_t b) { return a | b; }
std::optional<int64_t> bit_xor_int(int64_t a, int64_t b) { return a ^ b; }
std::optional<int64_t> shl_int(int64_t x, int64_t n) { return shift_exact(x, n); }
std::optional<int64_t> shr_int(int64_t x, int64_t n) {
  return shift_exact(x, n == std::numeric_limits<int64_t>::min() ? 64 : -n);
}

void eval_broadcast_to(const ir::Node&, const EvalArgs& in, HostTensor& out) {
  const HostTensor& x = *in.values[0];
  host::BroadcastCursor cursor(out.shape, {x.shape});
  for (double& v : out.data) {
    v = x.data[cursor.offset(0)];
    cursor.next();
  }
}


// --------------------------------------------------------- derivative rules
// d[k] from dy for operand k; `y` is the node. An operand that broadcast
// gets its part summed back to its own shape (sum_to).

using autodiff::AdjointBuilder;

ValueId operand(const AdjointBuilder& b, ValueId y, size_t k) { return b.node(y).args.at(k); }
ValueId sum_to_operand(AdjointBuilder& b, ValueId y, size_t k, ValueId part) {
  return b.sum_to(part, b.shape(operand(b, y, k)));
}
// A rank-0 constant of y's dtype.
ValueId number(AdjointBuilder& b, ValueId y, double v) { return b.constant(v, b.type(y).dtype); }

// A unary op whose derivative f'(x) is built from x and y: d = dy * f'(x).
// The rules emit nodes in statement order: two calls that emit as arguments
// of one call would run in an order C++ leaves to the compiler, and the IR
// would differ between compilers.
template <ValueId (*kDerivative)(AdjointBuilder& b, ValueId x, ValueId y)>
void vjp_unary(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  d[0] = b.mul(dy, kDerivative(b, operand(b, y, 0), y));
}
ValueId d_exp(AdjointBuilder&, ValueId, ValueId y) { return y; }
ValueId d_log(AdjointBuilder& b, ValueId x, ValueId y) { return b.div(number(b, y, 1), x); }
ValueId d_sqrt(AdjointBuilder& b, ValueId, ValueId y) { return b.div(number(b, y, 0.5), y); }
ValueId d_rsqrt(AdjointBuilder& b, ValueId, ValueId y) { return b.mul(b.mul(y, b.mul(y, y)), -0.5); }  // -x^(-3/2) / 2
ValueId d_tanh(AdjointBuilder& b, ValueId, ValueId y) {
  const ValueId one = number(b, y, 1);
  return b.sub(one, b.mul(y, y));
}
ValueId d_sigmoid(AdjointBuilder& b, ValueId, ValueId y) { return b.mul(y, b.sub(number(b, y, 1), y)); }
ValueId d_relu(AdjointBuilder& b, ValueId x, ValueId y) {
  const ValueId positive = b.binary(Op::kGt, x, 0.0);
  const ValueId one = number(b, y, 1);
  return b.where(positive, one, number(b, y, 0));
}
// Phi(x) + x phi(x), with Phi the normal CDF (gelu = x Phi(x)) and phi its density.
ValueId d_gelu(AdjointBuilder& b, ValueId x, ValueId y) {
  const ValueId erf = b.unary(Op::kErf, b.mul(x, M_SQRT1_2));
  const ValueId cdf = b.mul(b.add(erf, number(b, y, 1)), 0.5);
  const ValueId density = b.mul(b.unary(Op::kExp, b.mul(b.mul(x, x), -0.5)), 0.5 * M_2_SQRTPI * M_SQRT1_2);
  return b.add(cdf, b.mul(x, density));
}
ValueId d_silu(AdjointBuilder& b, ValueId x, ValueId y) {  // s (1 + x (1 - s)), s = sigmoid(x)
  const ValueId s = b.unary(Op::kSigmoid, x);
  const ValueId one = number(b, y, 1);
  return b.mul(s, b.add(one, b.mul(x, b.sub(one, s))));
}
ValueId d_abs(AdjointBuilder& b, ValueId x, ValueId) { return b.unary(Op::kSign, x); }
ValueId d_cos(AdjointBuilder& b, ValueId x, ValueId) { return b.neg(b.unary(Op::kSin, x)); }
ValueId d_sin(AdjointBuilder& b, ValueId x, ValueId) { return b.unary(Op::kCos, x); }
ValueId d_erf(AdjointBuilder& b, ValueId x, ValueId) { return b.mul(b.unary(Op::kExp, b.neg(b.mul(x, x))), M_2_SQRTPI); }

void vjp_neg(AdjointBuilder& b, ValueId, ValueId dy, std::vector<ValueId>& d) { d[0] = b.neg(dy); }
void vjp_cast(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const DType from = b.type(operand(b, y, 0)).dtype;
  if (is_float(from)) d[0] = b.cast(dy, from);
}
void vjp_broadcast_to(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  if (is_float(b.type(operand(b, y, 0)).dtype)) d[0] = sum_to_operand(b, y, 0, dy);
}
void vjp_add(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  d[0] = sum_to_operand(b, y, 0, dy);
  d[1] = sum_to_operand(b, y, 1, dy);
}
void vjp_sub(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  d[0] = sum_to_operand(b, y, 0, dy);
  d[1] = sum_to_operand(b, y, 1, b.neg(dy));
}
void vjp_mul(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  d[0] = sum_to_operand(b, y, 0, b.mul(dy, operand(b, y, 1)));
  d[1] = sum_to_operand(b, y, 1, b.mul(dy, operand(b, y, 0)));
}
void vjp_div(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {  // y = p / q
  const ValueId q = operand(b, y, 1);
  d[0] = sum_to_operand(b, y, 0, b.div(dy, q));
  d[1] = sum_to_operand(b, y, 1, b.neg(b.div(b.mul(dy, y), q)));
}
// min and max: the side that is chosen takes dy; on a tie each side takes half.
template <Op kChoose>
void vjp_choose(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ValueId p = operand(b, y, 0), q = operand(b, y, 1);
  const DType t = b.type(y).dtype;
  const ValueId chosen = b.cast(b.binary(kChoose, p, q), t);
  const ValueId p_share = b.add(chosen, b.mul(b.cast(b.binary(Op::kEq, p, q), t), 0.5));
  d[0] = sum_to_operand(b, y, 0, b.mul(dy, p_share));
  d[1] = sum_to_operand(b, y, 1, b.mul(dy, b.sub(number(b, y, 1), p_share)));
}
// y = p^q: dp = q p^(q - 1); dq = y log(p), taken as 0 where p <= 0 (log
// undefined there).
void vjp_pow(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ValueId p = operand(b, y, 0), q = operand(b, y, 1);
  // q p^(q - 1), taken as 0 where q == 0 (p^0 is constant; 0 * 0^-1 would be NaN).
  const ValueId slope = b.mul(q, b.binary(Op::kPow, p, b.sub(q, number(b, y, 1))));
  const ValueId constant_q = b.binary(Op::kEq, q, 0.0);
  const ValueId zero = number(b, y, 0);
  d[0] = sum_to_operand(b, y, 0, b.where(constant_q, zero, b.mul(dy, slope)));
  const ValueId positive = b.binary(Op::kGt, p, 0.0);
  const ValueId safe_p = b.where(positive, p, number(b, y, 1));
  d[1] = sum_to_operand(b, y, 1, b.where_else_zero(positive, b.mul(dy, b.mul(y, b.unary(Op::kLog, safe_p)))));
}
void vjp_where(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ValueId cond = operand(b, y, 0);
  d[1] = sum_to_operand(b, y, 1, b.where_else_zero(cond, dy));
  d[2] = sum_to_operand(b, y, 2, b.where(cond, number(b, y, 0), dy));
}
// clamp(x, lo, hi) = min(max(x, lo), hi): x takes dy inside [lo, hi], lo
// where it lifts x and is not above hi, hi where it caps.
void vjp_clamp(AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const ValueId x = operand(b, y, 0), lo = operand(b, y, 1), hi = operand(b, y, 2);
  const ValueId above_lo = b.binary(Op::kGe, x, lo);
  const ValueId inside = b.binary(Op::kAnd, above_lo, b.binary(Op::kLe, x, hi));
  const ValueId below_lo = b.binary(Op::kLt, x, lo);
  const ValueId lifts = b.binary(Op::kAnd, below_lo, b.binary(Op::kLe, lo, hi));
  const ValueId caps = b.binary(Op::kGt, b.binary(Op::kMax, x, lo), hi);
  d[0] = sum_to_operand(b, y, 0, b.where_else_zero(inside, dy));
  d[1] = sum_to_operand(b, y, 1, b.where_else_zero(lifts, dy));
  d[2] = sum_to_operand(b, y, 2, b.where_else_zero(caps, dy));
}

// ------------------------------------------------------------------ entries

OpDef with_vjp(OpDef d, VjpFn vjp) {
  d.vjp = vjp;
  return d;
}

OpDef unary(Op op, const char* callable, InferFn infer, UnaryFn rule, const char* device_function) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kElementwise;
  d.callable = callable;
  d.params = {"x"};
  d.operands = d.required = 1;
  d.min_args = d.max_args = 1;
  d.infer = infer;
  d.unary = rule;
  d.device_function = device_function;
  return d;
}

OpDef binary(Op op, const char* callable, InferFn infer, BinaryFn rule, const char* device_function) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kElementwise;
  d.callable = callable;
  d.params = {"a", "b"};
  d.operands = d.required = 2;
  d.min_args = d.max_args = 2;
  d.infer = infer;
  d.binary = rule;
  d.device_function = device_function;
  return d;
}

// An i32 operator (// % & | ^ << >>): compile-time integers fold exactly
// through `fold`.
template <Op kOp>
OpDef integer_operator(BinaryFn rule, std::optional<int64_t> (*fold)(int64_t, int64_t), const char* device_function) {
  OpDef d = binary(kOp, nullptr, infer_integer_binary<kOp>, rule, device_function);
  d.fold_binary_int = fold;
  return d;
}

}  // namespace

void add_elementwise_ops(std::vector<OpDef>& defs) {
  defs.push_back(with_vjp(unary(Op::kExp, "exp", infer_unary<false>, exp, "gdl::op::exp"), vjp_unary<d_exp>));
  defs.push_back(with_vjp(unary(Op::kLog, "log", infer_unary<false>, log, "gdl::op::log"), vjp_unary<d_log>));
  defs.push_back(with_vjp(unary(Op::kSqrt, "sqrt", infer_unary<false>, sqrt, "gdl::op::sqrt"), vjp_unary<d_sqrt>));
  defs.push_back(with_vjp(unary(Op::kRsqrt, "rsqrt", infer_unary<false>, rsqrt, "gdl::op::rsqrt"), vjp_unary<d_rsqrt>));
  defs.push_back(with_vjp(unary(Op::kTanh, "tanh", infer_unary<false>, tanh, "gdl::op::tanh"), vjp_unary<d_tanh>));
  defs.push_back(with_vjp(unary(Op::kSigmoid, "sigmoid", infer_unary<false>, sigmoid, "gdl::op::sigmoid"), vjp_unary<d_sigmoid>));
  OpDef r = unary(Op::kRelu, "relu", infer_unary<true>, relu, "gdl::op::relu");
  r.fold_unary_int = relu_int;
  r.vjp = vjp_unary<d_relu>;
  defs.push_back(r);
  defs.push_back(with_vjp(unary(Op::kGelu, "gelu", infer_unary<false>, gelu, "gdl::op::gelu"), vjp_unary<d_gelu>));
  defs.push_back(with_vjp(unary(Op::kSilu, "silu", infer_unary<false>, silu, "gdl::op::silu"), vjp_unary<d_silu>));
  defs.push_back(with_vjp(unary(Op::kCos, "cos", infer_unary<false>, cos, "gdl::op::cos"), vjp_unary<d_cos>));
  defs.push_back(with_vjp(unary(Op::kSin, "sin", infer_unary<false>, sin, "gdl::op::sin"), vjp_unary<d_sin>));
  defs.push_back(with_vjp(unary(Op::kErf, "erf", infer_unary<false>, erf, "gdl::op::erf"), vjp_unary<d_erf>));
  defs.push_back(with_vjp(unary(Op::kFloor, "floor", infer_unary<false>, floor, "gdl::op::floor"), zero_derivative));
  defs.push_back(with_vjp(unary(Op::kCeil, "ceil", infer_unary<false>, ceil, "gdl::op::ceil"), zero_derivative));
  defs.push_back(with_vjp(unary(Op::kRound, "round", infer_unary<false>, round, "gdl::op::round"), zero_derivative));
  OpDef s = unary(Op::kSign, "sign", infer_unary<true>, sign, "gdl::op::sign");
  s.fold_unary_int = sign_int;
  s.vjp = zero_derivative;
  defs.push_back(s);
  OpDef a = unary(Op::kAbs, "abs", infer_unary<true>, abs, "gdl::op::abs");
  a.fold_unary_int = abs_int;
  a.vjp = vjp_unary<d_abs>;
  defs.push_back(a);
  OpDef minimum = binary(Op::kMin, "min", infer_binary<Op::kMin>, min, "gdl::op::min");
  minimum.params = {"x", "b", "axis", "keepdims"};  // min(x, axis = 1) is reduce_min (reduce.cc)
  minimum.operands = 2;
  minimum.required = 1;
  minimum.without_second_operand = Op::kReduceMin;
  minimum.fold_binary_int = min_int;
  minimum.vjp = vjp_choose<Op::kLt>;
  defs.push_back(minimum);
  defs.push_back(with_vjp(binary(Op::kPow, "pow", infer_binary<Op::kPow>, pow, "gdl::op::pow"), vjp_pow));
  OpDef maximum = binary(Op::kMax, "max", infer_binary<Op::kMax>, max, "gdl::op::max");
  maximum.params = {"x", "b", "axis", "keepdims"};  // max(x, axis = 1) is reduce_max (reduce.cc)
  maximum.operands = 2;
  maximum.required = 1;
  maximum.without_second_operand = Op::kReduceMax;
  maximum.fold_binary_int = max_int;
  maximum.vjp = vjp_choose<Op::kGt>;
  defs.push_back(maximum);
  OpDef where;
  where.op = Op::kWhere;
  where.fusion = FusionClass::kElementwise;
  where.callable = "where";
  where.params = {"cond", "a", "b"};
  where.operands = where.required = 3;
  where.min_args = where.max_args = 3;
  where.infer = infer_where;
  where.eval = eval_where;
  where.device_function = "gdl::op::where";
  where.vjp = vjp_where;
  defs.push_back(where);
  OpDef clamp;
  clamp.op = Op::kClamp;
  clamp.fusion = FusionClass::kElementwise;
  clamp.callable = "clamp";
  clamp.params = {"x", "lo", "hi"};
  clamp.operands = clamp.required = 3;
  clamp.min_args = clamp.max_args = 3;
  clamp.infer = infer_clamp;
  clamp.eval = eval_clamp;
  clamp.device_function = "gdl::op::clamp";
  clamp.vjp = vjp_clamp;
  defs.push_back(clamp);
  OpDef broadcast_to;
  broadcast_to.op = Op::kBroadcastTo;
  broadcast_to.fusion = FusionClass::kElementwise;
  broadcast_to.callable = "broadcast_to";
  broadcast_to.params = {"x", "shape"};
  broadcast_to.operands = 1;
  broadcast_to.required = 2;
  broadcast_to.min_args = broadcast_to.max_args = 1;
  broadcast_to.infer = infer_broadcast_to;
  broadcast_to.eval = eval_broadcast_to;  // codegen: the operand's element at the result's coordinates, no call
  broadcast_to.is_identity = same_type;
  broadcast_to.vjp = vjp_broadcast_to;
  defs.push_back(broadcast_to);
  // stop_gradient(x): x, through which grad passes nothing (a zero
  // derivative). Constant folding, after lowering has taken the gradients,
  // redirects its readers to x, so it costs no kernel.
  OpDef stop = with_vjp(unary(Op::kStopGradient, "stop_gradient", infer_any, identity_rule, "gdl::op::copy"), zero_derivative);
  stop.is_identity = [](const ir::Node&, const ir::Node&) { return true; };
  defs.push_back(stop);
  OpDef c = unary(Op::kCast, "cast", infer_cast, cast, nullptr);  // codegen: the element converted, no call
  c.params = {"x", "dtype"};
  c.operands = 1;
  c.required = 2;
  c.is_identity = same_type;
  c.vjp = vjp_cast;
  defs.push_back(c);

  // Written as operators only.
  defs.push_back(with_vjp(unary(Op::kNeg, nullptr, infer_neg, neg, "gdl::op::neg"), vjp_neg));
  defs.push_back(unary(Op::kNot, nullptr, infer_not, logical_not, "gdl::op::not_"));
  defs.push_back(with_vjp(binary(Op::kAdd, nullptr, infer_binary<Op::kAdd>, add, "gdl::op::add"), vjp_add));
  defs.push_back(with_vjp(binary(Op::kSub, nullptr, infer_binary<Op::kSub>, sub, "gdl::op::sub"), vjp_sub));
  defs.push_back(with_vjp(binary(Op::kMul, nullptr, infer_binary<Op::kMul>, mul, "gdl::op::mul"), vjp_mul));
  defs.push_back(with_vjp(binary(Op::kDiv, nullptr, infer_binary<Op::kDiv>, div, "gdl::op::div"), vjp_div));
  defs.push_back(binary(Op::kLt, nullptr, infer_binary<Op::kLt>, lt, "gdl::op::lt"));
  defs.push_back(binary(Op::kLe, nullptr, infer_binary<Op::kLe>, le, "gdl::op::le"));
  defs.push_back(binary(Op::kGt, nullptr, infer_binary<Op::kGt>, gt, "gdl::op::gt"));
  defs.push_back(binary(Op::kGe, nullptr, infer_binary<Op::kGe>, ge, "gdl::op::ge"));
  defs.push_back(binary(Op::kEq, nullptr, infer_binary<Op::kEq>, eq, "gdl::op::eq"));
  defs.push_back(binary(Op::kNe, nullptr, infer_binary<Op::kNe>, ne, "gdl::op::ne"));
  defs.push_back(binary(Op::kAnd, nullptr, infer_binary<Op::kAnd>, logical_and, "gdl::op::and_"));
  defs.push_back(binary(Op::kOr, nullptr, infer_binary<Op::kOr>, logical_or, "gdl::op::or_"));
  // bitand_ and friends: `bitand` and `bitor` are C++ spellings of & and |.
  defs.push_back(integer_operator<Op::kFloorDiv>(floor_div, floor_div_int, "gdl::op::floordiv"));
  defs.push_back(integer_operator<Op::kMod>(floor_mod, floor_mod_int, "gdl::op::mod"));
  defs.push_back(integer_operator<Op::kBitAnd>(bit_and, bit_and_int, "gdl::op::bitand_"));
  defs.push_back(integer_operator<Op::kBitOr>(bit_or, bit_or_int, "gdl::op::bitor_"));
  defs.push_back(integer_operator<Op::kBitXor>(bit_xor, bit_xor_int, "gdl::op::bitxor_"));
  defs.push_back(integer_operator<Op::kShl>(shl, shl_int, "gdl::op::shl"));
  defs.push_back(integer_operator<Op::kShr>(shr, shr_int, "gdl::op::shr"));
}

}  // namespace gdl::ops
