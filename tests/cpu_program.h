// Helpers for the CPU tests that run whole programs: compile a program
// from text, make tensors, and run a program through the interpreter and
// through its plan (run_planned), which must agree bit for bit.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "frontend/source_loader.h"
#include "interp/interp.h"
#include "pipeline.h"
#include "plan/run_planned.h"

namespace gdl::test_programs {

inline ir::Graph compile_text(const std::string& text) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("test.gdl", text);
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  INFO(diags.render(file));
  REQUIRE(g.has_value());
  return std::move(*g);
}

inline HostTensor tensor(DType dtype, std::vector<int64_t> shape, std::vector<double> data) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

// Non-zero floats of both signs; i32 in [lo, hi].
inline HostTensor random_tensor(std::mt19937& rng, DType dtype, std::vector<int64_t> shape, int lo = -1, int hi = 8) {
  HostTensor t = tensor(dtype, std::move(shape), {});
  int64_t n = 1;
  for (int64_t e : t.shape) n *= e;
  std::uniform_real_distribution<double> magnitude(0.1, 2.0);
  std::uniform_int_distribution<int> ids(lo, hi);
  for (int64_t i = 0; i < n; ++i)
    t.data.push_back(dtype == DType::kI32 ? ids(rng) : round_to_dtype(magnitude(rng) * ((rng() & 1) ? 1 : -1), dtype));
  return t;
}

// Random values for every input, param and state of g at `dims`: floats
// of both signs with magnitudes in [0.1, 1], i32 in [lo, hi].
inline Bindings random_bindings(const ir::Graph& g, const std::vector<int64_t>& dims, std::mt19937& rng, int lo = -8,
                                int hi = 40) {
  Bindings b;
  b.dims = dims;
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  std::uniform_int_distribution<int> ints(lo, hi);
  for (const ir::Node& n : g.nodes) {
    if (n.op != ir::Op::kInput && n.op != ir::Op::kParam && n.op != ir::Op::kState) continue;
    HostTensor t = tensor(n.type.dtype, concrete_shape(n.type.shape, dims), {});
    int64_t count = 1;
    for (int64_t e : t.shape) count *= e;
    for (int64_t i = 0; i < count; ++i)
      t.data.push_back(n.type.dtype == DType::kI32 ? ints(rng)
                       : n.type.dtype == DType::kBool ? static_cast<double>(rng() & 1)
                                                      : round_to_dtype(magnitude(rng) * ((rng() & 1) ? 1 : -1), n.type.dtype));
    b.tensors[n.name] = std::move(t);
  }
  return b;
}

inline std::map<std::string, HostTensor> run_both(const ir::Graph& g, const Bindings& b, plan::PlanOptions options = {}) {
  Expected<std::map<std::string, HostTensor>> reference = interpret(g, b);
  REQUIRE_MESSAGE(reference.ok(), reference.status().message());
  plan::Plan p = plan_program(g, options);
  Expected<std::map<std::string, HostTensor>> planned = plan::run_planned(p, b);
  REQUIRE_MESSAGE(planned.ok(), planned.status().message());
  for (const auto& output : *reference) {
    const std::string& name = output.first;
    const HostTensor& value = output.second;
    INFO(name);
    REQUIRE(planned->count(name) == 1);
    CHECK(planned->at(name).data == value.data);
  }
  return *reference;
}

}  // namespace gdl::test_programs
