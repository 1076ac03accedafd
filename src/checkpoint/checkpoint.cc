// Checkpoint saving (temp folder, marker last, atomic swap) and opening (marker verification).
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "checkpoint/crc32.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/mapped_file.h"

namespace hp {

namespace fs = std::filesystem;

namespace {

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

nlohmann::json parse_json_file(const fs::path& path, const char* what) {
  std::string text = read_file(path.string());
  check_no_nul(text, fmt::format("{} '{}'", what, path.string()));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{} '{}' is not valid JSON ({}); the checkpoint is corrupt", what, path.string(), e.what());
  }
}

// A folder we may replace: empty, or something that looks like a checkpoint we (or HF) wrote.
bool replaceable(const fs::path& dir) {
  if (fs::is_empty(dir)) return true;
  return fs::exists(dir / kMarkerFile) || fs::exists(dir / kModelFile) ||
         fs::exists(dir / kModelIndexFile);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return fmt::format("{}-{}-{:x}", ::getpid(), counter++, static_cast<uint64_t>(t) & 0xffffff);
}

bool all_digits(std::string_view s, bool hex) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f')));
    if (!ok) return false;
  }
  return true;
}

// `name` is "<base>.tmp-<pid>-<counter>-<hex>" as unique_suffix() makes it; returns the pid, or
// -1 when the name does not have exactly that form.
long tmp_folder_pid(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string_view rest = std::string_view(name).substr(prefix.size());
  const size_t a = rest.find('-');
  if (a == std::string_view::npos) return -1;
  const size_t b = rest.find('-', a + 1);
  if (b == std::string_view::npos) return -1;
  const std::string_view pid = rest.substr(0, a), counter = rest.substr(a + 1, b - a - 1),
                         stamp = rest.substr(b + 1);
  if (!all_digits(pid, false) || pid.size() > 9 || !all_digits(counter, false) ||
      !all_digits(stamp, true) || stamp.size() > 6)
    return -1;
  return std::stol(std::string(pid));
}

// True when every entry of `dir` is a plain file a save writes: a checkpoint file or the hidden
// temporary file write_file_atomic makes beside one (".<name>.tmp.<pid>").
bool holds_only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) return false;
    const std::string n = it->path().filename().string();
    bool known = false;
    for (const char* f : {kConfigFile, kModelFile, kOptimizerFile, kTrainerStateFile,
                          kGenerationConfigFile, kTokenizerFile, kTokenizerConfigFile,
                          kMarkerFile}) {
      const std::string hidden = std::string(".") + f + ".tmp.";
      known = known || n == f ||
              (n.compare(0, hidden.size(), hidden) == 0 &&
               all_digits(std::string_view(n).substr(hidden.size()), false));
    }
    if (!known) return false;
  }
  return !ec;
}

// For a save that failed before its swap: what `dir` holds now, and what to do.
std::string what_survives(const fs::path& dir, bool existed, const fs::path& tmp) {
  const std::string removed =
      fs::exists(tmp) ? "" : fmt::format(" (the partial save '{}' was removed)", tmp.string());
  if (!existed) return fmt::format("no checkpoint was written to '{}'{}", dir.string(), removed);
  std::string step;
  try {
    const nlohmann::json st = parse_json_file(dir / kTrainerStateFile, "trainer state");
    if (st.contains("step")) step = fmt::format(" (step {})", st["step"].dump());
  } catch (const std::exception&) {
    // No or unreadable training state: name the folder only.
  }
  return fmt::format("the previous checkpoint '{}'{} is still the latest{}; free some space, then "
                     "--resume from it",
                     dir.string(), step, removed);
}

}  // namespace

std::vector<std::string> remove_stale_temp_folders(const std::string& dir_arg) {
  fs::path dir = fs::path(dir_arg).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const std::string base = dir.filename().string();
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = tmp_folder_pid(it->path().filename().string(), base);
    if (pid <= 0) continue;
    std::error_code sec;
    if (!fs::is_directory(fs::symlink_status(it->path(), sec)) || sec) continue;
    // A save still running (this process, or a live one on this machine) owns its folder.
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (!holds_only_checkpoint_files(it->path())) continue;
    candidates.push_back(it->path());
  }
  for (const fs::path& p : candidates) {
    std::error_code rec;
    fs::remove_all(p, rec);  // best effort: a folder we cannot remove does no harm
    if (!rec) removed.push_back(p.string());
  }
  return removed;
}

fs::path check_checkpoint_destination(const std::string& dir_arg) {
  HP_CHECK(!dir_arg.empty(), "checkpoint folder name is empty");
  fs::path dir = fs::path(dir_arg).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "out/" -> "out"
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  HP_CHECK(!ec, "cannot create folder '{}' for checkpoint '{}': {}", parent.string(), dir.string(),
           ec.message());
  HP_CHECK(fs::is_directory(parent), "cannot save checkpoint '{}': '{}' is not a folder",
           dir.string(), parent.string());
  if (fs::exists(dir)) {
    HP_CHECK(fs::is_directory(dir), "checkpoint path '{}' exists and is not a folder", dir.string());
    HP_CHECK(replaceable(dir),
             "refusing to replace '{}': it is neither empty nor a checkpoint (no {}, {} or {}); "
             "choose another --out/--save folder",
             dir.string(), kMarkerFile, kModelFile, kModelIndexFile);
  }
  return dir;
}

void save_checkpoint(const std::string& dir_arg, const CheckpointContents& contents,
                     const std::function<void()>& before_marker) {
  const bool bf16 = contents.model_dtype == StDType::kBF16;
  HP_CHECK(bf16 || contents.model_dtype == StDType::kF32,
           "internal: checkpoints store the model as F32 or BF16, not {}",
           st_dtype_name(contents.model_dtype));
  HP_CHECK(!bf16 || contents.optimizer.empty(),
           "internal: a BF16 checkpoint is not resumable and takes no optimizer state");
  nlohmann::json config = contents.config;
  std::vector<StWriteTensor> model = contents.model;
  std::vector<std::vector<uint16_t>> rounded;  // the BF16 copies `model` points into
  if (bf16) {
    if (config.is_object()) config["torch_dtype"] = "bfloat16";
    rounded.reserve(model.size());
    for (StWriteTensor& t : model) {
      HP_CHECK(t.dtype == StDType::kF32, "internal: tensor '{}' to round to BF16 is {}, not F32",
               t.name, st_dtype_name(t.dtype));
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      std::vector<uint16_t>& r = rounded.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 0)));
      const float* src = static_cast<const float*>(t.data);
      for (int64_t i = 0; i < n; ++i) r[i] = f32_to_bf16_bits(src[i]);
      t.dtype = StDType::kBF16;
      t.data = r.data();
    }
  }
  const fs::path dir = check_checkpoint_destination(dir_arg);
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const bool exists = fs::exists(dir);
  std::error_code ec;
  // Folders left by saves that were killed part-way (nothing ever loads from them).
  remove_stale_temp_folders(dir.string());
  const fs::path tmp = fs::path(dir.string() + ".tmp-" + unique_suffix());
  fs::create_directory(tmp, ec);
  HP_CHECK(!ec, "cannot create temporary checkpoint folder '{}': {}", tmp.string(), ec.message());
  try {
    nlohmann::json files = nlohmann::json::object();
    auto record = [&](const char* name) {
      MappedFile f((tmp / name).string());
      files[name] = {{"bytes", f.size()}, {"crc32", hex32(crc32(f.data(), f.size()))}};
    };
    auto write_json = [&](const char* name, const nlohmann::json& j) {
      write_file_atomic((tmp / name).string(), j.dump(2) + "\n");
      record(name);
    };
    write_json(kConfigFile, config);
    // transformers refuses safetensors without format=pt in the metadata.
    write_safetensors((tmp / kModelFile).string(), model, {{"format", "pt"}});
    record(kModelFile);
    // What Hugging Face tools read beside the model: generation defaults and the tokenizer.
    write_json(kGenerationConfigFile, generation_config_json(config));
    if (const auto tok = byte_tokenizer_json(config)) write_json(kTokenizerFile, *tok);
    if (const auto tok = byte_tokenizer_config_json(config)) write_json(kTokenizerConfigFile, *tok);
    if (!contents.optimizer.empty()) {
      write_safetensors((tmp / kOptimizerFile).string(), contents.optimizer,
                        {{"format", "helixpipe-adamw"}});
      record(kOptimizerFile);
    }
    if (contents.trainer_state) {
      write_file_atomic((tmp / kTrainerStateFile).string(), contents.trainer_state->dump(2) + "\n");
      record(kTrainerStateFile);
    }
    if (before_marker) before_marker();
    nlohmann::json marker = {{"format", "helixpipe-checkpoint"},
                             {"version", kCheckpointVersion},
                             {"model_dtype", st_dtype_name(contents.model_dtype)},
                             {"resumable", !bf16},
                             {"files", files}};
    write_file_atomic((tmp / kMarkerFile).string(), marker.dump(2) + "\n");
    fsync_dir(tmp);
    if (exists) {
      // Swap old and new in one step; the old one then sits at `tmp` and is deleted.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
        HP_CHECK(errno == EINVAL || errno == ENOSYS,
                 "cannot move checkpoint '{}' into place as '{}': {}", tmp.string(), dir.string(),
                 std::strerror(errno));
        // No atomic exchange on this file system: move the old one aside first.
        const fs::path old = fs::path(dir.string() + ".old-" + unique_suffix());
        fs::rename(dir, old);
        fs::rename(tmp, dir);
        fs::rename(old, tmp);
      }
      fsync_dir(parent);
      fs::remove_all(tmp, ec);  // best effort: the new checkpoint is already in place
    } else {
      fs::rename(tmp, dir);
      fsync_dir(parent);
    }
  } catch (const NoSpaceError& e) {
    // Say what survives: the folder still holds the previous checkpoint (the swap never ran).
    if (fs::exists(tmp) && !fs::exists(tmp / kMarkerFile)) fs::remove_all(tmp, ec);
    throw NoSpaceError(fmt::format("{}; {}", e.what(), what_survives(dir, exists, tmp)), e.path(),
                       e.error_number());
  } catch (...) {
    if (fs::exists(tmp) && !fs::exists(tmp / kMarkerFile)) fs::remove_all(tmp, ec);
    throw;
  }
}

CheckpointInfo open_checkpoint(const std::string& dir_arg) {
  const fs::path dir(dir_arg);
  HP_CHECK(fs::is_directory(dir), "checkpoint '{}' does not exist or is not a folder", dir_arg);
  CheckpointInfo info;
  info.dir = dir_arg;
  info.has_marker = fs::exists(dir / kMarkerFile);
  if (info.has_marker) {
    nlohmann::json marker = parse_json_file(dir / kMarkerFile, "checkpoint marker");
    HP_CHECK(marker.is_object() && marker.contains("format") &&
                 marker["format"] == "helixpipe-checkpoint" &&
                 marker.contains("version") && marker["version"].is_number_integer() &&
                 marker.contains("files") && marker["files"].is_object(),
             "checkpoint marker '{}' is malformed; the checkpoint is corrupt",
             (dir / kMarkerFile).string());
    const int64_t version = marker["version"].get<int64_t>();
    HP_CHECK(version == kCheckpointVersion,
             "checkpoint '{}' has format version {}; this helixpipe reads version {}", dir_arg,
             version, kCheckpointVersion);
    for (auto it = marker["files"].begin(); it != marker["files"].end(); ++it) {
      const fs::path f = dir / it.key();
      HP_CHECK(it.key().find('/') == std::string::npos && it.key() != "." && it.key() != ".." &&
                   it.key() != kMarkerFile && it.value().is_object() &&
                   it.value().contains("bytes") && it.value()["bytes"].is_number_unsigned() &&
                   it.value().contains("crc32") && it.value()["crc32"].is_string(),
               "checkpoint marker '{}' has a malformed entry '{}'", (dir / kMarkerFile).string(),
               it.key());
      HP_CHECK(fs::exists(f), "checkpoint '{}' is incomplete: '{}' is missing", dir_arg, it.key());
      const uint64_t want = it.value()["bytes"].get<uint64_t>();
      MappedFile m(f.string());
      HP_CHECK(m.size() == want,
               "checkpoint '{}' is corrupt: '{}' has {} bytes, the marker recorded {} (truncated "
               "or overwritten?)",
               dir_arg, it.key(), m.size(), want);
      const std::string crc = hex32(crc32(m.data(), m.size()));
      HP_CHECK(crc == it.value()["crc32"].get<std::string>(),
               "checkpoint '{}' is corrupt: '{}' has CRC32 {}, the marker recorded {}", dir_arg,
               it.key(), crc, it.value()["crc32"].get<std::string>());
    }
    const nlohmann::json& files = marker["files"];
    HP_CHECK(files.contains(kConfigFile), "checkpoint marker '{}' does not list '{}'",
             (dir / kMarkerFile).string(), kConfigFile);
    HP_CHECK(files.contains(kModelFile) || files.contains(kModelIndexFile),
             "checkpoint marker '{}' does not list '{}'", (dir / kMarkerFile).string(),
             kModelFile);
    // The marker is the list of what the save wrote: a file that is loaded but not listed was
    // not verified, so it is refused rather than loaded unchecked.
    for (const char* optional : {kOptimizerFile, kTrainerStateFile, kModelFile, kModelIndexFile}) {
      HP_CHECK(files.contains(optional) || !fs::exists(dir / optional),
               "checkpoint '{}' has '{}' but its marker '{}' does not list it, so it cannot be "
               "verified; remove the file, or use an earlier checkpoint",
               dir_arg, optional, kMarkerFile);
    }
    if (files.contains(kModelIndexFile)) {  // and so are the shards the index names
      const auto map = parse_shard_index(read_file((dir / kModelIndexFile).string()),
                                         (dir / kModelIndexFile).string());
      for (const auto& [tensor, shard] : map) {
        HP_CHECK(files.contains(shard),
                 "checkpoint '{}': shard '{}' (of tensor '{}') is not listed in its marker '{}', so "
                 "it cannot be verified",
                 dir_arg, shard, tensor, kMarkerFile);
      }
    }
    if (marker.contains("model_dtype")) {
      const nlohmann::json& d = marker["model_dtype"];
      HP_CHECK(d == "F32" || d == "BF16",
               "checkpoint marker '{}': model_dtype must be \"F32\" or \"BF16\", got {}",
               (dir / kMarkerFile).string(), d.dump());
      info.model_dtype = d == "BF16" ? StDType::kBF16 : StDType::kF32;
    }
    if (marker.contains("resumable")) {
      HP_CHECK(marker["resumable"].is_boolean(),
               "checkpoint marker '{}': resumable must be true or false, got {}",
               (dir / kMarkerFile).string(), marker["resumable"].dump());
      info.resumable = marker["resumable"].get<bool>();
    }
  } else {
    for (const char* training : {kTrainerStateFile, kOptimizerFile}) {
      HP_CHECK(!fs::exists(dir / training),
               "checkpoint '{}' has '{}' but no marker '{}': the save was interrupted and the "
               "folder is incomplete; use an earlier checkpoint",
               dir_arg, training, kMarkerFile);
    }
    HP_CHECK(fs::exists(dir / kConfigFile),
             "'{}' is not a checkpoint: '{}' is missing (expected config.json and "
             "model.safetensors, as written by 'helixpipe init' or transformers)",
             dir_arg, kConfigFile);
    HP_CHECK(fs::exists(dir / kModelFile) || fs::exists(dir / kModelIndexFile),
             "'{}' is not a checkpoint: '{}' is missing (expected config.json and "
             "model.safetensors, or {} and its shards, as written by 'helixpipe init' or "
             "transformers)",
             dir_arg, kModelFile, kModelIndexFile);
  }
  HP_CHECK(!(fs::exists(dir / kModelFile) && fs::exists(dir / kModelIndexFile)),
           "checkpoint '{}' has both '{}' and '{}'; it is ambiguous which holds the model: remove "
           "the one that is stale",
           dir_arg, kModelFile, kModelIndexFile);
  info.config = parse_json_file(dir / kConfigFile, "config");
  info.model_path =
      (dir / (fs::exists(dir / kModelIndexFile) ? kModelIndexFile : kModelFile)).string();
  if (fs::exists(dir / kOptimizerFile)) info.optimizer_path = (dir / kOptimizerFile).string();
  if (fs::exists(dir / kTrainerStateFile)) {
    info.trainer_state = parse_json_file(dir / kTrainerStateFile, "trainer state");
  }
  return info;
}

}  // namespace hp
