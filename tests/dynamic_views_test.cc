// Slices behind a run-time axis (`x[1]` of x : f32[3, T, 8]) are views whose
// offset moves with the dims' layout extents: the plan has no step for them,
// their buffers carry the offset's terms, the kernels compute their
// addresses from gdl_args.dims, and the CPU execution of the plan equals the
// interpreter with the values laid out at the actual dims (the update
// policy) and at a bucket's capacity with NaN padding (the buckets policy).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "cpu_program.h"
#include "plan.h"
#include "plan/check.h"
#include "plan/print.h"

namespace gdl {
namespace {

using ir::Op;
using ir::ValueId;
using plan::OffsetTerm;
using test_programs::compile_text;

// The program of the task: both slices of x lie T * 32 and T * 64 bytes in.
constexpr const char* kOneDim = R"(program dv;
dim T in [1, 64];
input x : f32[3, T, 8];
input w : f32[8, 8];
output y : f32[T, 8];
y = x[1] @ w + x[2];
)";

// x[1] lies B * T * 32 bytes in; z[2, 3] at 320 * T + 480 (a static part and a term).
constexpr const char* kTwoDims = R"(program dv2;
dim B in [1, 4];
dim T in [4, 16];
input x : f32[2, B, T, 8];
input z : f32[3, T, 5, 8];
output y : f32[B, T, 8];
output r : f32[5, 8];
y = x[1] * 2.0;
r = z[2, 3] + 1.0;
)";

// A leading run-time axis: x[:, 1] is T runs of 8 elements, not one (a
// copy); x[2] starts at a fixed 2 * 128 bytes (a view without terms).
constexpr const char* kLeading = R"(program lead;
dim T in [3, 16];
input x : f32[T, 4, 8];
output a : f32[T, 8];
output b : f32[4, 8];
a = x[:, 1] * 2.0;
b = x[2] + 1.0;
)";

// An output that is such a view (read after the run at the run's layout).
constexpr const char* kOutputView = R"(program ov;
dim T in [1, 16];
input x : f32[3, T, 8];
output y : f32[T, 8];
let h = x * 2.0;
y = h[1];
)";

// A view of static shape behind T (h[1, 1], 128 * T bytes into h), which
// the copy in front of the in-place scatter reads.
constexpr const char* kStaticShape = R"(program ss;
dim T in [2, 6];
input x : f32[2, T, 4, 8];
input idx : i32[3];
input vals : f32[3, 8];
output s : f32[T, 4, 8];
output y : f32[4, 8];
let h = x * 2.0;
s = h[1] + 1.0;
y = scatter(h[1, 1], idx, vals, axis = 0) * 3.0;
)";

// The slice nodes of p's graph, in value order.
std::vector<ValueId> slices_of(const plan::Plan& p) {
  std::vector<ValueId> out;
  for (size_t v = 0; v < p.graph.nodes.size(); ++v)
    if (p.graph.nodes[v].op == Op::kSlice) out.push_back(static_cast<ValueId>(v));
  return out;
}

bool computed_by_a_step(const plan::Plan& p, ValueId v) {
  for (const plan::Step& s : p.steps)
    for (ValueId u : s.values)
      if (u == v) return true;
  return false;
}

const plan::Buffer& input_buffer(const plan::Plan& p, const std::string& name) {
  for (ValueId v : p.graph.leaves(Op::kInput))
    if (p.graph.node(v).name == name) return p.buffers.at(static_cast<size_t>(v));
  FAIL("no input " << name);
  return p.buffers.at(0);
}

Bindings random_bindings(const ir::Graph& g, const std::vector<int64_t>& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Bindings b;
  b.dims = dims;
  for (const ir::Node& n : g.nodes)
    if (n.op == Op::kInput || n.op == Op::kParam)
      b.tensors[n.name] = test_programs::random_tensor(rng, n.type.dtype, concrete_shape(n.type.shape, dims));
  return b;
}

// p run on the CPU at the actual dims `valid` (the update policy's layout)
// and at `capacity` with NaN in every padded input position (the buckets
// policy's layout) equals the interpreter at `valid`, exactly.
void expect_plan_matches(const plan::Plan& p, const std::vector<int64_t>& valid, const std::vector<int64_t>& capacity,
                         uint32_t seed) {
  const ir::Graph& g = p.graph;
  const Bindings plain = random_bindings(g, valid, seed);
  Expected<std::map<std::string, HostTensor>> want = interpret(g, plain);
  REQUIRE_MESSAGE(want.ok(), want.status().message());

  Expected<std::map<std::string, HostTensor>> updated = plan::run_planned(p, plain);
  REQUIRE_MESSAGE(updated.ok(), updated.status().message());

  Bindings padded;
  padded.dims = capacity;
  padded.valid_dims = valid;
  for (ValueId v : g.leaves(Op::kInput)) {
    const ir::Node& n = g.node(v);
    padded.tensors[n.name] = pad_to_capacity(plain.tensors.at(n.name), n.type.shape, capacity, std::nan(""));
  }
  Expected<std::map<std::string, HostTensor>> bucketed = plan::run_planned(p, padded);
  REQUIRE_MESSAGE(bucketed.ok(), bucketed.status().message());

  for (const ir::Output& o : g.outputs) {
    INFO("output " << o.name);
    CHECK(updated->at(o.name).data == want->at(o.name).data);
    const HostTensor part = valid_part(bucketed->at(o.name), g.node(o.value).type.shape, valid);
    CHECK(part.shape == want->at(o.name).shape);
    CHECK(part.data == want->at(o.name).data);
  }
}

}  // namespace

TEST_CASE("dynamic views: a slice behind a run-time axis is a view whose offset moves with the dim") {
  for (bool fuse : {true, false}) {
    INFO(std::string(fuse ? "fused" : "not fused"));
    const plan::Plan p = plan_program(compile_text(kOneDim), plan::PlanOptions{fuse, fuse, fuse});
    REQUIRE(plan::check_plan(p) == "");
    for (const plan::Step& s : p.steps)
      for (ValueId v : s.values) CHECK(p.graph.node(v).op != Op::kSlice);
    const std::vector<ValueId> slices = slices_of(p);
    REQUIRE(slices.size() == 2);
    const plan::Buffer& x = input_buffer(p, "x");
    const uint64_t row_bytes = 8 * 4;
    for (size_t i = 0; i < 2; ++i) {
      const plan::Buffer& view = p.buffers.at(static_cast<size_t>(slices[i]));
      INFO("x[" << i + 1 << "]");
      CHECK(view.region == plan::Region::kArena);
      CHECK(view.offset == x.offset);  // x[1] and x[2]: no static part
      CHECK(view.terms == std::vector<OffsetTerm>{{(i + 1) * row_bytes, {0}}});
      CHECK(view.bytes == 64 * row_bytes);
      CHECK(plan::offset_at(view, {5}) == x.offset + (i + 1) * 5 * row_bytes);
      CHECK(plan::buffer_alignment(view) == (i + 1) * 32);  // 32 * T, 64 * T: aligned so at every T
    }
    const std::string listing = plan::print_plan(p);
    INFO(listing);
    CHECK(listing.find("arena @" + std::to_string(x.offset) + " + 32*T (2.0 KiB)") != std::string::npos);
    CHECK(listing.find("arena @" + std::to_string(x.offset) + " + 64*T (2.0 KiB)") != std::string::npos);
    for (int64_t t : {1, 5, 8, 64})
      for (int64_t capacity : {8, 64})
        if (t <= capacity) {
          INFO("T = " << t << ", capacity " << capacity);
          expect_plan_matches(p, {t}, {capacity}, static_cast<uint32_t>(t * 100 + capacity));
        }
  }
}

TEST_CASE("dynamic views: the kernels compute a view's address from the layout extents and depend on them") {
  const plan::Plan p = plan_program(compile_text(kOneDim));
  const GeneratedCode code = generate_cuda(p);
  INFO(code.source);
  // x[1] and x[2] are views of input x: read through its pointer slot, at their place inside x.
  CHECK(code.source.find("args.inputs[0] + (0ull + 32ull * (unsigned long long)dim0)") != std::string::npos);
  CHECK(code.source.find("args.inputs[0] + (0ull + 64ull * (unsigned long long)dim0)") != std::string::npos);
  CHECK(code.source.find("= args.dims[0];") != std::string::npos);
  for (const Kernel& k : code.kernels.kernels) CHECK(k.depends_on_dims);
}

TEST_CASE("dynamic views: an offset over two run-time dims, and a static part with a term") {
  const plan::Plan p = plan_program(compile_text(kTwoDims));
  REQUIRE(plan::check_plan(p) == "");
  const std::vector<ValueId> slices = slices_of(p);
  REQUIRE(slices.size() == 2);
  for (ValueId s : slices) CHECK_FALSE(computed_by_a_step(p, s));
  const plan::Buffer &xs = p.buffers.at(static_cast<size_t>(slices[0])), &zs = p.buffers.at(static_cast<size_t>(slices[1]));
  CHECK(xs.offset == input_buffer(p, "x").offset);
  CHECK(xs.terms == std::vector<OffsetTerm>{{32, {0, 1}}});  // 1 * B * T * 8 elements
  CHECK(zs.offset == input_buffer(p, "z").offset + 480);     // 3 * 5 * 8 elements
  CHECK(zs.terms == std::vector<OffsetTerm>{{320, {1}}});    // 2 * T * 5 * 8 elements
  CHECK(plan::buffer_alignment(zs) == 32);
  CHECK(plan::print_plan(p).find(" + 32*B*T (") != std::string::npos);
  for (const std::pair<int64_t, int64_t> dims : {std::pair<int64_t, int64_t>{1, 4}, {3, 5}, {4, 16}, {2, 11}}) {
    const int64_t b = dims.first, t = dims.second;
    for (const std::pair<int64_t, int64_t> capacity : {std::pair<int64_t, int64_t>{4, 16}, {b, t}}) {
      const int64_t cb = capacity.first, ct = capacity.second;
      INFO("B = " << b << ", T = " << t << ", capacity " << cb << " x " << ct);
      expect_plan_matches(p, {b, t}, {cb, ct}, static_cast<uint32_t>(b * 1000 + t * 10 + cb));
    }
  }
}

TEST_CASE("dynamic views: under a leading run-time axis, x[:, 1] stays a copy and x[2] is a fixed view") {
  const plan::Plan p = plan_program(compile_text(kLeading));
  REQUIRE(plan::check_plan(p) == "");
  const std::vector<ValueId> slices = slices_of(p);
  REQUIRE(slices.size() == 2);
  CHECK_FALSE(plan::is_view_node(p.graph, p.graph.node(slices[0])));
  CHECK(computed_by_a_step(p, slices[0]));
  CHECK(plan::is_view_node(p.graph, p.graph.node(slices[1])));
  const plan::Buffer& fixed = p.buffers.at(static_cast<size_t>(slices[1]));
  CHECK(fixed.offset == input_buffer(p, "x").offset + 2 * 4 * 8 * 4);
  CHECK(fixed.terms.empty());
  for (int64_t t : {3, 7, 16}) {
    INFO("T = " << t);
    expect_plan_matches(p, {t}, {16}, static_cast<uint32_t>(t));
  }
}

TEST_CASE("dynamic views: an output that is a moving view, and a moving view of static shape") {
  {
    const plan::Plan p = plan_program(compile_text(kOutputView));
    REQUIRE(plan::check_plan(p) == "");
    const std::vector<ValueId> slices = slices_of(p);
    REQUIRE(slices.size() == 1);
    CHECK_FALSE(computed_by_a_step(p, slices[0]));
    const plan::Buffer& y = p.buffers.at(static_cast<size_t>(p.graph.outputs.at(0).value));
    CHECK(y.terms == std::vector<OffsetTerm>{{32, {0}}});
    for (int64_t t : {1, 3, 16}) {
      INFO("T = " << t);
      expect_plan_matches(p, {t}, {16}, static_cast<uint32_t>(t));
    }
  }
  const plan::Plan p = plan_program(compile_text(kStaticShape));
  REQUIRE(plan::check_plan(p) == "");
  const std::vector<ValueId> slices = slices_of(p);
  REQUIRE(slices.size() == 2);
  for (ValueId s : slices) CHECK_FALSE(computed_by_a_step(p, s));
  const plan::Buffer &rows = p.buffers.at(static_cast<size_t>(slices[0])), &row = p.buffers.at(static_cast<size_t>(slices[1]));
  CHECK(row.terms == std::vector<OffsetTerm>{{128, {0}}});
  CHECK(row.offset == rows.offset + 4 * 8 * 4);
  for (int64_t t : {2, 3, 6}) {
    INFO("T = " << t);
    expect_plan_matches(p, {t}, {6}, static_cast<uint32_t>(t));
  }
}

}  // namespace gdl
