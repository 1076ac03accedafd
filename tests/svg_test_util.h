// A small reader of the SVG the project writes, for tests that check where things were drawn: every
// element with its attributes, its text and the groups around it, plus checks of tick labels and
// rectangles. Enough for the hand-written output of src/sim/timeline.cc and
// src/runtime/progress.cc, not a general XML parser.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace hp::test {

struct SvgNode {
  std::string tag;
  std::map<std::string, std::string> attr;
  std::string text;                 // character data directly inside, entities decoded
  std::vector<std::string> groups;  // id (else class) of every enclosing <g>, outermost first

  bool in(const std::string& group) const {
    return std::find(groups.begin(), groups.end(), group) != groups.end();
  }
  bool has(const std::string& key) const { return attr.count(key) != 0; }
  double num(const std::string& key) const {
    auto it = attr.find(key);
    if (it == attr.end()) ADD_FAILURE() << "<" << tag << "> has no attribute " << key;
    return it == attr.end() ? NAN : std::stod(it->second);
  }
  std::string get(const std::string& key) const {
    auto it = attr.find(key);
    return it == attr.end() ? "" : it->second;
  }
};

inline std::string svg_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    size_t semi = s.find(';', i);
    std::string ent = s.substr(i, semi - i + 1);
    out += ent == "&lt;" ? "<" : ent == "&gt;" ? ">" : ent == "&amp;" ? "&" : ent == "&quot;" ? "\"" : ent;
    i = semi;
  }
  return out;
}

// Every element in document order (declarations, comments and the closing tags left out).
inline std::vector<SvgNode> parse_svg(const std::string& x) {
  std::vector<SvgNode> nodes;
  std::vector<size_t> open;                  // indices of elements not closed yet
  std::vector<std::string> groups;           // names of the open <g>s
  size_t i = 0;
  while (i < x.size()) {
    size_t lt = x.find('<', i);
    if (lt == std::string::npos) break;
    if (lt > i && !open.empty()) nodes[open.back()].text += svg_unescape(x.substr(i, lt - i));
    size_t gt = x.find('>', lt);
    if (gt == std::string::npos) break;
    std::string tag = x.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (!open.empty()) {
        if (nodes[open.back()].tag == "g" && !groups.empty()) groups.pop_back();
        open.pop_back();
      }
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    SvgNode n;
    size_t name_end = tag.find_first_of(" \n\t");
    n.tag = tag.substr(0, name_end);
    n.groups = groups;
    size_t p = name_end;
    while (p != std::string::npos && p < tag.size()) {
      size_t eq = tag.find('=', p);
      if (eq == std::string::npos) break;
      size_t k0 = tag.find_first_not_of(" \n\t", p);
      size_t q0 = tag.find('"', eq);
      size_t q1 = tag.find('"', q0 + 1);
      if (k0 == std::string::npos || q0 == std::string::npos || q1 == std::string::npos) break;
      n.attr[tag.substr(k0, eq - k0)] = svg_unescape(tag.substr(q0 + 1, q1 - q0 - 1));
      p = q1 + 1;
    }
    nodes.push_back(n);
    if (!self_closing) {
      open.push_back(nodes.size() - 1);
      if (n.tag == "g") groups.push_back(n.has("id") ? n.get("id") : n.get("class"));
    }
  }
  return nodes;
}

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  // Overlap of positive area (touching edges do not count).
  bool intersects(const Box& o) const {
    return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1;
  }
};

inline Box rect_box(const SvgNode& r) {
  return {r.num("x"), r.num("y"), r.num("x") + r.num("width"), r.num("y") + r.num("height")};
}

// The smallest box around every <rect> (with a position) in group `group`.
inline Box rects_bbox(const std::vector<SvgNode>& nodes, const std::string& group) {
  Box b{INFINITY, INFINITY, -INFINITY, -INFINITY};
  for (const SvgNode& n : nodes) {
    if (n.tag != "rect" || !n.in(group) || !n.has("x")) continue;
    Box r = rect_box(n);
    b = {std::min(b.x0, r.x0), std::min(b.y0, r.y0), std::max(b.x1, r.x1), std::max(b.y1, r.y1)};
  }
  return b;
}

// The texts of the <text> elements of class `cls` inside group `group`, in document order.
inline std::vector<const SvgNode*> texts(const std::vector<SvgNode>& nodes, const std::string& group,
                                         const std::string& cls) {
  std::vector<const SvgNode*> out;
  for (const SvgNode& n : nodes)
    if (n.tag == "text" && n.in(group) && n.get("class") == cls) out.push_back(&n);
  return out;
}

// Tick labels are round numbers: each is a plain decimal (no exponent, no float noise such as
// 0.30000000000000004), consecutive values differ by one step of 1, 2 or 5 x 10^k, every value is
// a whole multiple of that step, and no label shows more decimals than the step needs. The
// values come back in `values` when asked.
inline ::testing::AssertionResult round_tick_labels(const std::vector<std::string>& labels,
                                                    std::vector<double>* values = nullptr) {
  if (labels.size() < 2) return ::testing::AssertionFailure() << labels.size() << " tick labels";
  std::vector<double> v;
  for (const std::string& s : labels) {
    size_t used = 0;
    double d = 0;
    try {
      d = std::stod(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || s.empty() || s.find_first_of("eE") != std::string::npos)
      return ::testing::AssertionFailure() << "tick label '" << s << "' is not a plain number";
    v.push_back(d);
  }
  const double step = v[1] - v[0];
  if (!(step > 0)) return ::testing::AssertionFailure() << "ticks not ascending: " << labels[0] << " " << labels[1];
  const double p10 = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double m = step / p10;
  if (std::abs(m - 1) > 1e-6 && std::abs(m - 2) > 1e-6 && std::abs(m - 5) > 1e-6)
    return ::testing::AssertionFailure() << "tick step " << step << " is not 1, 2 or 5 x 10^k";
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0 && std::abs((v[i] - v[i - 1]) - step) > step * 1e-6)
      return ::testing::AssertionFailure() << "uneven ticks " << labels[i - 1] << " " << labels[i];
    const double k = v[i] / step;
    if (std::abs(k - std::round(k)) > 1e-6)
      return ::testing::AssertionFailure() << "tick " << labels[i] << " is not a multiple of " << step;
    const size_t dot = labels[i].find('.');
    const int shown = dot == std::string::npos ? 0 : static_cast<int>(labels[i].size() - dot - 1);
    if (shown > decimals)
      return ::testing::AssertionFailure() << "tick label '" << labels[i] << "' has " << shown
                                           << " decimals for a step of " << step;
  }
  if (values) *values = v;
  return ::testing::AssertionSuccess();
}

}  // namespace hp::test
