#include "ir.h"

#include <cstdio>
#include <cstdlib>

namespace gdl::ir {

const OpInfo& op_info(Op op) {
  static const OpInfo kTable[] = {
      {"input", OpClass::kLeaf},      {"param", OpClass::kLeaf},      {"scalar", OpClass::kLeaf},
      {"const", OpClass::kLeaf},      {"neg", OpClass::kUnary},       {"not", OpClass::kUnary},
      {"exp", OpClass::kUnary},       {"log", OpClass::kUnary},       {"sqrt", OpClass::kUnary},
      {"rsqrt", OpClass::kUnary},     {"tanh", OpClass::kUnary},      {"sigmoid", OpClass::kUnary},
      {"relu", OpClass::kUnary},      {"gelu", OpClass::kUnary},      {"silu", OpClass::kUnary},
      {"abs", OpClass::kUnary},       {"cast", OpClass::kUnary},      {"add", OpClass::kBinary},
      {"sub", OpClass::kBinary},      {"mul", OpClass::kBinary},      {"div", OpClass::kBinary},
      {"min", OpClass::kBinary},      {"max", OpClass::kBinary},      {"pow", OpClass::kBinary},
      {"lt", OpClass::kBinary},       {"le", OpClass::kBinary},       {"gt", OpClass::kBinary},
      {"ge", OpClass::kBinary},       {"eq", OpClass::kBinary},       {"ne", OpClass::kBinary},
      {"and", OpClass::kBinary},      {"or", OpClass::kBinary},       {"where", OpClass::kWhere},
      {"matmul", OpClass::kStructured}, {"sum", OpClass::kStructured}, {"mean", OpClass::kStructured},
      {"reduce_max", OpClass::kStructured}, {"softmax", OpClass::kStructured},
      {"layernorm", OpClass::kStructured}, {"rmsnorm", OpClass::kStructured},
      {"transpose", OpClass::kStructured}, {"reshape", OpClass::kStructured},
      {"slice", OpClass::kStructured}, {"concat", OpClass::kStructured},
      {"gather", OpClass::kStructured}, {"attention", OpClass::kStructured},
  };
  static_assert(sizeof(kTable) / sizeof(kTable[0]) == static_cast<size_t>(Op::kAttention) + 1,
                "op table out of sync with enum Op");
  return kTable[static_cast<size_t>(op)];
}

std::vector<ValueId> Graph::leaves(Op role) const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op == role) out.push_back(static_cast<ValueId>(i));
  return out;
}

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
