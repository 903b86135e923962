#include "timeline_model.h"

#include <algorithm>

namespace gdl {

TimelinePrediction predict_timeline(const std::vector<TimelineTask>& tasks, double graph_launch_us) {
  TimelinePrediction p;
  double submitted = 0, device_free = 0;
  for (const TimelineTask& t : tasks) {
    submitted += t.submit_us;
    double start = std::max(submitted, device_free);
    p.eager_device_idle_us += start - device_free;
    device_free = start + t.device_us;
    p.device_busy_us += t.device_us;
  }
  p.eager_end_us = device_free;

  std::vector<double> end(tasks.size(), 0);
  for (size_t i = 0; i < tasks.size(); ++i) {
    double start = graph_launch_us;
    for (int d : tasks[i].deps) start = std::max(start, end[static_cast<size_t>(d)]);
    end[i] = start + tasks[i].device_us;
    p.graph_end_us = std::max(p.graph_end_us, end[i]);
  }
  if (tasks.empty()) p.graph_end_us = graph_launch_us;
  return p;
}

}  // namespace gdl
