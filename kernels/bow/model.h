// A bag-of-visual-words scene classifier: the filter bank, the dictionary, the histogram layout
// and a trained classifier, with training, classification and a versioned model file.
//
// Training (Model::train): the filter responses of every training image; `samples_per_image`
// random pixels of each (training images only) go into k-means, which makes the dictionary; every
// training image's word histogram (spatial pyramid of `levels`) then trains the classifier:
// k-NN with the chi-squared distance on the histograms, or a linear SVM on their square roots (a
// Hellinger-kernel SVM).
//
// The model file: magic "PRISMBOW", version, then the configuration, class names, dictionary and
// classifier data, and a CRC-32 of everything before it. It is written atomically (a temporary file,
// fsync, rename), so a crash mid-write leaves the previous model. Loading checks magic, version,
// sizes and CRC and names the file in a ModelError.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bow/classifier.h"
#include "bow/filter_bank.h"
#include "bow/kmeans.h"
#include "common/gpu.h"

namespace prism::bow {

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ClassifierKind : uint32_t { kKnn = 0, kSvm = 1 };

struct TrainConfig {
  FilterBankParams bank;
  int k = 500;                  // dictionary size
  int samples_per_image = 200;  // training pixels per image for k-means (the reference's p)
  int kmeans_iterations = 100;
  int levels = 2;  // spatial pyramid levels (0: plain histogram)
  ClassifierKind classifier = ClassifierKind::kSvm;
  int knn = 10;  // k-NN voters (the reference's K)
  double svm_c = 10.0;
  uint64_t seed = 1;
  gpu::Device device = gpu::Device::kAuto;  // k-means and histograms on the GPU when there is one
};

// Training progress: stage ("filters", "k-means", "histograms", "classifier"), done, total.
using TrainProgress = std::function<void(const std::string& stage, int done, int total)>;

class Model {
 public:
  // `images`: 8-bit grey; `labels` index `class_names`. std::invalid_argument on bad input.
  static Model train(const std::vector<cv::Mat>& images, const std::vector<int>& labels,
                     const std::vector<std::string>& class_names, const TrainConfig& config,
                     const TrainProgress& progress = {});

  // The word histogram of an 8-bit grey image (the classifier's input before any feature map).
  std::vector<float> histogram(const cv::Mat& grey) const;
  // The same of an 8-bit grey image in device memory (`pitch` bytes per row), in the CUDA context
  // current when set_device made the GPU path (std::logic_error on the CPU path).
  std::vector<float> histogram_device(const uint8_t* grey, size_t pitch, int width, int height) const;
  Prediction classify_histogram(const std::vector<float>& histogram) const;
  Prediction classify(const cv::Mat& grey) const { return classify_histogram(histogram(grey)); }

  // Where histogram() runs (the filter bank and words; the classifier is on the CPU). kCuda throws
  // gpu::CudaError without a usable GPU. Concurrent callers share the GPU one at a time.
  void set_device(gpu::Device device);
  std::string device_description() const;

  // A second classifier over the same dictionary and training histograms (for comparisons).
  Model with_classifier(ClassifierKind kind, int levels) const;

  void save(const std::string& path) const;    // atomic; ModelError naming the file
  static Model load(const std::string& path);  // ModelError naming the file and the fault

  const TrainConfig& config() const { return config_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const cv::Mat& dictionary() const { return dictionary_; }
  const FilterBank& bank() const { return bank_; }
  const KMeansResult& kmeans_stats() const { return kmeans_; }  // after train only

 private:
  TrainConfig config_;
  FilterBank bank_;
  std::vector<std::string> class_names_;
  cv::Mat dictionary_;        // k x filters, CV_32F
  cv::Mat train_histograms_;  // N x length at config_.levels, CV_32F (kept for k-NN and re-training)
  std::vector<int> train_labels_;
  LinearSvm svm_;
  KMeansResult kmeans_;
  struct Gpu;
  std::shared_ptr<Gpu> gpu_;  // the GPU histogram path, when set_device chose it
  std::string device_ = "cpu";
};

// The square-root (Hellinger) map applied before the SVM.
std::vector<float> hellinger(const std::vector<float>& h);

}  // namespace prism::bow
