// The loss chart of `train --loss-svg` read back: round ticks on both axes (whole steps on x), the
// plot spanning exactly its first and last loss tick with every point inside, axis labels, and a
// legend below the axes, inside the picture.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/progress.h"
#include "runtime/train_state.h"
#include "../svg_test_util.h"

namespace hp {
namespace {

using test::SvgNode;

std::vector<StepRecord> history(int first, int last, double (*loss)(int)) {
  std::vector<StepRecord> h;
  for (int s = first; s <= last; ++s) h.push_back({s, loss(s), 1e-3, 1, 0.1, 100});
  return h;
}

void check_chart(const std::vector<StepRecord>& h) {
  const std::vector<SvgNode> nodes = test::parse_svg(loss_curve_svg(h, "t"));
  ASSERT_FALSE(nodes.empty());
  const double W = nodes[0].num("width"), H = nodes[0].num("height");
  // The plot frame: the first rect with a stroke.
  const SvgNode* frame = nullptr;
  for (const SvgNode& n : nodes)
    if (n.tag == "rect" && n.get("stroke") == "#444") frame = &n;
  ASSERT_NE(frame, nullptr);
  const test::Box plot = test::rect_box(*frame);

  // y: round labels; the lowest sits on the bottom edge, the highest on the top edge.
  std::vector<std::string> ylab;
  std::vector<double> yv, ypos;
  for (const SvgNode* t : test::texts(nodes, "axis-loss", "tick")) {
    ylab.push_back(t->text);
    ypos.push_back(t->num("y") - 4);  // the label's baseline is 4 px below its line
  }
  ASSERT_TRUE(test::round_tick_labels(ylab, &yv)) << ylab.size();
  // Labels are listed bottom up.
  EXPECT_NEAR(ypos.front(), plot.y1, 0.06);
  EXPECT_NEAR(ypos.back(), plot.y0, 0.06);
  EXPECT_GE(yv.size(), 3u);
  EXPECT_LE(yv.size(), 12u);
  auto Y = [&](double l) {
    return plot.y1 - (l - yv.front()) / (yv.back() - yv.front()) * (plot.y1 - plot.y0);
  };
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_NEAR(ypos[i], Y(yv[i]), 0.06) << ylab[i];

  // x: whole step numbers, round, inside the range of steps.
  std::vector<std::string> xlab;
  std::vector<double> xv;
  for (const SvgNode* t : test::texts(nodes, "axis-step", "tick")) xlab.push_back(t->text);
  if (xlab.size() >= 2) {
    ASSERT_TRUE(test::round_tick_labels(xlab, &xv));
    EXPECT_GE(xv[1] - xv[0], 1);
  } else {
    ASSERT_EQ(xlab.size(), 1u);
    xv.push_back(std::stod(xlab[0]));
  }
  for (double s : xv) {
    EXPECT_EQ(s, std::round(s));
    EXPECT_GE(s, h.front().step);
    EXPECT_LE(s, std::max(h.back().step, h.front().step + 1));
  }
  EXPECT_EQ(test::texts(nodes, "axis-loss", "axislabel").at(0)->text, "loss");
  EXPECT_EQ(test::texts(nodes, "axis-step", "axislabel").at(0)->text, "step");

  // Every point of both lines is inside the plot, and each raw point at its loss.
  int lines = 0;
  for (const SvgNode& n : nodes) {
    if (n.tag != "polyline") continue;
    ++lines;
    std::istringstream pts(n.get("points"));
    std::string xy;
    size_t i = 0;
    while (pts >> xy) {
      const double x = std::stod(xy.substr(0, xy.find(','))), y = std::stod(xy.substr(xy.find(',') + 1));
      EXPECT_GE(x, plot.x0 - 0.05);
      EXPECT_LE(x, plot.x1 + 0.05);
      EXPECT_GE(y, plot.y0 - 0.05);
      EXPECT_LE(y, plot.y1 + 0.05);
      if (lines == 1 && i < h.size()) {
        EXPECT_NEAR(y, Y(h[i].loss), 0.06);
      }
      ++i;
    }
  }
  EXPECT_EQ(lines, 2);

  // The legend: below the step label, inside the picture, saying where the run ended.
  double step_label_y = test::texts(nodes, "axis-step", "axislabel").at(0)->num("y");
  int legend_texts = 0;
  bool last = false;
  for (const SvgNode& n : nodes) {
    if (!n.in("legend")) continue;
    if (n.tag == "text") {
      ++legend_texts;
      EXPECT_GT(n.num("y") - 10, step_label_y);
      EXPECT_LE(n.num("y") + 3, H);
      EXPECT_LT(n.num("x"), W);
      if (n.text.find("last step " + std::to_string(h.back().step) + ": loss") == 0) last = true;
    } else if (n.tag == "line") {
      EXPECT_GT(n.num("y1"), plot.y1 + 20);
      EXPECT_LE(n.num("x2"), W);
    }
  }
  EXPECT_GE(legend_texts, 3);
  EXPECT_TRUE(last);
}

TEST(LossSvg, TicksAreRoundAndTheLegendIsBelowThePlot) {
  {
    SCOPED_TRACE("200 steps from 5.9 down to 1.7");
    check_chart(history(1, 200, [](int s) { return 1.7 + 4.2 / std::sqrt(static_cast<double>(s)); }));
  }
  {
    SCOPED_TRACE("30 steps of 5 / step");
    check_chart(history(1, 30, [](int s) { return 5.0 / s; }));
  }
  {
    SCOPED_TRACE("a flat loss");
    check_chart(history(1, 50, [](int) { return 2.0; }));
  }
  {
    SCOPED_TRACE("losses within 3e-4 of each other");
    check_chart(history(1, 40, [](int s) { return 2.0001 + 0.0002 * (s % 3) / 2; }));
  }
  {
    SCOPED_TRACE("a resumed run: steps 1001 to 1003");
    check_chart(history(1001, 1003, [](int s) { return 0.01 * (1010 - s); }));
  }
  {
    SCOPED_TRACE("one step");
    check_chart(history(7, 7, [](int) { return 3.25; }));
  }
}

TEST(LossSvg, TickLabelsCarryNoFloatNoise) {
  // Losses between 0.1 and 0.7: a step of 0.1 whose multiples would print 0.30000000000000004
  // if they were accumulated or printed in full.
  const std::string svg = loss_curve_svg(history(1, 60, [](int s) { return 0.12 + 0.01 * (s % 55); }), "t");
  EXPECT_NE(svg.find(">0.3</text>"), std::string::npos);
  EXPECT_EQ(svg.find("0000000"), std::string::npos);
}

}  // namespace
}  // namespace hp
