#include "spectral/spectralize.h"

#include <opencv2/core.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "emd/transport_simplex.h"

namespace prism::spectral {

void validate(const SpectralizeParams& p) {
  if (p.bins < 2 || p.bins > emd::kMaxBins)
    throw std::invalid_argument("bins is " + std::to_string(p.bins) + "; 2 to " + std::to_string(emd::kMaxBins) +
                                " are supported");
  if (p.window < 1 || p.window > 31 || p.window % 2 == 0)
    throw std::invalid_argument("window is " + std::to_string(p.window) + "; an odd size from 1 to 31 is expected");
}

// A sliding histogram along each row: add the entering column, remove the leaving one.
template <class T>
void spectralize_cpu(const uint8_t* grey, int width, int height, int64_t stride, const SpectralizeParams& p, T* out,
                     int64_t out_row_bytes) {
  validate(p);
  const int r = p.window / 2, n = p.bins;
  if (out_row_bytes == 0) out_row_bytes = int64_t(width) * n * sizeof(T);
  cv::parallel_for_(cv::Range(0, height), [&](const cv::Range& range) {
    std::vector<int> hist(n);
    auto clamp_x = [&](int x) { return std::min(std::max(x, 0), width - 1); };
    auto column = [&](int y, int x, int sign) {
      for (int dy = -r; dy <= r; ++dy) {
        const int yy = std::min(std::max(y + dy, 0), height - 1);
        hist[bin_of(grey[yy * stride + clamp_x(x)], n)] += sign;
      }
    };
    for (int y = range.start; y < range.end; ++y) {
      std::fill(hist.begin(), hist.end(), 0);
      for (int dx = -r; dx <= r; ++dx) column(y, dx, +1);
      for (int x = 0; x < width; ++x) {
        T* o = reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(out) + y * out_row_bytes) + int64_t(x) * n;
        for (int b = 0; b < n; ++b) o[b] = static_cast<T>(hist[b]);
        if (x + 1 < width) {
          column(y, x - r, -1);
          column(y, x + r + 1, +1);
        }
      }
    }
  });
}

template void spectralize_cpu<float>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, float*, int64_t);
template void spectralize_cpu<uint16_t>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, uint16_t*,
                                        int64_t);

}  // namespace prism::spectral
