// textureid's CUDA matcher (device=cuda) against the CPU path (test_textureid.cpp) on the test
// gallery: the same identification, inliers within a small margin.
#include <gtest/gtest.h>

#include <string>

#include "prism_test.h"
#include "textureid_util.h"

using namespace prism::test::textureid;

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
