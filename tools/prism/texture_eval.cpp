// prism texture eval: the accuracy evaluation of texture identification (issue 5).
//
// Gallery: the first N sun8 scene photos (sorted by path), skimage's brick/grass/gravel and img1 of
// the 8 Oxford affine sequences, each one product. Queries are synthetic re-captures of every
// gallery photo (one per perturbation, fixed seed): viewpoint (random homography), illumination
// (gain, offset, gradient), gamma, 30% occlusion, blur, noise, JPEG, all of them mildly at once, and
// low light (issue 22: gain, gamma, shot and read noise, half of them also occluded); plus the real
// viewpoint/light/blur/JPEG changes of Oxford img2..6 (their ground-truth homographies check the recovered geometry).
// Impostors: for 1:1, each query against 3 random other products; for 1:M, the sun8 photos that were not enrolled.
//
// The decision threshold on the inliers' significance (texture::chance_significance) is the
// smallest multiple of 0.1 at which the 1:1 impostor accept rate is at most 0.1%; reported per
// perturbation: top-1 identification (rank 1 correct), top-1 identified at the threshold, TAR
// (genuine 1:1 accepted) and FAR; then the same rule held out (calibrated on half the queries,
// measured on the other half) and, for comparison, the rule on the bare inlier count.
//
// Precision: the index is 8-bit (the FP16 index was removed after commit cb5eca3: 8-bit is the
// product; docs/TEXTUREID.md keeps the side-by-side table it measured). Then, on real pairs of one
// surface (Oxford img1 against img2..6; KTH-TIPS, one sample's first image at scale 5
// against its other poses and lights), every query descriptor's ratio-test decision by each
// 8-bit matcher is compared with the FP32 reference's (texture::compare_decisions).
//
// Poor light (issue 22): enrolment and queries are extracted with one contrast normalisation
// (--normalise, default texture::poor_light_normalisation()); --candidates compares several on the
// synthetic perturbations first (top-1 and identification per perturbation on an 8-bit index, and
// the queries' keypoint counts), the table docs/TEXTUREID.md's choice rests on.
//
// Digest prefilter (issue 20, --digest ROWS): whether a search that matches only a digest of each
// gallery image (ROWS of its descriptors in --digest-order, 768 / ROWS images' digests packed into one slot as one
// matcher image) would still rank the genuine product's slot first, the question behind an
// approximate host tier (a GPU-resident digest of the host tier, the best slots re-matched exactly).
// Measured on the 8-bit index: the genuine slot's rank among all slots by ratio-test score, against
// the genuine product's rank in the exact scores. --decoys N adds N generated images' digests to the
// digest slots (rows drawn at random from the digests of the photos not enrolled: the 2 M benchmark's
// generator, on real photos' rows), so that the genuine slot's rank can be read against as many
// slots as a million-scale host tier has; --digest-keep K[,K...] reports the share ranked in the K best
// (the slots a search with SearchParams::digest_candidates = K re-matches).
#include <opencv2/calib3d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "common/regular_file.h"
#include "gst_setup.h"
#include "match/match.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture/verify.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kEvalUsage =
    "usage: prism texture eval [--data DIR] [--out DIR] [--textures N] [--impostors N] [--device D] [--seed S]\n"
    "                          [--precision u8] [--normalise NAME] [--candidates]\n"
    "                          [--enrol-device D] [--query-device D] [--digest ROWS[,ROWS...]]\n"
    "                          [--digest-order O[,O...]] [--decoys N] [--digest-keep K[,K...]]\n"
    "\n"
    "  --data DIR       ../shared/data (sun8/, textures/skimage/, textures/kth-tips-gray/, oxford-affine/)\n"
    "  --out DIR        where texture-eval.md, scores.csv and significance.png go (default texture-eval)\n"
    "  --textures N     sun8 photos enrolled (default 1000)\n"
    "  --impostors N    sun8 photos not enrolled, searched as open-set impostors (default 400)\n"
    "  --device D       the matcher: auto, cpu or cuda (the CPU matcher is slow for large galleries)\n"
    "  --enrol-device D the SIFT that enrols the gallery: cpu (OpenCV's cv::SIFT, the default), cuda\n"
    "                   (kernels/sift) or auto\n"
    "  --query-device D the SIFT that extracts every query (default cpu): a gallery enrolled with one\n"
    "                   SIFT and queried with the other is the mixed run\n"
    "  --precision u8   the index's descriptors (8-bit, the only ones: kept for scripts)\n"
    "  --normalise N    contrast normalisation at enrolment and query: none or clahe-CLIP-TILES\n"
    "                   (default: the poor-light choice, clahe-4-8)\n"
    "  --candidates     first compare the candidate normalisations on the synthetic perturbations\n"
    "                   (none, equalizeHist, CLAHE settings, local mean/std) and report them\n"
    "  --digest ROWS    also rank each query's product among digests of ROWS rows per image\n"
    "                   (768 / ROWS images a slot; ROWS a divisor of 768 from 16 to 384; 8-bit)\n"
    "  --digest-order O[,O...]  which rows make a digest: largest (SIFT scale; the index's, the default),\n"
    "                   strongest (response) or spread (a 4 x 4 grid's strongest in turn)\n"
    "  --decoys N       also pack N decoy images' digests into the digest slots (rows drawn at random\n"
    "                   from the digests of the photos not enrolled; default 0)\n"
    "  --digest-keep K[,K...]  report the genuine slot's share in the K best slots (default: 1% of the\n"
    "                   slots), the slots a search with that many digest candidates re-matches\n"
    "  (a quick check on a CPU: --textures 20 --impostors 20 --device cpu)\n";

// The SIFT a FeatureParams::device selects, as the report names it.
std::string sift_name(gpu::Device d) {
  if (d == gpu::Device::kCpu) return "cv::SIFT (CPU)";
  if (d == gpu::Device::kCuda) return "kernels/sift (CUDA)";
  return gpu::available() ? "kernels/sift (CUDA, auto)" : "cv::SIFT (CPU, auto)";
}

struct Item {
  std::string id, path;
  cv::Mat grey;
};

const char* const kPerturbations[] = {"viewpoint", "illumination", "gamma",    "occlusion30", "blur",
                                      "noise",     "jpeg",         "combined", "lowlight"};

cv::Mat warp_viewpoint(const cv::Mat& g, std::mt19937& rng, double strength) {
  std::uniform_real_distribution<double> u(-1, 1);
  const double w = g.cols, h = g.rows;
  const double angle = u(rng) * 25 * strength * CV_PI / 180, scale = 1 + 0.25 * strength * u(rng);
  std::vector<cv::Point2f> src{{0, 0}, {float(w), 0}, {float(w), float(h)}, {0, float(h)}}, dst;
  for (const auto& p : src) {
    const double x = p.x - w / 2, y = p.y - h / 2;
    double xr = scale * (std::cos(angle) * x - std::sin(angle) * y),
           yr = scale * (std::sin(angle) * x + std::cos(angle) * y);
    xr += u(rng) * 0.12 * strength * w;  // perspective: each corner moves independently
    yr += u(rng) * 0.12 * strength * h;
    dst.emplace_back(float(xr + w / 2), float(yr + h / 2));
  }
  cv::Mat out;
  cv::warpPerspective(g, out, cv::getPerspectiveTransform(src, dst), g.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                      cv::Scalar(u(rng) * 60 + 64));
  return out;
}

// A rectangle of 30% of the area, filled with smoothed noise.
cv::Mat occlude30(const cv::Mat& g, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat out = g.clone();
  const double aspect = 0.5 + u(rng);
  const int w = std::min(g.cols, int(std::sqrt(0.3 * g.total() * aspect))),
            h = std::min(g.rows, int(0.3 * g.total() / w));
  const int x = int(u(rng) * (g.cols - w)), y = int(u(rng) * (g.rows - h));
  cv::Mat block = out(cv::Rect(x, y, w, h));
  cv::randu(block, 0, 256);
  cv::GaussianBlur(block, block, cv::Size(0, 0), 3);
  return out;
}

// A dim capture (issue 22): the scene (occluded by 30% in half of the captures, the occluder lit
// like the rest) through gain 0.25-0.5 and gamma 1-2.2, v = 255 gain (x / 255)^gamma, then sensor
// noise in grey levels: shot noise of a sensor at high gain, one electron per level (sigma sqrt(v)),
// and read noise sigma 1-3, rounded and clipped to 8 bits. Most captures end with a mean grey under 40.
cv::Mat low_light(const cv::Mat& g, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  const double gain = 0.25 + 0.25 * u(rng), gamma = 1.0 + 1.2 * u(rng), read = 1 + 2 * u(rng);
  cv::theRNG().state = rng();  // the occluder's noise and the sensor's
  const cv::Mat scene = u(rng) < 0.5 ? occlude30(g, rng) : g;
  cv::Mat lut(1, 256, CV_32F);
  for (int i = 0; i < 256; ++i) lut.at<float>(i) = float(255 * gain * std::pow(i / 255.0, gamma));
  cv::Mat v(scene.size(), CV_32F), shot(scene.size(), CV_32F), rd(scene.size(), CV_32F);
  for (int y = 0; y < scene.rows; ++y)
    for (int x = 0; x < scene.cols; ++x) v.at<float>(y, x) = lut.at<float>(scene.at<uchar>(y, x));
  cv::randn(shot, 0, 1);
  cv::randn(rd, 0, read);
  cv::Mat sigma;  // shot noise: sqrt(v) levels
  cv::sqrt(v, sigma);
  cv::Mat noisy = v + sigma.mul(shot) + rd, out;
  noisy.convertTo(out, CV_8U);  // rounded, saturated
  return out;
}

cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat f, out;
  if (kind == "viewpoint") return warp_viewpoint(g, rng, 1.0);
  if (kind == "lowlight") return low_light(g, rng);
  if (kind == "illumination") {  // gain, offset and a linear light gradient
    g.convertTo(f, CV_32F);
    const double gain = 0.55 + 0.9 * u(rng), offset = (u(rng) - 0.5) * 60, slope = (u(rng) - 0.5) * 0.8;
    for (int y = 0; y < f.rows; ++y)
      for (int x = 0; x < f.cols; ++x)
        f.at<float>(y, x) = float(f.at<float>(y, x) * gain * (1 + slope * (double(x) / f.cols - 0.5)) + offset);
    f.convertTo(out, CV_8U);
    return out;
  }
  if (kind == "gamma") {
    const double gamma = u(rng) < 0.5 ? 0.5 + 0.3 * u(rng) : 1.4 + 0.8 * u(rng);
    cv::Mat lut(1, 256, CV_8U);
    for (int i = 0; i < 256; ++i) lut.at<uchar>(i) = cv::saturate_cast<uchar>(255 * std::pow(i / 255.0, gamma));
    cv::LUT(g, lut, out);
    return out;
  }
  if (kind == "occlusion30") return occlude30(g, rng);
  if (kind == "blur") {
    cv::GaussianBlur(g, out, cv::Size(0, 0), 1.2 + 1.0 * u(rng));
    return out;
  }
  if (kind == "noise") {
    g.convertTo(f, CV_32F);
    cv::Mat n(f.size(), CV_32F);
    cv::theRNG().state = rng();
    cv::randn(n, 0, 8 + 7 * u(rng));
    f += n;
    f.convertTo(out, CV_8U);
    return out;
  }
  if (kind == "jpeg") return jpeg_roundtrip(g, 15 + int(20 * u(rng)));
  // combined: mild versions of everything (a realistic re-capture)
  out = warp_viewpoint(g, rng, 0.5);
  out.convertTo(out, CV_8U, 0.75 + 0.5 * u(rng), (u(rng) - 0.5) * 30);
  cv::GaussianBlur(out, out, cv::Size(0, 0), 0.6 + 0.4 * u(rng));
  out.convertTo(f, CV_32F);
  cv::Mat n(f.size(), CV_32F);
  cv::theRNG().state = rng();
  cv::randn(n, 0, 4);
  f += n;
  f.convertTo(out, CV_8U);
  return jpeg_roundtrip(out, 50 + int(30 * u(rng)));
}

std::vector<Item> sun8_items(const fs::path& data) {
  std::vector<std::string> paths;
  for (const char* list : {"train.txt", "test.txt"}) {
    const fs::path file = data / "sun8" / list;
    std::error_code ec;
    if (!fs::exists(file, ec)) throw std::runtime_error(file.string() + ": missing (see ../shared/data/README.md)");
    std::istringstream in(RegularFile(file).read_text());  // a FIFO or /dev/zero is refused, not read forever
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) paths.push_back(line);
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::vector<Item> items;
  for (const auto& p : paths) {
    std::string id = "sun8-" + p.substr(0, p.rfind('.'));
    std::replace(id.begin(), id.end(), '/', '-');
    items.push_back({id, (data / "sun8" / p).string(), {}});
  }
  return items;
}

void load_all(std::vector<Item>& items) {
  cv::parallel_for_(cv::Range(0, int(items.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) items[i].grey = load_grey(items[i].path);
  });
}

// A normalisation compared by --candidates: one of ours (texture::normalise) or an OpenCV baseline
// that only the eval applies (cv::equalizeHist; a local mean/std normalisation).
struct Candidate {
  std::string name;
  texture::Normalisation ours;  // when `baseline` is empty
  std::string baseline;         // "equalize", "localstd"
};

// Local mean/std normalisation: 128 + 40 (x - mean) / max(std, 4), mean and std over a Gaussian
// window of sigma 16 (a common alternative to CLAHE: every region gets the same contrast).
cv::Mat local_std(const cv::Mat& g) {
  cv::Mat f, mean, sq, var, out;
  g.convertTo(f, CV_32F);
  cv::GaussianBlur(f, mean, cv::Size(0, 0), 16);
  cv::GaussianBlur(f.mul(f), sq, cv::Size(0, 0), 16);
  var = sq - mean.mul(mean);
  cv::max(var, 16.0f, var);
  cv::sqrt(var, var);
  cv::Mat n = (f - mean) / var * 40 + 128;
  n.convertTo(out, CV_8U);
  return out;
}

std::vector<texture::Features> candidate_features(const std::vector<cv::Mat>& images, const Candidate& c) {
  if (c.baseline.empty()) {
    texture::FeatureParams p;
    p.normalisation = c.ours;
    return texture::extract_features_batch(images, p);
  }
  std::vector<cv::Mat> pre(images.size());
  cv::parallel_for_(cv::Range(0, int(images.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      // As extract_features does: the shrink of images over 1024 px first, then the normalisation.
      cv::Mat g = images[i];
      const int side = std::max(g.cols, g.rows);
      if (side > 1024) {
        const double scale = double(side) / 1024;
        cv::resize(g, g, cv::Size(int(g.cols / scale + 0.5), int(g.rows / scale + 0.5)), 0, 0, cv::INTER_AREA);
      }
      if (c.baseline == "equalize")
        cv::equalizeHist(g, pre[i]);
      else
        pre[i] = local_std(g);
    }
  });
  return texture::extract_features_batch(pre, {});
}

// Median and minimum of the keypoint counts.
std::pair<int, int> keypoint_median_min(const std::vector<texture::Features>& f) {
  std::vector<int> n;
  for (const auto& x : f) n.push_back(x.count());
  if (n.empty()) return {0, 0};
  std::sort(n.begin(), n.end());
  return {n[n.size() / 2], n.front()};
}

// One 1:1 decision's evidence (or the rank-1 result's, with query -1 when rank 1 is wrong).
struct Score {
  int query = 0, inliers = 0;
  double significance = 0;
};

struct Tally {
  int queries = 0, top1 = 0, identified = 0, genuine_accept = 0, impostor_pairs = 0, impostor_accept = 0;
  std::vector<Score> genuine, top1_best, impostor;
};

// One precision's index and everything measured on it.
struct PrecisionRun {
  std::string name;  // "8-bit", "FP16"
  std::string tag;   // "u8", "fp16" (csv, file names)
  std::unique_ptr<texture::TextureIndex> index;
  std::map<std::string, Tally> tally;
  std::vector<Score> open_set, all_genuine, all_impostor;
  std::vector<double> corner_error;  // Oxford queries
  double threshold = 0;
};

// --digest: slots of `rows` rows (in `order`) of `per_slot` products each, matched as one image; the rank
// of the genuine product's slot per query set.
struct DigestRun {
  int rows = 0, per_slot = 0;
  texture::DigestOrder order = texture::DigestOrder::kStrongest;
  std::unique_ptr<texture::TextureIndex> index;
  std::vector<int> slot_of;  // exact index position -> digest index position
  std::vector<int> keep;     // the Ks of "in the K best slots"
  struct Tally {
    int queries = 0, exact_first = 0, first = 0, kept = 0;
    std::vector<int> kept_top_keep;  // of those first exactly, in the keep[k] best
    std::vector<double> margin;      // the genuine slot's score over the best other slot's (+1 each)
  };
  std::map<std::string, Tally> tally;
};

// A product's digest: its first `rows` rows (fewer if it has fewer) in `order` (texture::digest_order).
std::vector<const uint8_t*> digest_rows_of(const texture::Features& p, texture::DigestOrder order, int rows) {
  const std::vector<int> taken = texture::digest_order(p, order, rows);
  std::vector<const uint8_t*> out;
  for (int r = 0; r < std::min(rows, p.count()); ++r)
    out.push_back(p.descriptors.data() + size_t(taken[r]) * match::kDim);
  return out;
}

// A slot of 768 rows of 255 (|g|^2 = 8.3 M against about 0.26 M for RootSIFT's rows: never a nearest
// neighbour), into which digests are copied; what is left stays padding.
texture::GalleryEntry padded_slot(std::string id, int width, int height) {
  texture::GalleryEntry e;
  e.id = std::move(id);
  e.features.width = width, e.features.height = height;
  e.features.keypoints.resize(match::kSlot);
  e.features.descriptors.assign(size_t(match::kSlot) * match::kDim, uint8_t(255));
  return e;
}

void put_row(texture::GalleryEntry& slot, int row, const uint8_t* descriptor) {
  std::copy_n(descriptor, match::kDim, slot.features.descriptors.begin() + size_t(row) * match::kDim);
}

// The digest entries: product p's digest at rows [p % per_slot * rows, ...) of slot p / per_slot ("digest-K").
std::vector<texture::GalleryEntry> digest_entries(const std::vector<texture::Features>& products, int rows,
                                                  texture::DigestOrder order) {
  const int per_slot = match::kSlot / rows;
  std::vector<texture::GalleryEntry> slots;
  for (size_t first = 0; first < products.size(); first += size_t(per_slot)) {
    texture::GalleryEntry e =
        padded_slot("digest-" + std::to_string(slots.size()), products[first].width, products[first].height);
    for (int k = 0; k < per_slot && first + k < products.size(); ++k) {
      const std::vector<const uint8_t*> digest = digest_rows_of(products[first + k], order, rows);
      for (size_t r = 0; r < digest.size(); ++r) put_row(e, k * rows + int(r), digest[r]);
    }
    slots.push_back(std::move(e));
  }
  return slots;
}

// --decoys: `decoys` images' digests, `rows` rows each drawn at random (with replacement) from the pool of the
// outsiders' digest rows, appended to `index` as slots of 768 / rows decoys ("decoy-K").
void add_decoys(texture::TextureIndex& index, const std::vector<texture::Features>& outsiders, int decoys, int rows,
                texture::DigestOrder order, unsigned seed) {
  if (decoys == 0) return;
  std::vector<const uint8_t*> pool;
  for (const texture::Features& f : outsiders) {
    const std::vector<const uint8_t*> digest = digest_rows_of(f, order, rows);
    pool.insert(pool.end(), digest.begin(), digest.end());
  }
  if (pool.empty()) throw std::runtime_error("--decoys: the photos not enrolled have no features (--impostors)");
  std::mt19937 rng(seed * 2654435761u + unsigned(rows));
  const int per_slot = match::kSlot / rows;
  const int slots = (decoys + per_slot - 1) / per_slot;
  Progress progress("eval decoys (" + std::to_string(rows) + " rows)", slots, true);
  for (int k = 0; k < slots; ++k) {
    texture::GalleryEntry e = padded_slot("decoy-" + std::to_string(k), 256, 256);
    const int filled = std::min(per_slot, decoys - k * per_slot) * rows;
    for (int r = 0; r < filled; ++r) put_row(e, r, pool[rng() % pool.size()]);
    index.add(e);
    progress.step();
  }
  progress.finish();
}

int accepted(const std::vector<Score>& v, double threshold, int parity = -1) {
  return int(std::count_if(v.begin(), v.end(), [&](const Score& s) {
    return s.query >= 0 && (parity < 0 || s.query % 2 == parity) && s.significance >= threshold;
  }));
}
int count_parity(const std::vector<Score>& v, int parity) {
  return int(std::count_if(v.begin(), v.end(), [&](const Score& s) { return s.query % 2 == parity; }));
}
// The smallest multiple of 0.1 at which at most 0.1% of `impostor` (of the given query parity) pass.
double calibrate(const std::vector<Score>& impostor, int parity = -1) {
  const int n = parity < 0 ? int(impostor.size()) : count_parity(impostor, parity);
  int t10 = 0;
  while (accepted(impostor, t10 / 10.0, parity) > 0.001 * n) ++t10;
  return t10 / 10.0;
}

// Histogram picture of genuine vs impostor significance (log counts) with the threshold.
cv::Mat score_plot(const std::vector<Score>& genuine, const std::vector<Score>& impostor, double threshold) {
  const int W = 900, H = 420, L = 60, B = 50, bins = 64;
  const double per_bin = 0.5;  // significance units per bin; the last bin takes everything above
  auto bin_of = [&](double v) { return std::clamp(int(v / per_bin), 0, bins - 1); };
  std::vector<double> hg(bins), hi(bins);
  for (const Score& s : genuine) hg[bin_of(s.significance)] += 1;
  for (const Score& s : impostor) hi[bin_of(s.significance)] += 1;
  for (auto* h : {&hg, &hi})
    for (double& c : *h) c = std::log10(1.0 + c);
  const double top = std::max(*std::max_element(hg.begin(), hg.end()), *std::max_element(hi.begin(), hi.end()));
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  const double bw = double(W - L - 20) / bins;
  for (int b = 0; b < bins; ++b) {
    const int x = L + int(b * bw);
    cv::rectangle(img, cv::Point(x, H - B - int(hi[b] / top * (H - B - 40))), cv::Point(x + int(bw) - 1, H - B),
                  cv::Scalar(60, 60, 220), cv::FILLED);
    cv::rectangle(img, cv::Point(x, H - B - int(hg[b] / top * (H - B - 40))), cv::Point(x + int(bw) - 1, H - B),
                  cv::Scalar(200, 120, 30), 2);
  }
  const int tx = L + int(threshold / per_bin * bw);
  cv::line(img, cv::Point(tx, 30), cv::Point(tx, H - B), cv::Scalar(0, 0, 0), 2);
  for (int v = 0; v <= 30; v += 5) {
    const int x = L + int(v / per_bin * bw);
    cv::putText(img, v == 30 ? "30+" : std::to_string(v), cv::Point(x, H - B + 20), cv::FONT_HERSHEY_SIMPLEX, 0.45,
                cv::Scalar(0, 0, 0), 1);
  }
  cv::putText(img,
              "significance -log10 P(chance); bars: log10(1 + pairs); blue outline: genuine 1:1, red: impostor; "
              "line: threshold " +
                  cv::format("%.1f", threshold),
              cv::Point(L, H - 12), cv::FONT_HERSHEY_SIMPLEX, 0.4, cv::Scalar(0, 0, 0), 1);
  cv::putText(img, "texture identification: significance of the RANSAC inliers", cv::Point(L, 22),
              cv::FONT_HERSHEY_SIMPLEX, 0.6, cv::Scalar(0, 0, 0), 1);
  return img;
}

}  // namespace

int texture_eval_command(int argc, char** argv) {
  fs::path data = "../shared/data", out = "texture-eval";
  int textures = 1000, impostors = 400;
  unsigned seed = 5;
  texture::Device device = texture::Device::kAuto;
  gpu::Device enrol_device = gpu::Device::kCpu, query_device = gpu::Device::kCpu;
  texture::Normalisation normalisation = texture::poor_light_normalisation();
  bool candidates = false;
  std::vector<int> digest_rows;
  std::vector<texture::DigestOrder> digest_orders;
  int decoys = 0;
  std::vector<int> digest_keep;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kEvalUsage, stdout);
        return 0;
      } else if (a == "--data")
        data = value();
      else if (a == "--out")
        out = value();
      else if (a == "--textures")
        textures = parse_int(a, value(), 1, 1000000);
      else if (a == "--impostors")
        impostors = parse_int(a, value(), 1, 1000000);
      else if (a == "--seed")  // any 32-bit seed
        seed = unsigned(parse_int64(a, value(), 0, UINT32_MAX));
      else if (a == "--device")
        device = parse_device(a, value());
      else if (a == "--enrol-device")
        enrol_device = parse_device(a, value());
      else if (a == "--query-device")
        query_device = parse_device(a, value());
      else if (a == "--precision") {
        const std::string p = value();
        if (p == "fp16" || p == "both")
          throw std::runtime_error("--precision " + p +
                                   ": the FP16 index was removed (8-bit is the product; docs/TEXTUREID.md keeps "
                                   "the side-by-side table); --precision u8");
        if (p != "u8") throw std::runtime_error("--precision takes u8, not '" + p + "'");
      } else if (a == "--normalise") {
        const std::string n = value();
        try {
          normalisation = texture::parse_normalisation(n);
        } catch (const std::invalid_argument& e) {
          throw std::runtime_error(std::string("--normalise: ") + e.what());
        }
      } else if (a == "--candidates")
        candidates = true;
      else if (a == "--digest") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) {
          const int rows = parse_int(a, item, 16, match::kSlot / 2);
          if (match::kSlot % rows != 0)
            throw std::runtime_error("--digest: " + item + " does not divide " + std::to_string(match::kSlot));
          digest_rows.push_back(rows);
        }
      } else if (a == "--decoys")
        decoys = parse_int(a, value(), 0, 100000000);
      else if (a == "--digest-keep") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) digest_keep.push_back(parse_int(a, item, 1, 100000000));
      } else if (a == "--digest-order") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) try {
            digest_orders.push_back(texture::parse_digest_order(item));
          } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string("--digest-order: ") + e.what());
          }
      } else
        throw std::runtime_error("unknown option '" + a + "'");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prism texture eval: error: %s\n\n%s", e.what(), kEvalUsage);
      return 2;
    }
  }
  if ((decoys > 0 || !digest_keep.empty()) && digest_rows.empty()) {
    std::fprintf(stderr, "prism texture eval: error: %s needs --digest\n\n%s",
                 decoys > 0 ? "--decoys" : "--digest-keep", kEvalUsage);
    return 2;
  }
  try {
    init_gstreamer();
    fs::create_directories(out);
    const auto t_start = Clock::now();
    std::vector<Item> sun = sun8_items(data);
    if (int(sun.size()) < textures + 1)
      throw std::runtime_error("sun8 has only " + std::to_string(sun.size()) + " photos");
    std::vector<Item> gallery(sun.begin(), sun.begin() + textures);
    std::vector<Item> outsiders(sun.begin() + textures, sun.begin() + std::min<int>(sun.size(), textures + impostors));
    for (const char* t : {"brick", "grass", "gravel"})
      gallery.push_back(
          {std::string("skimage-") + t, (data / "textures/skimage" / (std::string(t) + ".png")).string(), {}});
    const std::vector<std::string> sequences = {"bark", "bikes", "boat", "graf", "leuven", "trees", "ubc", "wall"};
    for (const auto& s : sequences)
      gallery.push_back({"oxford-" + s, (data / "oxford-affine" / s / "img1.png").string(), {}});
    std::fprintf(stderr, "eval: loading %zu gallery and %zu impostor images\n", gallery.size(), outsiders.size());
    load_all(gallery);
    load_all(outsiders);

    // Enrolment (features only; the gallery files are measured by `prism texture enroll`).
    texture::FeatureParams fparams;
    fparams.normalisation = normalisation;
    fparams.device = enrol_device;
    texture::FeatureParams qparams = fparams;  // every query, and the open-set impostors
    qparams.device = query_device;
    std::vector<cv::Mat> images;
    for (const auto& g : gallery) images.push_back(g.grey);
    // The synthetic queries of perturbation p: one per gallery image, seeded by (seed, p, image).
    auto perturbed = [&](int p) {
      std::vector<cv::Mat> queries(gallery.size());
      cv::parallel_for_(cv::Range(0, int(gallery.size())), [&](const cv::Range& r) {
        for (int i = r.start; i < r.end; ++i) {
          std::mt19937 rng(seed * 1000003u + unsigned(p) * 7919u + unsigned(i));
          queries[i] = perturb(gallery[i].grey, kPerturbations[p], rng);
        }
      });
      return queries;
    };
    std::ostringstream cand_md;  // the --candidates table, reported first
    if (candidates) {
      const std::vector<Candidate> cands = {
          {"none", texture::Normalisation{}, ""},
          {"equalizeHist (OpenCV)", {}, "equalize"},
          {"clahe-2-8", texture::parse_normalisation("clahe-2-8"), ""},
          {"clahe-4-8", texture::parse_normalisation("clahe-4-8"), ""},
          {"clahe-2-4", texture::parse_normalisation("clahe-2-4"), ""},
          {"clahe-3-16", texture::parse_normalisation("clahe-3-16"), ""},
          {"local mean/std (sigma 16)", {}, "localstd"},
      };
      const int np = int(std::size(kPerturbations));
      std::vector<std::vector<cv::Mat>> queries(np + 1);
      std::vector<std::vector<std::string>> truth(np + 1);  // product ids
      for (int p = 0; p < np; ++p) {
        queries[p] = perturbed(p);
        for (const auto& g : gallery) truth[p].push_back(g.id);
      }
      for (const auto& s : sequences)  // and the real re-captures: Oxford img2..6 against img1
        for (int k = 2; k <= 6; ++k) {
          queries[np].push_back(
              load_grey((data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()));
          truth[np].push_back("oxford-" + s);
        }
      texture::SearchParams sp;  // the defaults: identified = significance >= 3.6 as in production
      cand_md << "Contrast normalisations compared (--candidates): top-1 / identified at the default threshold "
              << cv::format("%.1f", sp.min_significance)
              << " (8-bit index), then the queries' keypoints (median, min):\n\n| normalisation |";
      for (int p = 0; p < np; ++p) cand_md << " " << kPerturbations[p] << " |";
      cand_md << " oxford-affine | **all** |\n|---|";
      for (int p = 0; p <= np + 1; ++p) cand_md << "---|";
      cand_md << "\n";
      for (const Candidate& c : cands) {
        std::fprintf(stderr, "eval: candidate %s\n", c.name.c_str());
        const std::vector<texture::Features> cf = candidate_features(images, c);
        std::vector<texture::GalleryEntry> ce;
        for (size_t i = 0; i < gallery.size(); ++i) ce.push_back({gallery[i].id, gallery[i].path, 0, cf[i]});
        texture::IndexOptions o;
        o.device = device;
        texture::TextureIndex index(o);
        index.build(ce);
        std::ostringstream kp;
        cand_md << "| " << c.name << " |";
        int all_top1 = 0, all_ident = 0, all_n = 0;
        for (int p = 0; p <= np; ++p) {
          const std::vector<texture::Features> qf = candidate_features(queries[p], c);
          int top1 = 0, ident = 0;
          Progress progress("candidate " + c.name + " " + (p < np ? kPerturbations[p] : "oxford-affine"),
                            int(qf.size()), true);
          for (size_t i = 0; i < qf.size(); ++i) {
            const texture::SearchResult r = index.search(qf[i], sp);
            const bool right = r.best.index == index.find(truth[p][i]);
            top1 += right;
            ident += right && r.identified;
            progress.step();
          }
          progress.finish();
          const auto [median, fewest] = keypoint_median_min(qf);
          cand_md << cv::format(" %.1f%% / %.1f%% (%d, %d) |", 100.0 * top1 / qf.size(), 100.0 * ident / qf.size(),
                                median, fewest);
          all_top1 += top1;
          all_ident += ident;
          all_n += int(qf.size());
        }
        const auto [gmedian, gfewest] = keypoint_median_min(cf);
        cand_md << cv::format(" %.1f%% / %.1f%% |", 100.0 * all_top1 / all_n, 100.0 * all_ident / all_n) << "\n";
        std::fprintf(stderr, "eval: candidate %s: top-1 %.1f%%, identified %.1f%%, gallery keypoints %d median\n",
                     c.name.c_str(), 100.0 * all_top1 / all_n, 100.0 * all_ident / all_n, gmedian);
        (void)gfewest;
      }
      cand_md << "\n";
    }
    auto t0 = Clock::now();
    const std::vector<texture::Features> gf = texture::extract_features_batch(images, fparams);
    const double enrol_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<texture::GalleryEntry> entries;
    double mean_features = 0;
    for (size_t i = 0; i < gallery.size(); ++i) {
      entries.push_back({gallery[i].id, gallery[i].path, 0, gf[i]});
      mean_features += gf[i].count() / double(gallery.size());
    }
    std::vector<PrecisionRun> runs;
    {
      PrecisionRun run;
      run.name = "8-bit";
      run.tag = "u8";
      texture::IndexOptions o;
      o.device = device;
      run.index = std::make_unique<texture::TextureIndex>(o);
      run.index->build(entries);
      runs.push_back(std::move(run));
    }
    // Both indexes were built from the same entries in the same order: entry positions agree.
    const texture::TextureIndex& first = *runs.front().index;
    std::vector<DigestRun> digests;
    if (digest_orders.empty()) digest_orders.push_back(texture::IndexOptions{}.digest_order);  // the index's
    // The outsiders' features per SIFT device (fparams and qparams differ in nothing else): the decoys' pool
    // (enrolment SIFT) and the open-set impostors (query SIFT) share one extraction when the devices agree.
    std::map<gpu::Device, std::vector<texture::Features>> outsider_cache;
    auto outsider_features = [&](const texture::FeatureParams& p) -> const std::vector<texture::Features>& {
      auto it = outsider_cache.find(p.device);
      if (it == outsider_cache.end()) {
        std::vector<cv::Mat> o;
        for (const auto& item : outsiders) o.push_back(item.grey);
        it = outsider_cache.emplace(p.device, texture::extract_features_batch(o, p)).first;
      }
      return it->second;
    };
    for (int rows : digest_rows)
      for (texture::DigestOrder order : digest_orders) {
        DigestRun d;
        d.rows = rows;
        d.per_slot = match::kSlot / rows;
        d.order = order;
        texture::IndexOptions o;
        o.device = device;
        d.index = std::make_unique<texture::TextureIndex>(o);
        d.index->build(digest_entries(gf, rows, order));
        for (size_t p = 0; p < entries.size(); ++p)
          d.slot_of.push_back(d.index->find("digest-" + std::to_string(p / size_t(d.per_slot))));
        if (decoys > 0) add_decoys(*d.index, outsider_features(fparams), decoys, rows, order, seed);
        d.keep = digest_keep;
        if (d.keep.empty()) d.keep.push_back(std::max<int>(1, int(d.index->size()) / 100));
        digests.push_back(std::move(d));
      }
    std::fprintf(
        stderr,
        "eval: %zu products enrolled (%.0f features each on average, %.1f images/s on %d threads), matching on %s\n",
        entries.size(), mean_features, gallery.size() / enrol_s, cv::getNumThreads(),
        first.device_description().c_str());

    texture::SearchParams params;
    params.min_inliers = 4;  // collect the raw evidence; the threshold is chosen below
    params.min_significance = 0;
    std::vector<std::string> order;
    struct QueryStats {
      int dark = 0;                   // captures with a mean grey under 40
      std::pair<int, int> keypoints;  // median, min
    };
    std::map<std::string, QueryStats> query_stats;
    std::ofstream csv(out / "scores.csv");
    csv << "precision,set,query,true_id,kind,claimed_id,inliers,matches,significance\n";
    std::mt19937 pick(seed * 7919u);
    // Every query against every precision's index, with the same impostor claims.
    auto run_queries = [&](const std::string& set, const std::vector<cv::Mat>& queries, const std::vector<int>& truth) {
      order.push_back(set);
      const std::vector<texture::Features> qf = texture::extract_features_batch(queries, qparams);
      QueryStats& qs = query_stats[set];
      for (const cv::Mat& q : queries) qs.dark += cv::mean(q)[0] < 40;
      qs.keypoints = keypoint_median_min(qf);
      std::vector<std::array<int, 3>> claims(queries.size());
      for (size_t q = 0; q < queries.size(); ++q)
        for (int& other : claims[q]) {
          other = int(pick() % first.size());
          if (other == truth[q]) other = (other + 1) % int(first.size());
        }
      // --digest: ranks by ratio-test score (ties counted against the genuine one).
      auto rank = [](const std::vector<int>& s, int i) {
        int r = 1;
        for (size_t j = 0; j < s.size(); ++j) r += int(j) != i && s[j] >= s[i];
        return r;
      };
      Progress digest_progress("eval " + set + " digests", int(queries.size()), decoys > 0 && !digests.empty());
      for (size_t q = 0; q < queries.size() && !digests.empty(); ++q) {
        const int exact = rank(runs.front().index->scores(qf[q], params), truth[q]);
        for (DigestRun& d : digests) {
          const std::vector<int> s = d.index->scores(qf[q], params);
          const int r = rank(s, d.slot_of[truth[q]]);
          const auto [at, fresh] = d.tally.try_emplace(set);
          DigestRun::Tally& t = at->second;
          if (fresh) t.kept_top_keep.assign(d.keep.size(), 0);
          ++t.queries;
          t.exact_first += exact == 1;
          t.first += r == 1;
          t.kept += exact == 1 && r == 1;
          for (size_t k = 0; k < d.keep.size(); ++k) t.kept_top_keep[k] += exact == 1 && r <= d.keep[k];
          int other = 0;
          for (size_t j = 0; j < s.size(); ++j)
            if (int(j) != d.slot_of[truth[q]]) other = std::max(other, s[j]);
          t.margin.push_back((s[d.slot_of[truth[q]]] + 1.0) / (other + 1.0));
        }
        digest_progress.step();
      }
      digest_progress.finish();
      for (PrecisionRun& run : runs) {
        texture::TextureIndex& index = *run.index;
        Tally& t = run.tally[set];
        Progress progress("eval " + set + " " + run.tag, int(queries.size()), true);
        for (size_t q = 0; q < queries.size(); ++q) {
          const int true_index = truth[q];
          const texture::SearchResult r = index.search(qf[q], params);
          ++t.queries;
          const bool top1 = r.best.index == true_index;
          t.top1 += top1;
          t.top1_best.push_back({top1 ? int(q) : -1, r.best.geometry.inliers, r.best.significance});
          const texture::SearchResult g = index.verify(qf[q], index.ids()[true_index], params);
          t.genuine.push_back({int(q), g.best.geometry.inliers, g.best.significance});
          csv << run.tag << "," << set << "," << q << "," << index.ids()[true_index] << ",genuine,"
              << index.ids()[true_index] << "," << g.best.geometry.inliers << "," << g.best.geometry.matches << ","
              << g.best.significance << "\n";
          for (int other : claims[q]) {
            const texture::SearchResult im = index.verify(qf[q], index.ids()[other], params);
            t.impostor.push_back({int(q), im.best.geometry.inliers, im.best.significance});
            csv << run.tag << "," << set << "," << q << "," << index.ids()[true_index] << ",impostor,"
                << index.ids()[other] << "," << im.best.geometry.inliers << "," << im.best.geometry.matches << ","
                << im.best.significance << "\n";
          }
          progress.step();
        }
        progress.finish();
      }
    };

    for (int p = 0; p < int(std::size(kPerturbations)); ++p) {
      std::vector<int> truth(gallery.size());
      for (size_t i = 0; i < gallery.size(); ++i) truth[i] = first.find(gallery[i].id);
      run_queries(kPerturbations[p], perturbed(p), truth);
    }
    // Oxford: real re-captures, img2..6 against img1, with the recovered homography checked.
    std::vector<cv::Mat> oxq;
    std::vector<int> oxt;
    std::vector<cv::Matx33d> oxh;
    std::vector<std::string> oxname;
    for (const auto& s : sequences) {
      for (int k = 2; k <= 6; ++k) {
        oxq.push_back(load_grey((data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()));
        oxt.push_back(first.find("oxford-" + s));
        cv::FileStorage fsr((data / "oxford-affine" / s / ("H1to" + std::to_string(k) + "p.xml")).string(),
                            cv::FileStorage::READ);
        cv::Mat h;
        if (fsr.isOpened()) fsr.getFirstTopLevelNode() >> h;  // the node is named H12, H13, ...
        if (h.empty()) throw std::runtime_error(s + ": cannot read H1to" + std::to_string(k) + "p.xml");
        h.convertTo(h, CV_64F);
        oxh.push_back(cv::Matx33d(h.ptr<double>()));
        oxname.push_back(s + "/img" + std::to_string(k));
      }
    }
    run_queries("oxford-affine", oxq, oxt);
    // Corner error of the recovered query->gallery homography against the ground truth (img1->imgN).
    const std::vector<texture::Features> oxf = texture::extract_features_batch(oxq, qparams);
    for (PrecisionRun& run : runs) {
      run.corner_error.assign(oxq.size(), -1);
      for (size_t q = 0; q < oxq.size(); ++q) {
        const texture::SearchResult r = run.index->verify(oxf[q], run.index->ids()[oxt[q]], params);
        if (r.best.geometry.inliers < 4) continue;
        const cv::Matx33d gt_inv = oxh[q].inv();  // imgN -> img1
        double worst = 0;
        for (cv::Point2d c : {cv::Point2d(0, 0), cv::Point2d(oxq[q].cols, 0), cv::Point2d(oxq[q].cols, oxq[q].rows),
                              cv::Point2d(0, oxq[q].rows)}) {
          const cv::Vec3d a = r.best.geometry.homography * cv::Vec3d(c.x, c.y, 1), b = gt_inv * cv::Vec3d(c.x, c.y, 1);
          worst = std::max(worst, cv::norm(cv::Point2d(a[0] / a[2] - b[0] / b[2], a[1] / a[2] - b[1] / b[2])));
        }
        run.corner_error[q] = worst;
      }
    }
    // Open-set impostors: photos never enrolled; their best candidate's evidence.
    {
      const std::vector<texture::Features>& qf = outsider_features(qparams);
      for (PrecisionRun& run : runs)
        for (size_t i = 0; i < qf.size(); ++i) {
          const texture::SearchResult r = run.index->search(qf[i], params);
          run.open_set.push_back({int(i), r.best.geometry.inliers, r.best.significance});
          csv << run.tag << ",open-set," << i << ",none,open-set-best," << (r.best.index >= 0 ? r.best.id : "none")
              << "," << r.best.geometry.inliers << "," << r.best.geometry.matches << "," << r.best.significance << "\n";
        }
    }

    // Threshold per precision, by the same rule: the smallest 0.1 step of significance whose 1:1
    // impostor accept rate is at most 0.1%.
    for (PrecisionRun& run : runs) {
      for (const auto& [name, t] : run.tally) {
        run.all_genuine.insert(run.all_genuine.end(), t.genuine.begin(), t.genuine.end());
        run.all_impostor.insert(run.all_impostor.end(), t.impostor.begin(), t.impostor.end());
      }
      run.threshold = calibrate(run.all_impostor);
    }

    // Ratio-test decisions on real pairs of one surface against the FP32 reference.
    struct PairSet {
      std::string name;
      std::vector<std::pair<std::string, std::string>> pairs;  // (gallery, query) paths
    };
    std::vector<PairSet> pair_sets;
    for (const auto& s : sequences) {
      PairSet set{"oxford " + s, {}};
      for (int k = 2; k <= 6; ++k)
        set.pairs.push_back({(data / "oxford-affine" / s / "img1.png").string(),
                             (data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()});
      pair_sets.push_back(set);
    }
    {
      const fs::path kth = data / "textures/kth-tips-gray";
      if (!fs::is_directory(kth))
        throw std::runtime_error(kth.string() + ": missing (KTH-TIPS, see ../shared/data/README.md)");
      PairSet set{"KTH-TIPS", {}};
      std::vector<fs::path> materials;
      for (const auto& d : fs::directory_iterator(kth))
        if (d.is_directory()) materials.push_back(d.path());
      std::sort(materials.begin(), materials.end());
      for (const fs::path& m : materials) {
        // Files are <sample>-scale_5_im_<k>_grey.png: one sample's 3 poses x 3 illuminations at scale 5.
        std::map<int, std::string> by_k;
        for (const auto& f : fs::directory_iterator(m)) {
          const std::string n = f.path().filename().string();
          const size_t at = n.find("scale_5_im_");
          if (at != std::string::npos) by_k[std::atoi(n.c_str() + at + 11)] = f.path().string();
        }
        if (by_k.size() < 2 || !by_k.count(1)) throw std::runtime_error(m.string() + ": no scale_5_im_1..9 images");
        for (const auto& [k, path] : by_k)
          if (k != 1) set.pairs.push_back({by_k.at(1), path});
      }
      pair_sets.push_back(set);
    }
    std::vector<std::vector<texture::DecisionDiff>> pair_diffs(pair_sets.size(),
                                                               std::vector<texture::DecisionDiff>(runs.size()));
    std::vector<int> reference_passes(pair_sets.size(), 0);
    {
      texture::FeatureParams dparams = fparams;
      dparams.keep_fp32 = true;
      texture::FeatureParams dqparams = dparams;
      dqparams.device = query_device;
      for (size_t si = 0; si < pair_sets.size(); ++si) {
        Progress progress("decisions " + pair_sets[si].name, int(pair_sets[si].pairs.size()), true);
        for (const auto& [gpath, qpath] : pair_sets[si].pairs) {
          const texture::Features g = texture::extract_features(load_grey(gpath), dparams);
          const texture::Features q = texture::extract_features(load_grey(qpath), dqparams);
          const float ratio = params.ratio;
          const auto ref = texture::reference_decisions(q.descriptors_fp32.data(), q.count(), g.descriptors_fp32.data(),
                                                        g.count(), ratio);
          for (const auto& d : ref) reference_passes[si] += d.pass;
          for (size_t k = 0; k < runs.size(); ++k) {
            const auto other =
                texture::u8_decisions(q.descriptors.data(), q.count(), g.descriptors.data(), g.count(), ratio);
            pair_diffs[si][k] += texture::compare_decisions(ref, other);
          }
          progress.step();
        }
        progress.finish();
      }
    }

    // ---- the report ----
    const bool both = runs.size() > 1;
    auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
    std::ostringstream md;
    md << "| queries | n |";
    for (const char* col :
         {"top-1 (rank 1)", "identified at threshold", "TAR (1:1 genuine accepted)", "FAR (1:1 impostors accepted)"})
      for (const auto& run : runs) md << " " << col << (both ? " " + run.name : "") << " |";
    md << "\n|---|---|";
    for (size_t c = 0; c < 4 * runs.size(); ++c) md << "---|";
    md << "\n";
    std::vector<Tally> total(runs.size());
    // Where the precisions differ in identification at their thresholds: (set, 8-bit - FP16) in queries.
    std::vector<std::pair<std::string, int>> ident_delta;
    for (const auto& name : order) {
      md << "| " << name << " | " << runs.front().tally.at(name).queries << " |";
      std::vector<int> ident(runs.size()), tar(runs.size()), far(runs.size());
      for (size_t k = 0; k < runs.size(); ++k) {
        const Tally& t = runs[k].tally.at(name);
        ident[k] = accepted(t.top1_best, runs[k].threshold);
        tar[k] = accepted(t.genuine, runs[k].threshold);
        far[k] = accepted(t.impostor, runs[k].threshold);
        total[k].queries += t.queries;
        total[k].top1 += t.top1;
        total[k].identified += ident[k];
        total[k].genuine_accept += tar[k];
        total[k].impostor_accept += far[k];
        total[k].impostor_pairs += int(t.impostor.size());
      }
      for (const auto& run : runs)
        md << cv::format(" %.1f%% |", pct(run.tally.at(name).top1, run.tally.at(name).queries));
      for (size_t k = 0; k < runs.size(); ++k)
        md << cv::format(" %.1f%% |", pct(ident[k], runs[k].tally.at(name).queries));
      for (size_t k = 0; k < runs.size(); ++k)
        md << cv::format(" %.1f%% |", pct(tar[k], runs[k].tally.at(name).queries));
      for (size_t k = 0; k < runs.size(); ++k)
        md << cv::format(" %.3f%% (%d/%zu) |", pct(far[k], runs[k].tally.at(name).impostor.size()), far[k],
                         runs[k].tally.at(name).impostor.size());
      md << "\n";
      if (both && ident[0] != ident[1]) ident_delta.push_back({name, ident[0] - ident[1]});
    }
    md << "| **all** | " << total.front().queries << " |";
    for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.top1, t.queries));
    for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.identified, t.queries));
    for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.genuine_accept, t.queries));
    for (const auto& t : total)
      md << cv::format(" %.3f%% (%d/%d) |", pct(t.impostor_accept, t.impostor_pairs), t.impostor_accept,
                       t.impostor_pairs);
    md << "\n";
    if (both) {
      md << "\n8-bit against FP16, each at its own calibrated threshold: ";
      if (ident_delta.empty()) {
        md << "identical identification in every query set";
      } else {
        md << "identified queries differ in ";
        for (size_t i = 0; i < ident_delta.size(); ++i)
          md << (i ? ", " : "") << ident_delta[i].first << " (" << (ident_delta[i].second > 0 ? "8-bit +" : "FP16 +")
             << std::abs(ident_delta[i].second) << ")";
      }
      const int d = total[0].identified - total[1].identified;
      md << "; over all " << total[0].queries << " queries "
         << (d == 0 ? std::string("the same count")
                    : (d > 0 ? "8-bit identifies " : "FP16 identifies ") + std::to_string(std::abs(d)) + " more")
         << cv::format(" (8-bit %d, FP16 %d; TAR %.2f%% vs %.2f%%).\n", total[0].identified, total[1].identified,
                       pct(total[0].genuine_accept, total[0].queries), pct(total[1].genuine_accept, total[1].queries));
    }
    md << "\nHeld out (threshold calibrated on half of the queries, rates measured on the other half):\n\n"
       << (both ? "| precision " : "") << "| calibrated on | threshold | TAR | FAR |\n"
       << (both ? "|---" : "") << "|---|---|---|---|\n";
    for (const auto& run : runs)
      for (int parity = 0; parity < 2; ++parity) {
        const double thr = calibrate(run.all_impostor, parity);
        const int other = 1 - parity;
        md << (both ? "| " + run.name + " " : "")
           << cv::format("| %s queries | %.1f | %.2f%% | %.3f%% |\n", parity ? "odd" : "even", thr,
                         pct(accepted(run.all_genuine, thr, other), count_parity(run.all_genuine, other)),
                         pct(accepted(run.all_impostor, thr, other), count_parity(run.all_impostor, other)));
      }
    for (const auto& run : runs) {  // The same rule on the bare inlier count, for comparison.
      int min_inliers = 4;
      auto passing = [&](const std::vector<Score>& v) {
        return int(std::count_if(v.begin(), v.end(), [&](const Score& s) { return s.inliers >= min_inliers; }));
      };
      while (passing(run.all_impostor) > 0.001 * run.all_impostor.size()) ++min_inliers;
      md << cv::format(
          "\n%sDeciding on the inlier count alone instead: threshold %d inliers, TAR %.2f%% at FAR %.3f%%.\n",
          both ? (run.name + ": ").c_str() : "", min_inliers, pct(passing(run.all_genuine), run.all_genuine.size()),
          pct(passing(run.all_impostor), run.all_impostor.size()));
    }
    std::ostringstream head;
    head << "Gallery: " << entries.size() << " products (" << textures
         << " sun8 photos, 3 skimage textures, 8 Oxford img1); "
         << "mean " << int(mean_features + 0.5) << " RootSIFT features each, contrast normalisation "
         << normalisation.name() << " at enrolment and query. SIFT: " << sift_name(enrol_device) << " at enrolment, "
         << sift_name(query_device) << " for the queries. Matching on " << first.device_description()
         << ". Threshold (min significance, smallest 0.1 step with 1:1 FAR <= 0.1%, calibrated per precision by "
            "the same rule):";
    for (const auto& run : runs) head << " " << run.name << " **" << cv::format("%.1f", run.threshold) << "**";
    head << ".\n\n";
    md << "\nOpen-set (1:M) impostors: " << outsiders.size() << " sun8 photos never enrolled; identified as some "
       << "product at the threshold:";
    for (const auto& run : runs) {
      const int open_accept = accepted(run.open_set, run.threshold);
      md << " " << run.name << " " << open_accept << cv::format(" (%.1f%%)", pct(open_accept, run.open_set.size()));
    }
    md << ".\n\nOxford-affine (img1 enrolled; rank-1 result, max corner error of the recovered homography vs the "
          "ground truth):\n\n| query |";
    for (const char* col : {"top-1 id", "inliers", "significance", "corner error px"})
      for (const auto& run : runs) md << " " << col << (both ? " " + run.name : "") << " |";
    md << "\n|---|";
    for (size_t c = 0; c < 4 * runs.size(); ++c) md << "---|";
    md << "\n";
    for (size_t q = 0; q < oxname.size(); ++q) {
      md << "| " << oxname[q] << " |";
      for (auto& run : runs) md << (run.tally.at("oxford-affine").top1_best[q].query >= 0 ? " correct |" : " WRONG |");
      for (auto& run : runs) md << " " << run.tally.at("oxford-affine").genuine[q].inliers << " |";
      for (auto& run : runs) md << cv::format(" %.1f |", run.tally.at("oxford-affine").genuine[q].significance);
      for (auto& run : runs)
        md << " " << (run.corner_error[q] >= 0 ? cv::format("%.1f", run.corner_error[q]) : std::string("-")) << " |";
      md << "\n";
    }
    md << "\nRatio-test decisions on real pairs of one surface, against the FP32 reference (RootSIFT in float, "
          "squared distances in double, ratio "
       << cv::format("%.2f", params.ratio)
       << "): per query descriptor, pass or fail and its nearest gallery descriptor. A decision differs when it "
          "flips, or when both pass with another nearest. Oxford: img1 against img2..6; KTH-TIPS: each material's "
          "scale-5 image 1 against images 2..9 (other poses and lights).\n\n"
       << "| pairs | n | query descriptors | FP32 passes |";
    for (const auto& run : runs) md << " " << run.name << " differ: of all, of FP32 passes (flips + other nearest) |";
    md << "\n|---|---|---|---|";
    for (size_t k = 0; k < runs.size(); ++k) md << "---|";
    md << "\n";
    std::vector<texture::DecisionDiff> all_diff(runs.size());
    int all_passes = 0;
    size_t all_pairs = 0;
    // The share of all query descriptors, then of the FP32 passes (the matches that count).
    auto diff_cell = [&](const texture::DecisionDiff& d, int passes) {
      return cv::format(" %.3f%%, %.2f%% of passes (%d + %d) |", pct(d.differ(), d.rows), pct(d.differ(), passes),
                        d.flips, d.other_nearest);
    };
    for (size_t si = 0; si < pair_sets.size(); ++si) {
      md << "| " << pair_sets[si].name << " | " << pair_sets[si].pairs.size() << " | " << pair_diffs[si][0].rows
         << " | " << reference_passes[si] << " |";
      for (size_t k = 0; k < runs.size(); ++k) {
        md << diff_cell(pair_diffs[si][k], reference_passes[si]);
        all_diff[k] += pair_diffs[si][k];
      }
      md << "\n";
      all_passes += reference_passes[si];
      all_pairs += pair_sets[si].pairs.size();
    }
    md << "| **all** | " << all_pairs << " | " << all_diff[0].rows << " | " << all_passes << " |";
    for (const auto& d : all_diff) md << diff_cell(d, all_passes);
    md << "\n";
    const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    md << "\nEvaluation time " << int(total_s) << " s on " << cv::getNumThreads()
       << " threads; enrolment (decode excluded) " << cv::format("%.1f", gallery.size() / enrol_s) << " images/s.\n";
    md << "\nThe queries (normalisation " << normalisation.name()
       << "): captures with a mean grey under 40, and keypoints per query.\n\n"
       << "| queries | n | mean grey < 40 | keypoints median | keypoints min |\n|---|---|---|---|---|\n";
    for (const auto& name : order) {
      const QueryStats& q = query_stats.at(name);
      const int n = runs.front().tally.at(name).queries;
      md << "| " << name << " | " << n << cv::format(" | %.1f%% (%d) | ", pct(q.dark, n), q.dark) << q.keypoints.first
         << " | " << q.keypoints.second << " |\n";
    }
    for (const DigestRun& d : digests) {
      const int slots = int(d.index->size());
      md << "\nDigest prefilter (--digest " << d.rows << " --digest-order " << texture::digest_order_name(d.order)
         << "): " << d.per_slot << " products' " << d.rows << " rows per slot, " << slots << " slots";
      if (decoys > 0)
        md << " (" << decoys << " decoys' digests in " << (decoys + d.per_slot - 1) / d.per_slot << " of them)";
      md << "; ranks by ratio-test score, ties against the genuine.\n\n"
         << "| queries | n | exact: genuine product first | digest: its slot first | of those first exactly, first by "
            "digest |";
      for (int k : d.keep) md << " of those first exactly, in the best " << k << " |";
      md << " margin: genuine / best other slot, median (10th percentile) |\n|---|---|---|---|---|";
      for (size_t k = 0; k < d.keep.size(); ++k) md << "---|";
      md << "---|\n";
      auto margins = [](std::vector<double> v) {
        if (v.empty()) return std::string(" - |");
        std::sort(v.begin(), v.end());
        return cv::format(" %.1f (%.1f) |", v[v.size() / 2], v[v.size() / 10]);
      };
      auto row = [&](const std::string& name, const DigestRun::Tally& t) {
        md << "| " << name << " | " << t.queries
           << cv::format(" | %.1f%% | %.1f%% | %.1f%% |", pct(t.exact_first, t.queries), pct(t.first, t.queries),
                         pct(t.kept, t.exact_first));
        for (size_t k = 0; k < d.keep.size(); ++k)
          md << cv::format(" %.1f%% |", pct(t.kept_top_keep[k], t.exact_first));
        md << margins(t.margin) << "\n";
      };
      DigestRun::Tally all;
      all.kept_top_keep.assign(d.keep.size(), 0);
      for (const auto& name : order) {
        const DigestRun::Tally& t = d.tally.at(name);
        row(name, t);
        all.queries += t.queries, all.exact_first += t.exact_first, all.first += t.first, all.kept += t.kept;
        for (size_t k = 0; k < t.kept_top_keep.size(); ++k) all.kept_top_keep[k] += t.kept_top_keep[k];
        all.margin.insert(all.margin.end(), t.margin.begin(), t.margin.end());
      }
      row("**all**", all);
      std::fprintf(stderr,
                   "eval: digest %d rows, %s, %d slots: the genuine slot first for %.1f%% of %d queries (%.1f%% of "
                   "those first exactly; exact: %.1f%%)",
                   d.rows, texture::digest_order_name(d.order), slots, pct(all.first, all.queries), all.queries,
                   pct(all.kept, all.exact_first), pct(all.exact_first, all.queries));
      for (size_t k = 0; k < d.keep.size(); ++k)
        std::fprintf(stderr, "; in the best %d: %.1f%%", d.keep[k], pct(all.kept_top_keep[k], all.exact_first));
      std::fprintf(stderr, " of those first exactly\n");
    }
    const std::string report = cand_md.str() + head.str() + md.str();
    std::ofstream(out / "texture-eval.md") << report;
    // significance.png for the first precision (8-bit unless only FP16 ran), significance-TAG.png for the others.
    for (size_t k = 0; k < runs.size(); ++k)
      write_png(score_plot(runs[k].all_genuine, runs[k].all_impostor, runs[k].threshold),
                (out / (k == 0 ? std::string("significance.png") : "significance-" + runs[k].tag + ".png")).string());
    std::fputs(report.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture eval: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
