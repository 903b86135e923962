#include "frontend/diagnostics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace gdl {

void DiagnosticSink::error(SourceLoc loc, std::string message, std::string hint, uint32_t length) {
  diagnostics_.push_back({Severity::kError, loc, std::move(message), std::move(hint), std::max(1u, length)});
  ++error_count_;
}

void DiagnosticSink::warning(SourceLoc loc, std::string message, std::string hint, uint32_t length) {
  diagnostics_.push_back({Severity::kWarning, loc, std::move(message), std::move(hint), std::max(1u, length)});
}

void DiagnosticSink::add(Diagnostic d) {
  if (d.severity == Severity::kError) ++error_count_;
  diagnostics_.push_back(std::move(d));
}

static const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kError: return "error";
    case Severity::kWarning: return "warning";
    case Severity::kNote: return "note";
  }
  return "error";
}

std::string render_diagnostic(const Diagnostic& d, const SourceFile& file) {
  std::string out = file.path();
  if (d.loc.valid()) out += ":" + std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col);
  out += std::string(": ") + severity_name(d.severity) + ": " + d.message + "\n";
  std::string_view text = file.line(d.loc.line);
  if (d.loc.valid() && !text.empty()) {
    std::string number = std::to_string(d.loc.line);
    std::string gutter(number.size(), ' ');
    out += " " + number + " | " + std::string(text) + "\n";
    // Keep tabs in the padding so the caret lines up under tab-indented code.
    std::string pad;
    for (uint32_t i = 1; i < d.loc.col && i - 1 < text.size(); ++i) pad += text[i - 1] == '\t' ? '\t' : ' ';
    uint32_t room = d.loc.col - 1 < text.size() ? static_cast<uint32_t>(text.size()) - (d.loc.col - 1) : 1;
    uint32_t span = std::min(d.length, std::max(1u, room));
    out += " " + gutter + " | " + pad + "^" + std::string(span - 1, '~') + "\n";
  }
  if (!d.hint.empty()) {
    out += file.path();
    if (d.loc.valid()) out += ":" + std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col);
    out += ": hint: " + d.hint + "\n";
  }
  return out;
}

std::string DiagnosticSink::render(const SourceFile& file) const {
  std::vector<const Diagnostic*> order;
  for (const auto& d : diagnostics_) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [](const Diagnostic* a, const Diagnostic* b) {
    return a->loc.line != b->loc.line ? a->loc.line < b->loc.line : a->loc.col < b->loc.col;
  });
  std::string out;
  for (const Diagnostic* d : order) out += render_diagnostic(*d, file);
  return out;
}

}  // namespace gdl
