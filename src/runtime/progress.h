// What a person sees while training: a progress line (rewritten in place on a terminal, one line
// per report otherwise), a JSONL metrics log, and a loss-curve SVG.
#pragma once

#include <cstdio>
#include <fstream>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/train_state.h"

namespace hp {

// "1h02m", "3m05s", "12.3s".
std::string format_duration(double seconds);
// "12.3k", "1.25M".
std::string format_count(double v);

// How progress is written: rewritten in place (tty) or as plain lines (lines); auto picks tty
// only when stdout is an interactive terminal of a single process and neither CI is set nor
// TERM=dumb (a CI log or a file under mpirun gets plain lines).
enum class ProgressMode { kAuto, kTty, kLines };
ProgressMode parse_progress_mode(const std::string& text);  // auto | tty | lines; hp::Error else
bool progress_in_place(ProgressMode mode, bool single_process);

// A --log-interval: every N steps ("20") or every N seconds ("30s"); hp::Error naming the flag
// for anything else (zero, negative, another unit).
struct LogInterval {
  int64_t steps = 0;     // > 0: every this many steps
  double seconds = 0;    // > 0: at least this many seconds apart
};
LogInterval parse_log_interval(const std::string& text);

class ProgressLine {
 public:
  // tty: rewrite one line with \r; otherwise print a line every `every` steps (and the first and
  // the last).
  ProgressLine(std::FILE* out, bool tty, int64_t total_steps, int64_t every = 10);
  // Plain lines at `interval` (steps, or seconds of wall time since the last line).
  ProgressLine(std::FILE* out, bool tty, int64_t total_steps, LogInterval interval);
  // Reports a finished step; `extra` is appended (e.g. "bubble 12%" from the pipelined runtime).
  void update(const StepRecord& r, double eta_seconds, const std::string& extra = "");
  void finish();  // ends the in-place line

 private:
  std::FILE* out_;
  bool tty_;
  int64_t total_;
  int64_t every_;
  double every_s_ = 0;
  double last_s_ = 0;
  bool open_line_ = false;
};

// Appends one JSON object per line; flushed per line so a crash loses at most the line in flight.
class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending (append = true, used on resume) or truncating.
  void open(const std::string& path, bool append);
  bool is_open() const { return out_.is_open(); }
  void write(const nlohmann::json& j);

 private:
  std::string path_;
  std::ofstream out_;
};

// A self-contained SVG line chart of loss against step (raw points and a smoothed line). Both axes
// have ticks at round values (util/nice_ticks.h; whole numbers of steps), the loss axis runs from
// one round value to another, and the legend (group "legend") sits below the axes.
std::string loss_curve_svg(std::span<const StepRecord> history, const std::string& title);
void write_loss_svg(const std::string& path, std::span<const StepRecord> history,
                    const std::string& title);

}  // namespace hp
