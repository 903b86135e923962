// matmul(a, b) and a @ b: [..., M, K] @ [..., K, N] -> [..., M, N], the
// batch dims broadcast like numpy. The CPU rule and every kernel sum the
// first valid positions of K only (all of them unless K is a run-time dim
// that buckets pad).
//
// Kernels (plan/kernel_choice.h picks one by the shapes and the device's
// figures; gdl_matmul*.cuh): the memory-bound rows kernel for few rows
// against a shared b, the tensor-core tile kernel (f16, bf16), the SIMT tile
// kernel (f32), the general kernel (anything else). A matmul whose rows are
// known only at run time and may fall on either side of the rows kernel's
// limit gets both as two kernels (the large one a second choice in the
// kernel table): measured on the H200, one kernel holding both paths made
// each path's speed depend on the other's code (docs/performance.md).
// Elementwise values after the matmul form its epilogue, a norm before it
// its prologue (plan/fuse.cc); a run of square matmul steps also runs as
// one chain kernel (codegen/chain_kernel.cc), whose steps this emitter
// writes as well (Variant::kChainStep). Above the rows kernel's rows
// cuBLASLt may compute the product and a kernel of the step apply the
// epilogue to it (Variant::kLibrary, kernel_choice.h).
#include <algorithm>

#include "ops/matmul.h"

#include "autodiff/adjoint_builder.h"
#include "codegen/cuda_text.h"
#include "codegen/step_emitter.h"
#include "interp/host_ops.h"
#include "internal_error.h"
#include "ops/families.h"
#include "ops/norm.h"
#include "plan/kernel_choice.h"

namespace gdl::ops {

std::optional<MatmulLayout> matmul_layout(const ir::Attrs& attrs) {
  const std::vector<int64_t>& v = attrs.ints;
  if (v.empty()) return MatmulLayout{};
  if (v.size() != 4 || v[0] < 0 || v[0] > 1 || v[1] < 0 || v[1] > 1 || v[2] < 0 || v[3] < 0) return std::nullopt;
  return MatmulLayout{v[0] == 1, v[1] == 1, v[2], v[3]};
}

MatmulLayout matmul_layout(const ir::Node& n) {
  std::optional<MatmulLayout> layout = matmul_layout(n.attrs);
  GDL_INTERNAL_ASSERT(layout.has_value(), "a matmul with attributes that are not a layout");
  return *layout;
}

std::vector<int64_t> matmul_layout_ints(const MatmulLayout& l) {
  if (l.as_stored()) return {};
  return {l.transpose_a ? 1 : 0, l.transpose_b ? 1 : 0, l.col_begin, l.col_count};
}

namespace {
Shape swap_last_two(Shape s) {
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}
}  // namespace

Shape matmul_a_shape(const Shape& stored_a, const MatmulLayout& l) {
  return l.transpose_a ? swap_last_two(stored_a) : stored_a;
}

Shape matmul_b_shape(const Shape& stored_b, const MatmulLayout& l) {
  Shape s = l.transpose_b ? swap_last_two(stored_b) : stored_b;
  if (l.windowed()) s.back() = Dim::constant(l.col_count);
  return s;
}

Shape matmul_a_shape(const ir::Graph& g, const ir::Node& n) {
  return matmul_a_shape(g.node(n.args.at(0)).type.shape, matmul_layout(n));
}
Shape matmul_b_shape(const ir::Graph& g, const ir::Node& n) {
  return matmul_b_shape(g.node(n.args.at(1)).type.shape, matmul_layout(n));
}

namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// Matmul tilings of gdl::matmul; both run (TM / RM) * (TN / RN) = 256 threads.
struct MatmulTiles {
  int tm, tn, tk, rm, rn;
};
constexpr MatmulTiles kMatmulLarge{64, 64, 16, 4, 4};
constexpr MatmulTiles kMatmulSmallM{16, 32, 64, 1, 2};  // decode: M at most 64, more blocks over N
constexpr uint32_t kMatmulThreads = 256;

TypeResult infer_matmul(TypeQuery& q) {
  const TensorType* stored_a = q.tensor(0, "matmul");
  const TensorType* stored_b = stored_a ? q.tensor(1, "matmul") : nullptr;
  if (!stored_a || !stored_b) return TypeResult::failed();
  const std::string pair = q.text(*stored_a) + " @ " + q.text(*stored_b);
  if (stored_a->rank() < 2 || stored_b->rank() < 2)
    return q.error(kAtOp, "matmul needs rank >= 2 on both sides: " + pair, "reshape a vector to [1, K] or [K, 1] first");
  // A layout (set by the matmul-operands pass, never written in a program):
  // the operands as the matmul reads them.
  const std::optional<MatmulLayout> layout = matmul_layout(q.attrs());
  if (!layout) return q.error(kAtOp, "matmul attributes are not a layout", "");
  if (layout->windowed()) {
    const Shape read_b = matmul_b_shape(stored_b->shape, MatmulLayout{false, layout->transpose_b, 0, 0});
    if (read_b.back().is_runtime() || layout->col_begin + layout->col_count > read_b.back().extent)
      return q.error(kAtOp, "matmul column window outside " + pair, "");
  }
  const TensorType read_a{stored_a->dtype, matmul_a_shape(stored_a->shape, *layout)};
  const TensorType read_b{stored_b->dtype, matmul_b_shape(stored_b->shape, *layout)};
  const TensorType *ta = &read_a, *tb = &read_b;
  if (ta->dtype != tb->dtype)
    return q.error(kAtOp, "dtype mismatch in matmul: " + pair,
                   "convert one side with cast(x, " + std::string(dtype_name(ta->dtype)) + ")");
  if (!is_float(ta->dtype)) return q.error(kAtOp, "matmul needs float tensors: " + pair, "cast(x, f32) first");
  const Dim& k = ta->shape.back();
  const Dim& kb = tb->shape[tb->shape.size() - 2];
  if (!(k == kb))
    return q.error(kAtOp, "matmul inner dims differ: " + pair,
                   "the last dim of the left side must equal the second-to-last of the right; transpose(b) may help");
  std::optional<Shape> batch =
      broadcast_shapes(Shape(ta->shape.begin(), ta->shape.end() - 2), Shape(tb->shape.begin(), tb->shape.end() - 2));
  if (!batch)
    return q.error(kAtOp, "matmul batch dims do not broadcast: " + pair, "the dims before the last two broadcast like numpy");
  batch->push_back(ta->shape[ta->shape.size() - 2]);
  batch->push_back(tb->shape.back());
  return TensorType{ta->dtype, *batch};
}

// [..., M, K] @ [..., K, N]: for each batch, row i of the result is the sum
// over k < k_valid of a[i, k] * b[k, :], accumulated in double in increasing
// k (the i-k-j order walks b row by row, which keeps large weights
// cache-friendly).
// An operand as the matmul reads it: the last two axes of `stored` swapped
// when `transpose`, then columns [col_begin, col_begin + col_count) of the
// last axis (col_count 0: all).
HostTensor read_operand(const HostTensor& stored, bool transpose, int64_t col_begin, int64_t col_count) {
  host::Extents shape = stored.shape, strides = host::row_major_strides(stored.shape);
  const size_t r = shape.size();
  if (transpose) std::swap(shape[r - 1], shape[r - 2]), std::swap(strides[r - 1], strides[r - 2]);
  if (col_count != 0) shape.back() = col_count;
  HostTensor out = host::make_tensor(stored.dtype, shape);
  host::copy_strided(stored, col_begin * strides.back(), strides, out);
  return out;
}

// A transposed or windowed operand is first read into a tensor of the
// shape the matmul sees.
void eval_matmul(const Node& node, const EvalArgs& in, HostTensor& out) {
  const MatmulLayout layout = matmul_layout(node);
  HostTensor read_a, read_b;
  if (layout.transpose_a) read_a = read_operand(*in.values[0], true, 0, 0);
  if (layout.transpose_b || layout.windowed())
    read_b = read_operand(*in.values[1], layout.transpose_b, layout.col_begin, layout.col_count);
  const HostTensor& a = layout.transpose_a ? read_a : *in.values[0];
  const HostTensor& b = layout.transpose_b || layout.windowed() ? read_b : *in.values[1];
  const int64_t k_valid = in.valid(0, layout.transpose_a ? -2 : -1);
  size_t ra = a.shape.size(), rb = b.shape.size(), ro = out.shape.size();
  GDL_INTERNAL_ASSERT(ra >= 2 && rb >= 2 && ro >= 2, "matmul needs rank >= 2");
  int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  GDL_INTERNAL_ASSERT(b.shape[rb - 2] == k && out.shape[ro - 2] == m && out.shape[ro - 1] == n,
                      "matmul shapes disagree: " + host::extents_text(a.shape) + " @ " + host::extents_text(b.shape) +
                          " -> " + host::extents_text(out.shape));
  host::Extents batch(out.shape.begin(), out.shape.end() - 2);
  host::BroadcastCursor cursor(batch, {host::Extents(a.shape.begin(), a.shape.end() - 2),
                                 host::Extents(b.shape.begin(), b.shape.end() - 2)});
  std::vector<double> row(static_cast<size_t>(n));
  int64_t batches = host::product(batch);
  for (int64_t bi = 0; bi < batches; ++bi, cursor.next()) {
    const double* pa = a.data.data() + cursor.offset(0) * m * k;
    const double* pb = b.data.data() + cursor.offset(1) * k * n;
    double* po = out.data.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < k_valid; ++kk) {
        double aik = pa[i * k + kk];
        const double* brow = pb + kk * n;
        for (int64_t j = 0; j < n; ++j) row[j] += aik * brow[j];
      }
      std::copy(row.begin(), row.end(), po + i * n);
    }
  }
}

// ----------------------------------------------------------------- kernels

// The epilogue of a fused matmul step, defined in `body` before the call:
//   const auto epi = [&](const float acc, const I i) -> float { ...; return rR; };
// The matmul kernel calls it with each element's accumulator and its flat
// index in the matmul's result, which has the step result's shape, and
// stores what it returns, converted to the result's dtype. The matmul's
// value is rounded to its dtype first, then every other value is computed
// and rounded as in an elementwise kernel: operands outside the step are
// loaded at i through broadcast strides, constants are literals, scalars
// locals. Returns the functor to pass: its name, or for a step that is the
// matmul alone gdl::IdentityEpilogue (the sum rounded to the matmul's dtype).
std::string matmul_epilogue(StepEmitter& e, std::string& body) {
  const ValueId anchor = e.anchor;
  const Node& matmul = e.g.node(anchor);
  if (e.step.result == anchor) return std::string("gdl::IdentityEpilogue<") + storage_type(matmul.type.dtype) + ">{}";
  const Node& result = e.g.node(e.step.result);
  GDL_INTERNAL_ASSERT(matmul.type.shape == result.type.shape && is_float(matmul.type.dtype) &&
                          is_float(result.type.dtype),
                      "step " + std::to_string(e.index) + ": a matmul epilogue needs float values of the matmul's shape");
  e.result_shape = result.type.shape;
  e.rank = std::max(1, result.type.rank());
  std::string statements = "    const float r" + std::to_string(anchor) + " = gdl::fit<" +
                           storage_type(matmul.type.dtype) + ">(acc);\n";
  for (size_t k = e.norm_prologue == ir::kNoValue ? 1 : 2; k < e.step.values.size(); ++k) {
    ValueId v = e.step.values[k];
    const Node& n = e.g.node(v);
    GDL_INTERNAL_ASSERT(is_elementwise(n.op) || (v == e.step.result && plan::replaces_whole(e.g, n)),
                        std::string("step ") + std::to_string(e.index) + ": cannot fuse " +
                                                      ir::op_name(n.op) + " into a matmul epilogue");
    GDL_INTERNAL_ASSERT(broadcast_shapes(n.type.shape, e.result_shape) == e.result_shape,
                        "a fused value does not broadcast to the step's result");
    statements += e.elementwise_statement(v);
  }
  if (e.needs_coords)
    body += "  const gdl::Shape<" + std::to_string(e.rank) + ", " + e.idx + "> shape = " +
            e.shape_literal(e.result_shape, e.rank) + ";  // of the matmul's result\n";
  body += e.prologue;
  body += "  const auto epi = [&](const float acc, const " + e.idx + " i" +
          (e.variant == Variant::kChainStep ? ", const float a_staged" : "") + ") -> float {\n";
  if (e.needs_coords)
    body += "    const gdl::Coords<" + std::to_string(e.rank) + ", " + e.idx + "> c = gdl::coords_of(shape, i);\n";
  body += statements;
  body += "    return r" + std::to_string(e.step.result) + ";\n  };\n";
  return "epi";
}

// The norm prologue of a fused matmul step (plan/fuse.cc), defined in `body`:
//   const auto pro = gdl::layernorm_prologue<T>(weight, bias, eps);
// (gdl_matmul.cuh), or gdl::NoPrologue{} for a step without one.
std::string matmul_prologue_functor(StepEmitter& e, std::string& body) {
  if (e.norm_prologue == ir::kNoValue) return "gdl::NoPrologue{}";
  const Node& norm = e.g.node(e.norm_prologue);
  std::vector<std::string> sources;
  for (size_t i = 1; i < norm.args.size(); ++i) sources.push_back(norm_column_source(e, norm, i));
  const std::string weight = sources.size() > 0 ? sources[0] : "gdl::One{}";
  const std::string t = storage_type(norm.type.dtype), eps = float_literal(norm.attrs.value);
  if (norm.op == Op::kLayerNorm) {
    const std::string bias = sources.size() > 1 ? sources[1] : "gdl::Zero{}";
    body += "  const auto pro = gdl::layernorm_prologue<" + t + ">(" + weight + ", " + bias + ", " + eps + ");\n";
  } else {
    body += "  const auto pro = gdl::rmsnorm_prologue<" + t + ">(" + weight + ", " + eps + ");\n";
  }
  return "pro";
}

// A matmul whose b is a param (weights, which no kernel writes) pulls its
// block's part of b into L2 before it waits for the kernels it depends on
// (gdl_abi.cuh), then lets its own dependents launch. Everything emitted
// before this point is pointer and dim arithmetic. Other kernels wait
// first (emit()).
std::string weights_prefetch(StepEmitter& e, const Node& n, const MatmulChoice& choice, bool use_rows,
                             const std::string& b) {
  const plan::Buffer& buffer = e.p.buffers.at(static_cast<size_t>(n.args.at(1)));
  if (!choice.fold_batch || buffer.region != plan::Region::kParams) return "";
  e.waits_in_body = true;
  const bool tb = matmul_layout(n).transpose_b;
  const std::string bk = choice.tiles == MatmulKernel::kSimt ? "gdl::mm::kSimtBK" : "gdl::mm::kMmaBK";
  const std::string rows_template =
      tb ? "<" + std::to_string(choice.rows_cluster ? choice.rows_splits : 0) + ", true>"
         : choice.rows_cluster ? "<" + std::to_string(choice.rows_splits) + ">" : "";
  const std::string rows = "gdl::matmul_rows_prefetch" + rows_template + "(" + b + ", N, K, ldb, " +
                           std::to_string(choice.rows_splits) + ");";
  const std::string cluster =
      choice.tile_cluster || tb ? ", " + std::to_string(choice.tile_cluster ? choice.tile_splits : 0) : "";
  const std::string tiles = "gdl::matmul_tiles_prefetch<" + std::to_string(choice.tile_m) + ", " + bk + cluster +
                            (tb ? ", true" : "") + ">(" + b +
                            ", rows, N, K, ldb, " + std::to_string(choice.tile_splits) + ");";
  return "  // before the kernels this one depends on finish: its part of the weights into L2\n  " +
         (use_rows ? rows : tiles) + "\n  gdl::wait_for_producers();\n  gdl::matmul_allow_dependents(rows, N, K);\n";
}

// A matmul (kernel_choice.h picks the kernel): [..., M, K] @ [..., K, N]
// summing the first k_valid positions of K (all of them unless K is a
// padded run-time dim). With b shared the batch folds into the rows. A
// transposed or windowed operand (ops/matmul.h) is read where it lies:
// lda, ldb are the stored rows' lengths, a window starts at its first
// column, and the kernels take the transposes as template arguments.
std::string matmul_body(StepEmitter& e, const Node& n, std::vector<std::string> args, const std::string& out_ptr,
                        LaunchRule& rule) {
  const MatmulLayout layout = matmul_layout(n);
  const Shape &stored_a = e.g.node(n.args.at(0)).type.shape, &stored_b = e.g.node(n.args.at(1)).type.shape;
  const Shape as = matmul_a_shape(stored_a, layout), bs = matmul_b_shape(stored_b, layout);
  const Shape& rs = n.type.shape;
  const std::string ta = layout.transpose_a ? "true" : "false", tb = layout.transpose_b ? "true" : "false";
  const bool transposed = layout.transpose_a || layout.transpose_b;
  const size_t batch_rank = rs.size() - 2;
  const int nb = std::max<int>(1, static_cast<int>(batch_rank));
  // The kernel for this emitter's rows: the first kernel takes the rows
  // kernel's bindings (or the first tile band's), a large one its band's.
  const MatmulChoice full = choose_matmul(e.g, n);
  const std::vector<RowsBand> bands = e.variant == Variant::kFirst ? matmul_tile_bands(e.g, n) : std::vector<RowsBand>{};
  const MatmulChoice choice = e.variant == Variant::kLarge        ? choose_matmul(e.g, n, e.band)
                              : full.use_rows || bands.size() < 2 ? full
                                                                  : choose_matmul(e.g, n, bands.front());
  std::string body;
  auto local = [&](const std::string& name, const std::string& value) {
    body += "  const " + e.idx + " " + name + " = " + value + ";\n";
  };
  if (e.variant == Variant::kChainStep) {  // one step of a chain (plan/chains.h): the chain holds b and the launch
    GDL_INTERNAL_ASSERT(choice.fold_batch && layout.as_stored(),
                        "step " + std::to_string(e.index) + ": a chain step folds its batch and reads b as stored");
    e.chain_a = args[0];  // the rows the chain stages, which its epilogue may read again
    const std::string epi = matmul_epilogue(e, body);
    const std::string pro = matmul_prologue_functor(e, body);
    local("rows", e.product(rs, 0, rs.size() - 1));
    e.chain_b = args[1];  // the chain streams b itself (its chain_weights)
    body += "  chain.step(" + std::to_string(e.chain_step) + ", " + args[0] + ", " + out_ptr + ", rows, " + epi + ", " +
            pro + ", " + (e.chain_publish_stats ? "true" : "false") + ");  // publish_stats: " +
            (e.chain_publish_stats ? "the next step's norm reads them" : "no next step reads them") + "\n";
    return body;
  }
  // The fast kernels of a folded batch take the folded row count instead.
  if (choice.tiles == MatmulKernel::kGeneral || !choice.fold_batch) local("M", e.dim(as[as.size() - 2]));
  local("K", e.dim(as[as.size() - 1]));
  local("N", e.dim(bs[bs.size() - 1]));
  local("lda", e.dim(stored_a.back()));
  local("ldb", e.dim(stored_b.back()));
  if (layout.windowed())  // the window's first column: a column of b, or a stored row when b is transposed
    args[1] = "(" + args[1] + " + " + std::to_string(layout.col_begin) + (layout.transpose_b ? " * ldb)" : ")");
  const Dim& k_dim = as.back();
  // A padded K (buckets): only its valid positions are summed.
  local("k_valid", k_dim.is_runtime() ? valid_count_expr(k_dim.symbol) : "K");
  auto batch_map = [&] {
    std::string map = "gdl::BatchMap<" + std::to_string(nb) + ", 2, " + e.idx + ">";
    body += "  " + map + " batches(" + e.shape_literal(sub_shape(rs, 0, batch_rank), nb) + ");\n";
    body += "  batches.set(0, " + e.shape_literal(sub_shape(as, 0, as.size() - 2), nb) + ", " +
            e.dim(stored_a[stored_a.size() - 2]) + " * lda);  // a\n";
    body += "  batches.set(1, " + e.shape_literal(sub_shape(bs, 0, bs.size() - 2), nb) + ", " +
            e.dim(stored_b[stored_b.size() - 2]) + " * ldb);  // b\n";
  };
  const std::string epi = matmul_epilogue(e, body);
  const std::string pro = matmul_prologue_functor(e, body);
  const Shape row_dims = sub_shape(rs, 0, rs.size() - 1);  // the batch, then M

  if (choice.tiles == MatmulKernel::kGeneral) {
    GDL_INTERNAL_ASSERT(e.norm_prologue == ir::kNoValue, "step " + std::to_string(e.index) +
                                                       ": the general matmul kernel takes no norm prologue");
    body += "  // matmul kernel: general\n";
    batch_map();
    MatmulTiles t = max_extent(rs[rs.size() - 2], e.g) <= 64 ? kMatmulSmallM : kMatmulLarge;
    body += "  gdl::matmul<" + std::to_string(t.tm) + ", " + std::to_string(t.tn) + ", " + std::to_string(t.tk) + ", " +
            std::to_string(t.rm) + ", " + std::to_string(t.rn) + ", " + e.idx +
            (transposed ? ", " + ta + ", " + tb : "") + ">(" + args[0] + ", " + args[1] + ", " + out_ptr +
            ", M, N, K, lda, ldb, k_valid, batches, " + epi + ");\n";
    rule = task_launch({{sub_shape(rs, 0, batch_rank), 1}, {{rs[rs.size() - 2]}, t.tm}, {{rs.back()}, t.tn}},
                       kMatmulThreads);
    return body;
  }

  e.min_blocks = static_cast<int>(kMatmulBlocksPerSM);  // at most 128 registers: two blocks per multiprocessor
  // Several kernels may run (the rows known only at run time): this
  // emitter writes one of them, generate_cuda the others, one per band.
  const bool use_rows = choice.use_rows && e.variant != Variant::kLarge;
  const bool use_tiles = !use_rows;
  if (e.variant == Variant::kFirst) {
    e.large_bands.assign(bands.begin() + (full.use_rows || bands.empty() ? 0 : 1), bands.end());
    e.library_possible = choose_library_matmul(e.g, e.step.values).possible;
    if (!e.large_bands.empty() || e.library_possible) e.rows_of_matmul = row_dims;
  }
  const std::string tiles_name = matmul_kernel_name(choice.tiles);
  body += "  // matmul kernel: " +
          (use_rows ? "rows (" + std::to_string(choice.rows_splits) + " K split(s)" +
                          (choice.rows_cluster ? ", one cluster per strip" : "") + ")"
                    : tiles_name + " (" + std::to_string(choice.tile_splits) + " K split(s)" +
                          (choice.tile_cluster ? ", one cluster per tile" : "") + ")") + "\n";
  const bool mma = !use_rows && choice.tiles == MatmulKernel::kMma;
  if (mma) {  // stage buffers in dynamic shared memory, as many as kernel_choice.cc fits
    const std::string bytes = std::to_string(choice.mma_shared_bytes);
    body += "  extern __shared__ __align__(128) unsigned char smem[];\n";
    body += "  static_assert(gdl::MmaTile<" + std::to_string(choice.tile_m) + ">::bytes(" +
            std::to_string(choice.mma_stages) + ", " + tb + ") == " + bytes +
            ", \"the shared memory gdlc asks the launch for\");\n";
  } else {
    body += "  __shared__ __align__(128) unsigned char smem[" +
            std::string(use_rows ? "gdl::kMatmulRowsSmem" : "gdl::kMatmulSimtSmem") + "];\n";
  }

  std::string rows_call, tiles_call;
  if (choice.fold_batch) {
    local("rows", e.product(rs, 0, rs.size() - 1) + "");  // every batch entry's rows against the one b
    if (use_tiles)  // the rows kernel takes no batch map
      body += "  const gdl::BatchMap<1, 2, " + e.idx + "> single(gdl::Shape<1, " + e.idx + ">{{1}});  // batch folded into rows\n";
  } else {
    batch_map();
  }
  if (use_rows) {
    if (choice.rows_cluster) e.cluster_y = choice.rows_splits;  // the K splits of a strip: one cluster
    const std::string cluster =
        choice.rows_cluster || transposed ? ", " + std::to_string(choice.rows_cluster ? choice.rows_splits : 0) : "";
    rows_call = "gdl::matmul_rows<" + std::to_string(choice.row_tile) + cluster +
                (transposed ? ", " + ta + ", " + tb : "") + ">(" + args[0] + ", " + args[1] + ", " + out_ptr +
                ", rows, N, K, lda, ldb, k_valid, " +
                e.split_scratch(choice.rows_splits, choice.rows_cluster, choice.scratch, body) + ", " + epi + ", " +
                pro + ", smem);";
  }
  if (use_tiles) {
    std::string m = choice.fold_batch ? "rows" : "M";
    std::string map = choice.fold_batch ? "single" : "batches";
    if (choice.tile_cluster) e.cluster_y = choice.tile_splits;  // the K splits of a tile: one cluster
    const std::string cluster = std::to_string(choice.tile_cluster ? choice.tile_splits : 0);
    const std::string mma_args = std::to_string(choice.tile_m) + ", " + std::to_string(choice.mma_stages);
    const std::string targs = choice.tiles == MatmulKernel::kSimt ? (transposed ? "<" + ta + ", " + tb + ">" : "")
                              : transposed         ? "<" + mma_args + ", " + cluster + ", " + ta + ", " + tb + ">"
                              : choice.tile_cluster ? "<" + mma_args + ", " + cluster + ">"
                                                    : "<" + mma_args + ">";
    tiles_call = "gdl::matmul_" + tiles_name + targs + "(" + args[0] + ", " + args[1] + ", " + out_ptr + ", " + m +
                 ", N, K, lda, ldb, k_valid, " + map + ", " +
                 e.split_scratch(choice.tile_splits, choice.tile_cluster, choice.scratch, body) + ", " + epi + ", " +
                 pro + ", smem);";
  }
  body += weights_prefetch(e, n, choice, use_rows, args[1]);
  body += "  " + (use_rows ? rows_call : tiles_call) + "\n";

  // Launch: one block per task.
  const int64_t strip = matmul_strip_columns(n.type.dtype);
  LaunchRule rows_rule = task_launch({{{rs.back()}, strip}, {{Dim::constant(choice.rows_splits)}, 1}}, kMatmulThreads);
  LaunchRule tiles_rule =
      choice.fold_batch
          ? task_launch({{row_dims, choice.tile_m}, {{rs.back()}, kMatmulTileCols},
                         {{Dim::constant(choice.tile_splits)}, 1}}, kMatmulThreads)
          : task_launch({{sub_shape(rs, 0, batch_rank), 1}, {{rs[rs.size() - 2]}, choice.tile_m},
                         {{rs.back()}, kMatmulTileCols}, {{Dim::constant(choice.tile_splits)}, 1}}, kMatmulThreads);
  if (choice.tiles == MatmulKernel::kMma) tiles_rule.shared_bytes = choice.mma_shared_bytes;
  rule = use_rows ? rows_rule : tiles_rule;
  return body;
}




// The kernel after cuBLASLt's product (Variant::kLibrary): the call's
// operands and places go to the kernel table (core/kernel_table.h
// LibraryMatmul), the kernel reads the product (rounded to the matmul's
// dtype, as every matmul kernel's epilogue first rounds its sum) from the
// step's scratch and stores the step's epilogue of it, element by element.
std::string library_epilogue_body(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const LibraryMatmulChoice choice = choose_library_matmul(e.g, e.step.values);
  GDL_INTERNAL_ASSERT(choice.possible && e.step.scratch_bytes >= choice.scratch_bytes(),
                      "step " + std::to_string(e.index) + ": a library matmul kernel without its scratch");
  const MatmulLayout layout = matmul_layout(n);
  const Shape &stored_a = e.g.node(n.args.at(0)).type.shape, &stored_b = e.g.node(n.args.at(1)).type.shape;
  const Shape& rs = n.type.shape;
  LibraryMatmul& l = e.library;
  l.active = true;
  l.dtype = n.type.dtype;
  l.transpose_a = layout.transpose_a;
  l.transpose_b = layout.transpose_b;
  l.a = static_cast<int32_t>(n.args[0]);
  l.b = static_cast<int32_t>(n.args[1]);
  l.n = matmul_b_shape(e.g, n).back().extent;
  l.k = matmul_a_shape(e.g, n).back().extent;
  l.lda = stored_a.back().extent;
  l.ldb = stored_b.back().extent;
  l.b_element_offset = layout.windowed() ? static_cast<uint64_t>(layout.col_begin) * (layout.transpose_b ? l.ldb : 1) : 0;
  l.product_offset = e.step.scratch_offset;
  l.workspace_offset = e.step.scratch_offset + choice.workspace_at();
  l.workspace_bytes = kLibraryMatmulWorkspaceBytes;
  if (e.norm_prologue != ir::kNoValue) {  // the call reads the rows the norm kernel wrote (prologue_kernel: codegen.cc)
    l.a = static_cast<int32_t>(e.g.node(e.norm_prologue).args.at(0));
    l.normalized_offset = e.step.scratch_offset + choice.normalized_at();
  }
  const std::string t = storage_type(l.dtype);
  std::string body = "  // matmul: cuBLASLt's product (the runtime's call in front of this kernel), through the epilogue\n";
  body += "  const " + t + "* const product = reinterpret_cast<const " + t + "*>(arena + " +
          std::to_string(l.product_offset) + "ull);  // scratch: the product rounded to its dtype, laid out as the result\n";
  const std::string out = e.result_pointer();
  body += e.local("count", e.product(rs, 0, rs.size()));
  const std::string epi = matmul_epilogue(e, body);
  body += "  gdl::matmul_library_epilogue(product, " + out + ", count, " + epi + ");\n";
  rule = LaunchRule{};
  rule.work = rs;
  rule.items_per_block = kElementsPerBlock;
  rule.block = kElementwiseBlock;
  return body;
}

// {transpose_a, transpose_b, columns 256:512}: what a layout reads differently.
std::string layout_text(const ir::Attrs& attrs) {
  const std::optional<MatmulLayout> l = matmul_layout(attrs);
  if (!l) return "layout?";
  std::string text;
  const auto add = [&](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
  if (l->transpose_a) add("transpose_a");
  if (l->transpose_b) add("transpose_b");
  if (l->windowed()) add("columns " + std::to_string(l->col_begin) + ":" + std::to_string(l->col_begin + l->col_count));
  return text;
}

// The norm prologue's kernel before cuBLASLt's call (Variant::kLibraryNorm):
// the norm's input rows normalized into the scratch that the call reads as a.
std::string library_norm_body(StepEmitter& e, const Node& n, LaunchRule& rule) {
  const LibraryMatmulChoice choice = choose_library_matmul(e.g, e.step.values);
  GDL_INTERNAL_ASSERT(choice.possible && choice.normalized_bytes > 0 && e.norm_prologue != ir::kNoValue,
                      "step " + std::to_string(e.index) + ": a library norm kernel without a norm prologue");
  const uint64_t normalized = e.step.scratch_offset + choice.normalized_at();
  const std::string t = storage_type(n.type.dtype);
  const std::string x = e.pointer(e.g.node(e.norm_prologue).args.at(0));
  const Shape& rs = n.type.shape;
  std::string body = "  // the norm prologue of a matmul whose product cuBLASLt computes next: the normalized rows\n";
  body += "  " + t + "* const normalized = reinterpret_cast<" + t + "*>(arena + " + std::to_string(normalized) +
          "ull);  // scratch: the call's a\n";
  body += e.local("rows", e.product(rs, 0, rs.size() - 1));
  body += e.local("K", e.dim(matmul_a_shape(e.g, n).back()));
  const std::string pro = matmul_prologue_functor(e, body);
  body += "  gdl::matmul_library_norm_rows<" + t + ">(" + pro + ", " + x + ", normalized, rows, K);\n";
  rule = task_launch({{sub_shape(rs, 0, rs.size() - 1), 1}}, kMatmulThreads);  // a block per row
  return body;
}

std::string emit_matmul(StepEmitter& e, const Node& n, LaunchRule& rule) {
  if (e.variant == Variant::kLibrary) return library_epilogue_body(e, n, rule);
  if (e.variant == Variant::kLibraryNorm) return library_norm_body(e, n, rule);
  // A fused norm's input stands for its result: the kernel normalizes the rows as it stages them.
  const std::string a = e.pointer(n.args[0] == e.norm_prologue ? e.g.node(e.norm_prologue).args.at(0) : n.args[0]);
  const std::string b = e.pointer(n.args.at(1));
  const std::string out = e.result_pointer();
  return matmul_body(e, n, {a, b}, out, rule);
}

// --------------------------------------------------------- derivative rules

// x [..., R, C] as one matrix [rows, C] when its leading dims allow one
// extent for their product (all compile-time, or one run-time dim among 1s);
// kNoValue otherwise.
ValueId as_rows(autodiff::AdjointBuilder& b, ValueId x) {
  const Shape s = b.shape(x);
  int64_t constant = 1;
  std::optional<Dim> runtime;
  for (size_t a = 0; a + 1 < s.size(); ++a) {
    if (!s[a].is_runtime()) constant *= s[a].extent;
    else if (runtime) return ir::kNoValue;
    else runtime = s[a];
  }
  if (runtime && constant != 1) return ir::kNoValue;
  return b.reshape(x, {runtime ? *runtime : Dim::constant(constant), s.back()});
}

// c = a @ b: da = dc @ b^T, db = a^T @ dc, each summed over the batch dims
// its operand broadcast along. A weight [K, N] shared by a batch of rows
// takes its part as one matmul over every row.
void vjp_matmul(autodiff::AdjointBuilder& b, ValueId y, ValueId dy, std::vector<ValueId>& d) {
  const Node n = b.node(y);
  GDL_INTERNAL_ASSERT(matmul_layout(n).as_stored(), "grad of a matmul whose layout the operands pass changed");
  const ValueId a = n.args[0], w = n.args[1];
  d[0] = b.sum_to(b.matmul(dy, b.swap_last_two(w)), b.shape(a));
  if (b.shape(w).size() == 2 && b.shape(a).size() > 2) {
    const ValueId rows = as_rows(b, a), dy_rows = as_rows(b, dy);
    if (rows != ir::kNoValue && dy_rows != ir::kNoValue) {
      d[1] = b.matmul(b.swap_last_two(rows), dy_rows);
      return;
    }
  }
  d[1] = b.sum_to(b.matmul(b.swap_last_two(a), dy), b.shape(w));
}

}  // namespace

void add_matmul_ops(std::vector<OpDef>& defs) {
  OpDef d;
  d.op = Op::kMatMul;
  d.fusion = FusionClass::kMatmul;
  d.callable = "matmul";
  d.params = {"a", "b"};
  d.operands = d.required = 2;
  d.min_args = d.max_args = 2;
  d.infer = infer_matmul;
  d.eval = eval_matmul;
  d.kernel = emit_matmul;
  d.attr_text = layout_text;
  d.vjp = vjp_matmul;
  defs.push_back(d);
}

}  // namespace gdl::ops
