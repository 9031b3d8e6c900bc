// Images that arrive in requests, decoded with the project's hardened image loader
// (gst-libs/gst/prism/gstprismimagefile.h: decodebin restricted to image decoders, the declared
// size checked before any pixel is decoded, never a hang): the bytes go to an anonymous memory file
// first, because that loader reads files and is the one the fuzzers cover.
#pragma once

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

namespace prism::service {

// The image in `bytes` as 8-bit grey. Throws ServiceError naming `field`: 400 for an empty or
// undecodable image, 413 for one declaring more than `max_pixels` pixels.
cv::Mat decode_grey(const std::string& bytes, const std::string& field, uint64_t max_pixels);

}  // namespace prism::service
