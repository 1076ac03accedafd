// Timeline renderings: SVG (hand-written XML, no dependencies) and Chrome trace JSON.
#include "sim/timeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "sim/cost_model.h"

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

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  double raw = span / target;
  double p10 = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p10 >= raw) return m * p10;
  return 10 * p10;
}

// Unit for axis labels chosen from the span.
std::pair<double, const char*> time_unit(double span) {
  if (span >= 10) return {1.0, "s"};
  if (span >= 10e-3) return {1e3, "ms"};
  return {1e6, "us"};
}

std::string fmt_time(double seconds) {
  auto [scale, unit] = time_unit(std::max(std::abs(seconds) * 10, 1e-9));
  return fmt::format("{:.4g} {}", seconds * scale, unit);
}

constexpr double kLeft = 78;      // stage labels
constexpr double kRight = 24;
constexpr double kTitleH = 26;
constexpr double kLegendH = 26;
constexpr double kAxisH = 40;

// Draws one timeline's rows starting at y0 with the given time scale; returns the height used.
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
    std::string tip = fmt::format("{}  [{} .. {}]", e.name, fmt_time(e.start), fmt_time(e.end));
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
  return y + tl.num_stages * row - y0;
}

void draw_axis(std::string& svg, const SvgOptions& opt, double y, double t_end) {
  if (t_end <= 0) return;
  auto [scale, unit] = time_unit(t_end);
  double step = tick_step(t_end, 10);
  svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"axis\"/>\n",
                     kLeft, y, kLeft + opt.width_px, y);
  for (int i = 0;; ++i) {
    double t = i * step;
    if (t > t_end * (1 + 1e-9)) break;
    double x = kLeft + t / t_end * opt.width_px;
    svg += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" class=\"axis\"/>"
                       "<text x=\"{:.2f}\" y=\"{:.1f}\" class=\"tick\">{:.4g}</text>\n",
                       x, y, x, y + 5, x, y + 17, t * scale);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\">time ({})</text>\n",
                     kLeft + opt.width_px / 2, y + 33, unit);
}

void draw_legend(std::string& svg, double y) {
  double x = kLeft;
  const PartKind kinds[] = {PartKind::kEmbed, PartKind::kPre, PartKind::kAttn, PartKind::kPost,
                            PartKind::kHead};
  for (PartKind k : kinds) {
    for (Dir d : {Dir::kF, Dir::kB, Dir::kW}) {
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                         x, y, fill_color(k, d));
      x += 13;
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n", x + 3,
                       y + 10, part_kind_str(k));
    x += 52;
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">shades: F (light), B/I, W (dark); "
      "number = micro-batch; colour = first part of the op</text>",
      x + 6, y + 10);
  x += 430;
  svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" height=\"12\" "
                     "fill=\"url(#hatch)\"/><text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">"
                     "waiting on a message</text>",
                     x, y, x + 22, y + 10);
  x += 150;
  svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" height=\"5\" fill=\"#5b6b7d\"/>"
                     "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"18\" height=\"5\" fill=\"#a3b3c4\"/>"
                     "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">send / receive</text>\n",
                     x, y + 1, x, y + 7, x + 22, y + 10);
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
      ".tick{{font-size:11px;text-anchor:middle}} .axis{{stroke:#444;stroke-width:1}} "
      ".legend{{font-size:11px}} .title{{font-size:15px;font-weight:bold}} "
      ".sub{{font-size:13px;font-weight:bold}} .op{{stroke:#fff;stroke-width:0.4}}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n",
      w, h, w, h);
}

}  // namespace

std::string render_svg(const Timeline& tl, const SvgOptions& opt) {
  double t_end = opt.time_end > 0 ? opt.time_end : tl.end_time();
  double rows_h = tl.num_stages * opt.row_px;
  double height = kTitleH + kLegendH + rows_h + kAxisH;
  std::string svg = svg_open(kLeft + opt.width_px + kRight, height);
  svg += fmt::format("<text x=\"{}\" y=\"18\" class=\"title\">{}</text>\n", kLeft,
                     xml_escape(tl.title));
  draw_legend(svg, kTitleH);
  double y = kTitleH + kLegendH;
  y += draw_rows(svg, tl, opt, y, t_end, "");
  draw_axis(svg, opt, y + 2, t_end);
  svg += "</svg>\n";
  return svg;
}

std::string render_side_by_side(const Timeline& predicted, const Timeline& measured,
                                const SvgOptions& opt) {
  double t_end = opt.time_end > 0 ? opt.time_end
                                  : std::max(predicted.end_time(), measured.end_time());
  double h1 = predicted.num_stages * opt.row_px + 20, h2 = measured.num_stages * opt.row_px + 20;
  double height = kTitleH + kLegendH + h1 + 12 + h2 + kAxisH;
  std::string svg = svg_open(kLeft + opt.width_px + kRight, height);
  svg += fmt::format("<text x=\"{}\" y=\"18\" class=\"title\">{}</text>\n", kLeft,
                     xml_escape(predicted.title + " — predicted vs measured"));
  draw_legend(svg, kTitleH);
  double y = kTitleH + kLegendH;
  y += draw_rows(svg, predicted, opt, y, t_end,
                 fmt::format("predicted (simulated): {}", fmt_time(predicted.end_time())));
  y += 12;
  y += draw_rows(svg, measured, opt, y, t_end,
                 fmt::format("measured: {}", fmt_time(measured.end_time())));
  draw_axis(svg, opt, y + 2, t_end);
  svg += "</svg>\n";
  return svg;
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
