// CUDA generation and NVRTC compilation, on the CPU (NVRTC needs no GPU):
// programs covering every op in every dtype ir::verify accepts are planned,
// generated and compiled to an sm_90 CUBIN plus PTX; the on-disk cache, the
// error path and determinism are checked. Whether the kernels compute the
// right values is the GPU tests' job (tests/gpu), against the interpreter.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <string>
#include <vector>

#include "artifact.h"
#include "plan/chains.h"
#include "codegen/codegen.h"
#include "codegen/cuda_text.h"
#include "codegen/kernel_sharing.h"
#include "plan/kernel_choice.h"
#include "ir_builder.h"
#include "pipeline.h"
#include "plan.h"
#include "frontend/source_loader.h"
#include "gdl/testing.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"
#include "plan/check.h"
#include "plan/print.h"
#include "cpu_program.h"
#include "kernel_text.h"
#include "scoped_env.h"
#include "stand_in_module.h"

namespace gdl {
namespace {

// Step s's own kernel (its last choice), and its large kernel (the single-
// step choice before it, for more rows), if it has one.
const Kernel& own_kernel(const GeneratedCode& code, size_t s) {
  return code.kernels.kernels.at(static_cast<size_t>(code.kernels.step_choices.at(s).back()));
}
const Kernel* large_kernel(const GeneratedCode& code, size_t s) {
  const std::vector<int>& choices = code.kernels.step_choices.at(s);
  if (choices.size() < 2) return nullptr;
  const Kernel& k = code.kernels.kernels.at(static_cast<size_t>(choices[choices.size() - 2]));
  return k.first_step == k.last_step ? &k : nullptr;
}

// The first choice of step s when it is a library matmul kernel (cuBLASLt's product), else null.
const Kernel* library_kernel(const KernelTable& t, size_t s) {
  const Kernel& k = t.kernels.at(static_cast<size_t>(t.step_choices.at(s).front()));
  return k.library.active ? &k : nullptr;
}
// The scratch bytes of cuBLASLt's product and workspace for step s (0: none).
uint64_t library_scratch(const plan::Plan& p, size_t s) {
  return choose_library_matmul(p.graph, p.steps[s].values).scratch_bytes();
}

using ir::Op;
using ir::ValueId;
using testing::GraphBuilder;

constexpr DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kBool};

Shape dims(std::initializer_list<Dim> d) { return Shape(d); }
Dim c(int64_t n) { return Dim::constant(n); }

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("gdl_codegen_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

plan::Plan plan_of(const ir::Graph& g) {
  std::string problem = ir::verify(g);
  INFO(ir::print_ir(g));
  REQUIRE(problem == "");
  return plan_program(g);
}

// A kernel symbol is `head` (step, main op, variant), then "__" and the
// step's other ops, if any.
bool named(const std::string& symbol, const std::string& head) {
  return symbol == head || symbol.rfind(head + "__", 0) == 0;
}

bool contains(const std::vector<uint8_t>& bytes, const std::string& s) {
  return std::search(bytes.begin(), bytes.end(), s.begin(), s.end()) != bytes.end();
}

CompileOptions options_in(const std::string& cache_dir) {
  CompileOptions o;
  o.arch = "sm_90";
  o.cache_dir = cache_dir;
  return o;
}

// Compiles `code`'s units without the cache and checks that each unit's
// CUBIN and PTX define the kernels it names, and that every kernel of the
// table (and the input copy) is in one unit.
void require_compiles(const GeneratedCode& code) {
  auto module = compile_units(code.prelude, code.units, options_in("-"));
  INFO(code.source);
  INFO(module.status().message());
  REQUIRE(module.ok());
  CHECK(!module->from_cache);
  CHECK(module->arch == "sm_90");
  CHECK(module->nvrtc_major >= 12);
  REQUIRE(module->units.size() == code.units.size());
  std::map<std::string, int> unit_of;
  for (size_t u = 0; u < module->units.size(); ++u) {
    const ModuleUnit& unit = module->units[u];
    CHECK(unit.symbols == code.units[u].symbols);
    REQUIRE(unit.cubin.size() > 4);
    CHECK(std::string(unit.cubin.begin(), unit.cubin.begin() + 4) == "\x7f" "ELF");
    for (const std::string& symbol : unit.symbols) {
      INFO(symbol);
      CHECK(contains(unit.cubin, symbol));
      CHECK(unit.ptx.find(".entry " + symbol + "(") != std::string::npos);
      unit_of[symbol] += 1;
    }
  }
  for (const Kernel& k : code.kernels.kernels) {
    INFO(k.symbol);
    CHECK(code.source.find(" " + k.symbol + "(unsigned char* arena") != std::string::npos);
    CHECK(unit_of[k.symbol] == 1);
  }
  // Every module holds the runtime's input copy kernel (codegen/codegen.h).
  CHECK(unit_of[kInputCopySymbol] == 1);
}

// Every elementwise op in each dtype it accepts, with broadcasting against a
// run-time dim, constants and run-time scalars (f32 and i32).
ir::Graph elementwise_program() {
  GraphBuilder b;
  b.g.program_name = "elementwise";
  Dim B = b.dim("B", 1, 64);
  ValueId alpha = b.scalar("alpha", DType::kF32, 0.5);
  ValueId step = b.scalar("step", DType::kI32, 3);
  int out = 0;
  auto output = [&](ValueId v) { b.output("o" + std::to_string(out++), v); };
  auto compare_where_cast = [&](DType t, ValueId x, ValueId y) {
    for (Op o : {Op::kLt, Op::kLe, Op::kGt, Op::kGe, Op::kEq, Op::kNe}) output(b.binary(o, x, y));
    ValueId cond = b.binary(Op::kLt, x, y);
    output(b.op(Op::kWhere, {cond, x, y}, {t, dims({B, c(8)})}));
    for (DType to : kAllTypes)
      if (to != t) output(b.cast(x, to));
  };
  for (DType t : kFloats) {
    std::string n = dtype_name(t);
    ValueId x = b.input("x_" + n, {t, dims({B, c(8)})});
    ValueId y = b.param("y_" + n, {t, dims({c(8)})});
    for (Op u : {Op::kNeg, Op::kExp, Op::kLog, Op::kSqrt, Op::kRsqrt, Op::kTanh, Op::kSigmoid, Op::kRelu, Op::kGelu,
                 Op::kSilu, Op::kAbs, Op::kCos, Op::kSin, Op::kErf, Op::kFloor, Op::kCeil, Op::kRound, Op::kSign})
      output(b.unary(u, x));
    for (Op o : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kMin, Op::kMax, Op::kPow}) output(b.binary(o, x, y));
    output(b.binary(Op::kMul, x, b.constant(-0.25, t)));
    output(b.op(Op::kClamp, {x, b.constant(-0.5, t), y}, {t, dims({B, c(8)})}));
    compare_where_cast(t, x, y);
  }
  ValueId xf = b.g.leaves(Op::kInput).front();  // x_f32
  output(b.binary(Op::kMul, xf, alpha));

  ValueId xi = b.input("x_i32", {DType::kI32, dims({B, c(8)})});
  ValueId yi = b.param("y_i32", {DType::kI32, dims({c(8)})});
  for (Op u : {Op::kNeg, Op::kAbs, Op::kRelu, Op::kSign}) output(b.unary(u, xi));
  for (Op o : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kMin, Op::kMax, Op::kPow, Op::kFloorDiv, Op::kMod,
               Op::kBitAnd, Op::kBitOr, Op::kBitXor, Op::kShl, Op::kShr})
    output(b.binary(o, xi, yi));
  output(b.binary(Op::kShl, xi, b.constant(33, DType::kI32)));
  output(b.op(Op::kClamp, {xi, b.constant(-3, DType::kI32), yi}, {DType::kI32, dims({B, c(8)})}));
  output(b.binary(Op::kAdd, xi, step));
  output(b.binary(Op::kSub, xi, b.constant(-2147483648.0, DType::kI32)));
  compare_where_cast(DType::kI32, xi, yi);

  ValueId mask = b.input("mask", {DType::kBool, dims({B, c(8)})});
  ValueId keep = b.param("keep", {DType::kBool, dims({c(8)})});
  output(b.unary(Op::kNot, mask));
  output(b.binary(Op::kAnd, mask, keep));
  output(b.binary(Op::kOr, mask, b.constant(1, DType::kBool)));
  compare_where_cast(DType::kBool, mask, keep);
  // A rank-0 result from a rank-0 input.
  ValueId r0 = b.input("r0", {DType::kF32, {}});
  output(b.unary(Op::kExp, r0));
  return std::move(b.g);
}

// Matmul, reductions, softmax, norms, data movement and attention.
ir::Graph structured_program() {
  GraphBuilder b;
  b.g.program_name = "structured";
  Dim B = b.dim("B", 1, 64);
  Dim S = b.dim("S", 1, 8);
  b.scalar("gain", DType::kF32, 2.0);  // scalar slot 0, so that the attention length below reads slot 1
  ValueId len_scalar = b.scalar("len", DType::kI32, 5);
  int out = 0;
  auto output = [&](ValueId v) { b.output("o" + std::to_string(out++), v); };
  output(b.op(Op::kArange, {}, {DType::kI32, dims({B})}, testing::ints_attrs({0, 0, 1})));
  output(b.op(Op::kArange, {}, {DType::kI32, dims({c(7)})}, testing::ints_attrs({-2147483648, 2147483647, 613566757})));
  for (DType t : kAllTypes) {
    std::string n = dtype_name(t);
    ValueId x = b.input("x_" + n, {t, dims({B, c(32), c(48)})});
    ValueId w = b.param("w_" + n, {t, dims({c(48), c(40)})});
    ValueId s = b.input("s_" + n, {t, dims({S, c(48)})});
    ValueId p = b.param("p_" + n, {t, dims({c(2), c(3), c(5), c(7)})});
    ValueId q = b.param("q_" + n, {t, dims({c(3), c(7), c(6)})});
    ValueId tall = b.input("tall_" + n, {t, dims({B, c(80), c(48)})});
    if (is_float(t)) {  // the op table's type rules: matmul takes floats, mean floats, sum and max numbers
      output(b.op(Op::kMatMul, {tall, w}, {t, dims({B, c(80), c(40)})}));      // large tiles, batch broadcast
      output(b.op(Op::kMatMul, {x, w}, {t, dims({B, c(32), c(40)})}));         // small-M tiles
      output(b.op(Op::kMatMul, {s, w}, {t, dims({S, c(40)})}));                // small-M tiles, run-time M
      output(b.op(Op::kMatMul, {p, q}, {t, dims({c(2), c(3), c(5), c(6)})}));  // constant batch broadcast
    }
    for (Op r : {Op::kSum, Op::kMean, Op::kReduceMax, Op::kReduceMin}) {
      if (t == DType::kBool || (r == Op::kMean && !is_float(t))) continue;
      output(b.op(r, {x}, {t, dims({B, c(32)})}, testing::axis_attrs(2)));                    // rows
      output(b.op(r, {x}, {t, dims({B, c(1), c(48)})}, testing::axis_attrs(1, true)));        // columns
      output(b.op(r, {x}, {t, dims({c(32), c(48)})}, testing::axis_attrs(0)));                // columns, run-time len
      output(b.op(r, {x}, {t, dims({B})}, testing::axes_attrs({1, 2})));                      // several axes: rows
      output(b.op(r, {x}, {t, dims({c(1), c(32), c(1)})}, testing::axes_attrs({0, 2}, true)));  // several axes: a thread each
    }
    if (t != DType::kBool) {  // selection and running sums, over the last axis and a run-time first one
      for (Op a : {Op::kArgMax, Op::kArgMin}) {
        output(b.op(a, {x}, {DType::kI32, dims({B, c(32)})}, testing::axis_attrs(2)));
        output(b.op(a, {x}, {DType::kI32, dims({c(32), c(48)})}, testing::axis_attrs(0)));
      }
      ir::Attrs k5 = testing::ints_attrs({5}), k1 = testing::ints_attrs({1});
      k5.axis = 2;
      output(b.op(Op::kTopKValues, {x}, {t, dims({B, c(32), c(5)})}, k5));
      output(b.op(Op::kTopKIndices, {x}, {DType::kI32, dims({B, c(32), c(5)})}, k5));
      output(b.op(Op::kTopKValues, {x}, {t, dims({c(1), c(32), c(48)})}, k1));
      output(b.op(Op::kCumSum, {x}, {t, dims({B, c(32), c(48)})}, testing::axis_attrs(2)));
      output(b.op(Op::kCumSum, {x}, {t, dims({B, c(32), c(48)})}, testing::axis_attrs(0)));
    }
    output(b.op(Op::kOneHot, {b.input("classes_" + n, {DType::kI32, dims({B, c(3)})})}, {t, dims({B, c(3), c(6)})},
                testing::ints_attrs({6})));
    output(b.op(Op::kTranspose, {x}, {t, dims({c(48), B, c(32)})}, testing::ints_attrs({2, 0, 1})));
    output(b.op(Op::kSlice, {x}, {t, dims({B, c(16), c(47)})}, testing::ints_attrs({0, -1, 4, 20, 1, -1})));
    output(b.op(Op::kConcat, {x, x, x}, {t, dims({B, c(32), c(144)})}, testing::axis_attrs(2)));
    output(b.op(Op::kReshape, {x}, {t, dims({B, c(1536)})}));  // an output over an input: a copy step
    ValueId table = b.param("table_" + n, {t, dims({c(10), c(16)})});
    ValueId ids = b.input("ids_" + n, {DType::kI32, dims({B, c(3)})});
    output(b.op(Op::kGather, {table, ids}, {t, dims({B, c(3), c(16)})}));
    output(b.op(Op::kGather, {table, b.constant(7, DType::kI32)}, {t, dims({c(16)})}));
    output(b.op(Op::kGather, {x, ids}, {t, dims({B, B, c(3), c(48)})}, testing::axis_attrs(1)));   // an inner axis
    output(b.op(Op::kGather, {x, ids}, {t, dims({B, c(32), B, c(3)})}, testing::axis_attrs(2)));   // the last axis
    ValueId along = b.input("along_" + n, {DType::kI32, dims({B, c(1), c(5)})});
    output(b.op(Op::kTakeAlongAxis, {x, along}, {t, dims({B, c(32), c(5)})}, testing::axis_attrs(2)));  // broadcast index
    if (!is_float(t)) continue;
    output(b.op(Op::kSoftmax, {x}, {t, dims({B, c(32), c(48)})}, testing::axis_attrs(2)));
    output(b.op(Op::kSoftmax, {x}, {t, dims({B, c(32), c(48)})}, testing::axis_attrs(1)));
    ValueId g = b.param("g_" + n, {t, dims({c(48)})});
    ValueId beta = b.param("beta_" + n, {t, dims({c(48)})});
    ir::Attrs eps = testing::value_attrs(1e-5);
    output(b.op(Op::kLayerNorm, {x, g, beta}, {t, dims({B, c(32), c(48)})}, eps));
    output(b.op(Op::kLayerNorm, {x}, {t, dims({B, c(32), c(48)})}, eps));
    output(b.op(Op::kRmsNorm, {x, g}, {t, dims({B, c(32), c(48)})}, eps));
    ValueId qh = b.input("q_heads_" + n, {t, dims({B, c(4), c(64)})});
    ValueId k = b.param("k_cache_" + n, {t, dims({B, c(4), c(128), c(64)})});
    ValueId v = b.param("v_cache_" + n, {t, dims({B, c(4), c(128), c(64)})});
    ValueId v32 = b.param("v32_cache_" + n, {t, dims({B, c(4), c(128), c(32)})});
    ValueId len = b.input("len_" + n, {DType::kI32, {}});
    ir::Attrs scale = testing::value_attrs(0.125);
    output(b.op(Op::kAttention, {qh, k, v, len}, {t, dims({B, c(4), c(64)})}, scale));
    output(b.op(Op::kAttention, {qh, k, v32, b.constant(100, DType::kI32)}, {t, dims({B, c(4), c(32)})}, scale));
    output(b.op(Op::kAttention, {qh, k, v, len_scalar}, {t, dims({B, c(4), c(64)})}, scale));
  }
  return std::move(b.g);
}

// A small program that make_plan fuses into one three-value step.
plan::Plan fused_plan() {
  GraphBuilder b;
  b.g.program_name = "fused";
  Dim B = b.dim("B", 1, 16);
  ValueId x = b.input("x", {DType::kF16, dims({B, c(8)})});
  ValueId y = b.param("y", {DType::kF16, dims({c(8)})});
  ValueId prod = b.binary(Op::kMul, x, y);
  ValueId e = b.unary(Op::kExp, prod);
  ValueId sum = b.binary(Op::kAdd, e, x);
  b.output("z", sum);
  plan::Plan p = plan_of(b.g);
  REQUIRE(p.steps.size() == 1);
  CHECK(p.steps[0].values == std::vector<ValueId>{prod, e, sum});
  CHECK(p.steps[0].result == sum);
  CHECK(p.steps[0].reads == std::vector<ValueId>{x, y});
  return p;
}

TEST_CASE("codegen: every elementwise op in every dtype compiles to an sm_90 CUBIN") {
  plan::Plan p = plan_of(elementwise_program());
  GeneratedCode code = generate_cuda(p);
  REQUIRE(code.kernels.step_choices.size() == p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Kernel& k = own_kernel(code, s);
    const ir::Node& n = p.graph.node(p.steps[s].result);
    INFO(k.symbol);
    CHECK(named(k.symbol, "gdl_s" + std::to_string(s) + "_" + ir::op_name(n.op)));
    for (ir::ValueId v : p.steps[s].values)  // a fused op is named after "__"
      if (v != p.steps[s].result) CHECK(k.symbol.find(ir::op_name(p.graph.node(v).op)) != std::string::npos);
    // Elementwise: a grid-stride loop over the result.
    CHECK(k.launch.work == n.type.shape);
    CHECK(k.launch.block == 256);
    CHECK(k.launch.items_per_block == 1024);
    CHECK(k.depends_on_dims == (n.type.rank() > 0));
  }
  // The kernel reading alpha (scalar slot 0) says so; the one reading `step` too.
  int alpha_users = 0, step_users = 0;
  for (const Kernel& k : code.kernels.kernels) {
    alpha_users += k.scalars_used == std::vector<int>{0};
    step_users += k.scalars_used == std::vector<int>{1};
  }
  CHECK(alpha_users == 1);
  CHECK(step_users == 1);
  CHECK(code.source.find("gdl::scalar_f32(args.scalars[0])") != std::string::npos);
  CHECK(code.source.find("gdl::scalar_i32(args.scalars[1])") != std::string::npos);
  CHECK(code.source.find("= args.dims[0];") != std::string::npos);
  require_compiles(code);
}

TEST_CASE("codegen: matmul reductions softmax norms data movement and attention compile") {
  plan::Plan p = plan_of(structured_program());
  GeneratedCode code = generate_cuda(p);
  REQUIRE(code.kernels.step_choices.size() == p.steps.size());
  int matmuls = 0, attentions = 0;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const ir::Node& n = p.graph.node(p.steps[s].result);
    const LaunchRule& r = own_kernel(code, s).launch;
    INFO(own_kernel(code, s).symbol);
    const bool general = !is_float(n.type.dtype);  // i32 and bool take the general matmul
    if (n.op == Op::kMatMul && n.type.rank() == 3 && general) {
      // [B, 80, 40]: 2 x 1 tiles of 64 x 64 per batch entry; [B, 32, 40]:
      // 2 x 2 tiles of 16 x 32. Batch entries over grid.x, tiles over grid.y.
      CHECK(r.work == dims({Dim::runtime(0)}));
      CHECK(r.items_per_block == 1);
      CHECK(r.grid_y == (n.type.shape[1].extent == 80 ? 2 : 4));
      CHECK(r.block == 256);
      CHECK(own_kernel(code, s).depends_on_dims);
      CHECK(code.source.find(n.type.shape[1].extent == 80 ? "gdl::matmul<64, 64, 16, 4, 4, int>"
                                                            : "gdl::matmul<16, 32, 64, 1, 2, int>") != std::string::npos);
      ++matmuls;
    }
    if (n.op == Op::kMatMul && n.type.rank() == 3 && !general) {
      // The same against a shared w: the batch folds into the rows (at
      // least 32): the tiled kernel, a block per band of tile rows over
      // grid.x (tensor cores: 32 rows while the rows are 32, the step's
      // first kernel; FMA: 64), one 128-column tile, K = 48 not split.
      CHECK(r.work == dims({Dim::runtime(0), n.type.shape[1]}));
      CHECK(r.items_per_block == (n.type.dtype != DType::kF32 && n.type.shape[1].extent == 32 ? 32 : 64));
      CHECK(r.grid_y == 1);
      CHECK(r.block == 256);
      CHECK(p.steps[s].scratch_bytes == library_scratch(p, s));  // cuBLASLt's above the rows kernel's rows
      ++matmuls;
    }
    if (n.op == Op::kMatMul && n.type.rank() == 2) {
      if (general) {
        // [S, 40]: run-time M over grid.x in 16-row tiles, two 32-column tiles over grid.y.
        CHECK(r.work == dims({Dim::runtime(1)}));
        CHECK(r.items_per_block == 16);
        CHECK(r.grid_y == 2);
      } else {
        // [S, 40] with S <= 8: the rows kernel, one block per 128-byte strip of w.
        CHECK(r.work.empty());
        CHECK(r.grid_y == (n.type.dtype == DType::kF32 ? 2 : 1));
      }
      ++matmuls;
    }
    if (n.op == Op::kMatMul && n.type.rank() == 4) {
      // [2, 3, 5, 6]: every factor constant, so all blocks go into grid.y.
      CHECK(r.work.empty());
      CHECK(r.grid_y == 6);
      CHECK(!own_kernel(code, s).depends_on_dims);
      ++matmuls;
    }
    if (n.op == Op::kSum && n.attrs.axis == 2) {
      CHECK(r.work == dims({Dim::runtime(0), c(32)}));  // one block per row
      CHECK(r.items_per_block == 1);
      CHECK(r.block == 32);  // rows of 64: at least 8 elements a thread
    }
    if (n.op == Op::kAttention) {
      // Two blocks per (batch, head), each over half of the 128 positions.
      CHECK(r.work == dims({Dim::runtime(0), c(4)}));
      CHECK(r.grid_y == 2);
      CHECK(r.block == 256);
      CHECK(p.steps[s].scratch_bytes > 0);
      ++attentions;
    }
  }
  CHECK(matmuls == 12);  // four per float dtype
  CHECK(attentions == 9);
  // The attention with the i32 scalar length reads slot 1 and nothing else.
  CHECK(code.source.find("gdl::IntValue{s1}") != std::string::npos);
  CHECK(code.source.find("gdl::IntValue{100}") != std::string::npos);
  CHECK(code.source.find("gdl::IntAt{v") != std::string::npos);
  require_compiles(code);
}

// Shapes that select each fast matmul kernel and the split attention.
struct KernelProgram {
  ir::Graph g;
  std::map<std::string, ValueId> value;  // by output name
};
KernelProgram kernel_program(DType t) {
  GraphBuilder b;
  b.g.program_name = std::string("kernels_") + dtype_name(t);
  Dim B = b.dim("B", 1, 8), C = b.dim("C", 1, 64);
  KernelProgram k;
  auto output = [&](const std::string& name, ValueId v) {
    b.output(name, v);
    k.value[name] = v;
  };
  ValueId w = b.param("w", {t, dims({c(4096), c(4096)})});
  ValueId x = b.input("x", {t, dims({B, c(4096)})});
  ValueId y = b.input("y", {t, dims({C, c(4096)})});
  output("rows", b.op(Op::kMatMul, {x, w}, {t, dims({B, c(4096)})}));    // at most 8 rows: rows kernel, K split
  output("hybrid", b.op(Op::kMatMul, {y, w}, {t, dims({C, c(4096)})}));  // 1..64 rows: chosen at run time
  ValueId a = b.input("a", {t, dims({c(256), c(512)})});
  ValueId v = b.param("v", {t, dims({c(512), c(256)})});
  output("tiles", b.op(Op::kMatMul, {a, v}, {t, dims({c(256), c(256)})}));  // 8 tiles, K split 8 (mma) or 16 (simt)
  ValueId u = b.input("u", {t, dims({c(4), c(8), c(64)})});
  ValueId uw = b.param("uw", {t, dims({c(4), c(64), c(32)})});
  output("batched", b.op(Op::kMatMul, {u, uw}, {t, dims({c(4), c(8), c(32)})}));  // b batched: tiles per batch entry
  ValueId r = b.input("r", {t, dims({c(3), c(17), c(33)})});
  ValueId rw = b.param("rw", {t, dims({c(33), c(9)})});
  output("ragged", b.op(Op::kMatMul, {r, rw}, {t, dims({c(3), c(17), c(9)})}));  // 51 folded rows, odd K and N
  ValueId q = b.input("q", {t, dims({c(32), c(128)})});
  ValueId kc = b.param("k", {t, dims({c(32), c(4096), c(128)})});
  ValueId vc = b.param("vc", {t, dims({c(32), c(4096), c(128)})});
  ValueId len = b.input("len", {DType::kI32, {}});
  output("decode", b.op(Op::kAttention, {q, kc, vc, len}, {t, dims({c(32), c(128)})}, testing::value_attrs(0.088)));
  ValueId q2 = b.input("q2", {t, dims({c(2), c(3), c(40)})});
  ValueId k2 = b.param("k2", {t, dims({c(2), c(3), c(100), c(40)})});
  ValueId v2 = b.param("v2", {t, dims({c(2), c(3), c(100), c(24)})});
  output("odd", b.op(Op::kAttention, {q2, k2, v2, len}, {t, dims({c(2), c(3), c(24)})}, testing::value_attrs(0.2)));
  k.g = std::move(b.g);
  return k;
}

size_t step_writing(const plan::Plan& p, ValueId v) {
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].result == v) return s;
  FAIL("no step writes %" << v);
  return 0;
}

TEST_CASE("codegen: K and position splits follow the target GPU's multiprocessor count") {
  GraphBuilder b;
  b.g.program_name = "target";
  ValueId w = b.param("w", {DType::kF16, dims({Dim::constant(4096), Dim::constant(4096)})});
  ValueId x = b.input("x", {DType::kF16, dims({Dim::constant(1), Dim::constant(4096)})});
  ValueId y = b.op(Op::kMatMul, {x, w}, {DType::kF16, dims({Dim::constant(1), Dim::constant(4096)})});
  b.output("y", y);
  plan::Plan p = plan_of(b.g);
  std::map<int64_t, int> splits;
  for (int64_t sms : {16, 66, 132}) {
    p.graph.target.multiprocessors = sms;
    splits[sms] = choose_matmul(p.graph, p.graph.node(y)).rows_splits;
  }
  // 64 strips of 64 columns: a GPU of 16 multiprocessors is full without a
  // split; more multiprocessors want more blocks, so more K splits.
  CHECK(splits[16] == 1);
  CHECK(splits[66] > splits[16]);
  CHECK(splits[132] > splits[66]);
}

// The tensor-core kernel's tile holds the fewest of 16, 32 or 64 rows that
// take a batch entry's rows, and as many stage buffers as two blocks' share
// of the multiprocessor's shared memory holds (kernel_choice.cc); each
// instantiation compiles, plain and with a transposed b.
TEST_CASE("codegen: tensor-core tiles of 16, 32 or 64 rows by the rows, stages by the shared memory") {
  for (bool transposed : {false, true}) {
    INFO((transposed ? "b transposed" : "b as stored"));
    GraphBuilder b;
    b.g.program_name = "mma_tiles";
    // b [96, 130], or stored [130, 96] and read transposed (ops/matmul.h: [transpose_a, transpose_b, window])
    const ir::Attrs layout = transposed ? testing::ints_attrs({0, 1, 0, 0}) : ir::Attrs{};
    std::map<int64_t, ValueId> by_rows;
    for (int64_t rows : {20, 40, 200}) {  // folded rows above the rows kernel's 16
      ValueId x = b.input("x" + std::to_string(rows), {DType::kBF16, dims({c(rows), c(96)})});
      ValueId w = b.param("w" + std::to_string(rows), {DType::kBF16, dims({c(transposed ? 130 : 96), c(transposed ? 96 : 130)})});
      by_rows[rows] = b.op(Op::kMatMul, {x, w}, {DType::kBF16, dims({c(rows), c(130)})}, layout);
      b.output("y" + std::to_string(rows), by_rows[rows]);
    }
    // b batched: 9 rows per batch entry, no folding, tensor cores all the same
    ValueId u = b.input("u", {DType::kBF16, dims({c(3), c(9), c(72)})});
    ValueId uw = b.param("uw", {DType::kBF16, dims({c(3), c(72), c(40)})});
    by_rows[9] = b.op(Op::kMatMul, {u, uw}, {DType::kBF16, dims({c(3), c(9), c(40)})});
    b.output("batched", by_rows[9]);
    plan::Plan p = plan_of(b.g);
    REQUIRE(plan::check_plan(p) == "");
    const std::map<int64_t, int> tile_m = {{9, 16}, {20, 32}, {40, 64}, {200, 64}};
    for (const auto& entry : by_rows) {
      const int64_t rows = entry.first;
      const ValueId value = entry.second;
      INFO("rows " << rows);
      const MatmulChoice choice = choose_matmul(p.graph, p.graph.node(value));
      CHECK_FALSE(choice.use_rows);
      CHECK(choice.tiles == MatmulKernel::kMma);
      CHECK(choice.tile_m == tile_m.at(rows));
      CHECK(choice.mma_stages == kMaxMmaStages);  // 227 KiB a multiprocessor: room for the most
      const GeneratedCode code = generate_cuda(p);  // owns the kernel table the reference reads
      const Kernel& k = own_kernel(code, step_writing(p, value));
      CHECK(k.launch.shared_bytes == choice.mma_shared_bytes);
      CHECK(k.launch.shared_bytes > 48 * 1024);  // dynamic, past the static limit
    }
    require_compiles(generate_cuda(p));
    // A multiprocessor of 100 KiB: two blocks' share holds fewer stages.
    p.graph.target.shared_bytes_per_sm = 100 * 1024;
    const MatmulChoice small = choose_matmul(p.graph, p.graph.node(by_rows[20]));
    CHECK(small.mma_stages == (transposed ? 3 : 4));
    CHECK(small.mma_shared_bytes <= 45 * 1024);
  }
}

// A matmul whose rows run from 1 to 4096 against a narrow b (few tiles, so
// every doubling of the rows still halves the K splits) gets at most
// kMaxTileBands tiled kernels; the last serves every run above it.
TEST_CASE("codegen: at most kMaxTileBands tiled kernels per matmul, the last open-ended") {
  GraphBuilder b;
  b.g.program_name = "bands";
  const Dim M = b.dim("M", 1, 4096);
  ValueId w = b.param("w", {DType::kF16, dims({c(14336), c(2048)})});
  ValueId x = b.input("x", {DType::kF16, dims({M, c(14336)})});
  ValueId y = b.op(Op::kMatMul, {x, w}, {DType::kF16, dims({M, c(2048)})});
  b.output("y", y);
  plan::Plan p = plan_of(b.g);
  const std::vector<RowsBand> bands = matmul_tile_bands(p.graph, p.graph.node(y));
  REQUIRE(bands.size() == static_cast<size_t>(kMaxTileBands));
  CHECK(bands.front().lo == 2);  // the rows kernel takes one row
  for (size_t i = 1; i < bands.size(); ++i) CHECK(bands[i].lo == bands[i - 1].hi + 1);
  CHECK(bands.back().hi == RowsBand{}.hi);
  // The tiled kernels, the rows kernel and cuBLASLt's in front.
  CHECK(generate_cuda(p).kernels.step_choices.at(0).size() == static_cast<size_t>(kMaxTileBands) + 2);
}


TEST_CASE("codegen: above the rows kernel's rows a matmul step's first choice is cuBLASLt's product and a kernel for its epilogue") {
  const std::string text =
      "program lib;\ndim M in [1, 300] buckets(8, 64, 300);\n"
      "input x : {T}[M, 1000];\nparam w : {T}[1000, 640];\nparam wt : {T}[640, 1000];\nparam bias : {T}[640];\n"
      "param wide : {T}[1000, 1024];\ninput h : {T}[M, 1000];\n"
      "output y : {T}[M, 640];\noutput z : {T}[M, 640];\noutput u : {T}[M, 256];\noutput n : {T}[M, 640];\n"
      "y = gelu(x @ w + bias);\nz = x @ transpose(wt);\nu = (x @ wide)[:, 384:640];\n"
      "n = rmsnorm(h) @ w;\n";
  for (const char* t : {"f16", "bf16", "f32"}) {
    std::string program_text = text;
    for (size_t at = program_text.find("{T}"); at != std::string::npos; at = program_text.find("{T}", at))
      program_text.replace(at, 3, t);
    INFO(t);
    plan::Plan p = plan_of(testing::graph_of(program_text));
    REQUIRE(plan::check_plan(p) == "");
    GeneratedCode code = generate_cuda(p);
    const auto step_of = [&](const std::string& output) {
      for (size_t o = 0; o < p.graph.outputs.size(); ++o)
        if (p.graph.outputs[o].name == output) return step_writing(p, p.graph.outputs[o].value);
      FAIL("no output " << output);
      return size_t{0};
    };
    const uint64_t workspace = kLibraryMatmulWorkspaceBytes;
    const struct {
      const char* output;
      bool transpose_b;
      int64_t n, ldb;
      uint64_t b_offset;
    } cases[] = {{"y", false, 640, 640, 0}, {"z", true, 640, 1000, 0}, {"u", false, 256, 1024, 384}};
    for (const auto& want : cases) {
      INFO(want.output);
      const size_t s = step_of(want.output);
      const Kernel* k = library_kernel(code.kernels, s);
      REQUIRE(k != nullptr);
      const LibraryMatmul& l = k->library;
      CHECK(k->min_rows == (t == "f32" ? kMatmulRowsLimit : kMatmulRowsLimitTensorCores) + 1);
      CHECK(k->max_rows == kAnyRows);
      CHECK(k->symbol.find("_library") != std::string::npos);
      CHECK(l.dtype == *parse_dtype(t));
      CHECK(l.transpose_b == want.transpose_b);
      CHECK_FALSE(l.transpose_a);
      CHECK(l.n == want.n);
      CHECK(l.k == 1000);
      CHECK(l.lda == 1000);
      CHECK(l.ldb == want.ldb);
      CHECK(l.b_element_offset == want.b_offset);
      // The product and the workspace: in the step's scratch, which the kernel reads the product from.
      const plan::Step& step = p.steps[s];
      CHECK(l.product_offset == step.scratch_offset);
      CHECK(l.workspace_offset ==
            step.scratch_offset + (300 * static_cast<uint64_t>(want.n) * dtype_size(l.dtype) + 255) / 256 * 256);
      CHECK(l.workspace_bytes == workspace);
      CHECK(l.workspace_offset + workspace <= step.scratch_offset + step.scratch_bytes);
      const std::string element = std::string(t) == "f32" ? "float" : std::string(t) == "f16" ? "__half" : "__nv_bfloat16";
      CHECK(testing::addresses(code.source, *library_kernel(code.kernels, s),
                               "reinterpret_cast<const " + element + "*>(arena + ", l.product_offset));
      // The generated kernels still follow for the rows kernel's rows (f32: 16, f16/bf16: 1).
      CHECK(code.kernels.step_choices.at(s).size() >= 2);
      CHECK(own_kernel(code, s).depends_on_dims);
    }
    // A norm fused in front of its matmul (f16, bf16; f32 keeps it apart):
    // a kernel of its own, no choice of any step, writes the normalized rows
    // after the workspace, and the call reads them as its a.
    const size_t sn = step_of("n");
    const bool fused = matmul_prologue(p.graph, p.steps[sn].values) != ir::kNoValue;
    CHECK(fused == (std::string(t) != "f32"));
    const Kernel* kn = library_kernel(code.kernels, sn);
    REQUIRE(kn != nullptr);
    const LibraryMatmul& ln = kn->library;
    CHECK((ln.prologue_kernel >= 0) == fused);
    if (fused) {
      const Kernel& norm = code.kernels.kernels.at(static_cast<size_t>(ln.prologue_kernel));
      CHECK(named(norm.symbol, "gdl_s" + std::to_string(sn) + "_matmul_library_norm"));
      CHECK(norm.first_step == static_cast<int>(sn));
      for (const std::vector<int>& choices : code.kernels.step_choices)
        CHECK(std::find(choices.begin(), choices.end(), ln.prologue_kernel) == choices.end());
      CHECK(ln.normalized_offset == ln.workspace_offset + ln.workspace_bytes);
      CHECK(ln.normalized_offset + 300 * 1000 * dtype_size(ln.dtype) <= p.steps[sn].scratch_offset + p.steps[sn].scratch_bytes);
      CHECK(code.source.find("gdl::matmul_library_norm_rows<") != std::string::npos);
    }
    // The artifact carries the call and its reader checks it.
    Artifact a;
    a.plan = p;
    a.kernels = code.kernels;
    a.module = stand_in_module(a.kernels);
    CHECK(verify_artifact(a) == "");
    Expected<Artifact> back = deserialize_artifact(serialize_artifact(a));
    REQUIRE(back.ok());
    const size_t sy = step_of("y");
    const LibraryMatmul& l = library_kernel(back->kernels, sy) ? library_kernel(back->kernels, sy)->library : LibraryMatmul{};
    CHECK(l.active);
    CHECK(l.workspace_bytes == workspace);
    Artifact bad = a;
    const int first = bad.kernels.step_choices.at(sy).front();
    bad.kernels.kernels[static_cast<size_t>(first)].library.ldb = 100;  // shorter than a row of b
    CHECK(verify_artifact(bad).find("impossible sizes") != std::string::npos);
    bad = a;
    bad.kernels.kernels[static_cast<size_t>(first)].library.workspace_offset = p.arena_bytes + p.scratch_bytes;
    CHECK(verify_artifact(bad).find("outside the scratch area") != std::string::npos);
    bad = a;
    bad.kernels.kernels[static_cast<size_t>(first)].library.b_element_offset = 1024 * 1000;
    CHECK(verify_artifact(bad).find("reads outside its operands") != std::string::npos);
    bad = a;
    bad.kernels.kernels[static_cast<size_t>(first)].library.prologue_kernel = first;  // itself: a library kernel
    CHECK(verify_artifact(bad).find("norm prologue is not a kernel of its step") != std::string::npos);
    if (fused) {  // the normalized rows are K long: a longer stride would read past the scratch
      bad = a;
      bad.kernels.kernels[static_cast<size_t>(a.kernels.step_choices.at(sn).front())].library.lda = 2000;
      CHECK(verify_artifact(bad) != "");
    }
    bad = a;  // library fields on a kernel without a library matmul
    bad.kernels.kernels[static_cast<size_t>(a.kernels.step_choices.at(sy).back())].library.prologue_kernel = 0;
    CHECK(verify_artifact(bad).find("has library matmul fields but no library matmul") != std::string::npos);
    bad = a;  // a library matmul as the choice that must serve every run
    bad.kernels.step_choices.at(sy).back() = first;
    bad.kernels.kernels[static_cast<size_t>(first)].min_rows = 0;
    CHECK(verify_artifact(bad).find("does not run it at every binding") != std::string::npos);
  }
  // Only rows the rows kernel takes (f32 up to 16, f16 one): no library kernel.
  for (const char* few_text :
       {"program few;\ndim M in [1, 16];\ninput x : f32[M, 256];\nparam w : f32[256, 256];\noutput y : f32[M, 256];\n"
        "y = x @ w;\n",
        "program few;\ninput x : f16[1, 256];\nparam w : f16[256, 256];\noutput y : f16[1, 256];\ny = x @ w;\n"}) {
    INFO(few_text);
    plan::Plan few = plan_of(testing::graph_of(few_text));
    CHECK(library_kernel(generate_cuda(few).kernels, 0) == nullptr);
  }
  // Static rows: the library kernel and the step's own use no run-time dim,
  // so a session's update-served dims never keep the step from cuBLASLt.
  plan::Plan fixed = plan_of(testing::graph_of(
      "program fixed;\ndim B in [1, 8];\ninput a : f16[40, 256];\nparam w : f16[256, 128];\ninput x : f16[B, 4];\n"
      "output q : f16[40, 128];\noutput r : f16[B, 4];\nq = a @ w;\nr = x * 2.0;\n"));
  GeneratedCode fixed_code = generate_cuda(fixed);
  const size_t sq = step_writing(fixed, fixed.graph.outputs[0].value);
  const Kernel* fk = library_kernel(fixed_code.kernels, sq);
  REQUIRE(fk != nullptr);
  CHECK_FALSE(fk->depends_on_dims);
  CHECK_FALSE(own_kernel(fixed_code, sq).depends_on_dims);
}

// Grouped query heads share a task only where the rows fill the GPU, and at
// most kAttentionStreamHeadsDims of head dims together.
TEST_CASE("codegen: streamed attention groups query heads by the rows and the head dims") {
  const auto heads = [](int64_t batch, int64_t d) {
    GraphBuilder b;
    b.g.program_name = "heads";
    ValueId q = b.input("q", {DType::kBF16, dims({c(batch), c(32), c(d)})});
    ValueId k = b.param("k", {DType::kBF16, dims({c(batch), c(8), c(1024), c(d)})});
    ValueId v = b.param("v", {DType::kBF16, dims({c(batch), c(8), c(1024), c(d)})});
    ValueId len = b.input("len", {DType::kI32, dims({c(batch)})});
    ValueId o = b.op(Op::kAttention, {q, k, v, len}, {DType::kBF16, dims({c(batch), c(32), c(d)})},
                     testing::value_attrs(0.1));
    b.output("o", o);
    plan::Plan p = plan_of(b.g);
    return choose_attention(p.graph, p.graph.node(o)).stream_heads;
  };
  CHECK(heads(1, 128) == 1);   // 32 rows: far from filling 132 multiprocessors x 2 blocks
  CHECK(heads(16, 128) == 4);  // 512 rows: four heads of a k/v head a task
  CHECK(heads(16, 64) == 4);
  CHECK(heads(16, 256) == 2);  // 512 head dims of registers at most
}

// The tensor-core group kernel takes every f16/bf16 attention with two or
// more query heads a k/v head and head dims that are multiples of 64 (up
// to 256), at any row count: the whole group a task up to 16 heads, else
// its largest divisor below; single heads, f32 and other head dims keep
// the streamed kernel, a paged block that no stage of 16 or more positions
// divides (with a warp's 16 columns) too; sm_80 has it.
TEST_CASE("codegen: grouped query heads take the tensor-core group kernel by dtype, head dims and group") {
  // GDL_ATTENTION_GROUPED=0 (kernel_choice.cc grouped_attention) turns it off.
  {
    testing::ScopedEnv off("GDL_ATTENTION_GROUPED", "0");
    GraphBuilder b;
    b.g.program_name = "grouped_default";
    ValueId q = b.input("q", {DType::kBF16, dims({c(16), c(32), c(128)})});
    ValueId k = b.param("k", {DType::kBF16, dims({c(16), c(8), c(1024), c(128)})});
    ValueId v = b.param("v", {DType::kBF16, dims({c(16), c(8), c(1024), c(128)})});
    ValueId len = b.input("len", {DType::kI32, dims({c(16)})});
    ValueId o = b.op(Op::kAttention, {q, k, v, len}, {DType::kBF16, dims({c(16), c(32), c(128)})},
                     testing::value_attrs(0.1));
    b.output("o", o);
    plan::Plan p = plan_of(b.g);
    CHECK(choose_attention(p.graph, p.graph.node(o)).group_splits == 0);
  }
  {  // by default single heads keep the streamed kernel; "all": they too take it, a head a task
    GraphBuilder b;
    b.g.program_name = "grouped_single";
    ValueId q = b.input("q", {DType::kF16, dims({c(4), c(8), c(64)})});
    ValueId k = b.param("k", {DType::kF16, dims({c(4), c(8), c(1024), c(64)})});
    ValueId len = b.input("len", {DType::kI32, dims({c(4)})});
    ValueId o = b.op(Op::kAttention, {q, k, k, len}, {DType::kF16, dims({c(4), c(8), c(64)})}, testing::value_attrs(0.1));
    b.output("o", o);
    plan::Plan p = plan_of(b.g);
    CHECK(choose_attention(p.graph, p.graph.node(o)).group_splits == 0);
    testing::ScopedEnv all("GDL_ATTENTION_GROUPED", "all");
    CHECK(choose_attention(p.graph, p.graph.node(o)).group_heads == 1);
    // A split's least stages: 2 by default, the knob's count, at most the cache's 1024 / 64 stages.
    CHECK(choose_attention(p.graph, p.graph.node(o)).group_least_split_stages == 2);
    for (const auto& [asked, taken] : std::vector<std::pair<std::string, int>>{{"1", 1}, {"5", 5}, {"1000", 16}}) {
      testing::ScopedEnv least("GDL_ATTENTION_LEAST_SPLIT_STAGES", asked);
      CHECK(choose_attention(p.graph, p.graph.node(o)).group_least_split_stages == taken);
    }
  }
  struct Case {
    std::string type, batch, nh, kvh, d, block;  // block: paged cache's block size ("": contiguous)
    int heads, positions;                        // 0: not the group kernel
  };
  const std::vector<Case> cases = {
      {"bf16", "1", "32", "8", "128", "", 4, 64},   {"f16", "16", "32", "8", "128", "", 4, 64},
      {"f16", "16", "32", "8", "64", "", 4, 64},    {"bf16", "2", "64", "4", "192", "", 16, 64},
      {"f16", "2", "64", "2", "128", "", 16, 64},   {"bf16", "2", "48", "2", "64", "", 12, 64},
      {"f16", "2", "12", "2", "256", "", 6, 64},    {"f32", "16", "32", "8", "128", "", 0, 0},
      {"f16", "16", "32", "32", "128", "", 0, 0},   {"f16", "4", "8", "2", "80", "", 0, 0},
      {"f16", "4", "8", "2", "128", "16", 4, 16},   {"f16", "4", "8", "2", "64", "16", 0, 0},
      {"bf16", "4", "8", "2", "64", "32", 4, 32},   {"bf16", "4", "8", "2", "128", "12", 0, 0},
      {"bf16", "4", "8", "2", "192", "16", 0, 0},   {"bf16", "4", "8", "2", "192", "32", 4, 32},
  };
  for (const Case& k : cases)
    for (const char* arch : {"sm_80", "sm_90"}) {
      const bool paged = !k.block.empty();
      INFO(k.type << " B = " << k.batch << ", " << k.nh << " query heads over " << k.kvh << ", D = " << k.d
                  << (paged ? ", paged block " + k.block : std::string()) << ", " << arch);
      const std::string q = k.type + "[" + k.batch + ", " + k.nh + ", " + k.d + "]";
      const std::string cache =
          paged ? k.type + "[64, " + k.kvh + ", " + k.block + ", " + k.d + "]" : k.type + "[" + k.batch + ", " + k.kvh + ", 2048, " + k.d + "]";
      const std::string text =
          "program grouped;\ninput q : " + q + ";\nparam k : " + cache + ";\nparam v : " + cache +
          ";\ninput len : i32[" + k.batch + "];\n" + (paged ? "input blocks : i32[" + k.batch + ", 16];\n" : "") +
          "output o : " + q + ";\no = " + (paged ? "paged_attention(q, k, v, len, blocks)" : "attention(q, k, v, len)") +
          ";\n";
      SourceFile file = source_from_string("grouped.gdl", text);
      DiagnosticSink diags;
      std::optional<ir::Graph> g = compile_to_ir(file, diags);
      INFO(diags.render(file));
      REQUIRE(g.has_value());
      plan::Plan p = plan_of(*g);
      GeneratedCode code = generate_cuda(p, arch);
      const std::string call = "gdl::attention_group<" + k.d + ", " + k.d + ", " + std::to_string(k.positions) + ", ";
      CHECK((code.source.find(call) != std::string::npos) == (k.heads > 0));
      if (k.heads > 0) {
        const size_t at = code.source.find(call);
        CHECK(code.source.find(", " + std::to_string(k.heads) + ", int>(", at) < code.source.find("\n", at));
        CHECK(code.source.find("attention_ring, 2);", at) < code.source.find("\n", at));  // splits of 2 stages at least
        CHECK(code.source.find("// attention kernel: grouped query heads on tensor cores, " + std::to_string(k.heads) +
                               " query head(s) a task") != std::string::npos);
        REQUIRE(code.kernels.step_choices.size() == 1);
        CHECK(own_kernel(code, 0).launch.shared_bytes > 0u);
      }
      if (std::string(arch) == "sm_90") {
        if (k.heads > 0) require_compiles(code);
        continue;
      }
      CompileOptions options = options_in("-");
      options.arch = arch;
      auto module = compile_cuda(code.source, options);
      INFO(module.status().message());
      CHECK(module.ok());
    }
}

// Causal queries take the prefill kernel (gdl_attention_prefill.cuh) for
// f16/bf16 heads of 64 or 128 where its tasks, a block of 64 / group queries
// of a sequence and k/v head, give each of the 132 multiprocessors one at
// the smallest binding; GDL_ATTENTION_PREFILL=all wherever it can, 0 never.
// Over a paged cache its stages halve until they divide the block.
TEST_CASE("codegen: blocks of causal queries take the prefill kernel where their tasks fill the GPU") {
  struct Case {
    std::string type, batch, queries, nh, kvh, d, dv, block;  // block: paged cache's block size ("": contiguous)
    int query_block, positions;                               // by default; 0: not the prefill kernel
    int query_block_all;                                       // with GDL_ATTENTION_PREFILL=all
  };
  const std::vector<Case> cases = {
      {"bf16", "8", "512", "16", "4", "64", "64", "", 16, 64, 16},     // 8 x 4 x 32 = 1024 tasks
      {"f16", "1", "2048", "32", "8", "128", "128", "", 16, 64, 16},   // 1 x 8 x 128
      {"f16", "1", "16", "32", "8", "128", "128", "", 0, 0, 16},       // 8 tasks: the decode kernels split positions
      {"bf16", "2", "1024", "16", "16", "128", "64", "", 64, 64, 64},  // one head a k/v head: 64 queries a task
      {"bf16", "4", "512", "12", "4", "64", "128", "", 21, 64, 21},    // groups of 3: 21 queries, 63 rows
      {"bf16", "1", "256", "128", "1", "64", "64", "", 0, 0, 0},       // a group of 128 is more than a task's rows
      {"f32", "8", "512", "16", "4", "64", "64", "", 0, 0, 0},
      {"f16", "8", "512", "16", "4", "80", "80", "", 0, 0, 0},
      {"f16", "8", "512", "16", "4", "256", "256", "", 0, 0, 0},
      {"f16", "8", "512", "16", "4", "64", "64", "16", 16, 16, 16},
      {"f16", "8", "512", "16", "4", "64", "64", "96", 16, 32, 16},
      {"f16", "8", "512", "16", "4", "64", "64", "24", 0, 0, 0},
  };
  for (const Case& k : cases)
    for (const char* knob : {"", "all", "0"}) {
      testing::ScopedEnv prefill("GDL_ATTENTION_PREFILL", knob);
      const bool paged = !k.block.empty();
      INFO(k.type << " B = " << k.batch << ", Q = " << k.queries << ", " << k.nh << " query heads over " << k.kvh
                  << ", D = " << k.d << ", DV = " << k.dv << (paged ? ", paged block " + k.block : std::string())
                  << ", GDL_ATTENTION_PREFILL=" << std::string(knob));
      const std::string q = k.type + "[" + k.batch + ", " + k.queries + ", " + k.nh + ", " + k.d + "]";
      const std::string o = k.type + "[" + k.batch + ", " + k.queries + ", " + k.nh + ", " + k.dv + "]";
      auto cache = [&](const std::string& dim) {
        return paged ? k.type + "[512, " + k.kvh + ", " + k.block + ", " + dim + "]"
                     : k.type + "[" + k.batch + ", " + k.kvh + ", 4096, " + dim + "]";
      };
      const std::string text = "program prefill;\ninput q : " + q + ";\nparam k : " + cache(k.d) + ";\nparam v : " +
                               cache(k.dv) + ";\ninput len : i32[" + k.batch + "];\n" +
                               (paged ? "input blocks : i32[" + k.batch + ", 32];\n" : "") + "output o : " + o +
                               ";\no = " +
                               (paged ? "paged_attention(q, k, v, len, blocks, start = 0)"
                                      : "attention(q, k, v, len, start = 0)") +
                               ";\n";
      SourceFile file = source_from_string("prefill.gdl", text);
      DiagnosticSink diags;
      std::optional<ir::Graph> g = compile_to_ir(file, diags);
      INFO(diags.render(file));
      REQUIRE(g.has_value());
      plan::Plan p = plan_of(*g);
      const int query_block = std::string(knob) == "0" ? 0 : std::string(knob) == "all" ? k.query_block_all : k.query_block;
      const ir::Node& step = [&]() -> const ir::Node& {
        for (const ir::Node& n : p.graph.nodes)
          if (n.op == Op::kAttention || n.op == Op::kPagedAttention) return n;
        FAIL("no attention step");
        return p.graph.nodes.front();
      }();
      const AttentionChoice choice = choose_attention(p.graph, step);
      CHECK(choice.prefill_query_block == query_block);
      GeneratedCode code = generate_cuda(p);
      const size_t at = code.source.find("gdl::attention_prefill<" + k.d + ", " + k.dv + ", ");
      CHECK((at != std::string::npos) == (query_block > 0));
      if (query_block == 0) continue;
      if (std::string(knob).empty())
        CHECK(code.source.find("gdl::attention_prefill<" + k.d + ", " + k.dv + ", " + std::to_string(k.positions) + ", ") ==
              at);
      CHECK(code.source.find(", " + std::to_string(query_block) + ", ", at) < code.source.find("\n", at));
      REQUIRE(code.kernels.step_choices.size() == 1);
      CHECK(own_kernel(code, 0).launch.block == 128u);
      CHECK(own_kernel(code, 0).launch.shared_bytes == choice.prefill_shared_bytes);
      if (std::string(knob).empty()) require_compiles(code);
    }
}

// grad through attention in f16/bf16 with heads of 64 or 128: the three
// derivative kernels (gdl_attention_backward.cuh), with the stages of
// choose_attention_backward, and they compile.
TEST_CASE("codegen: attention's derivative takes its three kernels and they compile") {
  struct Case {
    std::string type;
    int d, dv;
  };
  for (const Case& c : std::vector<Case>{{"bf16", 64, 64}, {"f16", 128, 128}, {"bf16", 64, 128}}) {
    const std::string& type = c.type;
    const int d = c.d, dv = c.dv;
    INFO(type << " D = " << d << ", DV = " << dv);
    const std::string q = type + "[4, 96, 8, " + std::to_string(d) + "]";
    const std::string o = type + "[4, 96, 8, " + std::to_string(dv) + "]";
    const std::string text = "program attention_grad;\ninput q : " + q + ";\ninput k : " + type + "[4, 2, 96, " +
                             std::to_string(d) + "];\ninput v : " + type + "[4, 2, 96, " + std::to_string(dv) +
                             "];\ninput w : " + o + ";\noutput d_q : " + q + ";\noutput d_k : " + type + "[4, 2, 96, " +
                             std::to_string(d) + "];\noutput d_v : " + type + "[4, 2, 96, " + std::to_string(dv) +
                             "];\nlet l = sum(reshape(attention(q, k, v, 96, start = 0) * w, [-1]));\n"
                             "d_q = grad(l, q);\nd_k = grad(l, k);\nd_v = grad(l, v);\n";
    SourceFile file = source_from_string("attention_grad.gdl", text);
    DiagnosticSink diags;
    std::optional<ir::Graph> g = compile_to_ir(file, diags);
    INFO(diags.render(file));
    REQUIRE(g.has_value());
    plan::Plan p = plan_of(*g);
    GeneratedCode code = generate_cuda(p);
    const int positions = d + dv <= 128 ? 64 : 32;
    for (const char* kernel : {"stats", "q", "kv"}) {
      INFO(kernel);
      const std::string call = "gdl::attention_backward_" + std::string(kernel) + "<" + std::to_string(d) + ", " +
                               std::to_string(dv) + ", " + std::to_string(positions) + ", ";
      CHECK(code.source.find(call) != std::string::npos);
    }
    // Nothing of the matmul rule's [.., rows, T] probabilities: no softmax.
    CHECK(std::none_of(p.graph.nodes.begin(), p.graph.nodes.end(), [](const ir::Node& n) { return n.op == Op::kSoftmax; }));
    for (const ir::Node& n : p.graph.nodes)
      if (n.op == Op::kAttentionStats || n.op == Op::kAttentionGradQ || n.op == Op::kAttentionGradKV) {
        const AttentionBackwardChoice c = choose_attention_backward(p.graph, n);
        CHECK(c.query_block == 16);  // 64 rows of a task over 4 query heads a k/v head
        CHECK(c.positions == positions);
        CHECK(c.stages >= 2);
      }
    require_compiles(code);
  }
}

TEST_CASE("codegen: the rows kernel's splits of a strip form a cluster where the launch has a block per SM at most") {
  for (DType t : kFloats) {
    INFO(dtype_name(t));
    GraphBuilder b;
    b.g.program_name = "rows_cluster";
    const Dim B = b.dim("B", 1, 8);
    ValueId w = b.param("w", {t, dims({Dim::constant(1024), Dim::constant(1024)})});
    ValueId x = b.input("x", {t, dims({B, Dim::constant(1024)})});
    ValueId y = b.op(Op::kMatMul, {x, w}, {t, dims({B, Dim::constant(1024)})});
    b.output("y", y);
    plan::Plan p = plan_of(b.g);
    REQUIRE(plan::check_plan(p) == "");
    const MatmulChoice c = choose_matmul(p.graph, p.graph.node(y));
    const bool f32 = t == DType::kF32;
    // f16/bf16: 16 strips x 8 splits = 128 blocks, one cluster of 8 per
    // strip and no scratch; f32: 32 strips x 8 = 256 blocks, global parts.
    CHECK(c.rows_splits == 8);
    CHECK(c.rows_cluster == !f32);
    GeneratedCode code = generate_cuda(p);
    CHECK((code.source.find("__cluster_dims__(1, 8, 1) __launch_bounds__(256, 2) " + own_kernel(code, 0).symbol + "(") !=
           std::string::npos) == !f32);
    CHECK((code.source.find("gdl::matmul_rows<1, 8>(") != std::string::npos) == !f32);  // f16, bf16: one row at most
    // f16/bf16: no scratch of its own (the cluster adds the parts), only
    // cuBLASLt's for 2 rows and more; f32: the parts.
    CHECK((p.steps[0].scratch_bytes == library_scratch(p, 0)) == !f32);
    CHECK(own_kernel(code, 0).launch.grid_y == (f32 ? 32 : 16) * 8);
  }
}

// The streamed attention copies k and v with bulk copies and reads q as
// 16-byte vectors: a k that is a view at an offset of 6 bytes must take the
// split kernel, the same view at 16 bytes the streamed one, and both compile.
TEST_CASE("codegen: attention over a k view off 16-byte alignment takes the split kernel") {
  for (const char* offset : {"3", "8"}) {  // f16 elements: 6 and 16 bytes
    INFO("k starts at element " << offset);
    const std::string text = std::string("program att_view;\nparam flat : f16[8200];\nparam v : f16[4, 16, 128];\n") +
                             "input q : f16[4, 128];\ninput len : i32;\noutput o : f16[4, 128];\n" +
                             "let k = reshape(flat[" + offset + ":" + std::to_string(std::stoi(offset) + 8192) +
                             "], [4, 16, 128]);\no = attention(q, k, v, len);\n";
    SourceFile file = source_from_string("att_view.gdl", text);
    DiagnosticSink diags;
    std::optional<ir::Graph> g = compile_to_ir(file, diags);
    INFO(diags.render(file));
    REQUIRE(g.has_value());
    plan::Plan p = plan_of(*g);
    GeneratedCode code = generate_cuda(p);
    const bool aligned = std::string(offset) == "8";
    CHECK((code.source.find("gdl::attention_stream<128, 128, ") != std::string::npos) == aligned);
    CHECK((code.source.find("gdl::attention_split<128, 128, ") != std::string::npos) == !aligned);
    CHECK(code.kernels.step_choices.size() == 1);
    CHECK(own_kernel(code, 0).launch.shared_bytes == (aligned ? 96u * 1024 : 0u));
    require_compiles(code);
  }
}

// A topk or argmax whose rows leave the GPU idle (a decode step's logits)
// reads each row in parts; its scratch holds k keys and positions a part
// at the most rows the parts serve; rows that fill the GPU, and rows too
// short for two parts, take one block each (where the rows can do both, a
// second kernel from 132 rows).
TEST_CASE("codegen: a topk or argmax over too few rows for the GPU reads each row in parts, and compiles") {
  auto topk = [](Dim rows, int64_t len, int64_t k) {
    GraphBuilder b;
    b.g.program_name = "topk_parts";
    ValueId x = b.input("x", {DType::kF32, dims({rows, c(len)})});
    ir::Attrs a;
    a.axis = 1;
    a.ints = {k};
    b.output("y", b.op(Op::kTopKIndices, {x}, {DType::kI32, dims({rows, c(k)})}, a));
    return b.g;
  };
  auto parts = [](const ir::Graph& g) { return choose_selection(g, g.node(g.outputs.at(0).value)).parts; };
  CHECK(parts(topk(c(1), 128256, 64)) == 31);  // 4096 elements a part at least
  CHECK(parts(topk(c(1), 128256, 256)) == 31);
  CHECK(parts(topk(c(1), 20000, 256)) == 4);
  CHECK(parts(topk(c(64), 128256, 64)) == 9);  // 132 x 4 blocks over 64 rows
  CHECK(parts(topk(c(132), 128256, 64)) == 1);
  CHECK(parts(topk(c(4), 3000, 64)) == 1);
  {
    GraphBuilder b;  // rows at run time: parts for the fewest, scratch for the most
    Dim n = b.dim("N", 1, 64);
    const ir::Graph g = [&] {
      ValueId x = b.input("x", {DType::kBF16, dims({n, c(128256)})});
      ir::Attrs a;
      a.axis = 1;
      a.ints = {64};
      b.output("y", b.op(Op::kTopKValues, {x}, {DType::kBF16, dims({n, c(64)})}, a));
      return b.g;
    }();
    const SelectionChoice choice = choose_selection(g, g.node(g.outputs.at(0).value));
    CHECK(choice.parts == 31);
    CHECK(choice.scratch.tickets == 64);
    CHECK(choice.scratch.partial_floats == 64 * 31 * 64 * 2);
    CHECK(choice.whole_rows_from == 0);
  }
  {
    GraphBuilder b;  // rows that can fill the GPU: a second kernel, one block a row, from 132 rows
    b.g.program_name = "topk_rows_bands";
    Dim n = b.dim("N", 1, 4096);
    ValueId x = b.input("x", {DType::kF32, dims({n, c(128256)})});
    ir::Attrs a;
    a.axis = 1;
    a.ints = {50};
    b.output("y", b.op(Op::kTopKIndices, {x}, {DType::kI32, dims({n, c(50)})}, a));
    const SelectionChoice choice = choose_selection(b.g, b.g.node(b.g.outputs.at(0).value));
    CHECK(choice.parts == 31);
    CHECK(choice.whole_rows_from == 132);
    CHECK(choice.scratch.tickets == 131);  // the first kernel's rows only
    CHECK(choice.scratch.partial_floats == 131 * 31 * 50 * 2);
    plan::Plan p = plan_of(b.g);
    GeneratedCode code = generate_cuda(p, "sm_90");
    size_t step = p.steps.size();
    for (size_t s = 0; s < p.steps.size(); ++s)
      if (p.graph.node(p.steps[s].result).op == Op::kTopKIndices) step = s;
    REQUIRE(step < p.steps.size());
    const Kernel* whole = large_kernel(code, step);
    REQUIRE(whole != nullptr);
    CHECK(whole->min_rows == 132);
    CHECK(whole->launch.grid_y == 1);
    CHECK(own_kernel(code, step).launch.grid_y == 31);
    CHECK(code.source.find("gdl::SplitScratch{nullptr, nullptr, 1}") != std::string::npos);
    CHECK(code.source.find("gdl::SplitScratch{tickets, partials, 31}") != std::string::npos);
  }
  GraphBuilder b;  // the argmax beside it, in a program of both
  b.g.program_name = "select_parts";
  ValueId x = b.input("x", {DType::kF32, dims({c(2), c(50000)})});
  ir::Attrs top, arg;
  top.axis = arg.axis = 1;
  top.ints = {64};
  b.output("t", b.op(Op::kTopKIndices, {x}, {DType::kI32, dims({c(2), c(64)})}, top));
  b.output("a", b.op(Op::kArgMax, {x}, {DType::kI32, dims({c(2)})}, arg));
  CHECK(parts(b.g) == 12);
  const SelectionChoice argmax = choose_selection(b.g, b.g.node(b.g.outputs.at(1).value));
  CHECK(argmax.parts == 12);
  CHECK(argmax.scratch.partial_floats == 2 * 12 * 2);
  plan::Plan p = plan_of(b.g);
  for (const plan::Step& st : p.steps) CHECK(step_scratch(p.graph, st.values).tickets == 2);
  GeneratedCode code = generate_cuda(p, "sm_90");
  CHECK(code.source.find("gdl::topk_rows<") != std::string::npos);
  CHECK(code.source.find("gdl::arg_rows<") != std::string::npos);
  CHECK(code.source.find("gdl::SplitScratch{tickets, partials, 12}") != std::string::npos);
  auto module = compile_cuda(code.source, options_in("-"));
  INFO(module.status().message());
  CHECK(module.ok());
}

// Bulk copies and mbarrier byte counts need sm_90: for an older target the
// same decode attention takes the split kernel (its scratch already fits
// either kernel), and the module compiles for that target.
TEST_CASE("codegen: below sm_90 the decode attention takes the split kernel and compiles") {
  CHECK(sm_number("sm_90") == 90);
  CHECK(sm_number("sm_90a") == 90);
  CHECK(sm_number("sm_100") == 100);
  CHECK(sm_number("compute_90") == 0);
  GraphBuilder b;
  b.g.program_name = "decode_sm80";
  ValueId q = b.input("q", {DType::kF16, dims({c(32), c(128)})});
  ValueId k = b.param("k", {DType::kF16, dims({c(32), c(4096), c(128)})});
  ValueId v = b.param("v", {DType::kF16, dims({c(32), c(4096), c(128)})});
  ValueId len = b.input("len", {DType::kI32, {}});
  b.output("o", b.op(Op::kAttention, {q, k, v, len}, {DType::kF16, dims({c(32), c(128)})}, testing::value_attrs(0.088)));
  plan::Plan p = plan_of(b.g);
  for (const char* arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    GeneratedCode code = generate_cuda(p, arch);
    const bool stream = std::string(arch) == "sm_90";
    CHECK((code.source.find("gdl::attention_stream<") != std::string::npos) == stream);
    CHECK((code.source.find("gdl::attention_split<") != std::string::npos) == !stream);
    CompileOptions options = options_in("-");
    options.arch = arch;
    auto module = compile_cuda(code.source, options);
    INFO(module.status().message());
    CHECK(module.ok());
  }
}

// The streamed attention waits for the kernels it depends on before its
// first copies, over a param KV cache too: copies issued before the wait
// would assume every position valid, and a decode step's length is mostly
// below the cache's (GDL_ATTENTION_KV_EARLY=1 issues them, an experiment).
TEST_CASE("codegen: the streamed attention waits before its first copies, params or inputs") {
  for (bool params : {true, false}) {
    INFO((params ? "k and v params" : "k and v inputs"));
    GraphBuilder b;
    b.g.program_name = "decode_wait";
    const TensorType kv{DType::kF16, dims({c(32), c(4096), c(128)})};
    ValueId q = b.input("q", {DType::kF16, dims({c(32), c(128)})});
    ValueId k = params ? b.param("k", kv) : b.input("k", kv);
    ValueId v = params ? b.param("v", kv) : b.input("v", kv);
    ValueId len = b.input("len", {DType::kI32, {}});
    b.output("o", b.op(Op::kAttention, {q, k, v, len}, {DType::kF16, dims({c(32), c(128)})}, testing::value_attrs(0.088)));
    GeneratedCode code = generate_cuda(plan_of(b.g));
    const std::string& src = code.source;
    const size_t call = src.find("gdl::attention_stream<128, 128, 64, 3, false, 1, ");
    REQUIRE(call != std::string::npos);
    const size_t kernel_start = src.rfind("extern \"C\"", call);
    const size_t wait = src.find("gdl::wait_for_producers();", kernel_start);
    CHECK(wait < call);
    REQUIRE(code.kernels.step_choices.size() == 1);
    CHECK_FALSE(own_kernel(code, 0).early_start);  // ordinary edges from the input copies
    require_compiles(code);
  }
}

TEST_CASE("codegen: each matmul kernel and the split attention are chosen by shape, named, and compile") {
  for (DType t : kFloats) {
    INFO(dtype_name(t));
    KernelProgram k = kernel_program(t);
    plan::Plan p = plan_of(k.g);
    REQUIRE(plan::check_plan(p) == "");
    GeneratedCode code = generate_cuda(p);
    const std::string& src = code.source;
    const bool f32 = t == DType::kF32;
    const std::string tiled = f32 ? "gdl::matmul_simt(" : "gdl::matmul_mma<";
    const int64_t strips = f32 ? 128 : 64;  // 128-byte column strips of a 4096-wide w

    // The kernels' text: rows calls, tiled calls, and no run-time choice
    // inside a kernel (the hybrid step has two kernels).
    CHECK(src.find(std::string("gdl::matmul_rows<") + (f32 ? "8" : "1") + ">(") != std::string::npos);
    CHECK(src.find(std::string("gdl::matmul_rows<") + (f32 ? "16" : "1") + ">(") != std::string::npos);
    CHECK(src.find("if (rows <= ") == std::string::npos);
    CHECK(src.find(tiled) != std::string::npos);
    CHECK(src.find("// matmul kernel: rows (") != std::string::npos);
    // A matmul with weights in params: the start of its weights into L2,
    // then the wait, then its dependents only if its work is short
    // (gdl::matmul_allow_dependents); nothing before the prefetch waits.
    const size_t prefetch = src.find("gdl::matmul_rows_prefetch(");
    REQUIRE(prefetch != std::string::npos);
    CHECK(src.find("  gdl::wait_for_producers();\n  gdl::matmul_allow_dependents(rows, N, K);\n", prefetch) !=
          std::string::npos);
    const size_t kernel_start = src.rfind("extern \"C\"", prefetch);
    REQUIRE(kernel_start != std::string::npos);
    CHECK(src.find("gdl::wait_for_producers();", kernel_start) > prefetch);
    // Rows of 8 to 32 whole 16-byte vectors stream: 128 wide in every dtype,
    // 40 and 24 wide in f32 (10 and 6 vectors) but not in f16 or bf16 (5 and 3).
    CHECK(src.find("gdl::attention_stream<128, 128, ") != std::string::npos);  // then the stages
    CHECK(src.find("// attention kernel: streamed, 8 block(s) per row") != std::string::npos);
    CHECK(src.find(f32 ? "gdl::attention_stream<40, 24, " : "gdl::attention_split<40, 24, ") != std::string::npos);
    CHECK(src.find(f32 ? "// attention kernel: streamed, 2 block(s) per row" : "// attention kernel: split, 2 block(s) per row") !=
          std::string::npos);

    // rows: at most 8 rows, 4096 / 64 (f16) or 4096 / 32 (f32) strips, K split
    // so that the grid has about 264 blocks; f16/bf16 only at one row, the
    // tensor cores' 16-row tiles above.
    const MatmulChoice rows = choose_matmul(p.graph, p.graph.node(k.value["rows"]));
    CHECK(rows.fold_batch);
    CHECK(rows.use_rows);
    CHECK(rows.use_tiles == !f32);
    CHECK(rows.row_tile == (f32 ? 8 : 1));
    CHECK(rows.rows_splits == (f32 ? 2 : 4));
    size_t s = step_writing(p, k.value["rows"]);
    const LaunchRule& rr = own_kernel(code, s).launch;
    CHECK(rr.work.empty());
    CHECK(rr.grid_y == strips * rows.rows_splits);
    CHECK(rr.block == 256);
    CHECK(p.steps[s].tickets_bytes == rows.scratch.ticket_bytes());
    CHECK(p.steps[s].scratch_bytes == std::max(rows.scratch.partial_bytes(), library_scratch(p, s)));
    CHECK(rows.scratch.tickets >= strips);
    CHECK(rows.scratch.partial_floats >= rows.rows_splits * strips * rows.row_tile * (strips == 64 ? 64 : 32));
    if (f32) CHECK(rows.scratch.partial_floats == rows.rows_splits * strips * 8 * 32);
    CHECK(testing::addresses(src, own_kernel(code, s), "reinterpret_cast<unsigned*>(arena + ", p.steps[s].tickets_offset));
    CHECK(testing::addresses(src, own_kernel(code, s), "reinterpret_cast<float*>(arena + ", p.steps[s].scratch_offset));

    // hybrid: 1..64 rows: the rows kernel up to 16 (f32) or 1 (f16, bf16)
    // rows and tiled kernels above: the rows kernel's strips over grid.y,
    // the tiled kernels' bands of tile rows over grid.x and their tile
    // columns and splits over grid.y. Tensor cores: one kernel of 16-row
    // tiles for 2 to 16 rows, one of 32 for 17 to 32 and one of 64 for more
    // (matmul_tile_bands); FMA: one of 64 for all above 16.
    const MatmulChoice hybrid = choose_matmul(p.graph, p.graph.node(k.value["hybrid"]));
    CHECK(hybrid.use_rows);
    CHECK(hybrid.use_tiles);
    CHECK(hybrid.tiles == (f32 ? MatmulKernel::kSimt : MatmulKernel::kMma));
    CHECK(hybrid.tile_splits == 8);
    s = step_writing(p, k.value["hybrid"]);
    const Kernel& hk = own_kernel(code, s);
    REQUIRE(large_kernel(code, s) != nullptr);
    const Kernel& large = *large_kernel(code, s);  // the lowest band's
    const std::vector<int>& choices = code.kernels.step_choices.at(s);
    CHECK(choices.size() == (f32 ? 3u : 5u));  // with cuBLASLt's in front (library_kernel)
    CHECK(library_kernel(code.kernels, s) != nullptr);
    CHECK(named(hk.symbol, "gdl_s" + std::to_string(s) + "_matmul"));
    CHECK(hk.launch.work.empty());
    CHECK(hk.launch.grid_y == strips * hybrid.rows_splits);
    const int64_t first = f32 ? 17 : 2;  // the lowest tiled band's first rows
    CHECK(large.symbol == hk.symbol + "_tiled" + std::to_string(first));
    CHECK(large.launch.work == dims({Dim::runtime(1)}));
    CHECK(large.launch.items_per_block == (f32 ? 64 : 16));
    CHECK(large.launch.grid_y == 32 * hybrid.tile_splits);
    CHECK(large.rows == dims({Dim::runtime(1)}));
    CHECK(large.min_rows == first);
    CHECK(large.max_rows == (f32 ? kAnyRows : 16));
    CHECK(hk.depends_on_dims);
    CHECK(src.find(" " + large.symbol + "(unsigned char* arena") != std::string::npos);
    CHECK(src.find("// step " + std::to_string(s) + (f32 ? ", 17 rows or more: " : ", 2 to 16 rows: ")) != std::string::npos);
    CHECK(src.find("// step " + std::to_string(s) + (f32 ? ", 0 to 16 rows: " : ", 0 to 1 rows: ")) != std::string::npos);
    if (!f32) {  // the bands above, highest first, after cuBLASLt's
      const auto kernel = [&](size_t i) -> const Kernel& { return code.kernels.kernels.at(static_cast<size_t>(choices[i + 1])); };
      CHECK(kernel(0).symbol == hk.symbol + "_tiled33");
      CHECK(kernel(0).launch.items_per_block == 64);
      CHECK(kernel(0).min_rows == 33);
      CHECK(kernel(0).max_rows == kAnyRows);
      CHECK(kernel(1).symbol == hk.symbol + "_tiled17");
      CHECK(kernel(1).launch.items_per_block == 32);
      CHECK(kernel(1).min_rows == 17);
      CHECK(kernel(1).max_rows == 32);
      CHECK(src.find("// step " + std::to_string(s) + ", 33 rows or more: ") != std::string::npos);
      CHECK(src.find("// step " + std::to_string(s) + ", 17 to 32 rows: ") != std::string::npos);
      CHECK_FALSE(kernel_applies(kernel(0), {8, 32}));
      CHECK(kernel_applies(kernel(0), {8, 33}));
      CHECK(kernel_applies(kernel(1), {8, 32}));
      CHECK_FALSE(kernel_applies(kernel(1), {8, 16}));
    }
    // 32 tiles x 8 parts: more blocks than multiprocessors, so no clusters
    // (kernel_choice.cc); the partial tiles are the larger scratch.
    CHECK_FALSE(hybrid.tile_cluster);
    CHECK(src.find("__cluster_dims__(1, 8, 1) __launch_bounds__(256, 2) " + large.symbol + "(") == std::string::npos);
    CHECK(hybrid.scratch.partial_floats == 8 * 32 * 64 * 128);
    // The runtime's pick: the rows at the run's dims (C is dim 1).
    CHECK_FALSE(kernel_applies(large, {8, 1}));
    CHECK_FALSE(kernel_applies(large, {8, first - 1}));
    CHECK(kernel_applies(large, {8, first}));
    CHECK((large_kernel(code, step_writing(p, k.value["rows"])) == nullptr) == f32);
    CHECK(p.steps[s].scratch_bytes == std::max(hybrid.scratch.partial_bytes(), library_scratch(p, s)));

    // tiles: 256 x 256 is 8 tiles of 64 x 128; K = 512 split 4 ways, each
    // part at least 128 positions of K (kernel_choice.cc).
    const MatmulChoice tiles = choose_matmul(p.graph, p.graph.node(k.value["tiles"]));
    CHECK_FALSE(tiles.use_rows);
    CHECK(tiles.tile_splits == 4);
    s = step_writing(p, k.value["tiles"]);
    CHECK(own_kernel(code, s).launch.grid_y == 8 * tiles.tile_splits);
    CHECK(own_kernel(code, s).launch.work.empty());
    // f16/bf16: 32 blocks, so the 4 parts of a tile are one cluster, with
    // no scratch; f32 (FMA kernel) keeps the partial tiles.
    CHECK(tiles.tile_cluster == !f32);
    CHECK((src.find("__cluster_dims__(1, 4, 1) __launch_bounds__(256, 2) " + own_kernel(code, s).symbol + "(") !=
           std::string::npos) == !f32);
    CHECK((src.find("gdl::matmul_mma<64, 6, 4>(") != std::string::npos) == !f32);  // 64-row tiles, 6 stages, clusters of 4
    CHECK(p.steps[s].scratch_bytes == std::max(f32 ? tiles.scratch.partial_bytes() : 0, library_scratch(p, s)));

    // batched b: not folded, one tile per batch entry.
    const MatmulChoice batched = choose_matmul(p.graph, p.graph.node(k.value["batched"]));
    CHECK_FALSE(batched.fold_batch);
    CHECK_FALSE(batched.use_rows);
    s = step_writing(p, k.value["batched"]);
    CHECK(own_kernel(code, s).launch.grid_y == 4 * batched.tile_splits);
    CHECK(src.find("  batches.set(1, gdl::Shape<1, int>{{4}}, ") != std::string::npos);  // b's stored rows * ldb
    CHECK(src.find(" * ldb);  // b") != std::string::npos);

    // ragged: 3 x 17 rows fold into 51, K = 33 too short to split.
    const MatmulChoice ragged = choose_matmul(p.graph, p.graph.node(k.value["ragged"]));
    CHECK(ragged.fold_batch);
    CHECK(ragged.rows_min == 51);
    CHECK(ragged.tile_splits == 1);
    CHECK(p.steps[step_writing(p, k.value["ragged"])].scratch_bytes == library_scratch(p, step_writing(p, k.value["ragged"])));

    // attention: 32 rows of 4096 positions, 12 splits for the split kernel,
    // 8 for the streamed one (two blocks of a 96 KiB ring per multiprocessor:
    // 32 x 8 = 256 of 264 resident), scratch for the larger; 6 rows of 100: 2.
    const AttentionChoice decode = choose_attention(p.graph, p.graph.node(k.value["decode"]));
    CHECK(decode.splits == 12);
    CHECK(decode.stream_splits == 8);
    // f16 and bf16 take the tensor-core scores, 64 positions (32 KiB) a
    // stage; f32 the lanes' dot products, 32 positions (32 KiB).
    CHECK(decode.stream_positions == (f32 ? 32 : 64));
    CHECK(decode.stream_stages == 3);
    CHECK(decode.stream_shared_bytes == 96 * 1024);
    CHECK(decode.scratch.tickets == 32);
    CHECK(decode.scratch.partial_floats == 32 * 12 * 130);
    s = step_writing(p, k.value["decode"]);
    CHECK(own_kernel(code, s).launch.grid_y == 32 * 8);
    CHECK(own_kernel(code, s).launch.shared_bytes == 96 * 1024);
    CHECK(p.steps[s].tickets_bytes == decode.scratch.ticket_bytes());
    CHECK(p.steps[s].scratch_bytes == decode.scratch.partial_bytes());
    const AttentionChoice odd = choose_attention(p.graph, p.graph.node(k.value["odd"]));
    CHECK(odd.splits == 2);
    CHECK(odd.stream_splits == (f32 ? 2 : 0));  // f32: 10 and 6 vectors

    // The scratch area: the tickets of each step in step order, then the
    // partial tiles. Every output here is independent: nothing is shared.
    uint64_t tickets = 0, largest = 0;
    for (const plan::Step& st : p.steps) {
      if (st.tickets_bytes == 0) continue;
      CHECK(st.tickets_offset == p.arena_bytes + tickets);
      tickets += st.tickets_bytes;
    }
    uint64_t partials = 0;
    for (const plan::Step& st : p.steps) {
      if (!choose_library_matmul(p.graph, st.values).possible)  // cuBLASLt's product and workspace need no tickets
        CHECK((st.tickets_bytes == 0) == (st.scratch_bytes == 0));
      if (st.scratch_bytes == 0) continue;
      CHECK(st.scratch_offset >= p.arena_bytes + tickets);
      partials += st.scratch_bytes;
      largest = std::max(largest, st.scratch_bytes);
    }
    CHECK(p.scratch_bytes == tickets + partials);
    CHECK(plan::print_plan(p).find(", scratch ") != std::string::npos);
    require_compiles(code);
  }
}

TEST_CASE("check_plan: scratch that is missing, shared or outside its area is found") {
  KernelProgram k = kernel_program(DType::kF16);
  plan::Plan p = plan_of(k.g);
  REQUIRE(plan::check_plan(p) == "");
  std::vector<size_t> with;
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].scratch_bytes > 0) with.push_back(s);
  REQUIRE(with.size() >= 2);
  {
    plan::Plan bad = p;
    bad.steps[with[0]].scratch_bytes = 0;
    CHECK(plan::check_plan(bad).find("bytes of scratch, its kernel needs") != std::string::npos);
  }
  {
    plan::Plan bad = p;  // the independent outputs' steps may run at the same time
    bad.steps[with[1]].scratch_offset = bad.steps[with[0]].scratch_offset;
    CHECK(plan::check_plan(bad).find("may run at the same time but share scratch") != std::string::npos);
  }
  {
    plan::Plan bad = p;
    bad.steps[with[1]].tickets_offset = bad.steps[with[0]].scratch_offset;
    CHECK(plan::check_plan(bad).find("share bytes with other scratch") != std::string::npos);
  }
  {
    plan::Plan bad = p;
    bad.steps[with[0]].scratch_offset = 0;  // inside the arena
    CHECK(plan::check_plan(bad).find("lies outside the scratch area") != std::string::npos);
    bad = p;
    bad.scratch_bytes = 0;
    CHECK(plan::check_plan(bad).find("lies outside the scratch area") != std::string::npos);
  }
}

TEST_CASE("plan: split kernels in a chain share their partial tiles; their tickets stay apart") {
  // Four matmuls in a chain (each waits for the one before): one partial
  // area serves them all; two independent ones may not share.
  GraphBuilder b;
  Dim B = b.dim("B", 1, 8);
  ValueId x = b.input("x", {DType::kF16, dims({B, c(2048)})});
  ValueId h = x;
  for (int l = 0; l < 4; ++l) {
    ValueId w = b.param("w" + std::to_string(l), {DType::kF16, dims({c(2048), c(2048)})});
    h = b.op(Op::kMatMul, {h, w}, {DType::kF16, dims({B, c(2048)})});
  }
  b.output("y", h);
  ValueId w4 = b.param("w4", {DType::kF16, dims({c(2048), c(2048)})});
  b.output("z", b.op(Op::kMatMul, {x, w4}, {DType::kF16, dims({B, c(2048)})}));
  plan::Plan p = plan_of(b.g);
  REQUIRE(plan::check_plan(p) == "");
  REQUIRE(p.steps.size() == 5);
  std::set<uint64_t> partial_offsets, ticket_offsets;
  for (const plan::Step& st : p.steps) {
    REQUIRE(st.scratch_bytes > 0);
    ticket_offsets.insert(st.tickets_offset);
    partial_offsets.insert(st.scratch_offset);
  }
  CHECK(ticket_offsets.size() == 5);
  CHECK(partial_offsets.size() == 2);  // the chain's one area, and the independent matmul's own
  const uint64_t one = p.steps[0].scratch_bytes;
  REQUIRE(p.chains.size() == 1);  // the four chained matmuls also get a chain kernel, its exchange area last
  CHECK(p.scratch_bytes == 5 * p.steps[0].tickets_bytes + 2 * one + chain_exchange_bytes(2048, 0) + 4 * chain::kTensorMapBytes);
  GeneratedCode code = generate_cuda(p);
  require_compiles(code);
}

TEST_CASE("codegen: a fused elementwise step is one kernel with one local per value") {
  plan::Plan p = fused_plan();
  GeneratedCode code = generate_cuda(p);
  REQUIRE(code.kernels.step_choices.size() == 1);
  CHECK(named(own_kernel(code, 0).symbol, "gdl_s0_add"));
  CHECK(own_kernel(code, 0).symbol.find("__") != std::string::npos);  // the fused ops follow
  const std::string& src = code.source;
  CHECK(src.find("const float r2 = gdl::fit<__half>(gdl::op::mul(gdl::ld(v0[i]), gdl::ld(v1[st1.at(c)])));") !=
        std::string::npos);
  CHECK(src.find("const float r3 = gdl::fit<__half>(gdl::op::exp(r2));") != std::string::npos);
  CHECK(src.find("const float r4 = gdl::fit<__half>(gdl::op::add(r3, gdl::ld(v0[i])));") != std::string::npos);
  CHECK(src.find("out[i] = gdl::cvt<__half>(r4);") != std::string::npos);
}

TEST_CASE("codegen: the same plan gives the same text with IR values and source lines in comments") {
  ir::Graph g = structured_program();
  auto attention = std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.op == Op::kAttention; });
  REQUIRE(attention != g.nodes.end());
  attention->loc = SourceLoc{17, 5};
  attention->name = "context";
  auto attention_id = static_cast<size_t>(attention - g.nodes.begin());
  plan::Plan p = plan_of(g);
  GeneratedCode first = generate_cuda(p);
  GeneratedCode second = generate_cuda(plan_of(g));
  CHECK(first.source == second.source);
  REQUIRE(first.kernels.kernels.size() == second.kernels.kernels.size());
  for (size_t i = 0; i < first.kernels.kernels.size(); ++i) CHECK(first.kernels.kernels[i].symbol == second.kernels.kernels[i].symbol);
  std::string last = "%" + std::to_string(attention_id) + " = attention";
  size_t at = first.source.find(last);
  REQUIRE(at != std::string::npos);
  std::string line = first.source.substr(at, first.source.find('\n', at) - at);
  CHECK(line.find("\"context\" at line 17:5") != std::string::npos);
  CHECK(line.find("f32[B, 4, 64]") != std::string::npos);
}

// Three small units of hand-written kernels after one prelude.
GeneratedCode three_units() {
  GeneratedCode code;
  code.prelude = "#include \"gdl_abi.cuh\"\n";
  for (const char* name : {"gdl_u0", "gdl_u1", "gdl_u2"}) {
    SourceUnit u;
    u.label = std::string("unit ") + name;
    u.text = std::string("extern \"C\" __global__ void ") + name +
             "(unsigned char* arena) { arena[threadIdx.x] += " + std::to_string(name[5] - '0' + 1) + "; }\n";
    u.symbols = {name};
    code.units.push_back(u);
  }
  return code;
}

TEST_CASE("compile_units: each unit cached apart; a changed or corrupted unit alone is compiled again") {
  TempDir dir;
  GeneratedCode code = three_units();
  std::vector<CompileProgress> heard;
  CompileOptions options = options_in(dir.path.string());
  options.progress = [&](const CompileProgress& p) { heard.push_back(p); };
  auto first = compile_units(code.prelude, code.units, options);
  INFO(first.status().message());
  REQUIRE(first.ok());
  CHECK(!first->from_cache);
  CHECK(first->compile_ms > 0);
  REQUIRE(heard.size() == code.units.size());
  for (size_t i = 0; i < heard.size(); ++i) {
    CHECK(heard[i].done == i + 1);
    CHECK(heard[i].total == code.units.size());
    CHECK_FALSE(heard[i].from_cache);
    CHECK(heard[i].seconds > 0);
  }
  std::set<std::string> labels;
  for (const CompileProgress& p : heard) labels.insert(p.label);
  CHECK(labels.size() == code.units.size());  // every unit once
  CHECK(labels.count("unit gdl_u1") == 1);
  for (size_t u = 0; u < code.units.size(); ++u) {
    CHECK(first->units[u].symbols == code.units[u].symbols);
    CHECK(first->units[u].ptx.find(".entry " + code.units[u].symbols[0] + "(") != std::string::npos);
  }

  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) entries.push_back(e.path());
  REQUIRE(entries.size() == code.units.size());  // one entry per unit, no temporary file left behind
  for (const auto& e : entries) CHECK(e.extension() == ".nvrtc");

  heard.clear();
  auto second = compile_units(code.prelude, code.units, options);
  REQUIRE(second.ok());
  CHECK(second->from_cache);
  CHECK(second->units == first->units);
  CHECK(second->nvrtc_major == first->nvrtc_major);
  REQUIRE(heard.size() == code.units.size());
  for (const CompileProgress& p : heard) CHECK(p.from_cache);

  // One unit changed: that unit alone is compiled.
  std::vector<SourceUnit> changed = code.units;
  changed[1].text += "\n// changed\n";
  heard.clear();
  auto other = compile_units(code.prelude, changed, options);
  REQUIRE(other.ok());
  CHECK(!other->from_cache);
  int compiled = 0;
  for (const CompileProgress& p : heard) compiled += p.from_cache ? 0 : 1;
  CHECK(compiled == 1);

  // Flip one byte in the middle of every entry: ignored, rebuilt, rewritten, the same code.
  for (const auto& entry : entries) {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(std::filesystem::file_size(entry) / 2));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(entry) / 2));
    f.write(&byte, 1);
  }
  auto rebuilt = compile_units(code.prelude, code.units, options_in(dir.path.string()));
  REQUIRE(rebuilt.ok());
  CHECK(!rebuilt->from_cache);
  CHECK(rebuilt->units == first->units);  // NVRTC's output does not depend on the threads that made it
  auto again = compile_units(code.prelude, code.units, options_in(dir.path.string()));
  REQUIRE(again.ok());
  CHECK(again->from_cache);

  // A truncated entry too; one thread compiles the same.
  std::filesystem::resize_file(entries[0], 20);
  CompileOptions one_job = options_in(dir.path.string());
  one_job.jobs = 1;
  auto after_truncation = compile_units(code.prelude, code.units, one_job);
  REQUIRE(after_truncation.ok());
  CHECK(!after_truncation->from_cache);
  CHECK(after_truncation->units == first->units);
}

TEST_CASE("codegen: the units are the whole source in order, each kernel in one, small steps merged") {
  // 40 layers of matmul + norm: many steps, each small, each its own code
  // (an eps of its own, so that no layer's kernels are an earlier layer's).
  std::string text = "program layers;\ndim B in [1, 64];\ninput x : f16[B, 256];\nparam w : f16[40, 256, 256];\n"
                     "output y : f16[B, 256];\nlet h = x;\n";
  for (int l = 0; l < 40; ++l)
    text += "h = rmsnorm(gelu(h @ w[" + std::to_string(l) + "]), eps = " + std::to_string(l + 1) + "e-5);\n";
  text += "y = h;\n";
  const plan::Plan p = plan_of(test_programs::compile_text(text));
  const GeneratedCode code = generate_cuda(p);
  REQUIRE(code.units.size() >= 2);
  CHECK(code.units.size() < p.steps.size());  // merged
  std::string whole = code.prelude;
  std::map<std::string, int> defined;
  for (size_t u = 0; u < code.units.size(); ++u) {
    const SourceUnit& unit = code.units[u];
    INFO(unit.label);
    whole += unit.text;
    if (u + 1 < code.units.size()) CHECK(unit.text.size() >= 16 * 1024);  // only the last may be small (codegen.cc kUnitBytes)
    CHECK(unit.label.rfind("step ", 0) == 0);
    for (const std::string& symbol : unit.symbols) {
      defined[symbol] += 1;
      CHECK(unit.text.find(" " + symbol + "(") != std::string::npos);
    }
  }
  CHECK(whole == code.source);
  CHECK(code.units.back().label.find(" to input copy") != std::string::npos);
  std::set<std::string> table_symbols{kInputCopySymbol};
  for (const Kernel& k : code.kernels.kernels) {
    CHECK(defined[k.symbol] == 1);
    table_symbols.insert(k.symbol);
  }
  CHECK(defined[kInputCopySymbol] == 1);
  CHECK(defined.size() == table_symbols.size());  // no unit defines a kernel the table does not name
}

TEST_CASE("codegen: the same step of every layer is one kernel, each table entry with its layer's buffers") {
  // 12 equal layers (matmul + gelu, then a norm), then one that differs
  // (another eps): the layers share their kernels, the last one has its own.
  std::string text = "program layers;\ndim B in [1, 64];\ninput x : f16[B, 256];\nparam w : f16[13, 256, 256];\n"
                     "output y : f16[B, 256];\nlet h = x;\nfor l in 0..12 {\n"
                     "  h = rmsnorm(gelu(h @ w[l]), eps = 1e-5);\n}\n"
                     "y = rmsnorm(gelu(h @ w[12]), eps = 2e-5);\n";
  const plan::Plan p = plan_of(test_programs::compile_text(text));
  const GeneratedCode code = generate_cuda(p);
  INFO(code.source);
  std::set<std::string> defined;
  for (const SourceUnit& unit : code.units) defined.insert(unit.symbols.begin(), unit.symbols.end());
  std::map<std::string, std::vector<const Kernel*>> entries_of;  // symbol -> the table entries that run it
  for (const Kernel& k : code.kernels.kernels) {
    CHECK(defined.count(k.symbol) == 1);
    CHECK(k.offsets.size() <= static_cast<size_t>(kMaxKernelOffsets));
    entries_of[k.symbol].push_back(&k);
  }
  // Each layer's steps' kernels are the first layer's: at most twice the
  // first layer's kernels (the last layer's own) and the input copy.
  REQUIRE(p.steps.size() >= 13);
  CHECK(defined.size() <= 2 * (code.kernels.kernels.size() / 13) + 1);
  int shared = 0;
  for (const auto& [symbol, entries] : entries_of) {
    if (entries.size() < 2) continue;
    shared += 1;
    CHECK(entries.size() == 12);  // the equal layers, not the last
    // Entries of one kernel: the same launch shape and offset count, at
    // other buffers from layer to layer (a norm's layers may take turns
    // with the same two arena buffers).
    std::set<std::vector<uint64_t>> offsets;
    for (const Kernel* k : entries) {
      CHECK(k->launch.block == entries[0]->launch.block);
      CHECK(k->launch.shared_bytes == entries[0]->launch.shared_bytes);
      CHECK(k->offsets.size() == entries[0]->offsets.size());
      CHECK(!k->offsets.empty());
      offsets.insert(k->offsets);
    }
    CHECK(offsets.size() >= 2);
  }
  CHECK(shared >= 2);
  // A step's offsets name its result's buffer and, for the matmul, its layer's weights.
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Kernel& own = own_kernel(code, s);
    const plan::Buffer& out = p.buffers.at(static_cast<size_t>(p.steps[s].result));
    INFO("step " << s);
    CHECK(std::find(own.offsets.begin(), own.offsets.end(), out.offset) != own.offsets.end());
    for (ir::ValueId v : p.steps[s].values)
      if (p.graph.node(v).op == Op::kMatMul) {
        const plan::Buffer& w = p.buffers.at(static_cast<size_t>(p.graph.node(v).args.at(1)));
        CHECK(w.region == plan::Region::kParams);
        CHECK(std::find(own.offsets.begin(), own.offsets.end(), w.offset) != own.offsets.end());
      }
  }
  // The shared kernels address their buffers through `offsets` only.
  CHECK(code.source.find("arena + offsets.at[0]") != std::string::npos);
  CHECK(code.source.find("params + offsets.at[") != std::string::npos);
  require_compiles(code);
}

TEST_CASE("KernelSharing: equal code up to offsets and value names is one kernel; anything else is not") {
  const auto kernel = [](const std::string& symbol, uint32_t shared_bytes = 0) {
    Kernel k;
    k.symbol = symbol;
    k.launch.shared_bytes = shared_bytes;
    return k;
  };
  const auto text = [](const std::string& symbol, int a, int b, uint64_t at_a, uint64_t at_b, const char* op = "+") {
    const std::string va = "v" + std::to_string(a), vb = "v" + std::to_string(b);
    return "// step " + std::to_string(a) + "\nextern \"C\" __global__ void " + symbol + std::string(kKernelParameters) +
           " {\n  const float* " + va + " = reinterpret_cast<const float*>(params + " + std::to_string(at_a) +
           "ull);  // %" + std::to_string(a) + "\n  float* " + vb + " = reinterpret_cast<float*>(arena + (" +
           std::to_string(at_b) + "ull + 64ull * (unsigned long long)args.dims[0]));\n  const float r" +
           std::to_string(b) + " = " + va + "[threadIdx.x] " + op + " gdl::v2;\n  " + vb + "[threadIdx.x] = r" +
           std::to_string(b) + ";\n}\n";
  };
  KernelSharing sharing;
  Kernel first = kernel("gdl_s0_add");
  const std::string code = sharing.add(text("gdl_s0_add", 1, 2, 4096, 256), first);
  CHECK(first.offsets == std::vector<uint64_t>{4096, 256});
  CHECK(code.find("params + offsets.at[0])") != std::string::npos);
  CHECK(code.find("arena + (offsets.at[1] + 64ull * (unsigned long long)args.dims[0])") != std::string::npos);
  CHECK(code.find("4096ull") == std::string::npos);
  // Other value ids, offsets, step comment: the first kernel, on its own offsets.
  Kernel second = kernel("gdl_s7_add");
  CHECK(sharing.add(text("gdl_s7_add", 9, 12, 8192, 512), second).empty());
  CHECK(second.symbol == "gdl_s0_add");
  CHECK(second.offsets == std::vector<uint64_t>{8192, 512});
  CHECK(sharing.shared() == 1);
  // Another operation, another launch's shared memory, or another name
  // outside the locals: kernels of their own.
  Kernel third = kernel("gdl_s8_mul");
  CHECK(!sharing.add(text("gdl_s8_mul", 1, 2, 4096, 256, "*"), third).empty());
  CHECK(third.symbol == "gdl_s8_mul");
  Kernel fourth = kernel("gdl_s9_add", 1024);
  CHECK(!sharing.add(text("gdl_s9_add", 1, 2, 4096, 256), fourth).empty());
  Kernel fifth = kernel("gdl_s10_add");
  std::string renamed = text("gdl_s10_add", 1, 2, 4096, 256);
  renamed.replace(renamed.find("gdl::v2"), 7, "gdl::v3");  // a library name is no local
  CHECK(!sharing.add(renamed, fifth).empty());
  CHECK(sharing.shared() == 1);
  // More addresses than gdl_offsets holds: the rest stay in the code.
  std::string many;
  for (int i = 0; i < kMaxKernelOffsets + 2; ++i) many += "p[" + std::to_string(i) + "] = arena + " + std::to_string(i * 16) + "ull;\n";
  Kernel sixth = kernel("gdl_s11_many");
  const std::string kept = sharing.add(many, sixth);
  CHECK(sixth.offsets.size() == static_cast<size_t>(kMaxKernelOffsets));
  CHECK(kept.find("arena + " + std::to_string(kMaxKernelOffsets * 16) + "ull;") != std::string::npos);
  CHECK(kept.find("arena + offsets.at[" + std::to_string(kMaxKernelOffsets - 1) + "];") != std::string::npos);
}

TEST_CASE("codegen: inputs and their views are read through gdl_args::inputs unless a run writes into them") {
  const plan::Plan p = plan_of(test_programs::compile_text(R"(program refs;
dim B in [1, 8];
input x : f32[B, 16];
input base : f32[8, 16];
input at : i32[B];
output y : f32[8, 16];
output z : f32[B, 8];
y = scatter(base, at, x, axis = 0);
z = x[:, 4:12] * 2.0;
)"));
  const std::vector<bool> clobbered = plan::inputs_clobbered_by_run(p);
  const std::vector<int> slots = plan::input_pointer_slots(p);
  const std::vector<ir::ValueId> inputs = p.graph.leaves(ir::Op::kInput);
  REQUIRE(inputs.size() == 3);
  const std::string source = generate_cuda(p).source;
  INFO(source);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO(p.graph.node(inputs[i]).name);
    CHECK(slots[static_cast<size_t>(inputs[i])] == (clobbered[i] ? -1 : static_cast<int>(i)));
    const bool through_slot = source.find("args.inputs[" + std::to_string(i) + "]") != std::string::npos;
    CHECK(through_slot == !clobbered[i]);
  }
  CHECK_FALSE(clobbered[0]);  // x is only read
  // The slice of x is a view: x's slot, at its place inside x.
  bool view_found = false;
  for (size_t v = 0; v < p.graph.nodes.size(); ++v)
    if (p.graph.nodes[v].op == ir::Op::kSlice && !p.graph.nodes[v].args.empty() && p.graph.nodes[v].args[0] == inputs[0]) {
      view_found = true;
      const bool computed = std::any_of(p.steps.begin(), p.steps.end(), [&](const plan::Step& st) {
        return std::find(st.values.begin(), st.values.end(), static_cast<ir::ValueId>(v)) != st.values.end();
      });
      CHECK(slots[v] == (computed ? -1 : 0));
    }
  CHECK(view_found);
}

TEST_CASE("compile_cuda: a whole source is one unit naming the kernels it defines") {
  const std::string source =
      "#include \"gdl_abi.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__(128) gdl_a(unsigned char* arena) {}\n"
      "extern \"C\" __global__ void gdl_b(unsigned char* arena) {}\n";
  auto module = compile_cuda(source, options_in("-"));
  INFO(module.status().message());
  REQUIRE(module.ok());
  REQUIRE(module->units.size() == 1);
  CHECK(module->units[0].symbols == std::vector<std::string>{"gdl_a", "gdl_b"});
  CHECK(module->units[0].ptx.find(".entry gdl_a(") != std::string::npos);
}

TEST_CASE("compile_cuda: NVRTC running out of memory is ResourceExhausted, caches nothing, and the next compile works") {
  TempDir dir;
  GeneratedCode code = generate_cuda(fused_plan());
  // One nvrtcCompileProgram gives the CUBIN and the PTX: fail it.
  {
    REQUIRE(testing::fail_call("nvrtcCompileProgram", 0).ok());
    auto failed = compile_cuda(code.source, options_in(dir.path.string()));
    CHECK_FALSE(testing::call_failure_pending("nvrtcCompileProgram"));
    testing::clear_call_failures();
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.status().code() == StatusCode::kResourceExhausted);
    CHECK(failed.status().message().find("NVRTC ran out of memory") != std::string::npos);
    CHECK(std::filesystem::is_empty(dir.path));  // neither an entry nor a temporary file
  }
  auto compiled = compile_cuda(code.source, options_in(dir.path.string()));
  INFO(compiled.status().message());
  REQUIRE(compiled.ok());
  CHECK_FALSE(compiled->from_cache);
  REQUIRE(compiled->units.size() == 1);
  CHECK_FALSE(compiled->units[0].cubin.empty());
  CHECK(testing::fail_call("nvrtcLinkProgram").code() == StatusCode::kNotFound);
}

TEST_CASE("compile_cuda: a broken source is a bug in gdl: Internal, with the NVRTC log; a bad arch is refused") {
  std::string broken =
      "#include \"gdl_abi.cuh\"\n"
      "extern \"C\" __global__ void gdl_s0_broken(unsigned char* arena, const unsigned char* params, gdl_args args) {\n"
      "  this_is_not_declared = 1;\n"
      "}\n";
  auto result = compile_cuda(broken, options_in("-"));
  REQUIRE(!result.ok());
  CHECK(result.status().code() == StatusCode::kInternal);  // CompileError means the user's program was rejected
  const std::string& m = result.status().message();
  INFO(m);
  CHECK(m.find("gdl_program.cu(3): error") != std::string::npos);
  CHECK(m.find("this_is_not_declared") != std::string::npos);

  CompileOptions bad = options_in("-");
  bad.arch = "hopper";
  auto refused = compile_cuda(broken, bad);
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gdl
