#include "texture/normalise.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "common/border.h"
#include "texture/normalise_pixel.h"

namespace prism::texture {

namespace {}  // namespace

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
  const ClaheGeometry geo = clahe_geometry(W, H, clip, tiles_x, tiles_y);
  const int tw = geo.tile_w, th = geo.tile_h, ext_w = tw * tiles_x;

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
      clahe_tile_lut(hist, geo.clip_count, geo.lut_scale, &luts[size_t(k) * 256]);
    }
  });

  out.create(H, W, CV_8UC1);
  std::vector<ClaheAxis> ax(W);
  for (int x = 0; x < W; ++x) ax[x] = clahe_axis(x, geo.inv_w, tiles_x);
  cv::parallel_for_(cv::Range(0, H), [&](const cv::Range& r) {
    for (int y = r.start; y < r.end; ++y) {
      const ClaheAxis ay = clahe_axis(y, geo.inv_h, tiles_y);
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
