// emdtracker's per-frame pipeline without GStreamer: signatures (spectralized grey frames, or a
// signature tensor taken as it is or converted), the EMD map against the target, the on-target
// mask, the heat map or the distance map, objects with track ids (objects.h), box outlines; on the
// CPU or on one CUDA stream. Also the element's settings as text (ground distance, target, target-rect)
// parsed and checked here, so their errors read the same wherever they are used and are tested
// without a pipeline.
//
// Per caps, configure() builds everything a frame needs (on the CUDA path the device and pinned
// buffers too, in the CUDA context current at the call); per frame, process_cpu/process_cuda
// write the output frame and end_frame() (after the stream sync on the CUDA path) gives the
// detections. The target is known from the start (target, target-location) or learned from a
// rectangle of frame target_frame (target-rect): its EMD map is made then, once.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "emd/emd_map.h"
#include "emd/objects.h"
#include "emd/tracking.h"
#include "tensor/tensor.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/device_array.h"
#endif

namespace prism::emd {

// A setting's value is unusable. what() is "property '<name>': <why>", the element's error text
// after "emdtracker: ".
class SettingError : public std::invalid_argument {
 public:
  SettingError(const std::string& property, const std::string& why)
      : std::invalid_argument("property '" + property + "': " + why), property_(property) {}
  const std::string& property() const { return property_; }

 private:
  std::string property_;
};

// The target learned from target-rect is no signature (all zero, ...): the stream's data is at
// fault rather than the setting, so the element reports it as a stream error. what() as above.
class LearnedTargetError : public std::runtime_error {
 public:
  explicit LearnedTargetError(const std::string& why) : std::runtime_error("property 'target-rect': " + why) {}
};

enum class GroundKind { AbsDiff, SquaredDiff, Wavelengths, Matrix };

// The element's settings, as its properties hold them.
struct TrackerConfig {
  int bins = 11;    // video input: histogram bins (tensor input brings its channels)
  int window = 11;  // video input: odd histogram window
  GroundKind ground = GroundKind::AbsDiff;
  std::string wavelengths;      // GroundKind::Wavelengths: band centres, numbers
  std::string ground_location;  // GroundKind::Matrix: n lines of n numbers
  // The target: exactly one of these.
  std::string target;           // numbers
  std::string target_location;  // a file of numbers
  std::string target_rect;      // "x,y,width,height" of frame target_frame, learned
  unsigned target_frame = 0;
  EmdMapConfig map;
};

// What checked settings give: the ground distance and the target (empty until learned).
struct TrackerSetup {
  GroundDistance ground;
  std::vector<float> target;
};

// Checks the settings and builds the ground distance and the given target. `channels`: the input
// tensor's, 0 for video input (`bins` counts), -1 before caps are known (the bins are not
// compared). Also target-rect's syntax (its bounds need the frame: parse_target_rect) and a
// cache-size too large for this machine's memory. Throws SettingError naming the property (the
// file and line for file errors).
TrackerSetup check_config(const TrackerConfig& config, int channels);

// target-rect clipped to a width x height frame. Throws SettingError("target-rect") for text
// that is not 4 numbers, a number outside the int range or a rectangle with no pixel inside.
Box parse_target_rect(const std::string& text, int width, int height);

constexpr int kMaxDrawnBoxes = 64;  // outlines drawn per frame (all detections are reported)

class Tracker {
 public:
  struct Shape {
    int width = 0, height = 0;
    int channels = 0;           // tensor input's channels; 0: video input (a grey plane)
    bool distance_out = false;  // output: the float distance map instead of the RGBA heat map
  };
  // One frame: video input's grey plane, or a tensor frame and its layout (tensor input).
  struct Input {
    const uint8_t* data = nullptr;
    int64_t stride = 0;
    tensor::FrameLayout layout;
  };
  struct Output {
    uint8_t* data = nullptr;  // RGBA rows, or float rows for distance_out
    int64_t stride = 0;
  };
  // Read per frame: the threshold may change while playing.
  struct FrameParams {
    float threshold = 1.f;    // pixels at this distance or less are on target
    float heatmap_max = 0.f;  // distance shown as blue; 0: 3 x threshold
    float opacity = 0.6f;     // of the colour over the grey frame (tensor input: 1, nothing under it)
    bool legend = false;      // draw the heat map's legend (tracking.h; emdtracker's default is on)
  };
  struct Result {
    uint64_t frame = 0;   // this frame's number, from 0
    bool solved = false;  // the map was computed (the target is known)
    std::vector<Detection> detections;
    std::vector<Track> tracks;  // after this frame's update: matched (age 0) and coasting
    FrameStats stats;
  };

  Tracker();
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Per caps, for the CPU path: check_config, then buffers. Throws SettingError.
  void configure(const TrackerConfig& config, const Shape& shape);
#if defined(PRISM_HAVE_CUDA)
  // Per caps, for the CUDA path: also the device and pinned buffers, in the current context; the
  // frames' work goes on `stream`. Throws SettingError, gpu::CudaError.
  void configure(const TrackerConfig& config, const Shape& shape, cudaStream_t stream);
#endif
  // Frees everything (on the CUDA path with the context of configure() current).
  void reset();

  // One frame on the host. Throws SettingError (target-rect; cache-size when the cache table
  // cannot grow), LearnedTargetError.
  void process_cpu(const Input& in, const Output& out, const FrameParams& params);
#if defined(PRISM_HAVE_CUDA)
  // One frame of device memory, enqueued on the stream (the frame that learns the target waits
  // for its rectangle, once). Throws as process_cpu, and gpu::CudaError.
  void process_cuda(const Input& in, const Output& out, const FrameParams& params);
#endif
  // After process_* (on the CUDA path after the stream sync): the objects with track ids, the
  // tracks and the frame's statistics (none before the target is known); counts the frame.
  // The result is the tracker's, valid until the next end_frame (its vectors keep their capacity).
  const Result& end_frame(const ObjectParams& objects, const TrackParams& tracks);

  // Outlines of the first kMaxDrawnBoxes detections on an RGBA frame of the configured size.
  void draw_boxes_cpu(const std::vector<Detection>& detections, uint8_t* rgba, int64_t stride) const;
#if defined(PRISM_HAVE_CUDA)
  // The same on a device frame; returns when drawn (the stream synchronised).
  void draw_boxes_cuda(const std::vector<Detection>& detections, uint8_t* rgba, int64_t stride);
#endif

  const Shape& shape() const { return shape_; }
  bool target_known() const { return !target_.empty(); }
  uint64_t frame() const { return frame_; }  // frames ended so far

 private:
  void setup(const TrackerConfig& config, const Shape& shape);
  void make_map();
  const float* signatures(const Input& in, float* scratch, bool device) const;
  bool learn_now() const { return target_.empty() && frame_ == config_.target_frame; }
  void learn_target(const float* rect, int rw, int rh);
  HeatmapParams heatmap(const FrameParams& params) const;

  TrackerConfig config_;
  Shape shape_;
  std::unique_ptr<GroundDistance> ground_;
  std::vector<float> target_;  // empty until known
  uint64_t frame_ = 0;
  bool solved_ = false;  // this frame's map was computed
  ObjectFinder objects_;
  MotionTracker tracks_;
  FrameStats stats_;
  Result result_;
  // CPU path
  std::unique_ptr<CpuEmdMap> cpu_map_;
  std::vector<float> sig_, dist_;
  std::vector<MaskWord> mask_;
#if defined(PRISM_HAVE_CUDA)
  cudaStream_t stream_ = nullptr;
  bool cuda_ = false;
  std::unique_ptr<CudaEmdMap> cuda_map_;
  gpu::DeviceArray<float> d_sig_, d_dist_;
  gpu::DeviceArray<MaskWord> d_mask_;
  gpu::PinnedArray<MaskWord> h_mask_;
  gpu::DeviceArray<Box> d_boxes_;
  gpu::PinnedArray<Box> h_boxes_;
#endif
};

}  // namespace prism::emd
