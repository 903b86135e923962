// gdlrun's GPU path, through the public runtime API only: compile or load the
// program, create a session (with the chosen dim policy and fallback), set
// params, bind inputs, set scalars, replay the graph once and read the
// outputs back; then, if asked, explain what the graph saves (predicted
// beside measured, explain_graph) and report the session's stats.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "gdl/gdl.h"
#include "gdl/jit.h"
#include "gdl/profile.h"
#include "interp/interp.h"

namespace gdl::tools {

struct GpuRunOptions {
  DimPolicyChoice policy = DimPolicyChoice::kAsDeclared;
  bool eager_fallback = false;
  bool explain = false;  // per-node times, timeline prediction beside measured runs
  bool stats = false;    // format_stats after everything
  int repeats = 20;      // runs measured by explain
};

// `report` (when given) receives the explanation and stats text.
inline std::optional<std::map<std::string, HostTensor>> run_on_gpu(const std::string& program_path,
                                                                  const Bindings& bindings, std::string* why_not,
                                                                  const GpuRunOptions& options = {},
                                                                  std::string* report = nullptr) {
  bool is_artifact = program_path.size() > 5 && program_path.substr(program_path.size() - 5) == ".gdlx";
  Expected<Program> program = is_artifact ? Program::load(program_path) : jit::compile(program_path);
  if (!program.ok()) { *why_not = program.status().ToString(); return std::nullopt; }
  SessionOptions session_options;
  session_options.dim_policy = options.policy;
  if (options.eager_fallback) session_options.eager_fallback = jit::recompiler();
  Expected<std::unique_ptr<Session>> session = Session::create(*program, session_options);
  if (!session.ok()) { *why_not = session.status().ToString(); return std::nullopt; }
  Session& s = **session;
  auto element_type = [](DType t) { return static_cast<ElementType>(static_cast<uint8_t>(t)); };
  auto fail = [&](const Status& st) { *why_not = st.ToString(); return std::nullopt; };
  for (const auto& [name, tensor] : bindings.tensors) {
    std::vector<uint8_t> bytes = encode_elements(element_type(tensor.dtype), tensor.data);
    Status st = program->find_param(name)   ? s.set_param(name, bytes.data(), bytes.size())
                : program->find_state(name) ? s.set_state(name, bytes.data(), bytes.size())
                                            : s.bind(name, bytes.data(), bytes.size(), element_type(tensor.dtype), tensor.shape);
    if (!st.ok()) return fail(st);
  }
  for (size_t i = 0; i < program->dims().size(); ++i) {
    Status st = s.set_dim(program->dims()[i].name, bindings.dims.at(i));
    if (!st.ok()) return fail(st);
  }
  for (const auto& [name, value] : bindings.scalars) {
    Status st = s.set_scalar(name, value);
    if (!st.ok()) return fail(st);
  }
  if (Status st = s.run(); !st.ok()) return fail(st);
  std::map<std::string, HostTensor> outputs;
  for (const TensorInfo& out : program->outputs()) {
    Expected<std::vector<int64_t>> shape = s.shape_of(out.name);
    if (!shape.ok()) return fail(shape.status());
    size_t count = 1;
    for (int64_t e : *shape) count *= static_cast<size_t>(e);
    std::vector<uint8_t> bytes(count * element_size(out.dtype));
    if (Status st = s.read(out.name, bytes.data(), bytes.size()); !st.ok()) return fail(st);
    HostTensor t;
    t.dtype = static_cast<DType>(static_cast<uint8_t>(out.dtype));
    t.shape = *shape;
    t.data = decode_elements(out.dtype, bytes.data(), count);
    outputs[out.name] = std::move(t);
  }
  if (options.explain && report) {
    Expected<GraphExplanation> e = explain_graph(s, options.repeats);
    *report += e ? e->table : "explain: " + e.status().ToString() + "\n";
  }
  if (options.stats && report) *report += "session stats:\n" + format_stats(s.stats());
  return outputs;
}

}  // namespace gdl::tools
