// Fuzz target: bag-of-words model files (kernels/bow/model.h, Model::load), what `prism bow` and
// bowclassify's `model` property read.
// Each input is loaded as it is and again with its last 4 bytes replaced by the CRC-32 of the rest,
// so that mutations reach the checks behind the CRC. Checks: a loaded model classifies a small image
// into one of its classes with a confidence in [0, 1]; a refusal is a ModelError naming the file.
#include <opencv2/core.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bow/model.h"
#include "common/durable_file.h"
#include "fuzz_util.h"

namespace {

void load_one(const uint8_t* data, size_t size) {
  using prism::bow::Model;
  const std::string path = prism::fuzz::write_input("model.bow", data, size);
  Model m;
  try {
    m = Model::load(path);
  } catch (const prism::bow::ModelError& e) {
    FUZZ_CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0, e.what());
    return;
  }
  FUZZ_CHECK(m.class_names().size() >= 2, "classes");
  FUZZ_CHECK(m.dictionary().rows == m.config().k, "dictionary");
  static const cv::Mat image = [] {
    cv::Mat img(24, 24, CV_8UC1);
    cv::randu(img, 0, 256);
    return img;
  }();
  const prism::bow::Prediction p = m.classify(image);
  FUZZ_CHECK(p.label >= 0 && p.label < int(m.class_names().size()), "label");
  FUZZ_CHECK(std::isfinite(p.confidence) && p.confidence >= 0 && p.confidence <= 1, "confidence");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  load_one(data, size);
  if (size >= 4) {
    std::vector<uint8_t> bytes(data, data + size);
    const uint32_t crc = prism::crc32(bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    load_one(bytes.data(), bytes.size());
  }
  return 0;
}
