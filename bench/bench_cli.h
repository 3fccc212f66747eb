// The benchmark programs' command lines, through CLI11 as the other programs': typed and
// range-checked values, --flag=value and --flag value alike, -h/--help from the options
// themselves. Usage:
//   auto app = benchApp("groupsgd-bench-x", "what it measures");
//   app->add_flag("--quick", quick, "...");
//   if (auto rc = parseCommandLine(*app, argc, argv)) return *rc;
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace groupsgd::bench {

// An option given twice takes its last value; list options say TakeAll themselves.
inline std::unique_ptr<CLI::App> benchApp(const std::string& name, const std::string& what) {
  auto app = std::make_unique<CLI::App>(what, name);
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return app;
}

// Parses argv. nullopt: go on; otherwise the code to exit with: 0 after --help (the usage
// on stdout), 2 on a bad command line (why, on stderr).
inline std::optional<int> parseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

// A number > 0 (CLI11's PositiveNumber would print the whole double range in its message).
inline const CLI::Validator kPositive(
    [](std::string& v) {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      return end != v.c_str() && *end == '\0' && x > 0 ? std::string()
                                                       : "must be a number > 0, got '" + v + "'";
    },
    "POSITIVE", "positive");

// A comma-separated list of positive whole numbers ("1,16,64").
template <typename T>
CLI::Option* addList(CLI::App& app, const std::string& name, std::vector<T>& out,
                     const std::string& help) {
  return app.add_option(name, out, help)
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(kPositive);
}

}  // namespace groupsgd::bench
