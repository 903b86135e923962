#include "passes/ir_print.h"

#include <cstdio>
#include <cstdlib>

namespace gdl::ir {

// Shortest text that reads back as the same double ("%.17g" would print 0.1
// as 0.10000000000000001, which makes golden files noisy).
static std::string format_number(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

static std::string attrs_text(const Node& n) {
  std::vector<std::string> parts;
  auto ints = [&](const char* key) {
    std::string s = std::string(key) + "=[";
    for (size_t i = 0; i < n.attrs.ints.size(); ++i) s += (i ? ", " : "") + std::to_string(n.attrs.ints[i]);
    parts.push_back(s + "]");
  };
  switch (n.op) {
    case Op::kSum: case Op::kMean: case Op::kReduceMax:
      parts.push_back("axis=" + std::to_string(n.attrs.axis));
      if (n.attrs.keepdims) parts.push_back("keepdims");
      break;
    case Op::kSoftmax: case Op::kConcat:
      parts.push_back("axis=" + std::to_string(n.attrs.axis));
      break;
    case Op::kLayerNorm: case Op::kRmsNorm: parts.push_back("eps=" + format_number(n.attrs.value)); break;
    case Op::kAttention: parts.push_back("scale=" + format_number(n.attrs.value)); break;
    case Op::kTranspose: ints("perm"); break;
    case Op::kSlice: ints("bounds"); break;
    default: break;
  }
  if (parts.empty()) return "";
  std::string out = " {";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out + "}";
}

std::string print_ir(const Graph& g) {
  std::string out = "program " + g.program_name + "\n";
  for (const DimInfo& d : g.dims) {
    out += "dim " + d.name + " in [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + "] buckets(";
    for (size_t i = 0; i < d.buckets.size(); ++i) out += (i ? ", " : "") + std::to_string(d.buckets[i]);
    out += std::string(") policy(") + (d.policy == DimPolicy::kUpdate ? "update" : "buckets") + ")\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    out += "%" + std::to_string(i) + " = " + op_name(n.op);
    if (n.op == Op::kInput || n.op == Op::kParam || n.op == Op::kScalar) out += " \"" + n.name + "\"";
    if (n.op == Op::kConstant) out += " " + format_number(n.attrs.value);
    if (n.op == Op::kScalar) out += " default " + format_number(n.attrs.value);
    for (size_t a = 0; a < n.args.size(); ++a) out += (a ? ", %" : " %") + std::to_string(n.args[a]);
    out += attrs_text(n);
    out += " : " + type_to_string(n.type, g.dims) + "\n";
  }
  for (const Output& o : g.outputs) out += "output \"" + o.name + "\" = %" + std::to_string(o.value) + "\n";
  return out;
}

}  // namespace gdl::ir
