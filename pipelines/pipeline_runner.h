// Running a validated PipelineConfig to EOS, with progress, error reporting and Ctrl-C handling.
#pragma once

#include <gst/gst.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "camera_control.h"
#include "pipeline_config.h"

namespace prism {

// Exit codes of run_pipeline() and the prism CLI.
enum ExitCode : int {
  kExitOk = 0,            // EOS reached (or stopped cleanly by --timeout)
  kExitRuntimeError = 1,  // the pipeline posted an ERROR, or could not be built or started
  kExitConfigError = 2,   // invalid config or command line (used by callers)
  kExitInterrupted = 130  // SIGINT/SIGTERM
};

struct RunOptions {
  bool quiet = false;          // no progress and no summary (errors and warnings still print)
  double timeout_s = 0;        // > 0: send EOS after this many seconds and stop cleanly
  double eos_grace_s = 3;      // after Ctrl-C/SIGTERM or --timeout: how long to wait for EOS to
                               // reach the sinks, then (at most as long again) for NULL
  bool handle_signals = true;  // install SIGINT/SIGTERM handlers for the run
  FILE* out = stderr;          // where progress, warnings and errors go
  // When set, called on the main thread for every element message of the bus, in order (prism run
  // --results writes the analysis results). A non-empty return is an error: printed, and the run
  // stops with kExitRuntimeError.
  std::function<std::string(GstMessage*)> on_element_message;
  // When set, called for every need-context message, on the thread of the element that asks (a
  // bus sync-message handler): prism run answers CUDA context requests with one context for the
  // whole run (gst_prism_cuda_shared_context_new, in gst-libs, which this layer does not include).
  std::function<void(GstMessage*)> on_need_context;
  // prism run --control / --metrics: the loop publishes each camera's state and counts to it and
  // does the cameras' additions and removals asked through it (camera_control.h).
  CameraControl* control = nullptr;
};

// A folder a sink of the config writes into (the parent of a path property; URLs left out) that
// does not exist yet. Sinks such as multifilesink make no folders: run_pipeline() makes these, and
// `prism run --print` puts `mkdir -p` before its gst-launch-1.0 line.
struct OutputFolder {
  std::string element;   // the sink's config name
  SourceLocation where;  // its key in the config
  std::string folder;
};
std::vector<OutputFolder> missing_output_folders(const PipelineConfig& config);

// Builds the pipeline from to_launch_line(config), plays it and returns an ExitCode. A pipeline
// that does not end within eos_grace_s of the EOS sent on a signal or the timeout is stopped
// anyway (kExitRuntimeError, or kExitInterrupted after a signal).
// Progress counts the buffers reaching the sink pads of the config's sink elements.
int run_pipeline(const PipelineConfig& config, const RunOptions& options = {});

}  // namespace prism
