// The op table: every family's entries (families.h), indexed by opcode, and
// what the entries share.
#include <cstdio>
#include <cstdlib>

#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

struct Table {
  std::vector<OpDef> by_op;                  // indexed by ir::Op
  std::vector<OpDef> expansions;             // calls written as other ops (OpDef::expansion)
  std::vector<const OpDef*> callables;       // in registration order
  std::vector<std::string> callable_names;
};

const Table& table() {
  static const Table kTable = [] {
    std::vector<OpDef> defs;
    add_elementwise_ops(defs);
    add_matmul_ops(defs);
    add_reduce_ops(defs);
    add_norm_ops(defs);
    add_data_movement_ops(defs);
    add_attention_ops(defs);
    add_select_ops(defs);
    add_update_ops(defs);
    add_random_ops(defs);
    add_rope_ops(defs);
    add_collective_ops(defs);
    add_grad_ops(defs);
    add_leaf_ops(defs);
    Table t;
    t.by_op.resize(ir::kOpCount);
    std::vector<bool> defined(ir::kOpCount, false);
    for (const OpDef& d : defs) {
      if (d.expansion != Expansion::kNone) {
        t.expansions.push_back(d);
        continue;
      }
      const auto i = static_cast<size_t>(d.op);
      GDL_INTERNAL_ASSERT(!defined[i], std::string("op ") + ir::op_name(d.op) + " has two entries");
      defined[i] = true;
      t.by_op[i] = d;
    }
    for (size_t i = 0; i < ir::kOpCount; ++i) {
      GDL_INTERNAL_ASSERT(defined[i], std::string("op ") + ir::op_name(static_cast<ir::Op>(i)) + " has no entry");
      GDL_INTERNAL_ASSERT(ir::reads_elementwise(static_cast<ir::Op>(i)) == (t.by_op[i].fusion == FusionClass::kElementwise),
                          std::string("op ") + ir::op_name(static_cast<ir::Op>(i)) +
                              ": ir::reads_elementwise disagrees with its fusion class");
    }
    size_t expansion = 0;
    for (const OpDef& d : defs)
      if (d.callable) {
        t.callables.push_back(d.expansion != Expansion::kNone ? &t.expansions[expansion++]
                                                              : &t.by_op[static_cast<size_t>(d.op)]);
        t.callable_names.emplace_back(d.callable);
      }
    return t;
  }();
  return kTable;
}

}  // namespace

const OpDef& op_def(ir::Op op) {
  const Table& t = table();
  GDL_INTERNAL_ASSERT(static_cast<size_t>(op) < t.by_op.size(), "an op outside the table");
  return t.by_op[static_cast<size_t>(op)];
}

const OpDef* find_callable(std::string_view name) {
  for (const OpDef* d : table().callables)
    if (name == d->callable) return d;
  return nullptr;
}

const std::vector<std::string>& callable_names() { return table().callable_names; }

std::string attrs_text(const ir::Node& n) {
  const OpDef& d = op_def(n.op);
  const std::string text = d.attr_text ? d.attr_text(n.attrs) : "";
  return text.empty() ? "" : " {" + text + "}";
}

double identity_rule(double x, DType) { return x; }
bool same_type(const ir::Node& n, const ir::Node& arg) { return n.type == arg.type; }

void zero_derivative(autodiff::AdjointBuilder&, ir::ValueId, ir::ValueId, std::vector<ir::ValueId>&) {}

int64_t EvalArgs::valid(size_t i, int axis) const {
  const std::vector<int64_t>& shape = valid_extents.empty() ? values[i]->shape : valid_extents[i];
  const auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int>(shape.size()) : axis);
  GDL_INTERNAL_ASSERT(a < shape.size() && shape[a] <= values[i]->shape[a], "valid extent outside the value");
  return shape[a];
}

std::optional<TypeResult> axis_of(TypeQuery& q, size_t slot, int rank, int* out) {
  int64_t axis = 0;
  if (!q.integer(slot, "axis", &axis)) return TypeResult::failed();
  return normalize_axis(q, slot, axis, rank, out);
}

std::optional<TypeResult> normalize_axis(TypeQuery& q, size_t slot, int64_t axis, int rank, int* out) {
  if (axis < -rank || axis >= rank)
    return TypeResult(q.error(static_cast<int>(slot),
                              "axis " + std::to_string(axis) + " is out of range for a rank-" + std::to_string(rank) +
                                  " value",
                              rank > 0 ? "use an axis in " + std::to_string(-rank) + ".." + std::to_string(rank - 1)
                                       : "a rank-0 value has no axis"));
  *out = static_cast<int>(axis < 0 ? axis + rank : axis);
  return std::nullopt;
}

const TensorType* float_rows_operand(TypeQuery& q, std::optional<TypeResult>* bad) {
  const std::string& name = q.what();
  const TensorType* x = q.tensor(0, name);
  if (!x) *bad = TypeResult::failed();
  else if (!is_float(x->dtype))
    *bad = q.error(0, name + " needs a float tensor, got " + q.text(*x), "convert it with cast(x, f32)");
  else if (x->rank() == 0)
    *bad = q.error(0, name + " needs a tensor of rank >= 1, got " + q.text(*x), "reshape it to [1] first");
  return *bad ? nullptr : x;
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

}  // namespace gdl::ops
