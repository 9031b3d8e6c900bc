// The prism CLI's one option parser: a subcommand describes its options as a table, one row per
// option (its spellings, whether it takes a value, what to do with it), and parse_options() walks
// the arguments once. The rules every subcommand shares live here: a value is the next argument
// (whatever it looks like, "--help" included) or, with inline_values, the text after '=' of
// "--name=value"; a missing value is "NAME needs a value" unless the row says otherwise; an
// argument that is no row's spelling is an unknown option, or a positional argument where the
// subcommand takes them and it does not start with '-' ("-" alone is positional). Errors are
// UsageError, which each command prints with its usage and exits 2 on. What a value means (numbers,
// sizes, devices) is the row's: texture_util.h has the value parsers.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace prism::cli {

// A bad command line: the command prints it with its usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One row of a subcommand's option table.
struct Option {
  std::vector<std::string> names;  // every spelling: {"-q", "--quiet"}
  bool takes_value = false;        // else a flag
  // Called with the spelling used and the value ("" for a flag); throws UsageError to refuse it.
  std::function<void(const std::string& name, const std::string& value)> apply;
  std::string missing;  // the UsageError when the value is missing; "" for "NAME needs a value"
  bool stops = false;   // parsing ends after this option (-h, --help)

  // This row with `message` as its missing value's error: with_value(...).if_missing("...").
  Option if_missing(std::string message) && {
    missing = std::move(message);
    return std::move(*this);
  }
};

// A flag: `apply` runs when it is given.
Option flag(std::vector<std::string> names, std::function<void()> apply);
// A flag that sets `target` to true.
Option flag(std::vector<std::string> names, bool& target);
// An option with a value, given to `apply` with the spelling used (for messages such as
// parse_int(name, value, ...)).
Option with_value(std::vector<std::string> names,
                  std::function<void(const std::string& name, const std::string& value)> apply);
// An option whose value is stored in `target` as given.
Option with_value(std::vector<std::string> names, std::string& target);
// -h/--help: `apply` runs (prints the usage) and parsing ends.
Option help(std::function<void()> apply);

struct ParseRules {
  // Takes "--name=value" as --name with that value (a flag ignores the value).
  bool inline_values = false;
  // Receives the arguments that are no option; null: each is an unknown option.
  std::function<void(const std::string& arg)> positional;
};

// Applies `table` to `args` in order; UsageError on the first bad argument. Returns false when a
// stopping option ended the parse (the rest unread), true otherwise.
bool parse_options(const std::vector<std::string>& args, const std::vector<Option>& table,
                   const ParseRules& rules = {});

// argv[first..argc) as strings.
std::vector<std::string> arguments(int argc, char** argv, int first);

}  // namespace prism::cli
