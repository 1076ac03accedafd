#include "runtime/timeline_gather.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hp {

namespace {

nlohmann::json to_json(const TimelineEvent& e) {
  return {e.stage, e.start, e.end, e.name, e.category, e.mb, static_cast<int>(e.dir),
          static_cast<int>(e.first_kind), e.fold, e.peer, e.bytes};
}

TimelineEvent from_json(const nlohmann::json& j) {
  TimelineEvent e;
  e.stage = j.at(0).get<int>();
  e.start = j.at(1).get<double>();
  e.end = j.at(2).get<double>();
  e.name = j.at(3).get<std::string>();
  e.category = j.at(4).get<std::string>();
  e.mb = j.at(5).get<int>();
  e.dir = static_cast<Dir>(j.at(6).get<int>());
  e.first_kind = static_cast<PartKind>(j.at(7).get<int>());
  e.fold = j.at(8).get<int>();
  e.peer = j.at(9).get<int>();
  e.bytes = j.at(10).get<int64_t>();
  return e;
}

}  // namespace

void gather_timeline(Comm& pipe, Timeline& tl) {
  const int tag = 0;
  if (pipe.rank() == 0) {
    for (int q = 1; q < pipe.size(); ++q) {
      const std::string from = "timeline of stage " + std::to_string(q);
      int64_t n = 0;
      Request rn = pipe.irecv(&n, sizeof n, q, tag);
      pipe.wait(rn, "the size of the " + from);
      std::string text(static_cast<size_t>(n), '\0');
      Request rt = pipe.irecv(text.data(), n, q, tag);
      pipe.wait(rt, "the " + from);
      for (const auto& j : nlohmann::json::parse(text)) tl.events.push_back(from_json(j));
    }
  } else {
    nlohmann::json arr = nlohmann::json::array();
    for (const TimelineEvent& e : tl.events) arr.push_back(to_json(e));
    const std::string text = arr.dump();
    const int64_t n = static_cast<int64_t>(text.size());
    Request sn = pipe.isend(&n, sizeof n, 0, tag);
    pipe.wait(sn, "sending the timeline size to stage 0");
    Request st = pipe.isend(text.data(), n, 0, tag);
    pipe.wait(st, "sending the timeline to stage 0");
  }
}

}  // namespace hp
