// Fuzz target: a gallery's pack and marker (kernels/texture/gallery.h): gallery.prism (format and
// `normalise` lines), pack.log (file header, record headers, their CRC-32s, payloads) and
// pack.dirty, read through Gallery::for_each_entry, the read every reader (open, the CLI, textureid,
// the service) goes through, in a fresh gallery folder per input whose entries/ holds the two
// entries of a template gallery.
// Input: the marker's text up to the first NUL, then pack.log's bytes. A marker line starting with
// "dirty:" is not the marker's: the rest of that line becomes pack.dirty, with "@INODE@" replaced by
// pack.log's inode (which a writer records there and an input cannot know).
// The template gallery is written by the gallery's own writer (add, update, add, delete; see
// template_gallery()); `PRISM_FUZZ_SEED_DIR=DIR fuzz_replay_gallery_pack FILE` writes its marker
// and pack.log there as an input, which is how corpus/gallery_pack's seeds were made.
// Checks: a read either passes on exactly the two entries of entries/, in id order, each one that
// the template's writer wrote under that id (the pack's copy or the file), with
// read_normalisation() giving a normalisation whose name reads back as itself; or it throws a
// GalleryError naming a file of the gallery (its message starts with the gallery folder).
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/durable_file.h"
#include "fuzz_util.h"
#include "gallery_cases.h"
#include "texture/gallery.h"

namespace {

namespace fs = std::filesystem;
using prism::texture::Gallery;
using prism::texture::GalleryEntry;

// Every entry the template's writer wrote (the replaced version of p1 too), encoded.
std::vector<std::vector<uint8_t>> written;
fs::path template_dir;

GalleryEntry entry(const std::string& id, std::mt19937& rng, int n, const std::string& collection = "") {
  GalleryEntry e = prism::test::random_gallery_entry(id, rng, n, collection);
  e.features.descriptors_fp16.clear();
  e.source = id + ".png";
  e.enrolled_unix = 1700000000;
  written.push_back(Gallery::encode(e));
  return e;
}

// p1 (added, then updated: a dead record), p2 (with a collection), p3 (added, then deleted).
void template_gallery() {
  template_dir = prism::fuzz::scratch_dir() / "template";
  std::mt19937 rng(7);
  Gallery g = Gallery::open(template_dir, /*create=*/true);
  g.add(entry("p1", rng, 5));
  g.add(entry("p3", rng, 6));
  g.update(entry("p1", rng, 7));
  g.add(entry("p2", rng, 5, "lot-7"));
  g.remove("p3");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  template_gallery();
  if (const char* seeds = std::getenv("PRISM_FUZZ_SEED_DIR")) {
    std::vector<uint8_t> input = prism::read_file(template_dir / "gallery.prism");
    input.push_back(0);
    const std::vector<uint8_t> pack = prism::read_file(template_dir / "pack.log");
    input.insert(input.end(), pack.begin(), pack.end());
    prism::fuzz::write_bytes(fs::path(seeds) / "template", input.data(), input.size());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = prism::fuzz::scratch_dir() / "gallery";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir / "entries");
  for (const char* id : {"p1", "p2"})
    fs::copy_file(template_dir / "entries" / (std::string(id) + ".tex"), dir / "entries" / (std::string(id) + ".tex"));

  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  std::string marker(reinterpret_cast<const char*>(data), nul ? size_t(nul - data) : size);
  std::string dirty;
  bool has_dirty = false;
  if (const size_t at = marker.find("\ndirty:"); at != std::string::npos) {
    const size_t end = marker.find('\n', at + 1);
    dirty = marker.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7) + "\n";
    marker.erase(at + 1);
    has_dirty = true;
  }
  prism::fuzz::write_bytes(dir / "gallery.prism", reinterpret_cast<const uint8_t*>(marker.data()), marker.size());
  if (nul) prism::fuzz::write_bytes(dir / "pack.log", nul + 1, size - size_t(nul - data) - 1);
  if (has_dirty) {
    struct stat st {};
    const std::string inode = ::stat((dir / "pack.log").c_str(), &st) == 0 ? std::to_string(st.st_ino) : "0";
    for (size_t at; (at = dirty.find("@INODE@")) != std::string::npos;) dirty.replace(at, 7, inode);
    prism::fuzz::write_bytes(dir / "pack.dirty", reinterpret_cast<const uint8_t*>(dirty.data()), dirty.size());
  }

  const std::string prefix = dir.string() + "/";
  std::vector<GalleryEntry> got;
  try {
    Gallery::for_each_entry(dir, [&](GalleryEntry&& e) { got.push_back(std::move(e)); });
  } catch (const prism::texture::GalleryError& e) {
    FUZZ_CHECK(std::string(e.what()).rfind(prefix, 0) == 0, e.what());
    return 0;
  }
  FUZZ_CHECK(got.size() == 2 && got[0].id == "p1" && got[1].id == "p2", "not the gallery's two entries");
  for (const GalleryEntry& e : got) {
    const std::vector<uint8_t> bytes = Gallery::encode(e);
    bool known = false;
    for (const std::vector<uint8_t>& w : written) known = known || w == bytes;
    FUZZ_CHECK(known, ("entry '" + e.id + "' is none that was written").c_str());
  }
  const prism::texture::Normalisation n = Gallery::read_normalisation(dir);
  FUZZ_CHECK(prism::texture::parse_normalisation(n.name()).name() == n.name(), n.name().c_str());
  return 0;
}
