// Command-line parsing shared by every helixpipe subcommand: one parse function with one error
// format, and the value checks the flags use (their messages read "--stages must be >= 1, got 0").
//
// Rules every command follows (docs/cli.md):
//   - an empty value (`--prompt=` or `--prompt ""`) is an error, never a swallow of the next flag;
//   - a flag given twice: the last value wins (so scripts can append overrides);
//   - an unknown flag is an error with the nearest known flag as a suggestion;
//   - `--help` prints the command's flags (exit 0), `--version` the build (exit 0);
//   - a command line that is not understood exits with 2, after one line on stderr that names the
//     command and the flag, and points to --help.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/nearest_name.h"

namespace hp::cli {

// "helixpipe <version> (<build type>, CUDA kernels compiled in|not compiled in)".
std::string version_text();

// Parses argv into `app` under the rules above. Returns the exit code to return now (0 after
// --help or --version; 2 with a message on stderr for a command line that is not understood), or
// nullopt to go on.
std::optional<int> parse_flags(CLI::App& app, int argc, char** argv);


// Value checks with messages in words. Numbers are compared as written (a value that does not
// parse as a number is left to the flag's own conversion, which names the type it wants).
CLI::Validator positive();                          // > 0
CLI::Validator at_least(double lo);                 // >= lo
CLI::Validator in_range(double lo, double hi);      // lo <= x <= hi
CLI::Validator one_of(std::vector<std::string> values);
// A transform: "16k" (or "16K") becomes 16384; anything else is left to the flag's conversion.
CLI::Validator k_suffix();

}  // namespace hp::cli
