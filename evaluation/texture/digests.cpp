#include "digests.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

#include "match/match.h"
#include "texture_util.h"

namespace prism::eval {

namespace {

// A digest slot (the index's layout: texture::pack_digest_slots) as an entry of the evaluation's index:
// 768 rows (keypoints at 0: the digest index is only scored, never verified).
texture::GalleryEntry slot_entry(std::string id, int width, int height, const uint8_t* slot) {
  texture::GalleryEntry e;
  e.id = std::move(id);
  e.features.width = width, e.features.height = height;
  e.features.keypoints.resize(match::kSlot);
  e.features.descriptors.assign(slot, slot + match::kSlotBytes);
  return e;
}

}  // namespace

std::vector<texture::GalleryEntry> digest_entries(const std::vector<texture::Features>& products, int rows,
                                                  texture::DigestOrder order) {
  const size_t per_slot = size_t(match::kSlot / rows);
  std::vector<std::vector<uint8_t>> digests;
  for (const texture::Features& p : products) digests.push_back(texture::image_digest(p, rows, order));
  const std::vector<uint8_t> packed = texture::pack_digest_slots(digests, rows);
  std::vector<texture::GalleryEntry> slots;
  for (size_t k = 0; k * match::kSlotBytes < packed.size(); ++k) {
    const texture::Features& first = products[k * per_slot];
    slots.push_back(
        slot_entry("digest-" + std::to_string(k), first.width, first.height, packed.data() + k * match::kSlotBytes));
  }
  return slots;
}

void add_decoys(texture::TextureIndex& index, const std::vector<texture::Features>& outsiders, int decoys, int rows,
                texture::DigestOrder order, unsigned seed) {
  if (decoys == 0) return;
  // The pool: the rows of the outsiders' digests that are theirs (fewer than `rows` for an image with
  // fewer; not the padding, nor a one-row image's second copy).
  std::vector<std::vector<uint8_t>> digests;
  std::vector<const uint8_t*> pool;
  for (const texture::Features& f : outsiders) digests.push_back(texture::image_digest(f, rows, order));
  for (size_t i = 0; i < outsiders.size(); ++i)
    for (int r = 0; r < std::min(rows, outsiders[i].count()); ++r)
      pool.push_back(digests[i].data() + size_t(r) * match::kDim);
  if (pool.empty()) throw std::runtime_error("--decoys: the photos not enrolled have no features (--impostors)");
  std::mt19937 rng(seed * 2654435761u + unsigned(rows));
  const int per_slot = match::kSlot / rows;
  const int slots = (decoys + per_slot - 1) / per_slot;
  cli::Progress progress("eval decoys (" + std::to_string(rows) + " rows)", slots, true);
  for (int k = 0; k < slots; ++k) {
    // This slot's decoys, each `rows` rows drawn from the pool, packed as the index packs digests.
    std::vector<std::vector<uint8_t>> drawn(size_t(std::min(per_slot, decoys - k * per_slot)));
    for (std::vector<uint8_t>& d : drawn)
      for (int r = 0; r < rows; ++r) {
        const uint8_t* row = pool[rng() % pool.size()];
        d.insert(d.end(), row, row + match::kDim);
      }
    index.add(slot_entry("decoy-" + std::to_string(k), 256, 256, texture::pack_digest_slots(drawn, rows).data()));
    progress.step();
  }
  progress.finish();
}

}  // namespace prism::eval
