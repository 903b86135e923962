// The kernel of one plan step, as CUDA C++ (the kernel ABI is kernel_table.h).
//
// StepEmitter writes the parts every kernel has (the run-time dims and
// scalars it reads, the typed pointers of its buffers, the launch-overlap
// calls) and the elementwise loop (elementwise values and data movement).
// A reduction, norm, matmul or attention step's body comes from its op's
// kernel emitter (ops/*.cc, OpDef::kernel), which uses the services below.
// Everything is emitted in value order from the plan alone, so the same
// plan gives the same text.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernel_table.h"
#include "plan.h"
#include "plan/kernel_choice.h"

namespace gdl {

// Which kernel of its step an emitter writes: the step's only (or first)
// kernel, a large kernel of a matmul step that has several (for the rows
// of one band of matmul_tile_bands, above those its first kernel serves;
// or a ragged batch's decode attention without splits, ops/attention.cc;
// or a selection's one block a row, ops/select.cc),
// the step as one block of its chain's kernel (codegen/chain_kernel.cc),
// the epilogue of a matmul whose product cuBLASLt computes in front of it
// (kernel_choice.h choose_library_matmul), or the norm prologue that runs
// before that call.
enum class Variant { kFirst, kLarge, kChainStep, kLibrary, kLibraryNorm };

class StepEmitter {
 public:
  StepEmitter(const plan::Plan& p, size_t step_index, const std::map<ir::ValueId, int>& scalar_slot, int sm,
              Variant variant = Variant::kFirst, int chain_step = 0, bool chain_publish_stats = false);
  // Variant::kLarge: the rows of the kernel to emit.
  StepEmitter(const plan::Plan& p, size_t step_index, const std::map<ir::ValueId, int>& scalar_slot, int sm,
              RowsBand band);

  // The kernel: its source text, and its symbol, launch rule, scalars and
  // dims in `info`.
  std::string emit(Kernel& info);
  // The step as a block of its chain's kernel (Variant::kChainStep): its
  // dims, scalars, pointers, epilogue and prologue in a scope of their own,
  // then the chain's step call (gdl_chain.cuh).
  std::string emit_chain_step();

  // After emit(): the row bands of the step's large kernels (a matmul with
  // several kernels), each to emit with the band's constructor, whether it
  // also takes a library matmul kernel (kernel_choice.h choose_library_matmul)
  // (Variant::kLibrary), and the matmul's rows (its result's shape without
  // the last axis).
  const std::vector<RowsBand>& large_kernel_bands() const { return large_bands; }
  bool library_matmul_possible() const { return library_possible; }
  const Shape& matmul_rows() const { return rows_of_matmul; }
  // A step that takes a second kernel for runs of `rows_from` rows or more
  // (the element count of `rows`), which the runtime picks by rows as it
  // picks a matmul's large kernels: the first kernel's emitter records the
  // band; true while emitting the second (Variant::kLarge).
  bool second_kernel_from_rows(int64_t rows_from, const Shape& rows);
  // After emit() or emit_chain_step(): the run-time scalars and whether any
  // run-time dim the kernel's code reads.
  const std::set<int>& scalars_used() const { return scalars_used_; }
  bool uses_dims() const { return !dims_used_.empty(); }

  // ------------------------------------------- services for op emitters

  // The typed pointer to an operand's buffer, declared once in the prologue.
  std::string pointer(ir::ValueId v);
  // The result's pointer, `out`.
  std::string result_pointer();
  // A run-time dim's local (declared in the prologue) or a constant extent.
  std::string dim(const Dim& d);
  // Product of the extents of s[from, to) as an index expression.
  std::string product(const Shape& s, size_t from, size_t to);
  // "gdl::Shape<R, I>{{...}}": s left-padded with 1s to rank `rank`.
  std::string shape_literal(const Shape& s, int rank);
  // `const I name = value;` in the index type.
  std::string local(const std::string& name, const std::string& value) const;
  // Whether v is a constant or a run-time scalar (no buffer, passed by value), and its value as an expression.
  bool is_inline_leaf(ir::ValueId v) const;
  std::string inline_value(ir::ValueId v);
  // Row-major strides of operand `a`, declared once in the prologue as in<a>.
  std::string input_strides(ir::ValueId a);
  // `const C rV = gdl::fit<T>(expr);` for an elementwise value.
  std::string elementwise_statement(ir::ValueId v);
  // Operand `a` (outside the step) loaded at the element that the result
  // index maps to under broadcasting (take_along_axis reads its index so).
  std::string broadcast_load(ir::ValueId a);
  // The SplitScratch argument of a kernel that splits its tiles `splits`
  // ways: the step's tickets and partial tiles (plan::Step), declared in
  // `body` the first time; none when the splits run as a cluster, whose
  // parts stay in shared memory.
  std::string split_scratch(int splits, bool in_cluster, const SplitScratchSize& need, std::string& body);

  // ------------------------------------------------ the step being written

  const plan::Plan& p;
  const ir::Graph& g;
  const size_t index;
  const plan::Step& step;
  const int sm;  // the target's compute capability (90 for sm_90)
  const Variant variant;
  const int chain_step;             // Variant::kChainStep: the step's index in its chain
  const bool chain_publish_stats;   // Variant::kChainStep: the next step's norm reads the blocks' partial sums

  std::string idx = "int";          // the index type
  std::string prologue;             // elementwise: strides declared before the loop
  Shape result_shape;               // of the elementwise loop (or the matmul's epilogue)
  int rank = 1;                     // of result_shape, at least 1
  bool needs_coords = false;        // the loop needs the result's coordinates `c`
  std::set<std::string> declared;   // names declared in the prologue or body
  ir::ValueId norm_prologue = ir::kNoValue;  // a norm fused in front of the step's matmul
  ir::ValueId anchor = ir::kNoValue;  // the step's first value after any prologue

  // What the kernel's emitter decided.
  int min_blocks = 0;           // blocks per multiprocessor the kernel's registers must allow (0: no bound)
  int cluster_y = 0;            // > 1: the kernel runs in clusters of that many blocks along grid.y
  RowsBand band;                // Variant::kLarge: its rows (unused by the other variants)
  std::vector<RowsBand> large_bands;  // a step with several kernels (a matmul's): those of its large ones
  bool library_possible = false;  // Variant::kFirst: the step may take a library matmul kernel (Variant::kLibrary)
  LibraryMatmul library;          // Variant::kLibrary: the call in front of the kernel
  Shape rows_of_matmul;
  bool waits_in_body = false;   // the body calls wait_for_producers itself, after its prefetch
  bool early_start = false;     // Kernel::early_start
  std::string chain_b;          // Variant::kChainStep: b's pointer, which the step leaves undeclared
  std::string chain_a;          // Variant::kChainStep: a's pointer, whose elements the chain passes to the epilogue
  std::vector<std::pair<std::string, uint64_t>> param_pointers;  // pointers into params, with their buffers' bytes

 private:
  std::string fused_ops_suffix(ir::Op anchor_op) const;  // the symbol's "__op_op" tail
  std::string build_body(LaunchRule& rule);
  std::string kernel_inside(const std::string& body) const;
  void choose_index_type();
  std::string dim_name(int symbol) const;
  std::string address(const plan::Buffer& b);
  std::string input_or_address(ir::ValueId v, const plan::Buffer& b);
  std::vector<int> input_slots_;  // plan::input_pointer_slots, made at the first pointer
  ir::ValueId scalar_leaf(int slot) const;
  std::string scalar_local(ir::ValueId v);
  std::string launch_text(const LaunchRule& r) const;
  std::string operand(ir::ValueId a);
  std::string elementwise_body(LaunchRule& rule);

  const std::map<ir::ValueId, int>& scalar_slot_;
  bool structured_ = false;  // the anchor is a reduction, norm, matmul or attention
  std::set<ir::ValueId> in_step_;
  std::set<int> dims_used_;
  std::set<int> scalars_used_;
  std::map<ir::ValueId, std::string> pointer_names_;
  std::vector<std::string> pointer_lines_;
};

}  // namespace gdl
