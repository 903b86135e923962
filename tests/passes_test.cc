// The IR clean-up passes (fold_constants, eliminate_common_subexpressions,
// eliminate_dead_code) on hand-built graphs, and ir::verify rejecting broken
// graphs. Every pass must leave a graph that verifies and computes the same
// outputs as before.
#include <doctest/doctest.h>

#include <cmath>

#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fold_constants.h"
#include "interp/interp.h"
#include "ir_builder.h"
#include "passes/ir_verify.h"

using namespace gdl;
using namespace gdl::testing;
using ir::Op;

namespace {

size_t count_op(const ir::Graph& g, Op op) {
  size_t n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

// Outputs must be bit-for-bit the same (NaN compared as NaN).
void check_same_outputs(const std::map<std::string, HostTensor>& before,
                        const std::map<std::string, HostTensor>& after) {
  REQUIRE(before.size() == after.size());
  for (const auto& output : before) {
    const std::string& name = output.first;
    const HostTensor& t = output.second;
    CAPTURE(name);
    const HostTensor& u = after.at(name);
    CHECK(t.dtype == u.dtype);
    REQUIRE(t.shape == u.shape);
    for (size_t i = 0; i < t.data.size(); ++i)
      CHECK((t.data[i] == u.data[i] || (std::isnan(t.data[i]) && std::isnan(u.data[i]))));
  }
}

}  // namespace

TEST_CASE("fold_constants evaluates constant chains and skips identities") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF16, {2, 3}));
  auto two = b.constant(2.0, DType::kF16);
  auto three = b.constant(3.0, DType::kF16);
  auto five = b.binary(Op::kAdd, two, three);                 // folds to 5
  auto third = b.binary(Op::kDiv, b.constant(1.0, DType::kF16), three);  // folds to f16(1/3)
  auto scale = b.binary(Op::kMul, five, third);               // folds through the chain
  auto cond = b.binary(Op::kLt, two, three);                  // folds to bool 1
  auto picked = b.op(Op::kWhere, {cond, scale, two}, {DType::kF16, {}});
  auto y = b.binary(Op::kMul, x, picked);
  auto same_cast = b.cast(y, DType::kF16);
  auto same_shape = b.op(Op::kReshape, {same_cast}, type(DType::kF16, {2, 3}));
  auto identity = b.op(Op::kTranspose, {same_shape}, type(DType::kF16, {2, 3}), ints_attrs({0, 1}));
  auto swapped = b.op(Op::kTranspose, {identity}, type(DType::kF16, {3, 2}), ints_attrs({1, 0}));
  b.output("y", identity);
  b.output("t", swapped);
  b.output("k", scale);

  Bindings bind{{}, {{"x", tensor(DType::kF16, {2, 3}, {0.5, -1.25, 2.0, 3.5, -0.75, 1.5})}}, {}};
  auto before = run(b.g, bind);
  size_t nodes_before = b.g.nodes.size();

  fold_constants(b.g);
  CHECK(ir::verify(b.g) == "");
  CHECK(b.g.nodes.size() == nodes_before);  // folding only rewrites; DCE removes
  const ir::Node& folded = b.g.node(scale);
  CHECK(folded.op == Op::kConstant);
  CHECK(folded.args.empty());
  double f16_third = half_bits_to_float(float_to_half_bits(1.0f / 3.0f));
  CHECK(folded.attrs.value == round_to_dtype(5.0 * f16_third, DType::kF16));
  CHECK(b.g.node(cond).op == Op::kConstant);
  CHECK(b.g.node(cond).attrs.value == 1.0);
  CHECK(b.g.node(picked).op == Op::kConstant);
  CHECK(b.g.node(y).args[1] == picked);
  // The identities are bypassed: the output and the real transpose read y.
  CHECK(b.g.outputs[0].value == y);
  CHECK(b.g.node(swapped).args[0] == y);
  check_same_outputs(before, run(b.g, bind));

  eliminate_dead_code(b.g);
  CHECK(ir::verify(b.g) == "");
  // Left: x, the folded `scale` and `picked`, y = x * picked, and the swap.
  CHECK(b.g.nodes.size() == 5);
  CHECK(count_op(b.g, Op::kConstant) == 2);
  CHECK(count_op(b.g, Op::kCast) == 0);
  CHECK(count_op(b.g, Op::kReshape) == 0);
  check_same_outputs(before, run(b.g, bind));
}

TEST_CASE("fold_constants leaves run-time scalars and non-rank-0 values alone") {
  GraphBuilder b;
  auto alpha = b.scalar("alpha", DType::kF32, 2.0);
  auto x = b.input("x", type(DType::kF32, {2}));
  auto one = b.constant(1.0);
  auto scaled = b.binary(Op::kMul, alpha, one);  // depends on a run-time value
  auto y = b.binary(Op::kAdd, x, scaled);
  b.output("y", y);
  auto reshaped = b.op(Op::kReshape, {x}, type(DType::kF32, {2, 1}));  // a real reshape
  b.output("r", reshaped);
  fold_constants(b.g);
  CHECK(b.g.node(scaled).op == Op::kMul);
  CHECK(b.g.node(reshaped).op == Op::kReshape);
  CHECK(b.g.outputs[1].value == reshaped);
  Bindings bind{{}, {{"x", tensor(DType::kF32, {2}, {0.5, 1.5})}}, {{"alpha", 3.0}}};
  CHECK(run(b.g, bind).at("y").data == std::vector<double>{3.5, 4.5});
}

TEST_CASE("eliminate_common_subexpressions merges equal values, and only those") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {4}));
  auto c1 = b.constant(2.0);
  auto c2 = b.constant(2.0);                      // same as c1
  auto zero = b.constant(0.0);
  auto minus_zero = b.constant(-0.0);             // differs from zero: 1 / -0 = -inf
  auto c_f16 = b.constant(2.0, DType::kF16);      // differs from c1 by dtype
  auto e1 = b.unary(Op::kExp, x);
  auto e2 = b.unary(Op::kExp, x);                 // same as e1
  auto m1 = b.binary(Op::kMul, e1, c1);
  auto m2 = b.binary(Op::kMul, e2, c2);           // same once e2 -> e1 and c2 -> c1
  auto s0 = b.op(Op::kSum, {m1}, {DType::kF32, {}}, axis_attrs(0));
  auto s0k = b.op(Op::kSum, {m2}, type(DType::kF32, {1}), axis_attrs(0, true));  // keepdims differs
  auto a = b.binary(Op::kAdd, m1, zero);
  auto a_neg = b.binary(Op::kAdd, m2, minus_zero);
  auto half = b.cast(x, DType::kF16);
  auto h = b.binary(Op::kMul, half, c_f16);
  b.output("s0", s0);
  b.output("s0k", s0k);
  b.output("a", a);
  b.output("a_neg", a_neg);
  b.output("h", h);
  b.output("m2", m2);

  Bindings bind{{}, {{"x", tensor(DType::kF32, {4}, {0.5, -1.5, 2.25, -0.125})}}, {}};
  auto before = run(b.g, bind);

  eliminate_common_subexpressions(b.g);
  CHECK(ir::verify(b.g) == "");
  CHECK(b.g.node(m1).args == std::vector<ir::ValueId>{e1, c1});
  CHECK(b.g.node(m2).args == std::vector<ir::ValueId>{e1, c1});
  CHECK(b.g.node(s0k).args[0] == m1);   // m2 was merged into m1
  CHECK(b.g.node(a_neg).args[1] == minus_zero);
  CHECK(b.g.node(h).args[1] == c_f16);
  CHECK(b.g.outputs[5].value == m1);    // outputs are redirected too
  CHECK(b.g.outputs[0].value == s0);
  CHECK(b.g.outputs[1].value == s0k);
  check_same_outputs(before, run(b.g, bind));

  size_t nodes_before = b.g.nodes.size();
  eliminate_dead_code(b.g);
  CHECK(ir::verify(b.g) == "");
  CHECK(b.g.nodes.size() == nodes_before - 3);  // c2, e2, m2 are gone
  CHECK(count_op(b.g, Op::kExp) == 1);
  CHECK(count_op(b.g, Op::kConstant) == 4);     // 2.0, 0.0, -0.0, f16 2.0
  check_same_outputs(before, run(b.g, bind));
}

TEST_CASE("eliminate_common_subexpressions never merges declared leaves") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2}));
  auto y = b.input("y", type(DType::kF32, {2}));  // same type, different input
  auto alpha = b.scalar("alpha", DType::kF32, 1.0);
  auto beta = b.scalar("beta", DType::kF32, 1.0);
  auto sx = b.binary(Op::kMul, x, alpha);
  auto sy = b.binary(Op::kMul, y, beta);
  b.output("sx", sx);
  b.output("sy", sy);
  eliminate_common_subexpressions(b.g);
  CHECK(b.g.node(sy).args == std::vector<ir::ValueId>{y, beta});
  Bindings bind{{},
                {{"x", tensor(DType::kF32, {2}, {1, 2})}, {"y", tensor(DType::kF32, {2}, {3, 4})}},
                {{"beta", 0.5}}};
  auto out = run(b.g, bind);
  CHECK(out.at("sx").data == std::vector<double>{1, 2});
  CHECK(out.at("sy").data == std::vector<double>{1.5, 2});
}

TEST_CASE("eliminate_dead_code keeps every input, param and scalar and renumbers compactly") {
  GraphBuilder b;
  Dim batch = b.dim("B", 1, 4);
  auto dead_const = b.constant(7.0);
  auto x = b.input("x", {DType::kF32, {batch, Dim::constant(2)}});
  auto unused_in = b.input("unused", type(DType::kF32, {3}));
  auto dead_exp = b.unary(Op::kExp, unused_in);
  auto w = b.param("w", type(DType::kF32, {2, 2}));
  auto unused_w = b.param("unused_w", type(DType::kF32, {2}));
  auto unused_s = b.scalar("unused_s", DType::kF32, 1.0);
  auto h = b.op(Op::kMatMul, {x, w}, {DType::kF32, {batch, Dim::constant(2)}});
  auto dead_sum = b.op(Op::kSum, {h}, {DType::kF32, {batch}}, axis_attrs(1));
  auto y = b.unary(Op::kTanh, h);
  b.output("y", y);
  (void)dead_const, (void)dead_exp, (void)unused_w, (void)unused_s, (void)dead_sum;

  Bindings bind{{3},
                {{"x", tensor(DType::kF32, {3, 2}, {0.5, 1, -1, 2, 1.5, -0.5})},
                 {"w", tensor(DType::kF32, {2, 2}, {1, -0.5, 0.25, 2})},
                 {"unused", tensor(DType::kF32, {3}, {1, 2, 3})},
                 {"unused_w", tensor(DType::kF32, {2}, {1, 2})}},
                {}};
  auto before = run(b.g, bind);

  eliminate_dead_code(b.g);
  CHECK(ir::verify(b.g) == "");
  // Kept, in order: x, unused, w, unused_w, unused_s, h, y.
  REQUIRE(b.g.nodes.size() == 7);
  std::vector<Op> ops;
  for (const ir::Node& n : b.g.nodes) ops.push_back(n.op);
  CHECK(ops == std::vector<Op>{Op::kInput, Op::kInput, Op::kParam, Op::kParam, Op::kScalar, Op::kMatMul, Op::kTanh});
  CHECK(b.g.nodes[1].name == "unused");
  CHECK(b.g.nodes[5].args == std::vector<ir::ValueId>{0, 2});
  CHECK(b.g.nodes[6].args == std::vector<ir::ValueId>{5});
  CHECK(b.g.outputs[0].value == 6);
  CHECK(b.g.leaves(Op::kInput).size() == 2);  // the binding API did not change
  check_same_outputs(before, run(b.g, bind));
}

TEST_CASE("the three passes in a row on a graph with everything to clean") {
  GraphBuilder b;
  auto x = b.input("x", type(DType::kF32, {2, 2}));
  auto half = b.binary(Op::kDiv, b.constant(1.0), b.constant(2.0));
  auto half_again = b.binary(Op::kMul, b.constant(0.25), b.constant(2.0));
  auto p = b.binary(Op::kMul, x, half);
  auto q = b.binary(Op::kMul, x, half_again);  // equal to p once folded and merged
  auto r = b.binary(Op::kAdd, p, q);
  b.output("r", b.op(Op::kReshape, {r}, type(DType::kF32, {2, 2})));
  Bindings bind{{}, {{"x", tensor(DType::kF32, {2, 2}, {1.5, -2, 3, 0.25})}}, {}};
  auto before = run(b.g, bind);

  fold_constants(b.g);
  eliminate_common_subexpressions(b.g);
  eliminate_dead_code(b.g);
  CHECK(ir::verify(b.g) == "");
  // x, the constant 0.5, x * 0.5, and the add of it to itself.
  CHECK(b.g.nodes.size() == 4);
  CHECK(b.g.nodes.back().op == Op::kAdd);
  CHECK(b.g.nodes.back().args[0] == b.g.nodes.back().args[1]);
  check_same_outputs(before, run(b.g, bind));
}

TEST_CASE("verify accepts a well-formed graph and names the node of each problem") {
  auto valid = [] {
    GraphBuilder b;
    Dim batch = b.dim("B", 2, 8);
    auto x = b.input("x", {DType::kF32, {batch, Dim::constant(4)}});
    auto w = b.param("w", type(DType::kF32, {4, 3}));
    auto h = b.op(Op::kMatMul, {x, w}, {DType::kF32, {batch, Dim::constant(3)}});
    auto s = b.op(Op::kSoftmax, {h}, {DType::kF32, {batch, Dim::constant(3)}}, axis_attrs(1));
    b.output("y", s);
    return b;
  };
  CHECK(ir::verify(valid().g) == "");

  auto expect_rejected = [](const ir::Graph& g, const std::string& fragment) {
    std::string problem = ir::verify(g);
    CAPTURE(problem);
    CHECK(problem.find(fragment) != std::string::npos);
  };
  SUBCASE("argument after its user") {
    GraphBuilder b = valid();
    b.g.nodes[2].args[1] = 3;
    expect_rejected(b.g, "%2 matmul");
  }
  SUBCASE("argument that does not exist") {
    GraphBuilder b = valid();
    b.g.nodes[3].args[0] = 42;
    expect_rejected(b.g, "%3 softmax: argument %42");
  }
  SUBCASE("wrong result shape") {
    GraphBuilder b = valid();
    b.g.nodes[2].type.shape[1] = Dim::constant(4);
    expect_rejected(b.g, "%2 matmul");
  }
  SUBCASE("matmul inner dims differ") {
    GraphBuilder b = valid();
    b.g.nodes[1].type = type(DType::kF32, {3, 3});
    expect_rejected(b.g, "%2 matmul: matmul inner dims differ");
  }
  SUBCASE("binary shapes that do not broadcast") {
    GraphBuilder b;
    auto x = b.input("x", type(DType::kF32, {3}));
    auto y = b.input("y", type(DType::kF32, {4}));
    b.op(Op::kAdd, {x, y}, type(DType::kF32, {4}));
    expect_rejected(b.g, "%2 add");
  }
  SUBCASE("wrong arity") {
    GraphBuilder b = valid();
    b.g.nodes[3].args.push_back(0);
    expect_rejected(b.g, "%3 softmax");
  }
  SUBCASE("axis outside the rank") {
    GraphBuilder b = valid();
    b.g.nodes[3].attrs.axis = 2;
    expect_rejected(b.g, "%3 softmax: axis 2");
  }
  SUBCASE("a negative axis: a node holds it normalized") {
    GraphBuilder b = valid();
    b.g.nodes[3].attrs.axis = -1;
    expect_rejected(b.g, "%3 softmax: attributes {axis=-1} should be {axis=1}");
  }
  SUBCASE("a negative permutation entry") {
    GraphBuilder b;
    auto x = b.input("x", type(DType::kF32, {3, 4}));
    b.op(Op::kTranspose, {x}, type(DType::kF32, {4, 3}), ints_attrs({-1, 0}));
    expect_rejected(b.g, "%1 transpose: attributes {perm=[-1, 0]} should be {perm=[1, 0]}");
  }
  SUBCASE("duplicate leaf names") {
    GraphBuilder b = valid();
    b.g.nodes[1].name = b.g.nodes[0].name;
    expect_rejected(b.g, "%1 param");
  }
  SUBCASE("output that refers nowhere") {
    GraphBuilder b = valid();
    b.g.outputs[0].value = 9;
    expect_rejected(b.g, "output \"y\"");
  }
  SUBCASE("slice of a run-time dim beyond its lower bound") {
    GraphBuilder b = valid();
    b.op(Op::kSlice, {0}, type(DType::kF32, {3, 4}), ints_attrs({0, 3, 0, -1}));
    expect_rejected(b.g, "%4 slice");
  }
  SUBCASE("reshape that changes the element count") {
    GraphBuilder b = valid();
    b.op(Op::kReshape, {1}, type(DType::kF32, {13}));
    expect_rejected(b.g, "%4 reshape");
  }
  SUBCASE("axes of a reduction out of order") {
    GraphBuilder b = valid();
    b.op(Op::kSum, {2}, {DType::kF32, {}}, axes_attrs({1, 0}));
    expect_rejected(b.g, "%4 sum: attributes {axes=[1, 0]} should be {axes=[0, 1]}");
  }
  SUBCASE("topk whose k differs from its result") {
    GraphBuilder b = valid();
    ir::Attrs k = ints_attrs({2});
    k.axis = 1;
    b.op(Op::kTopKIndices, {2}, type(DType::kI32, {4, 3}), k);  // h is [B, 3]: k = 2 gives [B, 2]
    expect_rejected(b.g, "%4 topk_indices: result type");
  }
  SUBCASE("arange whose count differs from its start, stop and step") {
    GraphBuilder b = valid();
    b.op(Op::kArange, {}, type(DType::kI32, {4}), ints_attrs({2, 11, 3}));
    expect_rejected(b.g, "%4 arange: result type i32[4] should be i32[3]");
  }
  SUBCASE("gather along an axis whose result keeps the table's shape there") {
    GraphBuilder b;
    auto t = b.input("t", type(DType::kF32, {3, 4}));
    auto ids = b.input("ids", type(DType::kI32, {2}));
    b.op(Op::kGather, {t, ids}, type(DType::kF32, {2, 4}), axis_attrs(1));  // along axis 1: [3, 2]
    expect_rejected(b.g, "%2 gather: result type f32[2, 4] should be f32[3, 2]");
  }
  SUBCASE("take_along_axis with an index that is not 1 or x's dim off the axis") {
    GraphBuilder b;
    auto x = b.input("x", type(DType::kF32, {3, 4}));
    auto index = b.input("index", type(DType::kI32, {2, 2}));
    b.op(Op::kTakeAlongAxis, {x, index}, type(DType::kF32, {3, 2}), axis_attrs(1));
    expect_rejected(b.g, "%2 take_along_axis: dim 0 of the index");
  }
  SUBCASE("one_hot without its class count") {
    GraphBuilder b = valid();
    b.op(Op::kOneHot, {b.input("ids", type(DType::kI32, {2}))}, type(DType::kF32, {2, 5}));
    expect_rejected(b.g, "%5 one_hot");
  }
  SUBCASE("constant that is not rank 0") {
    GraphBuilder b = valid();
    b.leaf(Op::kConstant, "", type(DType::kF32, {2}), 1.0);
    expect_rejected(b.g, "%4 const");
  }
}
