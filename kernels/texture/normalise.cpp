#include "texture/normalise.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "texture/normalise_pixel.h"

namespace prism::texture {

namespace {

// OpenCV's BORDER_REFLECT_101 index (cv::borderInterpolate): ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
int reflect101(int p, int n) {
  if (n == 1) return 0;
  while (p < 0 || p >= n) p = p < 0 ? -p : 2 * (n - 1) - p;
  return p;
}

}  // namespace

std::string Normalisation::name() const {
  if (kind == Kind::kNone) return "none";
  return "clahe-" + std::to_string(clip) + "-" + std::to_string(tiles);
}

Normalisation parse_normalisation(const std::string& name) {
  if (name == "none") return {};
  auto refuse = [&]() -> Normalisation {
    throw std::invalid_argument("unknown normalisation '" + name + "': expected " + kNormalisationNames);
  };
  // Whole numbers written canonically (no sign, no leading zero), so that the name is the setting.
  auto number = [&](const std::string& s, int hi) {
    if (s.empty() || s.size() > 2 || s[0] == '0') refuse();
    for (char c : s)
      if (c < '0' || c > '9') refuse();
    const int v = std::stoi(s);
    if (v < 1 || v > hi) refuse();
    return v;
  };
  const std::string prefix = "clahe-";
  if (name.compare(0, prefix.size(), prefix) != 0) return refuse();
  const size_t dash = name.find('-', prefix.size());
  if (dash == std::string::npos) return refuse();
  Normalisation n;
  n.kind = Normalisation::Kind::kClahe;
  n.clip = number(name.substr(prefix.size(), dash - prefix.size()), kMaxClaheClip);
  n.tiles = number(name.substr(dash + 1), kMaxClaheTiles);
  return n;
}

Normalisation poor_light_normalisation() { return parse_normalisation("clahe-4-8"); }

cv::Mat normalise(const cv::Mat& grey, const Normalisation& n) {
  if (grey.type() != CV_8UC1) throw std::invalid_argument("normalise: the image must be 8-bit grey");
  if (n.kind == Normalisation::Kind::kNone) return grey;
  if (n.clip < 1 || n.clip > kMaxClaheClip || n.tiles < 1 || n.tiles > kMaxClaheTiles)
    throw std::invalid_argument("normalise: invalid setting '" + n.name() + "': expected " + kNormalisationNames);
  cv::Mat out;
  clahe(grey, n.clip, n.tiles, n.tiles, out);
  return out;
}

void clahe(const cv::Mat& image, double clip, int tiles_x, int tiles_y, cv::Mat& out) {
  if (image.type() != CV_8UC1 || image.empty()) throw std::invalid_argument("clahe: the image must be 8-bit grey");
  const cv::Mat grey = out.data == image.data ? image.clone() : image;  // in place: read a copy
  if (tiles_x < 1 || tiles_y < 1) throw std::invalid_argument("clahe: the tile grid must be at least 1 x 1");
  const int W = grey.cols, H = grey.rows;
  // The histograms' image: when a side does not divide into the grid, OpenCV pads both sides by
  // (tiles - side % tiles), so a side that did divide gains a whole extra row or column of tiles' worth.
  const bool pad = W % tiles_x != 0 || H % tiles_y != 0;
  const int ext_w = pad ? W + tiles_x - W % tiles_x : W, ext_h = pad ? H + tiles_y - H % tiles_y : H;
  const int tw = ext_w / tiles_x, th = ext_h / tiles_y;
  const int clip_count = clahe_clip_count(clip, tw * th);
  const float lut_scale = clahe_lut_scale(tw * th);

  std::vector<uint8_t> luts(size_t(tiles_x) * tiles_y * 256);
  std::vector<int> col(ext_w);
  for (int x = 0; x < ext_w; ++x) col[x] = reflect101(x, W);
  cv::parallel_for_(cv::Range(0, tiles_x * tiles_y), [&](const cv::Range& r) {
    for (int k = r.start; k < r.end; ++k) {
      const int ty = k / tiles_x, tx = k % tiles_x;
      int hist[256] = {};
      for (int y = ty * th; y < (ty + 1) * th; ++y) {
        const uint8_t* row = grey.ptr<uint8_t>(reflect101(y, H));
        for (int x = tx * tw; x < (tx + 1) * tw; ++x) ++hist[row[col[x]]];
      }
      clahe_tile_lut(hist, clip_count, lut_scale, &luts[size_t(k) * 256]);
    }
  });

  out.create(H, W, CV_8UC1);
  const float inv_w = clahe_inv_size(tw), inv_h = clahe_inv_size(th);
  std::vector<ClaheAxis> ax(W);
  for (int x = 0; x < W; ++x) ax[x] = clahe_axis(x, inv_w, tiles_x);
  cv::parallel_for_(cv::Range(0, H), [&](const cv::Range& r) {
    for (int y = r.start; y < r.end; ++y) {
      const ClaheAxis ay = clahe_axis(y, inv_h, tiles_y);
      const uint8_t* top = &luts[size_t(ay.lo) * tiles_x * 256];
      const uint8_t* bottom = &luts[size_t(ay.hi) * tiles_x * 256];
      const uint8_t* src = grey.ptr<uint8_t>(y);
      uint8_t* dst = out.ptr<uint8_t>(y);
      for (int x = 0; x < W; ++x) {
        const int v = src[x], lo = ax[x].lo * 256 + v, hi = ax[x].hi * 256 + v;
        dst[x] = clahe_blend(top[lo], top[hi], bottom[lo], bottom[hi], ax[x].w, ay.w);
      }
    }
  });
}

}  // namespace prism::texture
