// The one test harness for the helixpipe binary: runs it with arguments (as one process, or under
// mpirun with the build's MPI launcher and HP_MPIEXEC_FLAGS), captures its output and exit status,
// and fails the test when the output holds a sanitizer report. The binary is HP_BINARY_DIR/helixpipe
// (set by hp_test).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "util/atomic_file.h"
#include "util/rng.h"

namespace hp::test {

struct CliResult {
  int rc = -1;      // exit status (-1: did not exit normally; 124: killed at the time limit)
  std::string out;  // standard output (and standard error, unless split_stderr)
  std::string err;  // standard error, with split_stderr
};

struct CliOptions {
  int ranks = 0;             // > 0: under mpirun -np ranks
  int timeout_s = 600;       // killed after this (rc 124)
  std::string env;           // "NAME=value ..." set for the run
  bool split_stderr = false;  // standard error in `err` instead of after `out`
};

// Fails the current test when `output` (a helixpipe run's) holds a sanitizer's report. Under
// scripts/sanitize.sh a run that a test expects to fail could otherwise fail through the report
// and pass unseen; in other builds these texts never appear.
inline void expect_no_sanitizer_report(const std::string& output) {
  for (const char* mark : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", ": runtime error: ",
                           "WARNING: ThreadSanitizer"}) {
    if (output.find(mark) != std::string::npos) {
      ADD_FAILURE() << "helixpipe printed a sanitizer report (" << mark << "):\n" << output;
      return;
    }
  }
}

inline std::string cli_source_dir() { return HP_SOURCE_DIR; }
inline std::string cli_binary() { return std::string(HP_BINARY_DIR) + "/helixpipe"; }

// Runs `helixpipe ARGS` through the shell (ARGS is pasted as is: quote paths with spaces).
inline CliResult run_helixpipe(const std::string& args, const CliOptions& o = {}) {
  // ctest runs tests of one binary as concurrent processes: the file name carries the pid.
  static int counter = 0;
  const std::string err_path = ::testing::TempDir() + "hp_cli_err_" + std::to_string(::getpid()) +
                               "_" + std::to_string(++counter);
  std::string cmd = o.env + " timeout -k 5 " + std::to_string(o.timeout_s) + " ";
  if (o.ranks > 0)
    cmd += std::string(HP_MPIEXEC) + " " + HP_MPIEXEC_FLAGS + " -np " + std::to_string(o.ranks) + " ";
  cmd += cli_binary() + " " + args + (o.split_stderr ? " 2>" + err_path : " 2>&1");
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (o.split_stderr) {
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    std::remove(err_path.c_str());
  }
  expect_no_sanitizer_report(r.out + r.err);
  return r;
}

// Standard output and standard error apart.
inline CliResult run_cli(const std::string& args) {
  CliOptions o;
  o.split_stderr = true;
  return run_helixpipe(args, o);
}

// The inputs of the multi-rank CLI tests: about 20 kB of text made of a few words (the same every
// time) and a four-layer GQA model (hidden 32, 4 heads, 2 KV heads) small enough for seconds-long
// runs; P = 2 with F = 2 helix folds and P = 4 both divide its layers.
inline void write_small_run_inputs(const std::string& text_path, const std::string& cfg_path) {
  Rng rng(3);
  std::string text;
  const char* words[] = {"alpha", "beta", "gamma", "delta", "and", "the", "of", "pipe"};
  while (text.size() < 20000) text += std::string(words[static_cast<int>(rng.uniform() * 8)]) + " ";
  write_file_atomic(text_path, text);
  write_file_atomic(cfg_path,
                    R"({"hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 256})");
}

}  // namespace hp::test
