// Turning a validated PipelineConfig into gst-launch syntax.
#pragma once

#include <string>
#include <vector>

#include "pipeline_config.h"

namespace prism {

// The description as gst-launch tokens: each element is declared ("factory name=N prop=value")
// where it first appears in a chain, later appearances are references ("N." or "N.PAD"); an
// element whose first appearance names a pad is declared on its own before that chain.
std::vector<std::string> to_launch_tokens(const PipelineConfig& config);

// The tokens joined by spaces: what run_pipeline() hands to gst_parse_launch_full().
std::string to_launch_line(const PipelineConfig& config);

// "gst-launch-1.0 ..." with shell quoting, ready to paste into a POSIX shell; gst-launch-1.0
// rebuilds exactly to_launch_line() from its arguments.
std::string to_gst_launch_command(const PipelineConfig& config);

// `value` in gst-launch property syntax: bare when safe, else double-quoted with '\' escapes.
std::string quote_launch_value(const std::string& value);

// `word` for a POSIX shell: bare when safe, else single-quoted.
std::string shell_quote(const std::string& word);

}  // namespace prism
