// Test harness for the helixpipe binary: runs it with arguments, captures standard output, standard
// error and the exit status. The binary is HP_BINARY_DIR/helixpipe (set by hp_test).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace hp::test {

struct CliResult {
  int code = -1;    // exit status (-1: did not exit normally)
  std::string out;  // standard output
  std::string err;  // standard error
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
inline CliResult run_cli(const std::string& args) {
  // ctest runs tests of one binary as concurrent processes: the file name carries the pid.
  static int counter = 0;
  const std::string err_path = ::testing::TempDir() + "hp_cli_err_" + std::to_string(::getpid()) +
                               "_" + std::to_string(++counter);
  const std::string cmd = cli_binary() + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  expect_no_sanitizer_report(r.err);
  return r;
}

}  // namespace hp::test
