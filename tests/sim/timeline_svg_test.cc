// The timeline SVG read back as a picture: the time axis has round ticks in a unit picked from the
// span (or the abstract unit asked for) and says which; the legend sits in its own group clear of
// the lanes and inside the picture, which grows to hold it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "sim/timeline.h"
#include "../svg_test_util.h"
#include "sim_test_util.h"

namespace hp {
namespace {

using test::Box;
using test::SvgNode;

// `stages` stages with compute, transfer and wait events spread over [0, t_end] seconds.
Timeline sample_timeline(double t_end, int stages = 3) {
  Timeline tl;
  tl.num_stages = stages;
  tl.title = "sample";
  const int ops = 10;
  for (int s = 0; s < stages; ++s) {
    for (int i = 0; i < ops; ++i) {
      TimelineEvent e;
      e.stage = s;
      e.start = t_end * i / ops;
      e.end = t_end * (i + 0.8) / ops;
      e.category = i % 2 ? "B" : "F";
      e.dir = i % 2 ? Dir::kB : Dir::kF;
      e.mb = i;
      e.first_kind = static_cast<PartKind>(i % 5);
      e.name = "op";
      tl.events.push_back(e);
      TimelineEvent w = e;
      w.category = "wait";
      w.start = e.end;
      w.end = t_end * (i + 1) / ops;
      tl.events.push_back(w);
      TimelineEvent m = e;
      m.category = "send";
      m.peer = (s + 1) % stages;
      tl.events.push_back(m);
    }
  }
  return tl;
}

struct Picture {
  std::vector<SvgNode> nodes;
  double width = 0, height = 0;
  Box lanes;                          // around every lane of every timeline drawn
  std::vector<Box> lane_boxes;        // each timeline's lanes
  std::vector<std::string> ticks;     // tick labels of the time axis
  std::vector<double> tick_x;
  std::string axis_label;
  double axis_x0 = 0, axis_x1 = 0;    // the axis line
};

Picture read(const std::string& svg) {
  std::string why;
  EXPECT_TRUE(test::xml_well_formed(svg, &why)) << why;
  Picture p;
  p.nodes = test::parse_svg(svg);
  EXPECT_FALSE(p.nodes.empty());
  if (p.nodes.empty()) return p;
  EXPECT_EQ(p.nodes[0].tag, "svg");
  p.width = p.nodes[0].num("width");
  p.height = p.nodes[0].num("height");
  EXPECT_EQ(p.nodes[0].get("viewBox"), "0 0 " + p.nodes[0].get("width") + " " + p.nodes[0].get("height"));
  p.lanes = test::rects_bbox(p.nodes, "lanes");
  // Each <g class="lanes"> on its own: the rows' background rects follow one another.
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (p.nodes[i].tag != "g" || p.nodes[i].get("class") != "lanes") continue;
    Box b{1e18, 1e18, -1e18, -1e18};
    for (size_t j = i + 1; j < p.nodes.size() && p.nodes[j].groups.size() > p.nodes[i].groups.size();
         ++j) {
      if (p.nodes[j].tag != "rect") continue;
      Box r = test::rect_box(p.nodes[j]);
      b = {std::min(b.x0, r.x0), std::min(b.y0, r.y0), std::max(b.x1, r.x1), std::max(b.y1, r.y1)};
    }
    p.lane_boxes.push_back(b);
  }
  for (const SvgNode* t : test::texts(p.nodes, "axis", "tick")) {
    p.ticks.push_back(t->text);
    p.tick_x.push_back(t->num("x"));
  }
  auto labels = test::texts(p.nodes, "axis", "axislabel");
  EXPECT_EQ(labels.size(), 1u);
  if (!labels.empty()) p.axis_label = labels[0]->text;
  for (const SvgNode& n : p.nodes) {
    if (n.tag == "line" && n.in("axis")) {
      p.axis_x0 = n.num("x1");
      p.axis_x1 = n.num("x2");
      break;
    }
  }
  return p;
}

// The legend: its own group, below every lane, inside the picture, no rectangle of it on a lane.
void expect_legend_clear(const Picture& p) {
  int rects = 0, texts = 0;
  double legend_top = 1e18;
  for (const SvgNode& n : p.nodes) {
    if (!n.in("legend")) continue;
    if (n.tag == "rect") {
      ++rects;
      const Box r = test::rect_box(n);
      EXPECT_FALSE(r.intersects(p.lanes)) << "legend rect at " << r.x0 << "," << r.y0;
      for (const Box& l : p.lane_boxes) EXPECT_FALSE(r.intersects(l));
      EXPECT_GE(r.x0, 0);
      EXPECT_LE(r.x1, p.width);
      EXPECT_LE(r.y1, p.height);
      legend_top = std::min(legend_top, r.y0);
    } else if (n.tag == "text") {
      ++texts;
      // A text's baseline is its y; 11 px glyphs reach about 9 px above it and 3 below.
      EXPECT_GT(n.num("y") - 9, p.lanes.y1);
      EXPECT_LE(n.num("y") + 3, p.height);
      EXPECT_LT(n.num("x"), p.width);
      legend_top = std::min(legend_top, n.num("y") - 9);
    }
  }
  EXPECT_GE(rects, 15);  // three shades of five part kinds, and more
  EXPECT_GE(texts, 5);
  EXPECT_GT(legend_top, p.lanes.y1);
}

// Tick labels are round, spaced as their values, start at 0 and stay on the axis.
void expect_round_axis(const Picture& p, double span_in_unit) {
  std::vector<double> v;
  ASSERT_TRUE(test::round_tick_labels(p.ticks, &v));
  EXPECT_GE(v.size(), 4u);
  EXPECT_LE(v.size(), 16u);
  EXPECT_EQ(v.front(), 0);
  EXPECT_LE(v.back(), span_in_unit * (1 + 1e-9));
  EXPECT_GT(v.back() + (v[1] - v[0]), span_in_unit * (1 - 1e-9));  // no room left for another
  for (size_t i = 0; i < v.size(); ++i) {
    const double want = p.axis_x0 + v[i] / span_in_unit * (p.axis_x1 - p.axis_x0);
    EXPECT_NEAR(p.tick_x[i], want, 0.01) << p.ticks[i];
  }
}

TEST(TimelineSvg, AxisUnitFollowsTheSpanAndTicksAreRound) {
  struct Case {
    double t_end;
    const char* label;
    double scale;
  };
  for (Case c : {Case{12.34, "time (s)", 1}, Case{2.7, "time (s)", 1},
                 Case{0.0374, "time (ms)", 1e3}, Case{0.0011, "time (ms)", 1e3},
                 Case{0.00042, "time (us)", 1e6}, Case{3.3e-7, "time (us)", 1e6}}) {
    SCOPED_TRACE(c.t_end);
    const Picture p = read(render_svg(sample_timeline(c.t_end)));
    EXPECT_EQ(p.axis_label, c.label);
    expect_round_axis(p, c.t_end * c.scale);
    expect_legend_clear(p);
  }
}

TEST(TimelineSvg, AbstractUnitsAreNamedOnTheAxis) {
  SvgOptions opt;
  opt.time_unit = "units; 1 unit = one <part>";
  const Picture p = read(render_svg(sample_timeline(58), opt));
  EXPECT_EQ(p.axis_label, "time (units; 1 unit = one <part>)");
  expect_round_axis(p, 58);
  // Tooltips give plain numbers of the unit, not seconds.
  bool tip = false;
  for (const SvgNode& n : p.nodes)
    if (n.tag == "title" && n.text.find("[5.8 .. 10.44]") != std::string::npos) tip = true;
  EXPECT_TRUE(tip);
}

TEST(TimelineSvg, LegendWrapsInANarrowPictureAndTheHeightGrows) {
  SvgOptions wide, narrow;
  narrow.width_px = 300;
  const Timeline tl = sample_timeline(0.5);
  const Picture w = read(render_svg(tl, wide));
  const Picture n = read(render_svg(tl, narrow));
  expect_legend_clear(w);
  expect_legend_clear(n);
  auto legend_lines = [](const Picture& p) {
    std::set<double> ys;
    for (const SvgNode& e : p.nodes)
      if (e.tag == "text" && e.in("legend")) ys.insert(e.num("y"));
    return ys.size();
  };
  EXPECT_EQ(legend_lines(w), 1u);
  EXPECT_GE(legend_lines(n), 3u);
  EXPECT_GT(n.height, w.height);
  EXPECT_EQ(n.lanes.y1, w.lanes.y1);  // the lanes do not move; the legend is below them
  EXPECT_LT(n.width, w.width);
  // Without waits and transfers their entries go too.
  SvgOptions bare;
  bare.show_waits = bare.show_transfers = false;
  const std::string s = render_svg(tl, bare);
  EXPECT_EQ(s.find("waiting on a message"), std::string::npos);
  EXPECT_EQ(s.find("send / receive"), std::string::npos);
  EXPECT_NE(render_svg(tl).find("waiting on a message"), std::string::npos);
}

TEST(TimelineSvg, SideBySideSharesOneAxisAndKeepsTheLegendClear) {
  const Timeline a = sample_timeline(0.0374), b = sample_timeline(0.05, 2);
  const Picture p = read(render_side_by_side(a, b));
  ASSERT_EQ(p.lane_boxes.size(), 2u);
  EXPECT_LE(p.lane_boxes[0].y1, p.lane_boxes[1].y0);
  EXPECT_EQ(p.axis_label, "time (ms)");
  expect_round_axis(p, 50);
  expect_legend_clear(p);
  // The axis sits under the second timeline.
  for (const SvgNode* t : test::texts(p.nodes, "axis", "tick")) EXPECT_GT(t->num("y"), p.lanes.y1);
}

TEST(TimelineSvg, AnEmptyTimelineStillHasItsLabelAndLegend) {
  Timeline tl;
  tl.num_stages = 2;
  const Picture p = read(render_svg(tl));
  EXPECT_TRUE(p.ticks.empty());
  EXPECT_FALSE(p.axis_label.empty());
  expect_legend_clear(p);
}

}  // namespace
}  // namespace hp
