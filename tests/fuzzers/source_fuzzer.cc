// libFuzzer target: the compiler on arbitrary source text. run_pipeline
// parses, checks, lowers, optimises, plans and generates the CUDA C++
// (stopped after "codegen", so NVRTC never runs), then the diagnostics are
// rendered as gdlc prints them.
//
// A rejected program is an ordinary outcome. Findings: a sanitizer report,
// a crash, an uncaught exception (an InternalError is a bug in gdl, and so
// is std::bad_alloc: the compiler bounds what a program can make it
// allocate), or a pipeline that stops early without an error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frontend/diagnostics.h"
#include "frontend/source_loader.h"
#include "pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const gdl::SourceFile file =
      gdl::source_from_string("fuzz.gdl", std::string(reinterpret_cast<const char*>(data), size));
  gdl::DiagnosticSink diags;
  gdl::PipelineOptions options;
  options.stop_after = "codegen";
  gdl::Expected<gdl::Compilation> c = gdl::run_pipeline(file, diags, options);
  // Before NVRTC every problem is a diagnostic, never a Status.
  if (!c.ok()) {
    std::fprintf(stderr, "run_pipeline failed before NVRTC: %s\n", c.status().ToString().c_str());
    std::abort();
  }
  if (!diags.has_errors() && c->last_pass != "codegen") {
    std::fprintf(stderr, "the pipeline stopped after %s without an error\n", c->last_pass.c_str());
    std::abort();
  }
  (void)diags.render(file);
  return 0;
}
