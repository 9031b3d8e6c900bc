// Fuzz target: YAML pipeline configs and `--set` overrides (pipelines/pipeline_config.h:
// parse_pipeline_config, parse_override), what `prism run` reads. The whole parser is fuzzed,
// validation against the GStreamer registry included: LLVMFuzzerInitialize starts GStreamer once
// with the build's Prism plugin (scanned in-process into a registry file of the build).
// Input: the YAML text, then optionally a line "#--set" and one `--set` argument per line after it.
// Checks: parse_override splits at the first '='; a config without errors has its elements and
// chains consistent and makes a launch line; every error has a message and names the config file or
// the override it comes from; no GStreamer-CRITICAL or WARNING (the log handler aborts on one).
#include <glib.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gst_setup.h"
#include "launch_line.h"
#include "pipeline_config.h"

namespace {

const char* const kPath = "/nonexistent/fuzz/config.yaml";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  prism::fuzz::set_gstreamer_environment();
  prism::init_gstreamer();
  FUZZ_CHECK(prism::prism_plugin_available(), "the Prism plugin is not in the registry");
  prism::fuzz::abort_on_gstreamer_warnings();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string marker = "\n#--set\n";
  const size_t cut = text.find(marker);
  std::vector<Override> overrides;
  if (cut != std::string::npos) {
    std::istringstream lines(text.substr(cut + marker.size()));
    for (std::string line; std::getline(lines, line);) {
      Override o;
      const bool ok = parse_override(line, o);
      const size_t eq = line.find('=');
      FUZZ_CHECK(ok == (eq != std::string::npos && eq > 0), line.c_str());
      if (!ok) continue;
      FUZZ_CHECK(o.name == line.substr(0, eq) && o.value == line.substr(eq + 1), line.c_str());
      overrides.push_back(o);
    }
  }
  std::vector<ConfigError> errors;
  const PipelineConfig config =
      parse_pipeline_config(text.substr(0, cut), kPath, overrides, errors, "/nonexistent/fuzz/cwd");
  for (const ConfigError& e : errors) {
    FUZZ_CHECK(!e.message.empty(), e.to_string().c_str());
    FUZZ_CHECK(e.where.file == kPath || e.where.file.rfind("--set ", 0) == 0, e.to_string().c_str());
  }
  if (!errors.empty()) return 0;
  std::set<std::string> names;
  for (const ElementSpec& el : config.elements) {
    FUZZ_CHECK(!el.name.empty() && !el.factory.empty(), el.name.c_str());
    FUZZ_CHECK(names.insert(el.name).second, el.name.c_str());
  }
  for (const LinkChain& chain : config.chains)
    for (const LinkItem& item : chain)
      FUZZ_CHECK(item.kind == LinkItem::Kind::Caps ? !item.caps.empty() : names.count(item.element) == 1,
                 item.element.c_str());
  FUZZ_CHECK(!to_launch_line(config).empty() || config.elements.empty(), "an empty launch line");
  return 0;
}
