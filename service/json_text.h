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

}  // namespace prism::service
