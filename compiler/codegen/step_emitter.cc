// StepEmitter (step_emitter.h): one plan step's kernel.
// 1. The body: a structured step (a reduction, norm, matmul or attention
//    first, after a norm prologue where a matmul has one; a matmul's
//    elementwise values after it form its epilogue) is its op's kernel
//    emitter (OpDef::kernel); every other step is one lambda over the flat
//    indices of its result, run by gdl::for_each_element: each value a local
//    rounded to its dtype, operands outside the step loaded through
//    broadcast or permuted strides from the result coordinates, constants as
//    literals, scalars as locals, data movement by its op's element emitter
//    (OpDef::element).
// 2. Inside the kernel's braces, before the body: the run-time dims and
//    scalars it reads (from args), the typed pointers of its buffers (arena
//    or params + the planned offset, for a view behind a run-time axis at
//    the launch's layout extents), then gdl::allow_dependents and
//    gdl::wait_for_producers (launch overlap, gdl_abi.cuh) unless the body
//    makes them itself (a prefetching matmul, the streamed attention over a
//    param KV cache).
// 3. A comment naming the step's IR values and their source lines, then
//    `extern "C" __global__ gdl_s<step>_<op>(arena, params, args)`, with
//    its launch bounds and cluster dims.
#include "codegen/step_emitter.h"

#include <algorithm>

#include "codegen/cuda_text.h"
#include "internal_error.h"
#include "ops/op_def.h"

namespace gdl {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

constexpr int64_t kInt32IndexLimit = int64_t{1} << 30;

bool is_structured(Op op) {
  const ops::FusionClass c = ops::fusion_class(op);
  return c == ops::FusionClass::kReduction || c == ops::FusionClass::kNorm || c == ops::FusionClass::kMatmul ||
         c == ops::FusionClass::kAttention || c == ops::FusionClass::kUpdate;
}

}  // namespace

StepEmitter::StepEmitter(const plan::Plan& plan, size_t step_index, const std::map<ValueId, int>& scalar_slot, int sm,
                         Variant variant, int chain_step, bool chain_publish_stats)
    : p(plan), g(plan.graph), index(step_index), step(plan.steps[step_index]), sm(sm), variant(variant),
      chain_step(chain_step), chain_publish_stats(chain_publish_stats), scalar_slot_(scalar_slot) {}

StepEmitter::StepEmitter(const plan::Plan& plan, size_t step_index, const std::map<ValueId, int>& scalar_slot, int sm,
                         RowsBand rows)
    : StepEmitter(plan, step_index, scalar_slot, sm, Variant::kLarge) {
  band = rows;
}

std::string StepEmitter::emit_chain_step() {
  LaunchRule unused;
  const std::string inside = kernel_inside(build_body(unused));
  std::string out = "  {  // step " + std::to_string(index) + "\n";
  for (size_t at = 0; at < inside.size();) {  // one level deeper
    size_t end = inside.find('\n', at);
    if (end == std::string::npos) end = inside.size();
    out += "  " + inside.substr(at, end - at) + "\n";
    at = end + 1;
  }
  return out + "  }\n";
}

// "__layernorm_add_gelu": the step's other ops in order, each once, at most
// five, so that a profiler's kernel list says what a kernel computes
// ("gdl_s3_matmul_tiled33__layernorm_add_gelu_cast_mul"); "" for a step of
// one op. The name starts with the step and its main op, as before, so a
// filter on that prefix finds it.
std::string StepEmitter::fused_ops_suffix(Op anchor_op) const {
  std::vector<Op> others;
  for (ValueId v : step.values) {
    const Op op = g.node(v).op;
    if (op != anchor_op && std::find(others.begin(), others.end(), op) == others.end()) others.push_back(op);
  }
  std::string suffix;
  for (size_t i = 0; i < others.size() && i < 5; ++i) suffix += (i ? "_" : "__") + std::string(ir::op_name(others[i]));
  return suffix;
}

std::string StepEmitter::emit(Kernel& info) {
  LaunchRule rule;
  const std::string body = build_body(rule);
  const Node& result = g.node(step.result);
  const Op anchor_op = (structured_ ? g.node(anchor) : result).op;
  info.symbol = "gdl_s" + std::to_string(index) + "_" + ir::op_name(anchor_op);
  if (variant == Variant::kLarge) info.symbol += "_tiled" + std::to_string(band.lo);
  if (variant == Variant::kLibrary) info.symbol += "_library";
  if (variant == Variant::kLibraryNorm) info.symbol += "_library_norm";
  info.symbol += fused_ops_suffix(anchor_op);
  info.library = library;
  info.launch = rule;
  info.scalars_used.assign(scalars_used_.begin(), scalars_used_.end());
  info.depends_on_dims = !dims_used_.empty() || !all_constant(rule.work);
  info.early_start = early_start;

  std::string out = "// step " + std::to_string(index);
  if (!step.deps.empty()) {
    out += " (after step";
    out += step.deps.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < step.deps.size(); ++i) out += (i ? ", " : "") + std::to_string(step.deps[i]);
    out += ")";
  }
  if (variant == Variant::kLibrary) {
    out += ", after cuBLASLt's product (the rows above the generated kernels')";
  } else if (variant == Variant::kLibraryNorm) {
    out += ", its norm before cuBLASLt's product (the rows above the generated kernels')";
  } else if (variant == Variant::kLarge || !large_bands.empty()) {
    const RowsBand& b = variant == Variant::kLarge ? band : RowsBand{0, large_bands.front().lo - 1};
    out += b.hi == RowsBand{}.hi ? ", " + std::to_string(b.lo) + " rows or more"
                                 : ", " + std::to_string(b.lo) + " to " + std::to_string(b.hi) + " rows";
  }
  out += ": " + launch_text(rule) + "\n";
  for (ValueId v : step.values) out += "//   " + describe_value(g, v) + "\n";
  std::string bounds = std::to_string(rule.block);
  if (min_blocks > 1) bounds += ", " + std::to_string(min_blocks);  // caps the registers
  const std::string cluster =  // blocks (0, y) .. (0, y + cluster_y - 1) form one cluster
      cluster_y > 1 ? "__cluster_dims__(1, " + std::to_string(cluster_y) + ", 1) " : "";
  out += "extern \"C\" __global__ void " + cluster + "__launch_bounds__(" + bounds + ") " + info.symbol +
         kKernelParameters + " {\n";
  return out + kernel_inside(body) + "}\n";
}

std::string StepEmitter::build_body(LaunchRule& rule) {
  GDL_INTERNAL_ASSERT(!step.values.empty() && step.result == step.values.back(),
                      "step " + std::to_string(index) + " has no result or it is not its last value");
  const Node& result = g.node(step.result);
  GDL_INTERNAL_ASSERT(!ir::is_leaf(result.op), "step " + std::to_string(index) + " computes a leaf");
  for (ValueId v : step.values) in_step_.insert(v);
  choose_index_type();

  // A structured op comes first in its step; the values after it (only a
  // matmul's) form its epilogue. A matmul may come second, after the norm
  // that is its prologue (plan/fuse.cc).
  norm_prologue = matmul_prologue(g, step.values);
  anchor = step.values[norm_prologue == ir::kNoValue ? 0 : 1];
  const Node& anchor_node = g.node(anchor);
  structured_ = is_structured(anchor_node.op);
  GDL_INTERNAL_ASSERT(!structured_ || step.values.size() == 1 || anchor_node.op == Op::kMatMul,
                      "step " + std::to_string(index) + ": only a matmul takes an epilogue");
  if (!structured_) return elementwise_body(rule);
  const ops::OpDef& def = ops::op_def(anchor_node.op);
  GDL_INTERNAL_ASSERT(def.kernel != nullptr, std::string("no kernel for ") + ir::op_name(anchor_node.op));
  return def.kernel(*this, anchor_node, rule);
}

// What goes inside the kernel's braces: the dims, scalars and pointers the
// body uses, the launch-overlap calls (gdl_abi.cuh) unless the body makes
// them itself or the step is part of a chain, then the body.
std::string StepEmitter::kernel_inside(const std::string& body) const {
  std::string out;
  for (int d : dims_used_)
    out += "  const " + idx + " " + dim_name(d) + " = args.dims[" + std::to_string(d) + "];  // dim " +
           one_line(g.dims.at(static_cast<size_t>(d)).name) + "\n";
  for (int s : scalars_used_) {
    ValueId leaf = scalar_leaf(s);
    const Node& n = g.node(leaf);
    bool integer = n.type.dtype == DType::kI32;
    out += std::string("  const ") + (integer ? "int" : "float") + " s" + std::to_string(s) + " = gdl::scalar_" +
           (integer ? "i32" : "f32") + "(args.scalars[" + std::to_string(s) + "]);  // scalar \"" + one_line(n.name) +
           "\"\n";
  }
  for (const std::string& line : pointer_lines_)
    if (chain_b.empty() || line.find(" " + chain_b + " = ") == std::string::npos) out += "  " + line + "\n";
  if (variant == Variant::kChainStep)  // the step reads them after its rows: into L2 while it waits for those
    for (const auto& [name, bytes] : param_pointers)
      if (name != chain_b) out += "  gdl::chain::prefetch_l2(" + name + ", " + std::to_string(bytes) + "ull);\n";
  if (!waits_in_body && variant != Variant::kChainStep)  // let the next kernels launch, wait for the previous ones
    out += "  gdl::allow_dependents();\n  gdl::wait_for_producers();\n";
  return out + body;
}

void StepEmitter::choose_index_type() {
  int64_t largest = 1;
  auto consider = [&](ValueId v) { largest = std::max(largest, max_element_count(g.node(v).type.shape, g.dims)); };
  for (ValueId v : step.values) {
    consider(v);
    for (ValueId a : g.node(v).args) consider(a);
  }
  idx = largest <= kInt32IndexLimit ? "int" : "long long";
}

std::string StepEmitter::dim_name(int symbol) const { return "dim" + std::to_string(symbol); }

std::string StepEmitter::dim(const Dim& d) {
  if (!d.is_runtime()) return std::to_string(d.extent);
  dims_used_.insert(d.symbol);
  return dim_name(d.symbol);
}

std::string StepEmitter::product(const Shape& s, size_t from, size_t to) {
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

std::string StepEmitter::shape_literal(const Shape& s, int literal_rank) {
  GDL_INTERNAL_ASSERT(static_cast<int>(s.size()) <= literal_rank, "shape of higher rank than its padding");
  std::string out = "gdl::Shape<" + std::to_string(literal_rank) + ", " + idx + ">{{";
  int pad = literal_rank - static_cast<int>(s.size());
  for (int i = 0; i < literal_rank; ++i) {
    out += i ? ", " : "";
    out += i < pad ? "1" : dim(s[static_cast<size_t>(i - pad)]);
  }
  return out + "}}";
}

std::string StepEmitter::local(const std::string& name, const std::string& value) const {
  return "  const " + idx + " " + name + " = " + value + ";\n";
}

ValueId StepEmitter::scalar_leaf(int slot) const {
  for (const auto& [leaf, s] : scalar_slot_)
    if (s == slot) return leaf;
  internal_error(__FILE__, __LINE__, "unknown scalar slot");
}

std::string StepEmitter::scalar_local(ValueId v) {
  int slot = scalar_slot_.at(v);
  scalars_used_.insert(slot);
  return "s" + std::to_string(slot);
}

std::string StepEmitter::pointer(ValueId v) {
  auto it = pointer_names_.find(v);
  if (it != pointer_names_.end()) return it->second;
  const plan::Buffer& b = p.buffers.at(static_cast<size_t>(v));
  const Node& n = g.node(v);
  GDL_INTERNAL_ASSERT(b.region == plan::Region::kArena || b.region == plan::Region::kParams,
                      "step " + std::to_string(index) + " reads %" + std::to_string(v) + ", which has no buffer");
  std::string name = "v" + std::to_string(v);
  std::string type = storage_type(n.type.dtype);
  std::string what = std::string(ir::op_name(n.op)) + (n.name.empty() ? "" : " \"" + one_line(n.name) + "\"");
  pointer_lines_.push_back("const " + type + "* " + name + " = reinterpret_cast<const " + type + "*>(" +
                           input_or_address(v, b) + ");  // %" + std::to_string(v) + " " + what + " : " +
                           type_to_string(n.type, g.dims));
  pointer_names_[v] = name;
  if (b.region == plan::Region::kParams) param_pointers.emplace_back(name, b.bytes);
  return name;
}

std::string StepEmitter::result_pointer() {
  const plan::Buffer& b = p.buffers.at(static_cast<size_t>(step.result));
  const Node& n = g.node(step.result);
  GDL_INTERNAL_ASSERT(b.region == plan::Region::kArena, "step " + std::to_string(index) + " writes outside the arena");
  std::string type = storage_type(n.type.dtype);
  pointer_lines_.push_back(type + "* out = reinterpret_cast<" + type + "*>(" + address(b) + ");  // %" +
                           std::to_string(step.result) + " : " + type_to_string(n.type, g.dims));
  return "out";
}

// `arena + 256ull`, or for a view behind a run-time axis its offset at this
// launch's layout extents: `arena + (256ull + 32ull * (unsigned long long)dim0)`.
// Reading the dims makes the kernel depend on them (its node is updated
// when they change).
std::string StepEmitter::address(const plan::Buffer& b) {
  const std::string base = b.region == plan::Region::kArena ? "arena" : "params";
  std::string offset = std::to_string(b.offset) + "ull";
  if (b.terms.empty()) return base + " + " + offset;
  for (const plan::OffsetTerm& t : b.terms) {
    offset += " + " + std::to_string(t.coef) + "ull";
    for (int d : t.dims) offset += " * (unsigned long long)" + dim(Dim::runtime(d));
  }
  return base + " + (" + offset + ")";
}

// An input (or a view of one) that the runtime may leave in the caller's
// memory is read through its pointer slot, at its place inside the input:
// `args.inputs[2] + 64ull`; anything else at its address in the arena.
std::string StepEmitter::input_or_address(ValueId v, const plan::Buffer& b) {
  if (input_slots_.empty()) input_slots_ = plan::input_pointer_slots(p);
  const int slot = input_slots_.at(static_cast<size_t>(v));
  if (slot < 0) return address(b);
  const ValueId input = g.leaves(ir::Op::kInput).at(static_cast<size_t>(slot));
  const plan::Buffer& whole = p.buffers.at(static_cast<size_t>(input));
  plan::Buffer inside = b;  // the same terms, the offset from the input's start
  inside.offset = b.offset - whole.offset;
  std::string text = address(inside);
  const std::string base = "arena + ";
  GDL_INTERNAL_ASSERT(text.rfind(base, 0) == 0 && whole.terms.empty(), "an input's view outside the arena");
  return "args.inputs[" + std::to_string(slot) + "] + " + text.substr(base.size());
}

bool StepEmitter::is_inline_leaf(ValueId v) const {
  Op op = g.node(v).op;
  return op == Op::kConstant || op == Op::kScalar || op == Op::kDimValue;
}

std::string StepEmitter::inline_value(ValueId v) {
  const Node& n = g.node(v);
  if (n.op == Op::kConstant) return constant_literal(n.attrs.value, n.type.dtype);
  if (n.op == Op::kDimValue) return valid_count_expr(n.attrs.axis);  // the dim's value this run, padding or not
  return scalar_local(v);
}

std::string StepEmitter::launch_text(const LaunchRule& r) const {
  std::string out = "block " + std::to_string(r.block);
  out += ", grid.x = ceil(count" + shape_to_string(r.work, g.dims) + " / " + std::to_string(r.items_per_block) + ")";
  if (r.grid_y != 1) out += ", grid.y " + std::to_string(r.grid_y);
  return out;
}

// ------------------------------------------------------------ elementwise

// Loads operand `a` (outside the step) at the element that the result index
// maps to under broadcasting.
std::string StepEmitter::broadcast_load(ValueId a) {
  if (is_inline_leaf(a)) return inline_value(a);
  const Shape& s = g.node(a).type.shape;
  std::string ptr = pointer(a);
  if (statically_one_element(s)) return "gdl::ld(" + ptr + "[0])";
  // A chain step's epilogue reading its a (a residual): the chain passes
  // the element from the rows it staged, not a second read from L2.
  if (s == result_shape && variant == Variant::kChainStep && ptr == chain_a) return "a_staged";
  if (s == result_shape) return "gdl::ld(" + ptr + "[i])";
  std::string st = "st" + std::to_string(a);
  if (!declared.count(st)) {
    declared.insert(st);
    prologue += "  const gdl::Strides<" + std::to_string(rank) + ", " + idx + "> " + st +
                " = gdl::broadcast_strides(" + shape_literal(s, rank) + ");\n";
  }
  needs_coords = true;
  return "gdl::ld(" + ptr + "[" + st + ".at(c)])";
}

std::string StepEmitter::operand(ValueId a) {
  if (in_step_.count(a)) return "r" + std::to_string(a);
  return broadcast_load(a);
}

std::string StepEmitter::elementwise_statement(ValueId v) {
  const Node& n = g.node(v);
  std::string result = std::string(compute_type(n.type.dtype)) + " r" + std::to_string(v);
  std::string expr;
  const ops::OpDef& def = ops::op_def(n.op);
  if (def.device_function == nullptr) {  // a cast, a broadcast_to or a whole update: the element, rounded below
    const bool whole_update = plan::replaces_whole(g, n);
    GDL_INTERNAL_ASSERT(n.op == Op::kCast || n.op == Op::kBroadcastTo || whole_update,
                        std::string("no elementwise function for ") + ir::op_name(n.op));
    expr = operand(n.args[whole_update ? 1 : 0]);
  } else {
    expr = std::string(def.device_function) + "(";
    for (size_t i = 0; i < n.args.size(); ++i) expr += (i ? ", " : "") + operand(n.args[i]);
    expr += ")";
  }
  return "    const " + result + " = gdl::fit<" + storage_type(n.type.dtype) + ">(" + expr + ");\n";
}

std::string StepEmitter::input_strides(ValueId a) {
  std::string name = "in" + std::to_string(a);
  if (!declared.count(name)) {
    declared.insert(name);
    const Shape& s = g.node(a).type.shape;
    prologue += "  const gdl::Strides<" + std::to_string(rank) + ", " + idx + "> " + name + " = gdl::row_major(" +
                shape_literal(s, rank) + ");\n";
  }
  return name;
}

std::string StepEmitter::elementwise_body(LaunchRule& rule) {
  const Node& result = g.node(step.result);
  result_shape = result.type.shape;
  rank = std::max(1, result.type.rank());
  for (ValueId v : step.values) {
    const Node& n = g.node(v);
    const bool data_movement = ops::fusion_class(n.op) == ops::FusionClass::kDataMovement;
    const bool joins = data_movement && ops::op_def(n.op).joins_elementwise && n.type.shape == result_shape;
    const bool whole_update = v == step.result && plan::replaces_whole(g, n);  // written over its base, element by element
    GDL_INTERNAL_ASSERT(ops::is_elementwise(n.op) || joins || whole_update || (data_movement && step.values.size() == 1),
                        std::string("step ") + std::to_string(index) + ": cannot fuse " + ir::op_name(n.op) +
                            " into an elementwise kernel");
    GDL_INTERNAL_ASSERT(broadcast_shapes(n.type.shape, result_shape) == result_shape,
                        "a fused value does not broadcast to the step's result");
  }
  std::string statements;
  for (ValueId v : step.values) {
    const ops::OpDef& def = ops::op_def(g.node(v).op);
    statements += def.element ? def.element(*this, v) : elementwise_statement(v);
  }
  std::string out_ptr = result_pointer();
  statements += "    " + out_ptr + "[i] = gdl::cvt<" + storage_type(result.type.dtype) + ">(r" +
                std::to_string(step.result) + ");\n";

  std::string body = "  const gdl::Shape<" + std::to_string(rank) + ", " + idx + "> shape = " +
                     shape_literal(result_shape, rank) + ";\n";
  body += prologue;
  body += "  gdl::for_each_element<" + idx + ">(shape.count(), [&](const " + idx + " i) {\n";
  if (needs_coords)
    body += "    const gdl::Coords<" + std::to_string(rank) + ", " + idx + "> c = gdl::coords_of(shape, i);\n";
  body += statements;
  body += "  });\n";

  rule = LaunchRule{};
  rule.work = result_shape;
  rule.items_per_block = kElementsPerBlock;
  rule.block = kElementwiseBlock;
  return body;
}

// ------------------------------------------------------------ structured

bool StepEmitter::second_kernel_from_rows(int64_t rows_from, const Shape& rows) {
  if (variant == Variant::kFirst) {
    large_bands = {RowsBand{rows_from, RowsBand{}.hi}};
    rows_of_matmul = rows;
  }
  return variant == Variant::kLarge;
}

std::string StepEmitter::split_scratch(int splits, bool in_cluster, const SplitScratchSize& need, std::string& body) {
  if (splits <= 1 || in_cluster) return "gdl::SplitScratch{nullptr, nullptr, " + std::to_string(splits) + "}";
  GDL_INTERNAL_ASSERT(need.ticket_bytes() > 0 && step.tickets_bytes >= need.ticket_bytes() &&
                          step.scratch_bytes >= need.partial_bytes(),
                      "step " + std::to_string(index) + " has less scratch than its kernel needs");
  if (!declared.count("tickets")) {
    declared.insert("tickets");
    body += "  unsigned* const tickets = reinterpret_cast<unsigned*>(arena + " + std::to_string(step.tickets_offset) +
            "ull);  // scratch: one ticket per tile, zero between launches\n";
    body += "  float* const partials = reinterpret_cast<float*>(arena + " + std::to_string(step.scratch_offset) +
            "ull);  // scratch: partial tiles\n";
  }
  return "gdl::SplitScratch{tickets, partials, " + std::to_string(splits) + "}";
}

}  // namespace gdl
