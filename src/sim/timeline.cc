// Timeline renderings: SVG (hand-written XML, no dependencies) and Chrome trace JSON.
#include "sim/timeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "sim/cost_model.h"
#include "util/nice_ticks.h"

namespace hp {

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Fill colour by part kind (hue) and direction (shade): F light, B/I dark, W darkest.
const char* fill_color(PartKind k, Dir d) {
  static const char* const kColors[5][3] = {
      {"#d4d4d4", "#8c8c8c", "#5a5a5a"},  // embed: greys
      {"#a9c9ff", "#3b78d8", "#1d4a94"},  // pre: blues
      {"#ffc98f", "#e8711a", "#9c4406"},  // attn: oranges
      {"#b8e4ab", "#43a336", "#27691e"},  // post: greens
      {"#dfc6f2", "#9a5cc6", "#633192"},  // head: purples
  };
  int shade = d == Dir::kF ? 0 : d == Dir::kW ? 2 : 1;
  return kColors[static_cast<int>(k)][shade];
}

// The axis unit: an abstract one named by the options, else seconds, milliseconds or microseconds
// picked from the span (the same thresholds as human_seconds in src/util/human_units.h), so that
// tick labels stay between about 1 and 1000.
struct AxisUnit {
  double per_second = 1;  // tick value = time x per_second
  std::string name;
};

AxisUnit axis_unit(double span, const SvgOptions& opt) {
  if (!opt.time_unit.empty()) return {1.0, opt.time_unit};
  if (span >= 1) return {1.0, "s"};
  if (span >= 1e-3) return {1e3, "ms"};
  return {1e6, "us"};
}

// A time for tooltips and subtitles: in its own unit for seconds, a plain number otherwise.
std::string fmt_time(double t, const SvgOptions& opt) {
  if (!opt.time_unit.empty()) return fmt::format("{:.4g}", t);
  AxisUnit u = axis_unit(std::abs(t), opt);
  return fmt::format("{:.4g} {}", t * u.per_second, u.name);
}

constexpr double kLeft = 78;   // stage labels
constexpr double kRight = 24;  // room for the last tick label
constexpr double kTitleH = 32;
constexpr double kAxisH = 40;    // tick marks, tick labels, the axis label
constexpr double kLegendGap = 6;  // between the axis label and the legend
constexpr double kLegendLineH = 18;
constexpr double kBottom = 6;
constexpr double kCharW = 6.6;  // a generous width of one 11 px character, to lay text out

// Draws one timeline's rows starting at y0 with the given time scale; returns the height used.
// The rows and everything on them form one group of class "lanes".
double draw_rows(std::string& svg, const Timeline& tl, const SvgOptions& opt, double y0,
                 double t_end, const std::string& subtitle) {
  const double row = opt.row_px;
  const double px_per_s = t_end > 0 ? opt.width_px / t_end : 0;
  const double bar_h = opt.show_transfers ? row * 0.62 : row * 0.8;
  const double strip_h = row * 0.22;
  double y = y0;
  if (!subtitle.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"sub\">{}</text>\n", kLeft,
                       y + 14, xml_escape(subtitle));
    y += 20;
  }
  svg += "<g class=\"lanes\">\n";
  for (int s = 0; s < tl.num_stages; ++s) {
    double ry = y + s * row;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", kLeft,
        ry, opt.width_px, row, s % 2 ? "#f6f6f6" : "#ffffff");
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"stage\">stage {}</text>\n", kLeft - 8,
                       ry + bar_h * 0.5 + 5, s);
  }
  for (const TimelineEvent& e : tl.events) {
    if (e.stage < 0 || e.stage >= tl.num_stages) continue;
    double x = kLeft + e.start * px_per_s;
    double w = std::max((e.end - e.start) * px_per_s, 0.0);
    double ry = y + e.stage * row + 2;
    std::string tip = fmt::format("{}  [{} .. {}]", e.name, fmt_time(e.start, opt),
                                  fmt_time(e.end, opt));
    if (e.is_compute()) {
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" "
          "class=\"op\"><title>{}</title></rect>\n",
          x, ry, std::max(w, 0.5), bar_h - 2, fill_color(e.first_kind, e.dir), xml_escape(tip));
      std::string label = std::to_string(e.mb);
      double font = std::min(11.0, bar_h * 0.55);
      if (w >= font * 0.62 * static_cast<double>(label.size()) + 2) {
        svg += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" class=\"mb\" font-size=\"{:.1f}\" fill=\"{}\">{}</text>\n",
            x + w / 2, ry + (bar_h - 2) / 2 + font * 0.35, font,
            e.dir == Dir::kF ? "#222" : "#fff", label);
      }
    } else if (e.category == "wait") {
      if (!opt.show_waits || w <= 0) continue;
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"url(#hatch)\">"
          "<title>{}</title></rect>\n",
          x, ry, w, bar_h - 2, xml_escape(tip));
    } else if (opt.show_transfers && (e.category == "send" || e.category == "recv")) {
      double sy = y + e.stage * row + bar_h + (e.category == "send" ? 0 : strip_h * 0.5);
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\">"
          "<title>{}</title></rect>\n",
          x, sy, std::max(w, 0.5), strip_h * 0.5, e.category == "send" ? "#5b6b7d" : "#a3b3c4",
          xml_escape(tip));
    }
  }
  svg += "</g>\n";
  return y + tl.num_stages * row - y0;
}

// The time axis under the lanes (group "axis"): ticks at round values of the unit (util/nice_ticks.h)
// and the label "time (<unit>)". Takes kAxisH of height below y.
void draw_axis(std::string& svg, const SvgOptions& opt, double y, double t_end) {
  svg += "<g id=\"axis\">\n";
  const AxisUnit unit = axis_unit(t_end, opt);
  if (t_end > 0) {
    const double span = t_end * unit.per_second;
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"axis\"/>\n",
                       kLeft, y, kLeft + opt.width_px, y);
    // About one tick per 110 px (10 over the default 1400), so that labels never crowd.
    const NiceTicks ticks =
        nice_ticks(0, span, std::clamp(static_cast<int>(opt.width_px / 110), 2, 10));
    for (double v : ticks.values) {
      const double x = kLeft + v / span * opt.width_px;
      svg += fmt::format(
          "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" class=\"axis\"/>"
          "<text x=\"{:.2f}\" y=\"{:.1f}\" class=\"tick\">{}</text>\n",
          x, y, x, y + 5, x, y + 17, ticks.label(v));
    }
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"axislabel\">time ({})</text>\n",
                     kLeft + opt.width_px / 2, y + 33, xml_escape(unit.name));
  svg += "</g>\n";
}

// One legend entry: its width and how to draw it with its top-left corner at (x, y).
struct LegendItem {
  double width = 0;
  std::function<std::string(double x, double y)> draw;
};

double text_width(const std::string& s) { return kCharW * static_cast<double>(s.size()); }

std::vector<LegendItem> legend_items(const SvgOptions& opt) {
  std::vector<LegendItem> items;
  auto text = [](double x, double y, const std::string& s) {
    return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>", x, y + 10,
                       xml_escape(s));
  };
  for (PartKind k : {PartKind::kEmbed, PartKind::kPre, PartKind::kAttn, PartKind::kPost,
                     PartKind::kHead}) {
    const std::string name = part_kind_str(k);
    items.push_back({3 * 13 + 3 + text_width(name), [k, name, text](double x, double y) {
                       std::string out;
                       for (Dir d : {Dir::kF, Dir::kB, Dir::kW}) {
                         out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" "
                                            "height=\"12\" fill=\"{}\"/>",
                                            x, y, fill_color(k, d));
                         x += 13;
                       }
                       return out + text(x + 3, y, name);
                     }});
  }
  for (std::string note : {"shade: F light, B or I middle, W dark", "colour: the op's first part",
                           "number: micro-batch"}) {
    items.push_back({text_width(note), [note, text](double x, double y) {
                       return text(x, y, note);
                     }});
  }
  if (opt.show_waits) {
    const std::string note = "waiting on a message";
    items.push_back({22 + text_width(note), [note, text](double x, double y) {
                       return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" "
                                          "height=\"12\" fill=\"url(#hatch)\"/>",
                                          x, y) +
                              text(x + 22, y, note);
                     }});
  }
  if (opt.show_transfers) {
    const std::string note = "send / receive";
    items.push_back({22 + text_width(note), [note, text](double x, double y) {
                       return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" "
                                          "height=\"5\" fill=\"#5b6b7d\"/><rect x=\"{:.1f}\" "
                                          "y=\"{:.1f}\" width=\"18\" height=\"5\" "
                                          "fill=\"#a3b3c4\"/>",
                                          x, y + 1, x, y + 7) +
                              text(x + 22, y, note);
                     }});
  }
  return items;
}

// The legend (group "legend") below everything else, starting at y: entries flow left to right
// and wrap at the right edge of the lanes; an entry wider than that gets a line of its own and
// widens the picture. Returns {height, rightmost x drawn}.
std::pair<double, double> draw_legend(std::string& svg, const SvgOptions& opt, double y) {
  constexpr double kGap = 18;
  const double right_edge = kLeft + opt.width_px;
  double x = kLeft, right = kLeft;
  int lines = 1;
  svg += "<g id=\"legend\">\n";
  for (const LegendItem& item : legend_items(opt)) {
    if (x > kLeft && x + item.width > right_edge) {
      x = kLeft;
      ++lines;
    }
    svg += item.draw(x, y + (lines - 1) * kLegendLineH) + "\n";
    right = std::max(right, x + item.width);
    x += item.width + kGap;
  }
  svg += "</g>\n";
  return {lines * kLegendLineH, right};
}

std::string svg_open(double w, double h) {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"Helvetica, Arial, sans-serif\">\n"
      "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f2e6e6\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c9a0a0\" stroke-width=\"2\"/>"
      "</pattern></defs>\n"
      "<style>.stage{{font-size:12px;text-anchor:end}} .mb{{text-anchor:middle}} "
      ".tick,.axislabel{{font-size:11px;text-anchor:middle}} .axis{{stroke:#444;stroke-width:1}} "
      ".legend{{font-size:11px}} .title{{font-size:15px;font-weight:bold}} "
      ".sub{{font-size:13px;font-weight:bold}} .op{{stroke:#fff;stroke-width:0.4}}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n",
      std::ceil(w), std::ceil(h), std::ceil(w), std::ceil(h));
}

// Title, the lanes drawn by `rows` from y = kTitleH on, the axis, then the legend; the picture's
// size is whatever that took.
template <typename Rows>
std::string render(const std::string& title, const SvgOptions& opt, double t_end, Rows rows) {
  std::string body = fmt::format("<text x=\"{}\" y=\"20\" class=\"title\">{}</text>\n", kLeft,
                                 xml_escape(title));
  double y = kTitleH + rows(body);
  draw_axis(body, opt, y + 2, t_end);
  y += 2 + kAxisH + kLegendGap;
  auto [legend_h, legend_right] = draw_legend(body, opt, y);
  const double width = std::max(kLeft + opt.width_px, legend_right) + kRight;
  return svg_open(width, y + legend_h + kBottom) + body + "</svg>\n";
}

}  // namespace

std::string render_svg(const Timeline& tl, const SvgOptions& opt) {
  const double t_end = opt.time_end > 0 ? opt.time_end : tl.end_time();
  return render(tl.title, opt, t_end, [&](std::string& svg) {
    return draw_rows(svg, tl, opt, kTitleH, t_end, "");
  });
}

std::string render_side_by_side(const Timeline& predicted, const Timeline& measured,
                                const SvgOptions& opt) {
  const double t_end = opt.time_end > 0 ? opt.time_end
                                        : std::max(predicted.end_time(), measured.end_time());
  return render(predicted.title + " — predicted vs measured", opt, t_end, [&](std::string& svg) {
    double h = draw_rows(svg, predicted, opt, kTitleH, t_end,
                         fmt::format("predicted (simulated): {}",
                                     fmt_time(predicted.end_time(), opt)));
    h += 12;
    h += draw_rows(svg, measured, opt, kTitleH + h, t_end,
                   fmt::format("measured: {}", fmt_time(measured.end_time(), opt)));
    return h;
  });
}

std::string render_chrome_trace(const Timeline& tl) {
  nlohmann::json events = nlohmann::json::array();
  for (int s = 0; s < tl.num_stages; ++s) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", s}, {"tid", 0},
                      {"args", {{"name", fmt::format("stage {}", s)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", s}, {"tid", 0},
                      {"args", {{"sort_index", s}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", s}, {"tid", 0},
                      {"args", {{"name", "compute"}}}});
  }
  // Transfers go on one track per (direction, peer): a directed link carries one message at a
  // time, so events on a track never overlap (Perfetto needs properly nested slices per track).
  std::vector<std::vector<bool>> named(tl.num_stages, std::vector<bool>(2 * tl.num_stages, false));
  for (const TimelineEvent& e : tl.events) {
    nlohmann::json args = {{"mb", e.mb}, {"dir", dir_str(e.dir)}};
    int tid = 0;
    if (e.category == "send" || e.category == "recv") {
      bool send = e.category == "send";
      tid = (send ? 1000 : 2000) + e.peer;
      if (e.stage >= 0 && e.stage < tl.num_stages && e.peer >= 0 && e.peer < tl.num_stages &&
          !named[e.stage][(send ? 0 : tl.num_stages) + e.peer]) {
        named[e.stage][(send ? 0 : tl.num_stages) + e.peer] = true;
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", e.stage}, {"tid", tid},
                          {"args", {{"name", fmt::format("{} {}", send ? "send to" : "recv from",
                                                         e.peer)}}}});
      }
      args["peer"] = e.peer;
      args["bytes"] = e.bytes;
    } else {
      args["fold"] = e.fold;
      if (e.is_compute()) args["part"] = part_kind_str(e.first_kind);
      if (e.peer >= 0) args["peer"] = e.peer;
    }
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"ts", e.start * 1e6},
                      {"dur", (e.end - e.start) * 1e6},
                      {"pid", e.stage},
                      {"tid", tid},
                      {"args", std::move(args)}});
  }
  nlohmann::json j = {{"traceEvents", std::move(events)},
                      {"displayTimeUnit", "ms"},
                      {"otherData", {{"version", 1}, {"title", tl.title}, {"generator", "helixpipe"}}}};
  return j.dump() + "\n";
}

}  // namespace hp
