// The compiler pipeline as a flat list of passes (pipeline.cc). Each stage can
// be stopped after, which is what `gdlc --emit=...` does.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "artifact.h"
#include "ast.h"
#include "codegen.h"
#include "diagnostics.h"
#include "gdl/status.h"
#include "ir.h"
#include "source.h"

namespace gdl {

struct PipelineOptions {
  CompileOptions codegen;
  bool optimize = true;  // fold constants, CSE, DCE
};

// Source text → checked, optimised IR. Every problem goes to diags; nullopt
// when there was an error. *ast_out (when given) receives the parsed module.
std::optional<ir::Graph> compile_to_ir(const SourceFile& file, DiagnosticSink& diags,
                                       const PipelineOptions& options = {},
                                       std::unique_ptr<ast::Module>* ast_out = nullptr);

// Optimised IR → plan → CUDA C++ → NVRTC → artifact.
Expected<Artifact> build_artifact(ir::Graph graph, const CompileOptions& options);

// The whole pipeline on a file. A rejected program gives a kCompileError
// Status whose message is the rendered diagnostics.
Expected<Artifact> compile_program_file(const std::string& path, const PipelineOptions& options = {});

}  // namespace gdl
