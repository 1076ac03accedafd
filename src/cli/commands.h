// One function per helixpipe subcommand; each lives in cmd_<name>.cc and returns the exit code.
// argv[0] is the subcommand name.
#pragma once

namespace hp::cli {

int cmd_schedule(int argc, char** argv);
int cmd_validate(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_init(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_grad(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_bench(int argc, char** argv);

}  // namespace hp::cli
