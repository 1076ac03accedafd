// Command-line parsing shared by every subcommand (cli/flags.h).
#include "cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace hp::cli {

namespace {

#ifndef HP_VERSION
#define HP_VERSION "unknown"
#endif
#ifndef HP_BUILD_TYPE
#define HP_BUILD_TYPE "unknown build"
#endif

// The long names of every option of `app` ("--lr", ...), help and version included.
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& n : o->get_lnames()) out.push_back("--" + n);
  return out;
}

std::string empty_assignment(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.size() > 3 && a.substr(0, 2) == "--" && a.back() == '=') return std::string(a);
    if (a == "--") break;
  }
  return "";
}

// The message for an option given an empty value, or "" when every given value is non-empty.
std::string empty_value(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0 || o->get_items_expected_max() == 0) continue;  // not given, or a switch
    for (const std::string& r : o->results())
      if (r.empty())
        return fmt::format("{} was given an empty value: give one or leave the flag out",
                           o->get_name());
  }
  return "";
}

// CLI11's texts for the errors a user meets most, rewritten as "--flag must ...".
std::string rewrite(const CLI::App& app, const CLI::ParseError& e) {
  std::string m = e.what();
  const std::string type = e.get_name();
  if (type == "ValidationError") {  // "--stages: must be >= 1, got 0" (our validators)
    const size_t colon = m.find(": must ");
    if (colon != std::string::npos) m.erase(colon, 1);
    return m;
  }
  if (type == "ConversionError") {  // "Could not convert: --steps = 1e3"
    const std::string lead = "Could not convert: ";
    const size_t eq = m.find(" = ");
    if (m.rfind(lead, 0) == 0 && eq != std::string::npos) {
      const std::string name = m.substr(lead.size(), eq - lead.size());
      const std::string value = m.substr(eq + 3);
      const CLI::Option* o = app.get_option_no_throw(name);
      const std::string t = o ? o->get_type_name() : "";
      const char* want = t.rfind("UINT", 0) == 0  ? "a whole number >= 0"
                         : t.rfind("INT", 0) == 0 ? "a whole number"
                         : t.rfind("FLOAT", 0) == 0 ? "a number"
                                                   : "another value";
      return fmt::format("{} takes {}, got '{}'", name, want, value);
    }
    return m;
  }
  if (type == "ArgumentMismatch" && m.find("required") != std::string::npos &&
      m.find("missing") != std::string::npos) {  // "--save: 1 required TEXT missing"
    return m.substr(0, m.find(':')) + " needs a value";
  }
  return m;
}

// The error for what CLI11 left over (allow_extras): unknown flags and stray words.
std::string extras_error(const CLI::App& app, const std::vector<std::string>& rest) {
  const std::string& first = rest.front();
  if (first.size() > 1 && first[0] == '-') {
    const std::string flag(first.substr(0, first.find('=')));
    const std::string near = nearest_name(flag, long_names(app));
    return near.empty() ? fmt::format("unknown flag {}", flag)
                        : fmt::format("unknown flag {} (did you mean {}?)", flag, near);
  }
  return fmt::format("unexpected argument '{}' (flags take their values as --name=value)", first);
}

int usage_error(const CLI::App& app, const std::string& message) {
  std::string name = app.get_name();  // "train", or "helixpipe simulate" for the simulator's
  if (name.rfind("helixpipe ", 0) != 0) name = "helixpipe " + name;
  std::fprintf(stderr, "%s: error: %s\n(see '%s --help')\n", name.c_str(), message.c_str(),
               name.c_str());
  return 2;
}

// A bound as written in a message: whole numbers without a fraction or an exponent.
std::string bound(double x) {
  if (std::abs(x) < 1e18 && x == std::floor(x)) return fmt::format("{}", static_cast<long long>(x));
  return fmt::format("{}", x);
}

// The validator message of a number outside [lo, hi]; "" inside or when `s` is not a number.
std::string range_message(const std::string& s, double lo, double hi, bool open_lo) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return "";  // the conversion names the type wanted
  const bool low = open_lo ? !(v > lo) : !(v >= lo);
  if (!low && v <= hi) return "";
  if (open_lo) return fmt::format("must be > {}, got {}", bound(lo), s);
  if (hi == HUGE_VAL) return fmt::format("must be >= {}, got {}", bound(lo), s);
  return fmt::format("must be between {} and {}, got {}", bound(lo), bound(hi), s);
}

}  // namespace

std::string version_text() {
#ifdef HP_HAVE_CUDA_KERNELS
  const char* cuda = "CUDA kernels compiled in";
#else
  const char* cuda = "CUDA kernels not compiled in";
#endif
  return fmt::format("helixpipe {} ({}, {})", HP_VERSION, HP_BUILD_TYPE, cuda);
}

std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  app.set_version_flag("--version", version_text(), "print the version and build, then exit");
  app.allow_extras();
  for (CLI::Option* o : app.get_options())
    if (o->get_items_expected_max() == 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  if (const std::string a = empty_assignment(argc, argv); !a.empty())
    return usage_error(app, fmt::format("{} has an empty value: give one ({}VALUE) or leave the "
                                        "flag out",
                                        a, a));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& v) {
    std::printf("%s\n", v.what());
    return 0;
  } catch (const CLI::ParseError& e) {
    // An unknown flag explains a missing required one ("--dta" for "--data"): report it first.
    const std::vector<std::string> rest = app.remaining();
    return usage_error(app, rest.empty() ? rewrite(app, e) : extras_error(app, rest));
  }
  if (const std::vector<std::string> rest = app.remaining(); !rest.empty())
    return usage_error(app, extras_error(app, rest));
  if (const std::string m = empty_value(app); !m.empty()) return usage_error(app, m);
  return std::nullopt;
}

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) { return range_message(s, 0, HUGE_VAL, /*open_lo=*/true); }, "> 0",
      "positive");
}

CLI::Validator at_least(double lo) {
  return CLI::Validator([lo](std::string& s) { return range_message(s, lo, HUGE_VAL, false); },
                        ">= " + bound(lo), "at_least");
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator([lo, hi](std::string& s) { return range_message(s, lo, hi, false); },
                        fmt::format("in [{}, {}]", bound(lo), bound(hi)), "in_range");
}

CLI::Validator one_of(std::vector<std::string> v) {
  std::string list;
  for (const std::string& x : v) list += (list.empty() ? "" : ", ") + x;
  return CLI::Validator(
      [v, list](std::string& s) -> std::string {
        if (std::find(v.begin(), v.end(), s) != v.end()) return "";
        const std::string near = nearest_name(s, v);
        return fmt::format("must be one of {}, got '{}'{}", list, s,
                           near.empty() ? "" : fmt::format(" (did you mean {}?)", near));
      },
      "{" + list + "}", "one_of");
}

CLI::Validator k_suffix() {
  return CLI::Validator(
      [](std::string& s) {
        const bool k = s.size() > 1 && (s.back() == 'k' || s.back() == 'K') &&
                       std::all_of(s.begin(), s.end() - 1, [](char c) { return c >= '0' && c <= '9'; });
        if (k && s.size() < 12) s = std::to_string(std::stoll(s.substr(0, s.size() - 1)) * 1024);
        return std::string();
      },
      "N or Nk (k = 1024)", "k_suffix");
}

}  // namespace hp::cli
