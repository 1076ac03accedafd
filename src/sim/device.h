// Device profiles: the few public hardware figures the cost model needs (peak dense FLOP/s, memory
// bandwidth, achievable efficiencies, intra- and inter-node links). Built-in profiles come from
// configs/devices/*.json, compiled in; a JSON file of the same shape can be loaded instead.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace hp {

struct LinkProfile {
  static constexpr double kMaxLatency = 1e3;     // seconds: far above any real link
  static constexpr double kMaxBandwidth = 1e18;  // bytes/s
  double latency_s = 0;      // per message, added once to its arrival
  double bandwidth_Bps = 0;  // bytes per second one way; 0 = no per-byte cost (free)
  // hp::Error naming `where` unless latency_s is in [0, kMaxLatency] and bandwidth_Bps is 0 or in
  // [1, kMaxBandwidth] (a tiny bandwidth would make every message take forever).
  void validate(const std::string& where) const;
};

struct DeviceProfile {
  // Ranges from_json enforces: wide enough for any real device, narrow enough that every time the
  // cost model derives stays finite.
  static constexpr double kMinFlops = 1e6, kMaxFlops = 1e21;
  static constexpr double kMinMemBandwidth = 1e3, kMaxMemBandwidth = 1e17;
  static constexpr double kMaxMemoryBytes = 1e18;
  static constexpr int kMaxGpusPerNode = 1 << 20;
  std::string name;
  std::string dtype = "bf16";     // the dtype peak_flops is quoted for: "bf16" or "fp32"
  double peak_flops = 0;          // dense, per device (one device = one pipeline stage)
  double mem_bandwidth_Bps = 0;   // device memory, for memory-bound parts
  double attn_efficiency = 1;     // achieved fraction of peak in core attention
  double gemm_efficiency = 1;     // achieved fraction of peak in GEMMs
  LinkProfile intra, inter;       // between devices of one node / of different nodes
  int gpus_per_node = 8;          // stage s lives on node s / gpus_per_node
  double memory_bytes = 0;        // device memory capacity
  // Overlap erosion: the fraction of the device's compute a communication kernel takes while it
  // moves a pipeline message (its thread blocks occupy SMs, its copies HBM bandwidth). Each
  // transfer of d seconds delays the compute of its sender and of its receiver by
  // comm_compute_share * d (SimOptions::comm_compute_share). In [0, 1); 0 = free overlap.
  double comm_compute_share = 0;
  std::string source;             // where the figures come from

  int bytes_per_elem() const { return dtype == "fp32" ? 4 : 2; }
  nlohmann::json to_json() const;
  // Checks keys, types and ranges; `where` names the source in errors.
  static DeviceProfile from_json(const nlohmann::json& j, const std::string& where);
};

// A built-in profile by name (h20, a800, a800-2nic, h100, h200, cpu), or a JSON file when `name`
// ends in ".json" or names an existing file. Throws hp::Error listing the valid names.
const DeviceProfile& device_profile(std::string_view name);
// Names of the built-in profiles, in a stable order.
std::vector<std::string> device_profile_names();

}  // namespace hp
