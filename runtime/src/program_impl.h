// What a Program holds: the artifact, the public description of its
// declarations, and the tables the sessions use to find a name's value and
// buffer. Built once, immutable afterwards (except the params registry,
// which has its own lock).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "artifact.h"
#include "gdl/gdl.h"

namespace gdl {

namespace rt {
class DeviceParams;
}

struct Program::Impl {
  Artifact artifact;

  std::vector<RuntimeDimInfo> dims;
  std::vector<TensorInfo> inputs, params, outputs, states;
  std::vector<ScalarInfo> scalars;
  // The IR value behind each entry of inputs / params / outputs / states / scalars.
  std::vector<ir::ValueId> input_values, param_values, output_values, state_values, scalar_values;
  std::map<std::string, size_t> input_index, param_index, output_index, state_index, scalar_index;

  // Inputs whose buffer a step's result overlaps: a run consumes them, so
  // they must be bound again before the next run. (The planner keeps input
  // slots apart; this guards against an artifact that does not.)
  std::vector<bool> input_clobbered_by_run;
  std::vector<int> value_input_slot;  // per value: its gdl_args::inputs slot or -1 (plan.h input_pointer_slots)

  // The shared params region of each device, alive while a session uses it.
  mutable std::mutex params_mutex;
  mutable std::map<int, std::weak_ptr<rt::DeviceParams>> params_by_device;

  // A Program over this (the constructor is Program's own; Impl is its member).
  static Program wrap(std::shared_ptr<const Impl> impl) { return Program(std::move(impl)); }

  const plan::Plan& plan() const { return artifact.plan; }
  const KernelTable& kernels() const { return artifact.kernels; }
  const ir::Graph& graph() const { return artifact.plan.graph; }
  const plan::Buffer& buffer_of(ir::ValueId v) const { return artifact.plan.buffers.at(static_cast<size_t>(v)); }
};

namespace rt {

// Checks that the artifact's tables fit together (what a checksum cannot
// prove: a writer bug or a hostile file) and builds the Program tables.
// Any inconsistency is a DataLoss status naming it.
Expected<std::shared_ptr<Program::Impl>> make_program_impl(Artifact artifact);

// A leaf or output of the IR as the API declares it (TensorInfo), under `name`.
TensorInfo describe_tensor(const ir::Node& n, const std::string& name, const ir::Graph& g);

// How a session created with `options` serves each run-time dim
// (Program::dim_serving). NotFound for an unknown dim name in the options.
Expected<std::vector<DimServing>> resolve_dim_serving(const Program::Impl& program, const SessionOptions& options);

inline ElementType to_public(DType t) { return static_cast<ElementType>(t); }
inline DType to_internal(ElementType t) { return static_cast<DType>(t); }

}  // namespace rt
}  // namespace gdl
