// Bag-of-visual-words on the CPU: the filter bank against dense 2-D filtering (cv::filter2D), k-means
// against planted clusters and cv::kmeans, its determinism and empty clusters, visual words against
// a brute force, pyramid histograms and the chi-squared distance in closed form, and both
// classifiers on separable data. Inputs are fresh random for every run.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "bow/classifier.h"
#include "bow/filter_bank.h"
#include "bow/histogram.h"
#include "bow/kmeans.h"
#include "bow/model.h"
#include "bow_scenes.h"
#include "common/durable_file.h"
#include "prism_test.h"

namespace prism {
namespace {

using bow::FilterBank;

TEST(BowFilterBank, SeparablePassesEqualDense2dFiltering) {
  std::mt19937 rng(std::random_device{}());
  const FilterBank bank;
  ASSERT_EQ(bank.filters(), 32);
  cv::Mat img(97, 131, CV_8UC1);
  cv::randu(img, 0, 256);
  cv::GaussianBlur(img, img, cv::Size(0, 0), 1.5);  // some structure at every scale
  const cv::Mat r = bow::filter_responses(img, bank);
  ASSERT_EQ(r.type(), CV_32FC(32));
  ASSERT_EQ(r.size(), img.size());
  cv::Mat f;
  img.convertTo(f, CV_32F, 1.0 / 255.0);
  std::vector<cv::Mat> planes;
  cv::split(r, planes);
  for (int i = 0; i < bank.filters(); ++i) {
    cv::Mat dense;
    cv::filter2D(f, dense, CV_32F, bank.dense(i), cv::Point(-1, -1), 0, cv::BORDER_REFLECT_101);
    double maxdiff = cv::norm(dense, planes[i], cv::NORM_INF), scale = cv::norm(dense, cv::NORM_INF);
    EXPECT_LE(maxdiff, 1e-5 * std::max(1.0, scale)) << "filter " << i;
  }
}

TEST(BowFilterBank, KernelsHaveTheirDefiningSumsAndBadSizesAreRefused) {
  const FilterBank bank;
  for (int i = 0; i < bank.filters(); ++i) {
    const double sum = cv::sum(bank.dense(i))[0];
    if (i % bow::kFilterKinds == 0)
      EXPECT_NEAR(sum, 1.0, 1e-5) << i;  // Gaussian: keeps a flat image
    else
      EXPECT_NEAR(sum, 0.0, 1e-5) << i;  // LoG, Sobel: flat gives 0
  }
  // The Sobel x kernel grows to the right (OpenCV's sign: a rising ramp gives a positive response).
  const cv::Mat sx = bank.dense(2);
  EXPECT_GT(sx.at<float>(1, 2), 0.f);
  EXPECT_LT(sx.at<float>(1, 0), 0.f);
  auto bank_of = [](std::vector<int> sizes) {
    bow::FilterBankParams p;
    p.sizes = std::move(sizes);
    return FilterBank(p);
  };
  for (int bad : {1, 2, 33, 8}) EXPECT_THROW(bank_of({bad}), std::invalid_argument) << bad;
  EXPECT_THROW(bank_of({}), std::invalid_argument);
  EXPECT_EQ(bank_of({3, 5}).filters(), 8);
  EXPECT_THROW(bow::filter_responses(cv::Mat(), bank), std::invalid_argument);
  EXPECT_THROW(bow::filter_responses(cv::Mat(4, 4, CV_16UC1), bank), std::invalid_argument);
}

// n points around k planted centres, far apart.
cv::Mat planted(std::mt19937& rng, int k, int per, int d, cv::Mat& centres, std::vector<int>& truth) {
  std::normal_distribution<float> noise(0.f, 0.05f);
  std::uniform_real_distribution<float> pos(-10.f, 10.f);
  centres.create(k, d, CV_32F);
  for (int c = 0; c < k; ++c)
    for (int j = 0; j < d; ++j) centres.at<float>(c, j) = pos(rng);
  cv::Mat pts(k * per, d, CV_32F);
  truth.clear();
  for (int i = 0; i < k * per; ++i) {
    truth.push_back(i % k);
    for (int j = 0; j < d; ++j) pts.at<float>(i, j) = centres.at<float>(i % k, j) + noise(rng);
  }
  return pts;
}

TEST(BowKMeans, FindsPlantedClustersDeterministically) {
  std::mt19937 rng(std::random_device{}());
  cv::Mat centres;
  std::vector<int> truth;
  const int k = 7;
  const cv::Mat pts = planted(rng, k, 60, 12, centres, truth);
  bow::KMeansParams p;
  p.k = k;
  p.seed = rng();
  int calls = 0;
  const bow::KMeansResult first = bow::kmeans(pts, p, [&](int, double, int) { ++calls; });
  EXPECT_TRUE(first.converged);
  EXPECT_EQ(calls, first.iterations);
  // k-means++ seeds two centres in one blob about once in 3,000 runs here (measured), and Lloyd
  // then stays in that local optimum; of two seeds, as cv::kmeans' `attempts`, the better finds the
  // planted clusters: every found centre sits on a planted one.
  bow::KMeansParams p2 = p;
  p2.seed = p.seed + 1;
  const bow::KMeansResult second = bow::kmeans(pts, p2);
  const bow::KMeansResult& a = second.inertia < first.inertia ? second : first;
  p = &a == &first ? p : p2;
  for (int c = 0; c < k; ++c) {
    double best = 1e30;
    for (int t = 0; t < k; ++t) best = std::min(best, cv::norm(a.centers.row(c), centres.row(t)));
    EXPECT_LT(best, 0.1) << "centre " << c;
  }
  // Points of one planted cluster share a label.
  for (int i = k; i < pts.rows; ++i) EXPECT_EQ(a.labels[i], a.labels[i % k]) << i;
  // Same seed: the same bits.
  const bow::KMeansResult b = bow::kmeans(pts, p);
  EXPECT_EQ(cv::norm(a.centers, b.centers, cv::NORM_INF), 0.0);
  EXPECT_EQ(a.labels, b.labels);
  // No worse than OpenCV's kmeans++ with 3 attempts.
  cv::Mat cv_labels, cv_centres;
  const double cv_inertia =
      cv::kmeans(pts, k, cv_labels, cv::TermCriteria(cv::TermCriteria::COUNT + cv::TermCriteria::EPS, 100, 1e-6), 3,
                 cv::KMEANS_PP_CENTERS, cv_centres);
  EXPECT_LE(a.inertia, cv_inertia * 1.0001 + 1e-9);
}

// The parallel stable counting sort that orders the points for the GPU means: a plain sequential
// stable sort's order, for labels that leave some clusters empty.
TEST(BowKMeans, StableOrderByLabelIsASequentialStableSort) {
  std::mt19937 rng(std::random_device{}());
  for (int n : {1, 63, 64, 65, 1000, 100003}) {
    const int k = 1 + int(rng() % 700);
    std::vector<int> labels(n);
    for (int& l : labels) l = int(rng() % (k / 2 + 1)) * 2 % k;  // every other label unused
    std::vector<int> expected(n), order(n, -1);
    std::iota(expected.begin(), expected.end(), 0);
    std::stable_sort(expected.begin(), expected.end(), [&](int a, int b) { return labels[a] < labels[b]; });
    bow::detail::stable_order_by_label(labels, k, order.data());
    EXPECT_EQ(order, expected) << "n = " << n << ", k = " << k;
  }
}

TEST(BowKMeans, EmptyClustersAreReseededAndBadInputRefused) {
  // 12 points, 9 of them identical: k-means++ exhausts the distinct points, Lloyd leaves clusters
  // empty, and they must be re-seeded rather than left NaN.
  cv::Mat pts = cv::Mat::zeros(12, 3, CV_32F);
  pts.at<float>(9, 0) = 5.f;
  pts.at<float>(10, 1) = 5.f;
  pts.at<float>(11, 2) = 5.f;
  bow::KMeansParams p;
  p.k = 6;
  const bow::KMeansResult r = bow::kmeans(pts, p);
  EXPECT_TRUE(cv::checkRange(r.centers));
  std::vector<int> counts(p.k, 0);
  for (int l : r.labels) ++counts[l];
  for (int c = 0; c < p.k; ++c) EXPECT_GT(counts[c], 0) << "cluster " << c << " empty";
  p.k = 13;
  EXPECT_THROW(bow::kmeans(pts, p), std::invalid_argument);
  p.k = 2;
  EXPECT_THROW(bow::kmeans(cv::Mat(4, 3, CV_64F), p), std::invalid_argument);
}

TEST(BowWords, NearestWordsMatchABruteForceInDouble) {
  std::mt19937 rng(std::random_device{}());
  cv::Mat responses(23, 29, CV_32FC(32)), dictionary(50, 32, CV_32F);
  cv::randn(responses, 0, 1);
  cv::randn(dictionary, 0, 1);
  const cv::Mat words = bow::visual_words(responses, dictionary);
  ASSERT_EQ(words.type(), CV_32SC1);
  int near_ties = 0;
  for (int y = 0; y < responses.rows; ++y)
    for (int x = 0; x < responses.cols; ++x) {
      const float* v = responses.ptr<float>(y) + x * 32;
      std::vector<double> d(dictionary.rows);
      for (int c = 0; c < dictionary.rows; ++c) {
        double s = 0;
        for (int j = 0; j < 32; ++j) s += std::pow(double(v[j]) - dictionary.at<float>(c, j), 2);
        d[c] = s;
      }
      const int best = int(std::min_element(d.begin(), d.end()) - d.begin());
      const int got = words.at<int>(y, x);
      if (got != best) {
        ++near_ties;
        EXPECT_NEAR(d[got], d[best], 1e-4 * d[best]) << "not a near tie at " << x << "," << y;
      }
    }
  EXPECT_LE(near_ties, 2);
  EXPECT_THROW(bow::visual_words(responses, cv::Mat(5, 31, CV_32F)), std::invalid_argument);
}

TEST(BowHistogram, PyramidHistogramInClosedForm) {
  // 4x4 words: left half word 0, right half word 1, except the bottom-right cell all word 2.
  cv::Mat w = (cv::Mat_<int>(4, 4) << 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 2, 2);
  const std::vector<float> h0 = bow::word_histogram(w, 3, 0);
  ASSERT_EQ(h0.size(), 3u);
  EXPECT_FLOAT_EQ(h0[0], 0.5f);
  EXPECT_FLOAT_EQ(h0[1], 0.25f);
  EXPECT_FLOAT_EQ(h0[2], 0.25f);
  const std::vector<float> h1 = bow::word_histogram(w, 3, 1);
  ASSERT_EQ(int(h1.size()), bow::histogram_length(3, 1));
  ASSERT_EQ(h1.size(), 15u);
  // Level 0 weighs 1/2, level 1 weighs 1/2: raw sums 16 * 1/2 + 16 * 1/2 = 16.
  EXPECT_FLOAT_EQ(h1[0], 8 * 0.5f / 16);              // word 0, whole image
  EXPECT_FLOAT_EQ(h1[3 + 0 * 3 + 0], 4 * 0.5f / 16);  // top-left cell, word 0
  EXPECT_FLOAT_EQ(h1[3 + 1 * 3 + 1], 4 * 0.5f / 16);  // top-right cell, word 1
  EXPECT_FLOAT_EQ(h1[3 + 3 * 3 + 2], 4 * 0.5f / 16);  // bottom-right cell, word 2
  EXPECT_FLOAT_EQ(h1[3 + 3 * 3 + 1], 0.f);
  double total = 0;
  for (float v : h1) total += v;
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_EQ(bow::histogram_length(500, 2), 500 * 21);
  // Re-weighting the level-1 histogram to level 0 gives the level-0 histogram.
  const std::vector<float> back = bow::coarser_pyramid(h1.data(), 3, 1, 0);
  ASSERT_EQ(back.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back[i], h0[i], 1e-7) << i;
  cv::Mat bad = w.clone();
  bad.at<int>(0, 0) = 3;
  EXPECT_THROW(bow::word_histogram(bad, 3, 0), std::invalid_argument);
}

TEST(BowClassifier, Chi2KnnAndLinearSvmOnSeparableData) {
  const float a[] = {1, 0, 0.5f}, b[] = {0, 1, 0.5f};
  EXPECT_DOUBLE_EQ(bow::chi2_distance(a, b, 3), 0.5 * (1.0 + 1.0 + 0.0));
  EXPECT_DOUBLE_EQ(bow::chi2_distance(a, a, 3), 0.0);

  std::mt19937 rng(std::random_device{}());
  cv::Mat centres;
  std::vector<int> labels;
  const int classes = 4;
  cv::Mat x = planted(rng, classes, 40, 10, centres, labels);
  cv::Mat hist;  // histograms are non-negative: shift into the positive orthant for chi-squared
  cv::add(x, 20.f, hist);
  for (int i = 0; i < hist.rows; ++i) hist.row(i) /= cv::sum(hist.row(i))[0];
  for (int i = 0; i < hist.rows; ++i) {
    const bow::Prediction p = bow::knn_chi2(hist, labels, classes, hist.ptr<float>(i), 5);
    EXPECT_EQ(p.label, labels[i]);
    EXPECT_DOUBLE_EQ(p.confidence, 1.0);
  }
  bow::LinearSvm svm;
  svm.train(x, labels, classes);
  ASSERT_EQ(svm.classes(), classes);
  ASSERT_EQ(svm.dimensions(), 10);
  for (int i = 0; i < x.rows; ++i) EXPECT_EQ(svm.predict(x.ptr<float>(i)).label, labels[i]) << i;
  bow::LinearSvm again;
  again.train(x, labels, classes);
  EXPECT_EQ(cv::norm(svm.weights(), again.weights(), cv::NORM_INF), 0.0);  // deterministic
  EXPECT_THROW(svm.train(x, std::vector<int>(3, 0), classes), std::invalid_argument);
}

// The per-class scores: one per class, in class order, the values the decision is made
// on. On random (overlapping) histograms, k-NN's are the vote shares of a brute-force K nearest in
// double, and the label has the most (ties by the voters' distance); the SVM's are its decision
// values, the label their argmax and the confidence the softmax at the label.
TEST(BowClassifier, ScoresAreOnePerClassAndTheLabelIsTheirArgmax) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int classes = 5, n = 60, d = 8, K = 7;
  cv::Mat hist(n, d, CV_32F);
  std::vector<int> labels(n);
  for (int i = 0; i < n; ++i) {
    labels[i] = i % classes;
    for (int j = 0; j < d; ++j) hist.at<float>(i, j) = u(rng) + (j == labels[i] ? 0.5f : 0.f);
    hist.row(i) /= cv::sum(hist.row(i))[0];
  }
  for (int t = 0; t < 40; ++t) {
    std::vector<float> q(d);
    for (float& v : q) v = u(rng);
    std::vector<std::pair<double, int>> dist;
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < d; ++j) {
        const double a = hist.at<float>(i, j), b = q[j];
        if (a + b > 0) s += 0.5 * (a - b) * (a - b) / (a + b);
      }
      dist.push_back({s, i});
    }
    std::sort(dist.begin(), dist.end());
    std::vector<double> votes(classes, 0);
    for (int i = 0; i < K; ++i) votes[labels[dist[i].second]] += 1.0 / K;
    const bow::Prediction p = bow::knn_chi2(hist, labels, classes, q.data(), K);
    ASSERT_EQ(p.scores.size(), size_t(classes));
    for (int c = 0; c < classes; ++c) EXPECT_NEAR(p.scores[c], votes[c], 1e-12) << c;
    EXPECT_NEAR(std::accumulate(p.scores.begin(), p.scores.end(), 0.0), 1.0, 1e-12);
    const double top = *std::max_element(p.scores.begin(), p.scores.end());
    EXPECT_EQ(p.scores[p.label], top);
    EXPECT_EQ(p.confidence, p.scores[p.label]);
  }

  bow::LinearSvm svm;
  svm.train(hist, labels, classes);
  std::set<int> seen;
  for (int i = 0; i < n; ++i) {
    const bow::Prediction p = svm.predict(hist.ptr<float>(i));
    const std::vector<double> want = svm.decision(hist.ptr<float>(i));
    ASSERT_EQ(p.scores, want);
    EXPECT_EQ(p.label, int(std::max_element(want.begin(), want.end()) - want.begin()));
    double z = 0;
    for (double v : want) z += std::exp(v - want[p.label]);
    EXPECT_NEAR(p.confidence, 1.0 / z, 1e-12);
    seen.insert(p.label);
  }
  EXPECT_GT(seen.size(), 1u);  // the check saw more than one winner
}

// Finite weights so large that the decision values overflow (+-infinity, or NaN from inf - inf)
// made the softmax NaN. The rule: the label is the largest value (NaN lowest, a tie to the lower
// class), and the confidence 0 whenever a value is not finite; finite values keep the softmax.
TEST(BowClassifier, LinearSvmOverflowGivesAStableLabelAndConfidenceZero) {
  const double big = std::numeric_limits<double>::max();
  const double inf = HUGE_VAL, nan = std::nan("");
  const float x[] = {2.f, 2.f};
  // One row per class: weights for x (2 each) and the bias, chosen to give `value` exactly.
  auto row_for = [&](double value) -> std::vector<double> {
    if (value == inf) return {big, 0, 0};          // big * 2 overflows to +inf
    if (value == -inf) return {-big, 0, 0};        // -inf
    if (std::isnan(value)) return {big, -big, 0};  // inf + -inf
    return {0, 0, value};                          // the bias alone
  };
  struct Case {
    std::vector<double> values;
    int label;
    double confidence;
  };
  const double e2 = 1.0 / (1.0 + std::exp(-2.0));  // softmax of {1, 3}, in closed form
  const std::vector<Case> cases = {
      {{1, 3}, 1, e2},      {{3, 3}, 0, 0.5},    {{nan, inf, 1}, 1, 0.0}, {{inf, inf}, 0, 0.0},
      {{nan, nan}, 0, 0.0}, {{-inf, 2}, 1, 0.0}, {{nan, 5, nan}, 1, 0.0}, {{-inf, -inf, nan}, 0, 0.0},
  };
  for (const Case& c : cases) {
    cv::Mat w(int(c.values.size()), 3, CV_64F);
    for (int r = 0; r < w.rows; ++r) {
      const std::vector<double> row = row_for(c.values[r]);
      for (int j = 0; j < 3; ++j) w.at<double>(r, j) = row[j];
    }
    bow::LinearSvm svm;
    svm.set_weights(w);
    const std::vector<double> d = svm.decision(x);
    for (size_t r = 0; r < d.size(); ++r)  // the weights give the intended values
      EXPECT_TRUE(d[r] == c.values[r] || (std::isnan(d[r]) && std::isnan(c.values[r]))) << r << ": " << d[r];
    const bow::Prediction p = svm.predict(x);
    EXPECT_EQ(p.label, c.label) << ::testing::PrintToString(c.values);
    EXPECT_TRUE(std::isfinite(p.confidence)) << ::testing::PrintToString(c.values);
    EXPECT_NEAR(p.confidence, c.confidence, 1e-15) << ::testing::PrintToString(c.values);
    ASSERT_EQ(p.scores.size(), c.values.size());  // the scores are the values, overflowed or not
    for (size_t r = 0; r < d.size(); ++r)
      EXPECT_TRUE(p.scores[r] == c.values[r] || (std::isnan(p.scores[r]) && std::isnan(c.values[r]))) << r;
  }
}

cv::Mat scene(std::mt19937& rng, int kind) { return test::bow_scene(rng, kind, 80, 64, 8.0); }

TEST(BowModel, TrainsClassifiesAndRoundTripsThroughItsFile) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> train, test;
  std::vector<int> train_labels, test_labels;
  for (int i = 0; i < 30; ++i) {
    train.push_back(scene(rng, i % 3));
    train_labels.push_back(i % 3);
    test.push_back(scene(rng, i % 3));
    test_labels.push_back(i % 3);
  }
  bow::TrainConfig c;
  c.k = 24;
  c.samples_per_image = 100;
  c.levels = 1;
  c.knn = 3;
  c.seed = rng();
  std::vector<std::string> stages;
  const bow::Model svm = bow::Model::train(train, train_labels, {"horizontal", "vertical", "blobs"}, c,
                                           [&](const std::string& s, int, int) {
                                             if (stages.empty() || stages.back() != s) stages.push_back(s);
                                           });
  EXPECT_EQ(stages, (std::vector<std::string>{"filters", "k-means", "histograms", "classifier"}));
  const bow::Model knn = svm.with_classifier(bow::ClassifierKind::kKnn, 1),
                   plain = svm.with_classifier(bow::ClassifierKind::kKnn, 0);
  for (const bow::Model* m : {&svm, &knn, &plain}) {
    int right = 0;
    for (size_t i = 0; i < test.size(); ++i) right += m->classify(test[i]).label == test_labels[i];
    EXPECT_GE(right, 27) << "of 30, classifier " << int(m->config().classifier) << " levels " << m->config().levels;
  }
  test::TempDir dir;
  for (const bow::Model* m : {&svm, &knn}) {
    const std::string path = (dir.path() / "model.bow").string();
    m->save(path);
    const bow::Model back = bow::Model::load(path);
    EXPECT_EQ(back.class_names(), m->class_names());
    EXPECT_EQ(cv::norm(back.dictionary(), m->dictionary(), cv::NORM_INF), 0.0);
    for (const cv::Mat& t : test) {
      const bow::Prediction a = m->classify(t), b = back.classify(t);
      EXPECT_EQ(a.label, b.label);
      EXPECT_DOUBLE_EQ(a.confidence, b.confidence);
    }
  }
}

TEST(BowModel, DamagedOrForeignFilesAreRefusedByName) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> imgs;
  std::vector<int> labels;
  for (int i = 0; i < 6; ++i) imgs.push_back(scene(rng, i % 2)), labels.push_back(i % 2);
  bow::TrainConfig c;
  c.k = 8;
  c.samples_per_image = 20;
  c.levels = 0;
  const bow::Model m = bow::Model::train(imgs, labels, {"a", "b"}, c);
  test::TempDir dir;
  const std::string path = (dir.path() / "m.bow").string();
  m.save(path);
  std::vector<uint8_t> bytes = read_file(path);
  auto expect_refused = [&](const std::vector<uint8_t>& b, const std::string& why) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    }
    try {
      bow::Model::load(path);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const bow::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  expect_refused(flipped, "CRC-32");
  expect_refused(std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 3), "CRC-32");
  std::vector<uint8_t> foreign = bytes;
  foreign[0] = 'X';
  expect_refused(foreign, "not a Prism bag-of-words model");
  std::vector<uint8_t> future = bytes;
  future[8] = 9;
  expect_refused(future, "model format 9");
  EXPECT_THROW(bow::Model::load((dir.path() / "missing.bow").string()), bow::ModelError);
  // A directory is named as one, with its path.
  try {
    bow::Model::load(dir.path().string());
    ADD_FAILURE() << "a directory accepted as a model";
  } catch (const bow::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string() + ": not a regular file (a directory)"), std::string::npos)
        << e.what();
  }
  // A writer killed before its rename leaves only its temporary file: the model is untouched.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  { std::ofstream(path + ".tmp") << "half a model"; }
  EXPECT_NO_THROW(bow::Model::load(path));
  m.save(path);  // the next save replaces the stale temporary file
  EXPECT_NO_THROW(bow::Model::load(path));
}

// Found by tests/fuzz/fuzz_bow_model: a matrix header declaring 2^30 values in a file of a few hundred
// bytes was allocated (4 GB) before the file was found too short, so a load under a memory limit died
// of a failed allocation instead of a ModelError. The load runs in a child with 1 GB of address space
// (not under AddressSanitizer, which reserves far more).
TEST(BowModel, AHugeMatrixHeaderInAShortFileIsRefusedBeforeAllocating) {
  std::mt19937 rng(3);
  std::vector<cv::Mat> imgs;
  std::vector<int> labels;
  for (int i = 0; i < 6; ++i) imgs.push_back(scene(rng, i % 2)), labels.push_back(i % 2);
  bow::TrainConfig c;
  c.k = 8;
  c.samples_per_image = 20;
  c.levels = 0;
  c.bank.sizes = {3};
  test::TempDir dir;
  const std::string path = (dir.path() / "m.bow").string();
  bow::Model::train(imgs, labels, {"a", "b"}, c).save(path);
  std::vector<uint8_t> bytes = read_file(path);
  // The dictionary's header (rows, cols, type) follows the class names "a" and "b".
  const std::vector<uint8_t> b_name = {1, 0, 0, 0, 'b'};
  const auto at = std::search(bytes.begin(), bytes.end(), b_name.begin(), b_name.end());
  ASSERT_NE(at, bytes.end());
  const size_t header = size_t(at - bytes.begin()) + b_name.size();
  const int32_t dims[2] = {1 << 15, 1 << 15};
  std::memcpy(bytes.data() + header, dims, sizeof dims);
  const uint32_t crc = crc32(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
#if !defined(__SANITIZE_ADDRESS__)
    const rlimit limit{1ul << 30, 1ul << 30};
    setrlimit(RLIMIT_AS, &limit);
#endif
    try {
      bow::Model::load(path);
      _exit(2);
    } catch (const bow::ModelError& e) {
      _exit(std::string(e.what()) == path + ": truncated (the file ends inside the model)" ? 0 : 3);
    } catch (...) {
      _exit(4);  // a failed allocation
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: accepted, 3: another ModelError, 4: another exception";
}

// A NaN or infinite SVM weight (with a valid CRC) would make every confidence NaN: refused at load,
// naming the file and the field.
TEST(BowModel, NonFiniteSvmWeightsAreRefusedByName) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> imgs;
  std::vector<int> labels;
  for (int i = 0; i < 6; ++i) imgs.push_back(scene(rng, i % 2)), labels.push_back(i % 2);
  bow::TrainConfig c;
  c.k = 8;
  c.samples_per_image = 20;
  c.levels = 0;
  test::TempDir dir;
  const std::string path = (dir.path() / "m.bow").string();
  bow::Model::train(imgs, labels, {"a", "b"}, c).save(path);
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    test::set_bow_svm_weights(path, bad);
    try {
      bow::Model::load(path);
      ADD_FAILURE() << "accepted an SVM weight of " << bad;
    } catch (const bow::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": a non-finite value in the SVM weights (row 0, column 0)"),
                std::string::npos)
          << e.what();
    }
  }
  test::set_bow_svm_weights(path, 0.5);  // finite weights load
  EXPECT_NO_THROW(bow::Model::load(path));
}

}  // namespace
}  // namespace prism
