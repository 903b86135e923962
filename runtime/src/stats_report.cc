// format_stats: SessionStats as the readable report that gdlrun --stats and
// the example programs print. One section per concern: memory, one-time
// graph costs, runs and submit times, run-time dims (policy, padding),
// buckets (hits, build costs), node updates, copies, fallbacks.
#include <cstdio>
#include <string>

#include "gdl/gdl.h"

namespace gdl {
namespace {

std::string format(const char* pattern, double a = 0, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, pattern, a, b, c, d);
  return buf;
}

std::string bytes_text(uint64_t n) {
  char buf[64];
  if (n >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(n) / (1 << 20));
  else if (n >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(n) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

std::string count(uint64_t n) { return std::to_string(n); }

}  // namespace

std::string format_stats(const SessionStats& s) {
  std::string out;
  out += "memory: arena " + bytes_text(s.arena_bytes) + ", params " + bytes_text(s.params_bytes) + "; " +
         count(s.node_count) + " kernel nodes per graph\n";
  out += "graphs: " + count(s.graphs_built) + " built" +
         format(" (build %.1f us, instantiate %.1f us, upload %.1f us in all)", s.graph_build_us, s.instantiate_us,
                s.upload_us) +
         ", re-instantiations " + count(s.reinstantiations) + "\n";
  out += "runs: " + count(s.runs) + " graph" + format(" (host submit mean %.2f us)", s.mean_submit_us) + ", " +
         count(s.eager_runs) + " eager" + format(" (host submit mean %.2f us)", s.mean_eager_submit_us) + "\n";
  if (s.last_device_us >= 0) out += format("last run on the device: %.2f us\n", s.last_device_us);
  if (!s.target_note.empty()) out += "target: " + s.target_note + "\n";
  for (const SessionStats::DimStats& d : s.dims) {
    out += "dim " + d.name + ": " + (d.update ? "node updates" : "buckets");
    if (!d.why_update.empty()) out += " (buckets cannot serve it: " + d.why_update + ")";
    out += "; rows computed " + count(d.rows_computed) + ", valid " + count(d.rows_valid);
    if (d.rows_computed > 0)
      out += format(", padding waste %.1f%%",
                    100.0 * static_cast<double>(d.rows_computed - d.rows_valid) / static_cast<double>(d.rows_computed));
    out += "\n";
  }
  for (const SessionStats::BucketStats& b : s.buckets) {
    out += "  bucket " + b.label + ": " + count(b.hits) + " hits";
    if (b.built)
      out += format("; graph built %.1f us, instantiated %.1f us, uploaded %.1f us", b.build_us, b.instantiate_us,
                    b.upload_us);
    else
      out += "; no graph (eager runs only)";
    out += "\n";
  }
  out += "node updates: " + count(s.node_updates);
  if (s.node_updates > 0)
    out += format(" (%.1f us in all, %.2f us each)", s.node_update_us, s.node_update_us / static_cast<double>(s.node_updates));
  out += "; valid-dims block writes " + count(s.valid_block_writes) + "\n";
  out += "input copies: " + count(s.input_copies) + ", " + bytes_text(s.input_copy_bytes) +
         format(", host time %.1f us\n", s.input_copy_us);
  out += "eager fallbacks: " + count(s.fallback_runs);
  if (s.fallback_runs > 0) out += format(" (%.1f ms in all)", s.fallback_us / 1000.0);
  out += "\n";
  return out;
}

}  // namespace gdl
