#include "datasets.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/regular_file.h"
#include "texture_util.h"

namespace prism::eval {

namespace fs = std::filesystem;

const std::vector<std::string> kOxfordSequences = {"bark", "bikes", "boat", "graf", "leuven", "trees", "ubc", "wall"};

namespace {

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
    for (int i = r.start; i < r.end; ++i) items[i].grey = cli::load_grey(items[i].path);
  });
}

}  // namespace

Photos load_photos(const fs::path& data, int textures, int impostors) {
  std::vector<Item> sun = sun8_items(data);
  if (int(sun.size()) < textures + 1)
    throw std::runtime_error("sun8 has only " + std::to_string(sun.size()) + " photos");
  Photos p;
  p.gallery.assign(sun.begin(), sun.begin() + textures);
  p.outsiders.assign(sun.begin() + textures, sun.begin() + std::min<int>(sun.size(), textures + impostors));
  for (const char* t : {"brick", "grass", "gravel"})
    p.gallery.push_back(
        {std::string("skimage-") + t, (data / "textures/skimage" / (std::string(t) + ".png")).string(), {}});
  for (const auto& s : kOxfordSequences)
    p.gallery.push_back({"oxford-" + s, (data / "oxford-affine" / s / "img1.png").string(), {}});
  std::fprintf(stderr, "eval: loading %zu gallery and %zu impostor images\n", p.gallery.size(), p.outsiders.size());
  load_all(p.gallery);
  load_all(p.outsiders);
  return p;
}

Recaptures oxford_recaptures(const fs::path& data, bool homographies) {
  Recaptures r;
  for (const auto& s : kOxfordSequences) {
    for (int k = 2; k <= 6; ++k) {
      r.images.push_back(cli::load_grey((data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()));
      r.product.push_back("oxford-" + s);
      if (homographies) {
        cv::FileStorage fsr((data / "oxford-affine" / s / ("H1to" + std::to_string(k) + "p.xml")).string(),
                            cv::FileStorage::READ);
        cv::Mat h;
        if (fsr.isOpened()) fsr.getFirstTopLevelNode() >> h;  // the node is named H12, H13, ...
        if (h.empty()) throw std::runtime_error(s + ": cannot read H1to" + std::to_string(k) + "p.xml");
        h.convertTo(h, CV_64F);
        r.homography.push_back(cv::Matx33d(h.ptr<double>()));
      }
      r.name.push_back(s + "/img" + std::to_string(k));
    }
  }
  return r;
}

std::vector<PairSet> decision_pairs(const fs::path& data) {
  std::vector<PairSet> pair_sets;
  for (const auto& s : kOxfordSequences) {
    PairSet set{"oxford " + s, {}};
    for (int k = 2; k <= 6; ++k)
      set.pairs.push_back({(data / "oxford-affine" / s / "img1.png").string(),
                           (data / "oxford-affine" / s / ("img" + std::to_string(k) + ".png")).string()});
    pair_sets.push_back(set);
  }
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
  return pair_sets;
}

}  // namespace prism::eval
