// other/x-prism-tensor pipelines on the CPU path: spectralize and envisrc feed emdtracker the same
// signatures it would compute itself; the float distance map equals an independent min-cost-flow
// solver per pixel; the checked-in ENVI sequence is tracked with one stable track; bad input fails
// with the file, line or property named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "emd_reference.h"
#include "envi/envi.h"
#include "emdtracker_util.h"
#include "harness_util.h"
#include "pipeline_run.h"
#include "prism_test.h"
#include "spectral/spectralize.h"

namespace prism {
namespace {

using test::emdt::iou;
using test::emdt::Rect;

class Tensor : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
};

const char* kNv12 = "appsrc name=src format=time caps=video/x-raw,format=NV12,width=160,height=120,framerate=10/1 ! ";
const char* kDistanceOut = " ! other/x-prism-tensor ! appsink name=out sync=false";

TEST_F(Tensor, SpectralizeFeedsTheTrackerTheSignaturesItWouldMake) {
  const std::string tracker = "emdtracker device=cpu target-rect=52,72,24,24 threshold=0.5 min-area=64";
  const test::emdt::PipelineRun own =
      test::emdt::run_pipeline(std::string(kNv12) + tracker + kDistanceOut, 160, 120, 4);
  ASSERT_EQ(own.error, "");
  ASSERT_EQ(own.frames.size(), 4u);
  EXPECT_NE(own.caps.find("other/x-prism-tensor"), std::string::npos);
  EXPECT_NE(own.caps.find("dtype=(string)f32"), std::string::npos);
  EXPECT_NE(own.caps.find("channels=(int)1"), std::string::npos);
  for (const std::string between :
       {"spectralize device=cpu", "spectralize device=cpu ! other/x-prism-tensor,dtype=u16"}) {
    const test::emdt::PipelineRun via =
        test::emdt::run_pipeline(std::string(kNv12) + between + " ! " + tracker + kDistanceOut, 160, 120, 4);
    ASSERT_EQ(via.error, "") << between;
    ASSERT_EQ(via.frames.size(), own.frames.size());
    for (size_t f = 0; f < own.frames.size(); ++f) {
      EXPECT_EQ(via.frames[f], own.frames[f]) << between << " frame " << f;  // bit for bit
      ASSERT_EQ(via.meta[f].size(), own.meta[f].size());
      for (size_t k = 0; k < own.meta[f].size(); ++k) EXPECT_EQ(via.meta[f][k].track, own.meta[f][k].track);
    }
  }
  // No target before frame 0's rectangle is learned never happens here; the target is learned at
  // frame 0, so every value is a distance (finite, >= 0).
  for (float d : own.floats(0)) ASSERT_TRUE(d >= 0.f && std::isfinite(d));
}

// spectralize's output against window histograms counted here by brute force.
TEST_F(Tensor, SpectralizeCountsWindowHistograms) {
  for (const std::string dtype : {"f32", "u16"}) {
    const test::emdt::PipelineRun r = test::emdt::run_pipeline(
        std::string(kNv12) + "spectralize device=cpu bins=7 window=5 ! other/x-prism-tensor,dtype=" + dtype +
            " ! appsink name=out sync=false",
        160, 120, 1);
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_NE(r.caps.find("channels=(int)7"), std::string::npos) << r.caps;
    const std::vector<uint8_t> img = test::emdt::scene_nv12(160, 120, 0);
    const std::vector<uint8_t>& bytes = r.frames[0];
    ASSERT_EQ(bytes.size(), size_t(160) * 120 * 7 * (dtype == "f32" ? 4 : 2));
    for (int y : {0, 1, 59, 118, 119})
      for (int x : {0, 2, 80, 157, 159}) {
        int hist[7] = {0};
        for (int dy = -2; dy <= 2; ++dy)
          for (int dx = -2; dx <= 2; ++dx) {
            const int yy = std::clamp(y + dy, 0, 119), xx = std::clamp(x + dx, 0, 159);
            hist[img[size_t(yy) * 160 + xx] * 7 / 256]++;
          }
        for (int b = 0; b < 7; ++b) {
          const size_t i = (size_t(y) * 160 + x) * 7 + b;
          double v;
          if (dtype == "f32") {
            float f;
            std::memcpy(&f, &bytes[4 * i], 4);
            v = f;
          } else {
            uint16_t u;
            std::memcpy(&u, &bytes[2 * i], 2);
            v = u;
          }
          ASSERT_EQ(v, hist[b]) << dtype << " x " << x << " y " << y << " bin " << b;
        }
      }
  }
}

// A random 6-band cube with repeated and unique signatures, unequal masses and zero pixels.
struct TestCube {
  envi::Header header;
  std::vector<uint16_t> values;  // BIP
};

TestCube random_cube(int W, int H, std::mt19937& rng) {
  TestCube c;
  c.header.samples = W;
  c.header.lines = H;
  c.header.bands = 6;
  c.header.data_type = 12;
  c.values.resize(size_t(W) * H * 6);
  std::vector<std::vector<uint16_t>> palette(5, std::vector<uint16_t>(6));
  for (auto& p : palette)
    for (auto& v : p) v = rng() % 50;
  for (size_t p = 0; p < size_t(W) * H; ++p)
    for (int b = 0; b < 6; ++b)
      c.values[p * 6 + b] = p % 3 == 0 ? uint16_t(rng() % 40) : (p % 17 == 0 ? 0 : palette[p % 5][b]);
  return c;
}

TEST_F(Tensor, DistanceMapFromEnviMatchesAnIndependentSolver) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const int W = 24, H = 16;
  TestCube cube = random_cube(W, H, rng);
  cube.header.interleave = envi::Interleave::BIL;
  envi::write_cube(dir.file("c.hdr"), cube.header, cube.values.data());
  std::vector<double> cost(36);
  std::string matrix;
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) {
      cost[i * 6 + j] = i == j ? 0 : 1 + rng() % 9;  // non-metric, asymmetric
      matrix += std::to_string(int(cost[i * 6 + j])) + (j < 5 ? " " : "\n");
    }
  }
  const std::string mfile = dir.write("cost.txt", matrix);
  const std::vector<double> target = {3, 0, 7, 1, 0, 12};
  for (const std::string opts : {"", "cache-size=0 dedup=false"}) {
    const test::emdt::PipelineRun r =
        test::emdt::run_pipeline("envisrc location=" + dir.file("c.hdr") +
                                 " ! emdtracker device=cpu target=\"3 0 7 1 0 12\" ground-distance=matrix "
                                 "ground-distance-location=" +
                                 mfile + " " + opts + kDistanceOut);
    ASSERT_EQ(r.error, "") << opts;
    ASSERT_EQ(r.frames.size(), 1u);
    const std::vector<float> d = r.floats(0);
    ASSERT_EQ(d.size(), size_t(W) * H);
    for (size_t p = 0; p < d.size(); ++p) {
      const std::vector<double> a(cube.values.begin() + p * 6, cube.values.begin() + p * 6 + 6);
      double flow = 0;
      const double w = test::emd_reference_cost(a, target, cost, &flow);
      if (flow == 0) {  // an all-zero pixel: +infinity (one signature empty)
        EXPECT_TRUE(std::isinf(d[p])) << p;
        continue;
      }
      const double expected = w / flow;  // Rubner: cost per unit of flow
      ASSERT_NEAR(d[p], expected, 1e-5 * std::max(1.0, expected)) << opts << " pixel " << p;
    }
  }
}

TEST_F(Tensor, EveryInterleaveAndByteOrderGivesTheSameDistances) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  TestCube cube = random_cube(13, 7, rng);  // odd sizes: padded tensor rows
  std::vector<std::vector<uint8_t>> maps;
  for (envi::Interleave il : {envi::Interleave::BSQ, envi::Interleave::BIL, envi::Interleave::BIP})
    for (int order : {0, 1}) {
      cube.header.interleave = il;
      cube.header.byte_order = order;
      const std::string hdr = dir.file("c" + std::to_string(maps.size()) + ".hdr");
      envi::write_cube(hdr, cube.header, cube.values.data());
      const test::emdt::PipelineRun r = test::emdt::run_pipeline(
          "envisrc location=" + hdr + " ! emdtracker device=cpu target=\"1 2 3 4 5 6\"" + kDistanceOut);
      ASSERT_EQ(r.error, "");
      ASSERT_EQ(r.frames.size(), 1u);
      maps.push_back(r.frames[0]);
    }
  for (size_t k = 1; k < maps.size(); ++k) EXPECT_EQ(maps[k], maps[0]) << k;
}

// configs/data/envi: a 20x20 painted object moving right 4 pixels per frame over vegetation and
// soil; the target is learned from its first position.
TEST_F(Tensor, EnviSequenceIsTrackedWithOneStableTrack) {
  const std::string loc = std::string(PRISM_SOURCE_DIR_STR) + "/configs/data/envi/scene_%03d.hdr";
  const test::emdt::PipelineRun r =
      test::emdt::run_pipeline("envisrc location=" + loc +
                               " ! emdtracker device=cpu target-rect=4,22,20,20 ground-distance=wavelengths "
                               "wavelengths=\"450,500,550,600,650,700,750,800\" threshold=10 ! "
                               "video/x-raw,format=RGBA ! appsink name=out sync=false");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.frames.size(), 10u);
  for (size_t f = 0; f < 10; ++f) {
    ASSERT_EQ(r.meta[f].size(), 1u) << "frame " << f;
    const Rect object{int(4 + 4 * f), 22, 20, 20};
    EXPECT_GT(iou(r.meta[f][0].box, object), 0.4) << "frame " << f;
    EXPECT_EQ(r.meta[f][0].track, r.meta[0][0].track) << "frame " << f;
    // Over black: the object's centre is pure red (distance ~0), soil is not.
    const uint8_t* centre = &r.frames[f][((32 * 96) + object.x + 10) * 4];
    EXPECT_EQ(centre[0], 255);
    EXPECT_EQ(centre[2], 0);
  }
}

// What may change while playing is what is read per frame: envisrc reads start-index, stop-index
// and loop for each cube; spectralize's bins and window make its caps, and envisrc's location and
// framerate give its caps. None is controllable (no number there is a value to animate).
TEST_F(Tensor, PropertiesSayWhatMayChangeWhilePlaying) {
  using V = std::vector<std::string>;
  GstElement* src = gst_element_factory_make("envisrc", nullptr);
  GstElement* spec = gst_element_factory_make("spectralize", nullptr);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(test::own_properties_with(src, GST_PARAM_MUTABLE_PLAYING), (V{"loop", "start-index", "stop-index"}));
  EXPECT_EQ(test::own_properties_with(src, GST_PARAM_MUTABLE_READY), (V{"framerate", "location"}));
  EXPECT_EQ(test::own_properties_with(src, GST_PARAM_CONTROLLABLE), V{});
  EXPECT_EQ(test::own_properties_with(spec, GST_PARAM_MUTABLE_PLAYING), V{});
  EXPECT_EQ(test::own_properties_with(spec, GST_PARAM_CONTROLLABLE), V{});
  EXPECT_EQ(test::own_properties_with(spec, GST_PARAM_MUTABLE_READY),
            (V{"bins", "cuda-device-id", "device", "window"}));
  gst_object_unref(spec);
  gst_object_unref(src);
}

// envisrc's loop, changed while playing, takes effect at the next cube: a looping sequence of 10
// cubes ends after the pass in which loop is turned off.
TEST_F(Tensor, EnvisrcLoopChangedWhilePlayingEndsTheStream) {
  const std::string loc = std::string(PRISM_SOURCE_DIR_STR) + "/configs/data/envi/scene_%03d.hdr";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(("envisrc name=src loop=true location=" + loc + " ! fakesink").c_str(), &err);
  ASSERT_NE(p, nullptr) << (err ? err->message : "");
  GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
  GstPad* pad = gst_element_get_static_pad(src, "src");
  struct Count {
    GstElement* src;
    int buffers = 0;
  } count{src};
  gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad*, GstPadProbeInfo*, gpointer data) {
        auto* c = static_cast<Count*>(data);
        if (++c->buffers == 15) g_object_set(c->src, "loop", FALSE, nullptr);  // in the second pass
        return GST_PAD_PROBE_OK;
      },
      &count, nullptr);
  gst_object_unref(pad);
  test::RunOptions o;
  o.appsink = "";
  o.idle_timeout = 20 * GST_SECOND;
  const test::RunResult r = test::run_to_end(p, o);
  gst_element_set_state(p, GST_STATE_NULL);
  EXPECT_TRUE(r.eos) << r.error;
  EXPECT_EQ(count.buffers, 20) << "two passes of the 10 cubes";
  gst_object_unref(src);
  gst_object_unref(p);
}

std::string error_of(const std::string& launch) { return test::emdt::run_pipeline(launch + " ! fakesink").error; }

TEST_F(Tensor, BadInputIsNamed) {
  test::TempDir dir;
  EXPECT_EQ(error_of("envisrc location=" + dir.file("none_%03d.hdr")),
            "envisrc: " + dir.file("none_000.hdr") + ": no such file (property 'location')");
  EXPECT_EQ(error_of("envisrc location=" + dir.file("x_%s.hdr")),
            "envisrc: property 'location': '" + dir.file("x_%s.hdr") + "': only one %d or %0Nd directive is allowed");
  const std::string bad = dir.write("bad.hdr", "ENVI\nsamples = 4\nlines = 4\nbands = x\n");
  EXPECT_EQ(error_of("envisrc location=" + bad),
            "envisrc: " + bad + ":4: 'bands' is 'x', not an integer (property 'location')");

  std::mt19937 rng(1);
  TestCube a = random_cube(8, 6, rng), b = random_cube(9, 6, rng);
  envi::write_cube(dir.file("s_000.hdr"), a.header, a.values.data());
  envi::write_cube(dir.file("s_001.hdr"), b.header, b.values.data());
  EXPECT_EQ(error_of("envisrc location=" + dir.file("s_%03d.hdr")),
            "envisrc: " + dir.file("s_001.hdr") +
                " is 9x6 with 6 bands of u16; the sequence started with 8x6, 6 bands of u16");

  const std::string one = "envisrc location=" + dir.file("s_000.hdr") + " ! emdtracker device=cpu ";
  EXPECT_EQ(error_of(one + "target=\"1 2 3\""),
            "emdtracker: property 'target': target signature has 3 bins; the frames have 6");
  const std::string m4 = dir.write("m4.txt", "0 1 2 3\n1 0 1 2\n2 1 0 1\n3 2 1 0\n");
  EXPECT_EQ(error_of(one + "target=\"1 1 1 1 1 1\" ground-distance=matrix ground-distance-location=" + m4),
            "emdtracker: property 'ground-distance-location': " + m4 +
                ": the ground distance has 4 bins and the input has 6 channels");
  // A 1-channel tensor is not a signature: negotiation fails.
  EXPECT_NE(error_of("videotestsrc num-buffers=1 ! video/x-raw,format=GRAY8,width=32,height=16 ! emdtracker "
                     "device=cpu target=\"1 1\" bins=2 ! other/x-prism-tensor ! emdtracker device=cpu target=\"1\""),
            "");
}

// The error of a launch line, which must end within 30 s (a FIFO was once waited on forever).
std::string bounded_error_of(const std::string& launch) {
  std::string error;
  test::within_seconds(30, launch, [&] { error = error_of(launch); });
  return error;
}

// A header beyond the caps (1073741824 x 1073741824 x 16 once wrapped to 0 bytes and crashed on an
// empty data file; 4294967304 samples were read as 8) fails the start, naming the file and line.
TEST_F(Tensor, EnviDimensionsBeyondTheCapsAreNamed) {
  test::TempDir dir;
  const std::string huge = dir.write(
      "huge.hdr", "ENVI\nsamples = 1073741824\nlines = 1073741824\nbands = 16\ndata type = 1\ninterleave = bsq\n");
  dir.write("huge", "");
  EXPECT_EQ(bounded_error_of("envisrc location=" + huge),
            "envisrc: " + huge + ":2: 'samples' is 1073741824; 1 to 32768 are supported (property 'location')");
  const std::string wraps =
      dir.write("wraps.hdr", "ENVI\nsamples = 4294967304\nlines = 1\nbands = 1\ndata type = 1\ninterleave = bsq\n");
  dir.write("wraps", std::string(8, '\0'));
  EXPECT_EQ(bounded_error_of("envisrc location=" + wraps),
            "envisrc: " + wraps + ":2: 'samples' is 4294967304; 1 to 32768 are supported (property 'location')");
}

// A location (header or data) that is a FIFO or /dev/zero is refused, naming it and the property.
TEST_F(Tensor, EnviNonRegularFilesAreRefused) {
  test::TempDir dir;
  const std::string fifo = dir.fifo("f.hdr");
  EXPECT_EQ(bounded_error_of("envisrc location=" + fifo),
            "envisrc: " + fifo + ": not a regular file (a FIFO) (property 'location')");
  const std::string zero = dir.file("z.hdr");
  std::filesystem::create_symlink("/dev/zero", zero);
  EXPECT_EQ(bounded_error_of("envisrc location=" + zero),
            "envisrc: " + zero + ": not a regular file (a character device) (property 'location')");
  const std::string hdr =
      dir.write("d.hdr", "ENVI\nsamples = 2\nlines = 1\nbands = 1\ndata type = 1\ninterleave = bsq\n");
  const std::string data = dir.fifo("d");
  EXPECT_EQ(bounded_error_of("envisrc location=" + hdr),
            "envisrc: " + data + ": not a regular file (a FIFO) (property 'location')");
}

}  // namespace
}  // namespace prism
