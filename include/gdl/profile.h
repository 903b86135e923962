// Measuring a session: what each kernel node costs, what changing a graph
// costs, and what the graph saves over eager launches (library gdl_runtime).
// Measurement tools for gdlrun --explain, the benchmarks and the examples;
// none of them is needed to run a program.
#pragma once

#include <string>
#include <vector>

#include "gdl/gdl.h"

namespace gdl {

// One kernel node as profile_nodes measured it.
struct NodeTime {
  std::string kernel;     // the kernel's symbol
  double submit_us = 0;   // host time of its cudaLaunchKernel (median)
  double device_us = 0;   // device time between events recorded around it (median)
  std::vector<int> deps;  // the nodes it waits for in the graph
};

// Launches the session's kernels eagerly `repeats` times with a CUDA event
// before and after each, waits, and returns per node the median device time
// between its events and the median host time of its launch (for the
// timeline model: what a graph saves). Every plan step is its own node here,
// also the steps that run() and run_eager() hand to a kernel of several
// steps. Needs what run_eager needs; afterwards the outputs are those of an
// eager run. Dims above their bounds: FailedPrecondition.
Expected<std::vector<NodeTime>> profile_nodes(Session& session, int repeats = 20);

// What changing an instantiated graph costs, measured on one session's graph.
struct GraphUpdateCosts {
  size_t nodes = 0;                   // kernel nodes of the graph (a multi-step kernel's steps share one)
  double set_params_us_per_node = 0;  // cudaGraphExecKernelNodeSetParams (mean over every node)
  double exec_update_us = 0;          // cudaGraphExecUpdate from the same graph (mean)
  double reinstantiate_us = 0;        // cudaGraphInstantiate of the same graph (mean)
};

// Measures, on the graph of the current dims (built if needed), the host
// cost of cudaGraphExecKernelNodeSetParams per node, of cudaGraphExecUpdate
// and of instantiating the same graph again, `repeats` times each. Waits
// for the stream first; leaves the graph as it was (not counted in stats).
Expected<GraphUpdateCosts> measure_graph_update_costs(Session& session, int repeats = 20);

// What a graph saves on one session's program and bindings (explain_graph):
// the timeline model (seed 000, section 02: submit cost overlaps with device
// work) fed with measured per-node times, beside measured runs.
struct GraphExplanation {
  size_t nodes = 0;
  double eager_submit_us = 0;     // host time of one eager launch (median over the nodes' medians)
  double device_busy_us = 0;      // sum of the nodes' device times (profile_nodes)
  double graph_submit_us = 0;     // host time of run(): node updates + cudaGraphLaunch (mean)
  double predicted_eager_us = 0;  // the model: when the last eager task ends
  double predicted_graph_us = 0;  // the model: when the last graph node ends (parallel branches overlap)
  double measured_eager_us = 0;   // wall time of run_eager() + synchronize() (median)
  double measured_graph_us = 0;   // wall time of run() + synchronize() (median)
  std::string table;              // all of it, readable, with the slowest nodes
};

// Profiles the nodes, times `repeats` graph and eager runs to completion and
// predicts both from the profile. Needs what run() needs; waits; afterwards
// the outputs are those of an eager run.
Expected<GraphExplanation> explain_graph(Session& session, int repeats = 20);

}  // namespace gdl
