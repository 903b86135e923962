// ir::verify: the structural checks that a compiler bug would break.
//
// 1. Graph level: run-time dims have 1 <= lo <= hi.
// 2. Every node, in order: its type is well formed (rank <= kMaxRank,
//    extents >= 0, run-time dims declared); its arguments exist and come
//    before it (topological order); its argument count fits the op.
// 3. Leaves: no arguments; inputs, params and scalars carry a name that no
//    other leaf has; scalars and constants are rank 0.
// 4. Every other op: the result type is the one its arguments imply
//    (broadcast shapes, matmul shapes, reductions, permutations, ...),
//    following the op semantics documented in ir.h.
// 5. Outputs name a valid value, and no two outputs share a name.
// The first problem found is returned, naming the node as "%id op".
#include <algorithm>
#include <optional>
#include <set>

#include "passes/ir_verify.h"

namespace gdl::ir {
namespace {

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g) {}

  std::string run() {
    for (size_t i = 0; i < g_.dims.size(); ++i) {
      const DimInfo& d = g_.dims[i];
      if (d.lo < 1 || d.lo > d.hi) return "dim " + d.name + ": bounds [" + std::to_string(d.lo) + ", " +
                                           std::to_string(d.hi) + "] need 1 <= lo <= hi";
    }
    std::set<std::string> leaf_names;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      id_ = static_cast<ValueId>(i);
      const Node& n = g_.nodes[i];
      std::string problem = check_node(n);
      if (problem.empty() && is_named_leaf(n.op) && !leaf_names.insert(n.name).second)
        problem = "leaf name \"" + n.name + "\" is declared twice";
      if (!problem.empty()) return "%" + std::to_string(i) + " " + op_name(n.op) + ": " + problem;
    }
    std::set<std::string> output_names;
    for (const Output& o : g_.outputs) {
      if (o.value < 0 || static_cast<size_t>(o.value) >= g_.nodes.size())
        return "output \"" + o.name + "\" refers to %" + std::to_string(o.value) + ", which does not exist";
      if (!output_names.insert(o.name).second) return "output \"" + o.name + "\" is assigned twice";
    }
    return "";
  }

 private:
  static bool is_named_leaf(Op op) { return op == Op::kInput || op == Op::kParam || op == Op::kScalar; }

  std::string text(const TensorType& t) const { return type_to_string(t, g_.dims); }
  std::string text(const Shape& s) const { return shape_to_string(s, g_.dims); }
  const TensorType& arg(const Node& n, size_t i) const { return g_.node(n.args[i]).type; }

  std::string check_type(const TensorType& t) const {
    if (t.rank() > kMaxRank) return "rank " + std::to_string(t.rank()) + " exceeds " + std::to_string(kMaxRank);
    for (const Dim& d : t.shape) {
      if (d.is_runtime() && d.symbol >= static_cast<int>(g_.dims.size()))
        return "run-time dim #" + std::to_string(d.symbol) + " is not declared";
      if (!d.is_runtime() && d.extent < 0) return "negative extent " + std::to_string(d.extent);
    }
    return "";
  }

  static std::pair<size_t, size_t> arity(Op op) {
    switch (op_info(op).cls) {
      case OpClass::kLeaf: return {0, 0};
      case OpClass::kUnary: return {1, 1};
      case OpClass::kBinary: return {2, 2};
      case OpClass::kWhere: return {3, 3};
      case OpClass::kStructured: break;
    }
    switch (op) {
      case Op::kMatMul: case Op::kGather: return {2, 2};
      case Op::kLayerNorm: return {1, 3};
      case Op::kRmsNorm: return {1, 2};
      case Op::kConcat: return {1, SIZE_MAX};
      case Op::kAttention: return {4, 4};
      default: return {1, 1};
    }
  }

  std::string check_node(const Node& n) const {
    if (std::string p = check_type(n.type); !p.empty()) return "result type: " + p;
    auto [lo, hi] = arity(n.op);
    if (n.args.size() < lo || n.args.size() > hi)
      return "takes " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
             " argument(s), has " + std::to_string(n.args.size());
    for (ValueId a : n.args) {
      if (a < 0 || static_cast<size_t>(a) >= g_.nodes.size()) return "argument %" + std::to_string(a) + " does not exist";
      if (a >= id_) return "argument %" + std::to_string(a) + " does not come before it (topological order)";
    }
    switch (op_info(n.op).cls) {
      case OpClass::kLeaf: return check_leaf(n);
      case OpClass::kUnary: return check_unary(n);
      case OpClass::kBinary: return check_binary(n);
      case OpClass::kWhere: return check_where(n);
      case OpClass::kStructured: return check_structured(n);
    }
    return "";
  }

  std::string expect(const Node& n, const TensorType& want) const {
    if (n.type == want) return "";
    return "result type " + text(n.type) + " should be " + text(want);
  }

  std::string check_leaf(const Node& n) const {
    if (is_named_leaf(n.op) && n.name.empty()) return "has no name";
    if ((n.op == Op::kScalar || n.op == Op::kConstant) && n.type.rank() != 0)
      return "must be rank 0, is " + text(n.type);
    if (n.op == Op::kScalar && n.type.dtype != DType::kF32 && n.type.dtype != DType::kI32)
      return "run-time scalars are f32 or i32, not " + std::string(dtype_name(n.type.dtype));
    return "";
  }

  std::string check_unary(const Node& n) const {
    const TensorType& x = arg(n, 0);
    switch (n.op) {
      case Op::kCast: return expect(n, {n.type.dtype, x.shape});
      case Op::kNot:
        if (x.dtype != DType::kBool) return "argument is " + text(x) + ", not bool";
        return expect(n, x);
      case Op::kNeg: case Op::kAbs: case Op::kRelu:
        if (!is_float(x.dtype) && x.dtype != DType::kI32) return "argument is " + text(x) + ", not a number";
        return expect(n, x);
      default:
        if (!is_float(x.dtype)) return "argument is " + text(x) + ", not a float";
        return expect(n, x);
    }
  }

  std::string check_binary(const Node& n) const {
    const TensorType &a = arg(n, 0), &b = arg(n, 1);
    if (a.dtype != b.dtype) return "argument dtypes differ: " + text(a) + " and " + text(b);
    std::optional<Shape> shape = broadcast_shapes(a.shape, b.shape);
    if (!shape) return "shapes " + text(a.shape) + " and " + text(b.shape) + " do not broadcast";
    bool logical = n.op == Op::kAnd || n.op == Op::kOr;
    bool comparison = n.op >= Op::kLt && n.op <= Op::kNe;
    if (logical && a.dtype != DType::kBool) return "arguments are " + text(a) + ", not bool";
    if (!logical && !comparison && a.dtype == DType::kBool) return "arithmetic on bool";
    return expect(n, {logical || comparison ? DType::kBool : a.dtype, *shape});
  }

  std::string check_where(const Node& n) const {
    const TensorType &c = arg(n, 0), &a = arg(n, 1), &b = arg(n, 2);
    if (c.dtype != DType::kBool) return "condition is " + text(c) + ", not bool";
    if (a.dtype != b.dtype) return "branch dtypes differ: " + text(a) + " and " + text(b);
    std::optional<Shape> ab = broadcast_shapes(a.shape, b.shape);
    std::optional<Shape> all = ab ? broadcast_shapes(c.shape, *ab) : std::nullopt;
    if (!all) return "shapes " + text(c.shape) + ", " + text(a.shape) + ", " + text(b.shape) + " do not broadcast";
    return expect(n, {a.dtype, *all});
  }

  std::string check_axis(const Node& n, const TensorType& x) const {
    if (n.attrs.axis < 0 || n.attrs.axis >= x.rank())
      return "axis " + std::to_string(n.attrs.axis) + " is outside a rank-" + std::to_string(x.rank()) + " value";
    return "";
  }

  std::string check_structured(const Node& n) const {
    const TensorType& x = arg(n, 0);
    switch (n.op) {
      case Op::kMatMul: return check_matmul(n);
      case Op::kSum: case Op::kMean: case Op::kReduceMax: {
        if (std::string p = check_axis(n, x); !p.empty()) return p;
        Shape s = x.shape;
        if (n.attrs.keepdims) s[n.attrs.axis] = Dim::constant(1);
        else s.erase(s.begin() + n.attrs.axis);
        return expect(n, {x.dtype, s});
      }
      case Op::kSoftmax:
        if (!is_float(x.dtype)) return "argument is " + text(x) + ", not a float";
        if (std::string p = check_axis(n, x); !p.empty()) return p;
        return expect(n, x);
      case Op::kLayerNorm: case Op::kRmsNorm: return check_norm(n);
      case Op::kTranspose: return check_transpose(n);
      case Op::kReshape: return check_reshape(n);
      case Op::kSlice: return check_slice(n);
      case Op::kConcat: return check_concat(n);
      case Op::kGather: {
        const TensorType& ids = arg(n, 1);
        if (ids.dtype != DType::kI32) return "ids are " + text(ids) + ", not i32";
        if (x.rank() < 1) return "table is rank 0";
        Shape s = ids.shape;
        s.insert(s.end(), x.shape.begin() + 1, x.shape.end());
        return expect(n, {x.dtype, s});
      }
      case Op::kAttention: return check_attention(n);
      default: return "unknown structured op";
    }
  }

  std::string check_matmul(const Node& n) const {
    const TensorType &a = arg(n, 0), &b = arg(n, 1);
    if (a.dtype != b.dtype) return "argument dtypes differ: " + text(a) + " and " + text(b);
    if (a.rank() < 2 || b.rank() < 2) return "arguments need rank >= 2: " + text(a) + " @ " + text(b);
    const Dim &m = a.shape[a.rank() - 2], &k = a.shape[a.rank() - 1];
    const Dim &kb = b.shape[b.rank() - 2], &nb = b.shape[b.rank() - 1];
    if (!(k == kb)) return "inner dims differ: " + text(a) + " @ " + text(b);
    std::optional<Shape> batch = broadcast_shapes(Shape(a.shape.begin(), a.shape.end() - 2),
                                                  Shape(b.shape.begin(), b.shape.end() - 2));
    if (!batch) return "batch dims do not broadcast: " + text(a) + " @ " + text(b);
    batch->push_back(m);
    batch->push_back(nb);
    return expect(n, {a.dtype, *batch});
  }

  std::string check_norm(const Node& n) const {
    const TensorType& x = arg(n, 0);
    if (!is_float(x.dtype)) return "argument is " + text(x) + ", not a float";
    if (x.rank() < 1) return "argument is rank 0";
    for (size_t i = 1; i < n.args.size(); ++i) {
      const TensorType& w = arg(n, i);
      bool per_column = w.rank() == 1 && w.shape[0] == x.shape.back();
      if (w.dtype != x.dtype || !(per_column || w.rank() == 0))
        return std::string(i == 1 ? "weight" : "bias") + " is " + text(w) + ", should be " +
               dtype_name(x.dtype) + text(Shape{x.shape.back()}) + " or rank 0";
    }
    return expect(n, x);
  }

  std::string check_transpose(const Node& n) const {
    const TensorType& x = arg(n, 0);
    const auto& perm = n.attrs.ints;
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool is_permutation = static_cast<int>(perm.size()) == x.rank();
    for (size_t i = 0; is_permutation && i < sorted.size(); ++i) is_permutation = sorted[i] == static_cast<int64_t>(i);
    if (!is_permutation) return "perm is not a permutation of the " + std::to_string(x.rank()) + " axes";
    Shape s;
    for (int64_t p : perm) s.push_back(x.shape[static_cast<size_t>(p)]);
    return expect(n, {x.dtype, s});
  }

  // Same element count for every binding: the constant extents multiply to
  // the same number and the same run-time dims appear as often.
  std::string check_reshape(const Node& n) const {
    const TensorType& x = arg(n, 0);
    auto split = [](const Shape& s) {
      int64_t constant = 1;
      std::vector<int> symbols;
      for (const Dim& d : s) {
        if (d.is_runtime()) symbols.push_back(d.symbol);
        else constant *= d.extent;
      }
      std::sort(symbols.begin(), symbols.end());
      return std::make_pair(constant, symbols);
    };
    if (n.type.dtype != x.dtype) return "changes the dtype";
    if (split(n.type.shape) != split(x.shape))
      return "element count of " + text(n.type) + " differs from " + text(x);
    return "";
  }

  std::string check_slice(const Node& n) const {
    const TensorType& x = arg(n, 0);
    const auto& b = n.attrs.ints;
    if (static_cast<int>(b.size()) != 2 * x.rank()) return "needs one [start, stop] pair per axis";
    Shape s;
    for (size_t axis = 0; axis < x.shape.size(); ++axis) {
      const Dim& d = x.shape[axis];
      int64_t start = b[2 * axis], stop = b[2 * axis + 1];
      std::string where = "axis " + std::to_string(axis) + " [" + std::to_string(start) + ", " + std::to_string(stop) + "]";
      if (stop == -1) {  // to the end of the axis
        if (d.is_runtime() && start != 0) return where + ": a run-time dim is sliced whole or from a constant range";
        if (start < 0 || (!d.is_runtime() && start > d.extent)) return where + " does not fit " + text(x);
        s.push_back(d.is_runtime() ? d : Dim::constant(d.extent - start));
        continue;
      }
      // A constant range of a run-time dim must fit its smallest value.
      int64_t limit = d.is_runtime() ? g_.dims[static_cast<size_t>(d.symbol)].lo : d.extent;
      if (start < 0 || start > stop || stop > limit) return where + " does not fit " + text(x);
      s.push_back(Dim::constant(stop - start));
    }
    return expect(n, {x.dtype, s});
  }

  std::string check_concat(const Node& n) const {
    const TensorType& first = arg(n, 0);
    if (std::string p = check_axis(n, first); !p.empty()) return p;
    auto axis = static_cast<size_t>(n.attrs.axis);
    int64_t total = 0;
    bool all_constant = true;
    for (size_t i = 0; i < n.args.size(); ++i) {
      const TensorType& t = arg(n, i);
      if (t.dtype != first.dtype || t.rank() != first.rank())
        return "arguments " + text(first) + " and " + text(t) + " differ in dtype or rank";
      for (size_t k = 0; k < t.shape.size(); ++k)
        if (k != axis && !(t.shape[k] == first.shape[k]))
          return "arguments " + text(first) + " and " + text(t) + " differ off axis " + std::to_string(axis);
      all_constant = all_constant && !t.shape[axis].is_runtime();
      total += t.shape[axis].extent;
    }
    Shape s = first.shape;
    if (all_constant) s[axis] = Dim::constant(total);
    else if (n.args.size() > 1) return "cannot concatenate along a run-time dim";
    return expect(n, {first.dtype, s});
  }

  std::string check_attention(const Node& n) const {
    const TensorType &q = arg(n, 0), &k = arg(n, 1), &v = arg(n, 2), &len = arg(n, 3);
    if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
      return "q, k, v must share one float dtype: " + text(q) + ", " + text(k) + ", " + text(v);
    if (len.dtype != DType::kI32 || len.rank() != 0) return "len is " + text(len) + ", not a rank-0 i32";
    if (q.rank() < 2 || k.rank() != q.rank() + 1 || v.rank() != k.rank())
      return "ranks do not fit q [..., NH, D], k/v [..., NH, T, D]: " + text(q) + ", " + text(k) + ", " + text(v);
    Shape q_rows(q.shape.begin(), q.shape.end() - 1);
    Shape k_rows(k.shape.begin(), k.shape.end() - 2);
    Shape k_positions(k.shape.begin(), k.shape.end() - 1), v_positions(v.shape.begin(), v.shape.end() - 1);
    if (q_rows != k_rows || k_positions != v_positions || !(q.shape.back() == k.shape.back()))
      return "shapes do not fit q [..., NH, D], k/v [..., NH, T, D]: " + text(q) + ", " + text(k) + ", " + text(v);
    Shape s = q_rows;
    s.push_back(v.shape.back());
    return expect(n, {q.dtype, s});
  }

  const Graph& g_;
  ValueId id_ = 0;
};

}  // namespace

std::string verify(const Graph& g) {
  if (std::string problem = verify_structure(g); !problem.empty()) return problem;
  return Verifier(g).run();
}

}  // namespace gdl::ir
