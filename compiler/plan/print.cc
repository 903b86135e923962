// The plan in words and as a picture: the listing of `gdlc --emit=plan`
// (print_plan) and the Graphviz DOT of `gdlc --emit=graph` (plan_to_dot).
#include "plan/print.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/matmul.h"
#include "plan/chains.h"

namespace gdl::plan {
namespace {

using ir::Op;
using ir::ValueId;


std::string human_bytes(uint64_t n) {
  if (n < 1024) return std::to_string(n) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

// The shortest of %g and %.17g that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string value_ref(ValueId v) { return "%" + std::to_string(v); }

// The ops of a step for listings: all of them up to kListedOps, else the
// first few, the last and how many values there are.
constexpr size_t kListedOps = 16;
std::string step_summary(const Plan& p, const Step& s) {
  if (s.values.size() <= kListedOps) return step_ops(p, s);
  std::string out;
  for (size_t i = 0; i < 6; ++i) out += std::string(ir::op_name(p.graph.node(s.values[i]).op)) + "+";
  return out + "...+" + ir::op_name(p.graph.node(s.values.back()).op) + " (" + std::to_string(s.values.size()) +
         " values)";
}

// "arena @256 (1.0 KiB)"; a view behind run-time axes adds its terms in the
// dims' layout extents: "arena @256 + 32*T (1.0 KiB)".
std::string region_text(const Buffer& b, const std::vector<DimInfo>& dims) {
  if (b.region == Region::kNone) return "by value";
  std::string out = (b.region == Region::kArena ? "arena @" : "params @") + std::to_string(b.offset);
  for (const OffsetTerm& t : b.terms) {
    out += " + " + std::to_string(t.coef);
    for (int d : t.dims) out += "*" + (static_cast<size_t>(d) < dims.size() ? dims[static_cast<size_t>(d)].name : "?");
  }
  return out + " (" + human_bytes(b.bytes) + ")";
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// ----------------------------------------------------------------- print_plan

namespace {

// What an in-place write or a copy the inplace pass made moves, and why.
std::string in_place_note(const Plan& p, const Step& st) {
  const ir::Graph& g = p.graph;
  const ir::Node& n = g.node(st.result);
  const std::string base = n.args.empty() ? "" : value_ref(n.args[0]);
  if (n.op == Op::kScatter || n.op == Op::kScatterAdd) {
    const ir::Node& values = g.node(n.args.at(2));
    return "    in place over " + base + ": " + (n.op == Op::kScatter ? "writes" : "adds") + " only the rows of " +
           value_ref(n.args[2]) + " (at most " + human_bytes(value_bytes(g, values).value_or(0)) + ")\n";
  }
  if (n.op == Op::kUpdateSlice) {
    // A whole update with members computes the value in its kernel; alone, it copies a stored value.
    const std::string how = replaces_whole(g, n) ? (st.values.size() > 1 ? ", computed in this step" : ", a whole copy") : "";
    return "    in place over " + base + ": writes " + human_bytes(value_bytes(g, g.node(n.args.at(1))).value_or(0)) +
           (n.name.empty() && how.empty() ? "" : " (" + n.name + (n.name.empty() ? how.substr(2) : how) + ")") + "\n";
  }
  if (n.op == Op::kCopy) return "    " + (n.name.empty() ? "copy" : n.name) + "\n";
  return "";
}

// How the step's matmuls read an operand where it lies instead of a copy
// of it (ops/matmul.h): "    reads %1 transposed, columns 10:20 of %2".
std::string layout_note(const Plan& p, const Step& st) {
  std::string out;
  for (ValueId v : st.values) {
    const ir::Node& n = p.graph.node(v);
    if (n.op != Op::kMatMul) continue;
    const ops::MatmulLayout l = ops::matmul_layout(n);
    if (l.as_stored()) continue;
    std::vector<std::string> parts;
    if (l.transpose_a) parts.push_back(value_ref(n.args[0]) + " transposed");
    std::string b = value_ref(n.args[1]) + (l.transpose_b ? " transposed" : "");
    if (l.windowed())
      b = "columns " + std::to_string(l.col_begin) + ":" + std::to_string(l.col_begin + l.col_count) + " of " + b;
    if (l.transpose_b || l.windowed()) parts.push_back(b);
    out += "    reads";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : " ") + parts[i];
    out += " in place\n";
  }
  return out;
}

}  // namespace

std::string print_plan(const Plan& p) {
  const ir::Graph& g = p.graph;
  std::string out = "plan " + g.program_name + ": " + std::to_string(p.steps.size()) + " steps\n";
  // Before plan_memory (a dump after an earlier pass) nothing has a buffer yet.
  const bool placed = p.buffers.size() == g.nodes.size();
  auto where = [&](ValueId v) { return placed ? region_text(p.buffers[static_cast<size_t>(v)], g.dims) : std::string("(not placed yet)"); };
  std::vector<bool> written(g.nodes.size(), false);
  for (const Step& st : p.steps) written.at(static_cast<size_t>(st.result)) = true;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    bool view = !ir::is_leaf(n.op) && !written[v] && placed && p.buffers[v].region != Region::kNone;
    if (!ir::is_leaf(n.op) && !view) continue;
    out += "  " + value_ref(static_cast<ValueId>(v)) + " " + ir::op_name(n.op);
    if (ir::is_leaf(n.op) && n.op != Op::kConstant) out += " \"" + n.name + "\"";
    if (n.op == Op::kConstant || n.op == Op::kScalar) out += (n.op == Op::kScalar ? " default " : " ") + number_text(n.attrs.value);
    if (view) out += " view of " + value_ref(n.args[0]);
    out += " : " + type_to_string(n.type, g.dims) + " -> " + where(static_cast<ValueId>(v)) + "\n";
  }
  // "step 3: matmul+add+gelu [%9 %10 %11] reads %8 %5 %7 -> %11 f16[B, 1024] in arena @0 (128.0 KiB); after 2"
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    const ir::Node& n = g.node(st.result);
    out += "  step " + std::to_string(s) + ": " + step_summary(p, st) + " [";
    for (size_t i = 0; i < st.values.size(); ++i) {
      if (st.values.size() > kListedOps && i == 6) {
        out += " ...";
        i = st.values.size() - 1;
      }
      out += (i ? " " : "") + value_ref(st.values[i]);
    }
    out += "]";
    if (!st.reads.empty()) out += " reads";
    for (ValueId r : st.reads) out += " " + value_ref(r);
    out += " -> " + value_ref(st.result) + " " + type_to_string(n.type, g.dims) + " in " + where(st.result);
    if (!st.deps.empty()) {
      out += "; after";
      for (size_t d = 0; d < st.deps.size(); ++d) out += (d ? ", " : " ") + std::to_string(st.deps[d]);
    }
    if (st.tickets_bytes > 0 || st.scratch_bytes > 0)
      out += "; scratch: tickets @" + std::to_string(st.tickets_offset) + ", partials @" +
             std::to_string(st.scratch_offset) + " (" + human_bytes(st.scratch_bytes) + ")";
    out += "\n";
    out += in_place_note(p, st);
    out += layout_note(p, st);
  }
  for (const Chain& c : p.chains)
    out += "  chain: steps " + std::to_string(c.first) + "-" + std::to_string(c.last) +
           " as one persistent kernel while the rows are at most " + std::to_string(chain::kMaxRows) +
           (c.row_groups > 0 ? ", and one in " + std::to_string(c.row_groups) + " row groups of " +
                                   std::to_string(chain::kMaxRows) + " up to " +
                                   std::to_string(c.row_groups * chain::kMaxRows)
                             : std::string()) +
           " (K = " + std::to_string(c.k) + "); exchange @" + std::to_string(c.scratch_offset) + " (" +
           human_bytes(chain_exchange_bytes(c.k, c.row_groups)) + "), tensor maps @" +
           std::to_string(c.scratch_offset + chain_tensor_maps_at(c, 0)) + "\n";
  for (const ir::Output& o : g.outputs)
    out += "  output \"" + o.name + "\" = " + value_ref(o.value) + " -> " + where(o.value) + "\n";
  out += "arena " + human_bytes(p.arena_bytes) + " (naive " + human_bytes(p.naive_bytes) + ", live lower bound " +
         human_bytes(p.live_lower_bound) + "), params " + human_bytes(p.params_bytes);
  if (p.scratch_bytes > 0) out += ", scratch " + human_bytes(p.scratch_bytes);
  out += "\n";
  return out;
}

// ---------------------------------------------------------------- plan_to_dot

std::string plan_to_dot(const Plan& p) {
  const ir::Graph& g = p.graph;
  std::string out = "digraph \"" + dot_escape(g.program_name) + "\" {\n  node [fontname=\"monospace\"];\n";
  // The step that writes each value's storage, for edges into output boxes.
  std::vector<int> writer(g.nodes.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s) writer[static_cast<size_t>(p.steps[s].result)] = static_cast<int>(s);
  auto source_of = [&](ValueId v) -> std::string {
    // Through views to the value that owns the storage.
    while (writer[static_cast<size_t>(v)] < 0 && (g.node(v).op == Op::kReshape || g.node(v).op == Op::kSlice))
      v = g.node(v).args[0];
    if (writer[static_cast<size_t>(v)] >= 0) return "s" + std::to_string(writer[static_cast<size_t>(v)]);
    Op op = g.node(v).op;
    if (op == Op::kInput || op == Op::kParam) return "v" + std::to_string(v);
    return "";
  };
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (n.op != Op::kInput && n.op != Op::kParam) continue;
    out += "  v" + std::to_string(v) + " [shape=box" + (n.op == Op::kParam ? ", style=dashed" : "") + ", label=\"" +
           ir::op_name(n.op) + " " + dot_escape(n.name) + "\\n" + dot_escape(type_to_string(n.type, g.dims)) + "\"];\n";
  }
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    out += "  s" + std::to_string(s) + " [label=\"#" + std::to_string(s) + " " + step_summary(p, st) + "\\n" +
           dot_escape(type_to_string(g.node(st.result).type, g.dims)) + "\"];\n";
  }
  // A chain's steps in one box: one kernel runs them while the rows are at most chain::kMaxRows.
  for (size_t c = 0; c < p.chains.size(); ++c) {
    out += "  subgraph cluster_chain" + std::to_string(c) + " {\n    label=\"chain " + std::to_string(c) +
           ": one kernel at <= " + std::to_string(chain::kMaxRows) + " rows" +
           (p.chains[c].row_groups > 0 ? ", one at <= " + std::to_string(p.chains[c].row_groups * chain::kMaxRows)
                                       : std::string()) +
           "\";\n    style=dashed;\n   ";
    for (int s = p.chains[c].first; s <= p.chains[c].last; ++s) out += " s" + std::to_string(s) + ";";
    out += "\n  }\n";
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    out += "  o" + std::to_string(i) + " [shape=box, style=bold, label=\"output " + dot_escape(g.outputs[i].name) + "\"];\n";
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (int d : p.steps[s].deps) out += "  s" + std::to_string(d) + " -> s" + std::to_string(s) + ";\n";
    for (ValueId r : p.steps[s].reads) {
      std::string src = source_of(r);
      if (!src.empty() && src[0] == 'v') out += "  " + src + " -> s" + std::to_string(s) + " [style=dashed];\n";
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    std::string src = source_of(g.outputs[i].value);
    if (!src.empty()) out += "  " + src + " -> o" + std::to_string(i) + ";\n";
  }
  return out + "}\n";
}

}  // namespace gdl::plan

// ----------------------------------------------------------- plan_memory_svg

namespace gdl::plan {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string coord(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

}  // namespace

std::string plan_memory_svg(const Plan& p) {
  const ir::Graph& g = p.graph;
  const int steps = static_cast<int>(p.steps.size());
  // Each value's first and last step: written at its step (leaves before
  // step 0), read through views at every step that reads a view of it.
  std::vector<int> first(g.nodes.size(), -1), last(g.nodes.size(), -2);
  const auto owner = [&](ValueId v) {
    while (is_view_node(g, g.node(v))) v = g.node(v).args.at(0);
    return v;
  };
  for (int s = 0; s < steps; ++s) {
    const ValueId r = p.steps[static_cast<size_t>(s)].result;
    first[static_cast<size_t>(r)] = s;
    last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], s);
    for (ValueId v : p.steps[static_cast<size_t>(s)].reads) {
      const size_t o = static_cast<size_t>(owner(v));
      last[o] = std::max(last[o], s);
    }
  }
  for (const ir::Output& o : g.outputs) last[static_cast<size_t>(owner(o.value))] = steps;
  for (ValueId v : g.leaves(Op::kState)) last[static_cast<size_t>(v)] = steps;

  const double width = 960, height = 600, left = 90, top = 40, right = 20, bottom = 50;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const double span = static_cast<double>(std::max<uint64_t>(p.arena_bytes, 1));
  const double step_w = plot_w / (steps + 2);  // a column before the first step and one past the last
  const auto x_of = [&](int step) { return left + (step + 1) * step_w; };
  const auto y_of = [&](uint64_t offset) { return top + static_cast<double>(offset) / span * plot_h; };

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + coord(width) + "\" height=\"" +
                    coord(height) + "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + xml_escape(g.program_name) + ": arena " + human_bytes(p.arena_bytes) + " over " +
         std::to_string(steps) + " steps</title>\n";
  out += "<text x=\"" + coord(left) + "\" y=\"20\">" + xml_escape(g.program_name) + ": arena " +
         human_bytes(p.arena_bytes) + " (naive " + human_bytes(p.naive_bytes) + ", live lower bound " +
         human_bytes(p.live_lower_bound) + "), " + std::to_string(steps) + " steps</text>\n";
  out += "<rect x=\"" + coord(left) + "\" y=\"" + coord(top) + "\" width=\"" + coord(plot_w) + "\" height=\"" +
         coord(plot_h) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  for (int i = 0; i <= 4; ++i) {  // offsets along y
    const uint64_t offset = p.arena_bytes * static_cast<uint64_t>(i) / 4;
    out += "<text x=\"" + coord(left - 6) + "\" y=\"" + coord(y_of(offset) + 4) + "\" text-anchor=\"end\">" +
           human_bytes(offset) + "</text>\n";
  }
  const int stride = std::max(1, steps / 10);  // steps along x
  for (int s = 0; s < steps; s += stride)
    out += "<text x=\"" + coord(x_of(s) + step_w / 2) + "\" y=\"" + coord(height - bottom + 16) +
           "\" text-anchor=\"middle\">" + std::to_string(s) + "</text>\n";
  out += "<text x=\"" + coord(left + plot_w / 2) + "\" y=\"" + coord(height - 10) +
         "\" text-anchor=\"middle\">step</text>\n";

  static const char* const kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"};
  size_t bars = 0;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const Buffer& b = p.buffers[v];
    const ir::Node& n = g.nodes[v];
    if (b.region != Region::kArena || b.bytes == 0 || is_view_node(g, n) || last[v] < -1) continue;
    const int from = ir::is_leaf(n.op) ? -1 : first[v];
    const int to = std::max(last[v], from);
    const double x = x_of(from), w = x_of(to + 1) - x;
    const double y = y_of(b.offset), h = std::max(1.0, y_of(b.offset + b.bytes) - y);
    const std::string what = "%" + std::to_string(v) + " " + ir::op_name(n.op) + (n.name.empty() ? "" : " \"" + n.name + "\"") +
                             " " + type_to_string(n.type, g.dims) + ": @" + std::to_string(b.offset) + ", " +
                             human_bytes(b.bytes) + ", steps " + (from < 0 ? "start" : std::to_string(from)) + " to " +
                             (to >= steps ? "end" : std::to_string(to));
    out += "<rect x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" width=\"" + coord(w) + "\" height=\"" + coord(h) +
           "\" fill=\"" + kColors[bars % 7] + "\" fill-opacity=\"0.6\" stroke=\"#333\" stroke-width=\"0.5\"><title>" +
           xml_escape(what) + "</title></rect>\n";
    ++bars;
  }
  return out + "</svg>\n";
}

}  // namespace gdl::plan
