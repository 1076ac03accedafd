// Model tensors from one safetensors file or from shards listed by model.safetensors.index.json.
#include "checkpoint/model_files.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <set>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"

namespace hp {

namespace fs = std::filesystem;

namespace {

// A shard named by an index must be a file of the index's own folder.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

bool is_shard_index_path(const std::string& path) {
  const std::string suffix = ".index.json";
  const std::string name = fs::path(path).filename().string();
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::map<std::string, std::string> parse_shard_index(std::string_view text,
                                                     const std::string& where) {
  check_no_nul(text, where);
  // nlohmann keeps the last of repeated keys; the callback sees each key as it is read, so a
  // tensor named twice (or a second weight_map) is caught instead of silently dropped.
  std::string top_key, repeated;
  std::set<std::string> top_keys, map_keys;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (depth == 1) {
        top_key = k;
        if (!top_keys.insert(k).second && repeated.empty()) repeated = "key '" + k + "'";
      } else if (depth == 2 && top_key == "weight_map") {
        if (!map_keys.insert(k).second && repeated.empty()) repeated = "tensor '" + k + "'";
      }
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    fail("shard index '{}' is not valid JSON ({})", where, e.what());
  }
  HP_CHECK(repeated.empty(),
           "shard index '{}' names {} more than once; each tensor must be listed exactly once",
           where, repeated);
  HP_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
           "shard index '{}' has no \"weight_map\" object (tensor name -> shard file)", where);
  HP_CHECK(!j.contains("metadata") || j["metadata"].is_object(),
           "shard index '{}': \"metadata\" must be an object", where);
  const nlohmann::json& map = j["weight_map"];
  HP_CHECK(!map.empty(), "shard index '{}' has an empty weight_map: it lists no tensors", where);
  std::map<std::string, std::string> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    HP_CHECK(!it.key().empty() && it.key() != "__metadata__",
             "shard index '{}' has an invalid tensor name '{}'", where, it.key());
    HP_CHECK(it.value().is_string(),
             "shard index '{}': tensor '{}' maps to {}, not to a shard file name", where, it.key(),
             it.value().dump());
    const std::string shard = it.value().get<std::string>();
    HP_CHECK(plain_file_name(shard),
             "shard index '{}': tensor '{}' maps to '{}', which is not a file name in the index's "
             "folder (shards must lie beside the index: no '/' or '..')",
             where, it.key(), shard);
    out[it.key()] = shard;
  }
  return out;
}

ModelTensorFiles ModelTensorFiles::open(const std::string& path) {
  ModelTensorFiles m;
  m.path_ = path;
  if (!is_shard_index_path(path)) {
    m.files_.push_back(SafetensorsReader::open(path));
    for (const StTensorInfo& t : m.files_[0].tensors()) {
      m.where_[t.name] = m.tensors_.size();
      m.tensors_.push_back(t);
      m.file_index_.push_back(0);
    }
    return m;
  }
  m.sharded_ = true;
  const std::map<std::string, std::string> map = parse_shard_index(read_file(path), path);
  const fs::path dir = fs::path(path).parent_path();
  // Shards in the order of the map's (sorted) tensor names' first appearance.
  std::map<std::string, size_t> shard_of_name;
  std::vector<std::string> shard_names;
  for (const auto& [tensor, shard] : map) {
    if (shard_of_name.count(shard)) continue;
    const fs::path p = dir / shard;
    std::error_code ec;
    HP_CHECK(fs::is_regular_file(p, ec),
             "shard index '{}' maps tensor '{}' to shard '{}', but '{}' does not exist (or is not "
             "a file); the sharded model is incomplete",
             path, tensor, shard, p.string());
    shard_of_name[shard] = shard_names.size();
    shard_names.push_back(shard);
    m.files_.push_back(SafetensorsReader::open(p.string()));
  }
  // The map against the shards, both ways.
  for (const auto& [tensor, shard] : map) {
    const SafetensorsReader& f = m.files_[shard_of_name.at(shard)];
    if (f.find(tensor) != nullptr) continue;
    std::string elsewhere;
    for (size_t i = 0; i < m.files_.size(); ++i)
      if (m.files_[i].find(tensor)) elsewhere = fmt::format(" (it is in '{}')", shard_names[i]);
    fail("shard index '{}' maps tensor '{}' to shard '{}', but '{}' has no such tensor{}; the "
         "index and the shards do not belong together",
         path, tensor, shard, f.path(), elsewhere);
  }
  for (size_t i = 0; i < m.files_.size(); ++i) {
    for (const StTensorInfo& t : m.files_[i].tensors()) {
      const auto it = map.find(t.name);
      HP_CHECK(it != map.end(),
               "shard '{}' holds tensor '{}', which shard index '{}' does not list; the index and "
               "the shards do not belong together",
               m.files_[i].path(), t.name, path);
      HP_CHECK(it->second == shard_names[i],
               "shard '{}' holds tensor '{}', but shard index '{}' maps it to shard '{}' (a tensor "
               "must be in exactly one shard)",
               m.files_[i].path(), t.name, path, it->second);
      m.where_[t.name] = m.tensors_.size();
      m.tensors_.push_back(t);
      m.file_index_.push_back(i);
    }
  }
  return m;
}

const StTensorInfo* ModelTensorFiles::find(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsReader& ModelTensorFiles::file_of(std::string_view name) const {
  const auto it = where_.find(name);
  HP_CHECK(it != where_.end(), "'{}' has no tensor '{}'", path_, name);
  return files_[file_index_[it->second]];
}

void ModelTensorFiles::read_f32(const std::string& name, std::span<const int64_t> shape,
                                float* out) const {
  HP_CHECK(find(name) != nullptr, "safetensors '{}' has no tensor '{}'", path_, name);
  file_of(name).read_f32(name, shape, out);
}

}  // namespace hp
