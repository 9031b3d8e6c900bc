// prism texture eval: the accuracy evaluation of texture identification (issue 5).
//
// Gallery: the first N sun8 scene photos (sorted by path), skimage's brick/grass/gravel and img1 of
// the 8 Oxford affine sequences, each one product. Queries are synthetic re-captures of every
// gallery photo (one per perturbation, fixed seed): viewpoint (random homography), illumination
// (gain, offset, gradient), gamma, 30% occlusion, blur, noise, JPEG, and all of them mildly at once;
// plus the real viewpoint/light/blur/JPEG changes of Oxford img2..6 (their ground-truth homographies
// check the recovered geometry). Impostors: for 1:1, each query against 3 random other products;
// for 1:M, the sun8 photos that were not enrolled.
//
// The decision threshold on the inliers' significance (texture::chance_significance) is the
// smallest multiple of 0.1 at which the 1:1 impostor accept rate is at most 0.1%; reported per
// perturbation: top-1 identification (rank 1 correct), top-1 identified at the threshold, TAR
// (genuine 1:1 accepted) and FAR; then the same rule held out (calibrated on half the queries,
// measured on the other half) and, for comparison, the rule on the bare inlier count.
#include <opencv2/calib3d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gst_setup.h"
#include "texture/index.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kEvalUsage =
    "usage: prism texture eval [--data DIR] [--out DIR] [--textures N] [--impostors N] [--device D] [--seed S]\n"
    "\n"
    "  --data DIR       ../shared/data (sun8/, textures/skimage/, oxford-affine/)\n"
    "  --out DIR        where texture-eval.md, scores.csv and significance.png go (default texture-eval)\n"
    "  --textures N     sun8 photos enrolled (default 1000)\n"
    "  --impostors N    sun8 photos not enrolled, searched as open-set impostors (default 400)\n"
    "  --device D       auto, cpu or cuda (the CPU matcher is slow for large galleries)\n";

struct Item {
  std::string id, path;
  cv::Mat grey;
};

const char* const kPerturbations[] = {"viewpoint", "illumination", "gamma", "occlusion30",
                                      "blur",      "noise",        "jpeg",  "combined"};

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

cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat f, out;
  if (kind == "viewpoint") return warp_viewpoint(g, rng, 1.0);
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
  if (kind == "occlusion30") {  // a rectangle of 30% of the area, filled with noise
    out = g.clone();
    const double aspect = 0.5 + u(rng);
    const int w = std::min(g.cols, int(std::sqrt(0.3 * g.total() * aspect))),
              h = std::min(g.rows, int(0.3 * g.total() / w));
    const int x = int(u(rng) * (g.cols - w)), y = int(u(rng) * (g.rows - h));
    cv::Mat block = out(cv::Rect(x, y, w, h));
    cv::randu(block, 0, 256);
    cv::GaussianBlur(block, block, cv::Size(0, 0), 3);
    return out;
  }
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
    std::ifstream in(data / "sun8" / list);
    if (!in) throw std::runtime_error((data / "sun8" / list).string() + ": missing (see ../shared/data/README.md)");
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

std::vector<texture::Features> features_of(const std::vector<cv::Mat>& images) {
  std::vector<texture::Features> out(images.size());
  cv::parallel_for_(cv::Range(0, int(images.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) out[i] = texture::extract_features(images[i]);
  });
  return out;
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
        textures = std::stoi(value());
      else if (a == "--impostors")
        impostors = std::stoi(value());
      else if (a == "--seed")
        seed = unsigned(std::stoul(value()));
      else if (a == "--device") {
        const std::string d = value();
        device = d == "cpu" ? texture::Device::kCpu : d == "cuda" ? texture::Device::kCuda : texture::Device::kAuto;
      } else
        throw std::runtime_error("unknown option '" + a + "'");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prism texture eval: error: %s\n\n%s", e.what(), kEvalUsage);
      return 2;
    }
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
    std::vector<cv::Mat> images;
    for (const auto& g : gallery) images.push_back(g.grey);
    auto t0 = Clock::now();
    const std::vector<texture::Features> gf = features_of(images);
    const double enrol_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<texture::GalleryEntry> entries;
    double mean_features = 0;
    for (size_t i = 0; i < gallery.size(); ++i) {
      entries.push_back({gallery[i].id, gallery[i].path, 0, gf[i]});
      mean_features += gf[i].count() / double(gallery.size());
    }
    texture::TextureIndex index(device);
    index.build(entries);
    std::fprintf(
        stderr,
        "eval: %zu products enrolled (%.0f features each on average, %.1f images/s on %d threads), matching on %s\n",
        entries.size(), mean_features, gallery.size() / enrol_s, cv::getNumThreads(),
        index.device_description().c_str());

    texture::SearchParams params;
    params.min_inliers = 4;  // collect the raw evidence; the threshold is chosen below
    params.min_significance = 0;
    std::map<std::string, Tally> tally;
    std::vector<std::string> order;
    std::ofstream csv(out / "scores.csv");
    csv << "set,query,true_id,kind,claimed_id,inliers,matches,significance\n";
    std::mt19937 pick(seed * 7919u);
    auto run_queries = [&](const std::string& set, const std::vector<cv::Mat>& queries, const std::vector<int>& truth) {
      order.push_back(set);
      Tally& t = tally[set];
      const std::vector<texture::Features> qf = features_of(queries);
      Progress progress("eval " + set, int(queries.size()), true);
      for (size_t q = 0; q < queries.size(); ++q) {
        const int true_index = truth[q];
        const texture::SearchResult r = index.search(qf[q], params);
        ++t.queries;
        const bool top1 = r.best.index == true_index;
        t.top1 += top1;
        t.top1_best.push_back({top1 ? int(q) : -1, r.best.geometry.inliers, r.best.significance});
        const texture::SearchResult g = index.verify(qf[q], index.ids()[true_index], params);
        t.genuine.push_back({int(q), g.best.geometry.inliers, g.best.significance});
        csv << set << "," << q << "," << index.ids()[true_index] << ",genuine," << index.ids()[true_index] << ","
            << g.best.geometry.inliers << "," << g.best.geometry.matches << "," << g.best.significance << "\n";
        for (int k = 0; k < 3; ++k) {
          int other = int(pick() % index.size());
          if (other == true_index) other = (other + 1) % int(index.size());
          const texture::SearchResult im = index.verify(qf[q], index.ids()[other], params);
          t.impostor.push_back({int(q), im.best.geometry.inliers, im.best.significance});
          csv << set << "," << q << "," << index.ids()[true_index] << ",impostor," << index.ids()[other] << ","
              << im.best.geometry.inliers << "," << im.best.geometry.matches << "," << im.best.significance << "\n";
        }
        progress.step();
      }
      progress.finish();
    };

    for (int p = 0; p < int(std::size(kPerturbations)); ++p) {
      std::vector<cv::Mat> queries(gallery.size());
      std::vector<int> truth(gallery.size());
      cv::parallel_for_(cv::Range(0, int(gallery.size())), [&](const cv::Range& r) {
        for (int i = r.start; i < r.end; ++i) {
          std::mt19937 rng(seed * 1000003u + unsigned(p) * 7919u + unsigned(i));
          queries[i] = perturb(gallery[i].grey, kPerturbations[p], rng);
          truth[i] = index.find(gallery[i].id);
        }
      });
      run_queries(kPerturbations[p], queries, truth);
    }
    // Oxford: real re-captures, img2..6 against img1, with the recovered homography checked.
    std::vector<cv::Mat> oxq;
    std::vector<int> oxt;
    std::vector<cv::Matx33d> oxh;
    std::vector<std::string> oxname;
    for (const auto& s : sequences) {
      for (int k = 2; k <= 6; ++k) {
        oxq.push_back(load_grey((data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()));
        oxt.push_back(index.find("oxford-" + s));
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
    std::vector<double> corner_error(oxq.size(), -1);
    {
      const std::vector<texture::Features> qf = features_of(oxq);
      for (size_t q = 0; q < oxq.size(); ++q) {
        const texture::SearchResult r = index.verify(qf[q], index.ids()[oxt[q]], params);
        if (r.best.geometry.inliers < 4) continue;
        const cv::Matx33d gt_inv = oxh[q].inv();  // imgN -> img1
        double worst = 0;
        for (cv::Point2d c : {cv::Point2d(0, 0), cv::Point2d(oxq[q].cols, 0), cv::Point2d(oxq[q].cols, oxq[q].rows),
                              cv::Point2d(0, oxq[q].rows)}) {
          const cv::Vec3d a = r.best.geometry.homography * cv::Vec3d(c.x, c.y, 1), b = gt_inv * cv::Vec3d(c.x, c.y, 1);
          worst = std::max(worst, cv::norm(cv::Point2d(a[0] / a[2] - b[0] / b[2], a[1] / a[2] - b[1] / b[2])));
        }
        corner_error[q] = worst;
      }
    }
    // Open-set impostors: photos never enrolled; their best candidate's evidence.
    std::vector<Score> open_set;
    {
      std::vector<cv::Mat> q;
      for (const auto& o : outsiders) q.push_back(o.grey);
      const std::vector<texture::Features> qf = features_of(q);
      for (size_t i = 0; i < qf.size(); ++i) {
        const texture::SearchResult r = index.search(qf[i], params);
        open_set.push_back({int(i), r.best.geometry.inliers, r.best.significance});
        csv << "open-set," << i << ",none,open-set-best," << (r.best.index >= 0 ? r.best.id : "none") << ","
            << r.best.geometry.inliers << "," << r.best.geometry.matches << "," << r.best.significance << "\n";
      }
    }

    // Threshold: the smallest 0.1 step of significance whose 1:1 impostor accept rate is at most 0.1%.
    std::vector<Score> all_genuine, all_impostor;
    for (const auto& [name, t] : tally) {
      all_genuine.insert(all_genuine.end(), t.genuine.begin(), t.genuine.end());
      all_impostor.insert(all_impostor.end(), t.impostor.begin(), t.impostor.end());
    }
    const double threshold = calibrate(all_impostor);

    std::ostringstream md;
    md << "| queries | n | top-1 (rank 1) | identified at threshold | TAR (1:1 genuine accepted) | FAR (1:1 impostors "
          "accepted) |\n"
       << "|---|---|---|---|---|---|\n";
    Tally total;
    for (const auto& name : order) {
      const Tally& t = tally[name];
      const int ident = accepted(t.top1_best, threshold);
      const int tar = accepted(t.genuine, threshold);
      const int far = accepted(t.impostor, threshold);
      char line[512];
      std::snprintf(line, sizeof line, "| %s | %d | %.1f%% | %.1f%% | %.1f%% | %.3f%% (%d/%zu) |\n", name.c_str(),
                    t.queries, 100.0 * t.top1 / t.queries, 100.0 * ident / t.queries, 100.0 * tar / t.queries,
                    100.0 * far / std::max<size_t>(1, t.impostor.size()), far, t.impostor.size());
      md << line;
      total.queries += t.queries;
      total.top1 += t.top1;
      total.identified += ident;
      total.genuine_accept += tar;
      total.impostor_accept += far;
      total.impostor_pairs += int(t.impostor.size());
    }
    char line[512];
    std::snprintf(line, sizeof line, "| **all** | %d | %.1f%% | %.1f%% | %.1f%% | %.3f%% (%d/%d) |\n", total.queries,
                  100.0 * total.top1 / total.queries, 100.0 * total.identified / total.queries,
                  100.0 * total.genuine_accept / total.queries, 100.0 * total.impostor_accept / total.impostor_pairs,
                  total.impostor_accept, total.impostor_pairs);
    md << line;
    const int open_accept = accepted(open_set, threshold);
    // Held out: calibrated on the queries of one parity, measured on the other's.
    md << "\nHeld out (threshold calibrated on half of the queries, rates measured on the other half):\n\n"
       << "| calibrated on | threshold | TAR | FAR |\n|---|---|---|---|\n";
    for (int parity = 0; parity < 2; ++parity) {
      const double thr = calibrate(all_impostor, parity);
      const int other = 1 - parity;
      md << cv::format("| %s queries | %.1f | %.2f%% | %.3f%% |\n", parity ? "odd" : "even", thr,
                       100.0 * accepted(all_genuine, thr, other) / std::max(1, count_parity(all_genuine, other)),
                       100.0 * accepted(all_impostor, thr, other) / std::max(1, count_parity(all_impostor, other)));
    }
    {  // The same rule on the bare inlier count, for comparison.
      int min_inliers = 4;
      auto passing = [&](const std::vector<Score>& v) {
        return int(std::count_if(v.begin(), v.end(), [&](const Score& s) { return s.inliers >= min_inliers; }));
      };
      while (passing(all_impostor) > 0.001 * all_impostor.size()) ++min_inliers;
      md << cv::format(
          "\nDeciding on the inlier count alone instead: threshold %d inliers, TAR %.2f%% at FAR %.3f%%.\n",
          min_inliers, 100.0 * passing(all_genuine) / std::max<size_t>(1, all_genuine.size()),
          100.0 * passing(all_impostor) / std::max<size_t>(1, all_impostor.size()));
    }
    std::ostringstream head;
    head << "Gallery: " << entries.size() << " products (" << textures
         << " sun8 photos, 3 skimage textures, 8 Oxford img1); "
         << "mean " << int(mean_features + 0.5) << " RootSIFT features each. Matching on " << index.device_description()
         << ". Threshold (min significance, smallest 0.1 step with 1:1 FAR <= 0.1%): **"
         << cv::format("%.1f", threshold) << "**.\n\n";
    md << "\nOpen-set (1:M) impostors: " << open_set.size() << " sun8 photos never enrolled; " << open_accept
       << " identified as some product at the threshold ("
       << (open_set.empty() ? 0.0 : 100.0 * open_accept / open_set.size())
       << "%).\n\nOxford-affine (img1 enrolled; rank-1 result, max corner error of the recovered homography vs the "
          "ground truth):\n\n"
       << "| query | top-1 id | inliers | significance | corner error px |\n|---|---|---|---|---|\n";
    {
      const Tally& t = tally["oxford-affine"];
      for (size_t q = 0; q < oxname.size(); ++q) {
        char row[256];
        std::snprintf(row, sizeof row, "| %s | %s | %d | %.1f | %s |\n", oxname[q].c_str(),
                      t.top1_best[q].query >= 0 ? "correct" : "WRONG", t.genuine[q].inliers, t.genuine[q].significance,
                      corner_error[q] >= 0 ? cv::format("%.1f", corner_error[q]).c_str() : "-");
        md << row;
      }
    }
    const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    md << "\nEvaluation time " << int(total_s) << " s on " << cv::getNumThreads()
       << " threads; enrolment (decode excluded) " << cv::format("%.1f", gallery.size() / enrol_s) << " images/s.\n";
    const std::string report = head.str() + md.str();
    std::ofstream(out / "texture-eval.md") << report;
    write_png(score_plot(all_genuine, all_impostor, threshold), (out / "significance.png").string());
    std::fputs(report.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture eval: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
