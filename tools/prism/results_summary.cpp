#include "results_summary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace prism::cli {

void ResultsSummary::add(const std::string& json_line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_line);
    const std::string name = j.value("element", std::string("?"));
    auto it = std::find_if(elements_.begin(), elements_.end(), [&](const Element& e) { return e.name == name; });
    if (it == elements_.end()) {
      elements_.push_back({name, j.value("factory", std::string("?"))});
      it = elements_.end() - 1;
    }
    Element& e = *it;
    ++e.frames;
    const nlohmann::json results = j.value("results", nlohmann::json::array());
    if (e.factory == "camera") {
      const nlohmann::json info = j.value("info", nlohmann::json::object());
      e.camera = j.value("camera", std::string());
      e.state = info.value("state", std::string("?"));
      e.reason = info.value("reason", std::string());
      e.reconnects = info.value("reconnects", 0L);
      if (e.state == "offline") ++e.offline;
    } else if (e.factory == "emdtracker") {
      e.detections += long(results.size());
      for (const nlohmann::json& r : results) e.tracks.insert(r.value("id", std::string()));
    } else if (e.factory == "textureid") {
      bool any = false;
      for (const nlohmann::json& r : results)
        if (r.value("identified", false)) {
          ++e.found[r.value("id", std::string("?"))];
          any = true;
        }
      if (!any) ++e.nothing;
    } else {  // bowclassify, and whatever else gives labels
      bool any = false;
      for (const nlohmann::json& r : results)
        if (r.contains("label")) {
          ++e.found[r.value("label", std::string("?"))];
          any = true;
        }
      if (!any) ++e.nothing;
    }
  } catch (const nlohmann::json::exception&) {
    ++unreadable_;
  }
}

std::vector<std::string> ResultsSummary::lines() const {
  std::vector<std::string> out;
  for (const Element& e : elements_) {
    if (e.factory == "camera") {  // "door-source (camera door): online at the end; offline 2 times, 2 reconnects"
      std::string line = e.name + " (camera " + e.camera + "): " + e.state + " at the end";
      if (e.state != "online" && !e.reason.empty()) line += " (" + e.reason + ")";
      if (e.offline) line += "; offline " + std::to_string(e.offline) + (e.offline == 1 ? " time" : " times");
      if (e.reconnects) line += std::string(e.offline ? ", " : "; ") + std::to_string(e.reconnects) + " reconnects";
      out.push_back(line);
      continue;
    }
    std::string line =
        e.name + " (" + e.factory + "): " + std::to_string(e.frames) + " result" + (e.frames == 1 ? "" : "s");
    if (e.factory == "emdtracker") {
      line += ", " + std::to_string(e.detections) + " detections, " + std::to_string(e.tracks.size()) + " tracks";
    } else {
      std::vector<std::pair<std::string, int>> found(e.found.begin(), e.found.end());
      std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
      const char* verb = e.factory == "textureid" ? "identified " : "";
      for (size_t i = 0; i < found.size() && i < 5; ++i)
        line += std::string(i ? ", " : "; ") + verb + found[i].first + " in " + std::to_string(found[i].second);
      if (found.size() > 5) line += ", and " + std::to_string(found.size() - 5) + " more";
      if (e.nothing)
        line += std::string(found.empty() ? "; " : ", ") +
                (e.factory == "textureid" ? "nothing identified in " : "no label in ") + std::to_string(e.nothing);
    }
    out.push_back(line);
  }
  if (unreadable_) out.push_back(std::to_string(unreadable_) + " result lines could not be read");
  return out;
}

}  // namespace prism::cli
