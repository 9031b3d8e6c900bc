// The bag-of-words image path on the GPU against the CPU path: filter responses to float rounding,
// words as the CPU's on the same responses apart from near ties within the FP16 bound, the pyramid
// histograms; a large image, a small odd one and one smaller than the largest filter; strided host
// and device inputs.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "bow/filter_bank.h"
#include "bow/gpu_histogram.h"
#include "bow/histogram.h"
#include "bow/kmeans.h"
#include "prism_test.h"

namespace prism {
namespace {

cv::Mat random_scene(std::mt19937& rng, int w, int h) {
  cv::Mat img(h, w, CV_8UC1);
  cv::randu(img, 0, 256);
  cv::GaussianBlur(img, img, cv::Size(0, 0), 1.0 + 3.0 * (rng() % 100) / 100.0);
  cv::normalize(img, img, 0, 255, cv::NORM_MINMAX);
  cv::line(img, cv::Point(0, h / 3), cv::Point(w - 1, h / 2), cv::Scalar(255), 3);  // edges at every scale
  return img;
}

TEST(BowGpu, FilterBankWordsAndHistogramsMatchTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  const bow::FilterBank bank;
  // A dictionary of k = 200 responses drawn from a training image (realistic distances).
  const cv::Mat train = random_scene(rng, 320, 240);
  const cv::Mat tr = bow::filter_responses(train, bank);
  cv::Mat dictionary(200, bank.filters(), CV_32F);
  for (int c = 0; c < dictionary.rows; ++c) {
    const int y = int(rng() % tr.rows), x = int(rng() % tr.cols);
    std::memcpy(dictionary.ptr<float>(c), tr.ptr<float>(y) + x * bank.filters(), sizeof(float) * bank.filters());
  }
  cv::Mat mean;
  cv::reduce(dictionary, mean, 0, cv::REDUCE_AVG);
  bow::GpuHistogrammer gpu(bank, dictionary, 2);
  for (cv::Size size : {cv::Size(640, 480), cv::Size(333, 257), cv::Size(9, 7)}) {
    const cv::Mat img = random_scene(rng, size.width, size.height);
    const cv::Mat cpu_r = bow::filter_responses(img, bank), gpu_r = gpu.responses(img);
    ASSERT_EQ(gpu_r.type(), cpu_r.type());
    std::vector<cv::Mat> cp, gp;
    cv::split(cpu_r, cp);
    cv::split(gpu_r, gp);
    for (int f = 0; f < bank.filters(); ++f) {
      const double scale = std::max(1.0, cv::norm(cp[f], cv::NORM_INF));
      EXPECT_LE(cv::norm(cp[f], gp[f], cv::NORM_INF), 2e-5 * scale) << "filter " << f << " at " << size;
    }
    // Words: the CPU's nearest_centers on the GPU's own responses, except where the tensor cores'
    // FP16 top-2 missed the nearest word; each such pixel must be a near tie within the FP16 error
    // bound (each product of centred values rounded to 2^-11 relative, so a distance is off by at
    // most about 1e-3 (||x - mean||^2 + ||c - mean||^2); 4e-3 leaves room for the index bits).
    const cv::Mat gw = gpu.words(img), exact = bow::visual_words(gpu_r, dictionary);
    int missed = 0;
    for (int i = 0; i < int(gw.total()); ++i) {
      const int g = gw.ptr<int>()[i], e = exact.ptr<int>()[i];
      ASSERT_TRUE(g >= 0 && g < dictionary.rows) << "word " << g << " at pixel " << i;
      if (g == e) continue;
      ++missed;
      const float* x = gpu_r.ptr<float>() + size_t(i) * bank.filters();
      double dg = 0, de = 0, xn = 0, cg = 0, ce = 0;
      for (int j = 0; j < bank.filters(); ++j) {
        dg += std::pow(double(x[j]) - dictionary.at<float>(g, j), 2);
        de += std::pow(double(x[j]) - dictionary.at<float>(e, j), 2);
        xn += std::pow(double(x[j]) - mean.at<float>(j), 2);
        cg += std::pow(double(dictionary.at<float>(g, j)) - mean.at<float>(j), 2);
        ce += std::pow(double(dictionary.at<float>(e, j)) - mean.at<float>(j), 2);
      }
      EXPECT_LE(dg - de, 4e-3 * (xn + std::max(cg, ce)))
          << "pixel " << i << " at " << size << ": word " << g << " for " << e;
    }
    // Near ties are rare on most scenes (well under 0.1%) but common on smooth ones, whose responses
    // crowd the dictionary; every one is bounded above, so this only catches a broken screen.
    EXPECT_LE(missed, int(gw.total() / 100) + 1) << size;
    std::printf("%dx%d: %d of %d words are near ties resolved otherwise than the CPU\n", size.width, size.height,
                missed, int(gw.total()));
    // Against the whole CPU path: only near ties differ.
    const cv::Mat cw = bow::visual_words(cpu_r, dictionary);
    int differ = 0;
    for (int i = 0; i < int(cw.total()); ++i) differ += cw.ptr<int>()[i] != gw.ptr<int>()[i];
    EXPECT_LE(differ, int(cw.total() / 100) + 1) << size;
    const std::vector<float> ch = bow::word_histogram(cw, dictionary.rows, 2), gh = gpu.histogram(img);
    ASSERT_EQ(ch.size(), gh.size());
    double l1 = 0;
    for (size_t i = 0; i < ch.size(); ++i) l1 += std::fabs(ch[i] - gh[i]);
    EXPECT_LE(l1, 2.0 * differ / cw.total() + 1e-6) << size;
    if (differ == 0) {
      EXPECT_EQ(ch, gh) << "identical words must give identical histograms";
    }
  }
  EXPECT_THROW(gpu.histogram(cv::Mat(4, 4, CV_8UC3)), std::invalid_argument);

  // Strided inputs: a host ROI (row step != width) and a pitched device image give the histogram
  // of the same pixels made contiguous, exactly (integer counts).
  const cv::Mat big = random_scene(rng, 700, 500);
  const cv::Rect roi(37, 21, 611, 433);
  const std::vector<float> contiguous = gpu.histogram(big(roi).clone());
  EXPECT_EQ(gpu.histogram(big(roi)), contiguous);
  uint8_t* device = nullptr;  // cudaMallocPitch: the pitched layout is what is tested (DeviceArray has no pitch)
  size_t pitch = 0;
  ASSERT_EQ(cudaMallocPitch(reinterpret_cast<void**>(&device), &pitch, size_t(roi.width), size_t(roi.height)),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy2D(device, pitch, big(roi).data, big.step, roi.width, roi.height, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_GT(pitch, size_t(roi.width));
  EXPECT_EQ(gpu.histogram_device(device, pitch, roi.width, roi.height), contiguous);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

// k-means on the GPU (seeding on the device, tensor-core assignment with a certified FP16 screen)
// is the CPU's k-means, bit for bit: the seeds, centres, labels, inertia, iterations, on
// filter-response samples, on values far outside FP16's range and on a set that leaves clusters
// empty (ties everywhere).
TEST(BowGpu, KMeansEqualsTheCpuPathBitForBit) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  const bow::FilterBank bank;
  const cv::Mat r = bow::filter_responses(random_scene(rng, 400, 300), bank);
  cv::Mat samples(20000, bank.filters(), CV_32F);
  for (int i = 0; i < samples.rows; ++i) {
    const int y = int(rng() % r.rows), x = int(rng() % r.cols);
    std::memcpy(samples.ptr<float>(i), r.ptr<float>(y) + x * bank.filters(), sizeof(float) * bank.filters());
  }
  bow::KMeansParams p;
  p.k = 64;
  p.max_iterations = 30;
  p.seed = rng();
  // The seeding alone (no Lloyd iteration): the GPU's k-means++ picks the CPU's points.
  bow::KMeansParams seeding = p;
  seeding.max_iterations = 0;
  const cv::Mat gpu_seeds = bow::kmeans_cuda(samples, seeding).centers;
  EXPECT_EQ(cv::norm(gpu_seeds, bow::kmeans_pp_seeds(samples, p.k, p.seed), cv::NORM_INF), 0.0);
  int gpu_calls = 0;
  const bow::KMeansResult c = bow::kmeans(samples, p),
                          g = bow::kmeans_cuda(samples, p, [&](int, double, int) { ++gpu_calls; });
  EXPECT_EQ(gpu_calls, g.iterations);
  EXPECT_EQ(g.iterations, c.iterations);
  EXPECT_EQ(g.inertia, c.inertia);
  EXPECT_EQ(g.labels, c.labels);
  EXPECT_EQ(cv::norm(g.centers, c.centers, cv::NORM_INF), 0.0);
  // The tensor cores' certified screen assigns most points; the exact scan takes the rest.
  EXPECT_LT(g.rescanned, int64_t(samples.rows) * g.iterations / 2);
  std::printf("k-means on the GPU: %lld of %lld assignments re-scanned exactly\n", (long long)g.rescanned,
              (long long)samples.rows * g.iterations);
  // Values far beyond FP16's range and far below its normal range: the power-of-two scale keeps
  // the screen working, and the result is still the CPU's.
  for (double factor : {1e9, 1e-9}) {
    const cv::Mat scaled = samples.rowRange(0, 3000) * factor;
    bow::KMeansParams hp = p;
    hp.k = 16;
    hp.max_iterations = 5;
    const bow::KMeansResult ch = bow::kmeans(scaled, hp), gh = bow::kmeans_cuda(scaled, hp);
    EXPECT_LT(gh.rescanned, int64_t(scaled.rows) * gh.iterations / 2) << factor;
    EXPECT_EQ(gh.labels, ch.labels) << factor;
    EXPECT_EQ(gh.inertia, ch.inertia) << factor;
    EXPECT_EQ(cv::norm(gh.centers, ch.centers, cv::NORM_INF), 0.0) << factor;
  }
  // 9 identical points and 3 others with k = 6: clusters go empty and are re-seeded the same way.
  cv::Mat dup = cv::Mat::zeros(12, 32, CV_32F);
  dup.at<float>(9, 0) = 5.f;
  dup.at<float>(10, 1) = 5.f;
  dup.at<float>(11, 2) = 5.f;
  p.k = 6;
  const bow::KMeansResult c2 = bow::kmeans(dup, p), g2 = bow::kmeans_cuda(dup, p);
  EXPECT_GT(c2.reseeded, 0);
  EXPECT_EQ(g2.reseeded, c2.reseeded);
  EXPECT_EQ(g2.labels, c2.labels);
  EXPECT_EQ(cv::norm(g2.centers, c2.centers, cv::NORM_INF), 0.0);
}

}  // namespace
}  // namespace prism
