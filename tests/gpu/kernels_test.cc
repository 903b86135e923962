// The fast matmul and attention kernels (stdlib-kernels/gdl_matmul.cuh,
// gdl_attention.cuh) against the CPU reference, on a poisoned arena, in every
// float dtype: each kernel at shapes that select it (compiler/plan/
// kernel_choice.h) and at ragged ones; K split across blocks (partial tiles
// and tickets in the step's scratch) through graph replays, eager runs and
// changing run-time dims in one session, where a ticket left non-zero by one
// launch would leave the next one's output unwritten (poison) or wrong.
// The last case prints kernel times for the bench shapes (not checked).
#include <algorithm>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "program_impl.h"
#include "scoped_env.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

const std::vector<std::string> kFloats = {"f32", "f16", "bf16"};

// One session; for each entry of `dims_sequence`, fresh random inputs (params
// bound once), `replays` graph runs and one eager run, each on a poisoned
// arena and compared with the CPU reference.
void check_sequence(const Program& program, const std::string& what, const std::vector<std::vector<int64_t>>& dims_sequence,
                    int replays, const SessionOptions& options = {}, const RangeFor& range = {},
                    bool poison_padding = false) {
  std::mt19937_64 rng(seed_for(what));
  std::map<std::string, TensorData> params = random_bindings(program, dims_sequence.front(), rng, range);
  if (cpu_only) {
    CHECK(!reference(program, params).empty());
    return;
  }
  std::unique_ptr<Session> s = make_session(program, options, poison_padding);
  bind_all(*s, params);
  for (const std::vector<int64_t>& dims : dims_sequence) {
    std::map<std::string, TensorData> tensors = random_bindings(program, dims, rng, range);
    for (const TensorInfo& p : program.params()) tensors[p.name] = params[p.name];  // params stay bound
    bind_inputs(*s, tensors);
    std::map<std::string, TensorData> want = reference(program, tensors);
    std::string at = what + " dims";
    for (int64_t d : dims) at += " " + std::to_string(d);
    for (int r = 0; r < replays; ++r) CHECK(expect_match(run_and_read(*s, false), want, at + ", graph run " + std::to_string(r)));
    CHECK(expect_match(run_and_read(*s, true), want, at + ", eager run"));
  }
}

}  // namespace

TEST_CASE("kernels: matmul, rows kernel or tiled kernel chosen at run time, every row count") {
  // K = 1000 splits into 15 parts of 96 (the last four empty); N = 1000 is
  // 15 strips and a ragged one (rows) or 7 tiles and a ragged one (tiled).
  const std::string aligned =
      "program mm;\ndim B in [1, 64];\ninput x : {T}[B, 1000];\nparam w : {T}[1000, 1000];\n"
      "output y : {T}[B, 1000];\ny = x @ w;\n";
  // K and N not multiples of 8: element-by-element loads of w.
  const std::string ragged =
      "program mm;\ndim B in [1, 64];\ninput x : {T}[B, 333];\nparam w : {T}[333, 77];\n"
      "output y : {T}[B, 77];\ny = x @ w;\n";
  for (const std::string& t : kFloats)
    for (const std::string* text : {&aligned, &ragged}) {
      Program program = compile_text(with_dtype(*text, t));
      for (int64_t b : {1, 3, 8, 17, 64}) {
        INFO("matmul " << t << (text == &aligned ? " aligned" : " ragged") << " B = " << b);
        CHECK(check_program(program, seed_for("mm/" + t + std::to_string(b) + (text == &aligned ? "a" : "r")), {b}));
      }
    }
}

TEST_CASE("kernels: matmul, rows kernel only (at most 8 rows), batch folded into the rows") {
  const std::string rows =
      "program mm;\ndim B in [1, 8];\ninput x : {T}[B, 2048];\nparam w : {T}[2048, 1536];\n"
      "output y : {T}[B, 1536];\ny = x @ w;\n";
  const std::string folded =
      "program mm;\ndim B in [1, 4];\ninput x : {T}[B, 2, 96];\nparam w : {T}[96, 200];\n"
      "output y : {T}[B, 2, 200];\ny = x @ w;\n";
  for (const std::string& t : kFloats) {
    Program p1 = compile_text(with_dtype(rows, t));
    for (int64_t b : {1, 3, 8}) {
      INFO("rows " << t << " B = " << b);
      CHECK(check_program(p1, seed_for("rows/" + t + std::to_string(b)), {b}));
    }
    Program p2 = compile_text(with_dtype(folded, t));
    for (int64_t b : {1, 3, 4}) {
      INFO("folded " << t << " B = " << b);
      CHECK(check_program(p2, seed_for("folded/" + t + std::to_string(b)), {b}));
    }
  }
}

TEST_CASE("kernels: matmul, tiled kernels (tensor cores, f32 FMA) aligned, ragged and batch-broadcast") {
  const std::vector<std::string> texts = {
      // 8 tiles, K split 8 (mma) or 16 (simt), every load 16 bytes wide
      "program mm;\ninput a : {T}[128, 512];\nparam b : {T}[512, 256];\noutput y : {T}[128, 256];\ny = a @ b;\n",
      // ragged everywhere: M = 200, K = 300 (split 4 or 9), N = 130
      "program mm;\ninput a : {T}[200, 300];\nparam b : {T}[300, 130];\noutput y : {T}[200, 130];\ny = a @ b;\n",
      // 3 x 17 rows folded against a shared b, K = 33, N = 9
      "program mm;\ninput a : {T}[3, 17, 33];\nparam b : {T}[33, 9];\noutput y : {T}[3, 17, 9];\ny = a @ b;\n",
      // b batched: one tile per batch entry
      "program mm;\ninput a : {T}[2, 5, 64];\ninput b : {T}[2, 64, 40];\noutput y : {T}[2, 5, 40];\ny = a @ b;\n",
      // a broadcast over b's batch
      "program mm;\ninput a : {T}[5, 40];\ninput b : {T}[3, 40, 24];\noutput y : {T}[3, 5, 24];\ny = a @ b;\n",
      // both broadcast, rank 4
      "program mm;\ninput a : {T}[2, 1, 4, 16];\ninput b : {T}[3, 16, 8];\noutput y : {T}[2, 3, 4, 8];\ny = a @ b;\n",
      // one row of a tiled matmul (b batched), K = 1
      "program mm;\ninput a : {T}[4, 1, 1];\ninput b : {T}[4, 1, 70];\noutput y : {T}[4, 1, 70];\ny = a @ b;\n",
  };
  for (const std::string& t : kFloats)
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO("tiled " << t << " case " << i << ":\n" << with_dtype(texts[i], t));
      Program program = compile_text(with_dtype(texts[i], t));
      CHECK(check_program(program, seed_for("tiled/" + t + std::to_string(i)), {}));
    }
}

// The shapes of bench/sweep.py's rows, small: odd and even row counts on
// either side of every kernel and tile boundary (rows kernel, tensor-core
// tiles of 16, 32 and 64 rows, two bands of 64), K and N not multiples of
// 128 and not square, b as stored and transposed, with a bias and gelu, a
// norm prologue and a residual. With cuBLASLt (f16/bf16 from 2 rows, f32
// from 17) and without it (GDL_MATMUL_LIBRARY=0: the generated tiles at
// every row count, as where the library cannot run).
TEST_CASE("kernels: matmul at sweep-like shapes, every tile height, odd rows, K and N off 128") {
  const std::string text =
      "program mm;\ndim M in [1, 100] buckets(1, 2, 7, 9, 12, 16, 24, 33, 48, 100);\n"
      "input x : {T}[M, 1000];\nparam w : {T}[1000, 640];\nparam wt : {T}[640, 1000];\nparam bias : {T}[640];\n"
      "input h : {T}[M, 640];\nparam sq : {T}[640, 640];\n"
      "output y : {T}[M, 640];\noutput z : {T}[M, 640];\noutput r : {T}[M, 640];\n"
      "y = gelu(x @ w + bias);\n"
      "z = layernorm(x, eps = 1e-5) @ transpose(wt);\n"
      "r = h + gelu(rmsnorm(h, eps = 1e-5) @ sq + bias);\n";
  for (const char* library : {"1", "0"})
    for (const std::string& t : kFloats) {
      testing::ScopedEnv knob("GDL_MATMUL_LIBRARY", library);
      Program program = compile_text(with_dtype(text, t));
      if (std::string(library) == "0") REQUIRE(library_steps_at(program, {16}) == 0);
      for (int64_t m : {1, 2, 5, 9, 12, 16, 20, 33, 47, 100}) {
        INFO("sweep-like " << t << " M = " << m << ", GDL_MATMUL_LIBRARY=" << library);
        CHECK(check_program(program, seed_for("sweep-like/" + t + std::to_string(m)), {m}));
      }
    }
}

// The kernel symbols one eager run of a session takes at these dims (profile_nodes).
std::vector<std::string> kernels_run(const Program& program, const std::vector<int64_t>& dims,
                                     const SessionOptions& options = {}) {
  std::mt19937_64 rng(seed_for("kernels_run"));
  std::unique_ptr<Session> s = make_session(program, options);
  bind_all(*s, random_bindings(program, dims, rng));
  Expected<std::vector<NodeTime>> nodes = profile_nodes(*s, 1);
  REQUIRE(nodes.ok());
  std::vector<std::string> symbols;
  for (const NodeTime& n : *nodes) symbols.push_back(n.kernel);
  return symbols;
}

bool any_library_kernel(const std::vector<std::string>& symbols) {
  return std::any_of(symbols.begin(), symbols.end(),
                     [](const std::string& k) { return k.find("_library") != std::string::npos; });
}

size_t gdl::gpu_test::library_steps_at(const Program& program, const std::vector<int64_t>& dims) {
  const KernelTable& table = program.internals().kernels();
  size_t n = 0;
  for (const std::vector<int>& choices : table.step_choices) {
    const Kernel& k = table.kernels.at(static_cast<size_t>(choices.front()));
    n += k.library.active && kernel_applies(k, dims);
  }
  return n;
}

TEST_CASE("kernels: cuBLASLt computes the product above the rows kernel's rows, the step's kernel its epilogue") {
  // Every operand form the library call takes: b as stored, transposed, a
  // column window of a wider b; a transposed; a batch folded into the rows;
  // a norm in front (layernorm with weight and bias, rmsnorm without: the
  // norm's own kernel before the call); epilogues with a bias, gelu, a
  // residual and casts. One session goes
  // back and forth across the line (a graph per bucket, some with cuBLASLt
  // nodes, some without: f32 from 17 rows, f16/bf16 from 2), replaying each graph.
  const std::string text =
      "program lib;\ndim M in [1, 300] buckets(8, 16, 17, 32, 48, 100, 300);\n"
      "input x : {T}[M, 1000];\nparam w : {T}[1000, 640];\nparam wt : {T}[640, 1000];\nparam bias : {T}[640];\n"
      "param wide : {T}[1000, 1024];\ninput x3 : {T}[2, M, 96];\nparam w3 : {T}[96, 72];\n"
      "input at : {T}[200, 40];\nparam w4 : {T}[200, 136];\n"
      "input h : {T}[M, 640];\nparam g : {T}[640];\nparam beta : {T}[640];\nparam sq : {T}[640, 640];\n"
      "output y : {T}[M, 640];\noutput z : {T}[M, 640];\noutput u : {T}[M, 256];\noutput v : {T}[2, M, 72];\n"
      "output q : {T}[40, 136];\noutput r : {T}[M, 640];\noutput s : {T}[M, 640];\n"
      "y = gelu(x @ w + bias);\n"
      "z = cast(cast(x @ transpose(wt), f32) * 0.5, {T}) + y;\n"
      "u = (x @ wide)[:, 384:640];\n"
      "v = x3 @ w3;\n"
      "q = transpose(at) @ w4;\n"
      "r = h + gelu(layernorm(h, g, beta, eps = 1e-5) @ sq + bias);\n"
      "s = rmsnorm(x, eps = 1e-5) @ w;\n";
  for (const std::string& t : kFloats) {
    const std::string program_text = with_dtype(text, t);
    INFO(t << ":\n" << program_text);
    Program program = compile_text(program_text);
    check_sequence(program, "library/" + t, {{48}, {8}, {300}, {17}, {16}, {100}, {33}, {48}}, 2);
    for (int64_t m : {8, 16, 17, 48}) {
      INFO("M = " << m);
      const size_t expected = library_steps_at(program, {m});
      // y, z, u, r, s at M rows, v at 2 M and q at 40: all of them from 2 rows
      // in f16/bf16; in f32 those above 16 rows (q, and v from 9).
      CHECK(expected == (t != "f32" || m > 16 ? 7u : m > 8 ? 2u : 1u));
      if (cpu_only) continue;
      const std::vector<std::string> run = kernels_run(program, {m});
      CHECK(static_cast<size_t>(std::count_if(run.begin(), run.end(), [](const std::string& k) {
              return k.find("_library") != std::string::npos;
            })) == expected);
    }
  }
}

TEST_CASE("kernels: rows served by node updates keep the generated matmul kernels") {
  // cuBLASLt's call is captured with its rows: a session that serves them
  // by node updates (one graph, the rows changing inside it) runs the
  // generated kernels, correct at every count; the same program served by
  // buckets takes cuBLASLt above the rows kernel's rows.
  const std::string text =
      "program lib;\ndim M in [1, 200] policy(update);\ninput x : {T}[M, 512];\nparam w : {T}[512, 512];\n"
      "param bias : {T}[512];\noutput y : {T}[M, 512];\ny = x + gelu(x @ w + bias);\n";
  SessionOptions buckets;
  buckets.dim_policy = DimPolicyChoice::kBuckets;
  for (const std::string& t : kFloats) {
    Program program = compile_text(with_dtype(text, t));
    check_sequence(program, "update/" + t, {{40}, {200}, {3}, {77}}, 2);
    check_sequence(program, "update-as-buckets/" + t, {{40}, {200}, {3}, {77}}, 2, buckets);
    if (cpu_only) continue;
    CHECK_FALSE(any_library_kernel(kernels_run(program, {100})));
    CHECK(any_library_kernel(kernels_run(program, {100}, buckets)));
  }
}

TEST_CASE("kernels: matmul epilogues run once per element after the split parts are added") {
  const std::string residual =
      "program mm;\ndim B in [1, 64];\ninput x : {T}[B, 512];\nparam w : {T}[512, 512];\nparam bias : {T}[512];\n"
      "output y : {T}[B, 512];\ny = x + gelu(x @ w + bias);\n";
  const std::string widened =
      "program mm;\ndim B in [1, 64];\ninput x : {T}[B, 512];\nparam w : {T}[512, 300];\n"
      "output y : f32[B, 300];\ny = cast(x @ w, f32) * 2.0 - 1.0;\n";
  // The widened output holds the product rounded to f16/bf16, which a sum
  // in another order may round one unit the other way, far above f32's
  // tolerance: its inputs are multiples of 1/8, so every sum is exact in
  // f32 and every kernel (cuBLASLt's too) rounds the same value.
  const Adjust eighths = [](std::map<std::string, TensorData>& tensors) {
    for (auto& [name, tensor] : tensors) {
      const size_t n = tensor.bytes.size() / element_size(tensor.dtype);
      std::vector<double> v = decode_elements(tensor.dtype, tensor.bytes.data(), n);
      for (double& e : v) e = std::round(e * 8) / 8;
      tensor.bytes = encode_elements(tensor.dtype, v);
    }
  };
  for (const std::string& t : kFloats)
    for (const std::string* text : {&residual, &widened}) {
      Program program = compile_text(with_dtype(*text, t));
      for (int64_t b : {1, 8, 17, 64}) {
        INFO("epilogue " << t << " B = " << b << ":\n" << with_dtype(*text, t));
        CHECK(check_program(program, seed_for("epi/" + t + std::to_string(b) + (text == &residual ? "r" : "w")), {b},
                            {}, {}, text == &widened ? eighths : Adjust{}));
      }
    }
}

TEST_CASE("kernels: a norm fused into its matmul's prologue, on every kernel, every row count") {
  // Each program is one kernel node (but for f32 in the first): the rows
  // kernel normalizes a as it stages it, the tiled kernels fold the norm
  // into the sum (gdl_matmul.cuh), with split parts in most cases.
  const std::vector<std::string> texts = {
      // rows kernel or tiled kernel at run time; layernorm with weight and
      // bias and the W2 epilogue; K = N = 333 are not whole 16-byte vectors
      "program pro;\ndim B in [1, 64];\ninput x : {T}[B, 333];\nparam g : {T}[333];\nparam beta : {T}[333];\n"
      "param w : {T}[333, 333];\nparam bias : {T}[333];\noutput y : {T}[B, 333];\n"
      "y = x + gelu(layernorm(x, g, beta, eps = 1e-5) @ w + bias);\n",
      // rows kernel only, rmsnorm with a weight, K split across blocks
      "program pro;\ndim B in [1, 8];\ninput x : {T}[B, 2048];\nparam g : {T}[2048];\nparam w : {T}[2048, 512];\n"
      "output y : {T}[B, 512];\ny = rmsnorm(x, g) @ w;\n",
      // tiled kernel, layernorm without weight, 64-row tiles and a ragged one
      "program pro;\ninput x : {T}[200, 256];\nparam w : {T}[256, 130];\noutput y : {T}[200, 130];\n"
      "y = layernorm(x) @ w;\n",
      // b batched: a's rows per batch entry
      "program pro;\ninput x : {T}[2, 5, 64];\ninput b : {T}[2, 64, 40];\noutput y : {T}[2, 5, 40];\n"
      "y = rmsnorm(x) @ b;\n",
      // one fixed row (a one-row register tile, f32 included), x far from
      // zero so that the one-pass statistics must not cancel, N ragged
      "program pro;\ninput x : {T}[1, 4096];\nparam g : {T}[4096];\nparam beta : {T}[4096];\n"
      "param w : {T}[4096, 200];\noutput y : {T}[1, 200];\ny = layernorm(x, g, beta, eps = 1e-5) @ w;\n",
  };
  const std::vector<std::vector<int64_t>> batches = {{1, 3, 16, 17, 64}, {1, 5, 8}, {0}, {0}, {0}};
  const RangeFor far_from_zero = [](const TensorInfo& info) {
    ValueRange r;
    if (info.name == "x") r = ValueRange{20.0, 21.0, true};
    return r;
  };
  for (const std::string& t : kFloats)
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = with_dtype(texts[i], t);
      INFO("prologue " << t << " case " << i << ":\n" << text);
      Program program = compile_text(text);
      // f32 with B up to 64: the rows kernel holds 16 rows, no prologue (fuse.cc).
      CHECK(program.node_count() == (t == "f32" && i == 0 ? 2u : 1u));
      for (int64_t b : batches[i]) {
        INFO("B = " << b);
        std::vector<int64_t> dims;
        if (b > 0) dims.push_back(b);
        CHECK(check_program(program, seed_for("prologue/" + t + std::to_string(i) + "/" + std::to_string(b)), dims,
                            i == 4 ? far_from_zero : RangeFor{}));
      }
    }
}

TEST_CASE("kernels: split matmuls replay correctly while the row count changes in one session") {
  const std::string text =
      "program mm;\ndim B in [1, 64];\ninput x : {T}[B, 1000];\nparam w : {T}[1000, 700];\nparam bias : {T}[700];\n"
      "output y : {T}[B, 700];\ny = relu(x @ w + bias);\n";
  for (const std::string& t : kFloats) {
    Program program = compile_text(with_dtype(text, t));
    for (DimPolicyChoice policy : {DimPolicyChoice::kBuckets, DimPolicyChoice::kUpdate}) {
      SessionOptions options;
      options.dim_policy = policy;
      INFO("replays " << t << (policy == DimPolicyChoice::kUpdate ? " update" : " buckets"));
      check_sequence(program, "replay/" + t, {{3}, {17}, {1}, {64}, {3}, {8}}, 3, options);
    }
  }
}

TEST_CASE("kernels: a matmul over a run-time K sums its valid positions only") {
  const std::string text =
      "program mm;\ndim T in [1, 64];\ninput a : {T}[8, T];\ninput b : {T}[T, 24];\noutput y : {T}[8, 24];\ny = a @ b;\n";
  for (const std::string& t : kFloats) {
    Program program = compile_text(with_dtype(text, t));
    SessionOptions options;
    options.dim_policy = DimPolicyChoice::kBuckets;  // served by updates if buckets cannot serve it
    INFO("run-time K " << t);
    check_sequence(program, "runtime-k/" + t, {{37}, {64}, {1}, {33}}, 2, options, {},
                   /*poison_padding=*/true);  // padding past the valid K is NaN
  }
}

TEST_CASE("kernels: attention split over the positions, every length, every dtype") {
  const std::string text =
      "program att;\ninput q : {T}[32, 128];\nparam k : {T}[32, {P}, 128];\nparam v : {T}[32, {P}, 128];\n"
      "input len : i32;\noutput o : {T}[32, 128];\no = attention(q, k, v, len);\n";
  for (const std::string& t : kFloats)
    for (int64_t positions : {1, 100, 4096}) {
      Program program = compile_text(substitute(with_dtype(text, t), "{P}", std::to_string(positions)));
      for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{37}, positions, positions + 5}) {
        INFO("attention " << t << " T = " << positions << " len = " << len);
        const RangeFor range = int_tensor_is("len", len);
        CHECK(check_program(program, seed_for("att/" + t + std::to_string(positions) + "/" + std::to_string(len)), {},
                            range));
      }
    }
}

TEST_CASE("kernels: attention with head dims that are not whole 16-byte vectors") {
  const std::string text =
      "program att;\ninput q : {T}[2, 3, 36];\nparam k : {T}[2, 3, 100, 36];\nparam v : {T}[2, 3, 100, 20];\n"
      "input len : i32;\noutput o : {T}[2, 3, 20];\no = attention(q, k, v, len, scale = 0.3);\n";
  for (const std::string& t : kFloats) {
    Program program = compile_text(with_dtype(text, t));
    for (int64_t len : {1, 37, 100}) {
      INFO("attention odd dims " << t << " len = " << len);
      const RangeFor range = int_tensor_is("len", len);
      CHECK(check_program(program, seed_for("att-odd/" + t + std::to_string(len)), {}, range));
    }
  }
}

TEST_CASE("kernels: attention with head dims 256 and 512, every dtype") {
  const std::string text =
      "program att;\ninput q : {T}[3, {D}];\nparam k : {T}[3, 300, {D}];\nparam v : {T}[3, 300, {D}];\n"
      "input len : i32;\noutput o : {T}[3, {D}];\no = attention(q, k, v, len, scale = 0.04);\n";
  for (const std::string& t : kFloats)
    for (int64_t d : {256, 512}) {
      Program program = compile_text(substitute(with_dtype(text, t), "{D}", std::to_string(d)));
      for (int64_t len : {1, 200, 300}) {
        INFO("attention " << t << " D = " << d << " len = " << len);
        const RangeFor range = int_tensor_is("len", len);
        CHECK(check_program(program, seed_for("att-wide/" + t + std::to_string(d) + "/" + std::to_string(len)), {},
                            range));
      }
    }
}

TEST_CASE("kernels: attention replays with lengths changing between runs in one session") {
  const std::string text =
      "program att;\ninput q : {T}[32, 128];\nparam k : {T}[32, 4096, 128];\nparam v : {T}[32, 4096, 128];\n"
      "input len : i32;\noutput o : {T}[32, 128];\no = attention(q, k, v, len);\n";
  for (const std::string& t : kFloats) {
    Program program = compile_text(with_dtype(text, t));
    std::mt19937_64 rng(seed_for("att-replay/" + t));
    std::map<std::string, TensorData> tensors = random_bindings(program, {}, rng);
    if (cpu_only) {
      CHECK(!reference(program, tensors).empty());
      continue;
    }
    std::unique_ptr<Session> s = make_session(program);
    bind_all(*s, tensors);
    const TensorInfo* q_info = program.find_input("q");
    REQUIRE(q_info != nullptr);
    for (int len : {37, 4096, 37, 1, 4101, 0, 2000, 2000}) {
      tensors["q"] = random_tensor(*q_info, {}, rng, {});
      tensors["len"] = TensorData{ElementType::kI32, {}, encode_elements(ElementType::kI32, std::vector<double>{double(len)})};
      bind_inputs(*s, tensors);
      std::map<std::string, TensorData> want = reference(program, tensors);
      for (int r = 0; r < 3; ++r)
        CHECK(expect_match(run_and_read(*s, false), want, "attention " + t + " len " + std::to_string(len) + " replay " +
                                                              std::to_string(r)));
      CHECK(expect_match(run_and_read(*s, true), want, "attention " + t + " len " + std::to_string(len) + " eager"));
    }
  }
}

TEST_CASE("kernels: device time of the bench shapes (printed for the record, not checked)") {
  if (cpu_only) return;
  struct Case {
    std::string name, text;
    std::vector<int64_t> dims;
    double bytes;  // the fewest bytes the step must move (weights or K and V)
  };
  const double weights16 = 4096.0 * 4096 * 2;
  std::vector<Case> cases = {
      {"attention nh=32 T=4096 D=128 f16, len 4096",
       "program att;\ninput q : f16[32, 128];\nparam k : f16[32, 4096, 128];\nparam v : f16[32, 4096, 128];\n"
       "input len : i32;\noutput o : f16[32, 128];\no = attention(q, k, v, len);\n",
       {}, 2.0 * 32 * 4096 * 128 * 2},
  };
  for (const char* t : {"f16", "bf16", "f32"})
    for (int64_t b : {1, 8, 64})
      cases.push_back({std::string("matmul [") + std::to_string(b) + ", 4096] @ [4096, 4096] " + t + " (B in [1, 64])",
                       std::string("program mm;\ndim B in [1, 64];\ninput x : ") + t + "[B, 4096];\nparam w : " + t +
                           "[4096, 4096];\noutput y : " + t + "[B, 4096];\ny = x @ w;\n",
                       {b}, std::string(t) == "f32" ? 2 * weights16 : weights16});
  for (const char* t : {"f16", "f32"})
    cases.push_back({std::string("matmul [1, 1024] @ [1024, 1024] ") + t,
                     std::string("program mm;\ndim B in [1, 64];\ninput x : ") + t + "[B, 1024];\nparam w : " + t +
                         "[1024, 1024];\noutput y : " + t + "[B, 1024];\ny = x @ w;\n",
                     {1}, 1024.0 * 1024 * (std::string(t) == "f32" ? 4 : 2)});
  for (const Case& c : cases) {
    Program program = compile_text(c.text);
    std::mt19937_64 rng(seed_for(c.name));
    RangeFor range = [](const TensorInfo& info) {
      ValueRange r;
      if (info.name == "len") r.int_lo = r.int_hi = 4096;
      return r;
    };
    std::map<std::string, TensorData> tensors = random_bindings(program, c.dims, rng, range);
    std::unique_ptr<Session> s = make_session(program);
    bind_all(*s, tensors);
    GDL_REQUIRE_OK(s->run());
    Expected<std::vector<NodeTime>> times = profile_nodes(*s, 30);
    REQUIRE(times.ok());
    for (const NodeTime& n : *times)
      MESSAGE(c.name << ": " << n.kernel << " " << n.device_us << " us, " << c.bytes / (n.device_us * 1e-6) / 1e12
                     << " TB/s over the fewest bytes");
  }
}
