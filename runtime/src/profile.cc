// gdl/profile.h: profile_nodes and measure_graph_update_costs (the session
// measures, session_run.cc), and explain_graph: what the graph saves,
// predicted beside measured.
//
// 1. profile_nodes: per node, the median host time of its eager launch and
//    the median device time between events around it, and its deps.
// 2. `repeats` runs of run() + synchronize() and of run_eager() +
//    synchronize() (after one of each to warm up): median wall times, and
//    the mean host submit time of run() from the stats.
// 3. predict_timeline (timeline_model.h) on those tasks with the measured
//    graph submit time as the launch cost: the eager run ends when its last
//    task does (submits add up, the device waits whenever the host is
//    behind); the graph run ends when its last node does.
// 4. A table: the measured and predicted figures, the device's idle time
//    in the eager model, and the five slowest nodes.
// The measured wall times include the synchronize; the model does not.
// Where the runs launch a kernel of several steps (docs/design.md),
// profile_nodes still times the steps' own kernels, and the table says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "gdl/profile.h"
#include "cuda_util.h"
#include "session_impl.h"
#include "timeline_model.h"

namespace gdl {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

std::string line(const char* label, double measured, double predicted) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-34s %10.1f us %12.1f us\n", label, measured, predicted);
  return buf;
}

}  // namespace

Expected<std::vector<NodeTime>> profile_nodes(Session& session, int repeats) {
  return guarded("profile_nodes", [&]() -> Expected<std::vector<NodeTime>> {
    GDL_RETURN_IF_ERROR(session.internals().make_current());
    return session.internals().profile_nodes(repeats);
  });
}

Expected<GraphUpdateCosts> measure_graph_update_costs(Session& session, int repeats) {
  return guarded("measure_graph_update_costs", [&]() -> Expected<GraphUpdateCosts> {
    GDL_RETURN_IF_ERROR(session.internals().make_current());
    return session.internals().measure_graph_update_costs(repeats);
  });
}

Expected<GraphExplanation> explain_graph(Session& session, int repeats) {
  repeats = std::max(repeats, 1);
  Expected<std::vector<NodeTime>> nodes = profile_nodes(session, repeats);
  if (!nodes) return nodes.status();
  GraphExplanation e;
  e.nodes = nodes->size();

  std::vector<double> graph_wall, eager_wall;
  if (Status s = session.run(); !s.ok()) return s;  // warm up: the graph is built by now
  if (Status s = session.run_eager(); !s.ok()) return s;
  if (Status s = session.synchronize(); !s.ok()) return s;
  double submit_total = 0;
  const uint64_t multi_step_before = session.stats().multi_step_launches;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    if (Status s = session.run(); !s.ok()) return s;
    submit_total += session.stats().last_submit_us;
    if (Status s = session.synchronize(); !s.ok()) return s;
    graph_wall.push_back(us_since(start));
  }
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    if (Status s = session.run_eager(); !s.ok()) return s;
    if (Status s = session.synchronize(); !s.ok()) return s;
    eager_wall.push_back(us_since(start));
  }
  e.graph_submit_us = submit_total / repeats;
  e.measured_graph_us = median(graph_wall);
  e.measured_eager_us = median(eager_wall);

  std::vector<TimelineTask> tasks;
  std::vector<double> submits;
  for (const NodeTime& n : *nodes) {
    tasks.push_back({n.submit_us, n.device_us, n.deps});
    submits.push_back(n.submit_us);
    e.device_busy_us += n.device_us;
  }
  e.eager_submit_us = median(submits);
  TimelinePrediction p = predict_timeline(tasks, e.graph_submit_us);
  e.predicted_eager_us = p.eager_end_us;
  e.predicted_graph_us = p.graph_end_us;

  char head[200];
  std::snprintf(head, sizeof head, "timeline of one run: %zu nodes, device busy %.1f us; host submit %.2f us per eager launch, %.2f us per graph launch\n",
                e.nodes, e.device_busy_us, e.eager_submit_us, e.graph_submit_us);
  e.table = head;
  char columns[160];
  std::snprintf(columns, sizeof columns, "  %-34s %13s %15s\n", "", "measured", "predicted");
  e.table += columns;
  e.table += line("eager run (launch one by one)", e.measured_eager_us, e.predicted_eager_us);
  e.table += line("graph run (one launch)", e.measured_graph_us, e.predicted_graph_us);
  e.table += line("saved by the graph", e.measured_eager_us - e.measured_graph_us, e.predicted_eager_us - e.predicted_graph_us);
  char idle[160];
  std::snprintf(idle, sizeof idle, "  %-34s %13s %12.1f us\n", "eager: device idle, host behind", "", p.eager_device_idle_us);
  e.table += idle;
  e.table += "  (measured: wall time to completion, synchronize included; predicted: the timeline model)\n";
  if (session.stats().multi_step_launches > multi_step_before)
    e.table += "  (the measured runs launch kernels of several steps in place of the steps' own; the nodes below and\n"
               "   the prediction are the steps' own kernels)\n";
  std::vector<size_t> order(nodes->size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*nodes)[a].device_us > (*nodes)[b].device_us; });
  e.table += "  slowest nodes:\n";
  for (size_t i = 0; i < order.size() && i < 5; ++i) {
    const NodeTime& n = (*nodes)[order[i]];
    char buf[200];
    std::snprintf(buf, sizeof buf, "    #%-4zu %-36s device %9.2f us, submit %6.2f us\n", order[i], n.kernel.c_str(),
                  n.device_us, n.submit_us);
    e.table += buf;
  }
  return e;
}

}  // namespace gdl
