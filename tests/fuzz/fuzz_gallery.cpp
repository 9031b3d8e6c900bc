// Fuzz target: gallery entry files (kernels/texture/gallery.h, Gallery::decode), what every gallery
// reader (the CLI, textureid) decodes from entries/ID.tex.
// Each input is decoded as it is and again with its last 4 bytes replaced by the CRC-32 of the rest,
// so that mutations reach the checks behind the CRC. Checks: a decoded entry has its dimensions and
// feature count in range and encodes back to the same bytes (version 2; a version-1 entry re-encodes
// as version 2 and decodes to the same entry); a refusal is a GalleryError
// naming the file.
#include <cstring>
#include <string>
#include <vector>

#include "common/durable_file.h"
#include "fuzz_util.h"
#include "match/match.h"
#include "texture/gallery.h"

namespace {

void decode_one(const std::vector<uint8_t>& bytes) {
  using prism::texture::Gallery;
  const std::string file = "entries/fuzz.tex";
  prism::texture::GalleryEntry e;
  try {
    e = Gallery::decode(bytes, file);
  } catch (const prism::texture::GalleryError& err) {
    FUZZ_CHECK(std::string(err.what()).rfind(file + ": ", 0) == 0, err.what());
    return;
  }
  FUZZ_CHECK(e.features.width >= 0 && e.features.height >= 0, "image size");
  FUZZ_CHECK(e.features.count() <= prism::match::kSlot, "feature count");
  FUZZ_CHECK(e.features.descriptors.size() == size_t(e.features.count()) * prism::match::kDim, "descriptors");
  // A version-1 entry (FP16, converted on read) re-encodes as version 2, which decodes to the same
  // entry.
  if (e.version == 1) {
    const prism::texture::GalleryEntry again = Gallery::decode(Gallery::encode(e), file);
    FUZZ_CHECK(again.id == e.id && again.source == e.source && again.features.descriptors == e.features.descriptors &&
                   again.features.count() == e.features.count() && again.version == 2,
               "a version-1 entry does not survive re-encoding as version 2");
    return;
  }
  // Version 2 re-encodes to the same bytes, except in version 1's 4 padding bytes (before
  // enrolled_unix: version 2's collection length), and so the CRC.
  std::vector<uint8_t> canonical = bytes;
  const uint32_t crc = prism::crc32(canonical.data(), canonical.size() - 4);
  std::memcpy(canonical.data() + canonical.size() - 4, &crc, 4);
  FUZZ_CHECK(Gallery::encode(e) == canonical, "re-encoding differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  decode_one(bytes);
  if (bytes.size() >= 4) {
    const uint32_t crc = prism::crc32(bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    decode_one(bytes);
  }
  return 0;
}
