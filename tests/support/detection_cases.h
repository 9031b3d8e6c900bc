// Cases for the detection image (kernels/texture/detection_image.h): the shrinks the textureid
// element meets (1080p and 4K to max_side 1024, portrait, odd sizes, the integer ratios OpenCV takes
// its fast path for) and random ones, and 8-bit contents that stress the rounding.
#pragma once
#include <opencv2/imgproc.hpp>

#include <random>
#include <string>
#include <vector>

#include "texture_cases.h"

namespace prism::test {

struct ShrinkCase {
  int src_width, src_height, dst_width, dst_height;
  std::string name() const {
    return std::to_string(src_width) + "x" + std::to_string(src_height) + " -> " + std::to_string(dst_width) + "x" +
           std::to_string(dst_height);
  }
};

// Named shrinks to `max_side` (as texture::detection_size gives them) and `random` more of random
// sizes and ratios.
inline std::vector<ShrinkCase> shrink_cases(std::mt19937& rng, int random) {
  const int sources[][2] = {{1920, 1080}, {3840, 2160}, {1080, 1920}, {2160, 3840}, {4096, 2160},
                            {1031, 769},  {1025, 1025}, {1500, 997},  {2047, 1153}, {2048, 1536},
                            {3072, 3072}, {3072, 2048}, {4000, 3},    {5, 3001}};
  std::vector<ShrinkCase> out;
  for (const auto& s : sources) {
    const int side = std::max(s[0], s[1]);
    const double scale = double(side) / 1024;  // features.cpp's rule, written out independently
    out.push_back({s[0], s[1], std::max(1, int(s[0] / scale + 0.5)), std::max(1, int(s[1] / scale + 0.5))});
  }
  for (int i = 0; i < random; ++i) {
    const int sw = 1 + int(rng() % 2600), sh = 1 + int(rng() % 2600);
    out.push_back({sw, sh, 1 + int(rng() % sw), 1 + int(rng() % sh)});
  }
  return out;
}

// Contents by index: uniform noise, white (weights summing above 1 must still give 255), a
// diagonal ramp, a blob texture.
inline cv::Mat shrink_content(std::mt19937& rng, int width, int height, int kind) {
  cv::Mat m(height, width, CV_8UC1);
  switch (kind % 4) {
    case 0:
      cv::theRNG().state = rng();
      cv::randu(m, 0, 256);
      break;
    case 1: m.setTo(255); break;
    case 2:
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) m.at<uchar>(y, x) = uchar((x + 2 * y) & 255);
      break;
    default: m = random_texture(rng, width, height);
  }
  return m;
}

}  // namespace prism::test
