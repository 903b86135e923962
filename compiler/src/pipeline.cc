// The passes in order:
//   1. load_source     read the file, check size and UTF-8
//   2. parse_module    ANTLR → AST (parse.cc is the only file that sees ANTLR)
//   3. check_module    names, static control flow, recursion, outputs, side effects
//   4. lower_module    inline, unroll, fold `if`, type and shape check → IR
//   5. fold_constants, eliminate_common_subexpressions, eliminate_dead_code
//   6. make_plan       schedule, views, fusion (fuse.cc), liveness, arena offsets, node deps
//   7. generate_cuda   CUDA C++ from the stdlib kernels
//   8. compile_cuda    NVRTC → CUBIN + PTX (cached on disk)
#include "pipeline.h"

#include "check.h"
#include "cse.h"
#include "dce.h"
#include "fold_constants.h"
#include "lower.h"
#include "parse.h"
#include "plan.h"
#include "source_loader.h"

namespace gdl {

std::optional<ir::Graph> compile_to_ir(const SourceFile& file, DiagnosticSink& diags,
                                       const PipelineOptions& options,
                                       std::unique_ptr<ast::Module>* ast_out) {
  if (!validate_source_text(file, diags)) return std::nullopt;
  std::unique_ptr<ast::Module> module = parse_module(file, diags);
  if (!module) return std::nullopt;
  check_module(*module, diags);
  std::optional<ir::Graph> graph;
  if (!diags.has_errors()) {
    graph = lower_module(*module, diags);
  } else {
    // Lowering still finds the type and shape errors the checker cannot see;
    // keep those, and drop its reports at a place the checker already
    // reported (the same problem seen twice) and its warnings.
    DiagnosticSink lowering;
    lower_module(*module, lowering);
    for (const Diagnostic& d : lowering.all()) {
      bool seen = false;
      for (const Diagnostic& e : diags.all()) seen |= e.loc.line == d.loc.line;
      if (d.severity == Severity::kError && !seen) diags.add(d);
    }
  }
  if (ast_out) *ast_out = std::move(module);
  if (diags.has_errors() || !graph) return std::nullopt;
  if (options.optimize) {
    fold_constants(*graph);
    eliminate_common_subexpressions(*graph);
    eliminate_dead_code(*graph);
  }
  std::string problem = ir::verify(*graph);
  GDL_INTERNAL_ASSERT(problem.empty(), "IR verification failed after optimisation: " + problem);
  return graph;
}

Expected<Artifact> build_artifact(ir::Graph graph, const CompileOptions& options) {
  Artifact artifact;
  artifact.plan = plan::make_plan(std::move(graph));
  std::string unsound = plan::check_plan(artifact.plan);
  if (!unsound.empty()) return Status::Internal("the planner produced an unsound plan: " + unsound);
  GeneratedCode code = generate_cuda(artifact.plan, options.arch);
  Expected<CompiledModule> module = compile_cuda(code.source, options);
  if (!module.ok()) return module.status();
  artifact.kernels = std::move(code.kernels);
  artifact.chains = std::move(code.chains);
  artifact.cuda_source = std::move(code.source);
  artifact.module = std::move(module).value();
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
  return build_artifact(std::move(*graph), options.codegen);
}

}  // namespace gdl
