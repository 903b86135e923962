// run_planned (run_planned.h) executes the plan in two host byte arrays
// laid out as planned (poisoned with 0xFF, NaN in every float dtype):
// 1. bind inputs, params and states by copy into their buffers;
// 2. per step, decode the values it reads from their buffers, evaluate its
//    values with the interpreter's eval_node (a collective: eval_collective,
//    through the bindings' rank exchange), encode its result;
// 3. decode the outputs and the states from their buffers.
#include "plan/run_planned.h"

#include <deque>

#include "ops/op_def.h"
#include "plan/check.h"

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;

std::string value_ref(ValueId v) { return "%" + std::to_string(v); }

}  // namespace

// ---------------------------------------------------------------- run_planned

Expected<std::map<std::string, HostTensor>> run_planned(const Plan& p, const Bindings& b) {
  const ir::Graph& g = p.graph;
  if (Status s = validate_bindings(g, b); !s.ok()) return s;
  if (std::string problem = check_plan(p); !problem.empty()) return Status::Internal("unsound plan: " + problem);

  constexpr unsigned char kPoison = 0xFF;  // NaN in every float dtype: a read of unwritten bytes shows
  std::vector<unsigned char> arena(p.arena_bytes, kPoison), params(p.params_bytes, kPoison);
  // The bytes of value v at the current dims (the layout extents, which move
  // a view behind a run-time axis); check_plan proved they fit.
  auto storage = [&](ValueId v) -> unsigned char* {
    const Buffer& buf = p.buffers[static_cast<size_t>(v)];
    return (buf.region == Region::kArena ? arena.data() : params.data()) + offset_at(buf, b.dims);
  };
  auto decode = [&](ValueId v) {
    const ir::Node& n = g.node(v);
    HostTensor t;
    t.dtype = n.type.dtype;
    t.shape = concrete_shape(n.type.shape, b.dims);
    if (n.op == Op::kDimValue) {
      const auto d = static_cast<size_t>(n.attrs.axis);
      t.data.assign(1, static_cast<double>(b.valid_dims.empty() ? b.dims.at(d) : b.valid_dims.at(d)));
      return t;
    }
    if (ir::has_no_storage(n.op)) {
      double value = n.attrs.value;
      if (auto it = b.scalars.find(n.name); n.op == Op::kScalar && it != b.scalars.end()) value = it->second;
      t.data.assign(static_cast<size_t>(element_count(n.type.shape, b.dims)), round_to_dtype(value, t.dtype));
      return t;
    }
    const unsigned char* bytes = storage(v);
    t.data.resize(static_cast<size_t>(element_count(n.type.shape, b.dims)));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = load_element(bytes, t.dtype, i);
    return t;
  };
  auto encode = [&](ValueId v, const HostTensor& t) {
    unsigned char* bytes = storage(v);
    for (size_t i = 0; i < t.data.size(); ++i) store_element(bytes, t.dtype, i, t.data[i]);
  };

  // 1. Bind inputs and params by copy into their buffers.
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (n.op == Op::kInput || n.op == Op::kParam || n.op == Op::kState) encode(static_cast<ValueId>(v), b.tensors.at(n.name));
  }

  // 2. Each step: decode what it reads, evaluate its values, encode its result.
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    std::map<ValueId, HostTensor> local;
    std::deque<HostTensor> loaded;  // stable addresses for the argument pointers
    std::vector<const HostTensor*> args;
    for (ValueId v : st.values) {
      const ir::Node& n = g.node(v);
      args.clear();
      for (ValueId a : n.args) {
        if (auto it = local.find(a); it != local.end()) {
          args.push_back(&it->second);
        } else {
          loaded.push_back(decode(a));
          args.push_back(&loaded.back());
        }
      }
      HostTensor result;
      if (ops::fusion_class(n.op) == ops::FusionClass::kCollective) {  // the ranks' values through b.ranks
        Expected<HostTensor> combined = eval_collective(g, n, *args.at(0), b);
        if (!combined) return combined.status();
        result = std::move(combined).value();
      } else {
        result = eval_node(n, args, b.dims);
      }
      if (result.size() != element_count(n.type.shape, b.dims))
        return Status::Internal("step " + std::to_string(s) + ": " + value_ref(v) + " has the wrong element count");
      local[v] = std::move(result);
    }
    encode(st.result, local.at(st.result));
  }

  // 3. Outputs, read after the run.
  std::map<std::string, HostTensor> results;
  for (const ir::Output& o : g.outputs) results[o.name] = decode(o.value);
  for (size_t v = 0; v < g.nodes.size(); ++v)  // the states, from their buffers: every final value was written there
    if (g.nodes[v].op == Op::kState) results[g.nodes[v].name] = decode(static_cast<ValueId>(v));
  return results;
}

}  // namespace gdl::plan
