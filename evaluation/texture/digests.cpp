#include "digests.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

#include "match/match.h"
#include "texture_util.h"

namespace prism::eval {

namespace {

// A product's digest: its first `rows` rows (fewer if it has fewer) in `order` (texture::digest_order).
std::vector<const uint8_t*> digest_rows_of(const texture::Features& p, texture::DigestOrder order, int rows) {
  const std::vector<int> taken = texture::digest_order(p, order, rows);
  std::vector<const uint8_t*> out;
  for (int r = 0; r < std::min(rows, p.count()); ++r)
    out.push_back(p.descriptors.data() + size_t(taken[r]) * match::kDim);
  return out;
}

// A slot of 768 rows of 255 (|g|^2 = 8.3 M against about 0.26 M for RootSIFT's rows: never a nearest
// neighbour), into which digests are copied; what is left stays padding.
texture::GalleryEntry padded_slot(std::string id, int width, int height) {
  texture::GalleryEntry e;
  e.id = std::move(id);
  e.features.width = width, e.features.height = height;
  e.features.keypoints.resize(match::kSlot);
  e.features.descriptors.assign(size_t(match::kSlot) * match::kDim, uint8_t(255));
  return e;
}

void put_row(texture::GalleryEntry& slot, int row, const uint8_t* descriptor) {
  std::copy_n(descriptor, match::kDim, slot.features.descriptors.begin() + size_t(row) * match::kDim);
}

}  // namespace

std::vector<texture::GalleryEntry> digest_entries(const std::vector<texture::Features>& products, int rows,
                                                  texture::DigestOrder order) {
  const int per_slot = match::kSlot / rows;
  std::vector<texture::GalleryEntry> slots;
  for (size_t first = 0; first < products.size(); first += size_t(per_slot)) {
    texture::GalleryEntry e =
        padded_slot("digest-" + std::to_string(slots.size()), products[first].width, products[first].height);
    for (int k = 0; k < per_slot && first + k < products.size(); ++k) {
      const std::vector<const uint8_t*> digest = digest_rows_of(products[first + k], order, rows);
      for (size_t r = 0; r < digest.size(); ++r) put_row(e, k * rows + int(r), digest[r]);
    }
    slots.push_back(std::move(e));
  }
  return slots;
}

void add_decoys(texture::TextureIndex& index, const std::vector<texture::Features>& outsiders, int decoys, int rows,
                texture::DigestOrder order, unsigned seed) {
  if (decoys == 0) return;
  std::vector<const uint8_t*> pool;
  for (const texture::Features& f : outsiders) {
    const std::vector<const uint8_t*> digest = digest_rows_of(f, order, rows);
    pool.insert(pool.end(), digest.begin(), digest.end());
  }
  if (pool.empty()) throw std::runtime_error("--decoys: the photos not enrolled have no features (--impostors)");
  std::mt19937 rng(seed * 2654435761u + unsigned(rows));
  const int per_slot = match::kSlot / rows;
  const int slots = (decoys + per_slot - 1) / per_slot;
  cli::Progress progress("eval decoys (" + std::to_string(rows) + " rows)", slots, true);
  for (int k = 0; k < slots; ++k) {
    texture::GalleryEntry e = padded_slot("decoy-" + std::to_string(k), 256, 256);
    const int filled = std::min(per_slot, decoys - k * per_slot) * rows;
    for (int r = 0; r < filled; ++r) put_row(e, r, pool[rng() % pool.size()]);
    index.add(e);
    progress.step();
  }
  progress.finish();
}

}  // namespace prism::eval
