#include "emd/tracker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "common/regular_file.h"
#include "spectral/spectralize.h"

#if defined(PRISM_HAVE_CUDA)
#include "common/gpu.h"
#endif

namespace prism::emd {

// ---- settings ----

namespace {

// target-rect's x, y, width, height as written; each must be an int (4 x 3e9 was converted to int
// with undefined behaviour). The frame is not needed: checked with the other settings at start.
std::vector<int64_t> target_rect_values(const std::string& text) {
  const std::vector<float> v = parse_numbers(text, "target-rect");
  if (v.size() != 4) throw std::invalid_argument("'" + text + "': expected x,y,width,height");
  std::vector<int64_t> out;
  for (const float f : v) {
    const double d = f;
    if (!(d >= std::numeric_limits<int>::min() && d <= std::numeric_limits<int>::max())) {
      char number[32];
      std::snprintf(number, sizeof number, "%.15g", d);
      throw std::invalid_argument("'" + text + "': " + number + " is outside " +
                                  std::to_string(std::numeric_limits<int>::min()) + ".." +
                                  std::to_string(std::numeric_limits<int>::max()));
    }
    out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

// A cache whose signatures alone (the table holds more) exceed this machine's memory could never
// be allocated: it failed as a bare std::bad_alloc at the first frame.
void check_cache_size(int64_t capacity, int bins) {
  const double need = static_cast<double>(capacity) * bins * sizeof(float);
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (capacity < 0 || (have > 0 && need > have)) {
    char why[160];
    std::snprintf(why, sizeof why, "%lld signatures of %d bins need %.3g GB, more than this machine's %.3g GB",
                  static_cast<long long>(capacity), bins, need / 1e9, have / 1e9);
    throw std::invalid_argument(why);
  }
}

}  // namespace

TrackerSetup check_config(const TrackerConfig& c, int channels) {
  const int bins = channels > 0 ? channels : c.bins;
  // The property an error is reported against: the one being read when it was thrown.
  std::string property = "window";
  try {
    if (channels <= 0) spectral::validate({bins, c.window});
    property = "ground-distance";
    std::unique_ptr<GroundDistance> ground;
    switch (c.ground) {
      case GroundKind::AbsDiff: ground = std::make_unique<GroundDistance>(GroundDistance::abs_diff(bins)); break;
      case GroundKind::SquaredDiff:
        ground = std::make_unique<GroundDistance>(GroundDistance::squared_diff(bins));
        break;
      case GroundKind::Wavelengths: {
        property = "wavelengths";
        const std::vector<float> w = parse_numbers(c.wavelengths, "wavelengths");
        ground =
            std::make_unique<GroundDistance>(GroundDistance::from_wavelengths(std::vector<double>(w.begin(), w.end())));
        break;
      }
      case GroundKind::Matrix:
        property = "ground-distance-location";
        if (c.ground_location.empty())
          throw std::invalid_argument("ground-distance=matrix needs ground-distance-location");
        ground = std::make_unique<GroundDistance>(GroundDistance::load(c.ground_location));
        break;
    }
    if (!ground) throw std::invalid_argument("unknown ground distance");
    if (ground->bins() != bins && channels >= 0)
      throw std::invalid_argument((c.ground == GroundKind::Matrix ? c.ground_location + ": " : std::string()) +
                                  "the ground distance has " + std::to_string(ground->bins()) + " bins and " +
                                  (channels > 0 ? "the input has " + std::to_string(channels) + " channels"
                                                : "'bins' is " + std::to_string(bins)));
    const int given = !c.target.empty() + !c.target_location.empty() + !c.target_rect.empty();
    property = "target";
    if (given != 1)
      throw std::invalid_argument("set exactly one of target, target-location and target-rect (" +
                                  std::to_string(given) + " set)");
    std::vector<float> target;
    if (!c.target.empty()) {
      target = parse_numbers(c.target, "target");
      if (target.empty()) throw std::invalid_argument("'" + c.target + "' holds no numbers");
    } else if (!c.target_location.empty()) {
      property = "target-location";
      target = parse_numbers(RegularFile(c.target_location).read_text(), c.target_location);
      // An empty file was taken for no target and reported later as an empty target-rect.
      if (target.empty()) throw std::invalid_argument(c.target_location + ": holds no numbers");
    }
    if (!target.empty()) {
      try {
        validate_target(target, channels >= 0 ? bins : static_cast<int>(target.size()));
      } catch (const std::invalid_argument& e) {
        // What is wrong with a file's target is said with the file.
        if (c.target_location.empty()) throw;
        throw std::invalid_argument(c.target_location + ": " + e.what());
      }
    }
    if (!c.target_rect.empty()) {
      property = "target-rect";
      target_rect_values(c.target_rect);  // its bounds against the frame: per caps
    }
    property = "cache-size";
    check_cache_size(c.map.cache_capacity, channels < 0 ? 2 : bins);  // before caps: the fewest bins a tensor has
    return {std::move(*ground), std::move(target)};
  } catch (const std::exception& e) {
    throw SettingError(property, e.what());
  }
}

Box parse_target_rect(const std::string& text, int width, int height) {
  try {
    const std::vector<int64_t> v = target_rect_values(text);
    const int64_t x0 = std::max<int64_t>(0, v[0]), y0 = std::max<int64_t>(0, v[1]);
    const int64_t x1 = std::min<int64_t>(width, v[0] + v[2]), y1 = std::min<int64_t>(height, v[1] + v[3]);
    if (x1 <= x0 || y1 <= y0)
      throw std::invalid_argument("'" + text + "' has no pixel inside the " + std::to_string(width) + "x" +
                                  std::to_string(height) + " frame");
    return {static_cast<int>(x0), static_cast<int>(y0), static_cast<int>(x1 - x0), static_cast<int>(y1 - y0)};
  } catch (const std::exception& e) {
    throw SettingError("target-rect", e.what());
  }
}

// ---- per caps ----

Tracker::Tracker() = default;
Tracker::~Tracker() = default;

void Tracker::setup(const TrackerConfig& config, const Shape& shape) {
  reset();
  TrackerSetup s = check_config(config, shape.channels);
  config_ = config;
  shape_ = shape;
  ground_ = std::make_unique<GroundDistance>(std::move(s.ground));
  target_ = std::move(s.target);
  mask_.resize(static_cast<size_t>(mask_words_per_row(shape.width)) * shape.height);
  objects_.configure(shape.width, shape.height);
  tracks_.reserve(256);
}

void Tracker::configure(const TrackerConfig& config, const Shape& shape) {
  setup(config, shape);
  const size_t pixels = static_cast<size_t>(shape.width) * shape.height;
  sig_.resize(pixels * ground_->bins());
  dist_.resize(pixels);
  if (!target_.empty()) make_map();
}

void Tracker::reset() {
#if defined(PRISM_HAVE_CUDA)
  cuda_map_.reset();  // first: it waits for the stream
  d_sig_.reset();
  d_dist_.reset();
  d_mask_.reset();
  h_mask_.reset();
  d_boxes_.reset();
  h_boxes_.reset();
  stream_ = nullptr;
  cuda_ = false;
#endif
  cpu_map_.reset();
  sig_ = {};
  dist_ = {};
  mask_ = {};
  ground_.reset();
  target_.clear();
  frame_ = 0;
  solved_ = false;
  tracks_.reset();
  stats_ = {};
  result_ = {};
}

// Once the target is known: at configure, or on the frame that learns it.
void Tracker::make_map() {
#if defined(PRISM_HAVE_CUDA)
  if (cuda_) {
    cuda_map_ = std::make_unique<CudaEmdMap>(stream_, *ground_, target_, config_.map);
    return;
  }
#endif
  cpu_map_ = std::make_unique<CpuEmdMap>(*ground_, target_, config_.map);
}

// ---- per frame ----

HeatmapParams Tracker::heatmap(const FrameParams& p) const {
  // Without a grey frame under it (tensor input) the colour is shown alone.
  HeatmapParams h{p.heatmap_max > 0 ? p.heatmap_max : 3.f * p.threshold, shape_.channels > 0 ? 1.f : p.opacity};
  if (p.legend) h.legend = legend_layout(shape_.width, shape_.height, h.max_distance, p.threshold);
  return h;
}

// The frame's signatures as packed floats [pixels][n]: spectralized from video, or the input
// tensor itself when it is packed f32, else converted; in device memory when `device`.
const float* Tracker::signatures(const Input& in, float* scratch, bool device) const {
  (void)device;  // a CPU-only build has the host path alone
  const int W = shape_.width, H = shape_.height;
  if (shape_.channels == 0) {
    const spectral::SpectralizeParams sp{config_.bins, config_.window};
#if defined(PRISM_HAVE_CUDA)
    if (device) {
      spectral::spectralize_cuda(in.data, W, H, in.stride, sp, scratch, stream_);
      return scratch;
    }
#endif
    spectral::spectralize_cpu(in.data, W, H, in.stride, sp, scratch);
    return scratch;
  }
  const tensor::FrameLayout& layout = in.layout;
  if (layout.dtype == tensor::DType::F32 && (layout.row_bytes == layout.packed_row_bytes() || H == 1))
    return reinterpret_cast<const float*>(in.data);
#if defined(PRISM_HAVE_CUDA)
  if (device) {
    tensor::to_signatures_cuda(in.data, layout, scratch, stream_);
    return scratch;
  }
#endif
  tensor::to_signatures_cpu(in.data, layout, scratch);
  return scratch;
}

// target-rect: the mean signature of the rectangle's rw x rh signatures (row-major, on the host).
void Tracker::learn_target(const float* rect, int rw, int rh) {
  const int n = ground_->bins();
  std::vector<double> sum(n, 0.0);
  for (int64_t p = 0; p < static_cast<int64_t>(rw) * rh; p++)
    for (int b = 0; b < n; b++) sum[b] += rect[p * n + b];
  std::vector<float> target(n, 0.f);
  for (int b = 0; b < n; b++) target[b] = static_cast<float>(sum[b] / (static_cast<double>(rw) * rh));
  try {
    validate_target(target, n);
  } catch (const std::exception& e) {
    throw LearnedTargetError(e.what());
  }
  target_ = std::move(target);
  make_map();
}

void Tracker::process_cpu(const Input& in, const Output& out, const FrameParams& p) {
#if defined(PRISM_HAVE_CUDA)
  if (cuda_) throw std::logic_error("emd::Tracker: process_cpu on a tracker configured for CUDA");
#endif
  const int W = shape_.width, H = shape_.height, n = ground_->bins();
  const uint8_t* grey = shape_.channels > 0 ? nullptr : in.data;
  const int64_t grey_stride = shape_.channels > 0 ? 0 : in.stride;
  const bool learn = learn_now();
  const Box r = learn ? parse_target_rect(config_.target_rect, W, H) : Box{};
  solved_ = false;
  const float* sig = signatures(in, sig_.data(), false);
  if (learn) {
    std::vector<float> rect(static_cast<size_t>(r.w) * r.h * n);
    for (int y = 0; y < r.h; y++)
      std::copy_n(&sig[(static_cast<size_t>(r.y + y) * W + r.x) * n], static_cast<size_t>(r.w) * n,
                  &rect[static_cast<size_t>(y) * r.w * n]);
    learn_target(rect.data(), r.w, r.h);
  }
  if (!target_.empty()) {
    try {
      stats_ = cpu_map_->compute(sig, static_cast<int64_t>(W) * H, dist_.data());
    } catch (const CacheMemoryError& e) {
      throw SettingError("cache-size", e.what());
    }
    solved_ = true;
    make_mask_cpu(dist_.data(), W, H, p.threshold, mask_.data());
  } else {
    std::fill(dist_.begin(), dist_.end(), NAN);  // no target yet: no distance
  }
  if (shape_.distance_out) {
    for (int y = 0; y < H; y++)
      std::copy_n(&dist_[static_cast<size_t>(y) * W], W, reinterpret_cast<float*>(out.data + y * out.stride));
  } else {
    render_heatmap_cpu(dist_.data(), grey, grey_stride, W, H, target_.empty() ? HeatmapParams{1.f, 0.f} : heatmap(p),
                       out.data, out.stride);
  }
}

const Tracker::Result& Tracker::end_frame(const ObjectParams& objects, const TrackParams& tracks) {
  Result& r = result_;
  r.detections.clear();
  r.tracks.clear();
  r.stats = {};
  r.frame = frame_++;
  r.solved = solved_;
  if (!solved_) return r;
  const MaskWord* mask = mask_.data();
#if defined(PRISM_HAVE_CUDA)
  if (cuda_) {
    mask = h_mask_.data();
    stats_ = cuda_map_->last_stats();
  }
#endif
  r.detections = objects_.find(mask, objects);
  tracks_.update(r.detections, tracks);
  r.tracks = tracks_.tracks();
  r.stats = stats_;
  return r;
}

void Tracker::draw_boxes_cpu(const std::vector<Detection>& dets, uint8_t* rgba, int64_t stride) const {
  std::vector<Box> boxes;
  for (const Detection& d : dets) {
    if (static_cast<int>(boxes.size()) == kMaxDrawnBoxes) break;
    boxes.push_back({d.x, d.y, d.w, d.h});
  }
  emd::draw_boxes_cpu(boxes, shape_.width, shape_.height, rgba, stride);
}

// ---- the CUDA path ----

#if defined(PRISM_HAVE_CUDA)
void Tracker::configure(const TrackerConfig& config, const Shape& shape, cudaStream_t stream) {
  setup(config, shape);
  cuda_ = true;
  stream_ = stream;
  const size_t pixels = static_cast<size_t>(shape.width) * shape.height;
  d_sig_.resize(pixels * ground_->bins());
  d_dist_.resize(pixels);
  d_mask_.resize(mask_.size());
  h_mask_.resize(mask_.size());
  d_boxes_.resize(kMaxDrawnBoxes);
  h_boxes_.resize(kMaxDrawnBoxes);
  // all-ones bits: NaN, no distance until the target is known
  PRISM_CUDA_CHECK(cudaMemsetAsync(d_dist_.data(), 0xFF, d_dist_.bytes(), stream_));
  if (!target_.empty()) make_map();
}

void Tracker::process_cuda(const Input& in, const Output& out, const FrameParams& p) {
  if (!cuda_) throw std::logic_error("emd::Tracker: process_cuda on a tracker configured for the CPU");
  const int W = shape_.width, H = shape_.height, n = ground_->bins();
  const uint8_t* grey = shape_.channels > 0 ? nullptr : in.data;
  const int64_t grey_stride = shape_.channels > 0 ? 0 : in.stride;
  const bool learn = learn_now();
  const Box r = learn ? parse_target_rect(config_.target_rect, W, H) : Box{};
  solved_ = false;
  cudaStream_t s = stream_;
  const float* sig = signatures(in, d_sig_.data(), true);
  if (learn) {  // once: the rectangle's signatures come to the host
    std::vector<float> rect(static_cast<size_t>(r.w) * r.h * n);
    const float* first = sig + (static_cast<size_t>(r.y) * W + r.x) * n;
    PRISM_CUDA_CHECK(cudaMemcpy2DAsync(rect.data(), sizeof(float) * r.w * n, first, sizeof(float) * W * n,
                                       sizeof(float) * r.w * n, r.h, cudaMemcpyDeviceToHost, s));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(s));
    learn_target(rect.data(), r.w, r.h);
  }
  if (!target_.empty()) {
    try {
      cuda_map_->compute(sig, static_cast<int64_t>(W) * H, d_dist_.data());
    } catch (const CacheMemoryError& e) {
      throw SettingError("cache-size", e.what());
    }
    solved_ = true;
    make_mask_cuda(d_dist_.data(), W, H, p.threshold, d_mask_.data(), s);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(h_mask_.data(), d_mask_.data(), h_mask_.bytes(), cudaMemcpyDeviceToHost, s));
  }
  if (shape_.distance_out) {
    PRISM_CUDA_CHECK(cudaMemcpy2DAsync(out.data, out.stride, d_dist_.data(), sizeof(float) * W, sizeof(float) * W, H,
                                       cudaMemcpyDeviceToDevice, s));
  } else {
    render_heatmap_cuda(d_dist_.data(), grey, grey_stride, W, H, target_.empty() ? HeatmapParams{1.f, 0.f} : heatmap(p),
                        out.data, out.stride, s);
  }
}

void Tracker::draw_boxes_cuda(const std::vector<Detection>& dets, uint8_t* rgba, int64_t stride) {
  const int count = static_cast<int>(std::min<size_t>(dets.size(), kMaxDrawnBoxes));
  int max_w = 0, max_h = 0;
  for (int i = 0; i < count; i++) {
    h_boxes_[i] = {dets[i].x, dets[i].y, dets[i].w, dets[i].h};
    max_w = std::max(max_w, dets[i].w);
    max_h = std::max(max_h, dets[i].h);
  }
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(d_boxes_.data(), h_boxes_.data(), sizeof(Box) * count, cudaMemcpyHostToDevice, stream_));
  emd::draw_boxes_cuda(d_boxes_.data(), count, max_w, max_h, shape_.width, shape_.height, rgba, stride, stream_);
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
#endif

}  // namespace prism::emd
