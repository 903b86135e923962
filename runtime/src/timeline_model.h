// A model of the eager and graph timelines (host submit and device queue),
// used to explain what a graph saves. From seed 000, section 02: submit cost
// overlaps with device work, so costs do not simply add up.
//
// Eager, one stream: the host submits task i when it has submitted tasks
// 0..i-1 (submit times add up); the device starts task i when it has been
// submitted and the previous task has finished.
// Graph: one launch of graph_launch_us on the host, then each node starts when
// the launch is done and all its deps have finished (the device runs
// independent nodes side by side).
//
// Example (the seed's): 10 serial tasks of 4 us submit and 1 us device end at
// 41 us eager and 14 us as a graph (launch 4 us); with 10 us device time both
// end at 104 us.
#pragma once

#include <vector>

namespace gdl {

struct TimelineTask {
  double submit_us = 0;   // host time to submit this task eagerly
  double device_us = 0;   // device time of the task
  std::vector<int> deps;  // earlier tasks it waits for (graph only; eager is serial)
};

struct TimelinePrediction {
  double eager_end_us = 0;
  double graph_end_us = 0;
  double device_busy_us = 0;      // sum of device times
  double eager_device_idle_us = 0;  // eager: time the device waited for the host
  double saved_us() const { return eager_end_us - graph_end_us; }
};

TimelinePrediction predict_timeline(const std::vector<TimelineTask>& tasks, double graph_launch_us);

}  // namespace gdl
