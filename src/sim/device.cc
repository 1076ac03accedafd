// Built-in device profiles (embedded JSON) and the JSON reader.
#include "sim/device.h"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "sim/device_profiles_embedded.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/nearest_name.h"

namespace hp {

namespace {

nlohmann::json link_json(const LinkProfile& l) {
  return {{"latency_s", l.latency_s}, {"bandwidth_Bps", l.bandwidth_Bps}};
}

double get_number(const nlohmann::json& j, const char* key, const std::string& where, bool required,
                  double fallback) {
  if (!j.contains(key)) {
    HP_CHECK(!required, "{}: missing key '{}'", where, key);
    return fallback;
  }
  HP_CHECK(j[key].is_number(), "{}: '{}' must be a number, got {}", where, key, j[key].dump());
  return j[key].get<double>();
}

LinkProfile link_from_json(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: a link must be an object {{\"latency_s\":..,\"bandwidth_Bps\":..}}",
           where);
  for (auto it = j.begin(); it != j.end(); ++it)
    HP_CHECK(it.key() == "latency_s" || it.key() == "bandwidth_Bps",
             "{}: unknown link key '{}' (known: latency_s, bandwidth_Bps)", where, it.key());
  LinkProfile l;
  l.latency_s = get_number(j, "latency_s", where, true, 0);
  l.bandwidth_Bps = get_number(j, "bandwidth_Bps", where, true, 0);
  l.validate(where);
  return l;
}

struct Registry {
  std::vector<std::string> names;
  std::map<std::string, DeviceProfile, std::less<>> builtin;
  std::map<std::string, std::unique_ptr<DeviceProfile>, std::less<>> loaded;  // stable addresses
  std::mutex mu;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: profiles are handed out by reference
    for (const auto& f : embedded::kDeviceProfiles) {
      DeviceProfile d = DeviceProfile::from_json(nlohmann::json::parse(f.text),
                                                 std::string("built-in ") + f.name);
      reg->names.push_back(d.name);
      reg->builtin.emplace(d.name, std::move(d));
    }
    return reg;
  }();
  return *r;
}

}  // namespace

void LinkProfile::validate(const std::string& where) const {
  HP_CHECK(latency_s >= 0 && latency_s <= kMaxLatency,
           "{}: latency_s must be in [0, {}] seconds, got {}; fix the file", where, kMaxLatency,
           latency_s);
  HP_CHECK(bandwidth_Bps == 0 || (bandwidth_Bps >= 1 && bandwidth_Bps <= kMaxBandwidth),
           "{}: bandwidth_Bps must be 0 (free) or in [1, {}] bytes/s, got {}; fix the file", where,
           kMaxBandwidth, bandwidth_Bps);
}

nlohmann::json DeviceProfile::to_json() const {
  return {{"version", 1},
          {"name", name},
          {"dtype", dtype},
          {"peak_flops", peak_flops},
          {"mem_bandwidth_Bps", mem_bandwidth_Bps},
          {"gemm_efficiency", gemm_efficiency},
          {"attn_efficiency", attn_efficiency},
          {"intra", link_json(intra)},
          {"inter", link_json(inter)},
          {"gpus_per_node", gpus_per_node},
          {"memory_bytes", memory_bytes},
          {"comm_compute_share", comm_compute_share},
          {"source", source}};
}

DeviceProfile DeviceProfile::from_json(const nlohmann::json& j, const std::string& where) {
  HP_CHECK(j.is_object(), "{}: a device profile must be a JSON object", where);
  static const char* const kKnown[] = {"version",        "name",           "dtype",
                                       "peak_flops",     "mem_bandwidth_Bps", "gemm_efficiency",
                                       "attn_efficiency", "intra",          "inter",
                                       "gpus_per_node",  "memory_bytes",   "source",
                                       "comm_compute_share"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    HP_CHECK(known,
             "{}: unknown device profile key '{}' (known: name, dtype, peak_flops, "
             "mem_bandwidth_Bps, gemm_efficiency, attn_efficiency, intra, inter, gpus_per_node, "
             "memory_bytes, comm_compute_share, source, version)",
             where, it.key());
  }
  if (j.contains("version"))
    HP_CHECK(j["version"] == 1, "{}: device profile version {} is not supported (expected 1)", where,
             j["version"].dump());
  DeviceProfile d;
  HP_CHECK(j.contains("name") && j["name"].is_string(), "{}: 'name' (a string) is required", where);
  d.name = j["name"].get<std::string>();
  if (j.contains("dtype")) {
    HP_CHECK(j["dtype"] == "bf16" || j["dtype"] == "fp32",
             "{}: 'dtype' must be \"bf16\" or \"fp32\", got {}", where, j["dtype"].dump());
    d.dtype = j["dtype"].get<std::string>();
  }
  d.peak_flops = get_number(j, "peak_flops", where, true, 0);
  d.mem_bandwidth_Bps = get_number(j, "mem_bandwidth_Bps", where, true, 0);
  d.gemm_efficiency = get_number(j, "gemm_efficiency", where, false, 1);
  d.attn_efficiency = get_number(j, "attn_efficiency", where, false, 1);
  HP_CHECK(d.peak_flops >= kMinFlops && d.peak_flops <= kMaxFlops,
           "{}: peak_flops must be in [{}, {}] FLOP/s, got {}; fix the profile", where, kMinFlops,
           kMaxFlops, d.peak_flops);
  HP_CHECK(d.mem_bandwidth_Bps >= kMinMemBandwidth && d.mem_bandwidth_Bps <= kMaxMemBandwidth,
           "{}: mem_bandwidth_Bps must be in [{}, {}] bytes/s, got {}; fix the profile", where,
           kMinMemBandwidth, kMaxMemBandwidth, d.mem_bandwidth_Bps);
  HP_CHECK(d.gemm_efficiency > 0 && d.gemm_efficiency <= 1 && d.attn_efficiency > 0 &&
               d.attn_efficiency <= 1,
           "{}: gemm_efficiency and attn_efficiency are fractions of peak in (0, 1], got {} and {}",
           where, d.gemm_efficiency, d.attn_efficiency);
  HP_CHECK(j.contains("intra"), "{}: 'intra' (the intra-node link) is required", where);
  d.intra = link_from_json(j["intra"], where + " intra");
  d.inter = j.contains("inter") ? link_from_json(j["inter"], where + " inter") : d.intra;
  if (j.contains("gpus_per_node")) {
    HP_CHECK(j["gpus_per_node"].is_number_integer() && j["gpus_per_node"].get<int64_t>() >= 1 &&
                 j["gpus_per_node"].get<int64_t>() <= kMaxGpusPerNode,
             "{}: 'gpus_per_node' must be an integer in [1, {}], got {}", where, kMaxGpusPerNode,
             j["gpus_per_node"].dump());
    d.gpus_per_node = j["gpus_per_node"].get<int>();
  }
  d.memory_bytes = get_number(j, "memory_bytes", where, false, 0);
  HP_CHECK(d.memory_bytes >= 0 && d.memory_bytes <= kMaxMemoryBytes,
           "{}: memory_bytes must be in [0, {}] (0: unknown), got {}; fix the profile", where,
           kMaxMemoryBytes, d.memory_bytes);
  d.comm_compute_share = get_number(j, "comm_compute_share", where, false, 0);
  HP_CHECK(d.comm_compute_share >= 0 && d.comm_compute_share < 1,
           "{}: comm_compute_share is the fraction of compute a transfer takes, in [0, 1), got {}; "
           "fix the profile (0: transfers overlap compute for free)",
           where, d.comm_compute_share);
  if (j.contains("source")) {
    HP_CHECK(j["source"].is_string(), "{}: 'source' must be a string", where);
    d.source = j["source"].get<std::string>();
  }
  return d;
}

std::vector<std::string> device_profile_names() { return registry().names; }

const DeviceProfile& device_profile(std::string_view name) {
  Registry& reg = registry();
  if (auto it = reg.builtin.find(name); it != reg.builtin.end()) return it->second;
  std::string path(name);
  bool looks_like_file = path.size() > 5 && path.substr(path.size() - 5) == ".json";
  if (looks_like_file || std::filesystem::is_regular_file(path)) {
    std::lock_guard<std::mutex> lock(reg.mu);
    if (auto it = reg.loaded.find(path); it != reg.loaded.end()) return *it->second;
    nlohmann::json j;
    try {
      j = parse_json_text(read_file(path), path);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", path, e.what());
    }
    auto d = std::make_unique<DeviceProfile>(DeviceProfile::from_json(j, path));
    return *reg.loaded.emplace(path, std::move(d)).first->second;
  }
  std::string valid;
  for (const auto& n : reg.names) valid += (valid.empty() ? "" : ", ") + n;
  fail("unknown device profile '{}'{}: valid names are {} (or a path to a profile .json file)",
       name, did_you_mean(name, reg.names), valid);
}

}  // namespace hp
