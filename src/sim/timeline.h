// Timelines: what ran where and when, as data, and two renderings of it — an SVG picture (stages
// as rows) and a Chrome trace (JSON that Perfetto and chrome://tracing open). The simulator fills a
// Timeline; the runtime records the same structure when it runs for real, so the two compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/ir.h"

namespace hp {

struct TimelineEvent {
  int stage = 0;
  double start = 0, end = 0;  // seconds from the start of the iteration
  std::string name;           // e.g. "F3 attn:2..pre:3", "send F3 attn:2 -> s1"
  // "F", "B", "I", "W" for compute; "send", "recv" for transfers; "wait" for a stage blocked on one.
  std::string category;
  int mb = -1;
  Dir dir = Dir::kF;
  PartKind first_kind = PartKind::kEmbed;  // colours compute ops
  int fold = 0;
  int peer = -1;      // transfers and waits: the other stage
  int64_t bytes = 0;  // transfers: message size

  bool is_compute() const;
};

struct Timeline {
  int num_stages = 0;
  std::string title;
  std::vector<TimelineEvent> events;

  double end_time() const;  // latest event end, 0 when empty
};

// "F3 attn:2..pre:3": direction, micro-batch, first and last part.
std::string compute_event_name(const ComputeOp& op);

struct SvgOptions {
  double width_px = 1400;   // drawing area for the time axis (labels and legend add to it)
  double row_px = 34;       // height of one stage row
  bool show_transfers = true;  // a thin strip under each row with sends and receives
  bool show_waits = true;      // hatched bars where a stage waits on communication
  double time_end = 0;         // 0 = the timeline's end; set it to align two pictures
};

// An SVG picture: one row per stage, ops coloured by part kind (embed, pre, attn, post, head) and
// shaded by direction (F light, B/I dark, W darkest), labelled with the micro-batch when wide
// enough; legend and time axis included.
std::string render_svg(const Timeline& tl, const SvgOptions& opt = {});
// Two timelines on one time scale, one above the other (e.g. predicted and measured).
std::string render_side_by_side(const Timeline& predicted, const Timeline& measured,
                                const SvgOptions& opt = {});
// Chrome trace event format (JSON object form): pid = stage, tid 0 compute / 1 communication /
// 2 waits, "X" complete events in microseconds, process and thread names as metadata.
std::string render_chrome_trace(const Timeline& tl);

}  // namespace hp
