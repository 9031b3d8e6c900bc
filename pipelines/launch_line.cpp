#include "launch_line.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

namespace prism {
namespace {

bool all_chars_in(const std::string& s, const char* extra) {
  return std::all_of(s.begin(), s.end(), [extra](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr(extra, c) != nullptr;
  });
}

void declare(const ElementSpec& element, std::vector<std::string>& tokens) {
  tokens.push_back(element.factory);
  tokens.push_back("name=" + element.name);
  for (const auto& p : element.properties) tokens.push_back(p.name + "=" + quote_launch_value(p.value));
}

std::string reference(const LinkItem& item) { return item.element + "." + item.pad; }

}  // namespace

std::string quote_launch_value(const std::string& value) {
  if (!value.empty() && all_chars_in(value, "_-+./:%@^")) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && all_chars_in(word, "_-+./:%@^=,!")) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::vector<std::string> to_launch_tokens(const PipelineConfig& config) {
  std::vector<std::string> tokens;
  std::set<std::string> declared;
  for (const LinkChain& chain : config.chains) {
    // Elements first met with a pad are declared on their own, before the chain.
    for (const LinkItem& item : chain) {
      if (item.kind != LinkItem::Kind::Element || item.pad.empty()) continue;
      if (declared.insert(item.element).second) declare(*config.find_element(item.element), tokens);
    }
    for (size_t i = 0; i < chain.size(); ++i) {
      const LinkItem& item = chain[i];
      if (i > 0) tokens.push_back("!");
      if (item.kind == LinkItem::Kind::Caps) {
        tokens.push_back(item.caps);
      } else if (item.pad.empty() && declared.insert(item.element).second) {
        declare(*config.find_element(item.element), tokens);
      } else {
        tokens.push_back(reference(item));
      }
    }
  }
  return tokens;
}

std::string to_launch_line(const PipelineConfig& config) {
  std::string line;
  for (const auto& token : to_launch_tokens(config)) line += (line.empty() ? "" : " ") + token;
  return line;
}

std::string to_gst_launch_command(const PipelineConfig& config) {
  std::string command = "gst-launch-1.0";
  for (const auto& token : to_launch_tokens(config)) command += " " + shell_quote(token);
  return command;
}

}  // namespace prism
