// The matmul-operands pass: transposes and column slices around a matmul
// become the matmul's layout (ops/matmul.h), the CPU rule reads the
// operands through it, and the values equal those of the program run with
// the copies (optimize off), bit for bit.
#include <doctest/doctest.h>

#include "cpu_program.h"
#include "ops/matmul.h"
#include "passes/ir_verify.h"

namespace gdl {
namespace {

using namespace test_programs;

ir::Graph compile_unoptimized(const std::string& text) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("test.gdl", text);
  PipelineOptions options;
  options.optimize = false;
  std::optional<ir::Graph> g = compile_to_ir(file, diags, options);
  INFO(diags.render(file));
  REQUIRE(g.has_value());
  return std::move(*g);
}

int count_ops(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

constexpr const char* kLayouts = R"(program layouts;
dim B in [1, 8];
input x : f32[B, 12];
param w : f32[20, 12];
param wqkv : f32[12, 30];
param wt : f32[30, 12];
input y : f32[B, 6];
input u : f32[B, 5];
input q3 : f32[3, 4, 8];
input k3 : f32[3, 7, 8];
output o : f32[B, 20];
output q : f32[B, 10];
output kv : f32[B, 10];
output p : f32[B, 9];
output z : f32[6, 5];
output s : f32[3, 4, 7];
output back : f32[12, B];
o = x @ transpose(w);
let qkv = x @ wqkv;
q = qkv[:, 0:10];
kv = qkv[:, 10:20] + qkv[:, 20:30];
p = (x @ transpose(wt))[:, 3:30][:, 4:13];
z = transpose(y) @ u;
s = q3 @ transpose(k3, perm = [0, 2, 1]);
back = transpose(transpose(transpose(x)) @ transpose(w)) [0:12, :] ;
)";

TEST_CASE("matmul operands: transposes and column slices are read in place, with the values of the copies") {
  const std::string text = std::string(kLayouts);
  const ir::Graph folded = compile_text(text);
  CHECK(count_ops(folded, ir::Op::kSlice) == 1);  // back's, of a transpose: not a matmul's columns
  CHECK(count_ops(folded, ir::Op::kMatMul) == 8);
  // Every transpose left is one no matmul reads (back's outer one).
  for (const ir::Node& n : folded.nodes)
    for (ir::ValueId a : n.args)
      if (n.op == ir::Op::kMatMul) CHECK(folded.node(a).op != ir::Op::kTranspose);
  bool window_of_window = false;
  for (const ir::Node& n : folded.nodes)
    if (n.op == ir::Op::kMatMul) {
      const ops::MatmulLayout l = ops::matmul_layout(n);
      window_of_window |= l.transpose_b && l.col_begin == 7 && l.col_count == 9;
    }
  CHECK(window_of_window);  // [:, 3:30][:, 4:13] of x @ transpose(wt): columns 7:16 of wt's rows
  CHECK(ir::verify(folded).empty());

  std::mt19937 rng(5);
  for (int64_t b : {1, 3, 8}) {
    Bindings bind;
    bind.dims = {b};
    bind.tensors["x"] = random_tensor(rng, DType::kF32, {b, 12});
    bind.tensors["w"] = random_tensor(rng, DType::kF32, {20, 12});
    bind.tensors["wqkv"] = random_tensor(rng, DType::kF32, {12, 30});
    bind.tensors["wt"] = random_tensor(rng, DType::kF32, {30, 12});
    bind.tensors["y"] = random_tensor(rng, DType::kF32, {b, 6});
    bind.tensors["u"] = random_tensor(rng, DType::kF32, {b, 5});
    bind.tensors["q3"] = random_tensor(rng, DType::kF32, {3, 4, 8});
    bind.tensors["k3"] = random_tensor(rng, DType::kF32, {3, 7, 8});
    const std::map<std::string, HostTensor> got = run_both(folded, bind);
    Expected<std::map<std::string, HostTensor>> want = interpret(compile_unoptimized(text), bind);
    REQUIRE(want.ok());
    for (const auto& output : *want) {
      const std::string& name = output.first;
      const HostTensor& value = output.second;
      INFO(name << " at B = " << b);
      CHECK(got.at(name).shape == value.shape);
      CHECK(got.at(name).data == value.data);
    }
  }
}

TEST_CASE("matmul operands: a product also read whole keeps its slices, and only a swap of the last two axes folds") {
  const ir::Graph g = compile_text(R"(program keep;
input x : f32[2, 4, 6];
param w : f32[6, 8];
param v : f32[2, 6, 4];
output whole : f32[2, 4, 8];
output part : f32[2, 4, 3];
output other : f32[4, 2, 4];
let m = x @ w;
whole = m;
part = m[:, :, 0:3];
other = transpose(x @ transpose(v, perm = [0, 1, 2]) , perm = [1, 0, 2]);
)");
  CHECK(count_ops(g, ir::Op::kSlice) == 1);                 // m is an output: its slice stays a copy of it
  CHECK(count_ops(g, ir::Op::kTranspose) == 1);              // only the outer one (not a matmul operand)
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::Op::kMatMul) CHECK(ops::matmul_layout(n).as_stored());
}

TEST_CASE("matmul operands: the verifier refuses a layout that does not fit the operands") {
  ir::Graph g = compile_text(R"(program bad;
input x : f32[2, 12];
param w : f32[12, 30];
output q : f32[2, 10];
q = (x @ w)[:, 0:10];
)");
  for (ir::Node& n : g.nodes)
    if (n.op == ir::Op::kMatMul) {
      CHECK(ir::verify(g).empty());
      n.attrs.ints = {0, 0, 25, 10};  // columns 25:35 of 30
      CHECK(ir::verify(g).find("window") != std::string::npos);
      n.attrs.ints = {0, 2, 0, 10};   // not a flag
      CHECK(ir::verify(g).find("layout") != std::string::npos);
    }
}

}  // namespace
}  // namespace gdl
