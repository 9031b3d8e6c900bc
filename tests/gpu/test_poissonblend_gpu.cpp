// poissonblend on the GPU (device=cuda) against its CPU path (device=cpu, which
// tests/plugins/test_poissonblend.cpp holds to cv::seamlessClone): the same output within max
// difference 1, with CUDA memory in and out (cudaupload / cudadownload, the output caps keeping
// memory:CUDAMemory), system memory on the GPU path (device staging), overlays of both memory
// kinds in one frame, a still through imagefreeze (uploaded once), a controller-moved overlay,
// NV12 backgrounds and clipping.
#include <gtest/gtest.h>

#include <gst/controller/gstdirectcontrolbinding.h>
#include <gst/controller/gstinterpolationcontrolsource.h>

#include <atomic>

#include "poissonblend_util.h"
#include "prism_test.h"

using namespace prism::test::blend;

namespace {

class PoissonBlendGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  TempDir dir;
};

// Records whether every buffer leaving poissonblend had memory:CUDAMemory caps.
struct CapsCheck {
  std::atomic<int> buffers{0}, cuda{0};
};

GstPadProbeReturn check_caps(GstPad* pad, GstPadProbeInfo*, gpointer data) {
  auto* c = static_cast<CapsCheck*>(data);
  GstCaps* caps = gst_pad_get_current_caps(pad);
  c->buffers++;
  if (caps && gst_caps_features_contains(gst_caps_get_features(caps, 0), "memory:CUDAMemory")) c->cuda++;
  if (caps) gst_caps_unref(caps);
  return GST_PAD_PROBE_OK;
}

Chains cpu() { return Chains(); }

Chains gpu_cuda_memory() {
  Chains c;
  c.element = "poissonblend device=cuda";
  c.background = "cudaupload !";
  c.overlay = "cudaupload !";
  c.output = "cudadownload !";
  return c;
}

Chains gpu_system_memory() {
  Chains c;
  c.element = "poissonblend device=cuda";
  return c;
}

void expect_same(const Result& gpu, const Result& cpu, const std::string& what) {
  ASSERT_EQ(gpu.error, "") << what << ": " << gpu.error_debug;
  ASSERT_EQ(cpu.error, "") << what << ": " << cpu.error_debug;
  ASSERT_EQ(gpu.raw.size(), cpu.raw.size()) << what;
  ASSERT_FALSE(gpu.raw.empty()) << what;
  for (size_t i = 0; i < gpu.raw.size(); i++) {
    ASSERT_EQ(gpu.raw[i].size(), cpu.raw[i].size()) << what;
    int max = 0;
    size_t differ = 0;
    for (size_t k = 0; k < gpu.raw[i].size(); k++) {
      const int d = std::abs(int(gpu.raw[i][k]) - int(cpu.raw[i][k]));
      max = std::max(max, d);
      differ += d != 0;
    }
    EXPECT_LE(max, 1) << what << ", frame " << i;
    EXPECT_LE(double(differ) / gpu.raw[i].size(), 0.001) << what << ", frame " << i;
  }
}

}  // namespace

TEST_F(PoissonBlendGpu, CudaMemoryInAndOutMatchesTheCpu) {
  PRISM_NEED_GPU();
  const cv::Mat ov = random_image(90, 70, 3, 2);
  const cv::Mat mask = ellipse_mask(ov.cols, ov.rows, true);
  const std::string mask_path = dir.file("mask.png");
  write_png(mask, mask_path);
  for (const char* format : {"RGBA", "BGR", "BGRx"}) {
    cv::Mat bg = random_image(320, 240, 3, 1);
    if (std::string(format) != "BGR") cv::cvtColor(bg, bg, std::string(format) == "RGBA" ? cv::COLOR_BGR2RGBA : cv::COLOR_BGR2BGRA);
    for (const char* mode : {"normal", "mixed", "monochrome-transfer"}) {
      const std::vector<Overlay> overlays = {Overlay{bgra_with_alpha(ov, mask), "", 150, 110, mode, "", -1},
                                             Overlay{ov, "", 200, 140, mode, mask_path, -1}};
      CapsCheck check;
      Result g = run_blend(Background::of(bg, format), overlays, 2, [&](GstElement* b) {
        GstPad* src = gst_element_get_static_pad(b, "src");
        gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, check_caps, &check, nullptr);
        gst_object_unref(src);
      }, "", gpu_cuda_memory());
      Result c = run_blend(Background::of(bg, format), overlays, 2, {}, "", cpu());
      expect_same(g, c, std::string(format) + " " + mode);
      EXPECT_GT(check.buffers.load(), 0);
      EXPECT_EQ(check.cuda.load(), check.buffers.load()) << "poissonblend's output left CUDA memory";
    }
  }
}

TEST_F(PoissonBlendGpu, SystemMemoryOnTheGpuPathMatchesTheCpu) {
  PRISM_NEED_GPU();
  const cv::Mat bg = random_image(257, 181, 3, 3);
  const cv::Mat a = random_image(64, 50, 3, 4), b = random_image(41, 77, 3, 5);
  const std::vector<Overlay> overlays = {
      Overlay{bgra_with_alpha(a, ellipse_mask(64, 50, false)), "", 120, 90, "normal", "", 5},
      Overlay{bgra_with_alpha(b, ellipse_mask(41, 77, true)), "", 135, 100, "mixed", "", 1},
      Overlay{bgra_with_alpha(a, ellipse_mask(64, 50, true)), "", 250, 5, "normal", "", 9}};  // clipped
  Result g = run_blend(Background::of(bg), overlays, 3, {}, "", gpu_system_memory());
  Result c = run_blend(Background::of(bg), overlays, 3, {}, "", cpu());
  expect_same(g, c, "system memory, three overlays");
  EXPECT_EQ(g.warnings.size(), c.warnings.size());
}

TEST_F(PoissonBlendGpu, YuvBackgroundsMatchTheCpu) {
  PRISM_NEED_GPU();
  const int W = 320, H = 240;
  const cv::Mat ov = random_image(80, 60, 3, 7);
  const cv::Mat mask = ellipse_mask(80, 60, true);
  cv::RNG rng(6);
  for (const char* format : {"NV12", "I420"}) {
    Background bg;
    bg.format = format;
    bg.width = W;
    bg.height = H;
    std::vector<uint8_t> y((size_t)W * H), uv((size_t)W * H / 2);
    cv::Mat ym(H, W, CV_8UC1, y.data()), uvm(H / 2, W, CV_8UC1, uv.data());
    rng.fill(ym, cv::RNG::UNIFORM, 16, 236);
    cv::GaussianBlur(ym, ym, cv::Size(0, 0), 2.0);
    rng.fill(uvm, cv::RNG::UNIFORM, 100, 156);
    if (std::string(format) == "NV12") {
      bg.planes = {y, uv};
      bg.strides = {(size_t)W, (size_t)W};
    } else {
      bg.planes = {y, std::vector<uint8_t>(uv.begin(), uv.begin() + uv.size() / 2),
                   std::vector<uint8_t>(uv.begin() + uv.size() / 2, uv.end())};
      bg.strides = {(size_t)W, (size_t)W / 2, (size_t)W / 2};
    }
    const std::vector<Overlay> overlays = {Overlay{bgra_with_alpha(ov, mask), "", 161, 119, "normal", "", -1}};
    Result g = run_blend(bg, overlays, 2, {}, "", gpu_cuda_memory());
    Result c = run_blend(bg, overlays, 2, {}, "", cpu());
    expect_same(g, c, format);
  }
}

TEST_F(PoissonBlendGpu, StillImageAndControllerMatchTheCpu) {
  PRISM_NEED_GPU();
  const cv::Mat bg = random_image(320, 180, 3, 8);
  const cv::Mat ov = random_image(60, 48, 3, 9);
  const std::string png = dir.file("still.png");
  write_png(bgra_with_alpha(ov, ellipse_mask(60, 48, true)), png);
  auto move = [](GstElement* b) {
    GstPad* pad = gst_element_get_static_pad(b, "overlay_0");
    ASSERT_NE(pad, nullptr);
    g_object_set(pad, "ypos", 90, nullptr);
    GstControlSource* cs = gst_interpolation_control_source_new();
    g_object_set(cs, "mode", GST_INTERPOLATION_MODE_LINEAR, nullptr);
    gst_timed_value_control_source_set(GST_TIMED_VALUE_CONTROL_SOURCE(cs), 0, 40);
    gst_timed_value_control_source_set(GST_TIMED_VALUE_CONTROL_SOURCE(cs), GST_SECOND / 3, 280);
    gst_object_add_control_binding(GST_OBJECT(pad), gst_direct_control_binding_new_absolute(GST_OBJECT(pad), "xpos", cs));
    gst_object_unref(cs);
    gst_object_unref(pad);
  };
  // System-memory still (uploaded once) and the same still in CUDA memory (read in place).
  for (const char* chain : {"imagefreeze ! b.overlay_0", "imagefreeze ! cudaupload ! b.overlay_0"}) {
    const std::string still = "filesrc location=\"" + png + "\" ! pngdec ! ";
    Result g = run_blend(Background::of(bg), {}, 10, move, still + chain, gpu_cuda_memory());
    Result c = run_blend(Background::of(bg), {}, 10, move, still + "imagefreeze ! b.overlay_0", cpu());
    expect_same(g, c, chain);
    EXPECT_TRUE(g.eos);
  }
}
