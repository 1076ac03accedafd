// Checkpoint directories (docs/formats/checkpoint.md): config.json, model.safetensors (Hugging Face
// Llama names), generation_config.json and the byte-level tokenizer files (checkpoint/hf_files.h),
// optional optimizer.safetensors and trainer_state.json, and the marker helixpipe_checkpoint.json
// (sizes and CRC32 of every file) written last. A save builds DIR.tmp-* and swaps it into place, so
// DIR is always either the old or the new checkpoint. Opening also accepts a Hugging Face folder
// whose model is sharded (model.safetensors.index.json and its shards, checkpoint/model_files.h).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hf_files.h"
#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"

namespace hp {

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kMarkerFile = "helixpipe_checkpoint.json";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kTrainerStateFile = "trainer_state.json";

struct CheckpointContents {
  nlohmann::json config;                        // -> config.json (Hugging Face LlamaConfig form)
  std::vector<StWriteTensor> model;             // -> model.safetensors
  std::vector<StWriteTensor> optimizer;         // -> optimizer.safetensors (skipped when empty)
  std::optional<nlohmann::json> trainer_state;  // -> trainer_state.json
  // How model.safetensors stores the (F32) model tensors: kF32 as given, or kBF16 rounded to
  // nearest even, for inference and interoperation. A BF16 checkpoint has lost the f32 master
  // weights, so it is marked as not resumable and may hold no optimizer state; its config.json
  // says torch_dtype "bfloat16".
  StDType model_dtype = StDType::kF32;
};

// Writes the checkpoint to `dir` atomically, replacing an existing checkpoint there (a folder that
// is neither empty nor a checkpoint is refused, so a typo cannot delete someone's files).
// `before_marker` (tests) runs after the files and before the marker: throwing there is a crash.
// What save_checkpoint checks before writing, on its own so a run can check its --save folder
// before its first step: creates the parent folder when missing, refuses a path that is a file or
// a folder that is neither empty nor a checkpoint. Returns the normalised folder path.
std::filesystem::path check_checkpoint_destination(const std::string& dir);

void save_checkpoint(const std::string& dir, const CheckpointContents& contents,
                     const std::function<void()>& before_marker = {});

// Removes the DIR.tmp-<pid>-<n>-<hex> folders that saves killed part-way left beside `dir`
// (save_checkpoint calls it first). Only folders of exactly that name that hold only checkpoint
// files and whose process is not running on this machine are removed; anything else is left
// alone. Returns the removed paths.
std::vector<std::string> remove_stale_temp_folders(const std::string& dir);

struct CheckpointInfo {
  std::string dir;
  bool has_marker = false;
  nlohmann::json config;                        // parsed config.json
  // DIR/model.safetensors, or DIR/model.safetensors.index.json for a sharded model: open it with
  // ModelTensorFiles::open (checkpoint/model_files.h), which takes either.
  std::string model_path;
  std::optional<std::string> optimizer_path;    // DIR/optimizer.safetensors when present
  std::optional<nlohmann::json> trainer_state;  // parsed trainer_state.json when present
  // From the marker (a folder without one: F32 and resumable, as far as this code knows): the
  // dtype the save stored the model in, and whether a run may --resume from it (false for BF16).
  StDType model_dtype = StDType::kF32;
  bool resumable = true;
};

// Opens `dir`. With a marker, every file it lists must exist with the recorded size and CRC32.
// Without one, a plain Hugging Face folder (config.json + model.safetensors, or config.json +
// model.safetensors.index.json and its shards) is accepted, but a folder holding
// trainer_state.json or optimizer.safetensors is refused as an interrupted save. A folder with
// both model.safetensors and an index is refused as ambiguous.
CheckpointInfo open_checkpoint(const std::string& dir);

}  // namespace hp
