// prism run CONFIG [--set NAME=VALUE]... [--print] [--quiet] [--timeout SECONDS] [--grace SECONDS]
//                  [--results FILE|-] [--control HOST:PORT] [--metrics HOST:PORT]
#include <gst/gst.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gst/prism/gstprismcuda.h"
#include "gst/prism/gstprismresults.h"
#include "results_summary.h"
#include "gst_setup.h"
#include "launch_line.h"
#include "options.h"
#include "pipeline_config.h"
#include "pipeline_runner.h"
#include "run_control.h"

namespace prism::cli {
namespace {

constexpr char kUsage[] =
    "usage: prism run CONFIG [--set NAME=VALUE]... [--print] [--quiet] [--timeout SECONDS]\n"
    "                [--grace SECONDS] [--results FILE|-] [--control HOST:PORT] [--metrics HOST:PORT]\n"
    "\n"
    "Validates the YAML pipeline CONFIG, then runs it until end of stream.\n"
    "\n"
    "  --set NAME=VALUE   override variable NAME, or property ELEMENT.PROPERTY (repeatable);\n"
    "                     relative paths given here resolve against the current directory\n"
    "  --print            print the equivalent shell command (gst-launch-1.0) and exit\n"
    "  -q, --quiet        no progress or summary (errors and warnings still print)\n"
    "  --timeout SECONDS  stop cleanly (EOS) after SECONDS and exit 0\n"
    "  --grace SECONDS    after EOS (--timeout, Ctrl-C, SIGTERM), wait at most SECONDS for it to\n"
    "                     reach the sinks, then stop the pipeline anyway and exit 1 (130 when\n"
    "                     interrupted); default 3\n"
    "  --results FILE|-   write every result of the analysis elements (emdtracker, textureid,\n"
    "                     bowclassify) as JSON lines, schema prism.results/1 (docs/RESULTS.md),\n"
    "                     to FILE (created or emptied) or to standard output with '-'; progress,\n"
    "                     warnings and errors always go to standard error\n"
    "  --control HOST:PORT  serve HTTP + JSON there to list the cameras, add one by URI (made from\n"
    "                     the config's per-camera:) and remove one while the pipeline runs\n"
    "                     (README, \"Many cameras\"); port 0: any free port, told on stderr\n"
    "  --metrics HOST:PORT  serve the cameras' metrics there (GET /metrics, Prometheus text); the\n"
    "                     same address as --control: one server for both\n"
    "  -h, --help         show this help\n"
    "\n"
    "Exit status: 0 end of stream, 1 pipeline error, 2 invalid config or arguments,\n"
    "130 interrupted (Ctrl-C or SIGTERM sends EOS so files are finalised; a second one aborts).\n";

struct RunArgs {
  std::string config;
  std::vector<Override> overrides;
  bool print = false;
  bool results = false;
  std::string results_location;
  std::string control_host, metrics_host;
  int control_port = -1, metrics_port = -1;  // -1: not asked for
  RunOptions options;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "prism run: error: %s\n%s", message.c_str(), kUsage);
  return kExitConfigError;
}

// The seconds of --timeout or --grace (`name`), UsageError unless a positive number up to 1e6.
double parse_seconds(const std::string& name, const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds > 0) || seconds > 1e6)
    throw UsageError(name + " needs a positive number of seconds, got '" + text + "'");
  return seconds;
}

// Returns -1 when parsing succeeded, else the exit code.
int parse_args(int argc, char** argv, RunArgs& args) {
  auto set = [&](const std::string&, const std::string& text) {
    Override o;
    if (!parse_override(text, o)) throw UsageError("--set needs NAME=VALUE, got '" + text + "'");
    args.overrides.push_back(o);
  };
  auto results = [&](const std::string&, const std::string& location) {
    if (location.empty()) throw UsageError("--results needs a FILE, or '-' for standard output");
    args.results_location = location;
    args.results = true;
  };
  auto address = [](std::string& host, int& port) {
    return [&host, &port](const std::string& name, const std::string& text) {
      const size_t colon = text.rfind(':');
      char* end = nullptr;
      const long value = colon == std::string::npos ? -1 : std::strtol(text.c_str() + colon + 1, &end, 10);
      if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() || *end != '\0' || value < 0 ||
          value > 65535)
        throw UsageError(name + " takes HOST:PORT such as 127.0.0.1:8081 (port 0: any free port), not '" + text + "'");
      host = text.substr(0, colon);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
      port = int(value);
    };
  };
  auto seconds = [](double& target) {
    return [&target](const std::string& name, const std::string& text) { target = parse_seconds(name, text); };
  };
  const std::vector<Option> table = {
      help([] { std::fputs(kUsage, stdout); }),
      flag({"--print"}, args.print),
      flag({"-q", "--quiet"}, args.options.quiet),
      with_value({"--set"}, set).if_missing("--set needs NAME=VALUE"),
      with_value({"--results"}, results).if_missing("--results needs a FILE, or '-' for standard output"),
      with_value({"--timeout"}, seconds(args.options.timeout_s)).if_missing("--timeout needs a number of seconds"),
      with_value({"--grace"}, seconds(args.options.eos_grace_s)).if_missing("--grace needs a number of seconds"),
      with_value({"--control"}, address(args.control_host, args.control_port))
          .if_missing("--control needs HOST:PORT such as 127.0.0.1:8081"),
      with_value({"--metrics"}, address(args.metrics_host, args.metrics_port))
          .if_missing("--metrics needs HOST:PORT such as 127.0.0.1:8082"),
  };
  ParseRules rules;
  rules.inline_values = true;  // --set=NAME=VALUE, --timeout=5
  rules.positional = [&](const std::string& arg) {
    if (!args.config.empty()) throw UsageError("more than one CONFIG given ('" + args.config + "', '" + arg + "')");
    args.config = arg;
  };
  try {
    if (!parse_options(arguments(argc, argv, 1), table, rules)) return kExitOk;  // --help
  } catch (const UsageError& e) {
    return usage_error(e.what());
  }
  if (args.config.empty()) return usage_error("no CONFIG given");
  return -1;
}

// The folder of the Prism plugin this process loaded, when the config uses one of its elements
// ("" otherwise): gst-launch-1.0 does not look where prism does (gst_setup.h).
std::string prism_plugin_dir_for(const PipelineConfig& config) {
  bool uses = false;
  for (const ElementSpec& e : config.elements) {
    GstElementFactory* f = gst_element_factory_find(e.factory.c_str());
    if (!f) continue;
    const gchar* plugin = gst_plugin_feature_get_plugin_name(GST_PLUGIN_FEATURE(f));
    uses = uses || (plugin && std::string(plugin) == "prism");
    gst_object_unref(f);
  }
  if (!uses) return {};
  GstPlugin* plugin = gst_registry_find_plugin(gst_registry_get(), "prism");
  if (!plugin) return {};
  const gchar* file = gst_plugin_get_filename(plugin);
  const std::string dir = file ? std::filesystem::path(file).parent_path().string() : std::string();
  gst_object_unref(plugin);
  return dir;
}

// What --print shows: a command a user pastes into a POSIX shell and that runs as prism run would:
// the sinks' missing folders made first, the Prism plugin's folder on
// GST_PLUGIN_PATH when the config uses its elements, then the gst-launch-1.0 line.
std::string pasteable_command(const PipelineConfig& config) {
  std::string line;
  for (const OutputFolder& f : missing_output_folders(config)) line += "mkdir -p " + shell_quote(f.folder) + " && ";
  if (const std::string dir = prism_plugin_dir_for(config); !dir.empty())
    line += "GST_PLUGIN_PATH=" + shell_quote(dir) + " ";
  return line + to_gst_launch_command(config);
}

}  // namespace

int run_command(int argc, char** argv) {
  RunArgs args;
  if (const int code = parse_args(argc, argv, args); code >= 0) return code;

  init_gstreamer();
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_pipeline_config(args.config, args.overrides, errors);
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "%s\n", e.to_string().c_str());
    std::fprintf(stderr, "prism: %zu error%s in %s; nothing was run\n", errors.size(), errors.size() == 1 ? "" : "s",
                 args.config.c_str());
    return kExitConfigError;
  }
  if (args.print) {
    std::printf("%s\n", pasteable_command(config).c_str());
    return kExitOk;
  }
  // Opened before the pipeline is built, so that an unwritable file fails before anything runs.
  ResultsWriter results;
  if (args.results) {
    std::string error;
    if (!results.open(args.results_location, FALSE, &error)) {
      std::fprintf(stderr, "prism run: error: --results: %s\n", error.c_str());
      return kExitConfigError;
    }
  }
  // The control and metrics servers listen before the pipeline is built: an address in use fails
  // before anything runs. With --control and --metrics on one address, one server serves both.
  CameraControl control;
  std::vector<std::unique_ptr<RunServer>> servers;
  if (args.control_port >= 0 || args.metrics_port >= 0) {
    const bool shared = args.control_port >= 0 && args.control_host == args.metrics_host &&
                        args.control_port == args.metrics_port && args.control_port != 0;
    struct Asked {
      const char* option;
      std::string host;
      int port;
      bool control, metrics;
    };
    std::vector<Asked> asked;
    if (args.control_port >= 0)
      asked.push_back(
          {shared ? "--control and --metrics" : "--control", args.control_host, args.control_port, true, shared});
    if (args.metrics_port >= 0 && !shared)
      asked.push_back({"--metrics", args.metrics_host, args.metrics_port, false, true});
    for (const Asked& a : asked) {
      auto server = std::make_unique<RunServer>(control, a.control, a.metrics);
      int port = 0;
      try {
        port = server->bind(a.host, a.port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "prism run: error: %s: %s\n", a.option, e.what());
        return kExitConfigError;
      }
      const bool loopback = a.host == "localhost" || a.host == "::1" || a.host.rfind("127.", 0) == 0;
      std::fprintf(stderr, "prism: %s listening on http://%s:%d%s\n", a.control ? "control API" : "metrics",
                   a.host.find(':') != std::string::npos ? ("[" + a.host + "]").c_str() : a.host.c_str(), port,
                   a.control ? (a.metrics ? " (/api/v1/cameras, /metrics)" : " (/api/v1/cameras)") : " (/metrics)");
      if (!loopback)
        std::fprintf(stderr,
                     "prism run: warning: %s on %s is reachable from other hosts and asks no password: anyone who "
                     "reaches it may %s\n",
                     a.option, a.host.c_str(), a.control ? "add and remove cameras" : "read the metrics");
      servers.push_back(std::move(server));
    }
    std::fflush(stderr);
    for (auto& server : servers) server->start();
    args.options.control = &control;
  }
  ResultsSummary summary;
  args.options.on_element_message = [&](GstMessage* msg) {
    if (!results_message_is_result(msg)) return std::string();
    const std::string line = results_json_line(msg);
    summary.add(line);
    std::string error;
    if (args.results && !results.write_line(line, &error)) return "--results: " + error;
    return std::string();
  };
  // Every element that asks for a CUDA context (decoders, uploads, ours) gets its device's one
  // blocking-sync context: many cameras' threads wait on the GPU, and that one sleeps while they do
  // where GStreamer's own spins (gst_prism_cuda_shared_context_new says why).
  std::unique_ptr<GstPrismCudaContextSharer, void (*)(GstPrismCudaContextSharer*)> cuda_sharer(
      gst_prism_cuda_context_sharer_new(), gst_prism_cuda_context_sharer_free);
  args.options.on_need_context = [&](GstMessage* msg) { gst_prism_cuda_context_sharer_answer(cuda_sharer.get(), msg); };
  const int rc = run_pipeline(config, args.options);
  for (auto& server : servers) server->stop();
  // The summary goes where the person reads: stderr when stdout carries the JSON lines.
  FILE* out = args.results && args.results_location == "-" ? stderr : stdout;
  if (!args.options.quiet)
    for (const std::string& line : summary.lines()) std::fprintf(out, "prism: %s\n", line.c_str());
  return rc;
}

}  // namespace prism::cli
