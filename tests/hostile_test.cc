// Hostile input: programs and command lines that once crashed gdl, took
// exponential or quadratic time and memory, or were reported as internal
// errors. Each must end in a clear user error, in bounded time and memory.
// The programs whose errors fit the error corpus are in tests/errors/; these
// are the cases too large for it, the suggestion search, the planner's
// dependencies, and the tools' command lines.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "cpu_program.h"
#include "frontend/check.h"
#include "frontend/source_loader.h"
#include "gdl/version.h"
#include "interp/interp.h"
#include "lower/lower.h"
#include "pipeline.h"
#include "plan.h"

namespace gdl {
namespace {

namespace fs = std::filesystem;

// The diagnostics of a program, rendered.
std::string diagnostics_of(const std::string& text) {
  DiagnosticSink diags;
  SourceFile file = source_from_string("hostile.gdl", text);
  std::optional<ir::Graph> g = compile_to_ir(file, diags);
  CHECK_FALSE(g.has_value());
  return diags.render(file);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ------------------------------------------------------------- recursion depth

TEST_CASE("hostile: a chain of 10000 consts, each from the next, is an error, not a stack overflow") {
  std::string text = "program p;\n";
  const int n = 10000;
  for (int i = 0; i + 1 < n; ++i) text += "const c" + std::to_string(i) + " = c" + std::to_string(i + 1) + " + 1;\n";
  text += "const c" + std::to_string(n - 1) + " = 0;\ninput x : f32[4];\noutput y : f32[4];\ny = x * c0;\n";
  const std::string rendered = diagnostics_of(text);
  CHECK(rendered.find("hostile.gdl:2:7: error: const 'c0' is defined through a chain of more than " +
                      std::to_string(kMaxConstDepth) + " consts") != std::string::npos);
  CHECK(rendered.find("error:") == rendered.rfind("error:"));  // one report, not one per 256 consts
}

TEST_CASE("hostile: expressions nested through fns multiply the parser's depth limits, and are bounded") {
  // 250 fns, each calling the next at the bottom of a chain of 250 additions.
  std::string text = "program p;\ninput x : f32[4];\noutput y : f32[4];\n";
  for (int i = 0; i < 250; ++i) {
    text += "fn g" + std::to_string(i) + "(v: f32[4]) -> f32[4] { return " +
            (i == 249 ? std::string("v") : "g" + std::to_string(i + 1) + "(v)");
    for (int k = 0; k < 250; ++k) text += " + 1.0";
    text += "; }\n";
  }
  text += "y = g0(x);\n";
  const std::string rendered = diagnostics_of(text);
  CHECK(rendered.find("error: expressions nest more than " + std::to_string(kMaxEvalDepth) +
                      " deep through fn calls and consts") != std::string::npos);
}

TEST_CASE("hostile: a fn that calls itself twice is reported, not inlined exponentially") {
  const auto start = std::chrono::steady_clock::now();
  const std::string rendered = diagnostics_of(R"(program p;
input x : f32[4];
output y : f32[4];
fn f(v: f32[4]) -> f32[4] {
  return f(v) + f(v) * f(v);
}
y = f(x);
)");
  CHECK(rendered.find("recursive call: f -> f") != std::string::npos);
  CHECK(rendered.find("steps to unroll") == std::string::npos);
  CHECK(seconds_since(start) < 10);  // it took minutes when each call was inlined to the depth limit
}

TEST_CASE("hostile: thousands of fns are checked and lowered in linear time") {
  // Each fn's type parameters were found against a set of every global name
  // built anew for that fn: 4,000 fns took 30 s.
  std::string text = "program p;\ninput x : f32[4];\noutput y : f32[4];\n";
  const int n = 10000;
  for (int i = 0; i < n; ++i)
    text += "fn g" + std::to_string(i) + "(v: f32[4]) -> f32[4] { return " +
            (i + 1 < n ? "g" + std::to_string(i + 1) + "(v)" : std::string("v")) + "; }\n";
  text += "y = g0(x);\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string rendered = diagnostics_of(text);
  CHECK(rendered.find("fn calls nest more than " + std::to_string(kMaxInlineDepth) + " deep") != std::string::npos);
  CHECK(seconds_since(start) < 10);
}

// ------------------------------------------------------------- "did you mean"

// The distance the suggestion search used before it was bounded: full
// optimal string alignment.
size_t full_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::optional<std::string> full_closest(const std::string& name, const std::vector<std::string>& candidates) {
  const size_t limit = name.size() <= 3 ? 1 : 2;
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    if (c == name) continue;
    const size_t dist = full_distance(name, c);
    if (dist < best_distance && dist < name.size()) best_distance = dist, best = c;
  }
  return best;
}

TEST_CASE("hostile: the bounded suggestion search suggests what the full distance does") {
  std::mt19937 rng(7);
  auto word = [&](size_t length) {
    std::string s;
    for (size_t i = 0; i < length; ++i) s += static_cast<char>('a' + rng() % 3);  // few letters: many near misses
    return s;
  };
  for (int round = 0; round < 3000; ++round) {
    const std::string name = word(1 + rng() % 7);
    std::vector<std::string> candidates;
    for (int k = 0; k < 6; ++k) candidates.push_back(word(1 + rng() % 8));
    INFO(name);
    CHECK(closest_spelling(name, candidates) == full_closest(name, candidates));
  }
}

TEST_CASE("hostile: a 30000-character unknown name near a declared one is suggested in linear time") {
  const std::string declared(30000, 'a');
  const auto start = std::chrono::steady_clock::now();
  CHECK(closest_spelling(declared + "b", {declared, "x"}) == declared);
  CHECK(closest_spelling(declared + "bcd", {declared}) == std::nullopt);
  const std::string rendered = diagnostics_of("program p;\ninput " + declared + " : f32[4];\noutput y : f32[4];\ny = " +
                                              declared + "b;\n");
  CHECK(rendered.find("did you mean") != std::string::npos);
  CHECK(seconds_since(start) < 10);  // 14.6 s and 3.9 GB with the full matrix
}

TEST_CASE("hostile: many misspelt names among many declarations: the first 100 get a suggestion") {
  std::string text = "program p;\ninput x : f32[4];\noutput y : f32[4];\n";
  for (int i = 0; i < 2000; ++i) text += "const longname_number_" + std::to_string(i) + " = " + std::to_string(i) + ";\n";
  text += "let s = x;\n";
  for (int i = 0; i < 200; ++i) text += "s = s + longname_numbr_" + std::to_string(i * 10) + ";\n";
  text += "y = s;\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string rendered = diagnostics_of(text);
  size_t unknown = 0, suggested = 0;
  for (size_t at = 0; (at = rendered.find("error: unknown name", at)) != std::string::npos; ++at) ++unknown;
  for (size_t at = 0; (at = rendered.find("did you mean", at)) != std::string::npos; ++at) ++suggested;
  CHECK(unknown == 200);
  CHECK(suggested == 100);
  CHECK(rendered.find("did you mean 'longname_number_0'?") != std::string::npos);
  CHECK(seconds_since(start) < 10);
}

// ------------------------------------------------------------------ planning

// Every step's deps as the planner found them before: each earlier step
// tested, the latest first, a conflicting one kept unless already reachable.
std::vector<std::vector<int>> quadratic_deps(const plan::Plan& p) {
  std::vector<plan::StepSet> reach;
  std::vector<std::vector<int>> deps(p.steps.size());
  for (size_t j = 0; j < p.steps.size(); ++j) {
    reach.emplace_back(p.steps.size());
    for (size_t i = j; i-- > 0;) {
      if (reach[j].contains(i) || plan::conflict_between(p, p.steps[i], p.steps[j]) == plan::Conflict::kNone) continue;
      deps[j].push_back(static_cast<int>(i));
      reach[j].merge(reach[i]);
      reach[j].insert(i);
    }
    std::sort(deps[j].begin(), deps[j].end());
  }
  return deps;
}

void check_deps_as_before(const plan::Plan& p) {
  const std::vector<std::vector<int>> want = quadratic_deps(p);
  for (size_t j = 0; j < p.steps.size(); ++j) {
    INFO("step " << j);
    CHECK(p.steps[j].deps == want[j]);
  }
}

// Whether every conflicting pair is ordered, by testing every pair.
bool every_conflict_ordered(const plan::Plan& p) {
  const std::vector<plan::StepSet> reach = plan::reachability(p.steps);
  for (size_t j = 0; j < p.steps.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      if (!reach[j].contains(i) && plan::conflict_between(p, p.steps[i], p.steps[j]) != plan::Conflict::kNone)
        return false;
  return true;
}

// verify_plan finds an unordered conflict exactly when testing every pair does:
// each dep of each step dropped in turn.
void check_verify_as_before(plan::Plan p) {
  for (size_t j = 0; j < p.steps.size(); ++j)
    for (size_t d = 0; d < p.steps[j].deps.size(); ++d) {
      const std::vector<int> deps = p.steps[j].deps;
      p.steps[j].deps.erase(p.steps[j].deps.begin() + static_cast<std::ptrdiff_t>(d));
      const std::string problem = plan::verify_plan(p);
      INFO("step " << j << " without dep " << deps[d] << ": " << problem);
      CHECK((problem.find("does not wait for") == std::string::npos) == every_conflict_ordered(p));
      p.steps[j].deps = deps;
    }
}

TEST_CASE("hostile: dependencies from byte segments equal the test of every pair, on every example") {
  for (const auto& entry : fs::directory_iterator(GDL_SOURCE_DIR "/examples")) {
    if (entry.path().extension() != ".gdl") continue;
    INFO(entry.path().string());
    DiagnosticSink diags;
    std::string fatal;
    std::optional<SourceFile> file = load_source(entry.path().string(), diags, &fatal);
    REQUIRE(file.has_value());
    std::optional<ir::Graph> g = compile_to_ir(*file, diags);
    REQUIRE(g.has_value());
    for (bool fuse : {true, false}) {
      plan::PlanOptions options;
      options.fuse_elementwise = options.fuse_epilogues = options.fuse_prologues = fuse;
      plan::Plan p = plan_program(*g, options);
      check_deps_as_before(p);
      check_verify_as_before(std::move(p));
    }
  }
}

TEST_CASE("hostile: a long loop of independent branches plans in time, with the same dependencies") {
  // Each iteration's softmax reads only x: thousands of parallel branches
  // whose buffers cannot share space, joined by one chain of additions.
  auto program = [](int n) {
    return "program p;\ninput x : f32[4, 16];\noutput y : f32[4, 16];\nlet h = x;\nfor i in 0.." + std::to_string(n) +
           " {\n  h = h + softmax(x * i);\n}\ny = h;\n";
  };
  check_deps_as_before(plan_program(test_programs::compile_text(program(300))));
  const auto start = std::chrono::steady_clock::now();
  plan::Plan p = plan_program(test_programs::compile_text(program(4000)));
  CHECK(p.steps.size() >= 4000);
  MESSAGE("4000 iterations planned in " << seconds_since(start) << " s");
}

// ---------------------------------------------------------- the CPU reference

TEST_CASE("hostile: a value too large for the CPU reference is refused before anything is allocated") {
  ir::Graph g = test_programs::compile_text(R"(program p;
input x : f32[1073741824];
output y : f32[1073741824];
y = x + 1.0;
)");
  Expected<std::map<std::string, HostTensor>> out = interpret(g, Bindings{});
  CHECK(out.status().code() == StatusCode::kOutOfRange);
  CHECK(out.status().message().find("more than 2^28 elements") != std::string::npos);
}

// ---------------------------------------------------------------- the tools

// What caps a tool's memory at 1.5 GB, as the start of a shell command line:
// its address space (ulimit -v). A build with AddressSanitizer reserves
// terabytes of address space for its shadow memory at start-up and cannot
// run under that limit, so there ASan's own limits stand in: no allocation
// and no resident set above 1.5 GB (the tools are built alike).
std::string memory_limit() {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  const char* options = std::getenv("ASAN_OPTIONS");
  return std::string("ASAN_OPTIONS='") + (options && *options ? std::string(options) + ":" : "") +
         "max_allocation_size_mb=1500:hard_rss_limit_mb=1500' ";
#endif
#endif
  return "ulimit -v 1500000; ";
}

struct ToolRun {
  int exit_code = -1;
  std::string err;  // stderr
  std::string out;  // stdout
};

class Tools {
 public:
  Tools() : dir_(fs::path(GDL_BINARY_DIR) / ("hostile_tools_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~Tools() { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  // Runs a shell command line with at most 1.5 GB of memory, so a tool that
  // reads or allocates what it should have refused fails here.
  static std::string contents(const fs::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  ToolRun run(const std::string& command) const {
    const fs::path err = path("stderr.txt"), out = path("stdout.txt");
    const std::string line = memory_limit() + command + " >'" + out.string() + "' 2>'" + err.string() + "'";
    const int status = std::system(line.c_str());
    ToolRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.err = contents(err);
    r.out = contents(out);
    return r;
  }

 private:
  fs::path dir_;
};

// One line `TOOL: error: ...` containing `what`, and a non-zero exit.
void check_error(const ToolRun& r, const std::string& tool, const std::string& what, int exit_code) {
  INFO(r.err);
  CHECK(r.exit_code == exit_code);
  CHECK(r.err.rfind(tool + ": error: ", 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(r.err.find("internal") == std::string::npos);
  CHECK(r.err.find("INTERNAL") == std::string::npos);
}

const std::string kGdlc = GDLC_PATH, kGdlrun = GDLRUN_PATH;

const char* kRuntimeDimProgram = R"(program p;
dim B in [1, 64];
input x : f32[B, 1024];
scalar b : f32 = 1.0;
scalar n : i32 = 2;
input kv_len : i32;
output y : f32[B, 1024];
y = x * b + cast(n + kv_len, f32);
)";

TEST_CASE("tools: --help and --version answer on stdout with exit 0; an unknown option points to --help") {
  Tools t;
  for (const std::string& tool : {kGdlc, kGdlrun}) {
    const std::string name = fs::path(tool).filename().string();
    const ToolRun help = t.run(tool + " --help");
    INFO(help.err);
    CHECK(help.exit_code == 0);
    CHECK(help.err.empty());
    CHECK(help.out.find("Usage: " + name) != std::string::npos);
    CHECK(help.out.find("--version") != std::string::npos);
    CHECK(help.out.find("-D NAME=VALUE") != std::string::npos);
    const ToolRun version = t.run(tool + " --version");
    CHECK(version.exit_code == 0);
    CHECK(version.out == name + " " GDL_VERSION_STRING " (CUDA " GDL_CUDA_TOOLKIT_VERSION ")\n");
    const ToolRun unknown = t.run(tool + " p.gdl --no-such-option");
    check_error(unknown, name, "--no-such-option", 2);
    CHECK(unknown.err.find(name + " --help lists the options") != std::string::npos);
  }
  const fs::path program = t.write("p.gdl", kRuntimeDimProgram);
  check_error(t.run(kGdlc + " " + program.string() + " --emit=llvm"), "gdlc", "llvm not in {ast,ir,plan,cuda,graph,memory-svg}", 2);
  check_error(t.run(kGdlc + " " + program.string() + " --emit=ir --multiprocessors=0"), "gdlc",
              "'0' is not a multiprocessor count from 1 to 4096", 2);
  check_error(t.run(kGdlc + " " + program.string() + " --dump-after=nothing"), "gdlc", "unknown pass 'nothing'", 2);
  check_error(t.run(kGdlrun + " " + program.string() + " --cpu --gpu"), "gdlrun", "--cpu excludes --gpu", 2);
  check_error(t.run(kGdlrun + " " + program.string() + " --policy fast"), "gdlrun", "fast not in {buckets,update}", 2);
  check_error(t.run(kGdlrun + " " + program.string() + " --weight-map llama"), "gdlrun", "--weight-map requires --weights", 2);
  const ToolRun checked = t.run(kGdlc + " check " + program.string());
  INFO(checked.err);
  CHECK(checked.exit_code == 0);
}

TEST_CASE("tools: gdlrun runs every rank of a process group on the CPU reference") {
  Tools t;
  const fs::path program = t.write("tp.gdl",
                                   "program tp;\ngroup world ranks(3);\ninput x : f32[2, 6];\noutput s : f32[2, 6];\n"
                                   "output part : f32[2, 2];\ns = all_reduce(x);\npart = reduce_scatter(x, axis = 1);\n");
  fs::create_directories(t.path("out"));
  const ToolRun r = t.run(kGdlrun + " '" + program.string() + "' --cpu --seed 5 --print 0 --out '" +
                          t.path("out").string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("program tp on the CPU reference, 3 ranks of group world, no run-time dims, seeds 5..7") !=
        std::string::npos);
  CHECK(r.out.find("rank 2:") != std::string::npos);
  auto floats = [&](const std::string& name) {
    const std::string bytes = Tools::contents(t.path("out") / name);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  };
  const std::vector<float> s0 = floats("s.rank0.bin"), s2 = floats("s.rank2.bin");
  REQUIRE(s0.size() == 12);
  CHECK(s0 == s2);  // every rank gets the sum
  CHECK(floats("part.rank0.bin").size() == 4);
  CHECK(floats("part.rank0.bin") != floats("part.rank1.bin"));  // each rank its own part
  // Without --cpu it tries GPUs 0-2 first; without three it says so and runs the reference.
  const ToolRun automatic = t.run(kGdlrun + " '" + program.string() + "' --seed 5 --print 0");
  REQUIRE(automatic.exit_code == 0);
  CHECK(automatic.err.find("running every rank on the CPU reference interpreter") != std::string::npos);
  CHECK(automatic.out.find("program tp on the CPU reference, 3 ranks of group world") != std::string::npos);
}

TEST_CASE("hostile tools: gdlc -o refuses a device or a link instead of replacing it") {
  Tools t;
  const fs::path program = t.write("p.gdl", kRuntimeDimProgram);
  check_error(t.run(kGdlc + " " + program.string() + " -o /dev/null"), "gdlc", "not a regular file", 2);
  CHECK(fs::is_character_file("/dev/null"));
  const fs::path target = t.write("target.txt", "keep"), link = t.path("link.gdlx");
  fs::create_symlink(target, link);
  check_error(t.run(kGdlc + " " + program.string() + " -o " + link.string()), "gdlc", "not a regular file", 2);
  CHECK(fs::is_symlink(link));
}

TEST_CASE("hostile tools: gdlc --arch that NVRTC cannot target is a usage error") {
  Tools t;
  const fs::path program = t.write("p.gdl", kRuntimeDimProgram);
  for (const char* arch : {"sm_10", "sm_", "compute_90", "sm_99999"})
    check_error(t.run(kGdlc + " " + program.string() + " --emit=cuda --arch=" + arch), "gdlc", arch, 2);
  // An arch NVRTC knows, but the program's f16 matmul kernels use clusters: refused before NVRTC runs.
  check_error(t.run(kGdlc + " " GDL_SOURCE_DIR "/examples/mlp.gdl --arch=sm_80 --cache-dir=- -o " +
                    t.path("mlp.gdlx").string()),
              "gdlc", "thread-block clusters, which need sm_90", 2);
}

TEST_CASE("tools: gdlrun runs a program with state from zero, as a new session, and gdlc -D sets its consts") {
  Tools t;
  const fs::path program = t.write("s.gdl", R"(program s;
const N = 4;
state acc : f32[N];
input x : f32[N];
output y : f32[N];
acc = acc + x;
y = acc * 2.0;
)");
  auto y_of = [&](const std::string& extra) {
    const fs::path out = t.path("out");
    fs::remove_all(out);
    fs::create_directories(out);
    const ToolRun r = t.run(kGdlrun + " " + program.string() + " --cpu --set x=1.5 --out " + out.string() + extra);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    std::vector<float> values(fs::file_size(out / "y.bin") / 4);
    std::ifstream again(out / "y.bin", std::ios::binary);
    again.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    return values;
  };
  CHECK(y_of("") == std::vector<float>(4, 3.0f));             // (0 + 1.5) * 2
  CHECK(y_of(" -D N=6") == std::vector<float>(6, 3.0f));
}

TEST_CASE("hostile tools: gdlrun checks an input file's kind and size before reading it") {
  Tools t;
  const std::string run = kGdlrun + " " + t.write("p.gdl", kRuntimeDimProgram).string() + " --cpu --dim B=2 ";
  check_error(t.run(run + "--input x=/dev/zero"), "gdlrun", "'/dev/zero' is not a regular file", 1);
  check_error(t.run(run + "--input x=" + t.path("").string()), "gdlrun", "is not a regular file", 1);
  const fs::path big = t.write("big.bin", "");
  fs::resize_file(big, uint64_t{1} << 30);  // sparse: 1 GiB that must not be read
  check_error(t.run(run + "--input x=" + big.string()), "gdlrun", "holds 1073741824 bytes; x needs 8192", 1);
  const fs::path zero_artifact = t.path("zero.gdlx");
  fs::create_symlink("/dev/zero", zero_artifact);
  check_error(t.run(kGdlrun + " " + zero_artifact.string() + " --cpu"), "gdlrun", "not a regular file", 2);
}

TEST_CASE("hostile tools: gdlrun refuses a truncated weights file for a param, naming both sizes") {
  Tools t;
  const fs::path program = t.write("w.gdl", R"(program w;
param w : f32[256];
input x : f32[256];
output y : f32[256];
y = x * w;
)");
  const fs::path truncated = t.write("w.bin", std::string(1000, '\x01'));  // 1,024 bytes wanted
  check_error(t.run(kGdlrun + " " + program.string() + " --cpu --param w=" + truncated.string()), "gdlrun",
              "holds 1000 bytes; w needs 1024", 1);
}

TEST_CASE("hostile tools: gdlrun checks --dim against the bounds before allocating anything") {
  Tools t;
  const std::string run = kGdlrun + " " + t.write("p.gdl", kRuntimeDimProgram).string() + " --cpu ";
  check_error(t.run(run + "--dim B=-1"), "gdlrun", "--dim B=-1 is outside [1, 64]", 1);
  check_error(t.run(run + "--dim B=300000"), "gdlrun", "--dim B=300000 is outside [1, 64]", 1);
  check_error(t.run(run + "--dim B=0"), "gdlrun", "outside [1, 64]", 1);
  check_error(t.run(run + "--fallback --dim B=3000000000"), "gdlrun", "outside [1, 64]", 1);
}

TEST_CASE("hostile tools: gdlrun reads numbers whole and strictly") {
  Tools t;
  const std::string run = kGdlrun + " " + t.write("p.gdl", kRuntimeDimProgram).string() + " --cpu ";
  check_error(t.run(run + "--dim B=1e3"), "gdlrun", "'1e3' is not an integer", 2);
  check_error(t.run(run + "--dim B=8x"), "gdlrun", "'8x' is not an integer", 2);
  check_error(t.run(run + "--dim B="), "gdlrun", "--dim expects NAME=VALUE, got 'B='", 2);
  check_error(t.run(run + "--dim B=99999999999999999999"), "gdlrun", "is not an integer", 2);
  check_error(t.run(run + "--set kv_len=nan"), "gdlrun", "'nan' is not a finite number", 2);
  check_error(t.run(run + "--set kv_len=inf"), "gdlrun", "'inf' is not a finite number", 2);
  check_error(t.run(run + "--set kv_len=2.5"), "gdlrun", "is i32, and 2.5 is no i32 value", 1);
  check_error(t.run(run + "--scalar b=0.5x"), "gdlrun", "'0.5x' is not a finite number", 2);
  check_error(t.run(run + "--scalar n=0.5"), "gdlrun", "the scalar is i32, and 0.5 is no i32 value", 1);
  check_error(t.run(run + "--scalar n=3000000000"), "gdlrun", "no i32 value", 1);
  check_error(t.run(run + "--seed -1"), "gdlrun", "'-1' is not an integer", 2);
  check_error(t.run(run + "--print 1x"), "gdlrun", "'1x' is not a count", 2);
  const ToolRun ok = t.run(run + "--dim B=3 --set kv_len=5 --scalar b=0.5 --scalar n=-2 --seed 9");
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("hostile tools: gdlrun refuses a tensor too large for the host before allocating it") {
  Tools t;
  const fs::path program = t.write("big.gdl", R"(program p;
input x : f32[1073741824];
output y : f32[1073741824];
y = x + 1.0;
)");
  check_error(t.run(kGdlrun + " " + program.string() + " --cpu"), "gdlrun", "more than 2^28 elements", 1);
}

}  // namespace
}  // namespace gdl
