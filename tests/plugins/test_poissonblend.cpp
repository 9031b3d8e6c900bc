// poissonblend element tests on the CPU path (device=cpu): the output must equal OpenCV 4.6's
// cv::seamlessClone within max difference 1 on at most 0.1% of the values, for every mode, binary,
// soft and alpha-channel masks, several overlays in z-order, controller-driven positions and still
// images through imagefreeze; clipping, empty masks and bad input must never crash or hang.
// Images are made here (random, smooth) or read from ../shared/data with the plugin's own image
// loader (no OpenCV imgcodecs in this binary).
#include <gtest/gtest.h>

#include <gst/app/gstappsink.h>
#include <gst/check/gstharness.h>
#include <gst/check/gsttestclock.h>
#include <gst/app/gstappsrc.h>
#include <gst/controller/gstdirectcontrolbinding.h>
#include <gst/controller/gstinterpolationcontrolsource.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/photo.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bad_input.h"
#include "colorconvert/colorconvert.h"
#include "gst/prism/gstprismimagefile.h"
#include "harness_util.h"
#include "poisson/seamless_clone.h"
#include "poissonblend_util.h"
#include "prism_run_util.h"
#include "prism_test.h"

namespace fs = std::filesystem;
namespace pp = prism::poisson;
namespace cc = prism::colorconvert;

namespace {

using namespace prism::test::blend;

class PoissonBlend : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  TempDir dir;
};

}  // namespace

// ---- registration and documentation ------------------------------------------------------------

TEST_F(PoissonBlend, IsRegisteredWithDocumentedControllableProperties) {
  GstElement* e = gst_element_factory_make("poissonblend", nullptr);
  ASSERT_NE(e, nullptr) << "poissonblend not found; GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  for (const char* name : {"device", "cuda-device-id", "background-timeout"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 20u) << name;
  }
  // Room for a background linked late (rtspsrc's TCP fallback can take 20 s).
  EXPECT_EQ(G_PARAM_SPEC_UINT(g_object_class_find_property(G_OBJECT_GET_CLASS(e), "background-timeout"))->default_value,
            30000u);
  GstPad* bg = gst_element_get_static_pad(e, "sink");
  ASSERT_NE(bg, nullptr);
  gst_object_unref(bg);
  GstPad* pad = gst_element_request_pad_simple(e, "overlay_%u");
  ASSERT_NE(pad, nullptr);
  EXPECT_STREQ(GST_PAD_NAME(pad), "overlay_0");
  for (const char* name : {"xpos", "ypos", "mode", "zorder", "mask-location"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(pad), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 40u) << name;
    if (std::string(name) != "mask-location") {
      EXPECT_TRUE(ps->flags & GST_PARAM_CONTROLLABLE) << name;
    }
  }
  EXPECT_NE(std::string(g_param_spec_get_blurb(g_object_class_find_property(G_OBJECT_GET_CLASS(pad), "xpos")))
                .find("seamlessClone"),
            std::string::npos);
  GstPad* pad2 = gst_element_request_pad_simple(e, "overlay_7");
  ASSERT_NE(pad2, nullptr);
  EXPECT_STREQ(GST_PAD_NAME(pad2), "overlay_7");
  EXPECT_EQ(gst_element_request_pad_simple(e, "overlay_7"), nullptr);  // taken
  gst_element_release_request_pad(e, pad2);
  gst_object_unref(pad2);
  gst_element_release_request_pad(e, pad);
  gst_object_unref(pad);
  gst_object_unref(e);
}

// What may change while playing is what is read for each output frame: every overlay pad property
// (zorder, the solving order, included), all but mask-location controllable. The element's own
// properties (device, cuda-device-id) are read at start.
TEST_F(PoissonBlend, PropertiesSayWhatMayChangeWhilePlaying) {
  using V = std::vector<std::string>;
  GstElement* e = gst_element_factory_make("poissonblend", nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_MUTABLE_PLAYING), V{});
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_CONTROLLABLE), V{});
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_MUTABLE_READY),
            (V{"background-timeout", "cuda-device-id", "device"}));
  GstPad* overlay = gst_element_request_pad_simple(e, "overlay_%u");
  ASSERT_NE(overlay, nullptr);
  EXPECT_EQ(prism::test::own_properties_with(overlay, GST_PARAM_MUTABLE_PLAYING),
            (V{"mask-location", "mode", "xpos", "ypos", "zorder"}));
  EXPECT_EQ(prism::test::own_properties_with(overlay, GST_PARAM_CONTROLLABLE), (V{"mode", "xpos", "ypos", "zorder"}));
  GstPad* bg = gst_element_get_static_pad(e, "sink");
  ASSERT_NE(bg, nullptr);
  EXPECT_EQ(prism::test::own_properties_with(bg, GST_PARAM_MUTABLE_PLAYING), V{"zorder"});  // ignored there
  gst_object_unref(bg);
  gst_element_release_request_pad(e, overlay);
  gst_object_unref(overlay);
  gst_object_unref(e);
}

// ---- the image loader ------------------------------------------------------------------------------

TEST_F(PoissonBlend, ImageLoaderKeepsValuesAndNamesTheFileInErrors) {
  cv::Mat grey = random_image(37, 23, 1, 7);
  const std::string png = dir.file("grey.png");
  write_png(grey, png);
  prism::ImageFile im;
  GError* err = nullptr;
  ASSERT_TRUE(prism::image_file_load_grey(png.c_str(), &im, &err)) << err->message;
  ASSERT_EQ(im.width, 37);
  ASSERT_EQ(im.height, 23);
  EXPECT_EQ(0, memcmp(im.pixels.data(), grey.data, grey.total()));

  // A colour file's grey is cvtColor(BGR2GRAY) exactly.
  cv::Mat colour = random_image(31, 17, 3, 8), colour_grey;
  cv::cvtColor(colour, colour_grey, cv::COLOR_BGR2GRAY);
  const std::string cpng = dir.file("colour.png");
  write_png(colour, cpng);
  ASSERT_TRUE(prism::image_file_load_grey(cpng.c_str(), &im, &err)) << err->message;
  EXPECT_EQ(0, memcmp(im.pixels.data(), colour_grey.data, colour_grey.total()));

  // A PGM written by hand.
  const std::string pgm = dir.file("mask.pgm");
  {
    std::ofstream f(pgm, std::ios::binary);
    f << "P5\n37 23\n255\n";
    f.write((const char*)grey.data, grey.total());
  }
  ASSERT_TRUE(prism::image_file_load_grey(pgm.c_str(), &im, &err)) << err->message;
  EXPECT_EQ(0, memcmp(im.pixels.data(), grey.data, grey.total()));

  const std::string missing = dir.file("nope.png");
  EXPECT_FALSE(prism::image_file_load_grey(missing.c_str(), &im, &err));
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err->message).find(missing), std::string::npos) << err->message;
  EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND));
  g_clear_error(&err);

  const std::string text = dir.file("text.png");
  std::ofstream(text) << "this is not an image\n";
  EXPECT_FALSE(prism::image_file_load_grey(text.c_str(), &im, &err));
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err->message).find(text), std::string::npos) << err->message;
  g_clear_error(&err);
}

TEST_F(PoissonBlend, ImageLoaderReadsPhotos) {
  const std::string path = prism::test::data_dir() + "/images/fruits.jpg";
  PRISM_NEED_FILE(path);
  prism::ImageFile im;
  GError* err = nullptr;
  ASSERT_TRUE(prism::image_file_load(path.c_str(), GST_VIDEO_FORMAT_BGR, &im, &err)) << err->message;
  EXPECT_EQ(im.width, 512);
  EXPECT_EQ(im.height, 480);
  ASSERT_TRUE(prism::image_file_load(path.c_str(), GST_VIDEO_FORMAT_BGRA, &im, &err, 160, 120)) << err->message;
  EXPECT_EQ(im.width, 160);
  EXPECT_EQ(im.channels, 4);
  EXPECT_EQ(im.pixels.size(), 160u * 120 * 4);
}

// ---- equality with cv::seamlessClone ----------------------------------------------------------------

struct MaskCase {
  const char* name;
  bool soft;
  bool alpha;  // the overlay's alpha channel instead of a mask file
};

TEST_F(PoissonBlend, MatchesSeamlessCloneOnRandomImages) {
  const cv::Mat bg = random_image(203, 151, 3, 1);
  const cv::Mat ov = random_image(83, 61, 3, 2);
  for (const MaskCase mc : {MaskCase{"binary", false, false}, MaskCase{"soft", true, false},
                            MaskCase{"alpha-binary", false, true}, MaskCase{"alpha-soft", true, true}}) {
    const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, mc.soft);
    const std::string mask_path = dir.file(std::string(mc.name) + ".png");
    if (!mc.alpha) write_png(mask, mask_path);
    for (const char* mode : {"normal", "mixed", "monochrome-transfer"}) {
      Overlay o;
      o.image = mc.alpha ? bgra_with_alpha(ov, mask) : ov;
      o.xpos = 97;
      o.ypos = 70;
      o.mode = mode;
      if (!mc.alpha) o.mask_location = mask_path;
      Result r = run_blend(Background::of(bg), {o});
      ASSERT_EQ(r.error, "") << r.error_debug;
      ASSERT_EQ(r.frames.size(), 1u);
      cv::Mat ref = opencv_clone(ov, bg, mask, o.xpos, o.ypos, cv_flag(mode));
      EXPECT_CLOSE_TO_OPENCV(r.frames[0], ref, mc.name << " " << mode);
      EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
    }
  }
}

TEST_F(PoissonBlend, MatchesSeamlessCloneOnPhotos) {
  PRISM_NEED_FILE(prism::test::data_dir() + "/images/fruits.jpg");
  PRISM_NEED_FILE(prism::test::data_dir() + "/images/baboon.jpg");
  const cv::Mat bg = photo("fruits.jpg", 256, 240);
  const cv::Mat ov = photo("baboon.jpg", 120, 120);
  ASSERT_FALSE(bg.empty());
  ASSERT_FALSE(ov.empty());
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, true);
  const std::string mask_path = dir.file("mask.png");
  write_png(mask, mask_path);
  for (const char* mode : {"normal", "mixed", "monochrome-transfer"}) {
    Overlay o;
    o.image = ov;
    o.xpos = 131;
    o.ypos = 117;
    o.mode = mode;
    o.mask_location = mask_path;
    Result r = run_blend(Background::of(bg), {o});
    ASSERT_EQ(r.error, "") << r.error_debug;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_CLOSE_TO_OPENCV(r.frames[0], opencv_clone(ov, bg, mask, o.xpos, o.ypos, cv_flag(mode)), mode);
  }
}

// The same clone in every packed background format and overlay format: channel order only.
TEST_F(PoissonBlend, EveryPackedFormatGivesTheSameResult) {
  const cv::Mat bg = random_image(120, 90, 3, 11);
  const cv::Mat ov = random_image(50, 40, 3, 12);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, true);
  const cv::Mat ref = opencv_clone(ov, bg, mask, 60, 44, cv::MONOCHROME_TRANSFER);
  struct Fmt {
    const char* name;
    int code;  // cv::cvtColor from BGR
  };
  const Fmt formats[] = {{"BGR", -1},
                         {"RGB", cv::COLOR_BGR2RGB},
                         {"BGRA", cv::COLOR_BGR2BGRA},
                         {"RGBA", cv::COLOR_BGR2RGBA},
                         {"BGRx", cv::COLOR_BGR2BGRA},
                         {"RGBx", cv::COLOR_BGR2RGBA}};
  for (const Fmt& bf : formats) {
    cv::Mat bgc = bg.clone();
    if (bf.code >= 0) cv::cvtColor(bg, bgc, bf.code);
    for (const char* of : {"RGBA", "BGRA"}) {
      Overlay o;
      cv::Mat ova = bgra_with_alpha(ov, mask);
      if (std::string(of) == "RGBA") cv::cvtColor(ova, ova, cv::COLOR_BGRA2RGBA);
      o.image = ova;
      o.format = of;
      o.xpos = 60;
      o.ypos = 44;
      o.mode = "monochrome-transfer";
      Result r = run_blend(Background::of(bgc, bf.name), {o});
      ASSERT_EQ(r.error, "") << bf.name << " " << of << ": " << r.error_debug;
      ASSERT_EQ(r.frames.size(), 1u);
      cv::Mat back = r.frames[0];
      if (bf.code == cv::COLOR_BGR2RGB)
        cv::cvtColor(back, back, cv::COLOR_RGB2BGR);
      else if (bf.code == cv::COLOR_BGR2BGRA)
        cv::cvtColor(back, back, cv::COLOR_BGRA2BGR);
      else if (bf.code == cv::COLOR_BGR2RGBA)
        cv::cvtColor(back, back, cv::COLOR_RGBA2BGR);
      EXPECT_CLOSE_TO_OPENCV(back, ref, bf.name << " background, " << of << " overlay");
    }
  }
  // The RGB overlays without alpha, with a mask file.
  const std::string mask_path = dir.file("mask.png");
  write_png(mask, mask_path);
  for (const char* of : {"RGB", "RGBx", "BGRx"}) {
    Overlay o;
    cv::Mat ovc;
    if (std::string(of) == "RGB")
      cv::cvtColor(ov, ovc, cv::COLOR_BGR2RGB);
    else
      cv::cvtColor(ov, ovc, std::string(of) == "RGBx" ? cv::COLOR_BGR2RGBA : cv::COLOR_BGR2BGRA);
    o.image = ovc;
    o.format = of;
    o.xpos = 60;
    o.ypos = 44;
    o.mode = "monochrome-transfer";
    o.mask_location = mask_path;
    Result r = run_blend(Background::of(bg), {o});
    ASSERT_EQ(r.error, "") << of << ": " << r.error_debug;
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_CLOSE_TO_OPENCV(r.frames[0], ref, of << " overlay");
  }
}

// ---- several overlays ---------------------------------------------------------------------------------

TEST_F(PoissonBlend, OverlaysAreSolvedInZOrderLikeRepeatedSeamlessClone) {
  const cv::Mat bg = random_image(180, 140, 3, 21);
  const cv::Mat a = random_image(70, 60, 3, 22), b = random_image(64, 50, 3, 23), c = random_image(40, 40, 3, 24);
  const cv::Mat ma = ellipse_mask(a.cols, a.rows, false), mb = ellipse_mask(b.cols, b.rows, true),
                mc = ellipse_mask(c.cols, c.rows, false);
  // overlay_0 (a) zorder 9, overlay_1 (b) zorder 2, overlay_2 (c) zorder 2: order b, c, a. They overlap.
  Overlay oa{bgra_with_alpha(a, ma), "", 80, 70, "normal", "", 9};
  Overlay ob{bgra_with_alpha(b, mb), "", 100, 80, "mixed", "", 2};
  Overlay oc{bgra_with_alpha(c, mc), "", 70, 60, "normal", "", 2};
  Result r = run_blend(Background::of(bg), {oa, ob, oc}, 2);
  ASSERT_EQ(r.error, "") << r.error_debug;
  ASSERT_EQ(r.frames.size(), 2u);
  cv::Mat ref = opencv_clone(b, bg, mb, 100, 80, cv::MIXED_CLONE);
  ref = opencv_clone(c, ref, mc, 70, 60, cv::NORMAL_CLONE);
  ref = opencv_clone(a, ref, ma, 80, 70, cv::NORMAL_CLONE);
  // Each step may differ by 1 from OpenCV and later steps see it: allow one grey level per step.
  for (const cv::Mat& f : r.frames) {
    Diff d = compare(f, ref);
    EXPECT_LE(d.max, 3);
    EXPECT_LE(d.frac, 0.003) << 100 * d.frac << "%";
  }
  // Another order gives another picture.
  cv::Mat other = opencv_clone(a, bg, ma, 80, 70, cv::NORMAL_CLONE);
  other = opencv_clone(b, other, mb, 100, 80, cv::MIXED_CLONE);
  other = opencv_clone(c, other, mc, 70, 60, cv::NORMAL_CLONE);
  EXPECT_GT(compare(r.frames[0], other).max, 3);
  // Ties go by pad creation: overlay_0 then overlay_1 (both zorder 0, nearly on top of each other).
  const cv::Mat d = random_image(50, 40, 3, 25), e = random_image(50, 40, 3, 26), md = ellipse_mask(50, 40, true);
  Result t = run_blend(Background::of(bg), {Overlay{bgra_with_alpha(d, md), "", 60, 50, "normal", "", 0},
                                            Overlay{bgra_with_alpha(e, md), "", 64, 52, "normal", "", 0}});
  ASSERT_EQ(t.error, "") << t.error_debug;
  ASSERT_EQ(t.frames.size(), 1u);
  const cv::Mat d_then_e =
      opencv_clone(e, opencv_clone(d, bg, md, 60, 50, cv::NORMAL_CLONE), md, 64, 52, cv::NORMAL_CLONE);
  const cv::Mat e_then_d =
      opencv_clone(d, opencv_clone(e, bg, md, 64, 52, cv::NORMAL_CLONE), md, 60, 50, cv::NORMAL_CLONE);
  EXPECT_LE(compare(t.frames[0], d_then_e).max, 2);
  EXPECT_GT(compare(t.frames[0], e_then_d).max, 10);
}

// ---- clipping, empty masks ------------------------------------------------------------------------------

TEST_F(PoissonBlend, OverlayPartlyOutsideIsClippedAndTheStreamGoesOn) {
  const cv::Mat bg = random_image(160, 120, 3, 31);
  const cv::Mat ov = random_image(60, 50, 3, 32);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, false);
  Overlay o{bgra_with_alpha(ov, mask), "", 150, 10, "normal", "", -1};
  Result r = run_blend(Background::of(bg), {o}, 4);
  ASSERT_EQ(r.error, "") << r.error_debug;
  EXPECT_TRUE(r.eos);
  ASSERT_EQ(r.frames.size(), 4u);
  // One warning naming the pad, for four clipped frames.
  ASSERT_EQ(r.warnings.size(), 1u) << joined(r.warnings);
  EXPECT_NE(r.warnings[0].find("overlay_0"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("clipped"), std::string::npos) << r.warnings[0];
  // Outside the solved box the background is untouched; inside, something was cloned.
  const pp::Box box = pp::mask_box(pp::MaskView{mask.data, mask.cols, mask.rows, (int64_t)mask.step[0], 1});
  const pp::Placement pl = pp::place(box, 150, 10, bg.cols, bg.rows);
  ASSERT_TRUE(pl.clipped);
  ASSERT_TRUE(pl.solvable());
  const cv::Rect dst(pl.dst.x, pl.dst.y, pl.dst.width, pl.dst.height);
  for (const cv::Mat& f : r.frames) {
    cv::Mat outside_ours = f.clone(), outside_bg = bg.clone();
    outside_ours(dst).setTo(0);
    outside_bg(dst).setTo(0);
    EXPECT_EQ(compare(outside_ours, outside_bg).max, 0);
    EXPECT_GT(compare(f(dst), bg(dst)).max, 0);
  }
  EXPECT_EQ(compare(r.frames[0], r.frames[3]).max, 0);
}

TEST_F(PoissonBlend, OverlayWhollyOutsideLeavesTheBackground) {
  const cv::Mat bg = random_image(160, 120, 3, 33);
  const cv::Mat ov = random_image(60, 50, 3, 34);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, false);
  for (auto [x, y] : {std::pair{-200, 50}, std::pair{80, 1000}, std::pair{G_MAXINT, G_MININT}}) {
    Overlay o{bgra_with_alpha(ov, mask), "", x, y, "normal", "", -1};
    Result r = run_blend(Background::of(bg), {o}, 2);
    ASSERT_EQ(r.error, "") << r.error_debug;
    ASSERT_EQ(r.frames.size(), 2u);
    for (const cv::Mat& f : r.frames) EXPECT_EQ(compare(f, bg).max, 0) << x << "," << y;
  }
}

TEST_F(PoissonBlend, EmptyMaskLeavesTheBackgroundWithOneWarning) {
  const cv::Mat bg = random_image(100, 80, 3, 35);
  const cv::Mat ov = random_image(40, 30, 3, 36);
  cv::Mat mask = cv::Mat::zeros(ov.rows, ov.cols, CV_8UC1);
  mask.row(0).setTo(255);  // only the outer frame, which does not count
  const std::string mask_path = dir.file("empty.png");
  write_png(mask, mask_path);
  Overlay o{ov, "", 50, 40, "normal", mask_path, -1};
  Result r = run_blend(Background::of(bg), {o}, 3);
  ASSERT_EQ(r.error, "") << r.error_debug;
  ASSERT_EQ(r.frames.size(), 3u);
  for (const cv::Mat& f : r.frames) EXPECT_EQ(compare(f, bg).max, 0);
  ASSERT_EQ(r.warnings.size(), 1u) << joined(r.warnings);
  EXPECT_NE(r.warnings[0].find("overlay_0"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("empty"), std::string::npos) << r.warnings[0];
}

// ---- GstController ----------------------------------------------------------------------------------------

TEST_F(PoissonBlend, ControllerMovesTheOverlay) {
  const cv::Mat bg = random_image(200, 120, 3, 41);
  const cv::Mat ov = random_image(50, 40, 3, 42);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, true);
  Overlay o{bgra_with_alpha(ov, mask), "", 0, 60, "normal", "", -1};
  GstControlSource* cs = gst_interpolation_control_source_new();
  g_object_set(cs, "mode", GST_INTERPOLATION_MODE_NONE, nullptr);
  // Frame 0 at xpos 50, frames 1 and 2 at xpos 140 (an absolute binding: values are pixels).
  gst_timed_value_control_source_set(GST_TIMED_VALUE_CONTROL_SOURCE(cs), 0, 50);
  gst_timed_value_control_source_set(GST_TIMED_VALUE_CONTROL_SOURCE(cs), GST_SECOND / 30, 140);
  Result r = run_blend(Background::of(bg), {o}, 3, [&](GstElement* b) {
    GstPad* pad = gst_element_get_static_pad(b, "overlay_0");
    gst_object_add_control_binding(GST_OBJECT(pad),
                                   gst_direct_control_binding_new_absolute(GST_OBJECT(pad), "xpos", cs));
    gst_object_unref(pad);
  });
  gst_object_unref(cs);
  ASSERT_EQ(r.error, "") << r.error_debug;
  ASSERT_EQ(r.frames.size(), 3u);
  const cv::Mat at50 = opencv_clone(ov, bg, mask, 50, 60, cv::NORMAL_CLONE);
  const cv::Mat at140 = opencv_clone(ov, bg, mask, 140, 60, cv::NORMAL_CLONE);
  EXPECT_CLOSE_TO_OPENCV(r.frames[0], at50, "frame 0 at xpos 50");
  EXPECT_CLOSE_TO_OPENCV(r.frames[1], at140, "frame 1 at xpos 140");
  EXPECT_CLOSE_TO_OPENCV(r.frames[2], at140, "frame 2 at xpos 140");
  EXPECT_GT(compare(r.frames[0], r.frames[1]).max, 10);
}

// ---- a still image through imagefreeze --------------------------------------------------------------------

TEST_F(PoissonBlend, StillImageThroughImagefreeze) {
  const cv::Mat bg = random_image(160, 120, 3, 51);
  const cv::Mat ov = random_image(48, 40, 3, 52);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, true);
  const std::string png = dir.file("still.png");
  write_png(bgra_with_alpha(ov, mask), png);
  // imagefreeze never ends: the element must end when the background does.
  Result r = run_blend(
      Background::of(bg), {}, 5,
      [](GstElement* b) {
        GstPad* pad = gst_element_get_static_pad(b, "overlay_0");
        ASSERT_NE(pad, nullptr);
        g_object_set(pad, "xpos", 70, "ypos", 55, "mode", 2 /* mixed */, nullptr);
        gst_object_unref(pad);
      },
      "filesrc location=\"" + png + "\" ! pngdec ! imagefreeze ! b.overlay_0");
  ASSERT_EQ(r.error, "") << r.error_debug;
  EXPECT_TRUE(r.eos);
  ASSERT_EQ(r.frames.size(), 5u);
  const cv::Mat ref = opencv_clone(ov, bg, mask, 70, 55, cv::MIXED_CLONE);
  for (size_t i = 0; i < r.frames.size(); i++) EXPECT_CLOSE_TO_OPENCV(r.frames[i], ref, "frame " << i);
}

// ---- NV12 / I420 backgrounds ----------------------------------------------------------------------------------

// The destination rectangle goes through RGBA and back: outside it the frame is untouched; inside,
// the picture is OpenCV's clone into the RGB version of the background, up to the YUV round trip.
TEST_F(PoissonBlend, YuvBackgroundsRoundTripOnlyTheDestinationRectangle) {
  const int W = 161, H = 121;
  const cv::Mat bg_bgr = random_image(W, H, 3, 61);
  const cv::Mat ov = random_image(50, 41, 3, 62);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, false);
  for (const char* format : {"NV12", "I420"}) {
    cc::PixelFormat pf;
    ASSERT_TRUE(cc::format_from_name(format, &pf));
    const cc::Colorimetry cm;  // BT.601 limited, GStreamer's default for these caps
    // BGR -> YUV with prism's converter (planes packed).
    std::vector<uint8_t> y((size_t)W * H), u((size_t)((W + 1) / 2) * ((H + 1) / 2) * 2), v(u.size() / 2);
    cc::Image src, dst;
    src.format = cc::PixelFormat::BGR;
    src.width = W;
    src.height = H;
    src.plane[0] = const_cast<uint8_t*>(bg_bgr.data);
    src.stride[0] = (int)bg_bgr.step[0];
    dst.format = pf;
    dst.width = W;
    dst.height = H;
    dst.plane[0] = y.data();
    dst.stride[0] = W;
    const int cw = (W + 1) / 2;
    dst.plane[1] = u.data();
    dst.stride[1] = std::string(format) == "NV12" ? 2 * cw : cw;
    dst.plane[2] = v.data();
    dst.stride[2] = cw;
    cc::convert_cpu(cc::make_plan(cc::PixelFormat::BGR, cm, W, H, pf, cm, W, H), src, dst);
    Background bg;
    bg.format = format;
    bg.width = W;
    bg.height = H;
    bg.planes = {y, u};
    bg.strides = {(size_t)W, (size_t)dst.stride[1]};
    if (std::string(format) == "I420") {
      bg.planes.push_back(v);
      bg.strides.push_back(cw);
    } else {
      bg.planes[1].resize((size_t)2 * cw * ((H + 1) / 2));
    }
    Overlay o{bgra_with_alpha(ov, mask), "", 80, 60, "normal", "", -1};
    Result r = run_blend(bg, {o});
    ASSERT_EQ(r.error, "") << format << ": " << r.error_debug;
    ASSERT_EQ(r.raw.size(), 1u);
    const std::vector<uint8_t>& out = r.raw[0];
    // Luma outside the rectangle is the background's, byte for byte.
    const pp::Box box = pp::mask_box(pp::MaskView{mask.data, mask.cols, mask.rows, (int64_t)mask.step[0], 1});
    const pp::Placement pl = pp::place(box, 80, 60, W, H);
    const int x0 = std::max(0, pl.dst.x - 1) & ~1, y0 = std::max(0, pl.dst.y - 1) & ~1;
    const int x1 = std::min(W, (pl.dst.x + pl.dst.width + 2) & ~1),
              y1 = std::min(H, (pl.dst.y + pl.dst.height + 2) & ~1);
    size_t outside_diff = 0, inside_changed = 0;
    for (int yy = 0; yy < H; yy++)
      for (int xx = 0; xx < W; xx++) {
        const bool inside = xx >= x0 && xx < x1 && yy >= y0 && yy < y1;
        const bool differs = out[(size_t)yy * W + xx] != y[(size_t)yy * W + xx];
        outside_diff += !inside && differs;
        inside_changed += inside && differs;
      }
    EXPECT_EQ(outside_diff, 0u) << format;
    EXPECT_GT(inside_changed, 100u) << format;
    // Back to BGR: close to OpenCV's clone into the background's RGB version.
    cc::Image yuv = dst;
    yuv.plane[0] = const_cast<uint8_t*>(out.data());
    yuv.plane[1] = const_cast<uint8_t*>(out.data()) + (size_t)W * H;
    yuv.plane[2] = yuv.plane[1] + (size_t)cw * ((H + 1) / 2);
    cv::Mat ours(H, W, CV_8UC3), bg_rt(H, W, CV_8UC3);
    cc::Image rgb;
    rgb.format = cc::PixelFormat::BGR;
    rgb.width = W;
    rgb.height = H;
    rgb.plane[0] = ours.data;
    rgb.stride[0] = (int)ours.step[0];
    const cc::Plan back = cc::make_plan(pf, cm, W, H, cc::PixelFormat::BGR, cm, W, H);
    cc::convert_cpu(back, yuv, rgb);
    rgb.plane[0] = bg_rt.data;
    cc::convert_cpu(back, dst, rgb);
    const cv::Mat ref = opencv_clone(ov, bg_rt, mask, 80, 60, cv::NORMAL_CLONE);
    const cv::Rect roi(pl.dst.x, pl.dst.y, pl.dst.width, pl.dst.height);
    cv::Mat diff;
    cv::absdiff(ours(roi), ref(roi), diff);
    const double mean = cv::mean(diff.reshape(1))[0];
    EXPECT_LT(mean, 3.0) << format << ": mean difference " << mean << " to OpenCV inside the box";
  }
}

// No overlay: the output is the background, with its region-of-interest metadata.
TEST_F(PoissonBlend, OutputIsTheBackgroundWithItsMetadata) {
  GstHarness* h = gst_harness_new_with_element(gst_element_factory_make("poissonblend", nullptr), "sink", "src");
  g_object_set(h->element, "device", 2 /* cpu */, nullptr);
  gst_harness_set_src_caps_str(h, caps_of("RGBA", 64, 48).c_str());
  const cv::Mat bg = random_image(64, 48, 4, 99);
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps_of("RGBA", 64, 48).c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  GstBuffer* in = buffer_from_planes(info, {bg.data}, {bg.step[0]}, 0);
  GstVideoRegionOfInterestMeta* roi = gst_buffer_add_video_region_of_interest_meta(in, "face", 3, 4, 20, 10);
  gst_video_region_of_interest_meta_add_param(roi,
                                              gst_structure_new("detection", "score", G_TYPE_DOUBLE, 0.75, nullptr));
  ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
  gst_harness_push_event(h, gst_event_new_eos());
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  GstVideoRegionOfInterestMeta* m = gst_buffer_get_video_region_of_interest_meta(out);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->x, 3u);
  EXPECT_EQ(m->w, 20u);
  EXPECT_EQ(g_quark_to_string(m->roi_type), std::string("face"));
  ASSERT_NE(gst_video_region_of_interest_meta_get_param(m, "detection"), nullptr);
  GstMapInfo map;
  ASSERT_TRUE(gst_buffer_map(out, &map, GST_MAP_READ));
  EXPECT_EQ(0, memcmp(map.data, bg.data, bg.total() * 4));
  gst_buffer_unmap(out, &map);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

// The background changes size mid-stream: the output follows (renegotiation, new per-caps plans).
TEST_F(PoissonBlend, BackgroundCapsChangeRenegotiates) {
  const cv::Mat small = random_image(80, 60, 3, 101), large = random_image(120, 90, 3, 102);
  const cv::Mat o = bgra_with_alpha(random_image(30, 24, 3, 103), ellipse_mask(30, 24, false));
  GstVideoInfo si, li, oi;
  auto info_of = [](GstVideoInfo* info, const std::string& caps) {
    GstCaps* c = gst_caps_from_string(caps.c_str());
    gst_video_info_from_caps(info, c);
    gst_caps_unref(c);
  };
  info_of(&si, caps_of("BGR", 80, 60));
  info_of(&li, caps_of("NV12", 120, 90));
  info_of(&oi, caps_of("BGRA", 30, 24));
  std::vector<uint8_t> y(120 * 90, 100), uv(120 * 45, 128);
  RunOptions options;
  options.before_play = [&](GstElement* p) {
    GstElement* bg = gst_bin_get_by_name(GST_BIN(p), "bg");
    GstElement* ov = gst_bin_get_by_name(GST_BIN(p), "ov");
    GstCaps* oc = gst_caps_from_string(caps_of("BGRA", 30, 24).c_str());
    g_object_set(ov, "caps", oc, nullptr);
    gst_caps_unref(oc);
    GstCaps* sc = gst_caps_from_string(caps_of("BGR", 80, 60).c_str());
    gst_app_src_set_caps(GST_APP_SRC(bg), sc);
    gst_caps_unref(sc);
    gst_object_unref(bg);
    gst_object_unref(ov);
  };
  options.after_play = [&](GstElement* p) {
    GstElement* bg = gst_bin_get_by_name(GST_BIN(p), "bg");
    GstElement* ov = gst_bin_get_by_name(GST_BIN(p), "ov");
    for (int i = 0; i < 4; i++)
      gst_app_src_push_buffer(GST_APP_SRC(ov), buffer_from_planes(oi, {o.data}, {o.step[0]}, i));
    gst_app_src_end_of_stream(GST_APP_SRC(ov));
    for (int i = 0; i < 2; i++)
      gst_app_src_push_buffer(GST_APP_SRC(bg), buffer_from_planes(si, {small.data}, {small.step[0]}, i));
    // then NV12 at another size
    GstCaps* lc = gst_caps_from_string(caps_of("NV12", 120, 90).c_str());
    gst_app_src_set_caps(GST_APP_SRC(bg), lc);
    gst_caps_unref(lc);
    for (int i = 2; i < 4; i++)
      gst_app_src_push_buffer(GST_APP_SRC(bg), buffer_from_planes(li, {y.data(), uv.data()}, {120, 120}, i));
    gst_app_src_end_of_stream(GST_APP_SRC(bg));
    gst_object_unref(bg);
    gst_object_unref(ov);
  };
  const RunResult r = run_launch(
      "poissonblend name=b device=cpu overlay_0::xpos=40 overlay_0::ypos=30 ! appsink name=out sync=false "
      "appsrc name=bg format=time ! b.sink appsrc name=ov format=time ! b.overlay_0",
      options);
  EXPECT_EQ(r.error, "");
  std::vector<std::pair<int, int>> sizes;
  std::vector<std::string> formats;
  for (const Frame& f : r.frames) {
    sizes.push_back({f.width, f.height});
    formats.push_back(f.format);
  }
  ASSERT_EQ(sizes.size(), 4u);
  EXPECT_EQ(sizes[0], std::make_pair(80, 60));
  EXPECT_EQ(formats[1], "BGR");
  EXPECT_EQ(sizes[2], std::make_pair(120, 90));
  EXPECT_EQ(formats[3], "NV12");
}

// The background changes size on every frame (320x240 -> 321x241 -> 320x240 ...), as compositor
// takes it: each output frame has its background's size, and the overlay is cloned into each.
TEST_F(PoissonBlend, BackgroundSizeChangingEveryFrameRenegotiatesEachTime) {
  const int sizes[][2] = {{320, 240}, {321, 241}, {320, 240}, {321, 241}, {320, 240}};
  const int n = 5;
  const cv::Mat o = bgra_with_alpha(random_image(30, 24, 3, 111), ellipse_mask(30, 24, false));
  std::vector<cv::Mat> bgs;
  for (int i = 0; i < n; i++) bgs.push_back(random_image(sizes[i][0], sizes[i][1], 4, 112 + i));
  GstVideoInfo oi;
  GstCaps* oc = gst_caps_from_string(caps_of("BGRA", 30, 24).c_str());
  gst_video_info_from_caps(&oi, oc);
  RunOptions options;
  options.before_play = [&](GstElement* p) {
    GstElement* ov = gst_bin_get_by_name(GST_BIN(p), "ov");
    g_object_set(ov, "caps", oc, nullptr);
    gst_object_unref(ov);
  };
  options.after_play = [&](GstElement* p) {
    GstElement* bg = gst_bin_get_by_name(GST_BIN(p), "bg");
    GstElement* ov = gst_bin_get_by_name(GST_BIN(p), "ov");
    for (int i = 0; i < n; i++)
      gst_app_src_push_buffer(GST_APP_SRC(ov), buffer_from_planes(oi, {o.data}, {o.step[0]}, i));
    gst_app_src_end_of_stream(GST_APP_SRC(ov));
    for (int i = 0; i < n; i++) {
      GstCaps* c = gst_caps_from_string(caps_of("BGRA", sizes[i][0], sizes[i][1]).c_str());
      GstVideoInfo info;
      gst_video_info_from_caps(&info, c);
      gst_app_src_set_caps(GST_APP_SRC(bg), c);
      gst_caps_unref(c);
      gst_app_src_push_buffer(GST_APP_SRC(bg), buffer_from_planes(info, {bgs[i].data}, {bgs[i].step[0]}, i));
    }
    gst_app_src_end_of_stream(GST_APP_SRC(bg));
    gst_object_unref(bg);
    gst_object_unref(ov);
  };
  prism::test::GlibLogRecorder log;
  const RunResult r = run_launch(
      "poissonblend name=b device=cpu overlay_0::xpos=100 overlay_0::ypos=80 ! appsink name=out sync=false "
      "appsrc name=bg format=time ! b.sink appsrc name=ov format=time ! b.overlay_0",
      options);
  gst_caps_unref(oc);
  EXPECT_EQ(r.error, "") << r.error_debug;
  EXPECT_TRUE(log.messages().empty()) << log.joined();
  ASSERT_EQ(r.frames.size(), (size_t)n);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(r.frames[i].width, sizes[i][0]) << "frame " << i;
    EXPECT_EQ(r.frames[i].height, sizes[i][1]) << "frame " << i;
    // Outside the overlay's box the output is the background of the same frame.
    ASSERT_EQ(r.frames[i].bytes.size(), bgs[i].total() * 4) << "frame " << i;
    EXPECT_EQ(0, memcmp(r.frames[i].bytes.data(), bgs[i].data, bgs[i].cols * 4 * 10)) << "frame " << i;
    EXPECT_NE(0, memcmp(r.frames[i].bytes.data(), bgs[i].data, bgs[i].total() * 4)) << "frame " << i << ": no clone";
  }
}

// A background at framerate 0/1 (a still from pngdec without imagefreeze, videotestsrc at 0/1,
// with or without overlays): one output frame per background frame, as compositor gives, and no
// GStreamer-CRITICAL (GstVideoAggregator computed its latency as GST_SECOND / 0).
TEST_F(PoissonBlend, BackgroundAtFramerateZeroGivesOneFramePerBuffer) {
  const std::string bg_png = dir.file("bg.png"), ov_png = dir.file("ov.png");
  write_png(random_image(64, 48, 3, 121), bg_png);
  write_png(bgra_with_alpha(random_image(20, 16, 3, 122), ellipse_mask(20, 16, false)), ov_png);
  {
    // videotestsrc makes one frame at 0/1
    prism::test::GlibLogRecorder log;
    const RunResult r = run_launch(
        "videotestsrc num-buffers=3 ! video/x-raw,format=RGBA,width=64,height=48,framerate=0/1 ! "
        "poissonblend device=cpu ! appsink name=out sync=false");
    EXPECT_EQ(r.error, "") << r.error_debug;
    EXPECT_TRUE(log.messages().empty()) << log.joined();
    EXPECT_EQ(r.frames.size(), 1u);
  }
  {
    // three stills without duration, and a QoS event from downstream while they flow
    const std::string caps = "video/x-raw,format=RGBA,width=64,height=48,framerate=0/1";
    const cv::Mat bg = random_image(64, 48, 4, 123);
    GstVideoInfo info;
    GstCaps* c = gst_caps_from_string(caps.c_str());
    gst_video_info_from_caps(&info, c);
    gst_caps_unref(c);
    GstElement* blend = nullptr;
    RunOptions options;
    options.before_play = [&](GstElement* p) { blend = gst_bin_get_by_name(GST_BIN(p), "b"); };
    options.after_play = [&](GstElement* p) {
      GstElement* src = gst_bin_get_by_name(GST_BIN(p), "bg");
      for (int i = 0; i < 3; i++) {
        GstBuffer* buf = buffer_from_planes(info, {bg.data}, {bg.step[0]}, i);
        GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
        gst_app_src_push_buffer(GST_APP_SRC(src), buf);
      }
      gst_app_src_end_of_stream(GST_APP_SRC(src));
      gst_object_unref(src);
    };
    options.on_sample = [&](GstSample*) {
      GstPad* pad = gst_element_get_static_pad(blend, "src");
      gst_pad_send_event(pad, gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 0.5, GST_SECOND, 0));
      gst_object_unref(pad);
    };
    prism::test::GlibLogRecorder log;
    const RunResult r = run_launch("appsrc name=bg format=time caps=\"" + caps +
                                       "\" ! poissonblend name=b device=cpu ! appsink name=out sync=false",
                                   options);
    if (blend) gst_object_unref(blend);
    EXPECT_EQ(r.error, "") << r.error_debug;
    EXPECT_TRUE(log.messages().empty()) << log.joined();
    EXPECT_EQ(r.frames.size(), 3u);
  }
  {
    prism::test::GlibLogRecorder log;
    const RunResult r = run_launch(
        "poissonblend name=b device=cpu overlay_0::xpos=32 overlay_0::ypos=24 ! "
        "appsink name=out sync=false "
        "filesrc location=" +
        bg_png +
        " ! pngdec ! videoconvert ! video/x-raw,format=BGR ! "
        "b.sink filesrc location=" +
        ov_png +
        " ! pngdec ! videoconvert ! "
        "video/x-raw,format=BGRA ! imagefreeze num-buffers=5 ! b.overlay_0");
    EXPECT_EQ(r.error, "") << r.error_debug;
    EXPECT_TRUE(log.messages().empty()) << log.joined();
    ASSERT_EQ(r.frames.size(), 1u);
    EXPECT_EQ(r.frames[0].width, 64);
    EXPECT_EQ(r.frames[0].format, "BGR");
  }
}

// ---- bad input: clear errors, no crash, no hang -------------------------------------------------------------

TEST_F(PoissonBlend, MissingMaskFileIsAnErrorNamingPadAndFile) {
  const cv::Mat bg = random_image(64, 48, 3, 71), ov = random_image(20, 20, 3, 72);
  const std::string missing = dir.file("no-such-mask.png");
  Result r = run_blend(Background::of(bg), {Overlay{ov, "", 30, 20, "", missing, -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error.find("overlay_0"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(missing), std::string::npos) << r.error;
}

TEST_F(PoissonBlend, CorruptMaskFileIsAnErrorNamingPadAndFile) {
  const cv::Mat bg = random_image(64, 48, 3, 73), ov = random_image(20, 20, 3, 74);
  const std::string corrupt = dir.file("corrupt.png");
  {
    std::ofstream f(corrupt, std::ios::binary);
    f << "\x89PNG\r\n\x1a\n" << std::string(100, 'x');  // a PNG signature, then garbage
  }
  Result r = run_blend(Background::of(bg), {Overlay{ov, "", 30, 20, "", corrupt, -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error.find("overlay_0"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(corrupt), std::string::npos) << r.error;
}

// A few hundred bytes declaring 100000x100000 (the loader is shared with prism texture and prism
// bow): refused from its header, before decoding, without a GStreamer-CRITICAL.
TEST_F(PoissonBlend, MaskDeclaringAHugeSizeIsAnErrorNamingPadAndFile) {
  const cv::Mat bg = random_image(64, 48, 3, 77), ov = random_image(20, 20, 3, 78);
  const std::string huge = dir.file("huge.png");
  prism::test::write_png_declaring(huge, 100000, 100000, 6);
  prism::test::GlibLogRecorder log;
  Result r = run_blend(Background::of(bg), {Overlay{ov, "", 30, 20, "", huge, -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error.find("overlay_0"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(huge), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("100000x100000"), std::string::npos) << r.error;
  EXPECT_TRUE(log.messages().empty()) << log.joined();
}

TEST_F(PoissonBlend, MaskOfTheWrongSizeIsAnErrorNamingPadAndSizes) {
  const cv::Mat bg = random_image(64, 48, 3, 75), ov = random_image(20, 16, 3, 76);
  const std::string path = dir.file("big.png");
  write_png(ellipse_mask(24, 18, false), path);
  Result r = run_blend(Background::of(bg), {Overlay{ov, "", 30, 20, "", path, -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error.find("overlay_0"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("24x18"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("20x16"), std::string::npos) << r.error;
}

TEST_F(PoissonBlend, OverlayWithoutAlphaNeedsAMask) {
  // RGBx has 4 bytes per pixel: its overlay is 4-channel (a 3-channel one was read past its end).
  const cv::Mat bg = random_image(64, 48, 3, 77), ov = random_image(20, 16, 3, 78), ov4 = random_image(20, 16, 4, 78);
  Result r =
      run_blend(Background::of(bg), {Overlay{ov, "", 30, 20, "", "", -1}, Overlay{ov4, "RGBx", 30, 20, "", "", -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error.find("overlay_0"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("mask-location"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("alpha"), std::string::npos) << r.error;
}

TEST_F(PoissonBlend, UnsupportedOverlayCapsFailWithoutHanging) {
  const cv::Mat bg = random_image(64, 48, 3, 79);
  cv::Mat grey = random_image(20, 16, 1, 80);
  Result r = run_blend(Background::of(bg), {Overlay{grey, "GRAY8", 30, 20, "", "", -1}});
  ASSERT_NE(r.error, "");
  EXPECT_NE(r.error_debug.find("not-negotiated"), std::string::npos) << r.error << " / " << r.error_debug;
}

// An unlinked background would leave the aggregator waiting forever (no preroll, no output): after
// background-timeout the element says which pad, whether an overlay has data, none is linked, or
// the pipeline is live.
TEST_F(PoissonBlend, UnlinkedBackgroundIsAnErrorNamingThePad) {
  const std::string overlay = "video/x-raw,format=BGRA,width=16,height=12 ! b.overlay_0";
  for (const std::string& tail : {"videotestsrc num-buffers=5 ! " + overlay, std::string(),
                                  "videotestsrc is-live=true num-buffers=100 ! " + overlay}) {
    SCOPED_TRACE(tail);
    prism::test::GlibLogRecorder log;
    RunOptions options;
    options.idle_timeout = 20 * GST_SECOND;
    const RunResult r = run_launch("poissonblend name=b device=cpu background-timeout=200 ! fakesink " + tail, options);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.error_source, "b");
    EXPECT_NE(r.error.find("pad 'sink' (the background) is not linked 200 ms after start"), std::string::npos)
        << r.error;
    EXPECT_TRUE(log.messages().empty()) << log.joined();
  }
}

// A background linked later, as a decodebin's pad-added handler links it: after the pipeline
// started, from another thread, a background branch is added, linked to `sink` and started. With
// the default background-timeout (30 s) it runs to EOS. With background-timeout=300 the check must
// find `sink` linked and let it go on; that case runs on a GstTestClock as the default system clock
// (the element's check waits on gst_system_clock_obtain()), so no real delay decides the order: the
// linker waits for the check to be armed 300 ms after the clock's start, links `sink`, then moves
// the clock to the check's time and fires it, and only then starts the background. The sources are
// not live and appsink does not sync, so nothing else waits on that clock.
TEST_F(PoissonBlend, BackgroundLinkedLaterStillRuns) {
  for (const bool test_clock : {false, true}) {
    SCOPED_TRACE(test_clock ? "background-timeout=300 on a test clock" : "default background-timeout");
    GstClock* clock = nullptr;
    if (test_clock) {
      clock = gst_test_clock_new();
      gst_system_clock_set_default(clock);
    }
    std::thread linker;
    RunOptions options;
    options.idle_timeout = 20 * GST_SECOND;
    options.after_play = [&](GstElement* p) {
      gst_object_ref(p);
      linker = std::thread([p, clock] {
        GstClockID check = nullptr;
        if (clock) {
          GList* ids = nullptr;
          if (gst_test_clock_timed_wait_for_multiple_pending_ids(GST_TEST_CLOCK(clock), 1, 10000, &ids)) {
            check = gst_clock_id_ref(ids->data);
          }
          g_list_free_full(ids, (GDestroyNotify)gst_clock_id_unref);
          EXPECT_NE(check, nullptr) << "no background check armed on the system clock";
          if (check) {
            EXPECT_EQ(gst_clock_id_get_time(check), 300 * GST_MSECOND);
          }
        } else {
          g_usleep(100 * 1000);
        }
        GError* err = nullptr;
        GstElement* bg = gst_parse_bin_from_description(
            "videotestsrc num-buffers=15 ! capsfilter caps=video/x-raw,format=BGR,width=64,height=48", TRUE, &err);
        ASSERT_NE(bg, nullptr) << err->message;
        GstElement* b = gst_bin_get_by_name(GST_BIN(p), "b");
        gst_bin_add(GST_BIN(p), bg);
        EXPECT_TRUE(gst_element_link_pads(bg, "src", b, "sink"));
        if (check) {
          // Past the timeout, with `sink` linked: the check fires here, synchronously, and must post nothing.
          gst_test_clock_set_time(GST_TEST_CLOCK(clock), gst_clock_id_get_time(check));
          GstClockID fired = gst_test_clock_process_next_clock_id(GST_TEST_CLOCK(clock));
          EXPECT_EQ(fired, check);
          if (fired) gst_clock_id_unref(fired);
          gst_clock_id_unref(check);
        }
        EXPECT_TRUE(gst_element_sync_state_with_parent(bg));
        gst_object_unref(b);
        gst_object_unref(p);
      });
    };
    prism::test::GlibLogRecorder log;
    const RunResult r =
        run_launch(std::string("poissonblend name=b device=cpu ") + (test_clock ? "background-timeout=300" : "") +
                       " overlay_0::xpos=32 overlay_0::ypos=24 ! appsink name=out sync=false "
                       "videotestsrc num-buffers=15 ! video/x-raw,format=BGRA,width=16,height=12 ! "
                       "b.overlay_0",
                   options);
    if (linker.joinable()) linker.join();
    if (clock) {
      gst_system_clock_set_default(nullptr);
      gst_object_unref(clock);
    }
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.error, "") << r.error_debug;
    EXPECT_TRUE(r.eos);
    EXPECT_GE(r.frames.size(), 3u);
    for (const auto& f : r.frames) EXPECT_EQ(f.width, 64);
    EXPECT_TRUE(log.messages().empty()) << log.joined();
  }
}

TEST_F(PoissonBlend, DeviceCudaWithoutGpuFailsClearly) {
  std::string why;
  if (prism::gpu::available(&why)) GTEST_SKIP() << "a GPU is present";
  const cv::Mat bg = random_image(64, 48, 3, 81);
  Chains cuda;
  cuda.element = "poissonblend device=cuda";
  Result r = run_blend(Background::of(bg), {}, 1, {}, "", cuda);
  EXPECT_NE(r.error.find("device=cuda"), std::string::npos) << r.error;
}

// device=auto on a machine without a GPU runs on the CPU, says so, and computes the same thing.
TEST_F(PoissonBlend, AutoFallsBackToTheCpu) {
  std::string why;
  if (prism::gpu::available(&why)) GTEST_SKIP() << "a GPU is present (test_poissonblend_gpu compares the paths)";
  const cv::Mat bg = random_image(90, 70, 3, 83), ov = random_image(30, 30, 3, 84);
  const cv::Mat mask = ellipse_mask(30, 30, false);
  Chains chains;
  chains.element = "poissonblend";
  Result r =
      run_blend(Background::of(bg), {Overlay{bgra_with_alpha(ov, mask), "", 45, 35, "", "", -1}}, 1, {}, "", chains);
  ASSERT_EQ(r.error, "") << r.error_debug;
  ASSERT_EQ(r.frames.size(), 1u);
  EXPECT_CLOSE_TO_OPENCV(r.frames[0], opencv_clone(ov, bg, mask, 45, 35, cv::NORMAL_CLONE), "auto");
}

// ---- gst-launch and YAML ---------------------------------------------------------------------------------------

// Pad properties through gst-launch syntax (GstChildProxy), with mask-location set at parse time.
TEST_F(PoissonBlend, LaunchLinePadProperties) {
  const cv::Mat ov = random_image(40, 30, 3, 91);
  const cv::Mat mask = ellipse_mask(40, 30, false);
  const std::string mask_path = dir.file("m.png"), ov_path = dir.file("ov.png");
  write_png(mask, mask_path);
  write_png(ov, ov_path);
  const std::string line =
      "poissonblend name=b device=cpu overlay_0::xpos=60 overlay_0::ypos=40 overlay_0::mode=mixed "
      "overlay_0::mask-location=\"" +
      mask_path +
      "\" ! fakesink "
      "videotestsrc num-buffers=3 ! video/x-raw,format=BGR,width=120,height=90 ! b.sink "
      "filesrc location=\"" +
      ov_path +
      "\" ! pngdec ! videoconvert ! video/x-raw,format=BGR ! "
      "imagefreeze ! b.overlay_0";
  RunOptions options;
  options.before_play = [&](GstElement* p) {
    GstElement* b = gst_bin_get_by_name(GST_BIN(p), "b");
    GstPad* pad = gst_element_get_static_pad(b, "overlay_0");
    ASSERT_NE(pad, nullptr);
    gint x = 0;
    gchar* loc = nullptr;
    g_object_get(pad, "xpos", &x, "mask-location", &loc, nullptr);
    EXPECT_EQ(x, 60);
    EXPECT_EQ(std::string(loc ? loc : ""), mask_path);
    g_free(loc);
    gst_object_unref(pad);
    gst_object_unref(b);
  };
  options.idle_timeout = 30 * GST_SECOND;
  const RunResult r = run_launch(line, options);
  EXPECT_FALSE(r.timed_out) << "no EOS within 30 s";
  EXPECT_TRUE(r.eos) << r.error;
  EXPECT_EQ(r.error, "");
}

TEST_F(PoissonBlend, LiveOverlayConfigRuns) {
  const std::string data = prism::test::data_dir();
  PRISM_NEED_FILE(data + "/video/vtest.mp4");
  PRISM_NEED_FILE(data + "/images/opencv-logo.png");
  const std::string exe = prism::test::prism_executable();
  if (exe.empty()) GTEST_SKIP() << "no prism binary (" << PRISM_EXE << " or on PATH)";
  const std::string config = prism::test::source_config("live-overlay.yaml");
  if (!fs::exists(config)) GTEST_SKIP() << "no " << config << " (set PRISM_SOURCE_DIR)";
  for (const char* f : {"openh264dec", "qtdemux", "h264parse", "pngenc", "imagefreeze"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) GTEST_SKIP() << f << " is not installed";
    gst_object_unref(factory);
  }
  const std::string out = (dir.path() / "frames").string();
  const std::string cmd = "'" + exe + "' run '" + config + "' --set frames=5 --set video='" + data +
                          "/video/vtest.mp4' --set logo='" + data + "/images/opencv-logo.png' --set out='" + out +
                          "/frame-%04d.png'";
  std::string output;
  EXPECT_EQ(prism::test::run_command(cmd, output), 0) << cmd << "\n" << output;
  size_t pngs = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) pngs += e.path().extension() == ".png";
  // frames=N gives N frames (identity's eos-after=N passes N - 1; the config asks N + 1).
  EXPECT_EQ(pngs, 5u) << output;
  prism::ImageFile first;
  GError* err = nullptr;
  ASSERT_TRUE(prism::image_file_load((out + "/frame-0000.png").c_str(), GST_VIDEO_FORMAT_RGBA, &first, &err))
      << err->message;
  EXPECT_EQ(first.width, 768);
  EXPECT_EQ(first.height, 576);
}
