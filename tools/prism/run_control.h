// prism run --control HOST:PORT and --metrics HOST:PORT (README, "Many cameras"): HTTP + JSON to list,
// add and remove cameras while the pipeline runs, and the cameras' metrics in Prometheus text,
// over a CameraControl (pipelines/camera_control.h) that the run's loop serves.
//
// The routes follow DeepStream's nvmultiurisrcbin REST API (its /api/v1/stream/add, /stream/remove,
// /stream/get-stream-info, /live, /ready, /metrics; its add/remove bodies are taken too) and name
// cameras as resources (/api/v1/cameras[/ID]). The connections are the texture service's
// (service/http_listener.h: one reading thread, bounded heads, bodies and timeouts), its JSON errors
// {"error": {"status", "field", "message"}} and its request metrics (prism_http_requests_total).
// One server serves both when --control and --metrics name the same address.
#pragma once

#include <memory>
#include <string>

#include "camera_control.h"

namespace prism::cli {

class RunServer {
 public:
  // `control`: the camera routes; `metrics`: GET /metrics. /live and /ready are always there.
  RunServer(CameraControl& cameras, bool control, bool metrics);
  ~RunServer();
  RunServer(const RunServer&) = delete;
  RunServer& operator=(const RunServer&) = delete;

  // Binds (port 0: any free one) and returns the port; throws std::runtime_error naming the address
  // (a port in use).
  int bind(const std::string& host, int port);
  // Serves on a thread of its own until stop().
  void start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text of the cameras (prism_camera_*; README, "Many cameras").
std::string camera_metrics_text(const std::vector<CameraControl::Camera>& cameras);

}  // namespace prism::cli
