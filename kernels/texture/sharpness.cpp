// The CPU path of texture/sharpness.h.
#include "texture/sharpness.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "texture/sharpness_pixel.h"

namespace prism::texture {

namespace detail {
void check_sharpness_image(const char* who, const uint8_t* grey, size_t pitch, int width, int height) {
  if (!grey || width < 1 || height < 1 || pitch < size_t(width))
    throw std::invalid_argument(std::string(who) + ": a " + std::to_string(width) + "x" + std::to_string(height) +
                                " image with a pitch of " + std::to_string(pitch) +
                                " bytes (a non-empty 8-bit grey image is needed)");
}
}  // namespace detail

double laplacian_variance(const LaplacianSums& s) {
  if (s.count <= 0) return 0.0;
  // cv::meanStdDev's arithmetic on exact double sums (mean.dispatch.cpp): s *= 1/n, then
  // sqrt(max(q/n - s^2, 0)); squared back as the CPU path has always returned stddev^2.
  const double scale = 1.0 / double(s.count);
  const double mean = double(s.sum) * scale;
  const double stddev = std::sqrt(std::max(double(s.squares) * scale - mean * mean, 0.0));
  return stddev * stddev;
}

LaplacianSums laplacian_sums(const uint8_t* grey, size_t pitch, int width, int height) {
  detail::check_sharpness_image("laplacian_sums", grey, pitch, width, height);
  LaplacianSums s;
  s.count = int64_t(width) * height;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = grey + size_t(y) * pitch;
    const uint8_t* up = grey + size_t(reflect101(y - 1, height)) * pitch;
    const uint8_t* down = grey + size_t(reflect101(y + 1, height)) * pitch;
    int64_t sum = 0;
    uint64_t squares = 0;
    auto add = [&](int l) {
      sum += l;
      squares += uint64_t(l * l);
    };
    add(detail::laplacian_at(grey, pitch, width, height, 0, y));
    for (int x = 1; x < width - 1; ++x) add(detail::laplacian(row[x], up[x], down[x], row[x - 1], row[x + 1]));
    if (width > 1) add(detail::laplacian_at(grey, pitch, width, height, width - 1, y));
    s.sum += sum;
    s.squares += squares;
  }
  return s;
}

double sharpness(const cv::Mat& grey) {
  if (grey.type() != CV_8UC1 || grey.dims != 2 || grey.empty())
    throw std::invalid_argument("sharpness: a " + std::to_string(grey.cols) + "x" + std::to_string(grey.rows) +
                                " image of type " + cv::typeToString(grey.type()) +
                                " (a non-empty 8-bit grey image, CV_8UC1, is needed)");
  return laplacian_variance(laplacian_sums(grey.data, grey.step[0], grey.cols, grey.rows));
}

}  // namespace prism::texture
