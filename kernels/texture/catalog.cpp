#include "texture/catalog.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace prism::texture {

Catalog::Catalog(const CatalogOptions& options)
    : options_(options),
      owner_(options.owner ? std::make_unique<GalleryOwner>(options.gallery, *options.owner) : nullptr),
      // (a read-only catalog creates nothing: open() writes only with `create`)
      gallery_(Gallery::open(options.gallery, options.writable && options.create, Gallery::Load::kNoEntries,
                             options.normalisation.value_or(poor_light_normalisation()))),
      normalisation_(gallery_.normalisation()),
      index_(options.index) {
  if (options.normalisation && *options.normalisation != normalisation_)
    throw NormalisationMismatch(options.setting + " " + options.normalisation->name() + ": the gallery " +
                                options.gallery.string() + " records normalisation " + normalisation_.name() +
                                " (chosen when it was created)");
}

void Catalog::load(const std::function<void(size_t)>& progress) {
  size_t done = 0;
  const Gallery::ReadSummary read = Gallery::for_each_entry(options_.gallery, [&](GalleryEntry&& e) {
    index_.add(e);
    if (progress) progress(++done);
  });
  open_note_ = read.note;
  copies_repaired_ = int64_t(read.damaged_copies);
}

Catalog::~Catalog() = default;

FeatureParams Catalog::feature_params() const {
  FeatureParams p;
  p.normalisation = normalisation_;
  return p;
}

void Catalog::note(const std::string& text, int64_t copies) const {
  copies_repaired_ += copies;
  if (note_sink_)
    note_sink_(text);
  else
    std::fprintf(stderr, "gallery %s: %s\n", options_.gallery.string().c_str(), text.c_str());
}

Gallery& Catalog::writer() {
  if (!options_.writable) throw GalleryError("the gallery " + options_.gallery.string() + " was opened read-only");
  return gallery_;
}

GalleryEntry Catalog::read(const std::string& id) const {
  std::string n;
  GalleryEntry e = gallery_.read_entry(id, &n);
  if (!n.empty()) note(n);
  return e;
}

void Catalog::for_each_entry(const std::function<void(GalleryEntry&&)>& on_entry) const {
  // The ids the index holds, in id order, merged with the stream (in id order too): an id the stream
  // skips is read() where it would have come.
  std::vector<std::string> held = index_.ids();
  std::sort(held.begin(), held.end());
  std::vector<char> passed(held.size(), 0);
  size_t next = 0;  // held[..next) have been passed on or read
  const auto read_up_to = [&](size_t end) {
    for (; next < end; ++next)
      if (!passed[next]) {
        passed[next] = 1;
        on_entry(read(held[next]));
      }
  };
  const Gallery::ReadSummary r = Gallery::for_each_entry(options_.gallery, [&](GalleryEntry&& e) {
    const auto it = std::lower_bound(held.begin(), held.end(), e.id);
    if (it == held.end() || *it != e.id) return;  // not indexed: written by another process since
    const size_t at = size_t(it - held.begin());
    read_up_to(at);
    if (passed[at]) return;
    passed[at] = 1;
    on_entry(std::move(e));
  });
  if (r.damaged_copies > 0) note(r.note, int64_t(r.damaged_copies));
  read_up_to(held.size());
}

void Catalog::add(const GalleryEntry& entry) {
  Gallery& g = writer();
  g.add(entry);
  try {
    index_.add(entry);
  } catch (...) {  // nothing was acknowledged: the gallery as it was
    g.remove(entry.id);
    throw;
  }
}

void Catalog::update(const GalleryEntry& entry) {
  Gallery& g = writer();
  const GalleryEntry old = read(entry.id);
  g.update(entry);
  try {
    if (contains(entry.id))
      index_.update(entry);
    else
      index_.add(entry);  // (enrolled on disk while the index was refused it: now indexed)
  } catch (...) {
    g.update(old);
    throw;
  }
}

bool Catalog::remove(const std::string& id) {
  Gallery& g = writer();
  if (!contains(id)) return false;
  g.remove(id);
  index_.remove(id);
  return true;
}

}  // namespace prism::texture
