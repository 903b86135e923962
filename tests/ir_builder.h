// Test-only helpers to build IR graphs and host tensors tersely.
//
//   GraphBuilder b;
//   auto x = b.input("x", type(DType::kF32, {2, 3}));
//   auto y = b.unary(ir::Op::kExp, x);
//   b.output("y", y);
//   auto out = run(b.g, bindings);   // verify() must pass, then interpret()
#pragma once

#include <doctest/doctest.h>

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/diagnostics.h"
#include "interp/interp.h"
#include "ir.h"
#include "pipeline.h"
#include "frontend/source.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"

namespace gdl::testing {

// The checked, optimised IR of a program text (REQUIREs that it compiles;
// the diagnostics go to the test's log otherwise).
inline ir::Graph graph_of(const std::string& text) {
  SourceFile file("test.gdl", text);
  DiagnosticSink diags;
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  INFO(text << "\n" << diags.render(file));
  REQUIRE(g.has_value());
  return std::move(*g);
}

// A shape of compile-time extents.
inline Shape constant_shape(std::initializer_list<int64_t> extents) {
  Shape s;
  for (int64_t e : extents) s.push_back(Dim::constant(e));
  return s;
}

inline TensorType type(DType dtype, std::initializer_list<int64_t> extents) {
  return {dtype, constant_shape(extents)};
}

// A host tensor whose data is rounded to the dtype, as the interpreter holds it.
inline HostTensor tensor(DType dtype, std::vector<int64_t> shape, std::vector<double> data) {
  for (double& v : data) v = round_to_dtype(v, dtype);
  return HostTensor{dtype, std::move(shape), std::move(data)};
}

inline ir::Attrs axis_attrs(int axis, bool keepdims = false) {
  ir::Attrs a;
  a.axis = axis;
  a.keepdims = keepdims;
  return a;
}
// A reduction over several axes (ascending), as the type rule leaves it.
inline ir::Attrs axes_attrs(std::vector<int64_t> axes, bool keepdims = false) {
  ir::Attrs a;
  a.ints = std::move(axes);
  a.keepdims = keepdims;
  return a;
}
inline ir::Attrs ints_attrs(std::vector<int64_t> ints) {
  ir::Attrs a;
  a.ints = std::move(ints);
  return a;
}
inline ir::Attrs value_attrs(double value) {
  ir::Attrs a;
  a.value = value;
  return a;
}

struct GraphBuilder {
  ir::Graph g;

  // Declares run-time dim `name` in [lo, hi]; returns its Dim.
  Dim dim(std::string name, int64_t lo, int64_t hi) {
    g.dims.push_back(DimInfo{std::move(name), lo, hi, {hi}, DimPolicy::kBuckets});
    return Dim::runtime(static_cast<int>(g.dims.size() - 1));
  }

  ir::ValueId leaf(ir::Op role, std::string name, TensorType t, double value = 0) {
    ir::Node n;
    n.op = role;
    n.name = std::move(name);
    n.type = std::move(t);
    n.attrs.value = value;
    return g.add(std::move(n));
  }
  ir::ValueId input(std::string name, TensorType t) { return leaf(ir::Op::kInput, std::move(name), std::move(t)); }
  ir::ValueId param(std::string name, TensorType t) { return leaf(ir::Op::kParam, std::move(name), std::move(t)); }
  ir::ValueId scalar(std::string name, DType dtype, double default_value) {
    return leaf(ir::Op::kScalar, std::move(name), TensorType{dtype, {}}, default_value);
  }
  ir::ValueId constant(double value, DType dtype = DType::kF32) {
    return leaf(ir::Op::kConstant, "", TensorType{dtype, {}}, value);
  }

  // Any op with an explicit result type.
  ir::ValueId op(ir::Op op, std::vector<ir::ValueId> args, TensorType result, ir::Attrs attrs = {}) {
    ir::Node n;
    n.op = op;
    n.args = std::move(args);
    n.type = std::move(result);
    n.attrs = std::move(attrs);
    return g.add(std::move(n));
  }

  // Elementwise ops with the result type inferred as ir.h defines it.
  ir::ValueId unary(ir::Op o, ir::ValueId x) {
    TensorType t = type_of(x);
    if (o == ir::Op::kNot) t.dtype = DType::kBool;
    return op(o, {x}, t);
  }
  ir::ValueId cast(ir::ValueId x, DType dtype) { return op(ir::Op::kCast, {x}, {dtype, type_of(x).shape}); }
  ir::ValueId binary(ir::Op o, ir::ValueId a, ir::ValueId b) {
    auto shape = broadcast_shapes(type_of(a).shape, type_of(b).shape);
    REQUIRE(shape.has_value());
    bool to_bool = o >= ir::Op::kLt && o <= ir::Op::kOr;
    return op(o, {a, b}, {to_bool ? DType::kBool : type_of(a).dtype, *shape});
  }

  void output(std::string name, ir::ValueId v) { g.outputs.push_back(ir::Output{std::move(name), v, {}}); }
  const TensorType& type_of(ir::ValueId v) const { return g.node(v).type; }
};

// Checks the graph with ir::verify, interprets it, and returns its outputs.
inline std::map<std::string, HostTensor> run(const ir::Graph& g, const Bindings& b) {
  std::string problem = ir::verify(g);
  INFO(ir::print_ir(g));
  REQUIRE(problem == "");
  auto result = interpret(g, b);
  INFO(result.status().message());
  REQUIRE(result.ok());
  return std::move(result).value();
}

}  // namespace gdl::testing
