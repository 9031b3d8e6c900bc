#include "emd/emd_map.h"

#include <opencv2/core.hpp>

#include <atomic>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "common/regular_file.h"
#include "emd/signature_table.h"

namespace prism::emd {

GroundDistance::GroundDistance(std::vector<float> cost, int n) : cost_(std::move(cost)), n_(n), max_cost_(0.f) {
  if (n < 2 || n > kMaxBins)
    throw std::invalid_argument("ground distance: " + std::to_string(n) + " bins; 2 to " + std::to_string(kMaxBins) +
                                " are supported");
  if (cost_.size() != static_cast<size_t>(n) * n)
    throw std::invalid_argument("ground distance: " + std::to_string(cost_.size()) + " values for " +
                                std::to_string(n) + " bins (" + std::to_string(n * n) + " expected)");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const float c = cost_[i * n + j];
      if (!std::isfinite(c) || c < 0.f) {
        std::ostringstream m;
        m << "ground distance: entry (" << i << ", " << j << ") is " << c << "; entries must be finite and >= 0";
        throw std::invalid_argument(m.str());
      }
      max_cost_ = std::max(max_cost_, c);
    }
}

GroundDistance GroundDistance::abs_diff(int n) {
  std::vector<float> c(static_cast<size_t>(std::max(n, 0)) * std::max(n, 0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) c[i * n + j] = static_cast<float>(std::abs(i - j));
  return GroundDistance(std::move(c), n);
}

GroundDistance GroundDistance::squared_diff(int n) {
  std::vector<float> c(static_cast<size_t>(std::max(n, 0)) * std::max(n, 0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) c[i * n + j] = static_cast<float>((i - j) * (i - j));
  return GroundDistance(std::move(c), n);
}

GroundDistance GroundDistance::from_wavelengths(const std::vector<double>& w) {
  // Before the n x n matrix is allocated: 30,000 wavelengths would take 3.6 GB.
  if (w.size() < 2 || w.size() > static_cast<size_t>(kMaxBins))
    throw std::invalid_argument("ground distance: " + std::to_string(w.size()) + " wavelengths; 2 to " +
                                std::to_string(kMaxBins) + " are supported");
  const int n = static_cast<int>(w.size());
  std::vector<float> c(w.size() * w.size());
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(w[i]))
      throw std::invalid_argument("ground distance: wavelength " + std::to_string(i) + " is not a number");
    for (int j = 0; j < n; ++j) c[i * n + j] = static_cast<float>(std::abs(w[i] - w[j]));
  }
  return GroundDistance(std::move(c), n);
}

std::vector<float> parse_numbers(const std::string& text, const std::string& where) {
  std::vector<float> values;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    for (char& ch : line)
      if (ch == ',' || ch == ';' || ch == '\t' || ch == '\r') ch = ' ';
    std::istringstream ls(line);
    std::string tok;
    while (ls >> tok) {
      char* end = nullptr;
      const float v = std::strtof(tok.c_str(), &end);
      if (end == tok.c_str() || *end != '\0') throw std::invalid_argument(where + ": '" + tok + "' is not a number");
      values.push_back(v);
    }
  }
  return values;
}

GroundDistance GroundDistance::load(const std::string& path) {
  std::istringstream in;
  try {
    in.str(RegularFile(path).read_text());  // refuses a FIFO, /dev/zero, ...
  } catch (const FileError& e) {
    throw std::invalid_argument(e.what());
  }
  std::vector<float> values;
  int n = -1, line_no = 0, rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::vector<float> row = parse_numbers(line, where);
    if (row.empty()) continue;
    if (n < 0) n = static_cast<int>(row.size());
    if (static_cast<int>(row.size()) != n)
      throw std::invalid_argument(where + ": " + std::to_string(row.size()) + " values; the first row had " +
                                  std::to_string(n));
    values.insert(values.end(), row.begin(), row.end());
    ++rows;
  }
  if (n < 0) throw std::invalid_argument(path + ": no values (expected n lines of n numbers)");
  if (rows != n)
    throw std::invalid_argument(path + ": " + std::to_string(rows) + " rows of " + std::to_string(n) +
                                " values; a square matrix is expected");
  try {
    return GroundDistance(std::move(values), n);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

void validate_target(const std::vector<float>& target, int bins) {
  if (static_cast<int>(target.size()) != bins)
    throw std::invalid_argument("target signature has " + std::to_string(target.size()) + " bins; the frames have " +
                                std::to_string(bins));
  double sum = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    if (!std::isfinite(target[i]) || target[i] < 0.f)
      throw std::invalid_argument("target signature bin " + std::to_string(i) + " is " + std::to_string(target[i]) +
                                  "; bins must be finite and >= 0");
    sum += target[i];
  }
  if (sum <= 0) throw std::invalid_argument("target signature is all zero: there is nothing to match");
}

double emd_cpu(const float* a, const float* b, const GroundDistance& ground, Normalization norm, Stats* stats) {
  return earth_movers_distance<double>(a, b, ground.view(), norm, stats);
}

struct CpuEmdMap::Impl {
  GroundDistance ground;
  std::vector<float> target;
  EmdMapConfig config;
  int n;
  // The table: slots x n canonical keys, a filled flag, the frame that brought the key, a value.
  int64_t entries = 0, slots = 0, filled = 0;
  std::vector<float> keys;
  std::vector<uint8_t> used;
  std::vector<int64_t> frame_of;
  std::vector<float> value;
  int64_t frame = 0;
  // Per frame, kept so that a frame allocates nothing: each pixel's slot, the new slots to solve.
  std::vector<int64_t> slot_of, work;

  Impl(GroundDistance g, std::vector<float> t, EmdMapConfig c)
      : ground(std::move(g)), target(std::move(t)), config(c), n(ground.bins()) {
    validate_target(target, n);
  }

  // Room for the cached signatures plus one frame of `pixels` new ones (called after the flush
  // decision): grows geometrically (grown_entries), re-inserting what is cached.
  void ensure(int64_t pixels) {
    if (static_cast<int64_t>(slot_of.size()) < pixels) slot_of.resize(pixels);
    const int64_t need = filled + pixels;
    if (need <= entries) return;
    const int64_t grown = grown_entries(entries, need, pixels, config.cache_capacity + pixels);
    const int64_t grown_slots = table_slots(grown);
    std::vector<float> k2;
    std::vector<uint8_t> u2;
    std::vector<int64_t> f2;
    std::vector<float> v2;
    try {
      k2.assign(static_cast<size_t>(grown_slots) * n, 0.f);
      u2.assign(grown_slots, 0);
      f2.assign(grown_slots, -1);
      v2.assign(grown_slots, 0.f);
    } catch (const std::exception&) {  // bad_alloc, length_error
      throw CacheMemoryError(cache_table_error(grown, grown_slots * (int64_t(n) * 4 + 1 + 8 + 4)));
    }
    const int64_t mask = grown_slots - 1;
    for (int64_t old = 0; old < slots; ++old) {
      if (!used[old]) continue;
      const float* key = &keys[static_cast<size_t>(old) * n];
      int64_t slot = static_cast<int64_t>(signature_hash(key, n) & static_cast<uint64_t>(mask));
      while (u2[slot]) slot = (slot + 1) & mask;  // keys are distinct: the first free slot
      std::copy_n(key, n, &k2[static_cast<size_t>(slot) * n]);
      u2[slot] = 1;
      f2[slot] = frame_of[old];
      v2[slot] = value[old];
    }
    keys = std::move(k2);
    used = std::move(u2);
    frame_of = std::move(f2);
    value = std::move(v2);
    entries = grown;
    slots = grown_slots;
  }

  void clear() {
    std::fill(used.begin(), used.end(), 0);
    filled = 0;
  }

  float solve(const float* s, std::atomic<int64_t>& pivots) const {
    Stats st;
    const double d = earth_movers_distance<double>(s, target.data(), ground.view(), config.normalization, &st);
    pivots += st.pivots;
    return static_cast<float>(d);
  }
};

CpuEmdMap::CpuEmdMap(GroundDistance ground, std::vector<float> target, EmdMapConfig config)
    : impl_(std::make_unique<Impl>(std::move(ground), std::move(target), config)) {}
CpuEmdMap::~CpuEmdMap() = default;

void CpuEmdMap::clear_cache() { impl_->clear(); }

FrameStats CpuEmdMap::compute(const float* sig, int64_t pixels, float* out) {
  Impl& m = *impl_;
  const int n = m.n;
  FrameStats fs;
  fs.pixels = pixels;
  std::atomic<int64_t> pivots{0};
  if (!m.config.dedup) {
    cv::parallel_for_(cv::Range(0, static_cast<int>(pixels)), [&](const cv::Range& r) {
      for (int p = r.start; p < r.end; ++p) out[p] = m.solve(sig + static_cast<int64_t>(p) * n, pivots);
    });
    fs.solved = pixels;
    fs.pivots = pivots;
    return fs;
  }
  if (m.filled > m.config.cache_capacity) {  // flush when full
    fs.flushed = true;
    m.clear();
  }
  m.ensure(pixels);
  ++m.frame;
  // Lookup/insert pass: each pixel gets its slot; new keys go on the work list. The hashes are
  // computed in parallel first; the probing (inserts into one table) stays sequential.
  std::vector<int64_t>& slot_of = m.slot_of;
  std::vector<int64_t>& work = m.work;
  work.clear();
  const int64_t mask = m.slots - 1;
  cv::parallel_for_(cv::Range(0, static_cast<int>(pixels)), [&](const cv::Range& r) {
    for (int p = r.start; p < r.end; ++p)
      slot_of[p] =
          static_cast<int64_t>(signature_hash(sig + static_cast<int64_t>(p) * n, n) & static_cast<uint64_t>(mask));
  });
  for (int64_t p = 0; p < pixels; ++p) {
    const float* s = sig + p * n;
    int64_t slot = slot_of[p];
    for (;; slot = (slot + 1) & mask) {
      float* key = &m.keys[static_cast<size_t>(slot) * n];
      if (!m.used[slot]) {
        for (int i = 0; i < n; ++i) key[i] = canonical_bin(s[i]);
        m.used[slot] = 1;
        m.frame_of[slot] = m.frame;
        ++m.filled;
        work.push_back(slot);
        ++fs.solved;
        break;
      }
      if (same_signature(key, s, n)) {
        if (m.frame_of[slot] == m.frame)
          ++fs.duplicates;
        else
          ++fs.cache_hits;
        break;
      }
    }
    slot_of[p] = slot;
  }
  cv::parallel_for_(cv::Range(0, static_cast<int>(work.size())), [&](const cv::Range& r) {
    for (int w = r.start; w < r.end; ++w) {
      const int64_t slot = work[w];
      m.value[slot] = m.solve(&m.keys[static_cast<size_t>(slot) * n], pivots);
    }
  });
  for (int64_t p = 0; p < pixels; ++p) out[p] = m.value[slot_of[p]];
  fs.pivots = pivots;
  if (m.config.cache_capacity == 0) m.clear();
  return fs;
}

int64_t CpuEmdMap::reserved_bytes() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.keys.capacity() * sizeof(float) + m.used.capacity() +
                              m.frame_of.capacity() * sizeof(int64_t) + m.value.capacity() * sizeof(float) +
                              (m.slot_of.capacity() + m.work.capacity()) * sizeof(int64_t));
}

}  // namespace prism::emd
