// prism bow: bag-of-visual-words scene classification: train a model, evaluate it with a
// confusion matrix, classify images.
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bow/histogram.h"
#include "common/regular_file.h"
#include "bow/model.h"
#include "gst_setup.h"
#include "options.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* const kUsage =
    "usage: prism bow train --data DIR --train LIST --out MODEL [options] [--eval LIST]\n"
    "       prism bow eval --model MODEL --data DIR --test LIST [--confusion PNG]\n"
    "       prism bow classify --model MODEL [--json] IMAGE...\n"
    "\n"
    "LIST: one image path per line, relative to DIR; its first folder is the class (as sun8's\n"
    "train.txt and test.txt: 'airport/sun_x.jpg').\n"
    "\n"
    "train options:\n"
    "  --k N             dictionary size (default 500)\n"
    "  --levels L        spatial pyramid levels, 0..3 (default 2; 0: one histogram)\n"
    "  --classifier C    svm (linear on square-rooted histograms, default) or knn (chi-squared)\n"
    "  --knn K           k-NN voters (default 10)\n"
    "  --svm-c C         SVM regularisation (default 10)\n"
    "  --samples N       training pixels per image for k-means (default 200)\n"
    "  --iterations N    k-means iterations at most (default 100)\n"
    "  --sizes A,B,...   filter sizes, odd 3..31 (default 3,7,11,15,19,23,27,31: 32 filters)\n"
    "  --seed N          (default 1)\n"
    "  --eval LIST       then evaluate on LIST: this model and k-NN/SVM with and without the pyramid\n"
    "  --device D        auto (default), cpu or cuda: where k-means, filters and words run (all commands)\n"
    "  --confusion PNG   (eval, train --eval) write the confusion matrix as a picture\n";

struct Options {
  std::string sub, data, train, test, model, out, confusion, eval;
  bool json = false;
  gpu::Device device = gpu::Device::kAuto;
  bow::TrainConfig config;
  std::vector<std::string> args;
};

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) throw UsageError("give a subcommand: train, eval or classify");
  o.sub = argv[1];
  bow::TrainConfig& c = o.config;
  using Name = const std::string&;
  using Value = const std::string&;
  const std::vector<Option> table = {
      with_value({"--data"}, o.data),
      with_value({"--train"}, o.train),
      with_value({"--test"}, o.test),
      with_value({"--model"}, o.model),
      with_value({"--out"}, o.out),
      with_value({"--eval"}, o.eval),
      with_value({"--confusion"}, o.confusion),
      flag({"--json"}, o.json),
      with_value({"--device"}, [&](Name a, Value v) { o.device = parse_device(a, v); }),
      with_value({"--k"}, [&](Name a, Value v) { c.k = parse_int(a, v, 2, 100000); }),
      with_value({"--levels"}, [&](Name a, Value v) { c.levels = parse_int(a, v, 0, 3); }),
      with_value({"--knn"}, [&](Name a, Value v) { c.knn = parse_int(a, v, 1, 1000); }),
      with_value({"--samples"}, [&](Name a, Value v) { c.samples_per_image = parse_int(a, v, 1, 1000000); }),
      with_value({"--iterations"}, [&](Name a, Value v) { c.kmeans_iterations = parse_int(a, v, 1, 100000); }),
      with_value({"--seed"}, [&](Name a, Value v) { c.seed = uint64_t(parse_int(a, v, 0, 2147483647)); }),
      with_value({"--classifier"},
                 [&](Name, Value v) {
                   if (v == "svm")
                     c.classifier = bow::ClassifierKind::kSvm;
                   else if (v == "knn")
                     c.classifier = bow::ClassifierKind::kKnn;
                   else
                     throw UsageError("--classifier takes svm or knn, not '" + v + "'");
                 }),
      with_value({"--svm-c"}, [&](Name a, Value v) { c.svm_c = parse_number(a, v, 1e-6, 1e6); }),
      with_value({"--sizes"},
                 [&](Name, Value v) {
                   c.bank.sizes.clear();
                   std::stringstream ss(v);
                   std::string part;
                   while (std::getline(ss, part, ',')) c.bank.sizes.push_back(parse_int("--sizes", part, 3, 31));
                 }),
  };
  ParseRules rules;
  rules.positional = [&](const std::string& a) { o.args.push_back(a); };  // images (classify)
  parse_options(arguments(argc, argv, 2), table, rules);
  return o;
}

struct Item {
  std::string path, cls;
};

// LIST lines "class/file"; blank lines skipped. Errors name the list's file and line.
std::vector<Item> read_list(const std::string& data, const std::string& list) {
  std::istringstream in(RegularFile(list).read_text());  // a FIFO or /dev/zero is refused, not read forever
  std::vector<Item> items;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    const size_t slash = line.find('/');
    if (slash == std::string::npos || slash == 0)
      throw std::runtime_error(list + ":" + std::to_string(n) + ": '" + line +
                               "' has no class folder (want CLASS/FILE)");
    items.push_back({(fs::path(data) / line).string(), line.substr(0, slash)});
  }
  if (items.empty()) throw std::runtime_error(list + ": no images listed");
  return items;
}

std::vector<cv::Mat> load_all(const std::vector<Item>& items, const std::string& what) {
  std::vector<cv::Mat> out(items.size());
  Progress progress("load " + what, int(items.size()), true);
  std::mutex m;
  cv::parallel_for_(cv::Range(0, int(items.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      out[i] = load_grey(items[i].path);
      std::lock_guard<std::mutex> lock(m);
      progress.step();
    }
  });
  progress.finish();
  return out;
}

// A progress bar per training stage.
bow::TrainProgress stage_bars() {
  auto current = std::make_shared<std::pair<std::string, std::unique_ptr<Progress>>>();
  return [current](const std::string& stage, int done, int total) {
    if (current->first != stage) {
      if (current->second) current->second->finish();
      current->first = stage;
      current->second = std::make_unique<Progress>("train: " + stage, total, true);
    }
    current->second->step();
    if (done == total) current->second->finish();
  };
}

struct Confusion {
  std::vector<std::string> names;
  std::vector<std::vector<int>> m;  // [truth][predicted]
  int total = 0, right = 0;
  double accuracy() const { return total ? double(right) / total : 0.0; }
};

Confusion evaluate(const bow::Model& model, const std::vector<std::vector<float>>& hists,
                   const std::vector<int>& truth) {
  Confusion c;
  c.names = model.class_names();
  c.m.assign(c.names.size(), std::vector<int>(c.names.size(), 0));
  for (size_t i = 0; i < hists.size(); ++i) {
    const int p = model.classify_histogram(hists[i]).label;
    ++c.m[truth[i]][p];
    ++c.total;
    c.right += p == truth[i];
  }
  return c;
}

// The test histograms at the model's pyramid levels (each variant re-derives its own from them).
std::vector<std::vector<float>> test_histograms(const bow::Model& model, const std::vector<cv::Mat>& images) {
  std::vector<std::vector<float>> out(images.size());
  Progress progress("eval: histograms", int(images.size()), true);
  std::mutex m;
  cv::parallel_for_(cv::Range(0, int(images.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      out[i] = model.histogram(images[i]);
      std::lock_guard<std::mutex> lock(m);
      progress.step();
    }
  });
  progress.finish();
  return out;
}

std::string confusion_table(const Confusion& c) {
  std::ostringstream s;
  s << "| truth \\ predicted |";
  for (const auto& n : c.names) s << " " << n << " |";
  s << " accuracy |\n|---|";
  for (size_t i = 0; i <= c.names.size(); ++i) s << "---|";
  s << "\n";
  for (size_t t = 0; t < c.names.size(); ++t) {
    int row = 0;
    for (int v : c.m[t]) row += v;
    s << "| " << c.names[t] << " |";
    for (int v : c.m[t]) s << " " << v << " |";
    s << cv::format(" %.1f%% |\n", row ? 100.0 * c.m[t][t] / row : 0.0);
  }
  return s.str();
}

// The confusion matrix as a picture: rows truth, columns predicted, cell shade = row share.
cv::Mat confusion_picture(const Confusion& c, const std::string& title) {
  const int n = int(c.names.size()), cell = 56, left = 150, top = 150, W = left + n * cell + 20,
            H = top + n * cell + 50;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  for (int t = 0; t < n; ++t) {
    int row = 0;
    for (int v : c.m[t]) row += v;
    for (int p = 0; p < n; ++p) {
      const double share = row ? double(c.m[t][p]) / row : 0.0;
      const cv::Rect r(left + p * cell, top + t * cell, cell - 2, cell - 2);
      cv::rectangle(img, r, cv::Scalar(255 - 200 * share, 255 - 120 * share, 255 - 40 * share), cv::FILLED);
      cv::putText(img, std::to_string(c.m[t][p]), cv::Point(r.x + 14, r.y + 34), cv::FONT_HERSHEY_SIMPLEX, 0.55,
                  share > 0.5 ? cv::Scalar(255, 255, 255) : cv::Scalar(0, 0, 0), 1);
    }
    cv::putText(img, c.names[t], cv::Point(8, top + t * cell + 34), cv::FONT_HERSHEY_SIMPLEX, 0.45, cv::Scalar(0, 0, 0),
                1);
  }
  for (int p = 0; p < n; ++p) {  // column names, rotated
    cv::Mat label(24, top - 10, CV_8UC3, cv::Scalar(255, 255, 255));
    cv::putText(label, c.names[p], cv::Point(4, 17), cv::FONT_HERSHEY_SIMPLEX, 0.45, cv::Scalar(0, 0, 0), 1);
    cv::Mat rotated;
    cv::rotate(label, rotated, cv::ROTATE_90_COUNTERCLOCKWISE);
    rotated.copyTo(img(cv::Rect(left + p * cell + 16, 5, rotated.cols, rotated.rows)));
  }
  cv::putText(img, title + cv::format(": %.1f%% of %d", 100 * c.accuracy(), c.total), cv::Point(8, H - 18),
              cv::FONT_HERSHEY_SIMPLEX, 0.5, cv::Scalar(0, 0, 0), 1);
  return img;
}

std::vector<int> class_indices(const std::vector<Item>& items, const std::vector<std::string>& names,
                               const std::string& list) {
  std::vector<int> out;
  for (const Item& it : items) {
    const auto p = std::find(names.begin(), names.end(), it.cls);
    if (p == names.end()) throw std::runtime_error(list + ": class '" + it.cls + "' is not one the model knows");
    out.push_back(int(p - names.begin()));
  }
  return out;
}

std::string variant_name(const bow::TrainConfig& c) {
  return std::string(c.classifier == bow::ClassifierKind::kKnn ? "k-NN chi-squared, K = " + std::to_string(c.knn)
                                                               : "linear SVM on sqrt(histogram)") +
         (c.levels ? ", spatial pyramid L = " + std::to_string(c.levels) : ", one histogram");
}

int run_eval(const bow::Model& model, const Options& o, const std::string& list, bool variants) {
  const std::vector<Item> items = read_list(o.data, list);
  const std::vector<int> truth = class_indices(items, model.class_names(), list);
  const std::vector<cv::Mat> images = load_all(items, "test images");
  const auto t0 = Clock::now();
  const std::vector<std::vector<float>> hists = test_histograms(model, images);
  const double per_image_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / images.size();
  const Confusion c = evaluate(model, hists, truth);
  std::printf("model: %s, k = %d, %d filters; histograms on %s\n", variant_name(model.config()).c_str(),
              model.config().k, model.bank().filters(), model.device_description().c_str());
  std::printf("accuracy on %s: %.1f%% (%d of %d); filters + words + histogram %.1f ms per image on %d threads\n\n",
              list.c_str(), 100 * c.accuracy(), c.right, c.total, per_image_ms, cv::getNumThreads());
  std::printf("%s\n", confusion_table(c).c_str());
  if (!o.confusion.empty()) {
    write_png(confusion_picture(c, variant_name(model.config())), o.confusion);
    std::printf("confusion matrix picture: %s\n", o.confusion.c_str());
  }
  if (variants) {
    std::printf("\n| classifier | accuracy |\n|---|---|\n");
    const int L = model.config().levels;
    for (int levels : {0, L}) {
      for (bow::ClassifierKind kind : {bow::ClassifierKind::kKnn, bow::ClassifierKind::kSvm}) {
        const bow::Model v = model.with_classifier(kind, levels);
        std::vector<std::vector<float>> h(hists.size());
        for (size_t i = 0; i < hists.size(); ++i)
          h[i] = bow::coarser_pyramid(hists[i].data(), model.config().k, L, levels);
        std::printf("| %s | %.1f%% |\n", variant_name(v.config()).c_str(), 100 * evaluate(v, h, truth).accuracy());
      }
      if (L == 0) break;
    }
  }
  return 0;
}

int train(const Options& o) {
  if (o.data.empty() || o.train.empty() || o.out.empty()) throw UsageError("train needs --data, --train and --out");
  const std::vector<Item> items = read_list(o.data, o.train);
  std::set<std::string> names_set;
  for (const Item& it : items) names_set.insert(it.cls);
  const std::vector<std::string> names(names_set.begin(), names_set.end());
  if (names.size() < 2) throw std::runtime_error(o.train + ": one class only ('" + names.front() + "')");
  const std::vector<int> labels = class_indices(items, names, o.train);
  const std::vector<cv::Mat> images = load_all(items, "training images");
  const auto t0 = Clock::now();
  bow::TrainConfig config = o.config;
  config.device = o.device;
  const bow::Model model = bow::Model::train(images, labels, names, config, stage_bars());
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  model.save(o.out);
  const bow::KMeansResult& km = model.kmeans_stats();
  std::printf(
      "trained %s on %zu images of %zu classes in %.1f s (%d threads, k-means and histograms on %s): k-means "
      "%d iterations%s, %d empty clusters re-seeded; model %s\n",
      variant_name(model.config()).c_str(), images.size(), names.size(), train_s, cv::getNumThreads(),
      model.device_description().c_str(), km.iterations, km.converged ? " (converged)" : "", km.reseeded,
      o.out.c_str());
  if (!o.eval.empty()) return run_eval(model, o, o.eval, true);
  return 0;
}

int classify(const Options& o) {
  if (o.model.empty() || o.args.empty()) throw UsageError("classify needs --model and at least one IMAGE");
  bow::Model model = bow::Model::load(o.model);
  model.set_device(o.device);
  int failed = 0;
  for (const std::string& path : o.args) {
    try {
      const bow::Prediction p = model.classify(load_grey(path));
      const std::string& name = model.class_names()[p.label];
      if (o.json)
        std::printf("{\"image\":%s,\"label\":%s,\"confidence\":%s}\n", json_string(path).c_str(),
                    json_string(name).c_str(), json_number(p.confidence, 4).c_str());
      else
        std::printf("%s: %s (confidence %.2f)\n", path.c_str(), name.c_str(), p.confidence);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prism bow classify: %s\n", e.what());
      failed = 1;
    }
  }
  return failed ? 2 : 0;
}

}  // namespace

int bow_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)  // `prism bow train --help`
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  try {
    const Options o = parse(argc, argv);
    init_gstreamer();  // images are decoded by GStreamer
    if (o.sub == "train") return train(o);
    if (o.sub == "eval") {
      if (o.model.empty() || o.data.empty() || o.test.empty())
        throw UsageError("eval needs --model, --data and --test");
      bow::Model model = bow::Model::load(o.model);
      model.set_device(o.device);
      return run_eval(model, o, o.test, false);
    }
    if (o.sub == "classify") return classify(o);
    if (o.sub == "--help" || o.sub == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    throw UsageError("unknown subcommand '" + o.sub + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prism bow: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism bow: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
