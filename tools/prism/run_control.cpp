#include "run_control.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <stdexcept>
#include <thread>

#include "http_listener.h"
#include "http_metrics.h"
#include "json_text.h"

namespace prism::cli {

using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// A refusal: the status, the request's field at fault ("" for none) and why.
struct HttpError : std::runtime_error {
  HttpError(int s, std::string f, const std::string& message) : std::runtime_error(message), status(s), field(f) {}
  int status;
  std::string field;
};

json camera_json(const CameraControl::Camera& c) {
  json j = {{"id", c.id},           {"uri", c.uri},
            {"state", c.state},     {"added", c.added},
            {"frames", c.frames},   {"fps", std::round(c.fps * 10) / 10},
            {"dropped", c.dropped}, {"reconnects", c.reconnects}};
  if (c.analysis) {
    j["analysed"] = c.analysed;
    j["skipped"] = c.skipped;
  }
  if (c.latency_s >= 0) j["latency_ms"] = std::round(c.latency_s * 1e4) / 10;
  return j;
}

// A Prometheus label value: backslash, double quote and line feed escaped.
std::string label(const std::string& value) {
  std::string out;
  for (const char ch : value) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

const json* member(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& body, const char* name, const std::string& shown) {
  const json* v = member(body, name);
  if (!v) return {};
  if (!v->is_string()) throw HttpError(400, shown, "'" + shown + "' must be a string");
  return v->get<std::string>();
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) throw HttpError(400, "body", "the body is empty; send a JSON object");
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) throw HttpError(400, "body", "the body is not JSON");
  if (!body.is_object()) throw HttpError(400, "body", "the body must be a JSON object");
  return body;
}

// The camera of an add or remove body: {"id", "uri", "reconnect"}, or DeepStream's
// {"key": "sensor", "value": {"camera_id", "camera_url", ...}, ...} (its other fields ignored).
CameraControl::Request request_of(const json& body, bool add) {
  CameraControl::Request r;
  r.kind = add ? CameraControl::Request::Kind::kAdd : CameraControl::Request::Kind::kRemove;
  if (const json* value = member(body, "value")) {
    if (!value->is_object()) throw HttpError(400, "value", "'value' must be an object with camera_id and camera_url");
    r.id = string_field(*value, "camera_id", "value.camera_id");
    if (add) r.uri = string_field(*value, "camera_url", "value.camera_url");
    if (add && r.uri.empty()) throw HttpError(400, "value.camera_url", "'value.camera_url' is missing");
    if (!add && r.id.empty()) throw HttpError(400, "value.camera_id", "'value.camera_id' is missing");
    return r;
  }
  for (const auto& item : body.items()) {
    const std::string& key = item.key();
    if (key != "id" && !(add && (key == "uri" || key == "reconnect")))
      throw HttpError(400, key,
                      "unknown field '" + key.substr(0, 64) + "' (" + (add ? "id, uri, reconnect" : "id") + ")");
  }
  r.id = string_field(body, "id", "id");
  if (add) {
    r.uri = string_field(body, "uri", "uri");
    if (r.uri.empty()) throw HttpError(400, "uri", "'uri' is missing (rtsp://..., file:///...)");
    if (const json* v = member(body, "reconnect")) {
      if (!v->is_boolean()) throw HttpError(400, "reconnect", "'reconnect' must be true or false");
      r.reconnect = v->get<bool>() ? 1 : 0;
    }
  } else if (r.id.empty()) {
    throw HttpError(400, "id", "'id' is missing");
  }
  return r;
}

}  // namespace

std::string camera_metrics_text(const std::vector<CameraControl::Camera>& cameras) {
  std::ostringstream o;
  auto family = [&](const char* name, const char* type, const std::string& help,
                    const std::function<bool(const CameraControl::Camera&, std::ostream&)>& value) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const CameraControl::Camera& c : cameras) {
      std::ostringstream v;
      if (value(c, v)) o << name << "{camera=\"" << label(c.id) << "\"} " << v.str() << "\n";
    }
  };
  o << "# HELP prism_cameras Cameras in the pipeline.\n# TYPE prism_cameras gauge\nprism_cameras " << cameras.size()
    << "\n";
  o << "# HELP prism_camera_info A camera's source URI (its password masked).\n# TYPE prism_camera_info gauge\n";
  for (const CameraControl::Camera& c : cameras)
    o << "prism_camera_info{camera=\"" << label(c.id) << "\",uri=\"" << label(c.uri) << "\"} 1\n";
  using C = const CameraControl::Camera&;
  using S = std::ostream&;
  family("prism_camera_frames_total", "counter", "Frames that reached the camera's sink (its busiest).",
         [](C c, S v) { return bool(v << c.frames); });
  family("prism_camera_fps", "gauge", "Frames per second at the camera's sink over the last second (0 offline).",
         [](C c, S v) { return bool(v << c.fps); });
  family("prism_camera_online", "gauge", "1 while the camera sends frames, else 0 (starting, offline, ended).",
         [](C c, S v) { return bool(v << (c.state == "online" ? 1 : 0)); });
  family("prism_camera_reconnects_total", "counter", "Sources made anew after the camera dropped.",
         [](C c, S v) { return bool(v << c.reconnects); });
  family("prism_camera_open_waits_total", "counter",
         "RTSP sources played only when their " + std::to_string(kRtspOpenWaitMs / 1000) +  // whole seconds
             " s wait for the server's answer ran out (rtspsrc said nothing of having opened).",
         [](C c, S v) { return bool(v << c.open_waits); });
  family("prism_camera_dropped_frames_total", "counter",
         "Frames the camera's elements dropped as too late (their QoS messages: sinks with sync=true).",
         [](C c, S v) { return bool(v << c.dropped); });
  family("prism_camera_analysed_frames_total", "counter",
         "Results of the camera's analysis elements (one per analysed frame); cameras without one have none.",
         [](C c, S v) { return c.analysis && v << c.analysed; });
  family("prism_camera_skipped_frames_total", "counter",
         "Frames the camera's analysis did not analyse as it was busy (async; frames-skipped).",
         [](C c, S v) { return c.analysis && v << c.skipped; });
  family("prism_camera_latency_seconds", "gauge",
         "Live cameras: the mean time from a frame's capture (its running time) to its arrival at the sink, "
         "over the last second.",
         [](C c, S v) { return c.latency_s >= 0 && v << c.latency_s; });
  return o.str();
}

struct RunServer::Impl {
  CameraControl& cameras;
  const bool control, metrics_route;
  service::HttpMetrics metrics;
  service::HttpListener server;
  std::thread thread;

  static service::ListenerLimits limits() {
    service::ListenerLimits l;
    l.max_body_bytes = 64 << 10;
    l.threads = 4;
    l.max_connections = 256;
    l.max_queued = 64;
    l.max_buffered_bytes = 16 << 20;
    return l;
  }

  Impl(CameraControl& c, bool ctl, bool met)
      : cameras(c),
        control(ctl),
        metrics_route(met),
        server(limits(), service::error_json, [this](int status) { metrics.observe("connection", status, 0); }) {
    routes();
  }

  static void error(httplib::Response& res, int status, const std::string& field, const std::string& message) {
    res.status = status;
    res.set_content(service::error_json(status, field, message), "application/json");
  }

  // Runs one route: its JSON, or the JSON error; counted under `route`.
  void handle(const std::string& route, const httplib::Request& req, httplib::Response& res,
              const std::function<json(const httplib::Request&, httplib::Response&)>& body) {
    const auto start = Clock::now();
    try {
      res.status = 200;
      const json out = body(req, res);
      res.set_content(service::json_text(out), "application/json");
    } catch (const HttpError& e) {
      error(res, e.status, e.field, e.what());
    } catch (const std::exception& e) {
      error(res, 500, "", e.what());
    }
    metrics.observe(route, res.status, std::chrono::duration<double>(Clock::now() - start).count());
  }

  json list() const {
    json all = json::array();
    for (const CameraControl::Camera& c : cameras.cameras()) all.push_back(camera_json(c));
    return {{"cameras", all}};
  }

  json one(const std::string& id) const {
    for (const CameraControl::Camera& c : cameras.cameras())
      if (c.id == id) return camera_json(c);
    throw HttpError(404, "id", "no camera '" + id.substr(0, 64) + "'");
  }

  json submit(const CameraControl::Request& request, httplib::Response& res) {
    const CameraControl::Reply reply = cameras.submit(request);
    if (reply.status >= 400) throw HttpError(reply.status, reply.field, reply.message);
    res.status = reply.status;
    if (request.kind == CameraControl::Request::Kind::kRemove) return {{"removed", request.id}};
    return reply.camera ? camera_json(*reply.camera) : json{{"id", request.id}};
  }

  void routes() {
    using R = const httplib::Request&;
    using W = httplib::Response&;
    server.Get("/live", [this](R q, W r) { handle("live", q, r, [](R, W) { return json{{"status", "ok"}}; }); });
    server.Get("/ready", [this](R q, W r) {
      handle("ready", q, r, [this](R, W) {
        if (!cameras.running()) throw HttpError(503, "", "the pipeline is not playing");
        return json{{"status", "ok"}};
      });
    });
    if (metrics_route)
      server.Get("/metrics", [this](R, W r) {
        r.set_content(camera_metrics_text(cameras.cameras()) + metrics.text(), "text/plain; version=0.0.4");
      });
    if (control) {
      const std::string camera = R"(/api/v1/cameras/([^/]+))";
      auto list_route = [this](R q, W r) { handle("list", q, r, [this](R, W) { return list(); }); };
      server.Get("/api/v1/cameras", list_route);
      server.Get("/api/v1/stream/get-stream-info", list_route);
      server.Get(camera, [this](R q, W r) { handle("get", q, r, [this](R q, W) { return one(q.matches[1].str()); }); });
      auto add_route = [this](R q, W r) {
        handle("add", q, r, [this](R q, W r) { return submit(request_of(parse_body(q), true), r); });
      };
      server.Post("/api/v1/cameras", add_route);
      server.Post("/api/v1/stream/add", add_route);
      server.Delete(camera, [this](R q, W r) {
        handle("remove", q, r, [this](R q, W r) {
          CameraControl::Request request;
          request.kind = CameraControl::Request::Kind::kRemove;
          request.id = q.matches[1].str();
          return submit(request, r);
        });
      });
      server.Post("/api/v1/stream/remove", [this](R q, W r) {
        handle("remove", q, r, [this](R q, W r) { return submit(request_of(parse_body(q), false), r); });
      });
    }
    server.set_error_handler([](R q, W r) {
      if (!r.body.empty()) return;
      if (r.status == 404)
        error(r, 404, "path", "no route " + q.method + " " + q.path.substr(0, 128) + " (README, \"Many cameras\")");
      else if (r.status == 413)
        error(r, 413, "body", "the body is larger than the server's limit");
      else
        error(r, r.status, "", "HTTP " + std::to_string(r.status));
    });
    server.set_exception_handler([](R, W r, std::exception_ptr) { error(r, 500, "", "internal error"); });
  }
};

RunServer::RunServer(CameraControl& cameras, bool control, bool metrics)
    : impl_(std::make_unique<Impl>(cameras, control, metrics)) {}

RunServer::~RunServer() { stop(); }

int RunServer::bind(const std::string& host, int port) { return impl_->server.bind(host, port); }

void RunServer::start() {
  impl_->thread = std::thread([this] {
    try {
      impl_->server.serve();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prism run: error: the control server stopped: %s\n", e.what());
    }
  });
}

void RunServer::stop() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace prism::cli
