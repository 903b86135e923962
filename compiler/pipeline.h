// The compiler as a flat list of passes (pipeline.cc lists them in order),
// from source text to an artifact:
//   text -> AST -> IR -> plan -> CUDA C++ -> module (CUBIN + PTX) -> artifact
// Every pass has a name; the pipeline stops after any of them
// (`gdlc --stop-after=PASS`) and prints the program as it is after any of
// them (`gdlc --dump-after=PASS`): the AST, the IR text, the plan listing, the
// CUDA source or the module's summary. `gdlc --emit=STAGE` is a stop with a
// print. A mistake in the program stops the pipeline with diagnostics; a bug
// in gdl is an InternalError (internal_error.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "artifact.h"
#include "codegen/codegen.h"
#include "codegen/nvrtc_compile.h"
#include "frontend/ast.h"
#include "frontend/diagnostics.h"
#include "frontend/source.h"
#include "gdl/status.h"
#include "ir.h"
#include "plan.h"
#include "plan/plan_options.h"

namespace gdl {

struct PipelineOptions {
  CompileOptions codegen;       // NVRTC: arch, cache
  plan::PlanOptions plan;       // fusion and chains
  bool optimize = true;         // fold constants, CSE, DCE
  // Values for the program's consts by name, as text (`gdlc -D H=2048`,
  // `-D DT=bf16`): frontend/const_settings.h.
  std::map<std::string, std::string> const_settings;
  // The GPU the kernel choices aim at (its multiprocessors and shared
  // memory); kept in the IR and the artifact.
  ir::Target target;
  std::string stop_after;       // a pass name; "" = every pass
  std::vector<std::string> dump_after;  // pass names whose result goes to `dump`
  std::function<void(const std::string& pass, const std::string& text)> dump;
};

// The passes' names in order.
const std::vector<std::string>& pass_names();
bool is_pass_name(const std::string& name);

// The program at each stage the passes reached.
struct Compilation {
  std::unique_ptr<ast::Module> ast;
  std::optional<ir::Graph> graph;
  std::optional<plan::Plan> plan;
  std::optional<GeneratedCode> code;
  std::optional<CompiledModule> module;
  std::string last_pass;  // the last pass that ran ("" when none)
};

// Runs the passes on `file` from the first, until options.stop_after (or
// the last). A rejected program stops after the pass that found it, with
// its diagnostics in `diags`; NVRTC failing is a non-ok Status.
Expected<Compilation> run_pipeline(const SourceFile& file, DiagnosticSink& diags, const PipelineOptions& options = {});

// Source text -> checked, optimised IR (the passes up to the planner).
// Every problem goes to diags; nullopt when there was an error. *ast_out
// (when given) receives the parsed module.
std::optional<ir::Graph> compile_to_ir(const SourceFile& file, DiagnosticSink& diags,
                                       const PipelineOptions& options = {},
                                       std::unique_ptr<ast::Module>* ast_out = nullptr);

// Optimised IR -> plan (the planning passes), checked.
plan::Plan plan_program(ir::Graph graph, const plan::PlanOptions& options = {});

// Optimised IR -> plan -> CUDA C++ -> NVRTC -> artifact.
Expected<Artifact> build_artifact(ir::Graph graph, const PipelineOptions& options = {});

// The whole pipeline on a file. A rejected program gives a kCompileError
// Status whose message is the rendered diagnostics; a missing file NotFound.
Expected<Artifact> compile_program_file(const std::string& path, const PipelineOptions& options = {});

}  // namespace gdl
