// The passes in order (their names are what --dump-after and --stop-after take):
//   parse           the byte checks, then text -> AST (only parse.cc and syntax_errors.cc see ANTLR)
//   consts          `-D NAME=VALUE` settings, dtype consts resolved to their dtype
//   check           names, static control flow, recursion, outputs, side effects
//   lower           inline, unroll, fold `if`, type and shape check -> IR
//   fold-constants  evaluate what needs no run-time data       (not with optimize off)
//   cse             one node per value                         (not with optimize off)
//   matmul-operands transposes and column slices read by matmuls in place (not with optimize off)
//   ragged-attention attention over a ragged batch split between the decode and prefill kernels (not with optimize off)
//   dce             drop what no output needs                  (not with optimize off)
//   padding         which run-time dims padding cannot serve
//   collectives     collectives laid out as NCCL moves memory (contiguous parts, arguments in buffers)
//   inplace         in-place writes made legal, states' final values in their storage
//   schedule        IR -> plan: one step per computed value, views
//   fuse            fewer steps: elementwise chains, epilogues, norm prologues
//   memory          buffers and their arena offsets
//   dependencies    which steps wait for which
//   chains          runs of matmul steps one persistent kernel runs
//   scratch         the kernels' working memory behind the arena
//   codegen         plan -> CUDA C++ and the kernel table
//   nvrtc           CUDA C++ -> CUBIN + PTX (cached on disk)
// The IR is verified after every pass that changes it, the plan after the
// last planning pass; either failing is a bug in gdl (InternalError).
#include "pipeline.h"

#include <algorithm>

#include "frontend/ast_print.h"
#include "nvtx_range.h"
#include "frontend/check.h"
#include "frontend/const_settings.h"
#include "frontend/parse.h"
#include "frontend/source_loader.h"
#include "internal_error.h"
#include "lower/lower.h"
#include "passes/collective_layout.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/inplace.h"
#include "passes/matmul_operands.h"
#include "passes/fold_constants.h"
#include "passes/ir_print.h"
#include "passes/ir_verify.h"
#include "passes/padding.h"
#include "passes/ragged_attention.h"
#include "ops/op_def.h"
#include "plan/chains.h"
#include "plan/check.h"
#include "plan/deps.h"
#include "plan/fuse.h"
#include "plan/memory.h"
#include "plan/print.h"
#include "plan/scratch.h"
#include "plan/schedule.h"

namespace gdl {
namespace {

struct Context {
  const SourceFile* file = nullptr;
  DiagnosticSink& diags;
  const PipelineOptions& options;
  Status status;  // a failure that is not a diagnostic (NVRTC)
};

// A pass: false stops the pipeline (the program was rejected, or NVRTC failed).
using PassFn = bool (*)(Compilation&, Context&);

// Every pass that leaves the program as IR must leave valid IR.
void verify_ir(const Compilation& c, const char* pass) {
  const std::string problem = ir::verify(*c.graph);
  GDL_INTERNAL_ASSERT(problem.empty(), std::string("the IR is invalid after pass ") + pass + ": " + problem);
}

bool parse(Compilation& c, Context& x) {
  if (!validate_source_text(*x.file, x.diags)) return false;
  c.ast = parse_module(*x.file, x.diags);
  return c.ast != nullptr;
}

bool consts(Compilation& c, Context& x) {
  apply_const_settings(*c.ast, x.options.const_settings, x.diags);
  return !x.diags.has_errors();
}

bool check(Compilation& c, Context& x) {
  check_module(*c.ast, x.diags);
  return true;  // lowering still finds the type and shape errors the checker cannot see
}

bool lower(Compilation& c, Context& x) {
  if (!x.diags.has_errors()) {
    c.graph = lower_module(*c.ast, x.diags);
    if (c.graph) c.graph->target = x.options.target;
  } else {
    // Keep lowering's errors the checker could not see; drop its reports at
    // a line the checker already reported (the same problem seen twice) and
    // its warnings.
    DiagnosticSink lowering;
    lower_module(*c.ast, lowering);
    for (const Diagnostic& d : lowering.all()) {
      bool seen = false;
      for (const Diagnostic& e : x.diags.all()) seen |= e.loc.line == d.loc.line;
      if (d.severity == Severity::kError && !seen) x.diags.add(d);
    }
  }
  return !x.diags.has_errors() && c.graph;
}

template <void (*Pass)(ir::Graph&)>
bool optimize(Compilation& c, Context& x) {
  if (!x.options.optimize) return true;
  Pass(*c.graph);
  return true;
}

bool padding(Compilation& c, Context&) {
  record_padding_blockers(*c.graph);
  return true;
}

bool collectives(Compilation& c, Context&) {
  lay_out_collectives(*c.graph);
  return true;
}

bool in_place(Compilation& c, Context&) {
  place_in_place_writes(*c.graph);
  return true;
}

bool schedule(Compilation& c, Context&) {
  failpoint("planner");
  c.plan = plan::schedule_steps(std::move(*c.graph));
  c.graph.reset();  // the plan holds it now
  return true;
}

bool fuse(Compilation& c, Context& x) {
  plan::fuse_steps(*c.plan, x.options.plan);
  return true;
}

bool memory(Compilation& c, Context&) {
  plan::plan_memory(*c.plan);
  return true;
}

bool dependencies(Compilation& c, Context&) {
  plan::add_step_dependencies(*c.plan);
  return true;
}

bool chains(Compilation& c, Context& x) {
  find_matmul_chains(*c.plan, x.options.plan);
  return true;
}

bool scratch(Compilation& c, Context&) {
  plan::lay_out_scratch(*c.plan);
  const std::string unsound = plan::check_plan(*c.plan);
  GDL_INTERNAL_ASSERT(unsound.empty(), "the planner produced an unsound plan: " + unsound);
  return true;
}

bool codegen(Compilation& c, Context& x) {
  failpoint("codegen");
  c.code = generate_cuda(*c.plan, x.options.codegen.arch);
  return true;
}

bool nvrtc(Compilation& c, Context& x) {
  Expected<CompiledModule> module = compile_units(c.code->prelude, c.code->units, x.options.codegen);
  if (!module) {
    x.status = module.status();
    return false;
  }
  c.module = std::move(module).value();
  return true;
}

struct Pass {
  const char* name;
  PassFn run;
};

const std::vector<Pass>& passes() {
  static const std::vector<Pass> kPasses = {
      {"parse", parse},
      {"consts", consts},
      {"check", check},
      {"lower", lower},
      {"fold-constants", optimize<fold_constants>},
      {"cse", optimize<eliminate_common_subexpressions>},
      {"matmul-operands", optimize<fold_matmul_operands>},
      {"ragged-attention", optimize<share_ragged_attention>},
      {"dce", optimize<eliminate_dead_code>},
      {"padding", padding},
      {"collectives", collectives},
      {"inplace", in_place},
      {"schedule", schedule},
      {"fuse", fuse},
      {"memory", memory},
      {"dependencies", dependencies},
      {"chains", chains},
      {"scratch", scratch},
      {"codegen", codegen},
      {"nvrtc", nvrtc},
  };
  return kPasses;
}

size_t pass_index(const std::string& name) {
  const std::vector<Pass>& all = passes();
  for (size_t i = 0; i < all.size(); ++i)
    if (name == all[i].name) return i;
  internal_error(__FILE__, __LINE__, "no pass named '" + name + "'");
}

// The program as the last pass left it, as text.
std::string text_of(const Compilation& c) {
  if (c.module) {
    size_t cubin = 0, ptx = 0;
    for (const ModuleUnit& u : c.module->units) cubin += u.cubin.size(), ptx += u.ptx.size();
    return "module " + c.module->arch + ": cubin " + std::to_string(cubin) + " bytes, ptx " + std::to_string(ptx) +
           " bytes in " + std::to_string(c.module->units.size()) + " NVRTC unit(s)" +
           (c.module->from_cache ? " (NVRTC cache hit)" : "") + "\n";
  }
  if (c.code) return c.code->source;
  if (c.plan) return plan::print_plan(*c.plan);
  if (c.graph) return ir::print_ir(*c.graph);
  if (c.ast) return print_ast(*c.ast);
  return "";
}

// Runs passes [first, last] on c; false when one stopped the pipeline.
bool run_passes(Compilation& c, Context& x, size_t first, size_t last) {
  const std::vector<Pass>& all = passes();
  for (size_t i = first; i <= last && i < all.size(); ++i) {
    NvtxRange range(all[i].name);  // the pass on a profiler's timeline
    const bool go_on = all[i].run(c, x);
    c.last_pass = all[i].name;
    if (go_on && c.graph) verify_ir(c, all[i].name);
    const std::vector<std::string>& dumps = x.options.dump_after;
    if (go_on && x.options.dump && std::find(dumps.begin(), dumps.end(), all[i].name) != dumps.end())
      x.options.dump(all[i].name, text_of(c));
    if (!go_on) return false;
  }
  return true;
}

size_t last_pass(const PipelineOptions& options) {
  return options.stop_after.empty() ? passes().size() - 1 : pass_index(options.stop_after);
}

}  // namespace

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const Pass& p : passes()) names.push_back(p.name);
    return names;
  }();
  return kNames;
}

bool is_pass_name(const std::string& name) {
  const std::vector<std::string>& names = pass_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Expected<Compilation> run_pipeline(const SourceFile& file, DiagnosticSink& diags, const PipelineOptions& options) {
  Compilation c;
  Context x{&file, diags, options, Status::Ok()};
  run_passes(c, x, 0, last_pass(options));
  if (!x.status.ok()) return x.status;
  return c;
}

std::optional<ir::Graph> compile_to_ir(const SourceFile& file, DiagnosticSink& diags, const PipelineOptions& options,
                                       std::unique_ptr<ast::Module>* ast_out) {
  Compilation c;
  Context x{&file, diags, options, Status::Ok()};
  const bool done = run_passes(c, x, 0, pass_index("padding"));
  if (ast_out) *ast_out = std::move(c.ast);
  if (!done || diags.has_errors()) return std::nullopt;
  return std::move(c.graph);
}

plan::Plan plan_program(ir::Graph graph, const plan::PlanOptions& options) {
  PipelineOptions pipeline;
  pipeline.plan = options;
  DiagnosticSink diags;
  Compilation c;
  c.graph = std::move(graph);
  Context x{nullptr, diags, pipeline, Status::Ok()};
  const bool planned = run_passes(c, x, pass_index("collectives"), pass_index("scratch"));
  GDL_INTERNAL_ASSERT(planned && c.plan, "plan_program: the graph cannot be planned: " + x.status.message());
  return std::move(*c.plan);
}

Expected<Artifact> build_artifact(ir::Graph graph, const PipelineOptions& options) {
  DiagnosticSink diags;
  Compilation c;
  c.graph = std::move(graph);
  Context x{nullptr, diags, options, Status::Ok()};
  if (!run_passes(c, x, pass_index("collectives"), pass_index("nvrtc"))) return x.status;
  Artifact artifact;
  artifact.plan = std::move(*c.plan);
  artifact.kernels = std::move(c.code->kernels);
  artifact.cuda_source = std::move(c.code->source);
  artifact.module = std::move(*c.module);
  return artifact;
}

Expected<Artifact> compile_program_file(const std::string& path, const PipelineOptions& options) {
  DiagnosticSink diags;
  std::string fatal;
  std::optional<SourceFile> file = load_source(path, diags, &fatal);
  if (!fatal.empty()) return Status::NotFound(fatal);
  if (!file) return Status::CompileError(diags.render(SourceFile(path, "")));
  std::optional<ir::Graph> graph = compile_to_ir(*file, diags, options);
  if (!graph) return Status::CompileError(diags.render(*file));
  return build_artifact(std::move(*graph), options);
}

}  // namespace gdl
