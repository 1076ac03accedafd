// Schedule text and JSON forms (text_io.h, docs/formats/schedule.md).
#include "schedule/text_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>

#include "schedule/generate.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp {

namespace {

constexpr int kFormatVersion = 1;
// Sanity limits so that a corrupt file gives an error rather than a huge allocation.
constexpr int kMaxStages = 4096;
constexpr int kMaxMicrobatches = 1 << 20;
constexpr int kMaxLayers = 1 << 16;
constexpr int kMaxFolds = 1024;

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<long long> to_int(std::string_view t) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

// Header and op data shared by both readers before the final assembly.
struct Draft {
  std::optional<std::string> name;
  std::optional<int> stages, microbatches, layers, folds, virtual_stages;
  std::optional<Recompute> recompute;
  std::optional<TransferMode> transfer;
  struct DraftOp {
    ComputeOp op;
    bool has_recompute = false;
    std::string where;  // for errors found at assembly
  };
  std::vector<std::vector<DraftOp>> ops;  // per stage
};

// Parses a part, capping the layer so that nothing downstream overflows.
Part parse_part(std::string_view t, std::optional<int> layers) {
  Part p = Part::parse(t, layers.value_or(0));
  HP_CHECK(p.layer <= kMaxLayers, "bad part '{}': layer {} is beyond the supported {} layers", t,
           p.layer, kMaxLayers);
  return p;
}

// A name the text form can carry as one token: no blanks (they split it), no '#' (it starts a
// comment), nothing unprintable.
bool writable_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("._:+=-").find(c) !=
                                                               std::string_view::npos;
  });
}

Schedule assemble(Draft& d, const std::string& where) {
  Schedule s;
  s.name = d.name.value_or("custom");
  HP_CHECK(writable_name(s.name),
           "{}: schedule name '{}' is not usable: use 1 to 64 letters, digits or . _ : + = - "
           "(no blanks or '#': the text form could not hold it)",
           where, s.name);
  const int found_stages = static_cast<int>(d.ops.size());
  HP_CHECK(found_stages > 0 || d.stages.value_or(0) > 0,
           "{}: the schedule lists no stages (add 'stage 0' followed by its ops)", where);
  s.num_stages = d.stages.value_or(found_stages);
  HP_CHECK(found_stages <= s.num_stages,
           "{}: the header says {} stages but the file lists stage {}", where, s.num_stages,
           found_stages - 1);
  HP_CHECK(found_stages == s.num_stages,
           "{}: the header says {} stages but the file lists {} (stage 0..{}); list every stage "
           "with a 'stage N' line, or fix the header",
           where, s.num_stages, found_stages, found_stages - 1);
  int max_mb = -1, max_layer = 0, max_fold = 0;
  for (const auto& st : d.ops)
    for (const auto& o : st) {
      max_mb = std::max(max_mb, o.op.mb);
      max_fold = std::max(max_fold, o.op.fold);
      for (const Part& p : o.op.parts) max_layer = std::max(max_layer, p.layer);
    }
  s.microbatches = d.microbatches.value_or(std::max(1, max_mb + 1));
  s.layers = d.layers.value_or(std::max(1, max_layer));
  s.folds = d.folds.value_or(max_fold + 1);
  s.virtual_stages = d.virtual_stages.value_or(1);
  for (const auto& st : d.ops)
    for (const auto& o : st)
      HP_CHECK(o.op.fold < s.folds,
               "{}: the op has fold={} but the header says folds {} (folds are numbered 0..{}); "
               "fix the op or the header",
               o.where, o.op.fold, s.folds, s.folds - 1);
  if (s.virtual_stages > 1) {
    // Interleaving: each stage holds `virtual` chunks of layers and runs every micro-batch's
    // forward as one op per chunk, so it needs that many layers and that many forward ops.
    HP_CHECK(static_cast<int64_t>(s.num_stages) * s.virtual_stages <= s.layers,
             "{}: the header says virtual {} over {} stages, which needs at least {} layers, but "
             "the schedule has {}; fix the header",
             where, s.virtual_stages, s.num_stages,
             static_cast<int64_t>(s.num_stages) * s.virtual_stages, s.layers);
    // (Micro-batches a stage never runs forward are left to validate(), which names them.)
    for (int st = 0; st < found_stages; ++st) {
      std::map<int, int> forwards;  // micro-batch -> forward ops on this stage
      for (const auto& o : d.ops[st])
        if (o.op.dir == Dir::kF) ++forwards[o.op.mb];
      for (const auto& [mb, n] : forwards)
        HP_CHECK(n >= s.virtual_stages,
                 "{}: the header says virtual {} (every stage runs each micro-batch's forward as "
                 "{} chunks), but stage {} runs micro-batch {}'s forward in {} op(s); fix the "
                 "header (virtual 1?) or the ops",
                 where, s.virtual_stages, s.virtual_stages, st, mb, n);
    }
  }
  s.recompute = d.recompute.value_or(default_recompute(s.name));
  s.transfer = d.transfer.value_or(TransferMode::kWeights);
  s.stages.resize(s.num_stages);
  for (int st = 0; st < found_stages; ++st)
    for (auto& o : d.ops[st]) {
      if (!o.has_recompute) o.op.recompute = recompute_parts(o.op, s.recompute);
      s.stages[st].ops.push_back(std::move(o.op));
    }
  return s;
}

int bounded(long long v, long long lo, long long hi, const std::string& where, const char* what) {
  HP_CHECK(v >= lo && v <= hi, "{}: {} must be between {} and {}, got {}", where, what, lo, hi, v);
  return static_cast<int>(v);
}

}  // namespace

std::string schedule_to_text(const Schedule& s) {
  HP_CHECK(s.stage_recompute.empty(),
           "a schedule whose stages recompute differently has no file form (the format states one "
           "recompute policy)");
  std::string out = fmt::format("helixpipe-schedule {}\n", kFormatVersion);
  out += fmt::format("name {}\nstages {}\nmicrobatches {}\nlayers {}\nfolds {}\nvirtual {}\n"
                     "recompute {}\ntransfer {}\n",
                     s.name, s.num_stages, s.microbatches, s.layers, s.folds, s.virtual_stages,
                     recompute_str(s.recompute), transfer_str(s.transfer));
  for (int st = 0; st < static_cast<int>(s.stages.size()); ++st) {
    out += fmt::format("stage {}\n", st);
    for (const ComputeOp& op : s.stages[st].ops) {
      out += op_str(op);
      if (s.folds > 1 || op.fold != 0) out += fmt::format(" fold={}", op.fold);
      if (op.recompute != recompute_parts(op, s.recompute)) {
        out += " recompute=";
        if (op.recompute.empty()) out += "-";
        for (size_t k = 0; k < op.recompute.size(); ++k)
          out += (k ? "," : "") + op.recompute[k].str();
      }
      out += "\n";
    }
  }
  return out;
}

Schedule schedule_from_text(std::string_view text, const std::string& where) {
  Draft d;
  bool seen_version = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string at = fmt::format("{}:{}", where, line_no);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    auto tok = split_ws(line);
    if (tok.empty()) {
      if (end == text.size()) break;
      continue;
    }
    try {
      if (!seen_version) {
        HP_CHECK(tok[0] == "helixpipe-schedule" && tok.size() == 2,
                 "expected the first line to be 'helixpipe-schedule {}' (the format and its "
                 "version), got '{}'",
                 kFormatVersion, line);
        auto v = to_int(tok[1]);
        HP_CHECK(v && *v == kFormatVersion,
                 "this file is schedule format version '{}'; this helixpipe reads version {}",
                 tok[1], kFormatVersion);
        seen_version = true;
        continue;
      }
      const std::string_view key = tok[0];
      if (key == "stage") {
        HP_CHECK(tok.size() == 2, "expected 'stage N', got '{}'", line);
        auto v = to_int(tok[1]);
        HP_CHECK(v && *v == static_cast<long long>(d.ops.size()),
                 "expected 'stage {}' (stages are listed in order from 0), got '{}'",
                 d.ops.size(), line);
        HP_CHECK(*v < kMaxStages, "at most {} stages are supported", kMaxStages);
        d.ops.emplace_back();
        continue;
      }
      if (key == "F" || key == "B" || key == "I" || key == "W") {
        HP_CHECK(!d.ops.empty(), "an op line needs a 'stage N' line before it");
        HP_CHECK(tok.size() >= 3,
                 "expected an op: DIR MB PART... (e.g. 'F 0 embed pre:1'), got '{}'", line);
        Draft::DraftOp o;
        o.where = at;
        o.op.dir = parse_dir(tok[0]);
        auto mb = to_int(tok[1]);
        HP_CHECK(mb && *mb >= 0 && *mb < kMaxMicrobatches,
                 "expected a micro-batch number (0..{}) after '{}', got '{}'",
                 kMaxMicrobatches - 1, tok[0], tok[1]);
        o.op.mb = static_cast<int>(*mb);
        for (size_t k = 2; k < tok.size(); ++k) {
          std::string_view t = tok[k];
          if (t.rfind("fold=", 0) == 0) {
            auto f = to_int(t.substr(5));
            HP_CHECK(f && *f >= 0 && *f < kMaxFolds, "bad '{}': expected fold=N with N >= 0", t);
            o.op.fold = static_cast<int>(*f);
          } else if (t.rfind("recompute=", 0) == 0) {
            o.has_recompute = true;
            std::string_view list = t.substr(10);
            if (list != "-") {
              size_t a = 0;
              while (a <= list.size()) {
                size_t b = list.find(',', a);
                if (b == std::string_view::npos) b = list.size();
                o.op.recompute.push_back(parse_part(list.substr(a, b - a), d.layers));
                a = b + 1;
              }
            }
          } else {
            HP_CHECK(o.op.recompute.empty() && !o.has_recompute && o.op.fold == 0,
                     "part '{}' after the op's options; parts come first", t);
            o.op.parts.push_back(parse_part(t, d.layers));
          }
        }
        HP_CHECK(!o.op.parts.empty(), "the op names no parts: '{}'", line);
        d.ops.back().push_back(std::move(o));
        continue;
      }
      // Header lines.
      static const std::vector<std::string_view> kHeader = {
          "name", "stages", "microbatches", "layers", "folds", "virtual", "recompute", "transfer"};
      HP_CHECK(std::find(kHeader.begin(), kHeader.end(), key) != kHeader.end(),
               "unknown line '{}': expected a header (name, stages, microbatches, layers, folds, "
               "virtual, recompute, transfer), 'stage N', or an op 'F|B|I|W MB PART...'",
               line);
      HP_CHECK(d.ops.empty(), "header line '{}' after the first 'stage' line; put it on top",
               key);
      HP_CHECK(tok.size() == 2, "expected '{} VALUE', got '{}'", key, line);
      const std::string_view val = tok[1];
      auto number = [&](const char* what, long long hi) {
        auto v = to_int(val);
        HP_CHECK(v, "expected a whole number after '{}', got '{}'", what, val);
        return bounded(*v, 1, hi, at, what);
      };
      if (key == "name") d.name = std::string(val);
      else if (key == "stages") d.stages = number("stages", kMaxStages);
      else if (key == "microbatches") d.microbatches = number("microbatches", kMaxMicrobatches);
      else if (key == "layers") d.layers = number("layers", kMaxLayers);
      else if (key == "folds") d.folds = number("folds", kMaxFolds);
      else if (key == "virtual") d.virtual_stages = number("virtual", kMaxLayers);
      else if (key == "recompute") d.recompute = parse_recompute(val);
      else d.transfer = parse_transfer(val);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(at, 0) == 0) throw;
      fail("{}: {}", at, msg);
    }
  }
  HP_CHECK(seen_version, "{}: empty schedule file: expected 'helixpipe-schedule {}' and ops",
           where, kFormatVersion);
  return assemble(d, where);
}

nlohmann::json schedule_to_json(const Schedule& s) {
  HP_CHECK(s.stage_recompute.empty(),
           "a schedule whose stages recompute differently has no file form (the format states one "
           "recompute policy)");
  nlohmann::json j;
  j["schedule"] = s.name;
  j["version"] = kFormatVersion;
  j["microbatches"] = s.microbatches;
  j["layers"] = s.layers;
  j["folds"] = s.folds;
  j["virtual"] = s.virtual_stages;
  j["recompute"] = recompute_str(s.recompute);
  j["transfer"] = transfer_str(s.transfer);
  nlohmann::json stages = nlohmann::json::array();
  for (int st = 0; st < static_cast<int>(s.stages.size()); ++st) {
    nlohmann::json ops = nlohmann::json::array();
    for (const ComputeOp& op : s.stages[st].ops) {
      nlohmann::json o;
      o["dir"] = dir_str(op.dir);
      o["mb"] = op.mb;
      nlohmann::json parts = nlohmann::json::array();
      for (const Part& p : op.parts) parts.push_back(p.str());
      o["parts"] = parts;
      if (s.folds > 1 || op.fold != 0) o["fold"] = op.fold;
      if (!op.recompute.empty()) {
        nlohmann::json rc = nlohmann::json::array();
        for (const Part& p : op.recompute) rc.push_back(p.str());
        o["recompute"] = rc;
      }
      ops.push_back(o);
    }
    stages.push_back({{"stage", st}, {"ops", ops}});
  }
  j["stages"] = stages;
  return j;
}

Schedule schedule_from_json(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: expected a JSON object with a \"stages\" array", where);
  Draft d;
  auto get_int = [&](const char* key, long long hi) -> std::optional<int> {
    if (!j.contains(key)) return std::nullopt;
    HP_CHECK(j[key].is_number_integer(), "{}: \"{}\" must be a whole number", where, key);
    return bounded(j[key].get<long long>(), 1, hi, where, key);
  };
  auto get_str = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key)) return std::nullopt;
    HP_CHECK(j[key].is_string(), "{}: \"{}\" must be a string", where, key);
    return j[key].get<std::string>();
  };
  if (j.contains("version")) {
    HP_CHECK(j["version"].is_number_integer() && j["version"].get<long long>() == kFormatVersion,
             "{}: this file is schedule format version {}; this helixpipe reads version {}",
             where, j["version"].dump(), kFormatVersion);
  }
  d.name = get_str("schedule");
  d.microbatches = get_int("microbatches", kMaxMicrobatches);
  d.layers = get_int("layers", kMaxLayers);
  d.folds = get_int("folds", kMaxFolds);
  d.virtual_stages = get_int("virtual", kMaxLayers);
  try {
    if (auto r = get_str("recompute")) d.recompute = parse_recompute(*r);
    if (auto t = get_str("transfer")) d.transfer = parse_transfer(*t);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  HP_CHECK(j.contains("stages") && j["stages"].is_array(),
           "{}: expected a \"stages\" array of {{\"stage\":N,\"ops\":[...]}}", where);
  const auto& stages = j["stages"];
  HP_CHECK(stages.size() <= static_cast<size_t>(kMaxStages), "{}: at most {} stages are supported",
           where, kMaxStages);
  for (size_t st = 0; st < stages.size(); ++st) {
    const std::string at = fmt::format("{}: stages[{}]", where, st);
    const auto& sj = stages[st];
    HP_CHECK(sj.is_object() && sj.contains("ops") && sj["ops"].is_array(),
             "{}: expected {{\"stage\":{},\"ops\":[...]}}", at, st);
    if (sj.contains("stage"))
      HP_CHECK(sj["stage"].is_number_integer() && sj["stage"].get<long long>() == static_cast<long long>(st),
               "{}: \"stage\" must be {} (stages are listed in order from 0)", at, st);
    d.ops.emplace_back();
    const auto& ops = sj["ops"];
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string oat = fmt::format("{}.ops[{}]", at, i);
      const auto& oj = ops[i];
      try {
        HP_CHECK(oj.is_object(), "expected an op {{\"dir\":\"F\",\"mb\":0,\"parts\":[...]}}");
        HP_CHECK(oj.contains("dir") && oj["dir"].is_string(),
                 "\"dir\" must be one of \"F\", \"B\", \"I\", \"W\"");
        HP_CHECK(oj.contains("mb") && oj["mb"].is_number_integer(),
                 "\"mb\" must be a micro-batch number");
        HP_CHECK(oj.contains("parts") && oj["parts"].is_array() && !oj["parts"].empty(),
                 "\"parts\" must be a non-empty array of part names such as \"pre:1\"");
        Draft::DraftOp o;
        o.where = oat;
        o.op.dir = parse_dir(oj["dir"].get<std::string>());
        const long long mb = oj["mb"].get<long long>();
        HP_CHECK(mb >= 0 && mb < kMaxMicrobatches, "\"mb\" must be between 0 and {}, got {}",
                 kMaxMicrobatches - 1, mb);
        o.op.mb = static_cast<int>(mb);
        for (const auto& pj : oj["parts"]) {
          HP_CHECK(pj.is_string(), "every part must be a string such as \"post:3\", got {}", pj.dump());
          o.op.parts.push_back(parse_part(pj.get<std::string>(), d.layers));
        }
        if (oj.contains("fold")) {
          HP_CHECK(oj["fold"].is_number_integer() && oj["fold"].get<long long>() >= 0 &&
                       oj["fold"].get<long long>() < kMaxFolds,
                   "\"fold\" must be a whole number >= 0");
          o.op.fold = oj["fold"].get<int>();
        }
        if (oj.contains("recompute")) {
          HP_CHECK(oj["recompute"].is_array(), "\"recompute\" must be an array of part names");
          o.has_recompute = true;
          for (const auto& pj : oj["recompute"]) {
            HP_CHECK(pj.is_string(), "every recompute part must be a string, got {}", pj.dump());
            o.op.recompute.push_back(parse_part(pj.get<std::string>(), d.layers));
          }
        }
        d.ops.back().push_back(std::move(o));
      } catch (const Error& e) {
        fail("{}: {}", oat, e.what());
      }
    }
  }
  return assemble(d, where);
}

std::string lowered_to_text(const Schedule& s) {
  std::string out = fmt::format("# lowered schedule '{}': {} stages, {} messages\n", s.name,
                                s.num_stages, s.messages.size());
  std::vector<const Message*> by_id;
  for (const Message& m : s.messages) {
    if (m.id >= static_cast<int>(by_id.size())) by_id.resize(m.id + 1, nullptr);
    by_id[m.id] = &m;
  }
  for (int st = 0; st < static_cast<int>(s.stages.size()); ++st) {
    out += fmt::format("stage {}\n", st);
    for (const LoweredOp& op : s.stages[st].lowered) {
      if (op.kind == OpKind::kCompute) {
        out += fmt::format("  {:<11} op {}  {}\n", op_kind_str(op.kind), op.index,
                           op_str(s.stages[st].ops[op.index]));
        continue;
      }
      const Message* m = op.index >= 0 && op.index < static_cast<int>(by_id.size()) ? by_id[op.index] : nullptr;
      if (!m) {
        out += fmt::format("  {:<11} #{} (no such message)\n", op_kind_str(op.kind), op.index);
        continue;
      }
      const bool send = runs_on_sender(op.kind);
      std::string vals;
      for (const std::string& v : m->values) vals += (vals.empty() ? "" : " ") + v;
      out += fmt::format("  {:<11} #{:<5} {} s{}  {}{} {} -> {}  [{}]  {} B  tag {}\n",
                         op_kind_str(op.kind), m->id, send ? "->" : "<-", send ? m->dst : m->src,
                         dir_str(m->dir), m->mb, m->from.str(), m->to.str(), vals, m->bytes,
                         m->tag);
    }
  }
  return out;
}

Schedule load_schedule(const std::string& path) {
  const std::string text = read_file(path);
  check_no_nul(text, "schedule '" + path + "'");
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{}: not valid JSON ({}); a schedule is JSON or the text form", path, e.what());
    }
    return schedule_from_json(j, path);
  }
  return schedule_from_text(text, path);
}

}  // namespace hp
