#include "options.h"

#include <utility>

namespace prism::cli {

Option flag(std::vector<std::string> names, std::function<void()> apply) {
  Option o;
  o.names = std::move(names);
  o.apply = [apply = std::move(apply)](const std::string&, const std::string&) { apply(); };
  return o;
}

Option flag(std::vector<std::string> names, bool& target) {
  return flag(std::move(names), [&target] { target = true; });
}

Option with_value(std::vector<std::string> names,
                  std::function<void(const std::string& name, const std::string& value)> apply) {
  Option o;
  o.names = std::move(names);
  o.takes_value = true;
  o.apply = std::move(apply);
  return o;
}

Option with_value(std::vector<std::string> names, std::string& target) {
  return with_value(std::move(names), [&target](const std::string&, const std::string& v) { target = v; });
}

Option help(std::function<void()> apply) {
  Option o = flag({"-h", "--help"}, std::move(apply));
  o.stops = true;
  return o;
}

namespace {

const Option* find(const std::vector<Option>& table, const std::string& name) {
  for (const Option& o : table)
    for (const std::string& n : o.names)
      if (n == name) return &o;
  return nullptr;
}

}  // namespace

bool parse_options(const std::vector<std::string>& args, const std::vector<Option>& table, const ParseRules& rules) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string inline_value;
    bool has_inline = false;
    if (rules.inline_values && name.rfind("--", 0) == 0 && name.find('=') != std::string::npos) {
      inline_value = name.substr(name.find('=') + 1);
      name = name.substr(0, name.find('='));
      has_inline = true;
    }
    const Option* o = find(table, name);
    if (!o) {
      const std::string& arg = args[i];  // as given, "--name=value" included
      if (!rules.positional || (arg.size() > 1 && arg[0] == '-')) throw UsageError("unknown option '" + arg + "'");
      rules.positional(arg);
      continue;
    }
    std::string value;
    if (o->takes_value) {
      if (has_inline) {
        value = inline_value;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        throw UsageError(o->missing.empty() ? name + " needs a value" : o->missing);
      }
    }
    o->apply(name, value);
    if (o->stops) return false;
  }
  return true;
}

std::vector<std::string> arguments(int argc, char** argv, int first) {
  std::vector<std::string> out;
  for (int i = first; i < argc; ++i) out.emplace_back(argv[i]);
  return out;
}

}  // namespace prism::cli
