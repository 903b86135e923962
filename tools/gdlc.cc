// gdlc: the gdl compiler driver.
//
//   gdlc check FILE.gdl                          check only; diagnostics on stderr
//   gdlc FILE.gdl --emit=ast|ir|plan|cuda|graph|memory-svg  print one stage on stdout
//   gdlc FILE.gdl -o FILE.gdlx [--arch=sm_90] [--cache-dir=DIR]
//   gdlc FILE.gdl --stop-after=PASS [--dump-after=PASS[,PASS...]]
//   gdlc --list-passes
// -o writes FILE.gdlx.tmp and renames it over FILE.gdlx, so a reader never
// sees half a file; a FILE.gdlx (or .tmp) that exists and is not a regular
// file (a device such as /dev/null, a directory, a symbolic link) is
// refused, not replaced.
// Options: --no-opt (no constant folding, CSE, DCE), --no-fuse (one kernel
// per IR value), --dump-after=PASS (the program after that pass on stdout:
// AST, IR, plan, CUDA or the module's summary; "all" for every pass).
// Every stage runs through the pipeline (compiler/pipeline.cc).
//
// Exit codes: 0 ok, 1 the program is wrong, 2 usage or internal error.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "artifact.h"
#include "codegen/nvrtc_compile.h"
#include "frontend/ast_print.h"
#include "frontend/source_loader.h"
#include "internal_error.h"
#include "passes/ir_print.h"
#include "pipeline.h"
#include "plan/print.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitProgramError = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage: gdlc check FILE.gdl\n"
    "       gdlc FILE.gdl --emit=ast|ir|plan|cuda|graph|memory-svg [--no-opt] [--no-fuse] [--arch=sm_90]\n"
    "       gdlc FILE.gdl -o FILE.gdlx [--arch=sm_90] [--cache-dir=DIR] [--no-opt] [--no-fuse]\n"
    "       gdlc FILE.gdl [--stop-after=PASS] [--dump-after=PASS[,PASS...]|all] [-o FILE.gdlx] ...\n"
    "       gdlc --list-passes\n"
    "-D NAME=VALUE (or -DNAME=VALUE) sets a const of the program: an integer, a float, true/false or a dtype\n"
    "--multiprocessors=N sizes K and position splits for a GPU of N multiprocessors (default 132: H100/H200 SXM)\n"
    "-o refuses a FILE.gdlx that exists and is not a regular file (a device, directory or symbolic link)\n";

struct Args {
  bool check_only = false;
  bool list_passes = false;
  std::string input;
  std::string emit;    // "" when not printing a stage
  std::string output;  // -o
  gdl::PipelineOptions pipeline;
};

// The pass after which --emit=STAGE prints.
const char* emit_stop(const std::string& emit) {
  if (emit == "ast") return "check";
  if (emit == "ir") return "padding";
  if (emit == "plan" || emit == "graph" || emit == "memory-svg") return "scratch";
  return "codegen";  // cuda
}

bool add_dumps(const std::string& list, Args& args, std::string* error) {
  if (list == "all") {
    args.pipeline.dump_after = gdl::pass_names();
    return true;
  }
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string pass = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!gdl::is_pass_name(pass)) {
      *error = "unknown pass '" + pass + "' (gdlc --list-passes names them)";
      return false;
    }
    args.pipeline.dump_after.push_back(pass);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

std::optional<Args> parse_args(int argc, char** argv, std::string* error) {
  Args args;
  int i = 1;
  if (i < argc && std::strcmp(argv[i], "check") == 0) {
    args.check_only = true;
    ++i;
  }
  bool no_fuse = false;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--emit=", 0) == 0) {
      args.emit = a.substr(7);
      if (args.emit != "ast" && args.emit != "ir" && args.emit != "plan" && args.emit != "cuda" &&
          args.emit != "graph" && args.emit != "memory-svg") {
        *error = "unknown --emit stage '" + args.emit + "' (use ast, ir, plan, cuda, graph or memory-svg)";
        return std::nullopt;
      }
    } else if (a == "-D" || (a.rfind("-D", 0) == 0 && a.size() > 2)) {
      std::string setting = a.size() > 2 ? a.substr(2) : "";
      if (setting.empty()) {
        if (++i >= argc) { *error = "-D needs NAME=VALUE"; return std::nullopt; }
        setting = argv[i];
      }
      const size_t eq = setting.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == setting.size()) {
        *error = "-D expects NAME=VALUE, got '" + setting + "'";
        return std::nullopt;
      }
      args.pipeline.const_settings[setting.substr(0, eq)] = setting.substr(eq + 1);
    } else if (a == "-o") {
      if (++i >= argc) { *error = "-o needs a file name"; return std::nullopt; }
      args.output = argv[i];
    } else if (a.rfind("--arch=", 0) == 0) {
      args.pipeline.codegen.arch = a.substr(7);
      if (gdl::Status arch = gdl::check_arch(args.pipeline.codegen.arch); !arch.ok()) {
        *error = arch.message();
        return std::nullopt;
      }
    } else if (a.rfind("--multiprocessors=", 0) == 0) {
      const std::string v = a.substr(18);
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != 0 || n < 1 || n > 4096) {
        *error = "--multiprocessors takes the target GPU's multiprocessor count (1 to 4096), got '" + v + "'";
        return std::nullopt;
      }
      args.pipeline.target.multiprocessors = n;
    } else if (a.rfind("--cache-dir=", 0) == 0) {
      args.pipeline.codegen.cache_dir = a.substr(12);
    } else if (a.rfind("--stop-after=", 0) == 0) {
      args.pipeline.stop_after = a.substr(13);
      if (!gdl::is_pass_name(args.pipeline.stop_after)) {
        *error = "unknown pass '" + args.pipeline.stop_after + "' (gdlc --list-passes names them)";
        return std::nullopt;
      }
    } else if (a.rfind("--dump-after=", 0) == 0) {
      if (!add_dumps(a.substr(13), args, error)) return std::nullopt;
    } else if (a == "--list-passes") {
      args.list_passes = true;
    } else if (a == "--no-opt") {
      args.pipeline.optimize = false;
    } else if (a == "--no-fuse") {
      no_fuse = true;
      args.pipeline.plan.fuse_elementwise = args.pipeline.plan.fuse_epilogues = args.pipeline.plan.fuse_prologues = false;
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
  if (args.list_passes) return args;
  if (args.input.empty()) { *error = "no input file"; return std::nullopt; }
  if (no_fuse && args.emit != "plan" && args.emit != "cuda" && args.emit != "graph" && args.emit != "memory-svg" &&
      args.pipeline.dump_after.empty()) {
    *error = "--no-fuse applies to --emit=plan, cuda, graph and memory-svg and to --dump-after only";
    return std::nullopt;
  }
  if (struct stat info; !args.output.empty() && ::lstat(args.output.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // Refused before compiling; write_artifact refuses it too.
    *error = "-o " + args.output + ": it exists and is not a regular file (a device, directory or symbolic link), "
             "which the artifact's rename would replace; give another path";
    return std::nullopt;
  }
  if (!args.emit.empty() && !args.pipeline.stop_after.empty()) {
    *error = "--emit and --stop-after both say where to stop; give one";
    return std::nullopt;
  }
  if (!args.check_only && args.emit.empty() && args.output.empty() && args.pipeline.stop_after.empty() &&
      args.pipeline.dump_after.empty()) {
    *error = "nothing to do: give --emit=STAGE, -o FILE.gdlx, --stop-after or --dump-after (or use `gdlc check FILE`)";
    return std::nullopt;
  }
  return args;
}

int run(Args& args) {
  if (args.list_passes) {
    for (const std::string& pass : gdl::pass_names()) std::printf("%s\n", pass.c_str());
    return kExitOk;
  }
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
  if (args.check_only) args.pipeline.stop_after = "padding";
  if (!args.emit.empty()) args.pipeline.stop_after = emit_stop(args.emit);
  args.pipeline.dump = [](const std::string& pass, const std::string& text) {
    std::printf("// ---- after %s\n%s", pass.c_str(), text.c_str());
  };
  gdl::Expected<gdl::Compilation> c = gdl::run_pipeline(*file, diags, args.pipeline);
  std::fputs(diags.render(*file).c_str(), stderr);
  if (!c.ok()) {
    if (c.status().code() == gdl::StatusCode::kInternal)
      std::fprintf(stderr, "gdlc: %s\n", c.status().ToString().c_str());
    else
      std::fprintf(stderr, "gdlc: error: %s\n", c.status().message().c_str());
    return kExitUsage;
  }
  const int program_status = diags.has_errors() ? kExitProgramError : kExitOk;
  if (args.emit == "ast") {
    if (c->ast) std::fputs(gdl::print_ast(*c->ast).c_str(), stdout);
    return program_status;
  }
  if (diags.has_errors()) return kExitProgramError;
  if (args.emit == "ir") std::fputs(gdl::ir::print_ir(*c->graph).c_str(), stdout);
  if (args.emit == "plan") std::fputs(gdl::plan::print_plan(*c->plan).c_str(), stdout);
  if (args.emit == "graph") std::fputs(gdl::plan::plan_to_dot(*c->plan).c_str(), stdout);
  if (args.emit == "memory-svg") std::fputs(gdl::plan::plan_memory_svg(*c->plan).c_str(), stdout);
  if (args.emit == "cuda") std::fputs(c->code->source.c_str(), stdout);
  if (args.output.empty()) return kExitOk;
  if (!c->module) {
    std::fprintf(stderr, "gdlc: -o needs every pass; the pipeline stopped after %s\n", c->last_pass.c_str());
    return kExitUsage;
  }
  gdl::Artifact artifact;
  artifact.plan = std::move(*c->plan);
  artifact.kernels = std::move(c->code->kernels);
  artifact.cuda_source = std::move(c->code->source);
  artifact.module = std::move(*c->module);
  gdl::Status written = gdl::write_artifact(args.output, artifact);
  if (!written.ok()) {
    std::fprintf(stderr, "gdlc: error: %s\n", written.message().c_str());
    return kExitUsage;
  }
  const gdl::plan::Plan& plan = artifact.plan;
  std::fprintf(stderr, "gdlc: wrote %s: %zu kernel nodes, arena %llu bytes (naive %llu, live lower bound %llu), params %llu bytes, %s%s\n",
               args.output.c_str(), plan.steps.size(), static_cast<unsigned long long>(plan.arena_bytes),
               static_cast<unsigned long long>(plan.naive_bytes), static_cast<unsigned long long>(plan.live_lower_bound),
               static_cast<unsigned long long>(plan.params_bytes), artifact.module.arch.c_str(),
               artifact.module.from_cache ? " (NVRTC cache hit)" : "");
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
  } catch (const gdl::InternalError& e) {
    std::fprintf(stderr, "gdlc: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdlc: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
