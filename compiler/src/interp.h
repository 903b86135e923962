// The CPU reference interpreter: executes an IR graph for one binding of the
// run-time dims. It is the oracle for every GPU test and the fallback that
// runs programs on machines without a GPU.
//
// Values are held as doubles. Every op computes (and accumulates) in double,
// then rounds its result to the node's dtype, so a value held here is exactly
// representable in that dtype and encodes to raw bytes without loss.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "gdl/status.h"
#include "ir.h"

namespace gdl {

struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // concrete extents
  std::vector<double> data;    // row-major, rounded to dtype
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

struct Bindings {
  std::vector<int64_t> dims;                   // value of each run-time dim (Graph::dims order)
  std::map<std::string, HostTensor> tensors;   // inputs and params by name
  std::map<std::string, double> scalars;       // run-time scalars; missing ones take their default
};

// Concrete shape of a node's value for a binding of the run-time dims.
std::vector<int64_t> concrete_shape(const Shape& s, const std::vector<int64_t>& dims);

// Evaluates one non-leaf node from its argument values (args[i] is the value
// of node.args[i]). Internal errors (a malformed node) abort; user errors
// cannot reach this point because the checker rejected them.
HostTensor eval_node(const ir::Node& node, std::span<const HostTensor* const> args,
                     const std::vector<int64_t>& dims);

// Checks bindings against the graph (every input and param present, dtype and
// shape equal, dims inside their bounds) and returns a Status error naming
// the first mismatch.
Status validate_bindings(const ir::Graph& g, const Bindings& b);

// Runs the whole graph; returns every output by name.
Expected<std::map<std::string, HostTensor>> interpret(const ir::Graph& g, const Bindings& b);

}  // namespace gdl
