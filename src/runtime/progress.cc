// Progress line, JSONL log and the loss-curve SVG writer.
#include "runtime/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/nice_ticks.h"
#include "util/timer.h"

namespace hp {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

std::string format_count(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

ProgressMode parse_progress_mode(const std::string& text) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "tty") return ProgressMode::kTty;
  if (text == "lines") return ProgressMode::kLines;
  fail("--progress={} is not auto, tty or lines", text);
}

bool progress_in_place(ProgressMode mode, bool single_process) {
  if (mode != ProgressMode::kAuto) return mode == ProgressMode::kTty;
  const char* ci = std::getenv("CI");
  const char* term = std::getenv("TERM");
  return single_process && ::isatty(::fileno(stdout)) != 0 && !(ci && *ci) &&
         !(term && std::string(term) == "dumb");
}

LogInterval parse_log_interval(const std::string& text) {
  LogInterval li;
  const bool secs = !text.empty() && text.back() == 's';
  const std::string num = secs ? text.substr(0, text.size() - 1) : text;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool whole = used == num.size() && !num.empty();
  HP_CHECK(whole && std::isfinite(v) && v > 0 && (secs || v == std::floor(v)) && v <= 1e9,
           "--log-interval={} should be a number of steps (e.g. 20) or of seconds (e.g. 30s), "
           "greater than 0",
           text);
  if (secs) {
    li.seconds = v;
  } else {
    li.steps = static_cast<int64_t>(v);
  }
  return li;
}

ProgressLine::ProgressLine(std::FILE* out, bool tty, int64_t total_steps, int64_t every)
    : out_(out), tty_(tty), total_(total_steps), every_(std::max<int64_t>(1, every)) {}

ProgressLine::ProgressLine(std::FILE* out, bool tty, int64_t total_steps, LogInterval interval)
    : out_(out),
      tty_(tty),
      total_(total_steps),
      every_(interval.steps > 0 ? interval.steps : 0),
      every_s_(interval.seconds),
      last_s_(now_seconds()) {}

void ProgressLine::update(const StepRecord& r, double eta, const std::string& extra) {
  std::string line = fmt::format("step {:>{}}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3f}  {} tok/s  ETA {}",
                                 r.step, std::to_string(total_).size(), total_, r.loss, r.lr,
                                 r.grad_norm, format_count(r.tokens_per_s), format_duration(eta));
  if (!extra.empty()) line += "  " + extra;
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    open_line_ = true;
  } else {
    const double now = every_s_ > 0 ? now_seconds() : 0;
    const bool due = every_ > 0 ? r.step % every_ == 0 : now - last_s_ >= every_s_;
    if (due || r.step == total_ || r.step == 1) {
      std::fprintf(out_, "%s\n", line.c_str());
      last_s_ = now;
    }
  }
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (open_line_) std::fprintf(out_, "\n");
  open_line_ = false;
  std::fflush(out_);
}

void MetricsLog::open(const std::string& path, bool append) {
  path_ = path;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  HP_CHECK(out_.good(), "cannot open metrics log '{}' for writing", path);
}

void MetricsLog::write(const nlohmann::json& j) {
  if (!out_.is_open()) return;
  out_ << j.dump() << '\n';
  out_.flush();
  HP_CHECK(out_.good(), "writing metrics log '{}' failed (disk full?)", path_);
}

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out.push_back(c);
  }
  return out;
}

}  // namespace

std::string loss_curve_svg(std::span<const StepRecord> history, const std::string& title) {
  // The plot area, then below it the step ticks, the axis label and the legend (its own group, so
  // nothing of it lies on the curves).
  const double W = 720, left = 64, right = 20, top = 36, ph = 316;
  const double pw = W - left - right;
  const double legend_y = top + ph + 46, legend_line = 18;
  const double H = legend_y + 2 * legend_line + 8;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      W, H, W, H, W / 2, xml_escape(title));
  if (history.empty()) return svg + "<text x=\"50%\" y=\"50%\">no steps</text>\n</svg>\n";
  bool any = false;
  double lo = 0, hi = 1, first = 0;
  for (const auto& r : history) {
    if (!std::isfinite(r.loss)) continue;
    if (!any) first = r.loss;
    lo = any ? std::min(lo, r.loss) : r.loss;
    hi = any ? std::max(hi, r.loss) : r.loss;
    any = true;
  }
  // A margin of 5% each side (not below zero for losses that cannot be negative), then out to the
  // nearest round values (util/nice_ticks.h), which become the bottom and top of the plot;
  // nice_ticks widens a flat curve itself.
  const double pad = 0.05 * (hi - lo);
  const NiceTicks yt = nice_ticks(lo >= 0 ? std::max(0.0, lo - pad) : lo - pad, hi + pad, 5);
  lo = yt.lo;
  hi = yt.hi;
  // Ticks at both round ends and at every multiple of the step between them.
  std::vector<double> y_values{lo};
  for (double v : yt.values)
    if (v > y_values.back() + yt.step / 2) y_values.push_back(v);
  if (hi > y_values.back() + yt.step / 2) y_values.push_back(hi);

  const double s0 = static_cast<double>(history.front().step);
  const double s1 = std::max(s0 + 1, static_cast<double>(history.back().step));
  const NiceTicks xt = nice_ticks(s0, s1, 6, 1.0);  // steps are whole numbers
  auto X = [&](double s) { return left + pw * (s - s0) / (s1 - s0); };
  auto Y = [&](double l) { return top + ph * (1 - (l - lo) / (hi - lo)); };
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n",
                     left, top, pw, ph);
  svg += "<g id=\"axis-loss\">\n";
  for (double l : y_values) {
    const double y = Y(l);
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"tick\">{}</text>\n",
                       left, left + pw, y, y, left - 6, y + 4, yt.label(l));
  }
  svg += fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" "
                     "text-anchor=\"middle\" class=\"axislabel\">loss</text>\n</g>\n",
                     top + ph / 2, top + ph / 2);
  svg += "<g id=\"axis-step\">\n";
  for (double st : xt.values) {
    const double x = X(st);
    svg += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>"
                       "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"tick\">{}</text>\n",
                       x, x, top + ph, top + ph + 4, x, top + ph + 17, xt.label(st));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axislabel\">step"
                     "</text>\n</g>\n",
                     left + pw / 2, top + ph + 34);
  // Raw losses (light) and an exponential moving average (dark).
  std::string raw, smooth;
  double ema = first;
  const double alpha = history.size() > 20 ? 0.1 : 0.5;
  for (const auto& r : history) {
    if (!std::isfinite(r.loss)) continue;
    ema = alpha * r.loss + (1 - alpha) * ema;
    raw += fmt::format("{:.1f},{:.1f} ", X(r.step), Y(r.loss));
    smooth += fmt::format("{:.1f},{:.1f} ", X(r.step), Y(ema));
  }
  svg += "<polyline fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\" points=\"" + raw + "\"/>\n";
  svg += "<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"2\" points=\"" + smooth +
         "\"/>\n";
  // The legend, under the axis label: what the two lines are, and where the run ended.
  const double ly = legend_y;
  svg += "<g id=\"legend\">\n";
  svg += fmt::format(
      "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#9ecae1\" stroke-width=\"1\"/>"
      "<text x=\"{}\" y=\"{}\">loss of each step</text>\n",
      left, left + 24, ly + 6, ly + 6, left + 30, ly + 10);
  svg += fmt::format(
      "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#08519c\" stroke-width=\"2\"/>"
      "<text x=\"{}\" y=\"{}\">moving average (each new step weighs {})</text>\n",
      left + 170, left + 194, ly + 6, ly + 6, left + 200, ly + 10, alpha);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#08519c\">last step {}: loss {:.4f}  "
                     "moving average {:.4f}</text>\n</g>\n",
                     left, ly + legend_line + 10, history.back().step, history.back().loss, ema);
  return svg + "</svg>\n";
}

void write_loss_svg(const std::string& path, std::span<const StepRecord> history,
                    const std::string& title) {
  write_file_atomic(path, loss_curve_svg(history, title));
}

}  // namespace hp
