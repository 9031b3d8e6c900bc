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

// What decoding the image in `bytes` and extracting its features with `extraction` will hold in
// host memory (its header read, no pixel decoded; texture::extraction_host_bytes for the second).
// Throws ServiceError naming `field`: 400 for an empty or damaged image, 413 for one declaring more
// than `max_pixels`, 415 for another format than PNG, JPEG or binary PNM.
uint64_t image_cost(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    const texture::FeatureParams& extraction);

// The image in `bytes` as 8-bit grey. Throws ServiceError naming `field`: as image_cost, and 503
// (Retry-After) when the deadline passes mid-decode (the decode is abandoned) or memory runs out.
cv::Mat decode_grey(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace prism::service
