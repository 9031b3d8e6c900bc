// prism texture: the texture gallery from the command line (enrol, search, verify, update, delete,
// list, stats, migrate). The work is in kernels/texture; images are decoded with GStreamer
// (gst/prism/gstprismimagefile.h).
//
// Exit codes: 0 success (search: identified; verify: accepted), 1 not identified / rejected,
// 2 usage or input errors.
#include <gst/gst.h>
#include <unistd.h>

#include <opencv2/core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/regular_file.h"
#include "gst/prism/gstprismimagefile.h"
#include "gst_setup.h"
#include "match/match.h"
#include "texture/catalog.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "options.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

namespace fs = std::filesystem;
using texture::Gallery;
using texture::GalleryEntry;
using texture::GalleryError;

constexpr const char* kUsage =
    "usage: prism texture SUBCOMMAND --gallery DIR [OPTIONS] ...\n"
    "\n"
    "  enroll  [--id ID] IMAGE...     enrol images (id = file name without extension, or --id for one)\n"
    "          [--list FILE]          ... or the 'ID PATH' lines of FILE; --update replaces enrolled ids\n"
    "  update  --id ID IMAGE          replace a product's texture\n"
    "  delete  ID...                  remove products\n"
    "  search  IMAGE...               1:M: which product is this? (exit 1 when none)\n"
    "  verify  --id ID IMAGE          1:1: is this product ID? (exit 1 when rejected)\n"
    "  list                           enrolled products\n"
    "  stats                          gallery size, features, memory\n"
    "  migrate                        rewrite format-1 (FP16) entries as format 2 (8-bit); resumable\n"
    "  (eval)                         the accuracy evaluation is the separate tool prism-texture-eval\n"
    "  serve   --gallery DIR ...      the HTTP service (see 'prism texture serve --help', docs/SERVICE.md)\n"
    "  reshard STEP ...               split a sharded deployment's shards in two online (see --help)\n"
    "\n"
    "options:\n"
    "  --gallery DIR        the gallery directory (enroll creates it in a new or empty folder)\n"
    "  --normalise NAME     enroll into a new gallery: the contrast normalisation applied before SIFT,\n"
    "                       recorded in the gallery and applied by every enrol, search and verify\n"
    "                       against it: clahe-CLIP-TILES (default clahe-4-8, chosen for dim\n"
    "                       captures; see docs/TEXTUREID.md) or none (what galleries without a\n"
    "                       record mean); elsewhere it must match the gallery's record\n"
    "  --collection C       enroll, update: the collection the products belong to (a lot, a factory,\n"
    "                       a line; update keeps the product's own when not given; \"\" for none)\n"
    "                       search: search only collection C (repeat it for several)\n"
    "  --gpu-memory SIZE    search, verify, stats: GPU memory for the descriptors (e.g. 40G; 101,376\n"
    "                       bytes per product with their norms; the newest live there; default: the free\n"
    "                       memory less 2 GiB)\n"
    "  --host-memory SIZE   host memory for the products beyond --gpu-memory (pinned on the GPU;\n"
    "                       default: half of the available memory); more products than both fail\n"
    "  --digest-rows N      search: keep a digest of every host-memory product (the N of its\n"
    "                       largest keypoints; N divides 768, 16..384) in GPU memory, out of --gpu-memory\n"
    "  --digest-candidates K search with --digest-rows: match the digests and re-match exactly only the\n"
    "                       products of the K best digest slots (approximate; default 0: exact)\n"
    "  --stream-digests     with --digest-rows: keep no digests; each search copies the host-memory\n"
    "                       products' first N rows across PCIe instead (no memory; the same answers)\n"
    "  --json               machine-readable output (one JSON object per line)\n"
    "  --device D           auto (default), cpu or cuda: where features are extracted (SIFT: OpenCV's\n"
    "                       on the CPU, ours on the GPU; either finds what the other enrolled) and\n"
    "                       descriptors matched\n"
    "  --min-significance S decision threshold on the inliers' significance, -log10 of the chance\n"
    "                       that a wrong product is as consistent (default 3.6: 1:1 FAR 0.1%)\n"
    "  --min-inliers N      RANSAC inliers needed besides (default 5)\n"
    "  --ratio R            Lowe's ratio (default 0.8)\n"
    "  --shortlist K        candidates verified geometrically per search (default 8)\n"
    "  --top K              search: candidates printed (default 1)\n";

struct Options {
  std::string sub, gallery, id, list;
  std::optional<std::string> collection;
  std::vector<std::string> collections;  // every --collection (search scope)
  std::optional<texture::Normalisation> normalise;
  int64_t gpu_memory = texture::kDefaultBudget, host_memory = texture::kDefaultBudget;
  int digest_rows = 0;          // IndexOptions::host_digest_rows
  bool stream_digests = false;  // IndexOptions::stream_host_digests
  bool json = false, update = false;
  texture::Device device = texture::Device::kAuto;
  texture::SearchParams search;
  int top = 1;
  std::vector<std::string> args;
};

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) throw UsageError("missing subcommand");
  o.sub = argv[1];
  using Name = const std::string&;
  using Value = const std::string&;
  auto collection = [&](Name, Value v) {
    o.collection = v;
    if (!texture::valid_collection(*o.collection))
      throw UsageError("--collection: invalid collection '" + *o.collection +
                       "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -)");
    if (!o.collection->empty()) o.collections.push_back(*o.collection);
  };
  const std::vector<Option> table = {
      with_value({"--gallery"}, o.gallery),
      with_value({"--id"}, o.id),
      with_value({"--list"}, o.list),
      with_value({"--normalise"}, [&](Name a, Value v) { o.normalise = parse_normalise(a, v); }),
      with_value({"--collection"}, collection),
      with_value({"--gpu-memory"}, [&](Name a, Value v) { o.gpu_memory = parse_size(a, v); }),
      with_value({"--host-memory"}, [&](Name a, Value v) { o.host_memory = parse_size(a, v); }),
      with_value({"--digest-rows"}, [&](Name a, Value v) { o.digest_rows = parse_digest_rows(a, v, false); }),
      with_value({"--digest-candidates"},
                 [&](Name a, Value v) {
                   o.search.digest_candidates = parse_int(a, v, 0, texture::SearchParams::kMaxDigestCandidates);
                 }),
      flag({"--stream-digests"}, o.stream_digests),
      flag({"--json"}, o.json),
      flag({"--update"}, o.update),
      with_value({"--device"}, [&](Name a, Value v) { o.device = parse_device(a, v); }),
      with_value({"--min-inliers"}, [&](Name a, Value v) { o.search.min_inliers = parse_int(a, v, 4, 100000); }),
      with_value({"--min-significance"},
                 [&](Name a, Value v) { o.search.min_significance = parse_number(a, v, 0, 1000); }),
      with_value({"--shortlist"}, [&](Name a, Value v) { o.search.shortlist = parse_int(a, v, 1, 1000); }),
      with_value({"--top"}, [&](Name a, Value v) { o.top = parse_int(a, v, 1, 1000); }),
      with_value({"--ratio"}, [&](Name a, Value v) { o.search.ratio = float(parse_number(a, v, 0.01, 1)); }),
  };
  ParseRules rules;
  rules.positional = [&](const std::string& a) { o.args.push_back(a); };  // images
  parse_options(arguments(argc, argv, 2), table, rules);
  if (o.gallery.empty()) throw UsageError("--gallery DIR is required");
  if ((o.sub == "list" || o.sub == "stats" || o.sub == "migrate") && !o.args.empty())
    throw UsageError(o.sub + " takes no argument, not '" + o.args[0] + "' (the gallery is --gallery DIR)");
  if (o.sub == "search") o.search.collections = o.collections;
  if (o.search.digest_candidates > 0 && o.digest_rows == 0)
    throw UsageError("--digest-candidates needs --digest-rows (the index keeps no digests without it)");
  if (o.stream_digests && o.digest_rows == 0) throw UsageError("--stream-digests needs --digest-rows");
  return o;
}

// The feature extraction a gallery's entries were made with and its queries must use: its record
// (Gallery::normalisation). A --normalise that differs is refused: the gallery decides.
texture::FeatureParams feature_params(const Options& o, const texture::Normalisation& recorded) {
  if (o.normalise && *o.normalise != recorded)
    throw UsageError("--normalise " + o.normalise->name() + ": the gallery " + o.gallery + " records normalisation " +
                     recorded.name() + " (chosen when it was created; omit --normalise)");
  texture::FeatureParams p;
  p.normalisation = recorded;
  p.device = o.device;  // where SIFT runs follows --device: auto extracts on the GPU when there is one
  return p;
}

// Enrolment jobs: (id, image path).
std::vector<std::pair<std::string, std::string>> enrol_jobs(const Options& o) {
  std::vector<std::pair<std::string, std::string>> jobs;
  if (!o.list.empty()) {
    std::istringstream in(RegularFile(o.list).read_text());  // a FIFO or /dev/zero is refused, not read forever
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::istringstream fields(line);
      std::string id, path;
      if (!(fields >> id) || id[0] == '#') continue;
      if (!(fields >> path)) throw UsageError(o.list + ":" + std::to_string(n) + ": expected 'ID PATH'");
      if (!texture::valid_product_id(id))
        throw UsageError(o.list + ":" + std::to_string(n) + ": invalid product id '" + id + "'");
      jobs.emplace_back(id, path);
    }
  }
  if (!o.id.empty() && o.args.size() != 1) throw UsageError("--id names one product: give exactly one IMAGE");
  for (const auto& path : o.args) {
    const std::string id = o.id.empty() ? fs::path(path).stem().string() : o.id;
    if (!texture::valid_product_id(id)) throw UsageError(path + ": '" + id + "' is not a valid product id (use --id)");
    jobs.emplace_back(id, path);
  }
  if (jobs.empty()) throw UsageError("nothing to enrol: give IMAGE... or --list FILE");
  return jobs;
}

// What the gallery said about its pack when it fell back to the entry files, rebuilt, repaired or
// compacted it (Gallery::ReadSummary::note): on stderr, so that --json output stays JSON.
void print_pack_note(const std::string& note) {
  if (!note.empty()) std::fprintf(stderr, "prism texture: note: %s\n", note.c_str());
}

int enroll(const Options& o) {
  const auto jobs = enrol_jobs(o);
  // A new gallery records --normalise, the poor-light choice by default.
  Gallery gallery = Gallery::open(o.gallery, /*create=*/true, Gallery::Load::kEntries,
                                  o.normalise.value_or(texture::poor_light_normalisation()));
  print_pack_note(gallery.pack_note());
  const texture::FeatureParams fparams = feature_params(o, gallery.normalisation());
  Progress progress("enrol", int(jobs.size()), !o.json || !isatty(STDOUT_FILENO));
  int done = 0, failed = 0;
  // Images are decoded in parallel and their features extracted as one batch (on the GPU, many
  // images per launch); entries are written (and acknowledged) in order.
  const size_t batch = size_t(std::max(32, 4 * cv::getNumThreads()));
  for (size_t b0 = 0; b0 < jobs.size(); b0 += batch) {
    const size_t b1 = std::min(jobs.size(), b0 + batch);
    std::vector<GalleryEntry> entries(b1 - b0);
    std::vector<std::string> errors(b1 - b0);
    std::vector<FeatureImage> greys(b1 - b0);
    cv::parallel_for_(cv::Range(int(b0), int(b1)), [&](const cv::Range& r) {
      for (int i = r.start; i < r.end; ++i) {
        GalleryEntry& e = entries[i - b0];
        e.id = jobs[i].first;
        e.source = jobs[i].second;
        e.collection = o.collection.value_or("");
        try {
          greys[i - b0] = load_feature_image(jobs[i].second, fparams.max_side);  // a large JPEG reduced
        } catch (const std::exception& ex) {
          errors[i - b0] = ex.what();
        }
      }
    });
    std::vector<size_t> loaded;
    std::vector<cv::Mat> images;
    for (size_t i = 0; i < greys.size(); ++i)
      if (errors[i].empty()) {
        loaded.push_back(i);
        images.push_back(greys[i].grey);
      }
    try {
      std::vector<texture::Features> features = texture::extract_features_batch(images, fparams);
      for (size_t k = 0; k < loaded.size(); ++k) entries[loaded[k]].features = std::move(features[k]);
    } catch (const std::exception&) {  // one at a time, so that each error names its own image
      for (size_t i : loaded) try {
          entries[i].features = texture::extract_features(greys[i].grey, fparams);
        } catch (const std::exception& ex) {
          errors[i] = ex.what();
        }
    }
    for (size_t i : loaded)  // in the file's pixels, whatever the decode's reduction
      if (errors[i].empty()) to_file_pixels(entries[i].features, greys[i]);
    for (size_t i = 0; i < entries.size(); ++i) {
      GalleryEntry& e = entries[i];
      std::string error = errors[i];
      if (error.empty()) {
        try {
          const int n = e.features.count();
          const std::string id = e.id;
          const GalleryEntry* old = gallery.find(id);
          // The same image (and collection) again is a no-op, as a repeated POST of the API is.
          const bool unchanged = old && texture::same_stored_features(old->features, e.features) &&
                                 (!o.collection || old->collection == e.collection);
          if (unchanged) {
          } else if (o.update && old) {
            if (!o.collection) e.collection = old->collection;  // kept
            gallery.update(std::move(e));
          } else
            gallery.add(std::move(e));
          ++done;
          if (o.json)
            std::printf("{\"enrolled\":%s,\"features\":%d%s}\n", json_string(id).c_str(), n,
                        unchanged ? ",\"unchanged\":true" : "");
          std::fflush(stdout);
        } catch (const GalleryError& ex) {
          error = ex.what();
        }
      }
      if (!error.empty()) {
        ++failed;
        progress.clear_line();
        if (o.json)
          std::printf("{\"error\":%s,\"id\":%s}\n", json_string(error).c_str(),
                      json_string(jobs[b0 + i].first).c_str());
        else
          std::fprintf(stderr, "prism texture enroll: error: %s\n", error.c_str());
        std::fflush(stdout);
      }
      progress.step();
    }
  }
  progress.finish();
  if (!o.json)
    std::printf("enrolled %d of %zu into %s (%zu products)\n", done, jobs.size(), o.gallery.c_str(),
                gallery.entries().size());
  return failed ? 2 : 0;
}

void print_result(const Options& o, const std::string& image, const texture::SearchResult& r, const std::string& mode) {
  if (o.json) {
    std::ostringstream s;
    s << "{\"image\":" << json_string(image) << ",\"mode\":\"" << mode
      << "\",\"identified\":" << (r.identified ? "true" : "false")
      << ",\"id\":" << (r.best.index >= 0 ? json_string(r.best.id) : "null")
      << ",\"inliers\":" << r.best.geometry.inliers << ",\"matches\":" << r.best.geometry.matches
      << ",\"ratio_matches\":" << r.best.score << ",\"significance\":" << r.best.significance
      << ",\"min_significance\":" << o.search.min_significance << ",\"match_ms\":" << r.match_ms
      << ",\"verify_ms\":" << r.verify_ms << ",\"candidates\":[";
    for (size_t i = 0; i < r.candidates.size() && int(i) < o.top; ++i)
      s << (i ? "," : "") << "{\"id\":" << json_string(r.candidates[i].id)
        << ",\"inliers\":" << r.candidates[i].geometry.inliers << ",\"matches\":" << r.candidates[i].geometry.matches
        << ",\"ratio_matches\":" << r.candidates[i].score << ",\"significance\":" << r.candidates[i].significance
        << "}";
    s << "]}";
    std::printf("%s\n", s.str().c_str());
    return;
  }
  if (mode == "verify")
    std::printf("%s: %s %s (%d inliers, %d matches, significance %.1f; threshold %.1f)\n", image.c_str(),
                r.identified ? "ACCEPT" : "REJECT", r.best.id.c_str(), r.best.geometry.inliers, r.best.geometry.matches,
                r.best.significance, o.search.min_significance);
  else if (r.identified)
    std::printf("%s: %s (%d inliers, %d matches, significance %.1f)\n", image.c_str(), r.best.id.c_str(),
                r.best.geometry.inliers, r.best.geometry.matches, r.best.significance);
  else
    std::printf("%s: not identified (best %s: %d inliers, significance %.1f; threshold %.1f)\n", image.c_str(),
                r.best.index >= 0 ? r.best.id.c_str() : "none", r.best.geometry.inliers, r.best.significance,
                o.search.min_significance);
  for (size_t i = 1; i < r.candidates.size() && int(i) < o.top; ++i)
    std::printf("  %zu. %s (%d inliers, %d matches, significance %.1f)\n", i + 1, r.candidates[i].id.c_str(),
                r.candidates[i].geometry.inliers, r.candidates[i].geometry.matches, r.candidates[i].significance);
}

texture::IndexOptions index_options(const Options& o) {
  texture::IndexOptions io;
  io.device = o.device;
  io.gpu_budget = o.gpu_memory;
  io.host_budget = o.host_memory;
  io.host_digest_rows = o.digest_rows;
  io.stream_host_digests = o.stream_digests;
  return io;
}

int search_or_verify(const Options& o, bool verify) {
  if (o.args.empty()) throw UsageError("give the query IMAGE");
  if (verify && (o.id.empty() || o.args.size() != 1)) throw UsageError("verify takes --id ID and one IMAGE");
  texture::CatalogOptions co;
  co.gallery = o.gallery;
  co.index = index_options(o);
  texture::Catalog catalog(co);
  const texture::FeatureParams fparams = feature_params(o, catalog.normalisation());
  // Streamed: a bounded batch of entries in memory besides the index (IndexFull names the budget: exit 2).
  catalog.load();
  print_pack_note(catalog.open_note());
  if (!o.json)
    std::fprintf(stderr, "prism texture: %zu products, matching on %s\n", catalog.size(),
                 catalog.index().device_description().c_str());
  // A bad query image is reported and the others still searched: exit 2 if any failed, else 1 if
  // any was not identified.
  bool all = true, failed = false;
  for (const auto& image : o.args) {
    try {
      const texture::Features q = file_features(image, fparams);
      const texture::SearchResult r = verify ? catalog.verify(q, o.id, o.search) : catalog.search(q, o.search);
      print_result(o, image, r, verify ? "verify" : "search");
      all = all && r.identified;
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      failed = true;
      if (o.json)
        std::printf("{\"query\":%s,\"error\":%s}\n", json_string(image).c_str(), json_string(e.what()).c_str());
      std::fprintf(stderr, "prism texture %s: error: %s\n", verify ? "verify" : "search", e.what());
    }
    std::fflush(stdout);
  }
  return failed ? 2 : all ? 0 : 1;
}

int remove_products(const Options& o) {
  if (o.args.empty()) throw UsageError("give the product ID(s) to delete");
  Gallery gallery = Gallery::open(o.gallery, false, Gallery::Load::kNoEntries);  // deletes a damaged entry too
  int failed = 0;
  for (const auto& id : o.args) {
    try {
      gallery.remove(id);
      if (o.json)
        std::printf("{\"deleted\":%s}\n", json_string(id).c_str());
      else
        std::printf("deleted %s\n", id.c_str());
    } catch (const GalleryError& e) {
      ++failed;
      std::fprintf(stderr, "prism texture delete: error: %s\n", e.what());
    }
    std::fflush(stdout);
  }
  return failed ? 2 : 0;
}

int list_products(const Options& o) {
  print_pack_note(
      Gallery::for_each_entry(o.gallery, [&](GalleryEntry&& e) {
        if (o.json)
          std::printf(
              "{\"id\":%s,\"features\":%d,\"width\":%d,\"height\":%d,\"enrolled_unix\":%lld,\"collection\":%s,"
              "\"format\":%d,\"source\":%s}\n",
              json_string(e.id).c_str(), e.features.count(), e.features.width, e.features.height,
              (long long)e.enrolled_unix, e.collection.empty() ? "null" : json_string(e.collection).c_str(), e.version,
              json_string(e.source).c_str());
        else
          std::printf("%-24s %4d features  %5dx%-5d %-16s %s\n", e.id.c_str(), e.features.count(), e.features.width,
                      e.features.height, e.collection.empty() ? "-" : e.collection.c_str(), e.source.c_str());
      }).note);
  return 0;
}

int stats(const Options& o) {
  size_t n = 0, features = 0, file_bytes = 0, format1 = 0;
  int fewest = match::kSlot, most = 0;
  std::map<std::string, size_t> collections;  // products per collection ("" = none)
  const std::string normalisation = Gallery::read_normalisation(o.gallery).name();
  print_pack_note(Gallery::for_each_entry(o.gallery, [&](GalleryEntry&& e) {
                    ++n;
                    ++collections[e.collection];
                    format1 += e.version == 1;
                    features += size_t(e.features.count());
                    fewest = std::min(fewest, e.features.count());
                    most = std::max(most, e.features.count());
                    std::error_code ec;
                    const auto bytes = fs::file_size(fs::path(o.gallery) / "entries" / (e.id + ".tex"), ec);
                    if (!ec) file_bytes += size_t(bytes);  // (uintmax_t)-1 for an entry deleted since it was read
                  }).note);
  if (n == 0) fewest = 0;
  const double search_mb = double(n) * match::kSlotBytes / 1e6;
  // Where the index would hold them: the budgets resolved on this machine (no slot is allocated).
  const texture::IndexStats is = texture::TextureIndex(index_options(o)).stats();
  const size_t in_gpu = std::min(n, is.gpu_capacity), in_host = std::min(n - in_gpu, is.host_capacity);
  const std::string placement =
      std::to_string(in_gpu) + " in GPU memory (budget " + std::to_string(is.gpu_capacity) + " products), " +
      std::to_string(in_host) + " in host memory (budget " + std::to_string(is.host_capacity) + ")" +
      (in_gpu + in_host < n
           ? "; " + std::to_string(n - in_gpu - in_host) + " do not fit: raise --gpu-memory or --host-memory"
           : "");
  if (o.json) {
    std::string c;
    for (const auto& [name, count] : collections)
      if (!name.empty()) c += (c.empty() ? "" : ",") + json_string(name) + ":" + std::to_string(count);
    std::printf(
        "{\"gallery\":%s,\"products\":%zu,\"normalisation\":%s,\"features\":%zu,\"features_per_product\":%.1f,"
        "\"features_min\":%d,\"features_max\":%d,\"file_bytes\":%zu,"
        "\"search_memory_mb\":%.1f,\"descriptors\":\"u8\",\"slot_rows\":%d,\"format1_entries\":%zu,"
        "\"no_collection\":%zu,\"collections\":{%s},"
        "\"index\":{\"device\":%s,\"gpu_products\":%zu,\"host_products\":%zu,\"gpu_capacity\":%zu,"
        "\"host_capacity\":%zu,\"unplaced\":%zu}}\n",
        json_string(o.gallery).c_str(), n, json_string(normalisation).c_str(), features, n ? double(features) / n : 0.0,
        fewest, most, file_bytes, search_mb, match::kSlot, format1, collections.count("") ? collections[""] : 0,
        c.c_str(), json_string(is.device).c_str(), in_gpu, in_host, is.gpu_capacity, is.host_capacity,
        n - in_gpu - in_host);
  } else {
    std::printf(
        "gallery %s\n  products        %zu\n  normalisation   %s\n  features        %zu (%.1f per product, %d..%d)\n"
        "  on disk         %.1f MB\n  search memory   %.1f MB (8-bit, %d slots per product)\n",
        o.gallery.c_str(), n, normalisation.c_str(), features, n ? double(features) / n : 0.0, fewest, most,
        file_bytes / 1e6, search_mb, match::kSlot);
    if (format1)
      std::printf("  format 1        %zu entries (FP16, converted when read; `prism texture migrate` rewrites them)\n",
                  format1);
    for (const auto& [name, count] : collections)
      std::printf("  collection      %-16s %zu products\n", name.empty() ? "(none)" : name.c_str(), count);
    std::printf("  index on %s: %s\n", is.device.c_str(), placement.c_str());
  }
  return 0;
}

// Rewrites the format-1 entries; safe to kill and to run again (Gallery::migrate).
int migrate(const Options& o) {
  Gallery gallery = Gallery::open(o.gallery, false, Gallery::Load::kNoEntries);  // entries streamed, not held
  const size_t total = Gallery::list_entry_files(o.gallery).size();
  Progress progress("migrate", int(total), !o.json || !isatty(STDOUT_FILENO));
  const int migrated = gallery.migrate([&](const std::string& id, bool rewritten) {
    if (o.json && rewritten) std::printf("{\"migrated\":%s}\n", json_string(id).c_str());
    std::fflush(stdout);
    progress.step();
  });
  progress.finish();
  if (!o.json) std::printf("migrated %d of %zu entries in %s to format 2\n", migrated, total, o.gallery.c_str());
  return 0;
}

}  // namespace

int texture_serve_command(int argc, char** argv);
int texture_shard_command(const std::vector<std::string>& args);
int texture_reshard_command(const std::vector<std::string>& args);

int texture_command(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "eval") == 0) {  // moved out of the product
    std::fputs(
        "prism texture: error: 'eval' is not a prism command: the accuracy evaluation is the separate tool\n"
        "prism-texture-eval (build/evaluation/texture/prism-texture-eval; not installed; docs/TEXTUREID.md)\n",
        stderr);
    return 2;
  }
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) return texture_serve_command(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "shard") == 0) return texture_shard_command({argv + 2, argv + argc});
  if (argc >= 2 && std::strcmp(argv[1], "reshard") == 0) return texture_reshard_command({argv + 2, argv + argc});
  for (int i = 2; i < argc; ++i)  // `prism texture enroll --help`
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  try {
    const Options o = parse(argc, argv);
    init_gstreamer();
    if (o.sub == "enroll" || o.sub == "enrol") return enroll(o);
    if (o.sub == "update") {
      if (o.id.empty() || o.args.size() != 1) throw UsageError("update takes --id ID and one IMAGE");
      if (!texture::valid_product_id(o.id))  // before the image is read, and not as a damaged entry
        throw UsageError("--id: invalid product id '" + o.id +
                         "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -)");
      Gallery gallery = Gallery::open(o.gallery, false, Gallery::Load::kNoEntries);  // repairs a damaged entry
      GalleryEntry e{o.id, o.args[0], 0, file_features(o.args[0], feature_params(o, gallery.normalisation()))};
      if (o.collection) {
        e.collection = *o.collection;
      } else {
        try {
          e.collection = gallery.read_entry(o.id).collection;  // kept
        } catch (const GalleryError& ex) {
          // Not enrolled: update refuses it below. Damaged: the repair goes on without its collection.
          if (std::string(ex.what()).find("is not enrolled") == std::string::npos)
            std::fprintf(stderr, "prism texture update: warning: %s; its collection is lost (give --collection)\n",
                         ex.what());
        }
      }
      const int n = e.features.count();
      gallery.update(std::move(e));
      if (o.json)
        std::printf("{\"updated\":%s,\"features\":%d}\n", json_string(o.id).c_str(), n);
      else
        std::printf("updated %s (%d features)\n", o.id.c_str(), n);
      return 0;
    }
    if (o.sub == "delete") return remove_products(o);
    if (o.sub == "search") return search_or_verify(o, false);
    if (o.sub == "verify") return search_or_verify(o, true);
    if (o.sub == "list") return list_products(o);
    if (o.sub == "stats") return stats(o);
    if (o.sub == "migrate") return migrate(o);
    throw UsageError("unknown subcommand '" + o.sub + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prism texture: error: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
