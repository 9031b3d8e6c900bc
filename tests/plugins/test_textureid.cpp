// textureid element tests on the CPU: a gallery of real photos (box, graf1, baboon, butterfly from
// ../shared/data/images) is enrolled here with the kernels' Gallery API; frames of box_in_scene.png
// (the box among other objects) must be identified as "box" in every input format, with the ROI
// meta and the "prism-textureid" message; verify mode accepts the right claim and rejects a wrong
// one; interval and min-sharpness decide which frames are identified; bad settings fail at the state
// change with the property (and the path) named; a parse-launched pipeline and configs/texture-id.yaml
// run. Images are read with the plugin's own loader (no OpenCV imgcodecs in this binary).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gst/prism/gstprismimagefile.h"
#include "prism_run_util.h"
#include "prism_test.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/index.h"

namespace fs = std::filesystem;
namespace texture = prism::texture;

namespace {

const char* const kEnrolled[] = {"box.png", "graf1.png", "baboon.jpg", "butterfly.jpg"};
const char* const kScene = "box_in_scene.png";  // 512x384, shows box.png

std::string image_path(const std::string& name) { return prism::test::data_dir() + "/images/" + name; }

// Skips (or fails under PRISM_REQUIRE_DATA=1) when a photo is missing.
#define NEED_IMAGES()                                                   \
  do {                                                                  \
    for (const char* n_ : kEnrolled) PRISM_NEED_FILE(image_path(n_));   \
    PRISM_NEED_FILE(image_path(kScene));                                \
    ASSERT_FALSE(gallery_dir().empty()) << "the gallery was not built"; \
  } while (0)

prism::ImageFile load(const std::string& name, GstVideoFormat format) {
  prism::ImageFile im;
  GError* err = nullptr;
  const std::string path = image_path(name);
  if (!prism::image_file_load(path.c_str(), format, &im, &err)) {
    ADD_FAILURE() << (err ? err->message : path);
    g_clear_error(&err);
  }
  return im;
}

// The test gallery, enrolled once per run in a temporary folder.
prism::test::TempDir* g_dir = nullptr;
std::string g_gallery;
const std::string& gallery_dir() { return g_gallery; }

void build_gallery() {
  for (const char* n : kEnrolled)
    if (!std::ifstream(image_path(n)).good()) return;
  g_dir = new prism::test::TempDir;
  const std::string dir = g_dir->file("gallery");
  texture::Gallery g = texture::Gallery::open(dir, /*create=*/true);
  for (const char* n : kEnrolled) {
    prism::ImageFile im;
    GError* err = nullptr;
    ASSERT_TRUE(prism::image_file_load_grey(image_path(n).c_str(), &im, &err)) << err->message;
    texture::GalleryEntry e;
    e.id = fs::path(n).stem().string();
    e.source = image_path(n);
    e.features = texture::extract_features(cv::Mat(im.height, im.width, CV_8UC1, im.pixels.data()));
    g.add(std::move(e));
  }
  g_gallery = dir;
}

// A frame in `info`'s layout from a packed single-plane image.
GstBuffer* make_buffer(const prism::ImageFile& im, const GstVideoInfo& info, guint64 index) {
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  EXPECT_TRUE(gst_video_frame_map(&f, &info, buf, GST_MAP_WRITE));
  const size_t row = size_t(im.width) * im.channels;
  for (int y = 0; y < im.height; ++y)
    std::memcpy((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, 0) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0),
                im.pixels.data() + y * row, row);
  gst_video_frame_unmap(&f);
  GST_BUFFER_PTS(buf) = index * GST_SECOND / 30;
  GST_BUFFER_DURATION(buf) = GST_SECOND / 30;
  return buf;
}

struct Roi {
  std::string type;
  int x = 0, y = 0, w = 0, h = 0;
  GstStructure* param = nullptr;  // "textureid", owned
};

struct Outcome {
  std::vector<GstStructure*> messages;   // "prism-textureid", in order, owned
  std::vector<std::vector<Roi>> rois;    // per output buffer
  std::string error;
  bool pixels_unchanged = true;          // every output buffer's bytes equal its input's
  bool memory_shared = true;             // ... and are the very same memory (no pixel copy)
  ~Outcome() {
    for (GstStructure* s : messages) gst_structure_free(s);
    for (auto& v : rois)
      for (Roi& r : v)
        if (r.param) gst_structure_free(r.param);
  }
};

void drain(GstBus* bus, Outcome& o) {
  while (GstMessage* m = gst_bus_pop(bus)) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR && o.error.empty()) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      o.error = e->message;
      g_clear_error(&e);
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT &&
               gst_structure_has_name(gst_message_get_structure(m), "prism-textureid")) {
      o.messages.push_back(gst_structure_copy(gst_message_get_structure(m)));
    }
    gst_message_unref(m);
  }
}

std::vector<Roi> rois_of(GstBuffer* b) {
  std::vector<Roi> out;
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta_filtered(b, &state, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)) {
    auto* roi = reinterpret_cast<GstVideoRegionOfInterestMeta*>(m);
    Roi r{g_quark_to_string(roi->roi_type), (int)roi->x, (int)roi->y, (int)roi->w, (int)roi->h, nullptr};
    if (GstStructure* p = gst_video_region_of_interest_meta_get_param(roi, "textureid")) r.param = gst_structure_copy(p);
    out.push_back(r);
  }
  return out;
}

// Pushes `frames` through `description` (a bin description ending in textureid) with input caps
// `caps`; `out_caps` are the harness sink's (empty: the same as `caps`).
void run_harness(Outcome& o, const std::string& description, const std::string& caps,
                 const std::vector<const prism::ImageFile*>& frames, const std::string& out_caps = "") {
  GstHarness* h = gst_harness_new_parse(description.c_str());
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_caps_str(h, caps.c_str(), (out_caps.empty() ? caps : out_caps).c_str());
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps.c_str());
  EXPECT_TRUE(gst_video_info_from_caps(&info, c));
  gst_caps_unref(c);
  const bool same_caps = out_caps.empty();
  for (size_t i = 0; i < frames.size(); ++i) {
    GstBuffer* in = make_buffer(*frames[i], info, i);
    gst_buffer_ref(in);  // kept to compare: the element sees a shared (not writable) buffer
    const GstFlowReturn ret = gst_harness_push(h, in);
    drain(bus, o);
    if (ret != GST_FLOW_OK) {
      if (o.error.empty()) o.error = std::string("push: ") + gst_flow_get_name(ret);
      gst_buffer_unref(in);
      break;
    }
    GstBuffer* out = gst_harness_pull(h);
    o.rois.push_back(rois_of(out));
    if (same_caps) {
      GstMapInfo a, b;
      gst_buffer_map(in, &a, GST_MAP_READ);
      gst_buffer_map(out, &b, GST_MAP_READ);
      o.pixels_unchanged &= a.size == b.size && std::memcmp(a.data, b.data, a.size) == 0;
      o.memory_shared &= a.data == b.data;
      gst_buffer_unmap(in, &a);
      gst_buffer_unmap(out, &b);
    }
    gst_buffer_unref(in);
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
  drain(bus, o);
  gst_object_unref(bus);
}

// Sets `element` (made from `description`) to PAUSED: FALSE and the error's text when it fails.
bool starts(const std::string& description, std::string& error) {
  GError* err = nullptr;
  GstElement* e = gst_parse_bin_from_description(description.c_str(), FALSE, &err);
  if (!e) {
    error = err ? err->message : "parse failed";
    g_clear_error(&err);
    return false;
  }
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(e, bus);
  const bool ok = gst_element_set_state(e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE;
  Outcome o;
  drain(bus, o);
  error = o.error;
  gst_element_set_state(e, GST_STATE_NULL);
  gst_element_set_bus(e, nullptr);
  gst_object_unref(bus);
  gst_object_unref(e);
  return ok;
}

std::string caps_of(const char* format, const prism::ImageFile& im) {
  return std::string("video/x-raw,format=") + format + ",width=" + std::to_string(im.width) +
         ",height=" + std::to_string(im.height) + ",framerate=30/1";
}

std::string str(const GstStructure* s, const char* field) {
  const char* v = gst_structure_get_string(s, field);
  return v ? v : "<none>";
}

int integer(const GstStructure* s, const char* field) {
  int v = -1;
  EXPECT_TRUE(gst_structure_get_int(s, field, &v)) << field;
  return v;
}

double real(const GstStructure* s, const char* field) {
  double v = -1;
  EXPECT_TRUE(gst_structure_get_double(s, field, &v)) << field << " in " << gst_structure_to_string(s);
  return v;
}
bool boolean(const GstStructure* s, const char* field) {
  gboolean v = FALSE;
  EXPECT_TRUE(gst_structure_get_boolean(s, field, &v)) << field;
  return v;
}

guint64 frame_of(const GstStructure* s) {
  guint64 v = G_MAXUINT64;
  EXPECT_TRUE(gst_structure_get_uint64(s, "frame", &v));
  return v;
}

// The message and the meta of a frame identified as `id`.
void expect_identified(const Outcome& o, size_t message, size_t buffer, const std::string& id, const char* mode,
                       int width, int height) {
  ASSERT_GT(o.messages.size(), message);
  const GstStructure* m = o.messages[message];
  EXPECT_TRUE(boolean(m, "identified")) << gst_structure_to_string(m);
  EXPECT_EQ(str(m, "id"), id);
  EXPECT_EQ(str(m, "mode"), mode);
  const int inliers = integer(m, "inliers");
  EXPECT_GE(inliers, texture::SearchParams{}.min_inliers);
  EXPECT_GE(integer(m, "matches"), inliers);
  const double score = real(m, "score");  // the significance the decision is made on
  EXPECT_GE(score, texture::SearchParams{}.min_significance);
  const double chance = texture::chance_significance(inliers, integer(m, "matches"));
  if (std::string(mode) == "verify") {
    EXPECT_DOUBLE_EQ(score, chance);
  } else {  // less log10 of the candidates verified
    EXPECT_LE(score, chance);
    EXPECT_GE(score, chance - std::log10(double(texture::SearchParams{}.shortlist)) - 1e-9);
  }
  double latency = 0;
  EXPECT_TRUE(gst_structure_get_double(m, "latency-ms", &latency));
  EXPECT_GT(latency, 0.0);
  guint64 pts = 0;
  EXPECT_TRUE(gst_structure_get_uint64(m, "timestamp", &pts));
  ASSERT_GT(o.rois.size(), buffer);
  ASSERT_EQ(o.rois[buffer].size(), 1u);
  const Roi& r = o.rois[buffer][0];
  EXPECT_EQ(r.type, "texture");
  // The inliers' box lies in the frame and is a real part of it (the box is ~1/4 of the scene).
  EXPECT_GE(r.x, 0);
  EXPECT_GE(r.y, 0);
  EXPECT_LE(r.x + r.w, width);
  EXPECT_LE(r.y + r.h, height);
  EXPECT_GT(r.w, 40);
  EXPECT_GT(r.h, 40);
  ASSERT_NE(r.param, nullptr) << "no 'textureid' param";
  EXPECT_EQ(str(r.param, "id"), id);
  EXPECT_TRUE(boolean(r.param, "identified"));
  EXPECT_EQ(integer(r.param, "inliers"), inliers);
  EXPECT_EQ(real(r.param, "score"), score);
  EXPECT_EQ(integer(r.param, "matches"), integer(m, "matches"));
  EXPECT_TRUE(gst_structure_has_field(r.param, "latency-ms"));
}

class TextureId : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gst_init(nullptr, nullptr);
    build_gallery();
  }
  static void TearDownTestSuite() {
    delete g_dir;
    g_dir = nullptr;
    g_gallery.clear();
  }
  std::string element(const std::string& props = "") const {
    return "textureid gallery=\"" + gallery_dir() + "\" device=cpu " + props;
  }
  prism::test::TempDir dir;
};

}  // namespace

// ---- registration -----------------------------------------------------------------------------

TEST_F(TextureId, IsRegisteredWithDocumentedProperties) {
  GstElement* e = gst_element_factory_make("textureid", nullptr);
  ASSERT_NE(e, nullptr) << "textureid not found; GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  for (const char* name :
       {"gallery", "mode", "claimed-id", "interval", "min-sharpness", "min-inliers", "min-significance", "shortlist",
        "device"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 30u) << name;
  }
  guint interval = 0;
  gint min_inliers = 0, shortlist = 0;
  g_object_get(e, "interval", &interval, "min-inliers", &min_inliers, "shortlist", &shortlist, nullptr);
  EXPECT_EQ(interval, 10u);
  EXPECT_EQ(min_inliers, texture::SearchParams{}.min_inliers);
  double min_significance = 0;
  g_object_get(e, "min-significance", &min_significance, nullptr);
  EXPECT_EQ(min_significance, texture::SearchParams{}.min_significance);
  EXPECT_EQ(shortlist, texture::SearchParams{}.shortlist);
  gst_util_set_object_arg(G_OBJECT(e), "mode", "verify");
  GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), "mode");
  GValue ev = G_VALUE_INIT;
  g_value_init(&ev, ps->value_type);
  g_object_get_property(G_OBJECT(e), "mode", &ev);
  GEnumClass* modes = G_ENUM_CLASS(g_type_class_ref(ps->value_type));
  EXPECT_STREQ(g_enum_get_value(modes, g_value_get_enum(&ev))->value_nick, "verify");
  g_type_class_unref(modes);
  g_value_unset(&ev);
  gst_object_unref(e);
}

// ---- search ----------------------------------------------------------------------------------

struct FormatCase {
  const char* format;      // textureid's input
  GstVideoFormat load_as;  // the photo as decoded
  bool via_videoconvert;   // load_as -> format through videoconvert in the harness
};

class TextureIdFormats : public TextureId, public ::testing::WithParamInterface<FormatCase> {};

TEST_P(TextureIdFormats, SearchIdentifiesTheBoxInTheScene) {
  NEED_IMAGES();
  const FormatCase& c = GetParam();
  const prism::ImageFile scene = load(kScene, c.load_as);
  ASSERT_GT(scene.width, 0);
  const char* load_name = gst_video_format_to_string(c.load_as);
  Outcome o;
  if (c.via_videoconvert) {
    run_harness(o, std::string("videoconvert ! video/x-raw,format=") + c.format + " ! " + element("interval=1"),
                caps_of(load_name, scene), {&scene}, caps_of(c.format, scene));
  } else {
    run_harness(o, element("interval=1"), caps_of(c.format, scene), {&scene});
    EXPECT_TRUE(o.pixels_unchanged);
    EXPECT_TRUE(o.memory_shared) << "the frame's pixels were copied";
  }
  ASSERT_EQ(o.error, "");
  ASSERT_EQ(o.messages.size(), 1u);
  EXPECT_EQ(frame_of(o.messages[0]), 0u);
  expect_identified(o, 0, 0, "box", "search", scene.width, scene.height);
}

INSTANTIATE_TEST_SUITE_P(, TextureIdFormats,
                         ::testing::Values(FormatCase{"GRAY8", GST_VIDEO_FORMAT_GRAY8, false},
                                           FormatCase{"RGBA", GST_VIDEO_FORMAT_RGBA, false},
                                           FormatCase{"BGRA", GST_VIDEO_FORMAT_BGRA, false},
                                           FormatCase{"RGB", GST_VIDEO_FORMAT_RGB, false},
                                           FormatCase{"BGR", GST_VIDEO_FORMAT_BGR, false},
                                           FormatCase{"BGRx", GST_VIDEO_FORMAT_BGRA, true},
                                           FormatCase{"RGBx", GST_VIDEO_FORMAT_RGBA, true},
                                           FormatCase{"NV12", GST_VIDEO_FORMAT_RGBA, true},
                                           FormatCase{"I420", GST_VIDEO_FORMAT_RGBA, true}),
                         [](const auto& info) { return std::string(info.param.format); });

TEST_F(TextureId, AnUnenrolledTextureIsNotIdentifiedAndGetsNoMeta) {
  NEED_IMAGES();
  PRISM_NEED_FILE(image_path("fruits.jpg"));
  const prism::ImageFile fruits = load("fruits.jpg", GST_VIDEO_FORMAT_GRAY8);
  Outcome o;
  run_harness(o, element("interval=1"), caps_of("GRAY8", fruits), {&fruits});
  ASSERT_EQ(o.error, "");
  ASSERT_EQ(o.messages.size(), 1u);
  EXPECT_FALSE(boolean(o.messages[0], "identified")) << gst_structure_to_string(o.messages[0]);
  EXPECT_LT(real(o.messages[0], "score"), texture::SearchParams{}.min_significance);
  ASSERT_EQ(o.rois.size(), 1u);
  EXPECT_TRUE(o.rois[0].empty());
}

// ---- verify ----------------------------------------------------------------------------------

TEST_F(TextureId, VerifyAcceptsTheRightClaimAndRejectsAWrongOne) {
  NEED_IMAGES();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  {
    Outcome o;
    run_harness(o, element("mode=verify claimed-id=box"), caps_of("GRAY8", scene), {&scene});
    ASSERT_EQ(o.error, "");
    ASSERT_EQ(o.messages.size(), 1u);
    expect_identified(o, 0, 0, "box", "verify", scene.width, scene.height);
  }
  {
    Outcome o;
    run_harness(o, element("mode=verify claimed-id=baboon"), caps_of("GRAY8", scene), {&scene});
    ASSERT_EQ(o.error, "");
    ASSERT_EQ(o.messages.size(), 1u);
    const GstStructure* m = o.messages[0];
    EXPECT_FALSE(boolean(m, "identified")) << gst_structure_to_string(m);
    EXPECT_EQ(str(m, "id"), "baboon");
    EXPECT_EQ(str(m, "mode"), "verify");
    EXPECT_LT(real(m, "score"), texture::SearchParams{}.min_significance);
    ASSERT_EQ(o.rois.size(), 1u);
    EXPECT_TRUE(o.rois[0].empty()) << "a rejected claim got meta";
  }
  {  // min-inliers above what the right claim reaches: rejected too
    Outcome o;
    run_harness(o, element("mode=verify claimed-id=box min-inliers=100000"), caps_of("GRAY8", scene), {&scene});
    ASSERT_EQ(o.messages.size(), 1u);
    EXPECT_FALSE(boolean(o.messages[0], "identified"));
    EXPECT_EQ(str(o.messages[0], "id"), "box");
  }
  {  // and so is min-significance above its significance
    Outcome o;
    run_harness(o, element("mode=verify claimed-id=box min-significance=999"), caps_of("GRAY8", scene), {&scene});
    ASSERT_EQ(o.messages.size(), 1u);
    EXPECT_FALSE(boolean(o.messages[0], "identified"));
    EXPECT_GT(integer(o.messages[0], "inliers"), 20);
  }
}

// ---- which frames ----------------------------------------------------------------------------

TEST_F(TextureId, IntervalThreeIdentifiesFramesZeroThreeAndSix) {
  NEED_IMAGES();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  Outcome o;
  run_harness(o, element("interval=3"), caps_of("GRAY8", scene), std::vector<const prism::ImageFile*>(7, &scene));
  ASSERT_EQ(o.error, "");
  ASSERT_EQ(o.messages.size(), 3u);
  ASSERT_EQ(o.rois.size(), 7u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(frame_of(o.messages[i]), 3 * i);
    guint64 pts = 0;
    gst_structure_get_uint64(o.messages[i], "timestamp", &pts);
    EXPECT_EQ(pts, 3 * i * GST_SECOND / 30);
    expect_identified(o, i, 3 * i, "box", "search", scene.width, scene.height);
  }
  for (size_t f : {1, 2, 4, 5}) EXPECT_TRUE(o.rois[f].empty()) << "frame " << f << " has meta";
}

TEST_F(TextureId, MinSharpnessSkipsBlurredFramesAndTriesTheNext) {
  NEED_IMAGES();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  prism::ImageFile blurred = scene;
  cv::Mat b(blurred.height, blurred.width, CV_8UC1, blurred.pixels.data());
  cv::GaussianBlur(cv::Mat(scene.height, scene.width, CV_8UC1, (void*)scene.pixels.data()), b, cv::Size(0, 0), 6);
  const double sharp = texture::sharpness(cv::Mat(scene.height, scene.width, CV_8UC1, (void*)scene.pixels.data()));
  const double blur = texture::sharpness(b);
  ASSERT_LT(blur * 10, sharp);
  const std::string threshold = std::to_string(std::sqrt(blur * sharp));
  {  // far too high: nothing is identified
    Outcome o;
    run_harness(o, element("interval=1 min-sharpness=1e12"), caps_of("GRAY8", scene), {&scene, &scene, &scene});
    ASSERT_EQ(o.error, "");
    EXPECT_TRUE(o.messages.empty());
    ASSERT_EQ(o.rois.size(), 3u);
    for (const auto& r : o.rois) EXPECT_TRUE(r.empty());
  }
  {  // interval 10: frame 0 is due but blurred, so is 1; 2 is sharp and identified; 3 is not due
    Outcome o;
    run_harness(o, element("interval=10 min-sharpness=" + threshold), caps_of("GRAY8", scene),
                {&blurred, &blurred, &scene, &scene});
    ASSERT_EQ(o.error, "");
    ASSERT_EQ(o.messages.size(), 1u);
    EXPECT_EQ(frame_of(o.messages[0]), 2u);
    double s = 0;
    EXPECT_TRUE(gst_structure_get_double(o.messages[0], "sharpness", &s));
    EXPECT_NEAR(s, sharp, sharp * 1e-6);
    expect_identified(o, 0, 2, "box", "search", scene.width, scene.height);
    ASSERT_EQ(o.rois.size(), 4u);
    EXPECT_TRUE(o.rois[0].empty());
    EXPECT_TRUE(o.rois[3].empty());
  }
  {  // interval 0: every sharp frame
    Outcome o;
    run_harness(o, element("interval=0 min-sharpness=" + threshold), caps_of("GRAY8", scene),
                {&scene, &blurred, &scene});
    ASSERT_EQ(o.messages.size(), 2u);
    EXPECT_EQ(frame_of(o.messages[0]), 0u);
    EXPECT_EQ(frame_of(o.messages[1]), 2u);
  }
}

// ---- settings that fail at the state change ------------------------------------------------

TEST_F(TextureId, AMissingGalleryFailsNamingThePath) {
  const std::string missing = dir.file("no-such-gallery");
  std::string error;
  EXPECT_FALSE(starts("textureid gallery=\"" + missing + "\"", error));
  EXPECT_NE(error.find("gallery"), std::string::npos) << error;
  EXPECT_NE(error.find(missing), std::string::npos) << error;
  EXPECT_FALSE(starts("textureid", error));
  EXPECT_NE(error.find("'gallery' is not set"), std::string::npos) << error;
  // A folder that is not a gallery: the GalleryError's text
  fs::create_directories(dir.file("plain"));
  dir.write("plain/x.txt", "x");
  EXPECT_FALSE(starts("textureid gallery=\"" + dir.file("plain") + "\"", error));
  EXPECT_NE(error.find(dir.file("plain")), std::string::npos) << error;
  EXPECT_NE(error.find("not a Prism texture gallery"), std::string::npos) << error;
}

// The CUDA plumbing of every Prism element, from GstPrismCudaFilter: `device` with the shared enum
// and `cuda-device-id`.
TEST_F(TextureId, HasTheDevicePropertiesOfEveryCudaElement) {
  GstElement* e = gst_element_factory_make("textureid", nullptr);
  GstElement* other = gst_element_factory_make("prismconvert", nullptr);
  ASSERT_NE(e, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(g_type_is_a(G_OBJECT_TYPE(e), g_type_from_name("GstPrismCudaFilter")));
  for (const char* name : {"device", "cuda-device-id"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    GParamSpec* theirs = g_object_class_find_property(G_OBJECT_GET_CLASS(other), name);
    ASSERT_NE(ps, nullptr) << name;
    ASSERT_NE(theirs, nullptr) << name;
    EXPECT_EQ(ps->value_type, theirs->value_type) << name;
    EXPECT_TRUE(ps->flags & GST_PARAM_MUTABLE_READY) << name;
  }
  gint id = 0;
  g_object_get(e, "cuda-device-id", &id, nullptr);
  EXPECT_EQ(id, -1);
  gst_util_set_object_arg(G_OBJECT(e), "device", "cpu");
  gst_util_set_object_arg(G_OBJECT(e), "device", "auto");
  gst_object_unref(other);
  gst_object_unref(e);
}

// The GstCudaContext of textureid device=cuda is its neighbours' (cudaupload and cudadownload): one
// context per pipeline, shared through the GstContext mechanism like the other elements'.
TEST_F(TextureId, SharesTheCudaContextOfItsNeighbours) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  for (const char* f : {"cudaupload", "cudadownload"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) {
      if (g_getenv("PRISM_REQUIRE_GPU")) FAIL() << f << " (GStreamer's nvcodec plugin) is missing";
      GTEST_SKIP() << f << " (GStreamer's nvcodec plugin) is not installed";
    }
    gst_object_unref(factory);
  }
  const std::string launch = "videotestsrc num-buffers=2 ! video/x-raw,format=NV12,width=64,height=64 ! "
                             "cudaupload name=up ! cudadownload ! video/x-raw,format=NV12 ! textureid name=t "
                             "device=cuda interval=1 gallery=\"" + gallery_dir() + "\" ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_NE(p, nullptr) << (err ? err->message : "");
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstMessage* m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  ASSERT_NE(m, nullptr);
  if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
    GError* e = nullptr;
    gst_message_parse_error(m, &e, nullptr);
    ADD_FAILURE() << e->message;
    g_clear_error(&e);
  }
  gst_message_unref(m);
  auto context_of = [&](const char* name) -> gpointer {
    GstElement* e = gst_bin_get_by_name(GST_BIN(p), name);
    GstContext* c = gst_element_get_context(e, "gst.cuda.context");
    gst_object_unref(e);
    if (!c) return nullptr;
    const GValue* v = gst_structure_get_value(gst_context_get_structure(c), "gst.cuda.context");
    gpointer object = v && G_VALUE_HOLDS_OBJECT(v) ? g_value_get_object(v) : nullptr;
    gst_context_unref(c);  // the pipeline still holds the context: the pointer stays comparable
    return object;
  };
  const gpointer ours = context_of("t");
  EXPECT_NE(ours, nullptr);
  EXPECT_EQ(context_of("up"), ours);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(p);
}

TEST_F(TextureId, ACorruptEntryFailsNamingTheFile) {
  NEED_IMAGES();
  const fs::path copy = dir.path() / "gallery";
  fs::copy(gallery_dir(), copy, fs::copy_options::recursive);
  const fs::path entry = copy / "entries" / "graf1.tex";
  ASSERT_TRUE(fs::exists(entry));
  fs::resize_file(entry, fs::file_size(entry) - 7);
  std::string error;
  EXPECT_FALSE(starts("textureid gallery=\"" + copy.string() + "\"", error));
  EXPECT_NE(error.find("'gallery'"), std::string::npos) << error;
  EXPECT_NE(error.find("graf1.tex"), std::string::npos) << error;
}

TEST_F(TextureId, VerifyNeedsAnEnrolledClaimedId) {
  NEED_IMAGES();
  std::string error;
  EXPECT_FALSE(starts(element("mode=verify"), error));
  EXPECT_NE(error.find("'claimed-id'"), std::string::npos) << error;
  EXPECT_FALSE(starts(element("mode=verify claimed-id=nobody"), error));
  EXPECT_NE(error.find("'claimed-id'"), std::string::npos) << error;
  EXPECT_NE(error.find("nobody"), std::string::npos) << error;
  EXPECT_TRUE(starts(element("mode=verify claimed-id=graf1"), error)) << error;
  EXPECT_TRUE(starts(element("claimed-id=nobody"), error)) << "search mode ignores claimed-id: " << error;
}

// On the GPU machine (PRISM_REQUIRE_GPU=1) the element's CUDA matcher gives the CPU path's answer.
TEST_F(TextureId, DeviceCudaAgreesWithTheCpu) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  Outcome cpu, gpu;
  run_harness(cpu, element("interval=1"), caps_of("GRAY8", scene), {&scene});
  run_harness(gpu, "textureid gallery=\"" + gallery_dir() + "\" device=cuda interval=1", caps_of("GRAY8", scene), {&scene});
  ASSERT_EQ(gpu.error, "");
  ASSERT_EQ(gpu.messages.size(), 1u);
  ASSERT_EQ(cpu.messages.size(), 1u);
  expect_identified(gpu, 0, 0, "box", "search", scene.width, scene.height);
  const int ci = integer(cpu.messages[0], "inliers"), gi = integer(gpu.messages[0], "inliers");
  EXPECT_NEAR(gi, ci, 2 + ci / 50);
}

TEST_F(TextureId, DeviceCudaWithoutAGpuFails) {
  NEED_IMAGES();
  std::string why;
  if (prism::gpu::available(&why)) GTEST_SKIP() << "a GPU is present";
  std::string error;
  EXPECT_FALSE(starts("textureid gallery=\"" + gallery_dir() + "\" device=cuda", error));
  EXPECT_NE(error.find("'device'"), std::string::npos) << error;
  EXPECT_TRUE(starts("textureid gallery=\"" + gallery_dir() + "\" device=auto", error)) << error;
}

// ---- pipelines -------------------------------------------------------------------------------

TEST_F(TextureId, ParseLaunchedPipelineWithImagefreeze) {
  NEED_IMAGES();
  for (const char* f : {"pngdec", "imagefreeze", "videoconvert"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) GTEST_SKIP() << f << " is not installed";
    gst_object_unref(factory);
  }
  const std::string launch = "filesrc location=\"" + image_path(kScene) +
                             "\" ! pngdec ! videoconvert ! imagefreeze num-buffers=3 ! textureid gallery=\"" +
                             gallery_dir() + "\" interval=1 ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_NE(p, nullptr) << (err ? err->message : "");
  ASSERT_EQ(err, nullptr) << err->message;
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  Outcome o;
  bool eos = false;
  while (GstMessage* m = gst_bus_timed_pop_filtered(
             bus, 60 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT))) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) {
      eos = true;
      gst_message_unref(m);
      break;
    }
    const bool error = GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR;
    if (error) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      o.error = e->message;
      g_clear_error(&e);
    } else if (gst_structure_has_name(gst_message_get_structure(m), "prism-textureid")) {
      o.messages.push_back(gst_structure_copy(gst_message_get_structure(m)));
    }
    gst_message_unref(m);
    if (error) break;
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(p);
  EXPECT_TRUE(eos) << o.error;
  ASSERT_EQ(o.messages.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(frame_of(o.messages[i]), i);
    EXPECT_TRUE(boolean(o.messages[i], "identified"));
    EXPECT_EQ(str(o.messages[i], "id"), "box");
  }
}

TEST_F(TextureId, TextureIdConfigRuns) {
  NEED_IMAGES();
  const std::string exe = prism::test::prism_executable();
  if (exe.empty()) GTEST_SKIP() << "no prism binary (" << PRISM_EXE << " or on PATH)";
  const std::string config = prism::test::source_config("texture-id.yaml");
  if (!fs::exists(config)) GTEST_SKIP() << "no " << config << " (set PRISM_SOURCE_DIR)";
  for (const char* f : {"decodebin", "pngdec", "imagefreeze", "videoconvert"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) GTEST_SKIP() << f << " is not installed";
    gst_object_unref(factory);
  }
  // The results are in the element's debug log (prism run does not print element messages).
  const std::string base = "GST_DEBUG=textureid:5 GST_DEBUG_NO_COLOR=1 '" + exe + "' run '" + config +
                           "' --set frames=3 --set interval=1 --set image='" + image_path(kScene) + "' --set gallery='" +
                           gallery_dir() + "'";
  const auto run = prism::test::run_command;
  std::string output;
  EXPECT_EQ(run(base, output), 0) << base << "\n" << output;
  EXPECT_NE(output.find("frame 2 (search): identified 'box'"), std::string::npos) << output;
  EXPECT_EQ(run(base + " --set mode=verify --set claimed_id=graf1", output), 0) << output;
  EXPECT_NE(output.find("frame 0 (verify): not identified 'graf1'"), std::string::npos) << output;
  // The default gallery (./texture-gallery) does not exist here: a runtime error naming it.
  EXPECT_EQ(run("cd '" + dir.path().string() + "' && '" + exe + "' run '" + config + "' --set frames=1", output), 1)
      << output;
  EXPECT_NE(output.find("texture-gallery' does not exist"), std::string::npos) << output;
}

// configs/texture-video.yaml on the real video: the brick front cropped from its first frame (as the
// config's comment says), enrolled among unrelated photos, is identified in later decoded frames.
TEST_F(TextureId, TextureVideoConfigIdentifiesTheEnrolledFrontInTheVideo) {
  NEED_IMAGES();
  const std::string video = prism::test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::string exe = prism::test::prism_executable();
  if (exe.empty()) GTEST_SKIP() << "no prism binary (" << PRISM_EXE << " or on PATH)";
  const std::string config = prism::test::source_config("texture-video.yaml");
  if (!fs::exists(config)) GTEST_SKIP() << "no " << config << " (set PRISM_SOURCE_DIR)";
  for (const char* f : {"qtdemux", "h264parse", "openh264dec", "videocrop", "pngenc", "pngdec"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) GTEST_SKIP() << f << " is not installed";
    gst_object_unref(factory);
  }
  prism::test::TempDir dir;
  const std::string crop = (dir.path() / "brick-front.png").string(), gallery = (dir.path() / "g").string();
  {  // the config comment's gst-launch line, in process
    GError* err = nullptr;
    GstElement* p = gst_parse_launch(
        ("filesrc location=\"" + video + "\" ! qtdemux ! h264parse ! openh264dec ! videocrop left=300 right=128 top=0 "
         "bottom=461 ! videoconvert ! pngenc snapshot=true ! filesink location=\"" + crop + "\"").c_str(), &err);
    ASSERT_NE(p, nullptr) << err->message;
    gst_element_set_state(p, GST_STATE_PLAYING);
    GstBus* bus = gst_element_get_bus(p);
    GstMessage* m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND, GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    ASSERT_NE(m, nullptr) << "no EOS within 60 s";
    EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
    gst_message_unref(m);
    gst_object_unref(bus);
    gst_element_set_state(p, GST_STATE_NULL);
    gst_object_unref(p);
  }
  std::string output;
  const auto run = prism::test::run_command;
  ASSERT_EQ(run("'" + exe + "' texture enroll --gallery '" + gallery + "' '" + crop + "' '" + image_path("baboon.jpg") +
                    "' '" + image_path("butterfly.jpg") + "' '" + image_path("box.png") + "'",
                output),
            0)
      << output;
  const std::string base = "GST_DEBUG=textureid:5 GST_DEBUG_NO_COLOR=1 '" + exe + "' run '" + config +
                           "' --set frames=101 --set video='" + video + "' --set gallery='" + gallery + "'";
  EXPECT_EQ(run(base, output), 0) << base << "\n" << output;
  // identity eos-after=101 passes frames 0..99; interval 50 searches frames 0 and 50.
  EXPECT_NE(output.find("frame 0 (search): identified 'brick-front'"), std::string::npos) << output;
  EXPECT_NE(output.find("frame 50 (search): identified 'brick-front'"), std::string::npos) << output;
  EXPECT_EQ(run(base + " --set mode=verify --set claimed_id=baboon", output), 0) << output;
  EXPECT_NE(output.find("frame 50 (verify): not identified 'baboon'"), std::string::npos) << output;
}
