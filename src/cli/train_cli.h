// Flags shared by `helixpipe train` and `helixpipe grad`, single-process and distributed
// (cli/train_dist.*), and by eval, bench and profile: their definitions and defaults, into the
// plain requests of runtime/train_setup.h (which resolves them). docs/training.md lists them.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <set>
#include <string>

#include "cli/flags.h"
#include "runtime/train_setup.h"

namespace hp::cli {

// Adds train's flags (runtime/train_setup.h TrainRequest) to `app`.
void add_train_flags(CLI::App& app, TrainRequest& f);

// The options of `app` given on the command line ("--lr", ...), for TrainRequest::given.
std::set<std::string> given_flags(const CLI::App& app);

// Adds --data-format (auto | text | hptokens | llmc | nanogpt | megatron) into `value`; train, grad
// and eval share it.
CLI::Option* add_data_format_flag(CLI::App& app, std::string& value);

// Adds --precision (fp32 | bf16 | auto) into `value`; train, grad, eval and bench share it.
CLI::Option* add_precision_flag(CLI::App& app, std::string& value);

void add_grad_flags(CLI::App& app, GradRequest& f);

}  // namespace hp::cli
