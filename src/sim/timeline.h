// Two renderings of a Timeline (schedule/timeline.h): an SVG picture (stages as rows) and a Chrome
// trace (JSON that Perfetto and chrome://tracing open). The data type itself lives in schedule/ so
// the runtime records timelines without the simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/timeline.h"

namespace hp {

struct SvgOptions {
  double width_px = 1400;   // drawing area for the time axis (labels and legend add to it)
  double row_px = 34;       // height of one stage row
  bool show_transfers = true;  // a thin strip under each row with sends and receives
  bool show_waits = true;      // hatched bars where a stage waits on communication
  double time_end = 0;         // 0 = the timeline's end; set it to align two pictures
  // Empty: event times are seconds, and the axis reads "time (s)", "time (ms)" or "time (us)"
  // after the span. Otherwise the times count an abstract unit that this text names (the
  // unit-cost pictures of `helixpipe schedule`, sim/sim_setup.h): the axis reads
  // "time (<time_unit>)" and its ticks are plain numbers of that unit.
  std::string time_unit;
};

// An SVG picture: one row per stage (the rows form a group of class "lanes"), ops coloured by part
// kind (embed, pre, attn, post, head) and shaded by direction (F light, B/I dark, W darkest),
// labelled with the micro-batch when wide enough. Below the lanes a time axis (group "axis") with
// ticks at round values (util/nice_ticks.h) and its unit, then the legend (group "legend"), which
// wraps at the lanes' width; the picture grows to hold both.
std::string render_svg(const Timeline& tl, const SvgOptions& opt = {});
// Two timelines on one time scale, one above the other (e.g. predicted and measured).
std::string render_side_by_side(const Timeline& predicted, const Timeline& measured,
                                const SvgOptions& opt = {});
// Chrome trace event format (JSON object form): pid = stage, tid 0 compute / 1 communication /
// 2 waits, "X" complete events in microseconds, process and thread names as metadata.
std::string render_chrome_trace(const Timeline& tl);

}  // namespace hp
