#include "images.h"

#include <optional>

#include "backend.h"
#include "image/decode.h"

namespace prism::service {

namespace {

using image::DecodeError;

const uint8_t* bytes_of(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

[[noreturn]] void refuse(const DecodeError& e, const std::string& field) {
  using Kind = DecodeError::Kind;
  const std::string why = "'" + field + "' " + e.what();
  switch (e.kind()) {
    case Kind::kUnsupported: throw ServiceError(415, field, why);
    case Kind::kTooLarge: throw ServiceError(413, field, why);
    case Kind::kTimedOut:
    case Kind::kNoMemory: throw ServiceError(503, field, why + " (the server is busy; try again)", 1);
    case Kind::kMalformed: break;
  }
  throw ServiceError(400, field, why);
}

void check_not_empty(const std::string& bytes, const std::string& field) {
  if (bytes.empty())
    throw ServiceError(400, field,
                       "'" + field + "' is empty: send an image (" + std::string(image::kSupportedFormats) + ")");
}

}  // namespace

DecodeBudget::Lease::~Lease() {
  if (!budget_) return;
  {
    std::lock_guard<std::mutex> g(budget_->mutex_);
    budget_->used_ -= bytes_;
  }
  budget_->freed_.notify_all();
}

DecodeBudget::Lease DecodeBudget::admit(uint64_t bytes, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> g(mutex_);
  // Larger than the whole budget: admitted once nothing else holds any, as alone as it can be.
  const auto fits = [&] { return used_ == 0 || used_ + bytes <= capacity_; };
  if (!freed_.wait_until(g, deadline, fits))
    throw ServiceError(503, "",
                       "busy: images being decoded hold " + std::to_string(used_ >> 20) + " of the server's " +
                           std::to_string(capacity_ >> 20) + " MiB for decoding (--decode-memory); try again",
                       1);
  used_ += bytes;
  return Lease(this, bytes);
}

uint64_t DecodeBudget::in_use() const {
  std::lock_guard<std::mutex> g(mutex_);
  return used_;
}

uint64_t image_cost(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    const texture::FeatureParams& extraction) {
  check_not_empty(bytes, field);
  try {
    const image::DecodeHeader h = image::read_header(bytes_of(bytes), bytes.size(), max_pixels, extraction.max_side);
    return h.working_bytes + texture::extraction_host_bytes(int(h.decoded.width), int(h.decoded.height), extraction);
  } catch (const DecodeError& e) {
    refuse(e, field);
  }
}

cv::Mat decode_grey(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                    std::chrono::steady_clock::time_point deadline) {
  check_not_empty(bytes, field);
  try {
    image::DecodeLimits limits;
    limits.max_pixels = max_pixels;
    limits.deadline = deadline;
    return image::decode_grey(bytes_of(bytes), bytes.size(), limits);
  } catch (const DecodeError& e) {
    refuse(e, field);
  }
}

texture::Features extract_upload(const std::string& bytes, const std::string& field, uint64_t max_pixels,
                                 const texture::FeatureParams& extraction,
                                 texture::ExtractionBatcher::Reservation reservation,
                                 std::chrono::steady_clock::time_point deadline, UploadTimes* times) {
  check_not_empty(bytes, field);
  const auto t0 = std::chrono::steady_clock::now();
  const auto took = [&] {
    if (times)
      times->extract_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // A JPEG decoded on the GPU where the batcher extracts each upload there alone; what the GPU's
  // decoder does not take (progressive, arithmetic, damaged) is decoded here as any other.
  if (image::sniff_format(bytes_of(bytes), bytes.size()) == image::ImageFormat::kJpeg) {
    image::DecodeHeader h;
    try {
      h = image::read_header(bytes_of(bytes), bytes.size(), max_pixels, extraction.max_side);
    } catch (const DecodeError& e) {
      refuse(e, field);
    }
    if (std::optional<texture::Features> f = reservation.extract_jpeg(bytes_of(bytes), bytes.size(), int(h.width),
                                                                      int(h.height), h.decoded.reduction, extraction)) {
      took();
      if (times) times->decoded_on_gpu = true;
      return std::move(*f);
    }
  }
  image::ReducedGrey d;
  try {
    image::DecodeLimits limits;
    limits.max_pixels = max_pixels;
    limits.deadline = deadline;
    d = image::decode_grey_reduced(bytes_of(bytes), bytes.size(), extraction.max_side, limits);
  } catch (const DecodeError& e) {
    refuse(e, field);
  }
  const auto t1 = std::chrono::steady_clock::now();
  texture::Features f = reservation.extract(d.grey, extraction);
  texture::to_original_pixels(f, int(d.width), int(d.height), d.reduction);
  if (times)
    times->extract_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  return f;
}

}  // namespace prism::service
