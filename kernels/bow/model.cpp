#include "bow/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "bow/histogram.h"
#include "common/durable_file.h"
#if defined(PRISM_HAVE_CUDA)
#include "bow/gpu_histogram.h"
#endif

namespace prism::bow {

namespace {

constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'B', 'O', 'W'};
constexpr uint32_t kVersion = 1;

// Runs body(i) for i in [0, n) on all cores, reporting each finished item to `progress`.
template <class Body>
void for_each_item(int n, const std::string& stage, const TrainProgress& progress, Body body) {
  std::atomic<int> done{0};
  std::mutex report;
  cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      body(i);
      const int d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(report);
        progress(stage, d, n);
      }
    }
  });
}

void check_grey(const cv::Mat& m, const char* what) {
  if (m.empty() || m.type() != CV_8UC1) throw std::invalid_argument(std::string(what) + ": images must be 8-bit grey");
}

// Serialisation: little-endian plain values and length-prefixed blocks.
struct Writer {
  std::vector<uint8_t> bytes;
  template <class T>
  void put(const T& v) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), b, b + sizeof(T));
  }
  void put_string(const std::string& s) {
    put(uint32_t(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void put_mat(const cv::Mat& m) {  // rows, cols, type, data (continuous)
    const cv::Mat c = m.isContinuous() ? m : m.clone();
    put(int32_t(c.rows));
    put(int32_t(c.cols));
    put(int32_t(c.type()));
    bytes.insert(bytes.end(), c.data, c.data + c.total() * c.elemSize());
  }
};

struct Reader {
  const std::vector<uint8_t>& bytes;
  size_t pos;
  const std::string& file;
  [[noreturn]] void fail(const std::string& what) const { throw ModelError(file + ": " + what); }
  void need(size_t n) const {
    if (n > bytes.size() - pos) fail("truncated (the file ends inside the model)");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (n > 4096) fail("a name of " + std::to_string(n) + " bytes");
    need(n);
    std::string s(reinterpret_cast<const char*>(bytes.data() + pos), n);
    pos += n;
    return s;
  }
  cv::Mat get_mat(int type, const char* what) {
    const int rows = get<int32_t>(), cols = get<int32_t>(), t = get<int32_t>();
    if (t != type || rows < 0 || cols < 0 || int64_t(rows) * cols > (int64_t(1) << 31))
      fail(std::string("bad ") + what + " (" + std::to_string(rows) + " x " + std::to_string(cols) + ", type " +
           std::to_string(t) + ")");
    // Checked before allocating: a few bytes declaring 2^31 values must not cost gigabytes.
    const size_t n = size_t(rows) * size_t(cols) * CV_ELEM_SIZE(type);
    need(n);
    cv::Mat m(rows, cols, type);
    if (n) std::memcpy(m.data, bytes.data() + pos, n);
    pos += n;
    // A NaN or infinity here would make every distance or confidence NaN (and "confidence":nan).
    for (int y = 0; y < rows && (type == CV_32F || type == CV_64F); ++y)
      for (int x = 0; x < cols; ++x)
        if (!std::isfinite(type == CV_32F ? double(m.at<float>(y, x)) : m.at<double>(y, x)))
          fail(std::string("a non-finite value in the ") + what + " (row " + std::to_string(y) + ", column " +
               std::to_string(x) + ")");
    return m;
  }
};

// Every row of `h` re-weighted from `from` to `to` pyramid levels.
cv::Mat reweight_pyramid(const cv::Mat& h, int k, int from, int to) {
  cv::Mat out(h.rows, histogram_length(k, to), CV_32F);
  for (int r = 0; r < h.rows; ++r) {
    const std::vector<float> row = coarser_pyramid(h.ptr<float>(r), k, from, to);
    std::copy(row.begin(), row.end(), out.ptr<float>(r));
  }
  return out;
}

cv::Mat hellinger_rows(const cv::Mat& h) {
  cv::Mat out;
  cv::sqrt(h, out);
  return out;
}

}  // namespace

struct Model::Gpu {
#if defined(PRISM_HAVE_CUDA)
  std::mutex lock;
  GpuHistogrammer histogrammer;
  Gpu(const FilterBank& bank, const cv::Mat& dictionary, int levels) : histogrammer(bank, dictionary, levels) {}
#endif
};

namespace {
// Whether `device` means the GPU here; kCuda without a usable one throws.
bool choose_gpu(gpu::Device device, std::string* why = nullptr) {
  std::string reason;
  const bool usable = gpu::available(&reason);
  if (why) *why = reason;
  if (device == gpu::Device::kCuda && !usable) throw gpu::CudaError("device=cuda but " + reason);
  return usable && device != gpu::Device::kCpu;
}
}  // namespace

void Model::set_device(gpu::Device device) {
  gpu_.reset();
  std::string why;
  if (!choose_gpu(device, &why)) {
    device_ = device == gpu::Device::kAuto ? "cpu (" + why + ")" : "cpu";
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  gpu_ = std::make_shared<Gpu>(bank_, dictionary_, config_.levels);
  device_ = "cuda:0 (" + gpu::device_name(0) + ")";
#endif
}

std::string Model::device_description() const { return device_; }

std::vector<float> hellinger(const std::vector<float>& h) {
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = std::sqrt(h[i]);
  return out;
}

Model Model::train(const std::vector<cv::Mat>& images, const std::vector<int>& labels,
                   const std::vector<std::string>& class_names, const TrainConfig& config,
                   const TrainProgress& progress) {
  const int n = int(images.size()), classes = int(class_names.size());
  if (n == 0 || int(labels.size()) != n)
    throw std::invalid_argument("bow train: no images, or not one label per image");
  if (classes < 2) throw std::invalid_argument("bow train: need at least 2 classes");
  for (int l : labels)
    if (l < 0 || l >= classes) throw std::invalid_argument("bow train: label " + std::to_string(l) + " out of range");
  for (const cv::Mat& im : images) check_grey(im, "bow train");
  if (config.samples_per_image < 1 || config.levels < 0 || config.levels > 3 || config.knn < 1)
    throw std::invalid_argument("bow train: samples per image >= 1, levels 0..3 and knn >= 1 are needed");
  Model m;
  m.config_ = config;
  m.bank_ = FilterBank(config.bank);
  m.class_names_ = class_names;
  const int d = m.bank_.filters();

  // 1. Filter responses; samples_per_image random pixels of each training image (per-image seeds:
  //    the same samples whatever the thread count).
  const int per = config.samples_per_image;
  cv::Mat samples(n * per, d, CV_32F);
  for_each_item(n, "filters", progress, [&](int i) {
    const cv::Mat r = filter_responses(images[i], m.bank_);
    std::mt19937_64 rng(config.seed * 0x9E3779B97F4A7C15ull + uint64_t(i));
    for (int s = 0; s < per; ++s) {
      const int y = int(rng() % uint64_t(r.rows)), x = int(rng() % uint64_t(r.cols));
      std::memcpy(samples.ptr<float>(i * per + s), r.ptr<float>(y) + size_t(x) * d, sizeof(float) * d);
    }
  });

  // 2. The dictionary.
  KMeansParams kp;
  kp.k = config.k;
  kp.max_iterations = config.kmeans_iterations;
  kp.seed = config.seed;
  const KMeansProgress kmeans_progress = [&](int it, double, int) {
    if (progress) progress("k-means", it, config.kmeans_iterations);
  };
  const bool on_gpu = choose_gpu(config.device);
#if defined(PRISM_HAVE_CUDA)
  if (on_gpu)
    m.kmeans_ = kmeans_cuda(samples, kp, kmeans_progress);
  else
#endif
    m.kmeans_ = kmeans(samples, kp, kmeans_progress);
  m.dictionary_ = m.kmeans_.centers;
  m.set_device(on_gpu ? gpu::Device::kCuda : gpu::Device::kCpu);  // the histograms

  // 3. Training histograms, 4. the classifier.
  m.train_histograms_.create(n, histogram_length(config.k, config.levels), CV_32F);
  for_each_item(n, "histograms", progress, [&](int i) {
    const std::vector<float> h = m.histogram(images[i]);
    std::copy(h.begin(), h.end(), m.train_histograms_.ptr<float>(i));
  });
  m.train_labels_ = labels;
  if (config.classifier == ClassifierKind::kSvm) {
    if (progress) progress("classifier", 0, 1);
    SvmParams sp;
    sp.C = config.svm_c;
    sp.seed = config.seed;
    m.svm_.train(hellinger_rows(m.train_histograms_), labels, classes, sp);
    if (progress) progress("classifier", 1, 1);
  }
  return m;
}

Model Model::with_classifier(ClassifierKind kind, int levels) const {
  if (train_histograms_.empty()) throw std::logic_error("with_classifier: the model holds no training histograms");
  if (levels < 0 || levels > config_.levels)
    throw std::invalid_argument("with_classifier: levels must be 0.." + std::to_string(config_.levels));
  Model m = *this;
  m.config_.classifier = kind;
  m.config_.levels = levels;
  m.train_histograms_ = reweight_pyramid(train_histograms_, config_.k, config_.levels, levels);
  if (gpu_) m.set_device(gpu::Device::kCuda);  // a histogrammer for the new pyramid
  m.svm_ = LinearSvm();
  if (kind == ClassifierKind::kSvm) {
    SvmParams sp;
    sp.C = config_.svm_c;
    sp.seed = config_.seed;
    m.svm_.train(hellinger_rows(m.train_histograms_), train_labels_, int(class_names_.size()), sp);
  }
  return m;
}

std::vector<float> Model::histogram(const cv::Mat& grey) const {
  check_grey(grey, "bow classify");
#if defined(PRISM_HAVE_CUDA)
  if (gpu_) {
    std::lock_guard<std::mutex> hold(gpu_->lock);
    return gpu_->histogrammer.histogram(grey);
  }
#endif
  return word_histogram(visual_words(filter_responses(grey, bank_), dictionary_), config_.k, config_.levels);
}

std::vector<float> Model::histogram_device(const uint8_t* grey, size_t pitch, int width, int height) const {
#if defined(PRISM_HAVE_CUDA)
  if (gpu_) {
    std::lock_guard<std::mutex> hold(gpu_->lock);
    return gpu_->histogrammer.histogram_device(grey, pitch, width, height);
  }
#else
  (void)grey, (void)pitch, (void)width, (void)height;
#endif
  throw std::logic_error("bow classify: an image in GPU memory needs the model on the GPU (set_device)");
}

Prediction Model::classify_histogram(const std::vector<float>& h) const {
  if (int(h.size()) != histogram_length(config_.k, config_.levels))
    throw std::invalid_argument("bow classify: histogram of " + std::to_string(h.size()) + " bins, the model needs " +
                                std::to_string(histogram_length(config_.k, config_.levels)));
  if (config_.classifier == ClassifierKind::kKnn)
    return knn_chi2(train_histograms_, train_labels_, int(class_names_.size()), h.data(), config_.knn);
  return svm_.predict(hellinger(h).data());
}

void Model::save(const std::string& path) const {
  Writer w;
  w.bytes.reserve(64 + dictionary_.total() * 4 + train_histograms_.total() * 4 + svm_.weights().total() * 8);
  for (char ch : kMagic) w.put(ch);
  w.put(kVersion);
  w.put(uint32_t(config_.bank.sizes.size()));
  for (int s : config_.bank.sizes) w.put(int32_t(s));
  w.put(int32_t(config_.k));
  w.put(int32_t(config_.samples_per_image));
  w.put(int32_t(config_.kmeans_iterations));
  w.put(int32_t(config_.levels));
  w.put(uint32_t(config_.classifier));
  w.put(int32_t(config_.knn));
  w.put(config_.svm_c);
  w.put(config_.seed);
  w.put(uint32_t(class_names_.size()));
  for (const std::string& c : class_names_) w.put_string(c);
  w.put_mat(dictionary_);
  if (config_.classifier == ClassifierKind::kKnn) {
    w.put_mat(train_histograms_);
    w.put_mat(cv::Mat(train_labels_, true).reshape(1, 1));
  } else {
    w.put_mat(svm_.weights());
  }
  w.put(crc32(w.bytes.data(), w.bytes.size()));
  const std::filesystem::path final(path);
  const std::filesystem::path tmp = final.string() + ".tmp";
  try {
    write_atomically(tmp, final, w.bytes);
  } catch (const FileError& e) {
    throw ModelError(e.what());
  }
}

Model Model::load(const std::string& path) {
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file(path);
  } catch (const FileError& e) {
    throw ModelError(e.what());
  }
  Reader r{bytes, 0, path};
  if (bytes.size() < 12 || std::memcmp(bytes.data(), kMagic, 8) != 0) r.fail("not a Prism bag-of-words model");
  r.pos = 8;
  const uint32_t version = r.get<uint32_t>();
  if (version != kVersion)
    r.fail("model format " + std::to_string(version) + ", this build reads format " + std::to_string(kVersion));
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (crc32(bytes.data(), bytes.size() - 4) != stored_crc) r.fail("CRC-32 mismatch (damaged or truncated)");
  Model m;
  TrainConfig& c = m.config_;
  const uint32_t sizes = r.get<uint32_t>();
  if (sizes == 0 || sizes > 64) r.fail("bad filter bank (" + std::to_string(sizes) + " sizes)");
  c.bank.sizes.clear();
  for (uint32_t i = 0; i < sizes; ++i) c.bank.sizes.push_back(r.get<int32_t>());
  c.k = r.get<int32_t>();
  c.samples_per_image = r.get<int32_t>();
  c.kmeans_iterations = r.get<int32_t>();
  c.levels = r.get<int32_t>();
  const uint32_t kind = r.get<uint32_t>();
  if (kind > 1) r.fail("unknown classifier " + std::to_string(kind));
  c.classifier = ClassifierKind(kind);
  c.knn = r.get<int32_t>();
  c.svm_c = r.get<double>();
  c.seed = r.get<uint64_t>();
  if (!std::isfinite(c.svm_c)) r.fail("SVM C is not finite");
  if (c.k < 1 || c.levels < 0 || c.levels > 3 || c.knn < 1) r.fail("bad configuration");
  try {
    m.bank_ = FilterBank(c.bank);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  const uint32_t classes = r.get<uint32_t>();
  if (classes < 2 || classes > 100000) r.fail("bad class count " + std::to_string(classes));
  for (uint32_t i = 0; i < classes; ++i) m.class_names_.push_back(r.get_string());
  m.dictionary_ = r.get_mat(CV_32F, "dictionary");
  if (m.dictionary_.rows != c.k || m.dictionary_.cols != m.bank_.filters())
    r.fail("dictionary does not fit the configuration");
  const int length = histogram_length(c.k, c.levels);
  if (c.classifier == ClassifierKind::kKnn) {
    m.train_histograms_ = r.get_mat(CV_32F, "training histograms");
    const cv::Mat l = r.get_mat(CV_32S, "training labels");
    if (m.train_histograms_.cols != length || l.rows != 1 || l.cols != m.train_histograms_.rows || l.cols == 0)
      r.fail("training histograms do not fit the configuration");
    m.train_labels_.assign(l.ptr<int>(), l.ptr<int>() + l.cols);
    for (int v : m.train_labels_)
      if (v < 0 || v >= int(classes)) r.fail("training label " + std::to_string(v) + " out of range");
  } else {
    const cv::Mat w = r.get_mat(CV_64F, "SVM weights");
    if (w.rows != int(classes) || w.cols != length + 1) r.fail("SVM weights do not fit the configuration");
    m.svm_.set_weights(w);
  }
  if (r.pos != bytes.size() - 4) r.fail("unexpected data after the model");
  return m;
}

}  // namespace prism::bow
