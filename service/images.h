// Images that arrive in requests: decoded by kernels/image/decode.h (PNG, JPEG and binary PNM
// alone, decided from the bytes, straight to grey, abandoned at the request's deadline), and
// admitted against a memory budget before decoding (memory per request grows with the
// pixels, not the bytes: a 381 KB PNG of 7000x7000 costs 49 MB of grey and more to extract, so 16
// such uploads at once would take gigabytes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include <opencv2/core.hpp>

#include "texture/extraction_batcher.h"
#include "texture/features.h"

namespace prism::service {

// Memory that images being decoded and extracted may hold at once. A request asks for what its
// image's header says it will hold (image_cost: the decode's DecodeHeader::working_bytes and the
// extraction's pyramids, which on the CPU are the larger part) and waits for it up to its deadline, or is refused with
// a 503 that says the server is busy (Retry-After): the image is not at fault, the load is.
class DecodeBudget {
 public:
  explicit DecodeBudget(uint64_t bytes) : capacity_(bytes) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  class Lease {
   public:
    Lease(DecodeBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    Lease(Lease&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();

   private:
    DecodeBudget* budget_;
    uint64_t bytes_;
  };

  // `bytes` of the budget until the lease ends. ServiceError 503 (Retry-After 1) when they are not
  // free by `deadline`; one request larger than the whole budget is admitted alone.
  Lease admit(uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;

 private:
  const uint64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  uint64_t used_ = 0;
};

// What decoding the image in `bytes` for extraction with `extraction` (decode_upload) and
// extracting its features will hold in host memory (its header read, no pixel decoded; a large
// JPEG's reduced size counted; texture::extraction_host_bytes for the second).
// Throws ServiceError naming `field`: 400 for an empty or damaged image, 413 for one declaring more
// than `max_pixels`, 415 for another format than PNG, JPEG or binary PNM.
uint64_t image_cost(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    const texture::FeatureParams& extraction);

// The image in `bytes` as 8-bit grey. Throws ServiceError naming `field`: as image_cost, and 503
// (Retry-After) when the deadline passes mid-decode (the decode is abandoned) or memory runs out.
cv::Mat decode_grey(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// The features of the uploaded image in `bytes`, in its own pixels: decoded as decode_grey does,
// except that a JPEG whose longer side is at least twice extraction.max_side is decoded reduced by
// libjpeg's DCT scaling (image::decode_grey_reduced with min_side = max_side: a 4000x3000 photo at
// 2000x1500), which extract_features then shrinks to max_side as it shrinks any image; the keypoints
// are put back in the upload's pixels (texture::to_original_pixels), so that Features::width/height
// and the homographies verified from them are the uploaded image's. SIFT runs through `batcher`
// (texture/extraction_batcher.h: on the GPU, with the images of the requests arriving together; the
// result is extract_features', bit for bit); `reservation` is this request's, taken before its image
// was admitted, so that batches forming meanwhile wait for it. Throws as decode_grey, and
// std::invalid_argument as extract_features. `times`, when given, gets the extraction's part (the
// shrink, the wait for a batch and SIFT; the rest is the decode's: the request's latency_ms). Where
// the batcher extracts each upload on the GPU alone (serve --batch 1 on a GPU), a JPEG is decoded
// there too (texture::extract_jpeg_on_gpu, the same features bit for bit): its decode is then part
// of extract_ms, and decoded_on_gpu is set.
struct UploadTimes {
  double extract_ms = 0;
  bool decoded_on_gpu = false;
};
texture::Features extract_upload(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                                 const texture::FeatureParams& extraction,
                                 texture::ExtractionBatcher::Reservation reservation,
                                 std::chrono::steady_clock::time_point deadline, UploadTimes* times = nullptr);

}  // namespace prism::service
