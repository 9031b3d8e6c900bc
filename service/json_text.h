// JSON text for the wire. Messages quote what clients sent (a path, a parameter), which may be
// invalid UTF-8; nlohmann::json::dump throws on that by default, so every dump of the service goes
// through here and replaces such bytes with U+FFFD instead (found by tests/fuzz/fuzz_http.cpp: a
// request path with a 0x9D byte ended the server).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace prism::service {

inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The body of every refusal of the HTTP APIs: {"error": {"status", "field", "message"}}, `field`
// null when the fault is not one field's.
inline std::string error_json(int status, const std::string& field, const std::string& message) {
  const nlohmann::json e = {{"error",
                             {{"status", status},
                              {"field", field.empty() ? nlohmann::json(nullptr) : nlohmann::json(field)},
                              {"message", message}}}};
  return json_text(e);
}

}  // namespace prism::service
