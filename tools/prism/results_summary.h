// What `prism run` tells a person at the end: per analysis element, what it found in
// the run (the products textureid identified, the labels bowclassify gave, emdtracker's detections
// and tracks; each camera's state: offline how often, how it ended), from the same JSON lines `--results` writes
// (docs/RESULTS.md), which stay as they are.
#pragma once

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace prism::cli {

class ResultsSummary {
 public:
  // One result line (schema prism.results/1); a line it cannot read is counted, not fatal.
  void add(const std::string& json_line);
  // One line per element that sent results, in the order they first did; nothing when none did.
  std::vector<std::string> lines() const;

 private:
  struct Element {
    std::string name, factory;
    int frames = 0;                    // results received
    std::map<std::string, int> found;  // product id or label -> frames
    int nothing = 0;                   // frames with no identification
    long detections = 0;
    std::set<std::string> tracks;
    // a camera's state lines (factory "camera"): the last state, how often it went offline
    std::string camera, state, reason;
    int offline = 0;
    long reconnects = 0;
  };
  std::vector<Element> elements_;
  int unreadable_ = 0;
};

}  // namespace prism::cli
