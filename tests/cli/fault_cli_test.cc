// Faults during `helixpipe train` on two ranks (tiny model, short heartbeat and watchdog):
// - a rank stopped (SIGSTOP) during a step: the job ends long before the watchdog, non-zero,
//   naming the stopped rank (the heartbeat, docs/comm.md);
// - rank 0 killed (SIGKILL) in the middle of a checkpoint save: the previous checkpoint stays the
//   latest and loads, --resume continues from it, and the next save removes the dead temporary
//   folder (docs/formats/checkpoint.md);
// - a full disk during a save (a small tmpfs; skipped without the right to mount one) and a file
//   size limit (RLIMIT_FSIZE, needs no privilege): a clear error, the previous checkpoint intact.
// The faults are placed with the test-only HP_TEST_KILL_RANK hook (src/runtime/train_run.cc).
// Every job runs under `timeout` with a token in its environment; whatever process carries the
// token when a test ends is continued and killed, and a test fails if its job left one behind.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/timer.h"
#include "run_cli.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

struct Job {
  int rc = -1;
  std::string out;  // standard output and error together
  double seconds = 0;
};

// True when one line of `text` holds `a` and, after it, `b` or `c`.
bool line_has(const std::string& text, const std::string& a, const std::string& b,
              const std::string& c) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(a);
    if (at == std::string::npos) continue;
    if (line.find(b, at + a.size()) != std::string::npos ||
        line.find(c, at + a.size()) != std::string::npos)
      return true;
  }
  return false;
}

int64_t saved_step(const std::string& dir) {
  const CheckpointInfo info = open_checkpoint(dir);
  EXPECT_TRUE(info.has_marker) << dir;
  EXPECT_TRUE(info.trainer_state.has_value()) << dir;
  return info.trainer_state ? info.trainer_state->at("step").get<int64_t>() : -1;
}

std::vector<int64_t> logged_steps(const std::string& path) {
  std::vector<int64_t> v;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return v;
}

class DistCliFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_ = fmt::format("{}_{}", ::getpid(),
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = fs::temp_directory_path() / ("hp_fault_cli_" + token_);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    test::write_small_run_inputs(path("text.txt"), path("cfg.json"));
  }

  void TearDown() override {
    // A stopped rank ignores everything but SIGCONT and SIGKILL.
    for (pid_t p : job_processes()) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
    }
    if (mounted_) ::umount2(path("disk").c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The training flags every job here shares: 1F1B over two stages, four micro-batches.
  std::string train_args() const {
    return fmt::format("train --model={} --seed=9 --data={} --seq-len=24 --microbatch-size=2 "
                       "--microbatches=4 --lr=3e-3 --threads=1 --schedule=1f1b --stages=2",
                       path("cfg.json"), path("text.txt"));
  }

  // `helixpipe ARGS` under `mpirun -np ranks` (0: one process; with the pipeline flags its ranks
  // are threads), environment `env`, killed after `timeout_s` (rc 124). `shell` runs first in the
  // same shell (e.g. a ulimit).
  Job run(int ranks, const std::string& args, const std::string& env = "", int timeout_s = 90,
          const std::string& shell = "") const {
    test::CliOptions o;
    o.ranks = ranks;
    o.timeout_s = timeout_s;
    o.env = shell + " HP_FAULT_TEST_TOKEN=" + token_ + " " + env;
    const double t0 = now_seconds();
    const test::CliResult r = test::run_helixpipe(args, o);
    Job j;
    j.seconds = now_seconds() - t0;
    j.rc = r.rc;
    j.out = r.out;
    return j;
  }

  // Processes whose environment holds this test's token (its jobs' mpirun and ranks).
  std::vector<pid_t> job_processes() const {
    const std::string want = "HP_FAULT_TEST_TOKEN=" + token_;
    std::vector<pid_t> found;
    DIR* proc = ::opendir("/proc");
    if (!proc) return found;
    while (const dirent* e = ::readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
      std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
      for (std::string entry; std::getline(in, entry, '\0');) {
        if (entry == want) {
          found.push_back(static_cast<pid_t>(pid));
          break;
        }
      }
    }
    ::closedir(proc);
    return found;
  }

  // Every process of the jobs has ended (mpirun may take a moment to reap its ranks).
  void expect_no_job_processes() const {
    std::vector<pid_t> left = job_processes();
    for (int i = 0; i < 50 && !left.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = job_processes();
    }
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the job still exist, first pid "
                              << (left.empty() ? 0 : left.front());
  }

  // The DIR.tmp-* folders beside checkpoint folder `dir`.
  std::vector<fs::path> temp_folders(const std::string& dir) const {
    std::vector<fs::path> v;
    const std::string prefix = fs::path(dir).filename().string() + ".tmp-";
    for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
      if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path());
    return v;
  }

  std::string token_;
  fs::path dir_;
  bool mounted_ = false;
};

TEST_F(DistCliFaultTest, StoppedRankEndsTheJobNamingIt) {
  // Rank 1 stops itself (SIGSTOP) as step 3 starts; rank 0 then waits on it. The heartbeat
  // (0.25 s, 4 misses) must end the job in seconds, long before the 60 s watchdog.
  const Job j = run(2, train_args() + " --steps=50",
                    "HP_TEST_KILL_RANK=1:3:stop HP_COMM_TIMEOUT=60 HP_COMM_HEARTBEAT=0.25 "
                    "HP_COMM_HEARTBEAT_MISSES=4",
                    90);
  EXPECT_NE(j.rc, 0) << j.out;
  EXPECT_NE(j.rc, 124) << "the job hung until the timeout:\n" << j.out;
  EXPECT_LT(j.seconds, 30) << j.out;
  EXPECT_TRUE(line_has(j.out, "helixpipe: rank 0 waits for ", "from rank 1: no heartbeat for ",
                       "from rank 1: no heartbeat for "))
      << j.out;
  EXPECT_NE(j.out.find("(stopped or hung?)"), std::string::npos) << j.out;
  EXPECT_EQ(j.out.find("for 60 s (comm timeout"), std::string::npos) << j.out;
  expect_no_job_processes();
}

TEST_F(DistCliFaultTest, RankKilledDuringSaveLeavesThePreviousCheckpoint) {
  const std::string ck = path("ck");
  // Saves after steps 2 and 4; rank 0 (the writer) is killed in the second save, after its files
  // and before its completion marker.
  const Job a = run(2, train_args() + " --steps=6 --save-every=2 --save=" + ck,
                    "HP_TEST_KILL_RANK=0:4:save", 90);
  EXPECT_NE(a.rc, 0) << a.out;
  EXPECT_NE(a.rc, 124) << a.out;
  EXPECT_TRUE(line_has(a.out, "rank 0 ", "signal 9", "Killed")) << a.out;
  expect_no_job_processes();
  EXPECT_EQ(saved_step(ck), 2);
  // The dead save's folder: files, no marker, refused as a checkpoint.
  const std::vector<fs::path> dead = temp_folders(ck);
  ASSERT_EQ(dead.size(), 1u) << a.out;
  EXPECT_TRUE(fs::exists(dead[0] / kModelFile));
  EXPECT_FALSE(fs::exists(dead[0] / kMarkerFile));
  try {
    open_checkpoint(dead[0].string());
    ADD_FAILURE() << "a save without its marker was opened: " << dead[0];
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the save was interrupted"), std::string::npos) << e.what();
  }
  // --resume continues from step 2, and its save removes the dead folder.
  const Job b = run(2, fmt::format("train --resume={} --data={} --threads=1 --schedule=1f1b "
                                   "--stages=2 --save={} --log={}",
                                   ck, path("text.txt"), ck, path("resumed.jsonl")),
                    "", 90);
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(logged_steps(path("resumed.jsonl")), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(saved_step(ck), 6);
  EXPECT_TRUE(temp_folders(ck).empty()) << temp_folders(ck).front();
  expect_no_job_processes();
}

TEST_F(DistCliFaultTest, FullDiskDuringSaveKeepsThePreviousCheckpoint) {
  // The size of one checkpoint of this run, from a save on the ordinary disk.
  const Job ref = run(0, train_args() + " --steps=1 --save=" + path("ref"));
  ASSERT_EQ(ref.rc, 0) << ref.out;
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(path("ref"))) bytes += fs::file_size(e.path());
  // Room for one checkpoint and a half: the save after step 2 fits, the one after step 4 (written
  // beside the first until it replaces it) does not.
  fs::create_directories(path("disk"));
  const std::string opts = fmt::format("size={}", (bytes * 3 / 2 + 4095) / 4096 * 4096);
  if (::mount("tmpfs", path("disk").c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    GTEST_SKIP() << "needs to mount a small tmpfs (root with CAP_SYS_ADMIN); mount said: "
                 << std::strerror(errno)
                 << ". FileSizeLimitDuringSaveKeepsThePreviousCheckpoint covers the same error "
                    "without privileges";
  }
  mounted_ = true;
  const std::string ck = path("disk/ck");
  const Job j = run(2, train_args() + " --steps=4 --save-every=2 --save=" + ck +
                           " --log=" + path("log.jsonl"),
                    "", 90);
  EXPECT_EQ(j.rc, 1) << j.out;
  EXPECT_NE(j.out.find("no space left while writing '" + ck + ".tmp-"), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("the previous checkpoint '" + ck + "' (step 2) is still the latest"),
            std::string::npos)
      << j.out;
  EXPECT_EQ(logged_steps(path("log.jsonl")).size(), 4u);
  EXPECT_EQ(saved_step(ck), 2);
  EXPECT_TRUE(temp_folders(ck).empty()) << "the failed save's folder was left on the full disk";
  expect_no_job_processes();
}

TEST_F(DistCliFaultTest, FileSizeLimitDuringSaveKeepsThePreviousCheckpoint) {
  // RLIMIT_FSIZE (`ulimit -f`) makes write() fail with EFBIG past the limit; helixpipe ignores
  // SIGXFSZ so the save sees the error. In-process ranks (no mpirun): Open MPI's shared-memory
  // files would exceed the limit themselves. The limit (64 blocks of 512 or 1024 bytes) is below
  // the size of model.safetensors (about 140 KiB here).
  const std::string ck = path("ck");
  const Job first = run(0, train_args() + " --steps=2 --save=" + ck);
  ASSERT_EQ(first.rc, 0) << first.out;
  ASSERT_GT(fs::file_size(fs::path(ck) / kModelFile), 64u * 1024);
  const Job j = run(0,
                    fmt::format("train --resume={} --data={} --threads=1 --schedule=1f1b "
                                "--stages=2 --steps=4 --save={}",
                                ck, path("text.txt"), ck),
                    "", 90, "ulimit -f 64;");
  EXPECT_EQ(j.rc, 1) << j.out;
  EXPECT_NE(j.out.find("no space left while writing '" + ck + ".tmp-"), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("the file size limit (ulimit -f) was reached"), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("the previous checkpoint '" + ck + "' (step 2) is still the latest"),
            std::string::npos)
      << j.out;
  EXPECT_EQ(saved_step(ck), 2);
  EXPECT_TRUE(temp_folders(ck).empty());
  expect_no_job_processes();
}

}  // namespace
}  // namespace hp
