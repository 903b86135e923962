// Graph-safe random numbers: rand(shape, dtype = f32) draws uniforms in
// [0, 1), randn(shape, dtype = f32) standard normals, from Philox-4x32-10
// (stdlib-kernels/gdl_random.cuh). Every random op reads the program's
// `rng.state` (i32[4]: seed lo, seed hi, offset lo, offset hi; a state the
// lowering declares at the first random op) and owns a compile-time slice
// of the counters past the offset (attrs.ints[0], its base: enough for its
// largest shape). rng_advance, the state's update, adds the run's total
// (attrs.ints[0]) to the offset in place, after every random op: each run
// draws new numbers with no host work and no node update, and a seed
// (Session::seed_rng) reproduces the stream. Element i uses word i % 4 of
// counter offset + base + i / 4 (a normal: words 2i and 2i + 1), in the
// flat row-major order of the value's layout. The CPU rules compute the
// same integer words bit for bit; uniforms are then exact in every float
// dtype, normals agree within the dtype's tolerance.
//
// bernoulli(p, shape) and dropout(x, p) have entries here for their
// parameters and type rules only: lowering writes them as rand and
// elementwise ops (OpDef::expansion, Lowerer::random), so every draw goes
// through rand's definition and counters.
#include <cmath>
#include <cstdint>

#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "internal_error.h"
#include "ops/families.h"

namespace gdl::ops {
namespace {

using ir::Node;
using ir::Op;

uint32_t philox_word(uint64_t counter, uint32_t key0, uint32_t key1, int word) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c0, p1 = uint64_t{0xCD9E8D57} * c2;
    const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ key0, next2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ key1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = next0;
    c2 = next2;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  const uint32_t words[4] = {c0, c1, c2, c3};
  return words[word];
}

// The rng state's words as the kernels read them (i32 bit patterns).
struct RngState {
  uint32_t key0, key1;
  uint64_t offset;
};

RngState rng_state(const HostTensor& s) {
  GDL_INTERNAL_ASSERT(s.data.size() == 4, "the rng state holds four words");
  auto word = [&](size_t i) { return static_cast<uint32_t>(static_cast<int32_t>(s.data[i])); };
  return {word(0), word(1), (uint64_t{word(3)} << 32) | word(2)};
}

double uniform_from(uint32_t word) { return static_cast<double>(word >> 8) * 0x1p-24; }

void eval_random(const Node& n, const EvalArgs& in, HostTensor& out) {
  const RngState s = rng_state(*in.values[0]);
  const auto base = static_cast<uint64_t>(n.attrs.ints.at(0));
  auto word = [&](uint64_t j) { return philox_word(s.offset + base + j / 4, s.key0, s.key1, static_cast<int>(j % 4)); };
  for (size_t i = 0; i < out.data.size(); ++i) {
    if (n.op == Op::kRandUniform) {
      out.data[i] = uniform_from(word(i));
    } else {
      const double u1 = static_cast<double>((word(2 * i) >> 8) + 1) * 0x1p-24, u2 = uniform_from(word(2 * i + 1));
      out.data[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
  }
}

void eval_rng_advance(const Node& n, const EvalArgs& in, HostTensor& out) {
  const HostTensor& s = *in.values[0];
  out.data = s.data;
  const RngState state = rng_state(s);
  const uint64_t offset = state.offset + static_cast<uint64_t>(n.attrs.ints.at(0));
  out.data[2] = static_cast<int32_t>(static_cast<uint32_t>(offset));
  out.data[3] = static_cast<int32_t>(static_cast<uint32_t>(offset >> 32));
}

// The shape a draw fills, at `slot`: every extent written out.
std::optional<TypeResult> drawn_shape(TypeQuery& q, size_t slot, Shape* s) {
  if (!q.shape(slot, s)) return TypeResult::failed();
  for (const Dim& d : *s)
    if (!d.is_runtime() && d.extent < 0)
      return TypeResult(q.error(static_cast<int>(slot), q.what() + " needs every extent, not -1", "write the shape out"));
  return std::nullopt;
}

TypeResult infer_random(TypeQuery& q) {
  Shape s;
  if (std::optional<TypeResult> bad = drawn_shape(q, 0, &s)) return *bad;
  DType t = DType::kF32;
  if (q.given(1) && !q.dtype(1, &t)) return TypeResult::failed();
  if (!is_float(t)) return q.error(1, q.what() + " draws floats, not " + std::string(dtype_name(t)), "cast the result");
  return TensorType{t, s};
}

// bernoulli(p, shape): a bool mask, true with probability p (a
// compile-time number in [0, 1]); attrs.value keeps p.
TypeResult infer_bernoulli(TypeQuery& q) {
  double p = 0;
  if (!q.number(0, "p", &p)) return TypeResult::failed();
  if (!(p >= 0 && p <= 1))
    return q.error(0, "bernoulli's p must be in [0, 1], got " + number_text(p), "p is the probability of true");
  Shape s;
  if (std::optional<TypeResult> bad = drawn_shape(q, 1, &s)) return *bad;
  q.attrs().value = p;
  return TensorType{DType::kBool, s};
}

// dropout(x, p): x's type; p, the probability of dropping an element, is a
// compile-time number in [0, 1) (p = 1 would scale by 1 / 0).
TypeResult infer_dropout(TypeQuery& q) {
  const TensorType* x = q.tensor(0, "dropout");
  if (!x) return TypeResult::failed();
  if (!is_float(x->dtype))
    return q.error(0, "dropout needs a float tensor, got " + q.text(*x), "convert it with cast(x, f32)");
  double p = 0;
  if (!q.number(1, "p", &p)) return TypeResult::failed();
  if (!(p >= 0 && p < 1))
    return q.error(1, "dropout's p must be in [0, 1), got " + number_text(p),
                   "p is the probability of dropping an element; the kept ones are scaled by 1 / (1 - p)");
  q.attrs().value = p;
  return *x;
}

TypeResult infer_rng_advance(TypeQuery& q) {
  const TensorType* s = q.tensor(0, "rng_advance");
  if (!s) return TypeResult::failed();
  if (*s != TensorType{DType::kI32, {Dim::constant(4)}}) return q.error(0, "the rng state is i32[4]");
  return *s;
}

std::string counters_attr(const ir::Attrs& a) { return "counters=" + ints_text(a.ints); }

// Element i of the result inside the elementwise loop, rounded to the
// draw's dtype as every value is: a fused consumer of an f16 or bf16 draw
// must see the value the CPU reference rounds to, not the float it came from.
std::string element_random(StepEmitter& e, ir::ValueId v) {
  const Node& n = e.g.node(v);
  const char* draw = n.op == Op::kRandUniform ? "gdl::random_uniform" : "gdl::random_normal";
  return "    const float r" + std::to_string(v) + " = gdl::fit<" + storage_type(n.type.dtype) + ">(" + draw + "(" +
         e.pointer(n.args.at(0)) + ", " + std::to_string(n.attrs.ints.at(0)) + "ull, (unsigned long long)i));\n";
}

std::string emit_rng_advance(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const std::string out = e.result_pointer();
  std::string body = "  // rng_advance: the next run draws the counters after this run's\n";
  body += "  if (blockIdx.x == 0 && threadIdx.x == 0) {\n";
  body += "    const unsigned long long offset = ((unsigned long long)(unsigned int)" + out + "[3] << 32 | (unsigned int)" +
          out + "[2]) + " + std::to_string(n.attrs.ints.at(0)) + "ull;\n";
  body += "    " + out + "[2] = (int)(unsigned int)offset;\n";
  body += "    " + out + "[3] = (int)(unsigned int)(offset >> 32);\n";
  body += "  }\n";
  rule = LaunchRule{};
  rule.work = {Dim::constant(1)};
  rule.items_per_block = 1;
  rule.block = 32;
  return body;
}

OpDef random_op(Op op, const char* callable) {
  OpDef d;
  d.op = op;
  d.fusion = FusionClass::kDataMovement;
  d.callable = callable;
  d.params = {"shape", "dtype"};
  d.operands = 0;
  d.required = 1;
  d.min_args = d.max_args = 1;  // the rng state, which lowering passes
  d.infer = infer_random;
  d.attr_text = counters_attr;
  d.eval = eval_random;
  d.element = element_random;
  d.joins_elementwise = true;
  return d;
}

// A call lowering writes around a uniform draw.
OpDef expansion(Expansion kind, const char* callable, std::vector<const char*> params, size_t operands, InferFn infer) {
  OpDef d;
  d.op = Op::kRandUniform;
  d.expansion = kind;
  d.fusion = FusionClass::kDataMovement;
  d.callable = callable;
  d.params = std::move(params);
  d.operands = operands;
  d.required = d.params.size();
  d.infer = infer;
  return d;
}

}  // namespace

void add_random_ops(std::vector<OpDef>& defs) {
  defs.push_back(random_op(Op::kRandUniform, "rand"));
  defs.push_back(random_op(Op::kRandNormal, "randn"));
  defs.push_back(expansion(Expansion::kBernoulli, "bernoulli", {"p", "shape"}, 0, infer_bernoulli));
  defs.push_back(expansion(Expansion::kDropout, "dropout", {"x", "p"}, 1, infer_dropout));
  OpDef advance;
  advance.op = Op::kRngAdvance;
  advance.fusion = FusionClass::kUpdate;
  advance.params = {"state", "counters"};
  advance.operands = advance.required = 1;
  advance.min_args = advance.max_args = 1;
  advance.infer = infer_rng_advance;
  advance.attr_text = counters_attr;
  advance.eval = eval_rng_advance;
  advance.kernel = emit_rng_advance;
  defs.push_back(advance);
}

}  // namespace gdl::ops
