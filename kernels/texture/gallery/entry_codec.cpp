#include "texture/gallery/entry_codec.h"

#include "common/durable_file.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace prism::texture {

namespace store {

uint64_t entry_file_size(const GalleryEntry& e) {
  return sizeof(Header) + e.id.size() + e.source.size() + (e.version == 1 ? 0 : e.collection.size()) +
         uint64_t(e.features.count()) * (sizeof(Keypoint) + (e.version == 1 ? 2 : 1) * match::kDim) + 4;
}

}  // namespace store

using namespace store;

bool valid_collection(const std::string& c) { return c.empty() || valid_product_id(c); }

bool valid_product_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.' || id[0] == '-') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

std::vector<uint8_t> Gallery::encode(const GalleryEntry& e) {
  const Features& f = e.features;
  if (f.descriptors.size() != size_t(f.count()) * match::kDim)
    throw GalleryError("entry '" + e.id + "': descriptor and keypoint counts disagree");
  if (f.count() > match::kSlot) throw GalleryError("entry '" + e.id + "': more than 768 features");
  if (!valid_collection(e.collection))
    throw GalleryError("entry '" + e.id + "': invalid collection '" + e.collection + "'");
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.dim = match::kDim;
  h.count = uint32_t(f.count());
  h.width = uint32_t(f.width);
  h.height = uint32_t(f.height);
  h.id_len = uint32_t(e.id.size());
  h.source_len = uint32_t(e.source.size());
  h.collection_len = uint32_t(e.collection.size());
  h.enrolled_unix = e.enrolled_unix;
  std::vector<uint8_t> out;
  out.reserve(sizeof(Header) + e.id.size() + e.source.size() + e.collection.size() +
              f.keypoints.size() * sizeof(Keypoint) + f.descriptors.size() + 4);
  append(out, &h, 1);
  append(out, e.id.data(), e.id.size());
  append(out, e.source.data(), e.source.size());
  append(out, e.collection.data(), e.collection.size());
  append(out, f.keypoints.data(), f.keypoints.size());
  append(out, f.descriptors.data(), f.descriptors.size());
  const uint32_t crc = crc32(out.data(), out.size());
  append(out, &crc, 1);
  return out;
}

GalleryEntry Gallery::decode(const std::vector<uint8_t>& bytes, const std::string& file) {
  auto corrupt = [&](const std::string& why) { return GalleryError(file + ": corrupt gallery entry: " + why); };
  if (bytes.size() < sizeof(Header) + 4) throw corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0) throw corrupt("not a Prism texture entry (bad magic)");
  if (h.version != 1 && h.version != kVersion)
    throw corrupt("format version " + std::to_string(h.version) + ", this build reads 1 and 2");
  const bool v1 = h.version == 1;
  if (v1) h.collection_len = 0;  // padding in version 1
  if (h.dim != uint32_t(match::kDim) || h.count > uint32_t(match::kSlot) || h.id_len > 128 || h.source_len > 65536 ||
      h.collection_len > 128)
    throw corrupt("impossible header values");
  // Features::width and height are ints: a size beyond them would come back negative.
  if (h.width > uint32_t(INT32_MAX) || h.height > uint32_t(INT32_MAX))
    throw corrupt("image size " + std::to_string(h.width) + " x " + std::to_string(h.height) + " is impossible");
  const size_t descriptor_bytes = v1 ? 2 : 1;  // FP16 in version 1, uint8 in version 2
  const size_t expect = sizeof(Header) + h.id_len + h.source_len + h.collection_len +
                        size_t(h.count) * (sizeof(Keypoint) + descriptor_bytes * match::kDim) + 4;
  if (bytes.size() != expect)
    throw corrupt("size " + std::to_string(bytes.size()) + " bytes, header says " + std::to_string(expect));
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32(bytes.data(), bytes.size() - 4) != stored) throw corrupt("CRC-32 mismatch");
  GalleryEntry e;
  const uint8_t* p = bytes.data() + sizeof(Header);
  e.id.assign(reinterpret_cast<const char*>(p), h.id_len);
  p += h.id_len;
  e.source.assign(reinterpret_cast<const char*>(p), h.source_len);
  p += h.source_len;
  e.collection.assign(reinterpret_cast<const char*>(p), h.collection_len);
  p += h.collection_len;
  if (!valid_collection(e.collection)) throw corrupt("invalid collection '" + e.collection + "'");
  e.enrolled_unix = h.enrolled_unix;
  e.version = int(h.version);
  e.features.width = int(h.width);
  e.features.height = int(h.height);
  if (h.count == 0) return e;  // an entry enrolled before kMinFeatures; memcpy takes no null pointer
  e.features.keypoints.resize(h.count);
  std::memcpy(e.features.keypoints.data(), p, h.count * sizeof(Keypoint));
  p += h.count * sizeof(Keypoint);
  e.features.descriptors.resize(size_t(h.count) * match::kDim);
  if (v1) {  // FP16 RootSIFT: converted as if it had been quantised from the float (match::half_to_u8)
    for (size_t i = 0; i < e.features.descriptors.size(); ++i) {
      uint16_t half;
      std::memcpy(&half, p + 2 * i, 2);
      e.features.descriptors[i] = match::half_to_u8(half);
    }
  } else {
    std::memcpy(e.features.descriptors.data(), p, e.features.descriptors.size());
  }
  return e;
}

}  // namespace prism::texture
