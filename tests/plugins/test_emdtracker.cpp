// emdtracker on the CPU path: tracking a moving textured patch (detections, stable track ids,
// one message per frame, cache statistics), the heat map against the kernels computed directly,
// and clear errors naming the property for bad settings.
#include <gtest/gtest.h>

#include <gst/controller/gstdirectcontrolbinding.h>
#include <gst/controller/gstinterpolationcontrolsource.h>

#include <algorithm>
#include <tuple>

#include <fstream>

#include "emd/emd_map.h"
#include "emd/tracking.h"
#include "emdtracker_util.h"
#include "prism_test.h"
#include "spectral/spectralize.h"

namespace prism {
namespace {

using namespace test::emdt;

class EmdTracker : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
};

// Learned from the patch's inner part in frame 0 (the window sees only the checkerboard there).
const std::string kLearn = "device=cpu target-rect=52,72,24,24 threshold=0.5 min-area=200 ";

TEST_F(EmdTracker, TracksAMovingPatchWithOneTrackId) {
  const int W = 192, H = 144, frames = 8;
  TrackerRun r;
  run_tracker(W, H, frames, kLearn, r);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.meta.size(), static_cast<size_t>(frames));
  int64_t track = -1;
  for (int f = 0; f < frames; ++f) {
    ASSERT_FALSE(r.meta[f].empty()) << "frame " << f << ": no detection";
    const Detection& d = r.meta[f][0];  // the largest first
    EXPECT_GT(iou(d.box, patch_at(f)), 0.5)
        << "frame " << f << ": box " << d.box.x << "," << d.box.y << " " << d.box.w << "x" << d.box.h;
    EXPECT_GE(d.distance, 0.0);
    EXPECT_LE(d.distance, 0.5);
    if (f == 0) track = d.track;
    EXPECT_EQ(d.track, track) << "frame " << f;
  }
  // One message per frame, numbered, with the frame's statistics.
  ASSERT_EQ(r.messages.size(), static_cast<size_t>(frames));
  for (int f = 0; f < frames; ++f) {
    guint64 n = 0;
    ASSERT_TRUE(gst_structure_get_uint64(r.messages[f], "frame", &n));
    EXPECT_EQ(n, static_cast<guint64>(f));
    const GValue* dets = gst_structure_get_value(r.messages[f], "detections");
    ASSERT_NE(dets, nullptr);
    EXPECT_EQ(gst_value_list_get_size(dets), r.meta[f].size());
    const GValue* sv = gst_structure_get_value(r.messages[f], "stats");
    ASSERT_NE(sv, nullptr);
    const GstStructure* st = gst_value_get_structure(sv);
    gint64 solved = 0, dups = 0, hits = 0;
    gst_structure_get_int64(st, "solved", &solved);
    gst_structure_get_int64(st, "duplicates", &dups);
    gst_structure_get_int64(st, "cache-hits", &hits);
    EXPECT_EQ(solved + dups + hits, static_cast<gint64>(W) * H);
    if (f > 0) {
      EXPECT_GT(hits, solved) << "frame " << f << ": a fixed camera should mostly hit the cache";
    }
  }
}

// The element's output equals spectralize + EMD (no cache) + heat map computed directly: at 96x80
// without a legend (too small for one), at 320x240 with the legend (on by default) and without it
// (legend=false).
static void expect_kernels_heat_map(int W, int H, const std::string& extra, bool legend) {
  TrackerRun r;
  run_tracker(W, H, 1, "device=cpu target=\"0,0,0,0,0,0,0,0,0,0,121\" threshold=2 draw-boxes=false opacity=0.7" + extra,
              r);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.frames.size(), 1u);
  const std::vector<uint8_t> img = scene_nv12(W, H, 0);
  std::vector<float> sig(static_cast<size_t>(W) * H * 11), dist(static_cast<size_t>(W) * H);
  spectral::spectralize_cpu(img.data(), W, H, W, {11, 11}, sig.data());
  emd::EmdMapConfig plain;
  plain.dedup = false;
  std::vector<float> target(11, 0.f);
  target[10] = 121.f;
  emd::CpuEmdMap map(emd::GroundDistance::abs_diff(11), target, plain);
  map.compute(sig.data(), static_cast<int64_t>(W) * H, dist.data());
  std::vector<uint8_t> want(static_cast<size_t>(W) * H * 4);
  emd::HeatmapParams p{6.f, 0.7f};
  if (legend) p.legend = emd::legend_layout(W, H, 6.f, 2.f);
  EXPECT_EQ(p.legend.on, legend);
  emd::render_heatmap_cpu(dist.data(), img.data(), W, W, H, p, want.data(), W * 4);
  EXPECT_TRUE(r.frames[0] == want) << W << "x" << H << extra;
}

TEST_F(EmdTracker, HeatMapIsTheKernelsResult) {
  expect_kernels_heat_map(96, 80, "", false);
  expect_kernels_heat_map(320, 240, "", true);
  expect_kernels_heat_map(320, 240, " legend=false", false);
}

TEST_F(EmdTracker, BadSettingsNameTheProperty) {
  struct Case {
    std::string props, must_contain;
  };
  test::TempDir dir;
  const std::string bad_matrix = dir.write("cost.txt", "0 1\n1 x\n");
  const std::vector<Case> cases = {
      {"device=cpu", "target"},                                     // no target at all
      {"device=cpu target=\"1,2,3\"", "target"},                    // 3 bins, 11 expected
      {"device=cpu target=\"0,0,0,0,0,0,0,0,0,0,0\"", "all zero"},  // empty target
      {"device=cpu target=\"1,2,x,4,5,6,7,8,9,10,11\"", "'x'"},     // not a number
      {"device=cpu target-location=/nonexistent/t.txt", "target-location"},
      {"device=cpu target-rect=5000,5000,10,10", "target-rect"},  // outside the frame
      {"device=cpu target-rect=1,2,3", "target-rect"},
      {"device=cpu bins=4 ground-distance=matrix target=\"1,1,1,1\"", "ground-distance-location"},
      {"device=cpu bins=2 ground-distance=matrix ground-distance-location=" + bad_matrix + " target=\"1,1\"",
       bad_matrix + ":2"},
      {"device=cpu bins=3 ground-distance=wavelengths wavelengths=\"400,500\" target=\"1,1,1\"", "bins"},
  };
  for (const Case& c : cases) {
    TrackerRun r;
    run_tracker(64, 48, 2, c.props, r);
    EXPECT_NE(r.error.find(c.must_contain), std::string::npos) << c.props << " -> '" << r.error << "'";
  }
}

// Sets "emdtracker PROPS" to PAUSED with no data: whether it started, and the error's text when not.
bool starts(const std::string& props, std::string& error) {
  GstElement* e = gst_parse_bin_from_description(("emdtracker " + props).c_str(), FALSE, nullptr);
  if (!e) return false;
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(e, bus);
  const bool ok = gst_element_set_state(e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE;
  test::BusLog log;
  log.drain(bus);
  error = log.error;
  gst_element_set_state(e, GST_STATE_NULL);
  gst_element_set_bus(e, nullptr);
  gst_object_unref(bus);
  gst_object_unref(e);
  return ok;
}

// A malformed target-rect or a huge cache-size failed only when the frame came (or as a bare
// bad_alloc): refused at the state change, naming the property.
TEST_F(EmdTracker, BadTargetRectAndCacheSizeFailAtStart) {
  for (const std::string& props :
       {std::string("target-rect=1,2,3"), std::string("target-rect=0,0,3e9,3e9"), std::string("target-rect=1,2,3,x")}) {
    std::string error;
    EXPECT_FALSE(starts("device=cpu " + props, error)) << props;
    EXPECT_NE(error.find("property 'target-rect'"), std::string::npos) << props << " -> '" << error << "'";
  }
  std::string error;
  EXPECT_FALSE(starts("device=cpu target-rect=1,2,3,4 cache-size=9007199254740991", error));
  EXPECT_NE(error.find("property 'cache-size'"), std::string::npos) << error;
  EXPECT_TRUE(starts("device=cpu target-rect=5000,5000,10,10", error)) << error;  // the frame: per caps
}

TEST_F(EmdTracker, WavelengthsAndMatrixGroundDistancesRun) {
  test::TempDir dir;
  std::string m;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) m += std::to_string(i == j ? 0 : 1 + (i + j) % 3) + " ";
    m += "\n";
  }
  const std::string path = dir.write("m.txt", m);
  for (const std::string& g : std::vector<std::string>{"ground-distance=wavelengths wavelengths=\"450,520,610,700\"",
                                                       "ground-distance=matrix ground-distance-location=" + path,
                                                       "ground-distance=squared-diff normalization=larger-mass"}) {
    TrackerRun r;
    run_tracker(64, 48, 2, "device=cpu bins=4 window=5 target=\"10,5,5,5\" " + g, r);
    EXPECT_EQ(r.error, "") << g;
    EXPECT_EQ(r.frames.size(), 2u) << g;
  }
}

// threshold under a GstController binding (an interpolation control source, step mode, absolute
// values): each frame is detected with the value at its stream time, exactly as a run with that
// threshold fixed detects the same frame. The two fixed thresholds detect differently (else this
// shows nothing).
TEST_F(EmdTracker, ControlledThresholdChangesDetectionsFrameByFrame) {
  const int W = 192, H = 144, frames = 6;
  const std::string props = "device=cpu target-rect=52,72,24,24 min-area=200 ";
  const float thresholds[2] = {0.5f, 0.0f};
  auto boxes = [](const std::vector<Detection>& dets) {
    std::vector<std::tuple<int, int, int, int>> b;
    for (const Detection& d : dets) b.emplace_back(d.box.x, d.box.y, d.box.w, d.box.h);
    std::sort(b.begin(), b.end());
    return b;
  };
  TrackerRun fixed[2];
  for (int k = 0; k < 2; ++k) {
    run_tracker(W, H, frames, props + "threshold=" + std::to_string(thresholds[k]), fixed[k]);
    ASSERT_EQ(fixed[k].error, "");
    ASSERT_EQ(fixed[k].meta.size(), size_t(frames));
  }
  // Frame f (PTS f/10 s) gets thresholds[f % 2].
  TrackerRun controlled;
  run_tracker(W, H, frames, props, controlled, "", "", [&](GstElement* p) {
    GstElement* t = gst_bin_get_by_name(GST_BIN(p), "t");
    GstControlSource* cs = gst_interpolation_control_source_new();
    g_object_set(cs, "mode", GST_INTERPOLATION_MODE_NONE, nullptr);
    for (int f = 0; f < frames; ++f)
      gst_timed_value_control_source_set(GST_TIMED_VALUE_CONTROL_SOURCE(cs), f * GST_SECOND / 10, thresholds[f % 2]);
    ASSERT_TRUE(gst_object_add_control_binding(
        GST_OBJECT(t), gst_direct_control_binding_new_absolute(GST_OBJECT(t), "threshold", cs)));
    gst_object_unref(cs);
    gst_object_unref(t);
  });
  ASSERT_EQ(controlled.error, "");
  ASSERT_EQ(controlled.meta.size(), size_t(frames));
  int differ = 0;
  for (int f = 0; f < frames; ++f) {
    EXPECT_EQ(boxes(controlled.meta[f]), boxes(fixed[f % 2].meta[f])) << "frame " << f;
    differ += boxes(fixed[0].meta[f]) != boxes(fixed[1].meta[f]);
  }
  EXPECT_GT(differ, frames / 2) << "the two thresholds detect the same: the test shows nothing";
}

TEST_F(EmdTracker, PropertiesSayWhatMayChangeWhilePlaying) {
  GstElement* e = gst_element_factory_make("emdtracker", nullptr);
  ASSERT_NE(e, nullptr);
  for (const char* name : {"threshold", "heatmap-max", "opacity"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_TRUE(ps->flags & GST_PARAM_CONTROLLABLE) << name;
    EXPECT_TRUE(ps->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  }
  EXPECT_TRUE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), "draw-boxes")->flags & GST_PARAM_MUTABLE_PLAYING);
  // Settings read per caps are not.
  for (const char* name : {"bins", "window", "target", "cache-size"})
    EXPECT_FALSE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), name)->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  gboolean async = TRUE;
  g_object_get(e, "async", &async, nullptr);
  EXPECT_FALSE(async) << "tracking needs every frame: async is off by default";
  gst_object_unref(e);
}

// async=true: every frame comes out (the newest heat map, of the same size), each frame is either
// analysed (one message, naming it) or skipped (counted), and the run ends at EOS.
TEST_F(EmdTracker, AsyncModePassesEveryFrameAndCountsTheSkipped) {
  const int W = 192, H = 144, frames = 8;
  TrackerRun r;
  run_tracker(W, H, frames, kLearn + "async=true", r);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.frames.size(), size_t(frames));
  for (const auto& f : r.frames) EXPECT_EQ(f.size(), size_t(W) * H * 4);
  ASSERT_FALSE(r.messages.empty());
  guint64 last = 0, skipped = 0;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    guint64 f = 0, ts = 0;
    ASSERT_TRUE(gst_structure_get_uint64(r.messages[i], "frame", &f));
    ASSERT_TRUE(gst_structure_get_uint64(r.messages[i], "timestamp", &ts));
    ASSERT_TRUE(gst_structure_get_uint64(r.messages[i], "skipped", &skipped));
    EXPECT_LT(f, guint64(frames));
    if (i > 0) {
      EXPECT_GT(f, last);
    }
    EXPECT_EQ(ts, f * GST_SECOND / 10);
    last = f;
  }
  // A frame is skipped only while an analysis runs; the last message counts the frames skipped
  // before it (one arriving between that message and the worker going idle is counted after).
  EXPECT_LE(r.messages.size() + skipped, size_t(frames));
  EXPECT_GE(r.messages.size(), 1u);
}

}  // namespace
}  // namespace prism
