// --digest: the digest slots the evaluation ranks queries against, made by the index's own functions
// (texture::image_digest, texture::pack_digest_slots: index.h), so that what is measured is what an
// index with IndexOptions::host_digest_rows = ROWS holds. A product's digest is its first ROWS rows in a
// texture::DigestOrder; 768 / ROWS products' digests are packed into one matcher slot, product p at rows
// [p % per_slot * ROWS, ...) of slot p / per_slot, the rest of a slot 255s (never a nearest neighbour).
#pragma once
#include <vector>

#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/index.h"

namespace prism::eval {

// The digest entries of `products` ("digest-K", K = position / (768 / rows)).
std::vector<texture::GalleryEntry> digest_entries(const std::vector<texture::Features>& products, int rows,
                                                  texture::DigestOrder order);

// --decoys: `decoys` images' digests, `rows` rows each drawn at random (with replacement) from the pool of the
// outsiders' digest rows, appended to `index` as slots of 768 / rows decoys ("decoy-K"). std::runtime_error
// when the outsiders have no features.
void add_decoys(texture::TextureIndex& index, const std::vector<texture::Features>& outsiders, int decoys, int rows,
                texture::DigestOrder order, unsigned seed);

}  // namespace prism::eval
