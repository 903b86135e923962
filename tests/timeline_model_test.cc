#include <doctest/doctest.h>

#include <cstddef>

#include "timeline_model.h"

using gdl::TimelineTask;

static std::vector<TimelineTask> serial_chain(int n, double submit, double device) {
  std::vector<TimelineTask> tasks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    tasks[static_cast<size_t>(i)] = {submit, device, {}};
    if (i > 0) tasks[static_cast<size_t>(i)].deps = {i - 1};
  }
  return tasks;
}

TEST_CASE("timeline: the seed's example, short device tasks expose the submit cost") {
  auto p = gdl::predict_timeline(serial_chain(10, 4.0, 1.0), 4.0);
  CHECK(p.eager_end_us == doctest::Approx(41.0));
  CHECK(p.graph_end_us == doctest::Approx(14.0));
  CHECK(p.saved_us() == doctest::Approx(27.0));
  CHECK(p.device_busy_us == doctest::Approx(10.0));
}

TEST_CASE("timeline: the seed's example, long device tasks hide the submit cost") {
  auto p = gdl::predict_timeline(serial_chain(10, 4.0, 10.0), 4.0);
  CHECK(p.eager_end_us == doctest::Approx(104.0));
  CHECK(p.graph_end_us == doctest::Approx(104.0));
  CHECK(p.saved_us() == doctest::Approx(0.0));
  CHECK(p.eager_device_idle_us == doctest::Approx(4.0));  // only the first submit
}

TEST_CASE("timeline: independent graph nodes overlap, eager stays serial") {
  std::vector<TimelineTask> tasks(8, TimelineTask{4.0, 5.0, {}});  // no deps at all
  auto p = gdl::predict_timeline(tasks, 2.0);
  CHECK(p.graph_end_us == doctest::Approx(7.0));
  CHECK(p.eager_end_us == doctest::Approx(4.0 + 8 * 5.0));
}

TEST_CASE("timeline: empty program") {
  auto p = gdl::predict_timeline({}, 3.0);
  CHECK(p.eager_end_us == 0.0);
  CHECK(p.graph_end_us == doctest::Approx(3.0));
}
