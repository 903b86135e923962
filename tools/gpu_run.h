// gdlrun's GPU path, through the public runtime API only: compile or load the
// program, create a session (with the chosen dim policy and fallback), set
// params, bind inputs, set scalars, replay the graph once and read the
// outputs back; then, if asked, explain what the graph saves (predicted
// beside measured, explain_graph) and report the session's stats. A program
// over several ranks: one session per rank, each on its own GPU.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

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
  std::map<std::string, std::string> consts;  // -D NAME=VALUE, as the CPU reference was compiled with
};

// The bindings' params, states, inputs, dims and scalars into the session.
inline Status bind_session(Session& s, const Program& program, const Bindings& bindings) {
  auto element_type = [](DType t) { return static_cast<ElementType>(static_cast<uint8_t>(t)); };
  for (const auto& [name, tensor] : bindings.tensors) {
    std::vector<uint8_t> bytes = encode_elements(element_type(tensor.dtype), tensor.data);
    Status st = program.find_param(name)   ? s.set_param(name, bytes.data(), bytes.size())
                : program.find_state(name) ? s.set_state(name, bytes.data(), bytes.size())
                                           : s.bind(name, bytes.data(), bytes.size(), element_type(tensor.dtype), tensor.shape);
    if (!st.ok()) return st;
  }
  for (size_t i = 0; i < program.dims().size(); ++i)
    if (Status st = s.set_dim(program.dims()[i].name, bindings.dims.at(i)); !st.ok()) return st;
  for (const auto& [name, value] : bindings.scalars)
    if (Status st = s.set_scalar(name, value); !st.ok()) return st;
  return Status::Ok();
}

// Every output of the session's last run.
inline Expected<std::map<std::string, HostTensor>> read_session(Session& s, const Program& program) {
  std::map<std::string, HostTensor> outputs;
  for (const TensorInfo& out : program.outputs()) {
    Expected<std::vector<int64_t>> shape = s.shape_of(out.name);
    if (!shape.ok()) return shape.status();
    size_t count = 1;
    for (int64_t e : *shape) count *= static_cast<size_t>(e);
    std::vector<uint8_t> bytes(count * element_size(out.dtype));
    if (Status st = s.read(out.name, bytes.data(), bytes.size()); !st.ok()) return st;
    HostTensor t;
    t.dtype = static_cast<DType>(static_cast<uint8_t>(out.dtype));
    t.shape = *shape;
    t.data = decode_elements(out.dtype, bytes.data(), count);
    outputs[out.name] = std::move(t);
  }
  return outputs;
}

inline Expected<Program> load_or_compile(const std::string& program_path, const GpuRunOptions& options) {
  const bool is_artifact = program_path.size() > 5 && program_path.substr(program_path.size() - 5) == ".gdlx";
  jit::CompileSettings settings;
  settings.consts = options.consts;
  return is_artifact ? Program::load(program_path) : jit::compile(program_path, settings);
}

// `report` (when given) receives the explanation and stats text.
inline std::optional<std::map<std::string, HostTensor>> run_on_gpu(const std::string& program_path,
                                                                  const Bindings& bindings, std::string* why_not,
                                                                  const GpuRunOptions& options = {},
                                                                  std::string* report = nullptr) {
  Expected<Program> program = load_or_compile(program_path, options);
  if (!program.ok()) { *why_not = program.status().ToString(); return std::nullopt; }
  SessionOptions session_options;
  session_options.dim_policy = options.policy;
  if (options.eager_fallback) session_options.eager_fallback = jit::recompiler();
  Expected<std::unique_ptr<Session>> session = Session::create(*program, session_options);
  if (!session.ok()) { *why_not = session.status().ToString(); return std::nullopt; }
  Session& s = **session;
  auto fail = [&](const Status& st) { *why_not = st.ToString(); return std::nullopt; };
  if (Status st = bind_session(s, *program, bindings); !st.ok()) return fail(st);
  if (Status st = s.run(); !st.ok()) return fail(st);
  Expected<std::map<std::string, HostTensor>> outputs = read_session(s, *program);
  if (!outputs.ok()) return fail(outputs.status());
  if (options.explain && report) {
    Expected<GraphExplanation> e = explain_graph(s, options.repeats);
    *report += e ? e->table : "explain: " + e.status().ToString() + "\n";
  }
  if (options.stats && report) *report += "session stats:\n" + format_stats(s.stats());
  return std::move(outputs).value();
}

// A program over a group of several ranks, every rank on its own GPU of this
// machine (rank r on device r: Communicator::create_local, then
// Session::create_ranks), each with its own bindings; one graph run each,
// every rank's launched before any is read. Each rank's outputs, in order.
inline std::optional<std::vector<std::map<std::string, HostTensor>>> run_ranks_on_gpu(
    const std::string& program_path, const std::vector<Bindings>& per_rank, std::string* why_not,
    const GpuRunOptions& options = {}) {
  auto fail = [&](const Status& st) { *why_not = st.ToString(); return std::nullopt; };
  Expected<Program> program = load_or_compile(program_path, options);
  if (!program.ok()) return fail(program.status());
  std::vector<int> devices;
  for (size_t r = 0; r < per_rank.size(); ++r) devices.push_back(static_cast<int>(r));
  Expected<std::vector<std::shared_ptr<Communicator>>> comms = Communicator::create_local(devices);
  if (!comms.ok()) return fail(comms.status());
  std::vector<SessionOptions> session_options(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r) {
    session_options[r].device = static_cast<int>(r);
    session_options[r].dim_policy = options.policy;
    session_options[r].communicator = (*comms)[r];
  }
  Expected<std::vector<std::unique_ptr<Session>>> sessions = Session::create_ranks(*program, session_options);
  if (!sessions.ok()) return fail(sessions.status());
  // Every rank bound before any runs: a rank that fails to bind leaves no other waiting in a collective.
  for (size_t r = 0; r < per_rank.size(); ++r)
    if (Status st = bind_session(*(*sessions)[r], *program, per_rank[r]); !st.ok())
      return fail(Status(st.code(), "rank " + std::to_string(r) + ": " + st.message()));
  for (size_t r = 0; r < per_rank.size(); ++r)
    if (Status st = (*sessions)[r]->run(); !st.ok()) {
      for (const std::shared_ptr<Communicator>& c : *comms) c->abort();  // the ranks launched wait for this one
      return fail(Status(st.code(), "rank " + std::to_string(r) + ": " + st.message()));
    }
  std::vector<std::map<std::string, HostTensor>> outputs;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    Expected<std::map<std::string, HostTensor>> out = read_session(*(*sessions)[r], *program);
    if (!out.ok()) return fail(Status(out.status().code(), "rank " + std::to_string(r) + ": " + out.status().message()));
    outputs.push_back(std::move(out).value());
  }
  return outputs;
}

}  // namespace gdl::tools
