// The EMD CPU path (transportation simplex, kernels/emd) against the independent min-cost-flow
// reference (emd_reference.cpp) and the cumulative-histogram closed form; edge cases; the
// cache and deduplication of CpuEmdMap never change a result; emdtracker's settings and
// emd::Tracker's CPU path against the kernels composed as the element used to.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <functional>
#include <mutex>

#include "emd/emd_map.h"
#include "emd/tracker.h"
#include "emd/tracking.h"
#include "emd_cases.h"
#include "emd_reference.h"
#include "prism_test.h"
#include "spectral/spectralize.h"

namespace prism {
namespace {

using emd::GroundDistance;
using emd::Normalization;
using test::SignatureKind;

struct Worst {
  std::mutex mu;
  double rel = 0;
  std::string what;
  int capped = 0;
  void offer(double r, const std::string& w) {
    std::lock_guard<std::mutex> l(mu);
    if (r > rel) {
      rel = r;
      what = w;
    }
  }
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Our total cost vs the reference's on `count` random problems of `n` bins.
template <class T>
void check_against_reference(int n, int count, SignatureKind kind, bool l1_cost, Worst& worst, uint32_t seed) {
  cv::parallel_for_(cv::Range(0, 16), [&](const cv::Range& r) {
    for (int part = r.start; part < r.end; ++part) {
      std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(n) * 131u + static_cast<uint32_t>(part));
      for (int k = part; k < count; k += 16) {
        const std::vector<float> cost = l1_cost ? GroundDistance::abs_diff(n).values() : test::random_cost(rng, n);
        const GroundDistance g(cost, n);
        const auto a = test::random_signature(rng, n, kind);
        const auto b = test::random_signature(rng, n, kind == SignatureKind::Unequal ? SignatureKind::Dense : kind);
        const emd::Transport<T> ours = emd::solve_transport<T>(a.data(), b.data(), g.view());
        double flow = 0;
        const double ref = test::emd_reference_cost(to_double(a), to_double(b), to_double(cost), &flow);
        const double scale = std::max(1.0, static_cast<double>(g.view().max_cost)) * std::max(flow, 1e-30);
        const double rel = std::abs(static_cast<double>(ours.cost) - ref) / std::max(std::abs(ref), 1e-9 * scale);
        worst.offer(rel, std::to_string(n) + " bins " + test::kind_name(kind) + (l1_cost ? " |i-j|" : " random cost") +
                             " problem " + std::to_string(k) + ": ours " + std::to_string(ours.cost) + " reference " +
                             std::to_string(ref));
        if (ours.stats.capped) {
          std::lock_guard<std::mutex> l(worst.mu);
          ++worst.capped;
        }
      }
    }
  });
}

TEST(Emd, MatchesTheMinCostFlowReferenceOnEverySize) {
  const int count = test::problems_per_size(1500);
  for (SignatureKind kind :
       {SignatureKind::Dense, SignatureKind::Sparse, SignatureKind::Counts, SignatureKind::Unequal}) {
    Worst worst;
    for (int n = 2; n <= emd::kMaxBins; ++n) {
      check_against_reference<double>(n, count, kind, false, worst, 1);
      check_against_reference<double>(n, count / 4, kind, true, worst, 2);
    }
    std::cout << "  " << test::kind_name(kind) << ": " << count << " problems per size, worst relative error "
              << worst.rel << " (" << worst.what << ")\n";
    EXPECT_LE(worst.rel, 1e-9) << worst.what;
    EXPECT_EQ(worst.capped, 0) << "the iteration cap was reached";
  }
}

TEST(Emd, FloatArithmeticMissesTheBarSoBothPathsUseDouble) {
  // The same solver in float: its relative error on small distances goes past the 1e-5
  // (about 2e-4 at 32 bins), which is why the CPU and CUDA paths both solve in double. Reported;
  // held only to terminating and staying within 1e-3.
  Worst worst;
  for (int n : {2, 4, 8, 11, 16, 32})
    for (SignatureKind kind : {SignatureKind::Dense, SignatureKind::Counts, SignatureKind::Unequal})
      check_against_reference<float>(n, 400, kind, false, worst, 3);
  std::cout << "  float: worst relative error " << worst.rel << " (" << worst.what << ")\n";
  EXPECT_LE(worst.rel, 1e-3) << worst.what;
  EXPECT_EQ(worst.capped, 0);
}

TEST(Emd, AbsDiffCostEqualsTheCumulativeClosedForm) {
  std::mt19937 rng(5);
  double worst = 0;
  for (int n = 2; n <= emd::kMaxBins; ++n) {
    const GroundDistance g = GroundDistance::abs_diff(n);
    for (int k = 0; k < 300; ++k) {
      const SignatureKind kind = static_cast<SignatureKind>(k % 3);
      auto a = test::random_signature(rng, n, kind), b = test::random_signature(rng, n, kind);
      // equal masses: rescale b to a's total in double, then round to float
      double sa = 0, sb = 0;
      for (int i = 0; i < n; ++i) sa += a[i], sb += b[i];
      std::vector<double> ad = to_double(a), bd(n);
      for (int i = 0; i < n; ++i) bd[i] = b[i] * (sa / sb);
      for (int i = 0; i < n; ++i) b[i] = static_cast<float>(bd[i]);
      bd = to_double(b);
      const double closed = test::emd_reference_l1_closed_form(ad, bd);
      const emd::Transport<double> t = emd::solve_transport<double>(a.data(), b.data(), g.view());
      // masses differ by float rounding only; the closed form assumes them equal
      const double slack = std::abs(t.mass_a - t.mass_b) * n;
      worst = std::max(worst, (std::abs(t.cost - closed) - slack) / std::max(closed, 1e-12));
    }
  }
  EXPECT_LE(worst, 1e-9);
}

TEST(Emd, NormalisationsAndEmptySignatures) {
  const GroundDistance g = GroundDistance::abs_diff(4);
  const std::vector<float> a = {1, 0, 0, 0}, b = {0, 0, 0, 2}, zero = {0, 0, 0, 0};
  // One unit moves 3 bins; the other unit of b stays (partial matching).
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), b.data(), g, Normalization::Flow), 3.0);
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), b.data(), g, Normalization::LargerMass), 1.5);
  EXPECT_EQ(emd::emd_cpu(zero.data(), zero.data(), g), 0.0);
  EXPECT_TRUE(std::isinf(emd::emd_cpu(a.data(), zero.data(), g)));
  EXPECT_TRUE(std::isinf(emd::emd_cpu(zero.data(), b.data(), g, Normalization::LargerMass)));
  // Negative and NaN bins count as zero.
  const std::vector<float> odd = {1, -5, std::nanf(""), 0};
  EXPECT_DOUBLE_EQ(emd::emd_cpu(odd.data(), a.data(), g), 0.0);
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), a.data(), g), 0.0);
}

TEST(Emd, DegenerateCountHistogramsTerminate) {
  // Many equal counts and an all-ties cost matrix: the worst case for cycling.
  for (int n : {8, 16, 32}) {
    const GroundDistance g(std::vector<float>(static_cast<size_t>(n) * n, 1.f), n);
    std::vector<float> a(n, 4.f), b(n, 0.f);
    for (int i = 0; i < n; i += 2) b[i] = 8.f;
    emd::Stats st;
    const double d = emd::emd_cpu(a.data(), b.data(), g, Normalization::Flow, &st);
    EXPECT_FALSE(st.capped);
    EXPECT_NEAR(d, 1.0, 1e-12);
    const GroundDistance l1 = GroundDistance::abs_diff(n);
    EXPECT_NEAR(emd::emd_cpu(a.data(), b.data(), l1, Normalization::Flow, &st), 0.5, 1e-12);
    EXPECT_FALSE(st.capped);
  }
}

TEST(Emd, GroundDistanceValidationAndFiles) {
  EXPECT_THROW(GroundDistance::abs_diff(1), std::invalid_argument);
  EXPECT_THROW(GroundDistance::abs_diff(33), std::invalid_argument);
  EXPECT_THROW(GroundDistance({0, 1, -1, 0}, 2), std::invalid_argument);
  EXPECT_THROW(GroundDistance({0, 1, 1}, 2), std::invalid_argument);
  const GroundDistance w = GroundDistance::from_wavelengths({450, 550, 700});
  EXPECT_FLOAT_EQ(w.values()[0 * 3 + 2], 250.f);

  test::TempDir dir;
  const std::string good = dir.file("cost.txt"), bad = dir.file("bad.txt"), ragged = dir.file("ragged.txt");
  std::ofstream(good) << "# 3 bins\n0, 1, 2\n1 0 1\n2\t1\t0\n";
  std::ofstream(bad) << "0 1\n1 x\n";
  std::ofstream(ragged) << "0 1 2\n1 0\n";
  const GroundDistance g = GroundDistance::load(good);
  EXPECT_EQ(g.bins(), 3);
  EXPECT_FLOAT_EQ(g.values()[2], 2.f);
  auto message = [](const std::string& path) {
    try {
      GroundDistance::load(path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(bad).find(bad + ":2:"), std::string::npos) << message(bad);
  EXPECT_NE(message(ragged).find(ragged + ":2:"), std::string::npos) << message(ragged);
  EXPECT_NE(message(dir.file("missing.txt")).find("cannot open"), std::string::npos);

  // Refused before the n x n matrix is allocated (100,000 wavelengths would take 40 GB).
  EXPECT_THROW(GroundDistance::from_wavelengths(std::vector<double>(100000, 1.0)), std::invalid_argument);
  EXPECT_THROW(GroundDistance::from_wavelengths({450}), std::invalid_argument);

  EXPECT_THROW(emd::validate_target({0, 0, 0}, 3), std::invalid_argument);
  EXPECT_THROW(emd::validate_target({1, 0}, 3), std::invalid_argument);
  EXPECT_THROW(emd::validate_target({1, -1, 0}, 3), std::invalid_argument);
  EXPECT_NO_THROW(emd::validate_target({1, 0, 0}, 3));
}

// A "frame" of count signatures with few distinct values, like a static scene.
std::vector<float> scene(std::mt19937& rng, int n, int pixels, int distinct) {
  std::vector<std::vector<float>> pool;
  for (int i = 0; i < distinct; ++i) pool.push_back(test::random_signature(rng, n, SignatureKind::Counts));
  std::vector<float> f;
  for (int p = 0; p < pixels; ++p) {
    const auto& s = pool[rng() % distinct];
    f.insert(f.end(), s.begin(), s.end());
  }
  return f;
}

TEST(EmdMap, CacheAndDedupNeverChangeAResult) {
  const int n = 11, pixels = 20000;
  std::mt19937 rng(9);
  std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::EmdMapConfig plain;
  plain.dedup = false;
  emd::EmdMapConfig cached;
  cached.cache_capacity = 7000;
  emd::CpuEmdMap reference(GroundDistance::abs_diff(n), target, plain);
  emd::CpuEmdMap map(GroundDistance::abs_diff(n), target, cached);
  std::vector<float> frame = scene(rng, n, pixels, 3000);
  std::vector<float> want(pixels), got(pixels);
  for (int f = 0; f < 5; ++f) {
    if (f == 2) frame = scene(rng, n, pixels, 6000);  // a new scene: misses; frame 3 no longer fits: flush
    const emd::FrameStats rs = reference.compute(frame.data(), pixels, want.data());
    const emd::FrameStats s = map.compute(frame.data(), pixels, got.data());
    EXPECT_EQ(rs.solved, pixels);
    for (int p = 0; p < pixels; ++p) ASSERT_EQ(std::memcmp(&got[p], &want[p], 4), 0) << "frame " << f << " pixel " << p;
    EXPECT_EQ(s.solved + s.duplicates + s.cache_hits, pixels);
    std::cout << "  frame " << f << ": solved " << s.solved << ", duplicates " << s.duplicates << ", cache hits "
              << s.cache_hits << (s.flushed ? " (flushed)" : "") << "\n";
    if (f == 1 || f == 4) {
      EXPECT_EQ(s.solved, 0);  // the same frame again: everything cached
      EXPECT_EQ(s.cache_hits, pixels);
    }
    if (f == 3) {
      EXPECT_TRUE(s.flushed);
      EXPECT_GT(s.solved, 0);
    }
    if (f == 0) {
      EXPECT_LE(s.solved, 3000);
    }
  }
}

// The default cache (2^21 signatures) used to allocate its whole table up front, about 400 MB, even
// for 64x64 frames. The table now starts at two frames' signatures: a small stream uses little
// memory and a static scene never reallocates it.
TEST(EmdMap, SmallFramesReserveLittleAndAStaticSceneNeverGrows) {
  const int n = 11, pixels = 64 * 64;
  std::mt19937 rng(5);
  const std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::CpuEmdMap map(GroundDistance::abs_diff(n), target);  // the default capacity
  EXPECT_EQ(map.reserved_bytes(), 0);                       // nothing before the first frame
  std::vector<float> out(pixels);
  int64_t first = 0;
  for (int f = 0; f < 6; ++f) {
    const std::vector<float> frame = scene(rng, n, pixels, 300 + 10 * f);  // a few new signatures per frame
    map.compute(frame.data(), pixels, out.data());
    if (f == 0) first = map.reserved_bytes();
    EXPECT_EQ(map.reserved_bytes(), first) << "frame " << f;
  }
  std::cout << "  64x64, default cache: " << first << " bytes reserved\n";
  EXPECT_GT(first, 0);
  EXPECT_LT(first, 2 << 20);  // two frames of 11 floats and a little per slot: about 1 MB, not 400
  // The largest cache-size the element takes allocated its table at the first frame (bad_alloc);
  // it is a bound now, and a small frame costs what it costs with the default.
  emd::EmdMapConfig huge;
  huge.cache_capacity = INT64_MAX / 1024;
  emd::CpuEmdMap big(GroundDistance::abs_diff(n), target, huge);
  const std::vector<float> frame = scene(rng, n, pixels, 300);
  EXPECT_NO_THROW(big.compute(frame.data(), pixels, out.data()));
  EXPECT_EQ(big.reserved_bytes(), first);
}

// Frames of new signatures fill a cache larger than a frame: the table doubles (a few times, not per
// frame) and keeps what is cached (an earlier frame computed again is all cache hits), the flush
// comes exactly when more than the capacity is cached, and no result changes.
TEST(EmdMap, TableGrowsGeometricallyKeepingTheCache) {
  const int n = 6, pixels = 1500, capacity = 20000;
  std::mt19937 rng(11);
  const std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::EmdMapConfig plain;
  plain.dedup = false;
  emd::EmdMapConfig cached;
  cached.cache_capacity = capacity;
  emd::CpuEmdMap reference(GroundDistance::abs_diff(n), target, plain);
  emd::CpuEmdMap map(GroundDistance::abs_diff(n), target, cached);
  auto fresh = [&] {  // dense random signatures: all distinct
    std::vector<float> f;
    for (int p = 0; p < pixels; ++p) {
      const std::vector<float> s = test::random_signature(rng, n, SignatureKind::Dense);
      f.insert(f.end(), s.begin(), s.end());
    }
    return f;
  };
  const std::vector<float> first = fresh();
  std::vector<float> want(pixels), got(pixels);
  std::vector<int64_t> sizes;
  int64_t cached_now = 0;  // the policy, counted independently of the map
  int flushes = 0;
  for (int f = 0; f < 30; ++f) {
    const bool again = f > 0 && f % 4 == 0 && flushes == 0;  // the first frame again, while it is cached
    const std::vector<float> frame = again ? first : f == 0 ? first : fresh();
    reference.compute(frame.data(), pixels, want.data());
    const emd::FrameStats s = map.compute(frame.data(), pixels, got.data());
    ASSERT_EQ(std::memcmp(want.data(), got.data(), pixels * sizeof(float)), 0) << "frame " << f;
    EXPECT_EQ(s.flushed, cached_now > capacity) << "frame " << f;
    if (s.flushed) cached_now = 0, ++flushes;
    cached_now += s.solved;
    if (again) {
      EXPECT_EQ(s.cache_hits, pixels) << "frame " << f << ": the grown table lost cached signatures";
    } else {
      EXPECT_EQ(s.solved, pixels) << "frame " << f;
    }
    if (sizes.empty() || sizes.back() != map.reserved_bytes()) sizes.push_back(map.reserved_bytes());
  }
  EXPECT_GE(flushes, 1);
  // 2 frames (3000) -> 6000 -> 12000 -> 21500 (the capacity plus a frame): 4 sizes, each larger.
  EXPECT_EQ(sizes.size(), 4u);
  for (size_t i = 1; i < sizes.size(); ++i) EXPECT_GT(sizes[i], sizes[i - 1]);
}

// What a setting's check threw: "<property>|<what>", or "no error".
std::string setting_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const emd::SettingError& e) {
    return e.property() + "|" + e.what();
  }
  return "no error";
}

TEST(EmdTrackerSettings, ErrorsNameThePropertyTheFileAndTheLine) {
  test::TempDir dir;
  const std::string bad = dir.write("cost.txt", "0 1\n1 x\n");
  emd::TrackerConfig c;
  c.bins = 2;
  c.ground = emd::GroundKind::Matrix;
  c.ground_location = bad;
  c.target = "1,1";
  auto check = [&](int channels) { return setting_error([&] { emd::check_config(c, channels); }); };
  EXPECT_EQ(check(0),
            "ground-distance-location|property 'ground-distance-location': " + bad + ":2: 'x' is not a number");
  c.ground_location = "";
  EXPECT_EQ(check(0),
            "ground-distance-location|property 'ground-distance-location': ground-distance=matrix needs "
            "ground-distance-location");

  c = emd::TrackerConfig{};
  c.bins = 3;
  c.ground = emd::GroundKind::Wavelengths;
  c.wavelengths = "400,500";
  c.target = "1,1,1";
  EXPECT_EQ(check(0), "wavelengths|property 'wavelengths': the ground distance has 2 bins and 'bins' is 3");
  EXPECT_EQ(check(-1), "no error");  // before caps: the bins are not compared
  c.wavelengths = "400,x";
  EXPECT_EQ(check(-1), "wavelengths|property 'wavelengths': wavelengths: 'x' is not a number");

  c = emd::TrackerConfig{};
  c.target = "1 2 3";
  c.ground = emd::GroundKind::AbsDiff;
  EXPECT_EQ(check(6), "target|property 'target': target signature has 3 bins; the frames have 6");
  EXPECT_EQ(check(-1), "no error");
  c.target_rect = "0,0,4,4";
  EXPECT_EQ(check(-1), "target|property 'target': set exactly one of target, target-location and target-rect (2 set)");
  c.target = c.target_rect = "";
  c.target_location = "/nonexistent/t.txt";
  EXPECT_EQ(check(0),
            "target-location|property 'target-location': /nonexistent/t.txt: cannot open: No such file or directory");
  c.target_location = dir.write("t.txt", "# the target\n1 -1 0 0 0\n0 0 0 0 0 0\n");
  EXPECT_EQ(check(0), "target-location|property 'target-location': " + c.target_location +
                          ": target signature bin 1 is -1.000000; bins must be finite and >= 0");
  // Found by fuzz_emd_settings: a file's target of the wrong size did not name the file, nor did a
  // ground-distance file of the wrong size.
  c.target_location = dir.write("t2.txt", "1 2\n");
  EXPECT_EQ(check(0), "target-location|property 'target-location': " + c.target_location +
                          ": target signature has 2 bins; the frames have 11");
  c.target_location = "";
  c.target = "1,1,1";
  c.bins = 3;
  c.ground = emd::GroundKind::Matrix;
  c.ground_location = dir.write("g2.txt", "0 1\n1 0\n");
  EXPECT_EQ(check(0), "ground-distance-location|property 'ground-distance-location': " + c.ground_location +
                          ": the ground distance has 2 bins and 'bins' is 3");
  c = emd::TrackerConfig{};
  c.target_location = "";
  c.target_rect = "1,2,3,4";
  c.window = 4;
  EXPECT_EQ(check(0), "window|property 'window': window is 4; an odd size from 1 to 31 is expected");
  EXPECT_EQ(check(5), "no error");  // tensor input: no window

  const emd::TrackerSetup ok = emd::check_config(c, 5);
  EXPECT_EQ(ok.ground.bins(), 5);
  EXPECT_TRUE(ok.target.empty());  // learned from the rectangle
}

// A ground-distance or target file that is a FIFO, /dev/zero or a symlink to one was read (or waited
// on) forever: refused at once, naming the property and the file; a symlink to a file is read.
TEST(EmdTrackerSettings, NonRegularFilesAreRefused) {
  test::TempDir dir;
  const std::string fifo = dir.fifo("fifo.txt"), zero = dir.file("zero.txt");
  std::filesystem::create_symlink("/dev/zero", zero);
  std::filesystem::create_symlink(dir.write("m.txt", "0 1\n1 0\n"), dir.file("link.txt"));
  auto check = [](const emd::TrackerConfig& c) {
    std::string what;
    test::within_seconds(10, "check_config", [&] { what = setting_error([&] { emd::check_config(c, 0); }); });
    return what;
  };
  emd::TrackerConfig c;
  c.bins = 2;
  c.ground = emd::GroundKind::Matrix;
  c.target = "1,1";
  c.ground_location = fifo;
  EXPECT_EQ(check(c),
            "ground-distance-location|property 'ground-distance-location': " + fifo + ": not a regular file (a FIFO)");
  c.ground_location = zero;
  EXPECT_EQ(check(c), "ground-distance-location|property 'ground-distance-location': " + zero +
                          ": not a regular file (a character device)");
  c.ground_location = dir.file("link.txt");
  EXPECT_EQ(check(c), "no error");

  c.target = "";
  c.target_location = fifo;
  EXPECT_EQ(check(c), "target-location|property 'target-location': " + fifo + ": not a regular file (a FIFO)");
  c.target_location = zero;
  EXPECT_EQ(check(c),
            "target-location|property 'target-location': " + zero + ": not a regular file (a character device)");
  c.target_location = dir.path().string();
  EXPECT_EQ(check(c), "target-location|property 'target-location': " + dir.path().string() +
                          ": not a regular file (a directory)");
  c.target_location = dir.write("t.txt", "1 1\n");
  EXPECT_EQ(check(c), "no error");
}

TEST(EmdTrackerSettings, TargetRect) {
  auto rect = [](const std::string& text) { return setting_error([&] { emd::parse_target_rect(text, 64, 48); }); };
  EXPECT_EQ(rect("1,2,3"), "target-rect|property 'target-rect': '1,2,3': expected x,y,width,height");
  EXPECT_EQ(rect("1,2,x,4"), "target-rect|property 'target-rect': target-rect: 'x' is not a number");
  EXPECT_EQ(rect("5000,5000,10,10"),
            "target-rect|property 'target-rect': '5000,5000,10,10' has no pixel inside the 64x48 frame");
  // Beyond int: refused, not converted with undefined behaviour.
  EXPECT_EQ(rect("0,0,3e9,3e9"),
            "target-rect|property 'target-rect': '0,0,3e9,3e9': 3000000000 is outside -2147483648..2147483647");
  EXPECT_EQ(rect("2000000000,0,2000000000,10"),
            "target-rect|property 'target-rect': '2000000000,0,2000000000,10' has no pixel inside the 64x48 frame");
  // Its syntax is checked with the other settings (at start, before the frame size is known).
  emd::TrackerConfig c;
  c.target_rect = "1,2,3";
  EXPECT_EQ(setting_error([&] { emd::check_config(c, -1); }),
            "target-rect|property 'target-rect': '1,2,3': expected x,y,width,height");
  c.target_rect = "0,0,3e9,3e9";
  EXPECT_EQ(setting_error([&] { emd::check_config(c, -1); }),
            "target-rect|property 'target-rect': '0,0,3e9,3e9': 3000000000 is outside -2147483648..2147483647");
  c.target_rect = "5000,5000,10,10";  // the frame is not known yet: checked per caps
  EXPECT_EQ(setting_error([&] { emd::check_config(c, -1); }), "no error");
  const emd::Box b = emd::parse_target_rect("-4, 40, 20, 20", 64, 48);  // clipped to the frame
  EXPECT_EQ(b.x, 0);
  EXPECT_EQ(b.y, 40);
  EXPECT_EQ(b.w, 16);
  EXPECT_EQ(b.h, 8);
}

// A cache-size whose table could never be allocated was a bare std::bad_alloc at the first frame:
// refused with the other settings, naming the property.
TEST(EmdTrackerSettings, HugeCacheSizeIsRefused) {
  emd::TrackerConfig c;
  c.target = "1,1,1,1,1,1,1,1,1,1,1";
  c.map.cache_capacity = INT64_MAX / 1024;  // the property's maximum
  const std::string what = setting_error([&] { emd::check_config(c, -1); });
  EXPECT_EQ(what.rfind("cache-size|property 'cache-size': ", 0), 0u) << what;
  c.map.cache_capacity = emd::EmdMapConfig{}.cache_capacity;
  EXPECT_EQ(setting_error([&] { emd::check_config(c, 0); }), "no error");
}

// emd::Tracker on the CPU against the kernels composed by hand: spectralize, the target learned as
// the rectangle's mean signature, the cached map, the mask, objects and tracks, the heat map (grey
// only before the target is known), the boxes.
TEST(EmdTrackerCpu, IsTheKernelsComposed) {
  const int W = 96, H = 72, n = 11, frames = 5;
  const int64_t stride = W + 8, out_stride = 4 * W + 16;
  emd::TrackerConfig c;
  c.target_rect = "33,28,12,12";
  c.target_frame = 1;
  c.map.cache_capacity = 3000;  // flushed now and then
  emd::Tracker tracker;
  tracker.configure(c, {W, H, 0, false});
  emd::Tracker::FrameParams p;
  p.threshold = 0.5f;
  p.opacity = 0.7f;
  emd::ObjectParams op;
  op.min_area = 30;
  const emd::TrackParams tp;

  std::unique_ptr<emd::CpuEmdMap> map;
  emd::ObjectFinder finder;
  finder.configure(W, H);
  emd::MotionTracker tracks;
  std::vector<float> sig(static_cast<size_t>(W) * H * n), dist(static_cast<size_t>(W) * H);
  std::vector<emd::MaskWord> mask(static_cast<size_t>(emd::mask_words_per_row(W)) * H);
  size_t detected = 0;
  for (int f = 0; f < frames; ++f) {
    const std::vector<uint8_t> grey = test::tracker_scene(W, H, stride, f);
    std::vector<uint8_t> got(static_cast<size_t>(out_stride) * H, 0), want = got;
    tracker.process_cpu({grey.data(), stride, {}}, {got.data(), out_stride}, p);
    const emd::Tracker::Result r = tracker.end_frame(op, tp);
    if (!r.detections.empty()) tracker.draw_boxes_cpu(r.detections, got.data(), out_stride);

    spectral::spectralize_cpu(grey.data(), W, H, stride, {n, 11}, sig.data());
    if (f == 1) {
      std::vector<double> sum(n, 0.0);
      for (int y = 28; y < 40; ++y)
        for (int x = 33; x < 45; ++x)
          for (int b = 0; b < n; ++b) sum[b] += sig[(static_cast<size_t>(y) * W + x) * n + b];
      std::vector<float> target(n);
      for (int b = 0; b < n; ++b) target[b] = static_cast<float>(sum[b] / (12.0 * 12));
      map = std::make_unique<emd::CpuEmdMap>(GroundDistance::abs_diff(n), target, c.map);
    }
    std::vector<emd::Detection> dets;
    emd::FrameStats stats;
    if (map) {
      stats = map->compute(sig.data(), static_cast<int64_t>(W) * H, dist.data());
      emd::make_mask_cpu(dist.data(), W, H, p.threshold, mask.data());
      dets = finder.find(mask.data(), op);
      tracks.update(dets, tp);
    } else {
      std::fill(dist.begin(), dist.end(), NAN);
    }
    emd::render_heatmap_cpu(dist.data(), grey.data(), stride, W, H,
                            map ? emd::HeatmapParams{3 * p.threshold, p.opacity} : emd::HeatmapParams{1.f, 0.f},
                            want.data(), out_stride);
    std::vector<emd::Box> boxes;
    for (const emd::Detection& d : dets) boxes.push_back({d.x, d.y, d.w, d.h});
    emd::draw_boxes_cpu(boxes, W, H, want.data(), out_stride);

    EXPECT_EQ(r.frame, static_cast<uint64_t>(f));
    EXPECT_EQ(r.solved, map != nullptr) << "frame " << f;
    EXPECT_EQ(tracker.target_known(), map != nullptr) << "frame " << f;
    EXPECT_TRUE(got == want) << "frame " << f << ": the heat maps differ";
    ASSERT_EQ(r.detections.size(), dets.size()) << "frame " << f;
    for (size_t k = 0; k < dets.size(); ++k) {
      const emd::Detection &a = r.detections[k], &b = dets[k];
      EXPECT_TRUE(a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h && a.track_id == b.track_id &&
                  a.pixels == b.pixels && std::memcmp(&a.distance, &b.distance, sizeof(float)) == 0)
          << "frame " << f << " detection " << k;
    }
    EXPECT_EQ(r.stats.solved, stats.solved) << "frame " << f;
    EXPECT_EQ(r.stats.duplicates, stats.duplicates);
    EXPECT_EQ(r.stats.cache_hits, stats.cache_hits);
    EXPECT_EQ(r.stats.flushed, stats.flushed);
    detected += dets.size();
  }
  EXPECT_GE(detected, static_cast<size_t>(frames - 1));  // the patch, from the frame that learns it on
}

// Tensor input (u16, rows padded: converted) with a given target and the distance map out.
TEST(EmdTrackerCpu, TensorInDistanceMapOut) {
  const int W = 40, H = 24, n = 6;
  tensor::FrameLayout layout;
  layout.dtype = tensor::DType::U16;
  layout.width = W;
  layout.height = H;
  layout.channels = n;
  layout.row_bytes = layout.packed_row_bytes() + 6;
  std::mt19937 rng(11);
  std::vector<uint8_t> frame(static_cast<size_t>(layout.row_bytes) * H);
  for (int y = 0; y < H; ++y)
    for (int i = 0; i < W * n; ++i)
      reinterpret_cast<uint16_t*>(&frame[y * layout.row_bytes])[i] = static_cast<uint16_t>(rng() % 50);
  emd::TrackerConfig c;
  c.target = "5 10 20 10 5 1";
  c.ground = emd::GroundKind::SquaredDiff;
  emd::Tracker tracker;
  tracker.configure(c, {W, H, n, true});
  const int64_t out_stride = 4 * W + 12;
  std::vector<uint8_t> got(static_cast<size_t>(out_stride) * H);
  tracker.process_cpu({frame.data(), layout.row_bytes, layout}, {got.data(), out_stride}, {});
  const emd::Tracker::Result r = tracker.end_frame({}, {});
  EXPECT_TRUE(r.solved);

  std::vector<float> sig(static_cast<size_t>(W) * H * n), want(static_cast<size_t>(W) * H);
  tensor::to_signatures_cpu(frame.data(), layout, sig.data());
  emd::CpuEmdMap map(GroundDistance::squared_diff(n), {5, 10, 20, 10, 5, 1});
  map.compute(sig.data(), static_cast<int64_t>(W) * H, want.data());
  for (int y = 0; y < H; ++y)
    EXPECT_EQ(std::memcmp(&got[y * out_stride], &want[static_cast<size_t>(y) * W], sizeof(float) * W), 0)
        << "row " << y;
}

// The heat map's legend: the ramp is heat_colour's from 0 to max_distance, the tick sits
// at the threshold, the labels are the three values in the 3x5 font, the panel darkens what is
// under it to 30%, nothing outside the panel changes, and frames under 160x60 get none.
TEST(EmdLegend, DrawsTheRampTheTickAndTheValues) {
  const int W = 320, H = 240;
  const float max = 6.f, threshold = 2.f;
  const emd::Legend L = emd::legend_layout(W, H, max, threshold);
  ASSERT_TRUE(L.on);
  EXPECT_TRUE(L.panel_x0 >= 0 && L.panel_x1 <= W && L.panel_y0 >= 0 && L.panel_y1 <= H);
  EXPECT_TRUE(L.bar_x0 > L.panel_x0 && L.bar_x1 < L.panel_x1 && L.bar_y0 > L.panel_y0 && L.bar_y1 < L.panel_y1);
  const int bar_w = L.bar_x1 - L.bar_x0;
  EXPECT_EQ(bar_w, 256);
  EXPECT_EQ(L.tick_x, L.bar_x0 + int(std::lround(threshold / max * (bar_w - 1))));
  ASSERT_EQ(L.label_count, 3);
  EXPECT_STREQ(L.labels[0].text, "0");
  EXPECT_STREQ(L.labels[1].text, "6");
  EXPECT_STREQ(L.labels[2].text, "2");
  EXPECT_EQ(L.labels[0].x, L.bar_x0);
  EXPECT_EQ(L.labels[1].x + 6, L.bar_x1);  // one glyph, 6 pixels wide, right-aligned

  std::vector<float> dist(static_cast<size_t>(W) * H);
  for (int i = 0; i < W * H; ++i) dist[i] = float(i % 97) / 10.f;
  const std::vector<uint8_t> grey(static_cast<size_t>(W) * H, 100);
  std::vector<uint8_t> plain(static_cast<size_t>(W) * H * 4), drawn(plain.size());
  emd::HeatmapParams p{max, 0.6f};
  emd::render_heatmap_cpu(dist.data(), grey.data(), W, W, H, p, plain.data(), W * 4);
  p.legend = L;
  emd::render_heatmap_cpu(dist.data(), grey.data(), W, W, H, p, drawn.data(), W * 4);
  auto at = [&](const std::vector<uint8_t>& img, int x, int y) { return &img[(static_cast<size_t>(y) * W + x) * 4]; };
  int white = 0, ramp = 0, dark = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const uint8_t *a = at(plain, x, y), *b = at(drawn, x, y);
      const bool in_panel = x >= L.panel_x0 && x < L.panel_x1 && y >= L.panel_y0 && y < L.panel_y1;
      if (!in_panel) {
        ASSERT_EQ(std::memcmp(a, b, 4), 0) << x << "," << y << " outside the legend changed";
        continue;
      }
      ASSERT_EQ(b[3], 255);
      if (b[0] == 255 && b[1] == 255 && b[2] == 255) {
        ++white;
      } else if (x >= L.bar_x0 && x < L.bar_x1 && y >= L.bar_y0 && y < L.bar_y1) {
        uint8_t c[3];
        emd::heat_colour(max * float(x - L.bar_x0) / float(bar_w - 1), max, c);
        ASSERT_EQ(std::memcmp(b, c, 3), 0) << "ramp at " << x;
        ++ramp;
      } else {
        for (int k = 0; k < 3; ++k) ASSERT_EQ(b[k], (a[k] * 3 + 5) / 10) << x << "," << y;
        ++dark;
      }
    }
  EXPECT_GT(ramp, 0);
  EXPECT_GT(dark, 0);
  // The ramp runs from red (distance 0, on target) to blue (max).
  const uint8_t *left = at(drawn, L.bar_x0, L.bar_y0), *right = at(drawn, L.bar_x1 - 1, L.bar_y0);
  EXPECT_TRUE(left[0] == 255 && left[2] == 0);
  EXPECT_TRUE(right[0] == 0 && right[2] == 255);
  // The tick: both columns white from 3 rows above the bar to its bottom.
  for (int y = L.bar_y0 - 3; y < L.bar_y1; ++y)
    for (int x : {L.tick_x, L.tick_x + 1}) EXPECT_EQ(at(drawn, x, y)[1], 255) << x << "," << y;
  // "0": the glyph's corners lit (2x2 pixels each), its hollow centre not.
  const emd::LegendLabel& zero = L.labels[0];
  EXPECT_EQ(at(drawn, zero.x, zero.y)[2], 255);
  EXPECT_EQ(at(drawn, zero.x + 5, zero.y + 9)[2], 255);
  EXPECT_NE(at(drawn, zero.x + 2, zero.y + 4)[2], 255);
  // Every lit pixel is the tick's or a label's: 2 x (bar height + 3) for the tick and 4 pixels per
  // lit glyph bit ("0": 12 bits, "6": 12, "2": 11).
  EXPECT_EQ(white, 2 * (L.bar_y1 - L.bar_y0 + 3) + 4 * (12 + 12 + 11));

  // Labels of other values, and the threshold's dropped where it would crowd the others.
  const emd::Legend big = emd::legend_layout(W, H, 1234567.f, 0.35f);
  ASSERT_EQ(big.label_count, 2);
  EXPECT_STREQ(big.labels[1].text, "1.23e+06");
  const emd::Legend mid = emd::legend_layout(W, H, 1.5f, 0.35f);
  ASSERT_EQ(mid.label_count, 3);
  EXPECT_STREQ(mid.labels[2].text, "0.35");
  EXPECT_EQ(emd::legend_layout(W, H, 2.f, 5.f).tick_x, -1);  // a threshold beyond the ramp
  EXPECT_FALSE(emd::legend_layout(159, H, max, threshold).on);
  EXPECT_FALSE(emd::legend_layout(W, 59, max, threshold).on);
  EXPECT_FALSE(emd::legend_layout(W, H, 0.f, threshold).on);
}
}  // namespace
}  // namespace prism
