// Feature extraction shared by concurrent callers: the dynamic batching of Triton's scheduler
// (max_queue_delay_microseconds) applied to SIFT on the GPU, for the service's requests.
//
// Why: kernels/sift pays its launches and host syncs once per batch, not per image (sift.h's
// detect_and_compute_batch), so 16 requests extracted one at a time cost the GPU 16 times what they
// cost together. Each caller prepares its image on its own thread (prepare_detection: the shrink and
// the normalisation, host work that grows with the callers) and hands it here; a dispatcher thread
// sends the images that arrived together, of one size, to extract_prepared as one batch, and each
// caller gets exactly the features extract_features gives for its image (bit for bit: a batch's
// results equal one image's).
//
// Waiting (common/dynamic_batcher.h, the queue this is built on): a batch waits for more images only
// while some caller has announced one (reserve()) and not handed it yet, up to max_wait after its first
// image arrived, or until it holds max_batch. A lone request is never held: with nobody else announced,
// its image leaves at once. Where SIFT runs on the CPU (cv::SIFT: kCpu, or kAuto without a GPU)
// there is nothing to batch: each caller extracts on its own thread. With max_batch 1 on the GPU
// nothing is batched either: each caller extracts on its own thread with every step after the grey
// on the GPU (extract_on_gpu: the shrink and the normalisation too, from a pool of extractors on
// streams of their own), which frees the callers' cores of that host work; batching (max_batch > 1)
// prepares on the callers' threads, as extract_prepared wants.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/gpu.h"
#include "texture/features.h"

namespace prism::texture {

struct BatcherOptions {
  int max_batch = 16;                        // images per batch; 1: no batching
  std::chrono::microseconds max_wait{1000};  // how long a batch's first image may wait for others
  // Batches extracted at once, each on its own CUDA extractor: one's host work (keypoint selection,
  // copies) overlaps another's kernels, while a third batch forms.
  int instances = 2;
};

class ExtractionBatcher {
 public:
  // `device` as FeatureParams::device: kAuto batches on the GPU when there is a usable one. Throws
  // gpu::CudaError for kCuda without one; std::invalid_argument for options out of range.
  explicit ExtractionBatcher(gpu::Device device, const BatcherOptions& options = {});
  // Extracts what was handed already, then stops its threads.
  ~ExtractionBatcher();
  ExtractionBatcher(const ExtractionBatcher&) = delete;
  ExtractionBatcher& operator=(const ExtractionBatcher&) = delete;

  // A caller's announcement that it will hand an image soon (taken before decoding it): batches wait
  // for announced images only. Released by extract() or, unused, by its destructor.
  class Reservation {
   public:
    Reservation(Reservation&& o) noexcept : owner_(o.owner_) { o.owner_ = nullptr; }
    Reservation& operator=(Reservation&&) = delete;
    ~Reservation();
    // The features of the image, exactly as extract_features gives them; blocks until its batch is
    // extracted. Once per reservation (std::logic_error after). Throws as extract_features; a
    // batch's failure (gpu::CudaError) is every member's. `params`: FeatureParams::device is the
    // batcher's; images batch together only with the same max_features and keep_fp16/keep_fp32.
    Features extract(const cv::Mat& image, const FeatureParams& params);
    // Where this batcher extracts each caller's image on the GPU alone (max_batch 1 on a GPU): the
    // features of a JPEG decoded on the GPU as well (extract_jpeg_on_gpu; width, height and
    // reduction as it takes them), using the reservation. Otherwise, or where the GPU decoder does
    // not take the file, nothing, and the reservation stays for extract() of the host's decode.
    std::optional<Features> extract_jpeg(const uint8_t* jpeg, size_t size, int width, int height, int reduction,
                                         const FeatureParams& params);

   private:
    friend class ExtractionBatcher;
    explicit Reservation(ExtractionBatcher* owner) : owner_(owner) {}
    ExtractionBatcher* owner_;
  };
  Reservation reserve();

  // True when images go to the GPU in batches.
  bool batching() const;
  // True when SIFT runs on the GPU, batched or not (false: each caller runs cv::SIFT itself).
  bool on_gpu() const;
  struct Stats {
    uint64_t batches = 0;  // SIFT batches run (batching only)
    uint64_t images = 0;   // images extracted in them
    int largest = 0;       // the most images in one
  };
  Stats stats() const;
  const BatcherOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::texture
