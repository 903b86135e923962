// gdlc: the gdl compiler driver.
//
//   gdlc check FILE.gdl                      check only; diagnostics on stderr
//   gdlc FILE.gdl --emit=ast|ir|plan|cuda|graph   print one stage on stdout
//                                            (--no-fuse: plan one kernel per IR value)
//   gdlc FILE.gdl -o FILE.gdlx [--arch=sm_90] [--cache-dir=DIR]
//
// Exit codes: 0 ok, 1 the program is wrong, 2 usage or internal error.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "artifact.h"
#include "ast_print.h"
#include "pipeline.h"
#include "plan.h"
#include "source_loader.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitProgramError = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage: gdlc check FILE.gdl\n"
    "       gdlc FILE.gdl --emit=ast|ir|plan|cuda|graph [--no-opt] [--no-fuse]\n"
    "       gdlc FILE.gdl -o FILE.gdlx [--arch=sm_90] [--cache-dir=DIR] [--no-opt]\n";

struct Args {
  bool check_only = false;
  std::string input;
  std::string emit;    // "" when writing an artifact
  std::string output;  // -o
  gdl::PipelineOptions pipeline;
  gdl::plan::PlanOptions plan;  // --no-fuse: for the --emit stages
};

std::optional<Args> parse_args(int argc, char** argv, std::string* error) {
  Args args;
  int i = 1;
  if (i < argc && std::strcmp(argv[i], "check") == 0) {
    args.check_only = true;
    ++i;
  }
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--emit=", 0) == 0) {
      args.emit = a.substr(7);
      if (args.emit != "ast" && args.emit != "ir" && args.emit != "plan" && args.emit != "cuda" &&
          args.emit != "graph") {
        *error = "unknown --emit stage '" + args.emit + "' (use ast, ir, plan, cuda or graph)";
        return std::nullopt;
      }
    } else if (a == "-o") {
      if (++i >= argc) { *error = "-o needs a file name"; return std::nullopt; }
      args.output = argv[i];
    } else if (a.rfind("--arch=", 0) == 0) {
      args.pipeline.codegen.arch = a.substr(7);
    } else if (a.rfind("--cache-dir=", 0) == 0) {
      args.pipeline.codegen.cache_dir = a.substr(12);
    } else if (a == "--no-opt") {
      args.pipeline.optimize = false;
    } else if (a == "--no-fuse") {
      args.plan.fuse_elementwise = args.plan.fuse_epilogues = args.plan.fuse_prologues = false;
    } else if (a == "-h" || a == "--help") {
      *error = "";
      return std::nullopt;
    } else if (!a.empty() && a[0] == '-') {
      *error = "unknown option '" + a + "'";
      return std::nullopt;
    } else if (args.input.empty()) {
      args.input = a;
    } else {
      *error = "more than one input file ('" + args.input + "' and '" + a + "')";
      return std::nullopt;
    }
  }
  if (args.input.empty()) { *error = "no input file"; return std::nullopt; }
  if (!args.plan.fuse_elementwise && args.emit != "plan" && args.emit != "cuda" && args.emit != "graph") {
    *error = "--no-fuse applies to --emit=plan, cuda and graph only";
    return std::nullopt;
  }
  if (!args.check_only && args.emit.empty() && args.output.empty()) {
    *error = "nothing to do: give --emit=STAGE or -o FILE.gdlx (or use `gdlc check FILE`)";
    return std::nullopt;
  }
  return args;
}

int run(const Args& args) {
  gdl::DiagnosticSink diags;
  std::string fatal;
  std::optional<gdl::SourceFile> file = gdl::load_source(args.input, diags, &fatal);
  if (!fatal.empty()) {
    std::fprintf(stderr, "%s\n", fatal.c_str());
    return kExitUsage;
  }
  if (!file) {
    std::fputs(diags.render(gdl::SourceFile(args.input, "")).c_str(), stderr);
    return kExitProgramError;
  }
  std::unique_ptr<gdl::ast::Module> ast;
  std::optional<gdl::ir::Graph> graph = gdl::compile_to_ir(*file, diags, args.pipeline, &ast);
  std::fputs(diags.render(*file).c_str(), stderr);
  if (args.emit == "ast" && ast) {
    std::fputs(gdl::print_ast(*ast).c_str(), stdout);
    return diags.has_errors() ? kExitProgramError : kExitOk;
  }
  if (!graph) return kExitProgramError;
  if (args.check_only) return kExitOk;
  if (args.emit == "ir") {
    std::fputs(gdl::ir::print_ir(*graph).c_str(), stdout);
    return kExitOk;
  }
  if (args.emit == "plan" || args.emit == "graph") {
    gdl::plan::Plan plan = gdl::plan::make_plan(std::move(*graph), args.plan);
    std::string unsound = gdl::plan::check_plan(plan);
    if (!unsound.empty()) {
      std::fprintf(stderr, "gdlc: internal error: unsound plan: %s\n", unsound.c_str());
      return kExitUsage;
    }
    std::fputs((args.emit == "plan" ? gdl::plan::print_plan(plan) : gdl::plan::plan_to_dot(plan)).c_str(), stdout);
    return kExitOk;
  }
  if (args.emit == "cuda") {
    gdl::plan::Plan plan = gdl::plan::make_plan(std::move(*graph), args.plan);
    std::fputs(gdl::generate_cuda(plan, args.pipeline.codegen.arch).source.c_str(), stdout);
    return kExitOk;
  }
  gdl::Expected<gdl::Artifact> artifact = gdl::build_artifact(std::move(*graph), args.pipeline.codegen);
  if (!artifact.ok()) {
    std::fprintf(stderr, "gdlc: %s\n", artifact.status().ToString().c_str());
    return kExitUsage;
  }
  gdl::Status written = gdl::write_artifact(args.output, *artifact);
  if (!written.ok()) {
    std::fprintf(stderr, "gdlc: %s\n", written.ToString().c_str());
    return kExitUsage;
  }
  const gdl::plan::Plan& plan = artifact->plan;
  std::fprintf(stderr, "gdlc: wrote %s: %zu kernel nodes, arena %llu bytes (naive %llu, live lower bound %llu), params %llu bytes, %s%s\n",
               args.output.c_str(), plan.steps.size(), static_cast<unsigned long long>(plan.arena_bytes),
               static_cast<unsigned long long>(plan.naive_bytes), static_cast<unsigned long long>(plan.live_lower_bound),
               static_cast<unsigned long long>(plan.params_bytes), artifact->module.arch.c_str(),
               artifact->module.from_cache ? " (NVRTC cache hit)" : "");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  std::optional<Args> args = parse_args(argc, argv, &error);
  if (!args) {
    if (!error.empty()) std::fprintf(stderr, "gdlc: error: %s\n", error.c_str());
    std::fputs(kUsage, error.empty() ? stdout : stderr);
    return error.empty() ? kExitOk : kExitUsage;
  }
  try {
    return run(*args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdlc: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
