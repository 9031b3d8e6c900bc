#include "candidates.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "perturbations.h"
#include "protocol.h"
#include "texture/detection_image.h"
#include "texture/gallery.h"
#include "texture_util.h"

namespace prism::eval {

namespace {

// A normalisation compared: one of ours (texture::normalise) or an OpenCV baseline that only the eval
// applies (cv::equalizeHist; a local mean/std normalisation).
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
  const texture::FeatureParams p;
  std::vector<cv::Mat> pre(images.size());
  cv::parallel_for_(cv::Range(0, int(images.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      // As extract_features does: the shrink of images over max_side first (texture::detection_size),
      // then the normalisation.
      cv::Mat g = images[i];
      double scale = 1;
      const cv::Size size = texture::detection_size(g.cols, g.rows, p.max_side, &scale);
      if (scale != 1.0) cv::resize(g, g, size, 0, 0, cv::INTER_AREA);
      if (c.baseline == "equalize")
        cv::equalizeHist(g, pre[i]);
      else
        pre[i] = local_std(g);
    }
  });
  return texture::extract_features_batch(pre, p);
}

}  // namespace

std::vector<CandidateResult> compare_normalisations(const std::vector<Item>& gallery,
                                                    const std::vector<cv::Mat>& images,
                                                    const std::filesystem::path& data, unsigned seed,
                                                    texture::Device device, const texture::SearchParams& sp,
                                                    const std::vector<int>& perturbations, bool oxford) {
  const std::vector<Candidate> cands = {
      {"none", texture::Normalisation{}, ""},
      {"equalizeHist (OpenCV)", {}, "equalize"},
      {"clahe-2-8", texture::parse_normalisation("clahe-2-8"), ""},
      {"clahe-4-8", texture::parse_normalisation("clahe-4-8"), ""},
      {"clahe-2-4", texture::parse_normalisation("clahe-2-4"), ""},
      {"clahe-3-16", texture::parse_normalisation("clahe-3-16"), ""},
      {"local mean/std (sigma 16)", {}, "localstd"},
  };
  std::vector<std::string> names;
  std::vector<std::vector<cv::Mat>> queries;
  std::vector<std::vector<std::string>> truth;  // product ids
  for (int p : perturbations) {
    names.push_back(kPerturbations[p]);
    queries.push_back(perturbed_queries(images, seed, p));
    truth.emplace_back();
    for (const auto& g : gallery) truth.back().push_back(g.id);
  }
  if (oxford) {  // and the real re-captures: Oxford img2..6 against img1
    Recaptures r = oxford_recaptures(data, false);
    names.push_back("oxford-affine");
    queries.push_back(std::move(r.images));
    truth.push_back(std::move(r.product));
  }
  std::vector<CandidateResult> results;
  for (const Candidate& c : cands) {
    std::fprintf(stderr, "eval: candidate %s\n", c.name.c_str());
    const std::vector<texture::Features> cf = candidate_features(images, c);
    std::vector<texture::GalleryEntry> ce;
    for (size_t i = 0; i < gallery.size(); ++i) ce.push_back({gallery[i].id, gallery[i].path, 0, cf[i]});
    texture::IndexOptions o;
    o.device = device;
    texture::TextureIndex index(o);
    index.build(ce);
    CandidateResult result;
    result.name = c.name;
    for (size_t p = 0; p < queries.size(); ++p) {
      const std::vector<texture::Features> qf = candidate_features(queries[p], c);
      CandidateResult::Set set;
      set.name = names[p];
      set.n = int(qf.size());
      cli::Progress progress("candidate " + c.name + " " + names[p], int(qf.size()), true);
      for (size_t i = 0; i < qf.size(); ++i) {
        const texture::SearchResult r = index.search(qf[i], sp);
        const bool right = r.best.index == index.find(truth[p][i]);
        set.top1 += right;
        set.identified += right && r.identified;
        progress.step();
      }
      progress.finish();
      std::tie(set.keypoints_median, set.keypoints_min) = keypoint_median_min(qf);
      result.top1 += set.top1;
      result.identified += set.identified;
      result.n += set.n;
      result.sets.push_back(set);
    }
    const int gallery_median = keypoint_median_min(cf).first;
    std::fprintf(stderr, "eval: candidate %s: top-1 %.1f%%, identified %.1f%%, gallery keypoints %d median\n",
                 c.name.c_str(), 100.0 * result.top1 / result.n, 100.0 * result.identified / result.n, gallery_median);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace prism::eval
