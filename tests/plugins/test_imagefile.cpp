// The image-file loader of the support library (gst-libs/gst/prism/gstprismimagefile.h), used by
// poissonblend's mask-location, `prism texture` and `prism bow`: files that declare a huge size
// are refused from their header, before anything is decoded, with an error naming the file and
// the size, and without a GStreamer-CRITICAL. Photos and ordinary masks are covered by
// test_poissonblend.cpp.
#include <gtest/gtest.h>

#include <gst/gst.h>
#include <sys/resource.h>

#include <fstream>
#include <string>

#include "bad_input.h"
#include "gst/prism/gstprismimagefile.h"
#include "prism_test.h"

namespace {

using prism::test::GlibLogRecorder;
using prism::test::TempDir;
using prism::test::write_png_declaring;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PRISM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define PRISM_TEST_SANITIZED 1
#endif
#endif

// Caps this process's address space at what it uses now plus `extra` bytes while it lives, so that
// a loader that decoded a huge declared size fails the test instead of taking gigabytes. Not under
// sanitizers (their shadow memory is address space).
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(rlim_t extra) {
#ifndef PRISM_TEST_SANITIZED
    std::ifstream status("/proc/self/status");
    std::string key;
    rlim_t kb = 0;
    while (status >> key)
      if (key == "VmSize:" && (status >> kb)) break;
    if (!kb || getrlimit(RLIMIT_AS, &old_) != 0) return;
    struct rlimit lim = old_;
    lim.rlim_cur = kb * 1024 + extra;
    if (old_.rlim_max != RLIM_INFINITY && lim.rlim_cur > old_.rlim_max) return;
    active_ = setrlimit(RLIMIT_AS, &lim) == 0;
#else
    (void)extra;
#endif
  }
  ~AddressSpaceLimit() {
    if (active_) setrlimit(RLIMIT_AS, &old_);
  }

 private:
  struct rlimit old_ {};
  bool active_ = false;
};

class ImageFile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  TempDir dir;
};

// A 16384x16384 RGBA PNG of a few hundred bytes: decoded, it would take 1 GiB per copy (the issue's
// 261 KB file took 2.5 GB before its size was checked).
TEST_F(ImageFile, HugeDeclaredSizeIsRefusedBeforeDecoding) {
  const std::string path = dir.file("huge.png");
  write_png_declaring(path, 16384, 16384, 6);
  prism::ImageFile im;
  GError* err = nullptr;
  gboolean ok;
  {
    AddressSpaceLimit limit(768u << 20);
    ok = prism::image_file_load_grey(path.c_str(), &im, &err);
  }
  ASSERT_FALSE(ok);
  ASSERT_NE(err, nullptr);
  const std::string msg = err->message;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("16384x16384"), std::string::npos) << msg;
  EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT)) << msg;
  g_clear_error(&err);
  EXPECT_TRUE(im.pixels.empty());
}

// 100000x100000 overflows GstVideoInfo's size: pngdec used to log GStreamer-CRITICALs
// (gst_caps_is_equal, gst_video_decoder_allocate_output_frame_with_params).
TEST_F(ImageFile, SizeBeyondGStreamersLimitsIsRefusedWithoutCritical) {
  for (uint8_t colour : {0, 2, 6}) {
    const std::string path = dir.file("huge-" + std::to_string(colour) + ".png");
    write_png_declaring(path, 100000, 100000, colour);
    prism::ImageFile im;
    GError* err = nullptr;
    GlibLogRecorder log;
    EXPECT_FALSE(prism::image_file_load(path.c_str(), GST_VIDEO_FORMAT_BGRA, &im, &err));
    ASSERT_NE(err, nullptr);
    EXPECT_NE(std::string(err->message).find(path), std::string::npos) << err->message;
    EXPECT_NE(std::string(err->message).find("100000x100000"), std::string::npos) << err->message;
    g_clear_error(&err);
    EXPECT_TRUE(log.messages().empty()) << log.joined();
  }
}

// The limit is the caller's: the default takes ordinary images, a smaller one refuses them, and the
// scaled size does not matter (the decoder makes the file's size first).
TEST_F(ImageFile, PixelLimitIsTheCallers) {
  const std::string pgm = dir.file("small.pgm");
  {
    std::ofstream f(pgm, std::ios::binary);
    f << "P5\n40 30\n255\n" << std::string(40 * 30, '\x7f');
  }
  prism::ImageFile im;
  GError* err = nullptr;
  ASSERT_TRUE(prism::image_file_load(pgm.c_str(), GST_VIDEO_FORMAT_GRAY8, &im, &err)) << err->message;
  EXPECT_EQ(im.width, 40);
  EXPECT_EQ(im.height, 30);
  EXPECT_FALSE(prism::image_file_load(pgm.c_str(), GST_VIDEO_FORMAT_GRAY8, &im, &err, 0, 0, 40 * 30 - 1));
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err->message).find("40x30"), std::string::npos) << err->message;
  EXPECT_NE(std::string(err->message).find(pgm), std::string::npos) << err->message;
  g_clear_error(&err);
  EXPECT_FALSE(prism::image_file_load(pgm.c_str(), GST_VIDEO_FORMAT_GRAY8, &im, &err, 4, 3, 100));
  ASSERT_NE(err, nullptr);
  EXPECT_NE(std::string(err->message).find("40x30"), std::string::npos) << err->message;
  g_clear_error(&err);
  EXPECT_FALSE(prism::image_file_load_grey(pgm.c_str(), &im, &err, 1000));
  ASSERT_NE(err, nullptr);
  g_clear_error(&err);
  ASSERT_TRUE(prism::image_file_load_grey(pgm.c_str(), &im, &err, 40 * 30)) << err->message;
  EXPECT_EQ(im.pixels.size(), 40u * 30u);
}

}  // namespace
