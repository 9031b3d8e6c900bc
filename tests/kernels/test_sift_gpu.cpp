// kernels/sift on the GPU: the CUDA path equals the CPU path bit for bit (every keypoint field and
// every descriptor value) on real photos and fresh random textures, gives the same bits on every
// run, reads pitched device images, and is interchangeable with cv::SIFT within the tolerance
// test_sift.cpp states for the CPU path.
#include <gtest/gtest.h>

#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <atomic>
#include <random>
#include <thread>

#include "common/device_array.h"
#include "ppm.h"
#include "prism_test.h"
#include "sift/sift.h"
#include "sift_compare.h"
#include "texture_cases.h"

namespace prism {
namespace {

void expect_same(const sift::Result& a, const sift::Result& b, const std::string& what) {
  ASSERT_EQ(a.keypoints.size(), b.keypoints.size()) << what;
  for (size_t i = 0; i < a.keypoints.size(); ++i) {
    const cv::KeyPoint &p = a.keypoints[i], &q = b.keypoints[i];
    ASSERT_TRUE(p.pt == q.pt && p.size == q.size && p.angle == q.angle && p.response == q.response &&
                p.octave == q.octave)
        << what << ": keypoint " << i << " (" << p.pt << " " << p.size << " " << p.angle << " " << p.response
        << ") vs (" << q.pt << " " << q.size << " " << q.angle << " " << q.response << ")";
  }
  ASSERT_EQ(a.descriptors.size(), b.descriptors.size()) << what;
  if (!a.descriptors.empty()) {
    EXPECT_EQ(cv::norm(a.descriptors, b.descriptors, cv::NORM_INF), 0) << what;
  }
}

std::vector<std::pair<std::string, cv::Mat>> cases() {
  std::vector<std::pair<std::string, cv::Mat>> out;
  for (const char* name : {"fruits", "baboon"}) {
    const std::string path = test::data_dir() + "/images/" + name + ".ppm";
    cv::Mat bgr = test::read_ppm(path), grey;
    if (bgr.empty()) continue;
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    out.emplace_back(name, grey);
  }
  const unsigned seed = std::random_device{}();
  std::cout << "random textures from seed " << seed << "\n";
  std::mt19937 rng(seed);
  for (int i = 0; i < 3; ++i)
    out.emplace_back("random texture " + std::to_string(i),
                     test::random_texture(rng, 200 + int(rng() % 500), 150 + int(rng() % 400)));
  return out;
}

TEST(SiftGpu, EqualsTheCpuPathBitForBit) {
  PRISM_NEED_GPU();
  if (test::gpu_required()) PRISM_NEED_FILE(test::data_dir() + "/images/fruits.ppm");
  sift::CudaExtractor all;
  sift::Params p768;
  p768.nfeatures = 768;
  sift::CudaExtractor best(p768);
  for (const auto& [what, grey] : cases()) {
    SCOPED_TRACE(what + " " + std::to_string(grey.cols) + "x" + std::to_string(grey.rows));
    expect_same(sift::detect_and_compute_cpu(grey), all.detect_and_compute(grey), what);
    expect_same(sift::detect_and_compute_cpu(grey, p768), best.detect_and_compute(grey), what + " (768)");
  }
}

TEST(SiftGpu, SameBitsOnEveryRunAndSize) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  const cv::Mat big = test::random_texture(rng, 640, 480), small = test::random_texture(rng, 320, 240);
  sift::CudaExtractor x;
  const sift::Result first = x.detect_and_compute(big);
  ASSERT_GT(first.keypoints.size(), 100u);
  for (int run = 0; run < 5; ++run) {
    x.detect_and_compute(small);  // the buffers are reused at another size in between
    expect_same(first, x.detect_and_compute(big), "run " + std::to_string(run));
  }
  expect_same(first, sift::CudaExtractor().detect_and_compute(big), "a fresh extractor");
}

// Many extractors on their threads (textureid elements sharing prism run's one context), each
// capturing graphs for new sizes, while another thread allocates and frees device memory (cudaFree
// synchronises the device, which may invalidate a capture in progress): every result is still the
// CPU path's, and no capture error reaches a caller.
TEST(SiftGpu, CapturesSurviveAllocationsOnOtherThreads) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  std::vector<cv::Mat> images;
  for (int i = 0; i < 6; ++i) images.push_back(test::random_texture(rng, 160 + 48 * i, 120 + 40 * i));
  std::vector<sift::Result> expected;
  for (const cv::Mat& g : images) expected.push_back(sift::detect_and_compute_cpu(g));
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      void* p = nullptr;
      if (cudaMalloc(&p, size_t(1) << 20) == cudaSuccess) cudaFree(p);
      cudaGetLastError();
    }
  });
  constexpr int kThreads = 8;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        sift::CudaExtractor x;
        for (int round = 0; round < 3; ++round)
          for (size_t i = 0; i < images.size(); ++i) {
            const size_t k = (i + size_t(t)) % images.size();  // sizes in another order on each thread
            const sift::Result r = x.detect_and_compute(images[k]);
            if (r.keypoints.size() != expected[k].keypoints.size() ||
                (!r.descriptors.empty() && cv::norm(r.descriptors, expected[k].descriptors, cv::NORM_INF) != 0))
              failures[t] = "image " + std::to_string(k) + " differs from the CPU path";
          }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  stop = true;
  churn.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

// Enrolment's batches: images of one size share every launch, and each result is the CPU path's
// for that image, whatever the batch around it (sizes interleaved, one image alone at its size,
// batches cut by the byte limit, an image too small for any keypoint, a flat one).
TEST(SiftGpu, BatchesEqualTheCpuPathImageByImage) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  std::vector<cv::Mat> images;
  for (int i = 0; i < 14; ++i) {
    const cv::Size s = i % 3 == 0 ? cv::Size(320, 240) : i % 3 == 1 ? cv::Size(257, 191) : cv::Size(64, 48);
    images.push_back(test::random_texture(rng, s.width, s.height));
  }
  images.push_back(test::random_texture(rng, 401, 333));       // alone at its size
  images.push_back(cv::Mat(100, 120, CV_8U, cv::Scalar(77)));  // flat: no keypoint
  images.push_back(cv::Mat(100, 120, CV_8U, cv::Scalar(78)));
  images.push_back(test::random_texture(rng, 8, 8));        // the smallest accepted
  images.push_back(images[0](cv::Rect(10, 10, 200, 150)));  // a view: rows not packed
  sift::Params p768;
  p768.nfeatures = 768;
  std::vector<sift::Result> want;
  for (const cv::Mat& g : images) want.push_back(sift::detect_and_compute_cpu(g, p768));
  sift::CudaExtractor x(p768);
  for (const size_t max_bytes : {size_t(1) << 31, size_t(100) << 20, size_t(1)}) {  // all, a few, one per batch
    const std::vector<sift::Result> got = x.detect_and_compute_batch(images, max_bytes);
    ASSERT_EQ(got.size(), images.size());
    for (size_t i = 0; i < images.size(); ++i)
      expect_same(want[i], got[i],
                  "image " + std::to_string(i) + " (" + std::to_string(images[i].cols) + "x" +
                      std::to_string(images[i].rows) + "), max_bytes " + std::to_string(max_bytes));
  }
  EXPECT_GT(want[0].keypoints.size(), 50u);
  EXPECT_TRUE(want[15].keypoints.empty());
  // Single calls after batches reuse the grown buffers and give the same bits.
  expect_same(want[1], x.detect_and_compute(images[1]), "single after batches");
  EXPECT_TRUE(x.detect_and_compute_batch({}).empty());
  try {
    x.detect_and_compute_batch({images[0], cv::Mat(4, 4, CV_8U)});
    ADD_FAILURE() << "a 4x4 image accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("image 1 of the batch"), std::string::npos) << e.what();
  }
}

TEST(SiftGpu, ReadsPitchedDeviceImages) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  const cv::Mat grey = test::random_texture(rng, 333, 251);
  const size_t pitch = 512;
  std::vector<uint8_t> host(pitch * grey.rows, 0xAB);  // padding that must never be read as pixels
  for (int y = 0; y < grey.rows; ++y) std::copy(grey.ptr(y), grey.ptr(y) + grey.cols, host.data() + y * pitch);
  gpu::DeviceArray<uint8_t> dev = gpu::device_copy(host.data(), host.size());
  sift::CudaExtractor x;
  expect_same(x.detect_and_compute(grey), x.detect_and_compute_device(dev.data(), pitch, grey.cols, grey.rows),
              "pitched");
  EXPECT_THROW(x.detect_and_compute_device(nullptr, pitch, grey.cols, grey.rows), std::invalid_argument);
  EXPECT_THROW(x.detect_and_compute_device(dev.data(), pitch, 4, 4), std::invalid_argument);
  EXPECT_THROW(x.detect_and_compute_device(dev.data(), 100, grey.cols, grey.rows), std::invalid_argument);  // pitch
  // Parameters the CUDA path cannot run are refused at construction, naming them (one octave
  // layer needs a 91-tap blur at sigma 1.6; the CUDA blur takes 63).
  sift::Params one_layer;
  one_layer.octave_layers = 1;
  try {
    sift::CudaExtractor bad(one_layer);
    ADD_FAILURE() << "octave_layers 1 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("octave_layers 1"), std::string::npos) << e.what();
  }
}

TEST(SiftGpu, InterchangeableWithOpenCv) {
  PRISM_NEED_GPU();
  sift::CudaExtractor x;
  for (const auto& [what, grey] : cases()) {
    std::vector<cv::KeyPoint> ref;
    cv::Mat ref_desc;
    cv::SIFT::create()->detectAndCompute(grey, cv::noArray(), ref, ref_desc);
    const sift::Result ours = x.detect_and_compute(grey);
    const test::SiftAgreement a = test::compare_sift(ref, ref_desc, ours.keypoints, ours.descriptors);
    std::cout << what << ": " << a.str() << "\n";
    EXPECT_TRUE(test::within_tolerance(a)) << what << ": " << a.str();
  }
}

}  // namespace
}  // namespace prism
