// A model's tensors as stored on disk: one safetensors file (model.safetensors), or the sharded form
// Hugging Face tools write for large models: model.safetensors.index.json, whose "weight_map" maps
// each tensor name to the shard file that holds it (model-00001-of-00003.safetensors, ...), the
// shards lying in the same folder as the index (docs/formats/checkpoint.md, "Sharded models").
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"

namespace hp {

inline constexpr const char* kModelIndexFile = "model.safetensors.index.json";

// The weight_map of a shard index, checked: a JSON object whose "weight_map" is a non-empty object
// of tensor name -> shard file name, every tensor named exactly once (a key repeated in the JSON
// text is refused, not silently overwritten), every shard a plain file name in the index's folder
// (no '/', no "." or ".."; symbolic links, as in the Hugging Face hub cache, are followed). An
// optional "metadata" must be an object; its contents are not used. `text` is the file's content,
// `where` names it in errors. Returns tensor name -> shard file name.
std::map<std::string, std::string> parse_shard_index(std::string_view text,
                                                     const std::string& where);

// True when `path` names a shard index (its file name ends in ".index.json") rather than a
// safetensors file.
bool is_shard_index_path(const std::string& path);

class ModelTensorFiles {
 public:
  // Opens `path`: a safetensors file, or a shard index (is_shard_index_path) and every shard it
  // names. For an index, the map and the shards must agree exactly: a tensor the map names but its
  // shard lacks, or a tensor a shard holds that the map does not name (or maps to another shard),
  // is an hp::Error naming the index, the tensor and the shard files involved. Each shard is
  // validated as SafetensorsReader::open does.
  static ModelTensorFiles open(const std::string& path);

  const std::string& path() const { return path_; }  // the file opened (index or safetensors)
  bool sharded() const { return sharded_; }
  const std::vector<SafetensorsReader>& files() const { return files_; }

  // Every tensor of every file, in file order (shards in the order the weight map, sorted by
  // tensor name, first names them). Byte offsets are relative to the tensor's own file.
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  const StTensorInfo* find(std::string_view name) const;  // nullptr when absent
  // The file that holds tensor `name` (which must exist).
  const SafetensorsReader& file_of(std::string_view name) const;

  // SafetensorsReader::read_f32 on the file that holds `name`.
  void read_f32(const std::string& name, std::span<const int64_t> shape, float* out) const;

 private:
  std::string path_;
  bool sharded_ = false;
  std::vector<SafetensorsReader> files_;
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> index into tensors_
  std::vector<size_t> file_index_;                    // tensors_[i] lies in files_[file_index_[i]]
};

}  // namespace hp
