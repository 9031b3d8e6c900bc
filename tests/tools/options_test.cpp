// The prism CLI's option parser (tools/prism/options.h), without a command: flags and values,
// spellings, a value that looks like an option, missing values and their messages, inline
// "--name=value", positionals, unknown options, a stopping -h/--help, errors a row throws.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "options.h"

namespace prism::cli {
namespace {

using Args = std::vector<std::string>;

// The message of the UsageError that parsing `args` throws, or "" when it throws none.
std::string error_of(const Args& args, const std::vector<Option>& table, const ParseRules& rules = {}) {
  try {
    parse_options(args, table, rules);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CliOptions, FlagsAndValuesInAnyOrderWithEverySpelling) {
  bool quiet = false, json = false;
  std::string gallery;
  int k = 0;
  const std::vector<Option> table = {
      flag({"-q", "--quiet"}, quiet),
      flag({"--json"}, [&] { json = true; }),
      with_value({"--gallery"}, gallery),
      with_value({"--k"},
                 [&](const std::string& name, const std::string& v) {
                   EXPECT_EQ(name, "--k") << "a row gets the spelling used, for its messages";
                   k = std::stoi(v);
                 }),
  };
  EXPECT_TRUE(parse_options({"--k", "7", "-q", "--gallery", "g", "--json"}, table));
  EXPECT_TRUE(quiet);
  EXPECT_TRUE(json);
  EXPECT_EQ(gallery, "g");
  EXPECT_EQ(k, 7);
  EXPECT_TRUE(parse_options({}, table)) << "no arguments: nothing to do";
}

TEST(CliOptions, AValueIsTheNextArgumentWhateverItLooksLike) {
  std::string gallery;
  bool help_shown = false;
  const std::vector<Option> table = {with_value({"--gallery"}, gallery), help([&] { help_shown = true; })};
  EXPECT_TRUE(parse_options({"--gallery", "--help"}, table));
  EXPECT_EQ(gallery, "--help");
  EXPECT_FALSE(help_shown);
  EXPECT_TRUE(parse_options({"--gallery", ""}, table));
  EXPECT_EQ(gallery, "") << "an empty value is a value";
}

TEST(CliOptions, AMissingValueNamesTheOptionOrSaysWhatTheRowSays) {
  std::string s;
  const std::vector<Option> table = {
      with_value({"--gallery"}, s),
      with_value({"--set"}, s).if_missing("--set needs NAME=VALUE"),
  };
  EXPECT_EQ(error_of({"--gallery"}, table), "--gallery needs a value");
  EXPECT_EQ(error_of({"--gallery", "g", "--set"}, table), "--set needs NAME=VALUE");
}

TEST(CliOptions, UnknownOptionsAndPositionals) {
  bool json = false;
  std::vector<std::string> positional;
  const std::vector<Option> table = {flag({"--json"}, json)};
  EXPECT_EQ(error_of({"--jsn"}, table), "unknown option '--jsn'");
  EXPECT_EQ(error_of({"image.png"}, table), "unknown option 'image.png'") << "no positionals: every stray is unknown";
  ParseRules rules;
  rules.positional = [&](const std::string& a) { positional.push_back(a); };
  EXPECT_TRUE(parse_options({"a.png", "--json", "-", "b.png"}, table, rules));
  EXPECT_EQ(positional, (Args{"a.png", "-", "b.png"})) << "'-' alone is positional (standard input)";
  EXPECT_EQ(error_of({"a.png", "-x"}, table, rules), "unknown option '-x'");
}

TEST(CliOptions, InlineValuesOnlyWhenTheCommandTakesThem) {
  std::string set;
  bool print = false;
  const std::vector<Option> table = {with_value({"--set"}, set), flag({"--print"}, print)};
  ParseRules rules;
  rules.inline_values = true;
  EXPECT_TRUE(parse_options({"--set=a=b"}, table, rules));
  EXPECT_EQ(set, "a=b") << "the value is everything after the first '='";
  EXPECT_TRUE(parse_options({"--set="}, table, rules));
  EXPECT_EQ(set, "");
  EXPECT_TRUE(parse_options({"--print=yes"}, table, rules));
  EXPECT_TRUE(print) << "a flag ignores an inline value";
  EXPECT_EQ(error_of({"--bogus=1"}, table, rules), "unknown option '--bogus=1'") << "named as given";
  EXPECT_EQ(error_of({"--set=a=b"}, table), "unknown option '--set=a=b'") << "without inline_values";
}

TEST(CliOptions, HelpStopsTheParseAndTheRestIsNotRead) {
  int shown = 0;
  bool json = false;
  const std::vector<Option> table = {help([&] { ++shown; }), flag({"--json"}, json)};
  EXPECT_FALSE(parse_options({"-h", "--bogus"}, table));
  EXPECT_FALSE(parse_options({"--help", "--json"}, table));
  EXPECT_EQ(shown, 2);
  EXPECT_FALSE(json);
  EXPECT_EQ(error_of({"--bogus", "--help"}, table), "unknown option '--bogus'") << "in order: the error comes first";
}

TEST(CliOptions, ARowRefusesItsValueWithItsOwnMessage) {
  const std::vector<Option> table = {with_value({"--classifier"}, [](const std::string&, const std::string& v) {
    if (v != "svm" && v != "knn") throw UsageError("--classifier takes svm or knn, not '" + v + "'");
  })};
  EXPECT_EQ(error_of({"--classifier", "knn"}, table), "");
  EXPECT_EQ(error_of({"--classifier", "tree"}, table), "--classifier takes svm or knn, not 'tree'");
}

TEST(CliOptions, ArgumentsCopiesArgvFromAnIndex) {
  char a0[] = "prism", a1[] = "bow", a2[] = "--k";
  char* argv[] = {a0, a1, a2};
  EXPECT_EQ(arguments(3, argv, 1), (Args{"bow", "--k"}));
  EXPECT_EQ(arguments(3, argv, 3), Args{});
}

}  // namespace
}  // namespace prism::cli
