// The gallery store's entry file format (internal to kernels/texture/gallery*, not for users):
// DIR/entries/ID.tex, and the payload of a pack record, is a Header, the id, the source, the
// collection (version 2), the keypoints, the descriptors (8-bit RootSIFT; FP16 in version 1) and a
// CRC-32 of everything before it. Gallery::encode and Gallery::decode (gallery.h) are defined in
// entry_codec.cpp, with valid_product_id and valid_collection.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "texture/gallery.h"

namespace prism::texture::store {

constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'T', 'E', 'X'};
constexpr uint32_t kVersion = 2;  // written; 1 (FP16 descriptors, no collection) is still read

struct Header {
  char magic[8];
  uint32_t version, dim, count, width, height, id_len, source_len;
  uint32_t collection_len;  // version 2; version 1 left these 4 bytes as alignment padding
  int64_t enrolled_unix;
};
static_assert(sizeof(Header) == 48, "packed header");
static_assert(sizeof(Keypoint) == 24, "packed keypoint");

template <class T>
void append(std::vector<uint8_t>& out, const T* p, size_t count) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + count * sizeof(T));
}

// The size of an entry's file as encode() writes it (version 1 as read: FP16 descriptors).
uint64_t entry_file_size(const GalleryEntry& e);

}  // namespace prism::texture::store
