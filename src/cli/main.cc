// helixpipe: the command-line entry point. It only dispatches; each subcommand parses its own flags.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "util/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"schedule", hp::cli::cmd_schedule, "generate a pipeline schedule (text, JSON, SVG, trace)"},
    {"validate", hp::cli::cmd_validate, "check a schedule file: dependencies, matching, deadlock, memory"},
    {"simulate", hp::cli::cmd_simulate, "replay a schedule on a cost model: makespan, bubble, memory"},
    {"compare", hp::cli::cmd_compare, "simulate every schedule side by side for one model"},
    {"sweep", hp::cli::cmd_sweep, "TP x PP x DP sweep over sequence length and GPU count"},
    {"plan", hp::cli::cmd_plan, "rank the configurations that fit: schedule, layout, M, recompute"},
    {"init", hp::cli::cmd_init, "write a freshly initialized model (safetensors + config.json)"},
    {"tokenize", hp::cli::cmd_tokenize, "turn a text file into a token file"},
    {"train", hp::cli::cmd_train, "train a model (one process, or pipelined over ranks)"},
    {"grad", hp::cli::cmd_grad, "loss and gradients of a checkpoint on fixed data"},
    {"eval", hp::cli::cmd_eval, "loss and perplexity of a checkpoint on a data file"},
    {"generate", hp::cli::cmd_generate, "sample text from a checkpoint"},
    {"bench", hp::cli::cmd_bench, "measure every schedule on P in-process ranks vs the simulator"},
    {"profile", hp::cli::cmd_profile, "measure per-part costs on this machine (part-cost JSON)"},
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "helixpipe: pipeline-parallel training of long-sequence transformers (HelixPipe)\n\n"
               "usage: helixpipe <command> [flags]    (helixpipe <command> --help for details)\n"
               "       helixpipe --version\n\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nFlag rules and exit codes: docs/cli.md\n");
}

}  // namespace

int main(int argc, char** argv) {
  // A file that outgrows the file size limit (ulimit -f) makes write() fail with EFBIG, which a
  // checkpoint save reports with what is still intact (src/util/atomic_file.h NoSpaceError),
  // instead of SIGXFSZ killing the process with a core dump.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::printf("%s\n", hp::cli::version_text().c_str());
    return 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const hp::Error& e) {
      std::fprintf(stderr, "helixpipe %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "helixpipe %s: internal error: %s\n", c.name, e.what());
      return 3;
    }
  }
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  const std::string near = hp::nearest_name(argv[1], names);
  if (!near.empty()) {
    std::fprintf(stderr, "helixpipe: unknown command '%s' (did you mean %s?)\n", argv[1],
                 near.c_str());
    return 2;
  }
  std::fprintf(stderr, "helixpipe: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
