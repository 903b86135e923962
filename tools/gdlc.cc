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
// --dump-after=PASS prints the program after that pass on stdout (AST, IR,
// plan, CUDA or the module's summary; "all" for every pass). `gdlc --help`
// lists every option (the command line is CLI11's: tools/command_line.h).
// Every stage runs through the pipeline (compiler/pipeline.cc).
//
// Exit codes: 0 ok, 1 the program is wrong, 2 usage or internal error.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "artifact.h"
#include "command_line.h"
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

struct Args {
  bool check_only = false;
  bool list_passes = false;
  std::string progress = "auto";  // --progress: auto (a terminal), always, never
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

// A pass's name; "all" too where `all` (--dump-after).
CLI::Validator pass_name(bool all) {
  return CLI::Validator(
      [all](std::string& pass) -> std::string {
        if ((all && pass == "all") || gdl::is_pass_name(pass)) return "";
        return "unknown pass '" + pass + "' (gdlc --list-passes names them)";
      },
      "");
}

// The options into `app` and `args`; what CLI11 cannot say alone (options
// that only make sense together) is checked after parsing.
void add_options(CLI::App& app, Args& args, bool& no_fuse, std::vector<std::string>& dumps, std::string& checked) {
  gdl::tools::add_standard_flags(app, "gdlc");
  app.add_option("FILE.gdl", args.input, "the program");
  CLI::App* check = app.add_subcommand("check", "check the program only (parse, types, shapes); diagnostics on stderr");
  check->add_option("FILE.gdl", checked, "the program")->required();
  check->callback([&args] { args.check_only = true; });
  check->fallthrough();
  app.add_option("-o,--output", args.output,
                 "write the artifact (FILE.gdlx.tmp, then renamed; an existing path that is not a regular file "
                 "is refused)")
      ->type_name("FILE.gdlx");
  app.add_option("--emit", args.emit, "print one stage on stdout")
      ->check(CLI::IsMember({"ast", "ir", "plan", "cuda", "graph", "memory-svg"}).description(""))
      ->type_name("ast|ir|plan|cuda|graph|memory-svg");
  gdl::tools::add_assignments<std::string>(app, "-D", args.pipeline.const_settings,
                                           "set a const of the program: an integer, a float, true/false or a dtype "
                                           "(-D N=4 or -DN=4)",
                                           "NAME=VALUE");
  app.add_option("--arch", args.pipeline.codegen.arch, "the GPU architecture of the kernels")
      ->check(CLI::Validator(
          [](std::string& arch) -> std::string {
            gdl::Status ok = gdl::check_arch(arch);
            return ok.ok() ? "" : ok.message();
          },
          ""))
      ->default_str(args.pipeline.codegen.arch)
      ->type_name("sm_NN");
  app.add_option("--multiprocessors", args.pipeline.target.multiprocessors,
                 "size K and position splits for a GPU of N multiprocessors (132: H100/H200 SXM)")
      ->check(gdl::tools::strict_number<int64_t>("a multiprocessor count from 1 to 4096", 1, 4096))
      ->default_val(args.pipeline.target.multiprocessors)
      ->type_name("N (1-4096)");
  app.add_option("--cache-dir", args.pipeline.codegen.cache_dir, "the NVRTC cache (\"-\": none)")->type_name("DIR");
  app.add_option("--stop-after", args.pipeline.stop_after, "stop after this pass")->check(pass_name(false))->type_name("PASS");
  gdl::tools::one_word_each(
      app.add_option("--dump-after", dumps, "print the program after these passes (\"all\": every pass)"))
      ->delimiter(',')
      ->check(pass_name(true))
      ->type_name("PASS[,PASS...]");
  app.add_option("--jobs,-j", args.pipeline.codegen.jobs, "NVRTC compiles at once (0: one per core)")
      ->check(gdl::tools::strict_number<int>("a count of jobs from 0 to 1024", 0, 1024))
      ->default_val(0)
      ->type_name("N");
  app.add_option("--progress", args.progress,
                 "a line per kernel unit as NVRTC finishes it, on stderr (auto: when stderr is a terminal)")
      ->check(CLI::IsMember({"auto", "always", "never"}).description(""))
      ->default_val(args.progress)
      ->type_name("auto|always|never");
  app.add_flag("--list-passes", args.list_passes, "print the passes in order and exit");
  app.add_flag("--no-opt", [&args](int64_t) { args.pipeline.optimize = false; },
               "no constant folding, CSE or dead-code elimination");
  app.add_flag("--no-fuse", no_fuse, "one kernel per IR value (with --emit=plan|cuda|graph|memory-svg or --dump-after)");
  app.footer(
      "Examples:\n"
      "  gdlc check model.gdl\n"
      "  gdlc model.gdl -o model.gdlx --cache-dir=.cache\n"
      "  gdlc model.gdl --emit=graph | dot -Tsvg > model.svg\n"
      "Exit codes: 0 ok, 1 the program is wrong, 2 usage or internal error.");
}

// What the options say together; "" when they fit.
std::string check_together(Args& args, bool no_fuse, const std::vector<std::string>& dumps, const std::string& checked) {
  if (!checked.empty()) {
    if (!args.input.empty()) return "more than one input file ('" + args.input + "' and '" + checked + "')";
    args.input = checked;
  }
  for (const std::string& pass : dumps) {
    if (pass == "all") {
      args.pipeline.dump_after = gdl::pass_names();
      break;
    }
    args.pipeline.dump_after.push_back(pass);
  }
  if (no_fuse)
    args.pipeline.plan.fuse_elementwise = args.pipeline.plan.fuse_epilogues = args.pipeline.plan.fuse_prologues = false;
  if (args.list_passes) return "";
  if (args.input.empty()) return "no input file";
  if (no_fuse && args.emit != "plan" && args.emit != "cuda" && args.emit != "graph" && args.emit != "memory-svg" &&
      args.pipeline.dump_after.empty())
    return "--no-fuse applies to --emit=plan, cuda, graph and memory-svg and to --dump-after only";
  if (struct stat info; !args.output.empty() && ::lstat(args.output.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    // Refused before compiling; write_artifact refuses it too.
    return "-o " + args.output + ": it exists and is not a regular file (a device, directory or symbolic link), "
           "which the artifact's rename would replace; give another path";
  if (!args.emit.empty() && !args.pipeline.stop_after.empty()) return "--emit and --stop-after both say where to stop; give one";
  if (!args.check_only && args.emit.empty() && args.output.empty() && args.pipeline.stop_after.empty() &&
      args.pipeline.dump_after.empty())
    return "nothing to do: give --emit=STAGE, -o FILE.gdlx, --stop-after or --dump-after (or use `gdlc check FILE`)";
  return "";
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
  if (args.progress == "always" || (args.progress == "auto" && ::isatty(STDERR_FILENO)))
    args.pipeline.codegen.progress = [](const gdl::CompileProgress& p) {
      if (p.from_cache) std::fprintf(stderr, "gdlc: [%zu/%zu] %s: cached\n", p.done, p.total, p.label.c_str());
      else std::fprintf(stderr, "gdlc: [%zu/%zu] %s: %.1f s\n", p.done, p.total, p.label.c_str(), p.seconds);
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
  std::fprintf(stderr, "gdlc: wrote %s: %zu kernel nodes, arena %llu bytes (naive %llu, live lower bound %llu), params %llu bytes, %s, %zu NVRTC unit%s in %.1f s%s\n",
               args.output.c_str(), plan.steps.size(), static_cast<unsigned long long>(plan.arena_bytes),
               static_cast<unsigned long long>(plan.naive_bytes), static_cast<unsigned long long>(plan.live_lower_bound),
               static_cast<unsigned long long>(plan.params_bytes), artifact.module.arch.c_str(),
               artifact.module.units.size(), artifact.module.units.size() == 1 ? "" : "s", artifact.module.compile_ms / 1000,
               artifact.module.from_cache ? " (NVRTC cache hit)" : "");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  bool no_fuse = false;
  std::vector<std::string> dumps;
  std::string checked;  // gdlc check FILE
  CLI::App app("gdlc: compiles a gdl program into an artifact (.gdlx) for gdlrun and the runtime, or prints one of "
               "its stages",
               "gdlc");
  add_options(app, args, no_fuse, dumps, checked);
  gdl::tools::CommandLineOutcome outcome = gdl::tools::parse_command_line(app, argc, argv, kExitUsage);
  if (outcome.go_on) {
    const std::string error = check_together(args, no_fuse, dumps, checked);
    if (!error.empty()) outcome = {false, kExitUsage, true, error};
  }
  if (!outcome.go_on) return gdl::tools::report_command_line("gdlc", outcome);
  try {
    return run(args);
  } catch (const gdl::InternalError& e) {
    std::fprintf(stderr, "gdlc: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gdlc: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
