// prism_test_rtsp_server: a camera without a camera for the multi-camera tests (tests/tools,
// cameras_cli). Serves one live MJPEG stream (videotestsrc is-live=true, 160x120 at 15 fps) as
// rtsp://127.0.0.1:PORT/cam over gst-rtsp-server, loopback only, until killed; prints "ready PORT"
// on standard output once it listens. PORT 0 takes a free one; a test that kills the server starts
// it again on the port it printed, so that the camera's URI comes back.
//   prism_test_rtsp_server PORT [PATTERN]   (PATTERN: videotestsrc's, default "ball")
#include <gst/gst.h>
#include <gst/rtsp-server/rtsp-server.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PORT [PATTERN]\n", argv[0]);
    return 2;
  }
  const std::string pattern = argc > 2 ? argv[2] : "ball";
  GstRTSPServer* server = gst_rtsp_server_new();
  gst_rtsp_server_set_address(server, "127.0.0.1");
  gst_rtsp_server_set_service(server, argv[1]);
  GstRTSPMediaFactory* factory = gst_rtsp_media_factory_new();
  const std::string launch =
      "( videotestsrc is-live=true pattern=" + pattern +
      " ! video/x-raw,format=I420,width=160,height=120,framerate=15/1 ! jpegenc ! rtpjpegpay name=pay0 pt=26 )";
  gst_rtsp_media_factory_set_launch(factory, launch.c_str());
  gst_rtsp_media_factory_set_shared(factory, TRUE);
  GstRTSPMountPoints* mounts = gst_rtsp_server_get_mount_points(server);
  gst_rtsp_mount_points_add_factory(mounts, "/cam", factory);
  g_object_unref(mounts);
  GError* error = nullptr;
  GSource* source = gst_rtsp_server_create_source(server, nullptr, &error);
  if (!source) {
    std::fprintf(stderr, "prism_test_rtsp_server: cannot listen on 127.0.0.1:%s: %s\n", argv[1],
                 error ? error->message : "?");
    return 1;
  }
  g_source_attach(source, nullptr);
  std::printf("ready %d\n", gst_rtsp_server_get_bound_port(server));
  std::fflush(stdout);
  GMainLoop* loop = g_main_loop_new(nullptr, FALSE);
  g_main_loop_run(loop);
  return 0;
}
