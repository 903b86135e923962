// CUDA C++ generation from a plan: one kernel per plan step.
//
// 1. The translation unit opens with a header comment and includes the
//    device library (stdlib-kernels/gdl_stdlib.cuh, embedded in the
//    compiler and handed to NVRTC as an in-memory header).
// 2. Each step becomes `extern "C" __global__ gdl_s<step>_<op>(arena,
//    params, args)` (the ABI of codegen.h), preceded by a comment naming
//    the step's IR values and their source lines. Its body has
//    a. a prologue: the run-time dims it uses (from args.dims), the run-time
//       scalars (from args.scalars), and typed pointers to the buffers of
//       its operands and result (arena or params + the planned offset);
//       then gdl::allow_dependents and gdl::wait_for_producers (launch
//       overlap, gdl_abi.cuh); a matmul with weights in params pulls the
//       start of its part of them into L2 first, then waits, then lets its
//       dependents launch only if its work is short (weights_prefetch,
//       gdl::matmul_allow_dependents); the streamed attention over a
//       param KV cache issues its first copies of it before it waits
//       (gdl_attention.cuh KV_EARLY);
//    b. the computation. Elementwise values (a fused step's chain or tree
//       of them, fuse.cc) and the data-movement ops (reshape, transpose,
//       slice, concat, gather; alone in their step) become one lambda over
//       the flat indices of the result, run by gdl::for_each_element: each
//       value is a local rounded to its dtype, operands outside the step
//       are loaded through broadcast or permuted strides from the result
//       coordinates, constants are literals, scalars are locals. Matmul,
//       reductions, softmax, norms and attention call their stdlib
//       template; a matmul fused with the elementwise values after it
//       passes them as its epilogue functor (matmul_epilogue), built the
//       same way over the flat indices of the matmul's result. Buffers are
//       addressed at their planned offsets; a view's offset may be aligned
//       to its element size only (plan::buffer_alignment).
//    A matmul step whose rows are known only at run time and may take
//    either the rows or a tiled kernel gets both, as two kernels
//    (gdl_s<step>_matmul and gdl_s<step>_matmul_tiled, codegen.h
//    LargeKernel): the runtime launches the one for the run's rows.
//    Measured on the H200, one kernel holding both paths made each path's
//    speed depend on the other's code (docs/performance.md).
// 3. KernelInfo per step: the launch rule (elementwise: a grid-stride loop
//    over the result; structured ops: one block per task, see task_launch),
//    the run-time scalars read, and whether run-time dims enter.
// 4. Each plan chain (chain.h) becomes gdl_chain<c>, one gdl::MatmulChain
//    kernel for its steps at up to kChainMaxRows rows, and, where the plan
//    gives it row groups, gdl_chain<c>_rows<R> for up to R rows (codegen.h
//    ChainKernel); every step inside is the step's own prologue, pointers
//    and epilogue around the chain's step call.
// Everything is emitted in step and value order from the plan alone, so
// the same plan gives the same text.
#include "codegen/codegen.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "plan/chains.h"
#include "internal_error.h"
#include "plan/kernel_choice.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

constexpr uint32_t kElementwiseBlock = 256;
constexpr int64_t kElementsPerBlock = 1024;  // four per thread, through the grid-stride loop
constexpr int64_t kInt32IndexLimit = int64_t{1} << 30;
constexpr int kAttentionBlock = 256;
constexpr int kAttentionChunk = 512;  // positions scored per pass (shared memory)
constexpr int64_t kAttentionMaxHeadDim = 4096;  // keeps its static shared memory under 48 KiB

// Matmul tilings of gdl::matmul; both run (TM / RM) * (TN / RN) = 256 threads.
struct MatmulTiles {
  int tm, tn, tk, rm, rn;
};
constexpr MatmulTiles kMatmulLarge{64, 64, 16, 4, 4};
constexpr MatmulTiles kMatmulSmallM{16, 32, 64, 1, 2};  // decode: M at most 64, more blocks over N
constexpr uint32_t kMatmulThreads = 256;

const char* storage_type(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    case DType::kI32: return "int";
    case DType::kBool: return "unsigned char";
  }
  return "float";
}

// The type a value is held in inside a kernel (gdl_types.cuh).
const char* compute_type(DType t) { return is_float(t) ? "float" : "int"; }

int64_t max_extent(const Dim& d, const ir::Graph& g) {
  return d.is_runtime() ? g.dims.at(static_cast<size_t>(d.symbol)).hi : d.extent;
}

bool all_constant(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](const Dim& d) { return d.is_runtime(); });
}

bool statically_one_element(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return !d.is_runtime() && d.extent == 1; });
}

Shape sub_shape(const Shape& s, size_t from, size_t to) {
  return Shape(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to));
}

// Shortest decimal that reads back as the same float, as a CUDA float literal.
std::string float_literal(double value) {
  auto f = static_cast<float>(value);
  if (std::isnan(f)) return "gdl::nan_f32()";
  if (std::isinf(f)) return f > 0 ? "gdl::inf_f32()" : "(-gdl::inf_f32())";
  char buf[64];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  std::string text = buf;
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  text += "f";
  return f < 0 || std::signbit(f) ? "(" + text + ")" : text;
}

std::string int_literal(int64_t v) {
  if (v == INT32_MIN) return "(-2147483647 - 1)";
  return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
}

// A compile-time value in the compute type of its dtype, rounded as the
// interpreter rounds it.
std::string constant_literal(double value, DType t) {
  double v = round_to_dtype(value, t);
  if (is_float(t)) return float_literal(v);
  return int_literal(static_cast<int64_t>(v));
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

std::string number_text(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// "%7 = softmax %6 {axis=1} : f16[B, 32]  "probs" at 12:9" for the kernel comment.
std::string describe_value(const ir::Graph& g, ValueId v) {
  const Node& n = g.node(v);
  std::string out = "%" + std::to_string(v) + " = " + ir::op_name(n.op);
  for (size_t i = 0; i < n.args.size(); ++i) out += (i ? ", %" : " %") + std::to_string(n.args[i]);
  switch (n.op) {
    case Op::kSum: case Op::kMean: case Op::kReduceMax:
      out += " {axis=" + std::to_string(n.attrs.axis) + (n.attrs.keepdims ? ", keepdims}" : "}");
      break;
    case Op::kSoftmax: case Op::kConcat: out += " {axis=" + std::to_string(n.attrs.axis) + "}"; break;
    case Op::kLayerNorm: case Op::kRmsNorm: out += " {eps=" + number_text(n.attrs.value) + "}"; break;
    case Op::kAttention: out += " {scale=" + number_text(n.attrs.value) + "}"; break;
    case Op::kTranspose: out += " {perm=" + ints_text(n.attrs.ints) + "}"; break;
    case Op::kSlice: out += " {bounds=" + ints_text(n.attrs.ints) + "}"; break;
    default: break;
  }
  out += " : " + type_to_string(n.type, g.dims);
  if (!n.name.empty()) out += "  \"" + n.name + "\"";
  if (n.loc.valid()) out += " at line " + std::to_string(n.loc.line) + ":" + std::to_string(n.loc.col);
  return one_line(out);
}

bool is_data_movement(Op op) {
  return op == Op::kReshape || op == Op::kTranspose || op == Op::kSlice || op == Op::kConcat || op == Op::kGather;
}

// The stdlib function of an elementwise op (gdl_ops.cuh); kCast has none.
const char* elementwise_function(Op op) {
  switch (op) {
    case Op::kNeg: return "gdl::op::neg";
    case Op::kNot: return "gdl::op::not_";
    case Op::kExp: return "gdl::op::exp";
    case Op::kLog: return "gdl::op::log";
    case Op::kSqrt: return "gdl::op::sqrt";
    case Op::kRsqrt: return "gdl::op::rsqrt";
    case Op::kTanh: return "gdl::op::tanh";
    case Op::kSigmoid: return "gdl::op::sigmoid";
    case Op::kRelu: return "gdl::op::relu";
    case Op::kGelu: return "gdl::op::gelu";
    case Op::kSilu: return "gdl::op::silu";
    case Op::kAbs: return "gdl::op::abs";
    case Op::kAdd: return "gdl::op::add";
    case Op::kSub: return "gdl::op::sub";
    case Op::kMul: return "gdl::op::mul";
    case Op::kDiv: return "gdl::op::div";
    case Op::kMin: return "gdl::op::min";
    case Op::kMax: return "gdl::op::max";
    case Op::kPow: return "gdl::op::pow";
    case Op::kLt: return "gdl::op::lt";
    case Op::kLe: return "gdl::op::le";
    case Op::kGt: return "gdl::op::gt";
    case Op::kGe: return "gdl::op::ge";
    case Op::kEq: return "gdl::op::eq";
    case Op::kNe: return "gdl::op::ne";
    case Op::kAnd: return "gdl::op::and_";
    case Op::kOr: return "gdl::op::or_";
    case Op::kWhere: return "gdl::op::where";
    default: return nullptr;
  }
}

// One factor of a structured kernel's task count: ceil(count(dims) / tile).
struct TaskFactor {
  Shape dims;
  int64_t tile = 1;
};

// Launch rule for a kernel that loops over tasks (gdl::task_first): factors
// whose dims are all constant go into grid.y, the run-time ones into the
// work shape. With one run-time factor (or none) the grid has exactly one
// block per task; with several it has fewer and the task loop covers the
// rest.
LaunchRule task_launch(const std::vector<TaskFactor>& factors, uint32_t block) {
  LaunchRule rule;
  rule.block = block;
  rule.items_per_block = 1;
  int64_t grid_y = 1;
  std::vector<const TaskFactor*> runtime;
  for (const TaskFactor& f : factors) {
    if (all_constant(f.dims)) {
      int64_t count = element_count(f.dims, {});
      grid_y *= std::max<int64_t>(1, (count + f.tile - 1) / f.tile);
    } else {
      runtime.push_back(&f);
    }
  }
  for (const TaskFactor* f : runtime) {
    rule.work.insert(rule.work.end(), f->dims.begin(), f->dims.end());
    rule.items_per_block *= f->tile;
  }
  if (grid_y > 65535) {  // past grid.y's limit: fold it into the work (the task loop stays exact)
    rule.work.push_back(Dim::constant(grid_y));
    grid_y = 1;
  }
  rule.grid_y = static_cast<uint32_t>(grid_y);
  return rule;
}

// Threads for a one-block-per-row kernel over rows of at most `len` elements.
uint32_t row_block(int64_t len) {
  uint32_t block = 32;
  while (block < 256 && block < len) block *= 2;
  if (len >= 8192) block = 512;
  return block;
}

// The valid count of run-time dim `symbol` for this run, read from the
// arena's valid-dims block (plan.h): what a kernel that combines elements
// along a run-time axis stops at when the layout is padded (buckets).
std::string valid_count_expr(int symbol) {
  return "gdl::valid_dim(arena, " + std::to_string(plan::kValidDimsOffset) + "ull, " + std::to_string(symbol) + ")";
}

// Which kernel of its step an emitter writes: the step's only (or first)
// kernel, the large kernel of a matmul step that has two (codegen.h
// LargeKernel), or the step as one block of its chain's kernel (chain.h).
enum class Variant { kFirst, kLarge, kChainStep };

class StepEmitter {
 public:
  StepEmitter(const plan::Plan& p, size_t step_index, const std::map<ValueId, int>& scalar_slot, int sm,
              Variant variant = Variant::kFirst, int chain_step = 0, bool chain_publish_stats = false)
      : plan_(p), g_(p.graph), index_(step_index), step_(p.steps[step_index]), scalar_slot_(scalar_slot), sm_(sm),
        variant_(variant), chain_step_(chain_step), chain_publish_stats_(chain_publish_stats) {}

  // After emit(): the step is a matmul with a rows and a large kernel, and
  // the matmul's rows (its result's shape without the last axis).
  bool has_large_kernel() const { return two_kernels_; }
  const Shape& matmul_rows() const { return matmul_rows_; }

  // The step as a block of its chain's kernel (Variant::kChainStep): its
  // dims, scalars, pointers, epilogue and prologue in a scope of their own,
  // then the chain's step call (gdl_chain.cuh).
  std::string emit_chain_step() {
    LaunchRule unused;
    const std::string inside = kernel_inside(build_body(unused));
    std::string out = "  {  // step " + std::to_string(index_) + "\n";
    for (size_t at = 0; at < inside.size();) {  // one level deeper
      size_t end = inside.find('\n', at);
      if (end == std::string::npos) end = inside.size();
      out += "  " + inside.substr(at, end - at) + "\n";
      at = end + 1;
    }
    return out + "  }\n";
  }

  // After emit() or emit_chain_step(): the run-time scalars and whether any
  // run-time dim the kernel's code reads.
  const std::set<int>& scalars_used() const { return scalars_used_; }
  bool uses_dims() const { return !dims_used_.empty(); }

  std::string emit(Kernel& info) {
    LaunchRule rule;
    const std::string body = build_body(rule);
    const Node& result = g_.node(step_.result);
    info.symbol = "gdl_s" + std::to_string(index_) + "_" + ir::op_name((structured_ ? g_.node(anchor_) : result).op);
    if (variant_ == Variant::kLarge) info.symbol += "_tiled";
    info.launch = rule;
    info.scalars_used.assign(scalars_used_.begin(), scalars_used_.end());
    info.depends_on_dims = !dims_used_.empty() || !all_constant(rule.work);
    info.early_start = early_start_;

    std::string out = "// step " + std::to_string(index_);
    if (!step_.deps.empty()) {
      out += " (after step";
      out += step_.deps.size() > 1 ? "s " : " ";
      for (size_t i = 0; i < step_.deps.size(); ++i) out += (i ? ", " : "") + std::to_string(step_.deps[i]);
      out += ")";
    }
    if (two_kernels_)
      out += variant_ == Variant::kLarge ? ", more than " + std::to_string(kMatmulRowsLimit) + " rows"
                                         : ", at most " + std::to_string(kMatmulRowsLimit) + " rows";
    out += ": " + launch_text(rule) + "\n";
    for (ValueId v : step_.values) out += "//   " + describe_value(g_, v) + "\n";
    std::string bounds = std::to_string(rule.block);
    if (min_blocks_ > 1) bounds += ", " + std::to_string(min_blocks_);  // caps the registers
    const std::string cluster =  // blocks (0, y) .. (0, y + cluster_y_ - 1) form one cluster
        cluster_y_ > 1 ? "__cluster_dims__(1, " + std::to_string(cluster_y_) + ", 1) " : "";
    out += "extern \"C\" __global__ void " + cluster + "__launch_bounds__(" + bounds + ") " + info.symbol +
           "(unsigned char* arena, const unsigned char* params, gdl_args args) {\n";
    return out + kernel_inside(body) + "}\n";
  }

 private:
  // ---------------------------------------------------------------- pieces

  // The step's computation (the statements after the declarations) and its launch rule.
  std::string build_body(LaunchRule& rule) {
    GDL_INTERNAL_ASSERT(!step_.values.empty() && step_.result == step_.values.back(),
                        "step " + std::to_string(index_) + " has no result or it is not its last value");
    const Node& result = g_.node(step_.result);
    GDL_INTERNAL_ASSERT(ir::op_info(result.op).cls != ir::OpClass::kLeaf,
                        "step " + std::to_string(index_) + " computes a leaf");
    for (ValueId v : step_.values) in_step_.insert(v);
    choose_index_type();

    // A structured op comes first in its step; the values after it (only a
    // matmul's) form its epilogue. A matmul may come second, after the norm
    // that is its prologue (fuse.cc).
    norm_prologue_ = matmul_prologue(g_, step_.values);
    anchor_ = step_.values[norm_prologue_ == ir::kNoValue ? 0 : 1];
    const Node& anchor = g_.node(anchor_);
    structured_ = ir::op_info(anchor.op).cls == ir::OpClass::kStructured && !is_data_movement(anchor.op);
    GDL_INTERNAL_ASSERT(!structured_ || step_.values.size() == 1 || anchor.op == Op::kMatMul,
                        "step " + std::to_string(index_) + ": only a matmul takes an epilogue");
    return structured_ ? structured_body(anchor, rule) : elementwise_body(rule);
  }

  // What goes inside the kernel's braces: the dims, scalars and pointers the
  // body uses, the launch-overlap calls (gdl_abi.cuh) unless the body makes
  // them itself or the step is part of a chain, then the body.
  std::string kernel_inside(const std::string& body) const {
    std::string out;
    for (int d : dims_used_)
      out += "  const " + idx_ + " " + dim_name(d) + " = args.dims[" + std::to_string(d) + "];  // dim " +
             one_line(g_.dims.at(static_cast<size_t>(d)).name) + "\n";
    for (int s : scalars_used_) {
      ValueId leaf = scalar_leaf(s);
      const Node& n = g_.node(leaf);
      bool integer = n.type.dtype == DType::kI32;
      out += std::string("  const ") + (integer ? "int" : "float") + " s" + std::to_string(s) + " = gdl::scalar_" +
             (integer ? "i32" : "f32") + "(args.scalars[" + std::to_string(s) + "]);  // scalar \"" +
             one_line(n.name) + "\"\n";
    }
    for (const std::string& line : pointer_lines_)
      if (chain_b_.empty() || line.find(" " + chain_b_ + " = ") == std::string::npos) out += "  " + line + "\n";
    if (variant_ == Variant::kChainStep)  // the step reads them after its rows: into L2 while it waits for those
      for (const auto& [name, bytes] : param_pointers_)
        if (name != chain_b_) out += "  gdl::chain::prefetch_l2(" + name + ", " + std::to_string(bytes) + "ull);\n";
    if (!waits_in_body_ && variant_ != Variant::kChainStep)  // let the next kernels launch, wait for the previous ones
      out += "  gdl::allow_dependents();\n  gdl::wait_for_producers();\n";
    return out + body;
  }

  void choose_index_type() {
    int64_t largest = 1;
    auto consider = [&](ValueId v) { largest = std::max(largest, max_element_count(g_.node(v).type.shape, g_.dims)); };
    for (ValueId v : step_.values) {
      consider(v);
      for (ValueId a : g_.node(v).args) consider(a);
    }
    idx_ = largest <= kInt32IndexLimit ? "int" : "long long";
  }

  std::string dim_name(int symbol) const { return "dim" + std::to_string(symbol); }

  std::string dim(const Dim& d) {
    if (!d.is_runtime()) return std::to_string(d.extent);
    dims_used_.insert(d.symbol);
    return dim_name(d.symbol);
  }

  // Product of the extents of s[from, to) as an index expression.
  std::string product(const Shape& s, size_t from, size_t to) {
    int64_t constant = 1;
    std::vector<std::string> factors;
    for (size_t i = from; i < to && i < s.size(); ++i) {
      if (s[i].is_runtime()) factors.push_back(dim(s[i]));
      else constant *= s[i].extent;
    }
    if (factors.empty()) return std::to_string(constant);
    std::string out;
    for (size_t i = 0; i < factors.size(); ++i) out += (i ? " * " : "") + factors[i];
    if (constant != 1) out += " * " + std::to_string(constant);
    return factors.size() == 1 && constant == 1 ? out : "(" + out + ")";
  }

  // "gdl::Shape<R, I>{{...}}": s left-padded with 1s to rank `rank`.
  std::string shape_literal(const Shape& s, int rank) {
    GDL_INTERNAL_ASSERT(static_cast<int>(s.size()) <= rank, "shape of higher rank than its padding");
    std::string out = "gdl::Shape<" + std::to_string(rank) + ", " + idx_ + ">{{";
    int pad = rank - static_cast<int>(s.size());
    for (int i = 0; i < rank; ++i) {
      out += i ? ", " : "";
      out += i < pad ? "1" : dim(s[static_cast<size_t>(i - pad)]);
    }
    return out + "}}";
  }

  ValueId scalar_leaf(int slot) const {
    for (const auto& [leaf, s] : scalar_slot_)
      if (s == slot) return leaf;
    internal_error(__FILE__, __LINE__, "unknown scalar slot");
  }

  std::string scalar_local(ValueId v) {
    int slot = scalar_slot_.at(v);
    scalars_used_.insert(slot);
    return "s" + std::to_string(slot);
  }

  // The typed pointer to an operand's buffer, declared once in the prologue.
  std::string pointer(ValueId v) {
    auto it = pointer_names_.find(v);
    if (it != pointer_names_.end()) return it->second;
    const plan::Buffer& b = plan_.buffers.at(static_cast<size_t>(v));
    const Node& n = g_.node(v);
    GDL_INTERNAL_ASSERT(b.region == plan::Region::kArena || b.region == plan::Region::kParams,
                        "step " + std::to_string(index_) + " reads %" + std::to_string(v) + ", which has no buffer");
    std::string name = "v" + std::to_string(v);
    std::string type = storage_type(n.type.dtype);
    const char* base = b.region == plan::Region::kArena ? "arena" : "params";
    std::string what = std::string(ir::op_name(n.op)) + (n.name.empty() ? "" : " \"" + one_line(n.name) + "\"");
    pointer_lines_.push_back("const " + type + "* " + name + " = reinterpret_cast<const " + type + "*>(" + base +
                             " + " + std::to_string(b.offset) + "ull);  // %" + std::to_string(v) + " " + what +
                             " : " + type_to_string(n.type, g_.dims));
    pointer_names_[v] = name;
    if (b.region == plan::Region::kParams) param_pointers_.emplace_back(name, b.bytes);
    return name;
  }

  std::string result_pointer() {
    const plan::Buffer& b = plan_.buffers.at(static_cast<size_t>(step_.result));
    const Node& n = g_.node(step_.result);
    GDL_INTERNAL_ASSERT(b.region == plan::Region::kArena,
                        "step " + std::to_string(index_) + " writes outside the arena");
    std::string type = storage_type(n.type.dtype);
    pointer_lines_.push_back(type + "* out = reinterpret_cast<" + type + "*>(arena + " + std::to_string(b.offset) +
                             "ull);  // %" + std::to_string(step_.result) + " : " + type_to_string(n.type, g_.dims));
    return "out";
  }

  bool is_inline_leaf(ValueId v) const {
    Op op = g_.node(v).op;
    return op == Op::kConstant || op == Op::kScalar;
  }

  // A rank-0 operand that never has a buffer: its value as an expression.
  std::string inline_value(ValueId v) {
    const Node& n = g_.node(v);
    if (n.op == Op::kConstant) return constant_literal(n.attrs.value, n.type.dtype);
    return scalar_local(v);
  }

  std::string launch_text(const LaunchRule& r) const {
    std::string out = "block " + std::to_string(r.block);
    out += ", grid.x = ceil(count" + shape_to_string(r.work, g_.dims) + " / " + std::to_string(r.items_per_block) + ")";
    if (r.grid_y != 1) out += ", grid.y " + std::to_string(r.grid_y);
    return out;
  }

  // ------------------------------------------------------------ elementwise

  // Loads operand `a` (outside the step) at the element that the result
  // index maps to under broadcasting.
  std::string broadcast_load(ValueId a) {
    if (is_inline_leaf(a)) return inline_value(a);
    const Shape& s = g_.node(a).type.shape;
    std::string p = pointer(a);
    if (statically_one_element(s)) return "gdl::ld(" + p + "[0])";
    // A chain step's epilogue reading its a (a residual): the chain passes
    // the element from the rows it staged, not a second read from L2.
    if (s == result_shape_ && variant_ == Variant::kChainStep && p == chain_a_) return "a_staged";
    if (s == result_shape_) return "gdl::ld(" + p + "[i])";
    std::string st = "st" + std::to_string(a);
    if (!declared_.count(st)) {
      declared_.insert(st);
      prologue_ += "  const gdl::Strides<" + std::to_string(rank_) + ", " + idx_ + "> " + st +
                   " = gdl::broadcast_strides(" + shape_literal(s, rank_) + ");\n";
    }
    needs_coords_ = true;
    return "gdl::ld(" + p + "[" + st + ".at(c)])";
  }

  std::string operand(ValueId a) {
    if (in_step_.count(a)) return "r" + std::to_string(a);
    return broadcast_load(a);
  }

  // `const C rV = gdl::fit<T>(expr);` for an elementwise value.
  std::string elementwise_statement(ValueId v) {
    const Node& n = g_.node(v);
    std::string local = std::string(compute_type(n.type.dtype)) + " r" + std::to_string(v);
    std::string expr;
    if (n.op == Op::kCast) {
      expr = operand(n.args[0]);
    } else {
      const char* fn = elementwise_function(n.op);
      GDL_INTERNAL_ASSERT(fn != nullptr, std::string("no elementwise function for ") + ir::op_name(n.op));
      expr = std::string(fn) + "(";
      for (size_t i = 0; i < n.args.size(); ++i) expr += (i ? ", " : "") + operand(n.args[i]);
      expr += ")";
    }
    return "    const " + local + " = gdl::fit<" + storage_type(n.type.dtype) + ">(" + expr + ");\n";
  }

  // Row-major strides of operand `a`, declared once as in<a>.
  std::string input_strides(ValueId a) {
    std::string name = "in" + std::to_string(a);
    if (!declared_.count(name)) {
      declared_.insert(name);
      const Shape& s = g_.node(a).type.shape;
      prologue_ += "  const gdl::Strides<" + std::to_string(rank_) + ", " + idx_ + "> " + name +
                   " = gdl::row_major(" + shape_literal(s, rank_) + ");\n";
    }
    return name;
  }

  std::string data_movement_statement(ValueId v) {
    const Node& n = g_.node(v);
    const std::string c_type = compute_type(n.type.dtype);
    const std::string r = "r" + std::to_string(v);
    ValueId x = n.args.at(0);
    const Shape& xs = g_.node(x).type.shape;
    bool plain_copy = n.op == Op::kReshape || xs.empty() ||
                      (n.op == Op::kConcat && n.args.size() == 1);
    if (plain_copy) {
      // Same elements in the same row-major order.
      std::string src = is_inline_leaf(x) ? inline_value(x) : "gdl::ld(" + pointer(x) + "[i])";
      if (!is_inline_leaf(x) && statically_one_element(xs)) src = "gdl::ld(" + pointer(x) + "[0])";
      return "    const " + c_type + " " + r + " = " + src + ";\n";
    }
    switch (n.op) {
      case Op::kTranspose: {
        std::string in = input_strides(x);
        std::string st = "st" + std::to_string(v);
        std::string init;
        for (size_t i = 0; i < n.attrs.ints.size(); ++i)
          init += (i ? ", " : "") + in + ".s[" + std::to_string(n.attrs.ints[i]) + "]";
        prologue_ += "  const gdl::Strides<" + std::to_string(rank_) + ", " + idx_ + "> " + st + "{{" + init +
                     "}};  // input strides in result axis order\n";
        needs_coords_ = true;
        return "    const " + c_type + " " + r + " = gdl::ld(" + pointer(x) + "[" + st + ".at(c)]);\n";
      }
      case Op::kSlice: {
        std::string in = input_strides(x);
        std::string base;
        for (size_t axis = 0; axis < xs.size(); ++axis) {
          int64_t start = n.attrs.ints.at(2 * axis);
          if (start != 0) base += (base.empty() ? "" : " + ") + std::to_string(start) + " * " + in + ".s[" +
                                  std::to_string(axis) + "]";
        }
        if (base.empty()) base = "0";
        std::string b = "base" + std::to_string(v);
        prologue_ += "  const " + idx_ + " " + b + " = " + base + ";  // offset of the slice's first element\n";
        needs_coords_ = true;
        return "    const " + c_type + " " + r + " = gdl::ld(" + pointer(x) + "[" + b + " + " + in + ".at(c)]);\n";
      }
      case Op::kConcat: {
        auto axis = static_cast<size_t>(n.attrs.axis);
        needs_coords_ = true;
        std::string out = "    " + c_type + " " + r + ";\n    {\n";
        out += "      gdl::Coords<" + std::to_string(rank_) + ", " + idx_ + "> at = c;\n";
        out += "      const " + idx_ + " along = c.c[" + std::to_string(axis) + "];\n";
        std::string start;  // first index of operand k along the axis
        for (size_t k = 0; k < n.args.size(); ++k) {
          ValueId a = n.args[k];
          const Shape& as = g_.node(a).type.shape;
          std::string end = start.empty() ? dim(as[axis]) : start + " + " + dim(as[axis]);
          bool last = k + 1 == n.args.size();
          out += std::string("      ") + (k == 0 ? "" : "else ") + (last ? "" : "if (along < " + end + ") ") + "{\n";
          if (!start.empty()) out += "        at.c[" + std::to_string(axis) + "] = along - (" + start + ");\n";
          std::string p = pointer(a);
          std::string st = input_strides(a);
          out += "        " + r + " = gdl::ld(" + p + "[" + st + ".at(at)]);\n";
          out += "      }\n";
          start = end;
        }
        return out + "    }\n";
      }
      case Op::kGather: {
        ValueId ids = n.args.at(1);
        std::string inner = "inner" + std::to_string(v);
        prologue_ += "  const " + idx_ + " " + inner + " = " + product(xs, 1, xs.size()) + ";  // elements per row\n";
        std::string rows = dim(xs[0]);
        std::string table = pointer(x);
        std::string id_expr;
        if (is_inline_leaf(ids)) id_expr = inline_value(ids);
        else if (statically_one_element(g_.node(ids).type.shape)) id_expr = "gdl::ld(" + pointer(ids) + "[0])";
        else id_expr = "gdl::ld(" + pointer(ids) + "[row])";
        std::string out = "    const " + idx_ + " row = i / " + inner + ";\n";
        out += "    const " + idx_ + " column = i - row * " + inner + ";\n";
        out += "    const int id = " + id_expr + ";\n";
        out += "    const " + c_type + " " + r + " = id >= 0 && id < " + rows + " ? gdl::ld(" + table + "[(" + idx_ +
               ")id * " + inner + " + column]) : (" + c_type + ")0;  // out of range: 0\n";
        return out;
      }
      default: break;
    }
    internal_error(__FILE__, __LINE__, std::string("not a data-movement op: ") + ir::op_name(n.op));
  }

  std::string elementwise_body(LaunchRule& rule) {
    const Node& result = g_.node(step_.result);
    result_shape_ = result.type.shape;
    rank_ = std::max(1, result.type.rank());
    for (ValueId v : step_.values) {
      const Node& n = g_.node(v);
      bool data_movement = is_data_movement(n.op);
      GDL_INTERNAL_ASSERT(ir::is_elementwise(n.op) || (data_movement && step_.values.size() == 1),
                          std::string("step ") + std::to_string(index_) + ": cannot fuse " + ir::op_name(n.op) +
                              " into an elementwise kernel");
      GDL_INTERNAL_ASSERT(broadcast_shapes(n.type.shape, result_shape_) == result_shape_,
                          "a fused value does not broadcast to the step's result");
    }
    std::string statements;
    for (ValueId v : step_.values) {
      const Node& n = g_.node(v);
      statements += is_data_movement(n.op) ? data_movement_statement(v) : elementwise_statement(v);
    }
    std::string out_ptr = result_pointer();
    statements += "    " + out_ptr + "[i] = gdl::cvt<" + storage_type(result.type.dtype) + ">(r" +
                  std::to_string(step_.result) + ");\n";

    std::string body = "  const gdl::Shape<" + std::to_string(rank_) + ", " + idx_ + "> shape = " +
                       shape_literal(result_shape_, rank_) + ";\n";
    body += prologue_;
    body += "  gdl::for_each_element<" + idx_ + ">(shape.count(), [&](const " + idx_ + " i) {\n";
    if (needs_coords_)
      body += "    const gdl::Coords<" + std::to_string(rank_) + ", " + idx_ + "> c = gdl::coords_of(shape, i);\n";
    body += statements;
    body += "  });\n";

    rule = LaunchRule{};
    rule.work = result_shape_;
    rule.items_per_block = kElementsPerBlock;
    rule.block = kElementwiseBlock;
    return body;
  }

  // The epilogue of a fused matmul step, defined in `body` before the call:
  //   const auto epi = [&](const float acc, const I i) -> float { ...; return rR; };
  // The matmul kernel calls it with each element's accumulator and its flat
  // index in the matmul's result, which has the step result's shape, and
  // stores what it returns, converted to the result's dtype. The matmul's
  // value is rounded to its dtype first, then every other value is computed
  // and rounded as in an elementwise kernel: operands outside the step are
  // loaded at i through broadcast strides, constants are literals, scalars
  // locals. Returns the functor to pass: its name, or for a step that is the
  // matmul alone gdl::IdentityEpilogue (the sum rounded to the matmul's dtype).
  std::string matmul_epilogue(std::string& body) {
    const ValueId anchor = anchor_;
    const Node& matmul = g_.node(anchor);
    if (step_.result == anchor) return std::string("gdl::IdentityEpilogue<") + storage_type(matmul.type.dtype) + ">{}";
    const Node& result = g_.node(step_.result);
    GDL_INTERNAL_ASSERT(matmul.type.shape == result.type.shape && is_float(matmul.type.dtype) &&
                            is_float(result.type.dtype),
                        "step " + std::to_string(index_) + ": a matmul epilogue needs float values of the matmul's shape");
    result_shape_ = result.type.shape;
    rank_ = std::max(1, result.type.rank());
    std::string statements = "    const float r" + std::to_string(anchor) + " = gdl::fit<" +
                             storage_type(matmul.type.dtype) + ">(acc);\n";
    for (size_t k = norm_prologue_ == ir::kNoValue ? 1 : 2; k < step_.values.size(); ++k) {
      ValueId v = step_.values[k];
      const Node& n = g_.node(v);
      GDL_INTERNAL_ASSERT(ir::is_elementwise(n.op), std::string("step ") + std::to_string(index_) + ": cannot fuse " +
                                                        ir::op_name(n.op) + " into a matmul epilogue");
      GDL_INTERNAL_ASSERT(broadcast_shapes(n.type.shape, result_shape_) == result_shape_,
                          "a fused value does not broadcast to the step's result");
      statements += elementwise_statement(v);
    }
    if (needs_coords_)
      body += "  const gdl::Shape<" + std::to_string(rank_) + ", " + idx_ + "> shape = " +
              shape_literal(result_shape_, rank_) + ";  // of the matmul's result\n";
    body += prologue_;
    body += "  const auto epi = [&](const float acc, const " + idx_ + " i" +
            (variant_ == Variant::kChainStep ? ", const float a_staged" : "") + ") -> float {\n";
    if (needs_coords_)
      body += "    const gdl::Coords<" + std::to_string(rank_) + ", " + idx_ + "> c = gdl::coords_of(shape, i);\n";
    body += statements;
    body += "    return r" + std::to_string(step_.result) + ";\n  };\n";
    return "epi";
  }

  // The norm prologue of a fused matmul step (fuse.cc), defined in `body`:
  //   const auto pro = gdl::layernorm_prologue<T>(weight, bias, eps);
  // (gdl_matmul.cuh), or gdl::NoPrologue{} for a step without one.
  std::string matmul_prologue_functor(std::string& body) {
    if (norm_prologue_ == ir::kNoValue) return "gdl::NoPrologue{}";
    const Node& norm = g_.node(norm_prologue_);
    std::vector<std::string> sources;
    for (size_t i = 1; i < norm.args.size(); ++i) sources.push_back(operand_source(norm, i));
    const std::string weight = sources.size() > 0 ? sources[0] : "gdl::One{}";
    const std::string t = storage_type(norm.type.dtype), eps = float_literal(norm.attrs.value);
    if (norm.op == Op::kLayerNorm) {
      const std::string bias = sources.size() > 1 ? sources[1] : "gdl::Zero{}";
      body += "  const auto pro = gdl::layernorm_prologue<" + t + ">(" + weight + ", " + bias + ", " + eps + ");\n";
    } else {
      body += "  const auto pro = gdl::rmsnorm_prologue<" + t + ">(" + weight + ", " + eps + ");\n";
    }
    return "pro";
  }

  // ------------------------------------------------------------ structured

  // The SplitScratch argument of a kernel that splits its tiles `splits`
  // ways: the step's tickets and partial tiles (plan::Step), declared in
  // `body` as `tickets` and `partials` the first time; none when the splits
  // run as a cluster (kernel_choice.h), whose parts stay in shared memory.
  std::string split_scratch(int splits, bool in_cluster, const SplitScratchSize& need, std::string& body) {
    if (splits <= 1 || in_cluster) return "gdl::SplitScratch{nullptr, nullptr, " + std::to_string(splits) + "}";
    GDL_INTERNAL_ASSERT(need.ticket_bytes() > 0 && step_.tickets_bytes >= need.ticket_bytes() &&
                            step_.scratch_bytes >= need.partial_bytes(),
                        "step " + std::to_string(index_) + " has less scratch than its kernel needs");
    if (!declared_.count("tickets")) {
      declared_.insert("tickets");
      body += "  unsigned* const tickets = reinterpret_cast<unsigned*>(arena + " + std::to_string(step_.tickets_offset) +
              "ull);  // scratch: one ticket per tile, zero between launches\n";
      body += "  float* const partials = reinterpret_cast<float*>(arena + " + std::to_string(step_.scratch_offset) +
              "ull);  // scratch: partial tiles\n";
    }
    return "gdl::SplitScratch{tickets, partials, " + std::to_string(splits) + "}";
  }

  // A matmul (kernel_choice.h picks the kernel): [..., M, K] @ [..., K, N]
  // summing the first k_valid positions of K (all of them unless K is a
  // padded run-time dim). With b shared the batch folds into the rows.
  std::string matmul_body(const Node& n, const std::vector<std::string>& args, const std::string& out_ptr,
                          LaunchRule& rule) {
    const Shape &as = g_.node(n.args.at(0)).type.shape, &bs = g_.node(n.args.at(1)).type.shape;
    const Shape& rs = n.type.shape;
    const size_t batch_rank = rs.size() - 2;
    const int nb = std::max<int>(1, static_cast<int>(batch_rank));
    const MatmulChoice choice = choose_matmul(g_, n);
    std::string body;
    auto local = [&](const std::string& name, const std::string& value) {
      body += "  const " + idx_ + " " + name + " = " + value + ";\n";
    };
    if (variant_ == Variant::kChainStep) {  // one step of a chain (chain.h): the chain holds b and the launch
      GDL_INTERNAL_ASSERT(choice.fold_batch, "step " + std::to_string(index_) + ": a chain step folds its batch");
      chain_a_ = args[0];  // the rows the chain stages, which its epilogue may read again
      const std::string epi = matmul_epilogue(body);
      const std::string pro = matmul_prologue_functor(body);
      local("rows", product(rs, 0, rs.size() - 1));
      chain_b_ = args[1];  // the chain streams b itself (its chain_weights)
      body += "  chain.step(" + std::to_string(chain_step_) + ", " + args[0] + ", " + out_ptr + ", rows, " + epi + ", " +
              pro + ", " + (chain_publish_stats_ ? "true" : "false") + ");  // publish_stats: " +
              (chain_publish_stats_ ? "the next step's norm reads them" : "no next step reads them") + "\n";
      return body;
    }
    // The fast kernels of a folded batch take the folded row count instead.
    if (choice.tiles == MatmulKernel::kGeneral || !choice.fold_batch) local("M", dim(as[as.size() - 2]));
    local("K", dim(as[as.size() - 1]));
    local("N", dim(bs[bs.size() - 1]));
    const Dim& k_dim = as.back();
    // A padded K (buckets): only its valid positions are summed.
    local("k_valid", k_dim.is_runtime() ? valid_count_expr(k_dim.symbol) : "K");
    auto batch_map = [&] {
      std::string map = "gdl::BatchMap<" + std::to_string(nb) + ", 2, " + idx_ + ">";
      body += "  " + map + " batches(" + shape_literal(sub_shape(rs, 0, batch_rank), nb) + ");\n";
      body += "  batches.set(0, " + shape_literal(sub_shape(as, 0, as.size() - 2), nb) + ", M * K);  // a\n";
      body += "  batches.set(1, " + shape_literal(sub_shape(bs, 0, bs.size() - 2), nb) + ", K * N);  // b\n";
    };
    const std::string epi = matmul_epilogue(body);
    const std::string pro = matmul_prologue_functor(body);
    const Shape row_dims = sub_shape(rs, 0, rs.size() - 1);  // the batch, then M

    if (choice.tiles == MatmulKernel::kGeneral) {
      GDL_INTERNAL_ASSERT(norm_prologue_ == ir::kNoValue, "step " + std::to_string(index_) +
                                                         ": the general matmul kernel takes no norm prologue");
      body += "  // matmul kernel: general\n";
      batch_map();
      MatmulTiles t = max_extent(rs[rs.size() - 2], g_) <= 64 ? kMatmulSmallM : kMatmulLarge;
      body += "  gdl::matmul<" + std::to_string(t.tm) + ", " + std::to_string(t.tn) + ", " + std::to_string(t.tk) + ", " +
              std::to_string(t.rm) + ", " + std::to_string(t.rn) + ", " + idx_ + ">(" + args[0] + ", " + args[1] + ", " +
              out_ptr + ", M, N, K, k_valid, batches, " + epi + ");\n";
      rule = task_launch({{sub_shape(rs, 0, batch_rank), 1}, {{rs[rs.size() - 2]}, t.tm}, {{rs.back()}, t.tn}},
                         kMatmulThreads);
      return body;
    }

    min_blocks_ = static_cast<int>(kMatmulBlocksPerSM);  // at most 128 registers: two blocks per multiprocessor
    // Both kernels may run (the rows known only at run time): this emitter
    // writes one of them, generate_cuda the other.
    bool use_rows = choice.use_rows, use_tiles = choice.use_tiles;
    if (use_rows && use_tiles) {
      two_kernels_ = true;
      matmul_rows_ = row_dims;
      (variant_ == Variant::kLarge ? use_rows : use_tiles) = false;
    }
    const std::string tiles_name = matmul_kernel_name(choice.tiles);
    body += "  // matmul kernel: " +
            (use_rows ? "rows (" + std::to_string(choice.rows_splits) + " K split(s)" +
                            (choice.rows_cluster ? ", one cluster per strip" : "") + ")"
                      : tiles_name + " (" + std::to_string(choice.tile_splits) + " K split(s)" +
                            (choice.tile_cluster ? ", one cluster per tile" : "") + ")") + "\n";
    const std::string smem = use_rows ? "gdl::kMatmulRowsSmem"
                             : choice.tiles == MatmulKernel::kMma ? "gdl::kMatmulMmaSmem" : "gdl::kMatmulSimtSmem";
    body += "  __shared__ __align__(128) unsigned char smem[" + smem + "];\n";

    std::string rows_call, tiles_call;
    if (choice.fold_batch) {
      local("rows", product(rs, 0, rs.size() - 1) + "");  // every batch entry's rows against the one b
      if (use_tiles)  // the rows kernel takes no batch map
        body += "  const gdl::BatchMap<1, 2, " + idx_ + "> single(gdl::Shape<1, " + idx_ + ">{{1}});  // batch folded into rows\n";
    } else {
      batch_map();
    }
    if (use_rows) {
      if (choice.rows_cluster) cluster_y_ = choice.rows_splits;  // the K splits of a strip: one cluster
      rows_call = "gdl::matmul_rows<" + std::to_string(choice.row_tile) +
                  (choice.rows_cluster ? ", " + std::to_string(choice.rows_splits) : "") + ">(" + args[0] + ", " +
                  args[1] + ", " + out_ptr + ", rows, N, K, k_valid, " +
                  split_scratch(choice.rows_splits, choice.rows_cluster, choice.scratch, body) + ", " + epi + ", " +
                  pro + ", smem);";
    }
    if (use_tiles) {
      std::string m = choice.fold_batch ? "rows" : "M";
      std::string map = choice.fold_batch ? "single" : "batches";
      if (choice.tile_cluster) cluster_y_ = choice.tile_splits;  // the K splits of a tile: one cluster
      const std::string cluster = choice.tile_cluster ? "<" + std::to_string(choice.tile_splits) + ">" : "";
      tiles_call = "gdl::matmul_" + tiles_name + cluster + "(" + args[0] + ", " + args[1] + ", " + out_ptr + ", " + m +
                   ", N, K, k_valid, " + map + ", " +
                   split_scratch(choice.tile_splits, choice.tile_cluster, choice.scratch, body) + ", " + epi + ", " +
                   pro + ", smem);";
    }
    body += weights_prefetch(n, choice, use_rows, args[1]);
    body += "  " + (use_rows ? rows_call : tiles_call) + "\n";

    // Launch: one block per task.
    const int64_t strip = matmul_strip_columns(n.type.dtype);
    LaunchRule rows_rule = task_launch({{{rs.back()}, strip}, {{Dim::constant(choice.rows_splits)}, 1}}, kMatmulThreads);
    LaunchRule tiles_rule =
        choice.fold_batch
            ? task_launch({{row_dims, kMatmulTileRows}, {{rs.back()}, kMatmulTileCols},
                           {{Dim::constant(choice.tile_splits)}, 1}}, kMatmulThreads)
            : task_launch({{sub_shape(rs, 0, batch_rank), 1}, {{rs[rs.size() - 2]}, kMatmulTileRows},
                           {{rs.back()}, kMatmulTileCols}, {{Dim::constant(choice.tile_splits)}, 1}}, kMatmulThreads);
    rule = use_rows ? rows_rule : tiles_rule;
    return body;
  }


  // A matmul whose b is a param (weights, which no kernel writes) pulls its
  // block's part of b into L2 before it waits for the kernels it depends on
  // (gdl_abi.cuh), then lets its own dependents launch. Everything emitted
  // before this point is pointer and dim arithmetic. Other kernels wait
  // first (emit()).
  std::string weights_prefetch(const Node& n, const MatmulChoice& choice, bool use_rows, const std::string& b) {
    const plan::Buffer& buffer = plan_.buffers.at(static_cast<size_t>(n.args.at(1)));
    if (!choice.fold_batch || buffer.region != plan::Region::kParams) return "";
    waits_in_body_ = true;
    const std::string bk = choice.tiles == MatmulKernel::kSimt ? "gdl::mm::kSimtBK" : "gdl::mm::kMmaBK";
    const std::string rows = std::string("gdl::matmul_rows_prefetch") +
                             (choice.rows_cluster ? "<" + std::to_string(choice.rows_splits) + ">" : "") + "(" + b +
                             ", N, K, " + std::to_string(choice.rows_splits) + ");";
    const std::string cluster = choice.tile_cluster ? ", " + std::to_string(choice.tile_splits) : "";
    const std::string tiles = "gdl::matmul_tiles_prefetch<" + bk + cluster + ">(" + b + ", rows, N, K, " +
                              std::to_string(choice.tile_splits) + ");";
    return "  // before the kernels this one depends on finish: its part of the weights into L2\n  " +
           (use_rows ? rows : tiles) + "\n  gdl::wait_for_producers();\n  gdl::matmul_allow_dependents(rows, N, K);\n";
  }

  // Argument `arg` of a structured op as its stdlib template takes it: a
  // typed pointer, or for a norm's weight/bias and attention's length a
  // gdl:: operand source (which also covers constants and scalars).
  std::string operand_source(const Node& n, size_t arg) {
    ValueId a = n.args[arg];
    const Node& an = g_.node(a);
    bool norm_column = (n.op == Op::kLayerNorm || n.op == Op::kRmsNorm) && arg > 0;
    bool length = n.op == Op::kAttention && arg == 3;
    if (norm_column) {
      if (an.op == Op::kConstant) return "gdl::Value{" + float_literal(round_to_dtype(an.attrs.value, an.type.dtype)) + "}";
      if (an.op == Op::kScalar) return "gdl::Value{(float)" + scalar_local(a) + "}";
      std::string type = storage_type(an.type.dtype);
      std::string p = pointer(a);
      return (an.type.rank() == 0 ? "gdl::First<" : "gdl::Column<") + type + ">{" + p + "}";
    }
    if (length) {
      std::string source = is_inline_leaf(a) ? "gdl::IntValue{" + inline_value(a) + "}" : "gdl::IntAt{" + pointer(a) + "}";
      const Shape& ks = g_.node(n.args.at(1)).type.shape;
      const Dim& positions = ks.at(ks.size() - 2);
      if (!positions.is_runtime()) return source;
      // A padded T: positions past its valid count are padding, whatever len says.
      const char* type = is_inline_leaf(a) ? "gdl::IntValue" : "gdl::IntAt";
      return std::string("gdl::ClampedLen<") + type + ">{" + source + ", " + valid_count_expr(positions.symbol) + "}";
    }
    return pointer(a);
  }

  // Operand pointers are declared in argument order, then the result's; every
  // pointer()/dim() call is its own statement so that the order of the
  // declarations does not depend on how a compiler evaluates `a + f() + g()`.
  std::string structured_body(const Node& n, LaunchRule& rule) {
    std::vector<std::string> args;
    for (size_t i = 0; i < n.args.size(); ++i)  // a fused norm's input stands for its result
      args.push_back(i == 0 && n.args[0] == norm_prologue_ ? pointer(g_.node(norm_prologue_).args.at(0)) : operand_source(n, i));
    const std::string out_ptr = result_pointer();
    std::string body;
    auto local = [&](const std::string& name, const std::string& value) {
      body += "  const " + idx_ + " " + name + " = " + value + ";\n";
    };
    switch (n.op) {
      case Op::kMatMul: return matmul_body(n, args, out_ptr, rule);
      case Op::kSum: case Op::kMean: case Op::kReduceMax: case Op::kSoftmax: {
        ValueId x = n.args.at(0);
        const Shape& xs = g_.node(x).type.shape;
        const std::string& in = args[0];
        auto axis = static_cast<size_t>(n.attrs.axis);
        bool last_axis = statically_one_element(sub_shape(xs, axis + 1, xs.size()));
        std::string in_type = storage_type(g_.node(x).type.dtype);
        local("outer", product(xs, 0, axis));
        local("len", dim(xs[axis]));
        if (!last_axis) local("inner", product(xs, axis + 1, xs.size()));
        // A run-time axis may be padded (buckets): combine its valid positions only.
        const bool padded = xs[axis].is_runtime();
        if (padded) local("valid", valid_count_expr(xs[axis].symbol));
        const std::string valid_arg = padded ? ", valid" : "";
        Shape outer = sub_shape(xs, 0, axis), inner = sub_shape(xs, axis + 1, xs.size());
        if (n.op == Op::kSoftmax) {
          if (last_axis) {
            body += "  gdl::softmax_rows<" + idx_ + ">(" + in + ", " + out_ptr + ", outer, len" + valid_arg + ");\n";
            rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], g_)));
          } else {
            body += "  gdl::softmax_cols<" + idx_ + ">(" + in + ", " + out_ptr + ", outer, len, inner" + valid_arg + ");\n";
            rule = LaunchRule{};  // one thread per column, grid-stride
            rule.work = outer;
            rule.work.insert(rule.work.end(), inner.begin(), inner.end());
            rule.items_per_block = kElementwiseBlock;
            rule.block = kElementwiseBlock;
          }
          return body;
        }
        const char* policy = n.op == Op::kSum ? "Sum" : n.op == Op::kMean ? "Mean" : "Max";
        std::string p = std::string("gdl::") + policy + "<" + in_type + ">";
        if (last_axis) {
          body += "  gdl::reduce_rows<" + p + ", " + idx_ + ">(" + in + ", " + out_ptr + ", outer, len" + valid_arg + ");\n";
          rule = task_launch({{outer, 1}}, row_block(max_extent(xs[axis], g_)));
        } else {
          body += "  gdl::reduce_cols<" + p + ", " + idx_ + ">(" + in + ", " + out_ptr +
                  ", outer, len, inner" + valid_arg + ");\n";
          rule = task_launch({{outer, 1}, {inner, 32}}, 256);
        }
        return body;
      }
      case Op::kLayerNorm: case Op::kRmsNorm: {
        const Shape& xs = g_.node(n.args.at(0)).type.shape;
        local("rows", product(xs, 0, xs.size() - 1));
        local("len", dim(xs.back()));
        // A run-time last axis may be padded (buckets): statistics over its valid positions only.
        const bool padded = xs.back().is_runtime();
        if (padded) local("valid", valid_count_expr(xs.back().symbol));
        const std::string extents = padded ? ", rows, len, valid, " : ", rows, len, ";
        std::string eps = float_literal(n.attrs.value);
        if (n.op == Op::kLayerNorm) {
          std::string weight = args.size() > 1 ? args[1] : "gdl::One{}";
          std::string bias = args.size() > 2 ? args[2] : "gdl::Zero{}";
          body += "  gdl::layernorm_rows<" + idx_ + ">(" + args[0] + ", " + weight + ", " + bias + ", " + out_ptr +
                  extents + eps + ");\n";
        } else {
          std::string weight = args.size() > 1 ? args[1] : "gdl::One{}";
          body += "  gdl::rmsnorm_rows<" + idx_ + ">(" + args[0] + ", " + weight + ", " + out_ptr + extents +
                  eps + ");\n";
        }
        rule = task_launch({{sub_shape(xs, 0, xs.size() - 1), 1}}, row_block(max_extent(xs.back(), g_)));
        return body;
      }
      case Op::kAttention: {
        const Shape& qs = g_.node(n.args.at(0)).type.shape;
        const Shape& ks = g_.node(n.args.at(1)).type.shape;
        const Shape& vs = g_.node(n.args.at(2)).type.shape;
        int64_t d_max = max_extent(qs.back(), g_), dv_max = max_extent(vs.back(), g_);
        GDL_INTERNAL_ASSERT(d_max <= kAttentionMaxHeadDim && dv_max <= kAttentionMaxHeadDim,
                            "attention head dims above " + std::to_string(kAttentionMaxHeadDim) + " are not supported");
        const AttentionChoice choice = choose_attention(g_, n);
        local("rows", product(qs, 0, qs.size() - 1));
        local("positions", dim(ks[ks.size() - 2]));
        auto buffer = [&](int arg) -> const plan::Buffer& {
          return plan_.buffers.at(static_cast<size_t>(n.args.at(arg)));
        };
        auto aligned16 = [&](int arg) { return plan::buffer_alignment(buffer(arg)) >= 16; };
        const bool aligned = aligned16(0) && aligned16(1) && aligned16(2);  // q, k, v
        if (choice.stream_splits > 0 && aligned && sm_ >= 90) {  // bulk copies and mbarrier byte counts: sm_90
          const std::string layout = std::to_string(d_max) + ", " + std::to_string(dv_max);  // D, DV
          const std::string ring = std::to_string(choice.stream_positions) + ", " + std::to_string(choice.stream_stages);
          const std::string bytes = std::to_string(choice.stream_shared_bytes);
          body += "  // attention kernel: streamed, " + std::to_string(choice.stream_splits) +
                  " block(s) per row over the positions, a ring of " + bytes + " bytes\n";
          body += "  extern __shared__ __align__(128) unsigned char attention_ring[];\n";
          body += "  static_assert(gdl::AttentionStream<" + layout + ", " + storage_type(n.type.dtype) + ", " + ring +
                  ">::bytes == " + bytes + ", \"the shared memory gdlc asks the launch for\");\n";
          const std::string scratch = split_scratch(choice.stream_splits, false, choice.scratch, body);
          // k and v params (a KV cache that persists across runs): their first copies go out before the
          // kernel waits for the ones it depends on (gdl_attention.cuh KV_EARLY), so it waits in its body.
          auto param = [&](int arg) { return buffer(arg).region == plan::Region::kParams; };
          const bool kv_early = choice.stream_early && param(1) && param(2);
          waits_in_body_ |= kv_early;
          early_start_ |= kv_early;
          body += "  gdl::attention_stream<" + layout + ", " + ring + ", " + (kv_early ? "true" : "false") + ", " +
                  idx_ + ">(" + args[0] + ", " + args[1] +
                  ", " + args[2] + ", " + out_ptr + ", " + args[3] + ", rows, positions, " +
                  float_literal(n.attrs.value) + ", " + scratch + ", attention_ring);\n";
          rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), 1}, {{Dim::constant(choice.stream_splits)}, 1}},
                             kAttentionBlock);
          rule.shared_bytes = choice.stream_shared_bytes;
          return body;
        }
        local("D", dim(qs.back()));
        local("DV", dim(vs.back()));
        body += "  // attention kernel: split, " + std::to_string(choice.splits) + " block(s) per row over the positions\n";
        body += "  gdl::attention_split<" + std::to_string(std::max<int64_t>(1, d_max)) + ", " +
                std::to_string(std::max<int64_t>(1, dv_max)) + ", " + std::to_string(kAttentionChunk) + ", " + idx_ +
                ">(" + args[0] + ", " + args[1] + ", " + args[2] + ", " + out_ptr + ", " + args[3] +
                ", rows, positions, D, DV, " + float_literal(n.attrs.value) + ", " +
                split_scratch(choice.splits, false, choice.scratch, body) + ");\n";
        rule = task_launch({{sub_shape(qs, 0, qs.size() - 1), 1}, {{Dim::constant(choice.splits)}, 1}}, kAttentionBlock);
        return body;
      }
      default: break;
    }
    internal_error(__FILE__, __LINE__, std::string("no kernel for ") + ir::op_name(n.op));
  }

  const plan::Plan& plan_;
  const ir::Graph& g_;
  size_t index_;
  const plan::Step& step_;
  const std::map<ValueId, int>& scalar_slot_;
  int sm_;  // the target's compute capability (90 for sm_90)

  std::string idx_ = "int";
  std::set<ValueId> in_step_;
  std::set<int> dims_used_;
  std::set<int> scalars_used_;
  std::map<ValueId, std::string> pointer_names_;
  std::vector<std::string> pointer_lines_;
  std::set<std::string> declared_;
  std::string prologue_;   // elementwise: strides declared before the loop
  Shape result_shape_;
  int rank_ = 1;
  bool needs_coords_ = false;
  int min_blocks_ = 0;  // blocks per multiprocessor the kernel's registers must allow (0: no bound)
  Variant variant_ = Variant::kFirst;
  int chain_step_ = 0;  // Variant::kChainStep: the step's index in its chain
  bool chain_publish_stats_ = false;  // Variant::kChainStep: the next step's norm reads the blocks' partial sums
  std::string chain_b_;  // Variant::kChainStep: b's pointer, which the step leaves undeclared
  std::string chain_a_;  // Variant::kChainStep: a's pointer, whose elements the chain passes to the epilogue
  std::vector<std::pair<std::string, uint64_t>> param_pointers_;  // pointers into params, with their buffers' bytes
  int cluster_y_ = 0;  // > 1: the kernel runs in clusters of that many blocks along grid.y
  bool two_kernels_ = false;  // a matmul with a rows and a large kernel
  Shape matmul_rows_;
  bool waits_in_body_ = false;  // the body calls wait_for_producers itself, after its prefetch
  bool early_start_ = false;    // Kernel::early_start
  ValueId norm_prologue_ = ir::kNoValue;  // a norm fused in front of the step's matmul
  ValueId anchor_ = ir::kNoValue;    // the step's first value after any prologue
  bool structured_ = false;          // the anchor is a structured op (not elementwise or data movement)
};

// Whether a chain step's norm prologue takes its rows' statistics from the
// partial sums the blocks store in the step before (above the chain's
// mailbox K): a norm with a weight or a bias operand, which the kernel does
// not fold into its mma (MatmulChain::fold_of; a weight or bias that is a
// constant one or zero counts here too, which only costs the stores).
bool chain_norm_reads_partial_stats(const ir::Graph& g, const plan::Step& step) {
  const ValueId norm = matmul_prologue(g, step.values);
  return norm != ir::kNoValue && g.node(norm).args.size() > 1;
}

// A kernel of plan chain `c` (gdl::MatmulChain, gdl_chain.cuh) in `groups`
// row groups (1: the kernel for at most kChainMaxRows rows): the weights of
// every step, the chain, then each step as a block of its own (StepEmitter,
// Variant::kChainStep). Appends its Kernel to `out`.
std::string chain_kernel(const plan::Plan& p, size_t c, int64_t groups, const std::map<ValueId, int>& scalar_slot,
                         int sm, std::vector<Kernel>& out) {
  const plan::Chain& chain = p.chains[c];
  const ir::Graph& g = p.graph;
  std::vector<uint64_t> weights;  // params offsets
  DType dtype = DType::kF16;
  Shape rows;
  for (int s = chain.first; s <= chain.last; ++s) {
    const plan::Step& step = p.steps[static_cast<size_t>(s)];
    const Node& matmul = g.node(step.values[matmul_prologue(g, step.values) == ir::kNoValue ? 0 : 1]);
    const plan::Buffer& b = p.buffers.at(static_cast<size_t>(matmul.args[1]));
    GDL_INTERNAL_ASSERT(matmul.op == Op::kMatMul && b.region == plan::Region::kParams,
                        "chain step " + std::to_string(s) + " is not a matmul with a param b");
    dtype = matmul.type.dtype;
    rows = sub_shape(matmul.type.shape, 0, matmul.type.shape.size() - 1);
    weights.push_back(b.offset);
  }
  const int64_t cols = groups > 1 ? chain_group_columns(chain.k, groups) : chain_block_columns(chain.k);
  const std::string t = storage_type(dtype), k = std::to_string(chain.k), cols_text = std::to_string(cols);
  const uint32_t blocks = static_cast<uint32_t>(chain.k / cols);
  const uint64_t tensor_maps_offset = chain.scratch_offset + chain_tensor_maps_at(chain, chain_kernel_index(groups));
  Kernel info;
  info.symbol = "gdl_chain" + std::to_string(c) + (groups > 1 ? "_rows" + std::to_string(groups * kChainMaxRows) : "");
  info.first_step = chain.first;
  info.last_step = chain.last;
  info.rows = rows;
  info.min_rows = groups > 1 ? kChainMaxRows + 1 : 0;
  info.max_rows = groups * kChainMaxRows;
  info.launch.work = {Dim::constant(blocks)};  // a grid of exactly blocks x groups
  info.launch.items_per_block = 1;
  info.launch.grid_y = static_cast<uint32_t>(groups);
  info.launch.block = kChainThreads;
  info.launch.shared_bytes = chain_shared_bytes(chain.k, cols);
  info.cooperative = true;
  for (size_t i = 0; i < weights.size(); ++i) {
    // The producer copies a box of kChainKMultiple rows of the block's
    // columns of each step's [K, K] weight (2-byte elements, moved as bits),
    // swizzled as gdl::chain::tile_at lays out rows of 2 C bytes.
    TensorMap m;
    m.scratch_offset = tensor_maps_offset + i * kTensorMapBytes;
    m.params_offset = weights[i];
    m.element_bytes = 2;
    m.columns = m.rows = static_cast<uint64_t>(chain.k);
    m.row_stride_bytes = static_cast<uint64_t>(chain.k) * 2;
    m.box_columns = static_cast<uint32_t>(cols);
    m.box_rows = static_cast<uint32_t>(kChainKMultiple);
    m.swizzle_bytes = cols * 2 >= 32 ? static_cast<uint32_t>(cols * 2) : 0;  // 16-byte rows need none
    info.tensor_maps.push_back(m);
  }
  std::string src = "// steps " + std::to_string(chain.first) + "-" + std::to_string(chain.last) +
                    " as one persistent kernel (gdl_chain.cuh), launched in place of their kernels while the rows are " +
                    (groups > 1 ? std::to_string(info.min_rows) + " to " : "at most ") +
                    std::to_string(info.max_rows) + ": " + std::to_string(blocks) + " x " +
                    std::to_string(groups) + " blocks of " + std::to_string(kChainThreads) + " (" + cols_text +
                    " columns of " + std::to_string(kChainMaxRows) + " rows each), all resident (cooperative launch)\n";
  src += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kChainThreads) + ", 1) " + info.symbol +
         "(unsigned char* arena, const unsigned char* params, gdl_args args) {\n";
  src += "  extern __shared__ __align__(128) unsigned char chain_smem[];\n";
  src += "  static_assert(gdl::chain::Layout<" + k + ", " + cols_text + ">::bytes == " +
         std::to_string(info.launch.shared_bytes) + ", \"the shared memory gdlc asks the launch for\");\n";
  src += "  static_assert(gdl::chain::exchange_bytes(" + k + ", " + std::to_string(groups) +
         ") <= " + std::to_string(chain_exchange_bytes(chain.k, chain.row_groups)) +
         "ull, \"the exchange area gdlc planned\");\n";
  src += "  // the steps' weights through the tensor maps the runtime wrote (params +";
  for (size_t i = 0; i < weights.size(); ++i) src += " " + std::to_string(weights[i]);
  src += ")\n";
  src += "  gdl::MatmulChain<" + t + ", " + k + ", " + cols_text + "> chain(arena + " +
         std::to_string(tensor_maps_offset) + "ull, " + std::to_string(weights.size()) + ", arena + " +
         std::to_string(chain.scratch_offset) + "ull, chain_smem);  // its tensor maps, its exchange area\n";
  src += "  if (chain.produce()) return;  // the producer warp streams the weights, before any wait (gdl_abi.cuh)\n";
  src += "  gdl::wait_for_producers();\n";
  std::set<int> scalars;
  for (int s = chain.first; s <= chain.last; ++s) {
    StepEmitter step(p, static_cast<size_t>(s), scalar_slot, sm, Variant::kChainStep, s - chain.first,
                     s < chain.last && chain_norm_reads_partial_stats(g, p.steps[static_cast<size_t>(s) + 1]));
    src += step.emit_chain_step();
    scalars.insert(step.scalars_used().begin(), step.scalars_used().end());
    info.depends_on_dims |= step.uses_dims();
  }
  info.scalars_used.assign(scalars.begin(), scalars.end());
  info.depends_on_dims = true;  // the rows decide whether it runs
  src += "}\n";
  out.push_back(std::move(info));
  return src;
}

}  // namespace

int sm_number(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return 0;
  int n = 0;
  for (size_t i = 3; i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])); ++i) n = n * 10 + (arch[i] - '0');
  return n;
}

GeneratedCode generate_cuda(const plan::Plan& p, const std::string& arch) {
  const int sm = sm_number(arch);
  const ir::Graph& g = p.graph;
  GDL_INTERNAL_ASSERT(g.dims.size() <= static_cast<size_t>(kMaxRuntimeDims),
                      "more run-time dims than gdl_args holds");
  std::map<ValueId, int> scalar_slot;
  for (ValueId leaf : g.leaves(Op::kScalar)) scalar_slot.emplace(leaf, static_cast<int>(scalar_slot.size()));
  GDL_INTERNAL_ASSERT(scalar_slot.size() <= static_cast<size_t>(kMaxScalars),
                      "more run-time scalars than gdl_args holds");

  GeneratedCode code;
  code.source = "// Generated by gdl from program \"" + one_line(g.program_name) + "\": " +
                std::to_string(p.steps.size()) + " plan step(s), one kernel each (a matmul with run-time rows: two)" +
                (p.chains.empty() ? "" : ", and a kernel per chain of steps") + ".\n";
  code.source +=
      "// Kernel ABI (compiler/src/codegen.h): (unsigned char* arena, const unsigned char* params, gdl_args args);\n"
      "// Launch: grid.x = ceil(count[work shape] / items per block) for the current run-time dims.\n"
      "#include \"gdl_stdlib.cuh\"\n";
  // Each step's own kernel (its last choice), its large kernel first where
  // it has one, then each chain's kernels in front of its steps' choices.
  KernelTable& table = code.kernels;
  table.step_choices.resize(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    Kernel own;
    StepEmitter first(p, s, scalar_slot, sm);
    code.source += "\n" + first.emit(own);
    own.first_step = own.last_step = static_cast<int>(s);
    if (first.has_large_kernel()) {
      Kernel large;
      code.source += "\n" + StepEmitter(p, s, scalar_slot, sm, Variant::kLarge).emit(large);
      large.first_step = large.last_step = static_cast<int>(s);
      large.rows = first.matmul_rows();
      large.min_rows = kMatmulRowsLimit + 1;
      large.depends_on_dims = own.depends_on_dims = true;  // the rows pick the kernel
      table.step_choices[s].push_back(static_cast<int>(table.kernels.size()));
      table.kernels.push_back(std::move(large));
    }
    table.step_choices[s].push_back(static_cast<int>(table.kernels.size()));
    table.kernels.push_back(std::move(own));
  }
  for (size_t c = 0; c < p.chains.size(); ++c) {
    std::vector<Kernel> chain_kernels;
    code.source += "\n" + chain_kernel(p, c, 1, scalar_slot, sm, chain_kernels);
    if (chain_kernel_count(p.chains[c]) == 2)  // the kernel in row groups
      code.source += "\n" + chain_kernel(p, c, p.chains[c].row_groups, scalar_slot, sm, chain_kernels);
    std::vector<int> indexes;
    for (Kernel& k : chain_kernels) {
      indexes.push_back(static_cast<int>(table.kernels.size()));
      table.kernels.push_back(std::move(k));
    }
    for (int s = p.chains[c].first; s <= p.chains[c].last; ++s) {
      std::vector<int>& choices = table.step_choices[static_cast<size_t>(s)];
      choices.insert(choices.begin(), indexes.begin(), indexes.end());
    }
  }
  code.source += std::string("\n// The runtime's input copy: the bound inputs, from their pinned staging buffers or the\n") +
                 "// caller's device memory into the arena, in one kernel node (a memcpy node per input made each graph launch\n"
                 "// 2-4 us longer on the host).\n"
                 "extern \"C\" __global__ void __launch_bounds__(256) " + kInputCopySymbol + "(gdl_input_copies copies) {\n"
                 "  gdl::allow_dependents();  // they wait for this copy before they read the arena\n"
                 "  gdl::copy_bytes(copies.src[blockIdx.y], copies.dst[blockIdx.y], copies.bytes[blockIdx.y]);\n}\n";
  return code;
}

}  // namespace gdl
