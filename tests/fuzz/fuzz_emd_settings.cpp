// Fuzz target: emdtracker's settings as text (kernels/emd/tracker.h, check_config and
// parse_target_rect; emd_map.h's parse_numbers, GroundDistance::load and from_wavelengths), what the
// element checks at start from its string properties.
// Input: one byte choosing the setting and the input kind, then the setting's text:
//   byte % 5: 0 `target`, 1 `target-location` (the text is the file), 2 `ground-distance-location`
//   (the file; ground-distance=matrix), 3 `wavelengths` (ground-distance=wavelengths), 4 `target-rect`
//   (also placed in a 64 x 48 frame); byte & 8: video input of 11 bins (channels 0), else before caps
//   (channels -1: the bins are not compared).
// Checks: an accepted setting gives a ground distance of 2..32 bins with finite, non-negative costs
// (wavelengths: |w_i - w_j|, so a zero diagonal and symmetric) and a finite, non-negative target that
// is not all zero; written back as text (%.9g) it is accepted again as the same values; a placed
// target-rect lies inside the frame. A refusal is a SettingError naming the setting read, and the
// file for the two file settings.
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "emd/tracker.h"
#include "fuzz_util.h"

namespace {

using prism::emd::GroundKind;
using prism::emd::SettingError;
using prism::emd::TrackerConfig;
using prism::emd::TrackerSetup;

const char* const kProperty[] = {"target", "target-location", "ground-distance-location", "wavelengths", "target-rect"};

std::string as_text(const std::vector<float>& v, int per_line = 0) {
  std::string s;
  char number[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(number, sizeof number, "%.9g", double(v[i]));
    s += number;
    s += per_line > 0 && (i + 1) % size_t(per_line) == 0 ? "\n" : " ";
  }
  return s;
}

void check_accepted(const TrackerSetup& s, int kind, int channels) {
  const int n = s.ground.bins();
  FUZZ_CHECK(n >= 2 && n <= 32, "ground distance bins");
  const std::vector<float>& cost = s.ground.values();
  FUZZ_CHECK(cost.size() == size_t(n) * size_t(n), "ground distance size");
  for (const float c : cost) FUZZ_CHECK(std::isfinite(c) && c >= 0.f, "ground distance entry");
  if (kind == 3)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        FUZZ_CHECK(cost[size_t(i) * n + j] == cost[size_t(j) * n + i] && (i != j || cost[size_t(i) * n + j] == 0.f),
                   "wavelength distances are not |w_i - w_j|");
  if (kind == 4) {
    FUZZ_CHECK(s.target.empty(), "target-rect gives no target before its frame");
    return;
  }
  FUZZ_CHECK(!s.target.empty(), "no target");
  if (channels == 0) FUZZ_CHECK(int(s.target.size()) == n, "target bins");
  double sum = 0;
  for (const float t : s.target) {
    FUZZ_CHECK(std::isfinite(t) && t >= 0.f, "target bin");
    sum += t;
  }
  FUZZ_CHECK(sum > 0, "an all-zero target");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 5;
  const int channels = (data[0] & 8) ? 0 : -1;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string property = kProperty[kind];
  std::string file;
  TrackerConfig c;
  switch (kind) {
    case 0: c.target = text; break;
    case 1: c.target_location = file = prism::fuzz::write_input("target.txt", data + 1, size - 1); break;
    case 2:
      c.ground = GroundKind::Matrix;
      c.ground_location = file = prism::fuzz::write_input("ground.txt", data + 1, size - 1);
      break;
    case 3:
      c.ground = GroundKind::Wavelengths;
      c.wavelengths = text;
      break;
    case 4: c.target_rect = text; break;
  }
  // The other settings the element needs, valid: a target of the ground's bins where that is fuzzed.
  if (kind == 2 || kind == 3) c.target = channels == 0 ? "1" : "1 1";
  std::optional<TrackerSetup> checked;
  try {
    checked = prism::emd::check_config(c, channels);
  } catch (const SettingError& e) {
    const std::string what = e.what();
    // The target given with a fuzzed ground distance may be what does not fit its bins, and an
    // empty target-rect is no target at all.
    const bool target_error = e.property() == "target" && (kind == 2 || kind == 3 || text.empty());
    FUZZ_CHECK(e.property() == property || target_error, what.c_str());
    FUZZ_CHECK(what.rfind("property '" + e.property() + "': ", 0) == 0 && what.size() > e.property().size() + 14,
               what.c_str());
    if (!file.empty() && !target_error) FUZZ_CHECK(what.find(file) != std::string::npos, what.c_str());
    return 0;
  }
  const TrackerSetup& s = *checked;
  check_accepted(s, kind, channels);
  // Written back as text, the values are read again as they are.
  TrackerConfig again = c;
  switch (kind) {
    case 0: again.target = as_text(s.target); break;
    case 1: {
      const std::string t = as_text(s.target);
      again.target_location =
          prism::fuzz::write_input("target-again.txt", reinterpret_cast<const uint8_t*>(t.data()), t.size());
      break;
    }
    case 2: {
      const std::string m = as_text(s.ground.values(), s.ground.bins());
      again.ground_location =
          prism::fuzz::write_input("ground-again.txt", reinterpret_cast<const uint8_t*>(m.data()), m.size());
      break;
    }
    case 3: break;  // the wavelengths are not kept, only their distances
    case 4: {
      try {
        const prism::emd::Box b = prism::emd::parse_target_rect(text, 64, 48);
        FUZZ_CHECK(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= 64 && b.y + b.h <= 48,
                   "target-rect placed outside the frame");
      } catch (const SettingError& e) {
        FUZZ_CHECK(e.property() == "target-rect" && std::string(e.what()).rfind("property 'target-rect': ", 0) == 0,
                   e.what());
      }
      return 0;
    }
  }
  const TrackerSetup t = prism::emd::check_config(again, channels);
  FUZZ_CHECK(t.target == s.target && t.ground.values() == s.ground.values(), "not read back as written");
  return 0;
}
