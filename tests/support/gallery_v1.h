// The gallery entry encoder of format version 1 (FP16 RootSIFT, no collection), kept for the tests
// of reading and migrating galleries written before version 2 (texture/gallery.h). A frozen copy of
// the old layout: header (48 bytes), id, source, keypoints, FP16 descriptors, CRC-32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/durable_file.h"
#include "texture/features.h"

namespace prism::test {

// `descriptors_fp16` ([count][kDim] FP16 RootSIFT) stands for what version 1 stored.
inline std::vector<uint8_t> encode_gallery_entry_v1(const std::string& id, const std::string& source,
                                                    int64_t enrolled_unix, const texture::Features& f) {
  struct Header {
    char magic[8];
    uint32_t version, dim, count, width, height, id_len, source_len;
    int64_t enrolled_unix;
  };
  static_assert(sizeof(Header) == 48, "packed header");
  Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, "PRISMTEX", 8);
  h.version = 1;
  h.dim = match::kDim;
  h.count = uint32_t(f.count());
  h.width = uint32_t(f.width);
  h.height = uint32_t(f.height);
  h.id_len = uint32_t(id.size());
  h.source_len = uint32_t(source.size());
  h.enrolled_unix = enrolled_unix;
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  put(&h, sizeof h);
  put(id.data(), id.size());
  put(source.data(), source.size());
  put(f.keypoints.data(), f.keypoints.size() * sizeof(texture::Keypoint));
  put(f.descriptors_fp16.data(), f.descriptors_fp16.size() * 2);
  const uint32_t crc = crc32(out.data(), out.size());
  put(&crc, 4);
  return out;
}

}  // namespace prism::test
