// prism-texture-eval: the accuracy evaluation of texture identification (docs/TEXTUREID.md). A tool
// of its own beside the product (built in build/evaluation/texture/, not installed): the units are
// datasets.h (which photos), perturbations.h (the synthetic re-captures), protocol.h (the queries,
// the tallies, the threshold's calibration, the ratio-test decisions against FP32), candidates.h
// (--candidates), digests.h (--digest) and report.h (texture-eval.md, scores.csv, significance.png);
// this file reads the options and runs them in order.
//
// Gallery: the first N sun8 scene photos (sorted by path), skimage's brick/grass/gravel and img1 of
// the 8 Oxford affine sequences, each one product. Queries are synthetic re-captures of every
// gallery photo (one per perturbation, fixed seed), plus the real viewpoint/light/blur/JPEG changes of
// Oxford img2..6 (their ground-truth homographies check the recovered geometry). Impostors: for 1:1,
// each query against 3 random other products; for 1:M, the sun8 photos that were not enrolled.
//
// The decision threshold on the inliers' significance (texture::chance_significance) is the
// smallest multiple of 0.1 at which the 1:1 impostor accept rate is at most 0.1%; reported per
// perturbation: top-1 identification (rank 1 correct), top-1 identified at the threshold, TAR
// (genuine 1:1 accepted) and FAR; then the same rule held out (calibrated on half the queries,
// measured on the other half) and, for comparison, the rule on the bare inlier count.
//
// Precision: the index is 8-bit (the FP16 index was removed after commit cb5eca3: 8-bit is the
// product; docs/TEXTUREID.md keeps the side-by-side table it measured). Then, on real pairs of one
// surface (Oxford img1 against img2..6; KTH-TIPS, one sample's first image at scale 5 against its
// other poses and lights), every query descriptor's ratio-test decision by the 8-bit matcher is
// compared with the FP32 reference's (ratio_decisions.h).
//
// Poor light: enrolment and queries are extracted with one contrast normalisation (--normalise,
// default texture::poor_light_normalisation()); --candidates compares several on the synthetic
// perturbations first (top-1 and identification per perturbation on an 8-bit index, and the queries'
// keypoint counts), the table docs/TEXTUREID.md's choice rests on.
//
// Digest prefilter (--digest ROWS): whether a search that matches only a digest of each gallery image
// (ROWS of its descriptors in --digest-order, 768 / ROWS images' digests packed into one slot as one
// matcher image) would still rank the genuine product's slot first, the question behind the
// approximate host tier (IndexOptions::host_digest_rows). Measured on the 8-bit index: the genuine
// slot's rank among all slots by ratio-test score, against the genuine product's rank in the exact
// scores. --decoys N adds N generated images' digests to the digest slots (rows drawn at random from
// the digests of the photos not enrolled), so that the genuine slot's rank can be read against as
// many slots as a million-scale host tier has; --digest-keep K[,K...] reports the share ranked in the
// K best (the slots a search with SearchParams::digest_candidates = K re-matches).
//
// A limited run (--perturbations P[,P...], --skip oxford,decisions): only the synthetic query sets
// named, without the Oxford queries or the real pairs' decisions; the report lists what ran and says
// what was skipped. A set run keeps a full run's queries and 1:1 impostor claims (a skipped set's
// claims are drawn all the same); the threshold is calibrated on the sets run.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "candidates.h"
#include "common/gpu.h"
#include "datasets.h"
#include "digests.h"
#include "gst_setup.h"
#include "match/match.h"
#include "perturbations.h"
#include "protocol.h"
#include "report.h"
#include "texture/affine_views.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture_util.h"

namespace prism::eval {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kEvalUsage =
    "usage: prism-texture-eval [--data DIR] [--out DIR] [--textures N] [--impostors N] [--device D] [--seed S]\n"
    "                          [--precision u8] [--normalise NAME] [--candidates]\n"
    "                          [--enrol-device D] [--query-device D] [--digest ROWS[,ROWS...]]\n"
    "                          [--digest-order O[,O...]] [--decoys N] [--digest-keep K[,K...]]\n"
    "                          [--perturbations P[,P...]] [--skip S[,S...]] [--shortlist N]\n"
    "\n"
    "  --data DIR       ../shared/data (sun8/, textures/skimage/, textures/kth-tips-gray/, oxford-affine/)\n"
    "  --out DIR        where texture-eval.md, scores.csv and significance.png go (default texture-eval)\n"
    "  --textures N     sun8 photos enrolled (default 1000)\n"
    "  --impostors N    sun8 photos not enrolled, searched as open-set impostors (default 400)\n"
    "  --device D       the matcher: auto, cpu or cuda (the CPU matcher is slow for large galleries)\n"
    "  --enrol-device D the SIFT that enrols the gallery: cpu (OpenCV's cv::SIFT, the default), cuda\n"
    "                   (kernels/sift) or auto\n"
    "  --query-device D the SIFT that extracts every query (default cpu): a gallery enrolled with one\n"
    "                   SIFT and queried with the other is the mixed run\n"
    "  --precision u8   the index's descriptors (8-bit, the only ones: kept for scripts)\n"
    "  --normalise N    contrast normalisation at enrolment and query: none or clahe-CLIP-TILES\n"
    "                   (default: the poor-light choice, clahe-4-8)\n"
    "  --candidates     first compare the candidate normalisations on the synthetic perturbations\n"
    "                   (none, equalizeHist, CLAHE settings, local mean/std) and report them\n"
    "  --digest ROWS    also rank each query's product among digests of ROWS rows per image\n"
    "                   (768 / ROWS images a slot; ROWS a divisor of 768 from 16 to 384; 8-bit)\n"
    "  --digest-order O[,O...]  which rows make a digest: largest (SIFT scale; the index's, the default),\n"
    "                   strongest (response) or spread (a 4 x 4 grid's strongest in turn)\n"
    "  --decoys N       also pack N decoy images' digests into the digest slots (rows drawn at random\n"
    "                   from the digests of the photos not enrolled; default 0)\n"
    "  --digest-keep K[,K...]  report the genuine slot's share in the K best slots (default: 1% of the\n"
    "                   slots), the slots a search with that many digest candidates re-matches\n"
    "  --perturbations P[,P...]  only these synthetic query sets (default all: viewpoint, illumination,\n"
    "                   gamma, occlusion30, blur, noise, jpeg, combined, lowlight, darkphone, perspective);\n"
    "                   a set run has the queries and 1:1 impostor claims of a full run's, the threshold is\n"
    "                   calibrated on the sets run\n"
    "  --skip S[,S...]  leave out oxford (the Oxford img2..6 queries and their corner errors) and/or\n"
    "                   decisions (the ratio-test decisions on real pairs against FP32); --perturbations\n"
    "                   and --skip oxford limit --candidates too\n"
    "  --enrol-views    also enrol ASIFT's affine-simulated views of every product (texture/affine_views.h:\n"
    "                   tilts sqrt(2) and 2, six views), each an entry of its own that stands for the\n"
    "                   product (a search's rank 1 is right when it is any view of the product; a 1:1\n"
    "                   verification is the best of the product's views, less log10 of their number)\n"
    "  --shortlist N    candidates a search verifies geometrically (default 8, the product's default:\n"
    "                   texture::SearchParams::shortlist, `prism texture search --shortlist`)\n"
    "  (a quick check on a CPU: --textures 20 --impostors 20 --device cpu)\n";

int run(int argc, char** argv) {
  fs::path data = "../shared/data", out = "texture-eval";
  int textures = 1000, impostors = 400;
  unsigned seed = 5;
  texture::Device device = texture::Device::kAuto;
  gpu::Device enrol_device = gpu::Device::kCpu, query_device = gpu::Device::kCpu;
  texture::Normalisation normalisation = texture::poor_light_normalisation();
  bool candidates = false;
  std::vector<int> digest_rows;
  std::vector<texture::DigestOrder> digest_orders;
  int decoys = 0;
  std::vector<int> digest_keep;
  std::vector<int> perturbations;  // kPerturbations positions; empty: all
  bool oxford = true, decisions_run = true;
  int shortlist = texture::SearchParams{}.shortlist;
  bool enrol_views = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kEvalUsage, stdout);
        return 0;
      } else if (a == "--data")
        data = value();
      else if (a == "--out")
        out = value();
      else if (a == "--textures")
        textures = cli::parse_int(a, value(), 1, 1000000);
      else if (a == "--impostors")
        impostors = cli::parse_int(a, value(), 1, 1000000);
      else if (a == "--seed")  // any 32-bit seed
        seed = unsigned(cli::parse_int64(a, value(), 0, UINT32_MAX));
      else if (a == "--device")
        device = cli::parse_device(a, value());
      else if (a == "--enrol-device")
        enrol_device = cli::parse_device(a, value());
      else if (a == "--query-device")
        query_device = cli::parse_device(a, value());
      else if (a == "--precision") {
        const std::string p = value();
        if (p == "fp16" || p == "both")
          throw std::runtime_error("--precision " + p +
                                   ": the FP16 index was removed (8-bit is the product; docs/TEXTUREID.md keeps "
                                   "the side-by-side table); --precision u8");
        if (p != "u8") throw std::runtime_error("--precision takes u8, not '" + p + "'");
      } else if (a == "--normalise") {
        const std::string n = value();
        try {
          normalisation = texture::parse_normalisation(n);
        } catch (const std::invalid_argument& e) {
          throw std::runtime_error(std::string("--normalise: ") + e.what());
        }
      } else if (a == "--candidates")
        candidates = true;
      else if (a == "--digest") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) {
          const int rows = cli::parse_int(a, item, 16, match::kSlot / 2);
          if (!texture::valid_host_digest_rows(rows))  // the index's digest sizes
            throw std::runtime_error("--digest: " + item + " does not divide " + std::to_string(match::kSlot));
          digest_rows.push_back(rows);
        }
      } else if (a == "--decoys")
        decoys = cli::parse_int(a, value(), 0, 100000000);
      else if (a == "--digest-keep") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');)
          digest_keep.push_back(cli::parse_int(a, item, 1, 100000000));
      } else if (a == "--digest-order") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) try {
            digest_orders.push_back(texture::parse_digest_order(item));
          } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string("--digest-order: ") + e.what());
          }
      } else if (a == "--perturbations")
        perturbations = parse_perturbations(a, value());
      else if (a == "--shortlist")
        shortlist = cli::parse_int(a, value(), 1, 1000);  // as `prism texture search --shortlist`
      else if (a == "--enrol-views")
        enrol_views = true;
      else if (a == "--skip") {
        const std::string v = value();
        std::stringstream list(v);
        std::string item;
        if (v.empty()) throw std::runtime_error("--skip takes oxford or decisions (comma-separated), not ''");
        while (std::getline(list, item, ','))
          if (item == "oxford")
            oxford = false;
          else if (item == "decisions")
            decisions_run = false;
          else
            throw std::runtime_error("--skip takes oxford or decisions (comma-separated), not '" + item + "'");
      } else
        throw std::runtime_error("unknown option '" + a + "'");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "prism-texture-eval: error: %s\n\n%s", e.what(), kEvalUsage);
      return 2;
    }
  }
  if ((decoys > 0 || !digest_keep.empty()) && digest_rows.empty()) {
    std::fprintf(stderr, "prism-texture-eval: error: %s needs --digest\n\n%s",
                 decoys > 0 ? "--decoys" : "--digest-keep", kEvalUsage);
    return 2;
  }
  if (perturbations.empty())
    for (int p = 0; p < kPerturbationCount; ++p) perturbations.push_back(p);
  try {
    init_gstreamer();
    fs::create_directories(out);
    const auto t_start = Clock::now();
    const Photos photos = load_photos(data, textures, impostors);
    const std::vector<Item>& gallery = photos.gallery;
    const std::vector<Item>& outsiders = photos.outsiders;

    // Enrolment (features only; the gallery files are measured by `prism texture enroll`).
    texture::FeatureParams fparams;
    fparams.normalisation = normalisation;
    fparams.device = enrol_device;
    texture::FeatureParams qparams = fparams;  // every query, and the open-set impostors
    qparams.device = query_device;
    std::vector<cv::Mat> images;
    for (const auto& g : gallery) images.push_back(g.grey);
    std::string cand_md;  // the --candidates table, reported first
    if (candidates) {
      const texture::SearchParams sp;  // the defaults: identified = significance >= 3.6 as in production
      cand_md = candidates_table(compare_normalisations(gallery, images, data, seed, device, sp, perturbations, oxford),
                                 sp.min_significance);
    }
    auto t0 = Clock::now();
    const std::vector<texture::Features> gf = texture::extract_features_batch(images, fparams);
    const double enrol_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<texture::GalleryEntry> entries;
    double mean_features = 0;
    for (size_t i = 0; i < gallery.size(); ++i) {
      entries.push_back({gallery[i].id, gallery[i].path, 0, gf[i]});
      mean_features += gf[i].count() / double(gallery.size());
    }
    // --enrol-views: the views' entries after the products' own, "<id>@view<k>".
    std::vector<int> product_of;  // entry position (by id) -> the product's own entry position
    std::vector<std::vector<int>> views_of;
    double views_s = 0;
    size_t view_rows = 0;
    if (enrol_views) {
      const auto tv = Clock::now();
      const std::vector<texture::AffineView> views = texture::default_affine_views();
      std::vector<texture::SimulatedView> sim;
      std::vector<cv::Mat> sim_images;
      for (const cv::Mat& im : images)
        for (const texture::AffineView& v : views) {
          sim.push_back(texture::simulate_view(im, v));
          sim_images.push_back(sim.back().image);
        }
      const std::vector<texture::Features> vf = texture::extract_features_batch(sim_images, fparams);
      for (size_t i = 0; i < gallery.size(); ++i)
        for (size_t k = 0; k < views.size(); ++k) {
          const size_t j = i * views.size() + k;
          texture::Features f = texture::features_in_image(sim[j], vf[j], images[i].size());
          view_rows += f.keypoints.size();
          if (f.count() >= texture::kMinFeatures)
            entries.push_back({gallery[i].id + "@view" + std::to_string(k), gallery[i].path, 0, std::move(f)});
        }
      views_s = std::chrono::duration<double>(Clock::now() - tv).count();
      std::fprintf(stderr, "eval: %zu view entries enrolled (%.0f features each on average) in %.1f s\n",
                   entries.size() - gallery.size(), double(view_rows) / double(entries.size() - gallery.size()),
                   views_s);
    }
    std::vector<PrecisionRun> runs;
    {
      PrecisionRun run;
      run.name = "8-bit";
      run.tag = "u8";
      texture::IndexOptions o;
      o.device = device;
      run.index = std::make_unique<texture::TextureIndex>(o);
      run.index->build(entries);
      runs.push_back(std::move(run));
    }
    const texture::TextureIndex& first = *runs.front().index;
    product_of.resize(first.size());
    views_of.resize(first.size());
    for (size_t e = 0; e < first.size(); ++e) {
      const std::string& id = first.ids()[e];
      const size_t at = id.find("@view");
      product_of[e] = at == std::string::npos ? int(e) : first.find(id.substr(0, at));
      views_of[size_t(product_of[e])].push_back(int(e));
    }
    std::vector<DigestRun> digests;
    if (digest_orders.empty()) digest_orders.push_back(texture::IndexOptions{}.digest_order);  // the index's
    // The outsiders' features per SIFT device (fparams and qparams differ in nothing else): the decoys' pool
    // (enrolment SIFT) and the open-set impostors (query SIFT) share one extraction when the devices agree.
    std::map<gpu::Device, std::vector<texture::Features>> outsider_cache;
    auto outsider_features = [&](const texture::FeatureParams& p) -> const std::vector<texture::Features>& {
      auto it = outsider_cache.find(p.device);
      if (it == outsider_cache.end()) {
        std::vector<cv::Mat> o;
        for (const auto& item : outsiders) o.push_back(item.grey);
        it = outsider_cache.emplace(p.device, texture::extract_features_batch(o, p)).first;
      }
      return it->second;
    };
    for (int rows : digest_rows)
      for (texture::DigestOrder order : digest_orders) {
        DigestRun d;
        d.rows = rows;
        d.per_slot = match::kSlot / rows;
        d.order = order;
        texture::IndexOptions o;
        o.device = device;
        d.index = std::make_unique<texture::TextureIndex>(o);
        d.index->build(digest_entries(gf, rows, order));
        for (size_t p = 0; p < entries.size(); ++p)
          d.slot_of.push_back(d.index->find("digest-" + std::to_string(p / size_t(d.per_slot))));
        if (decoys > 0) add_decoys(*d.index, outsider_features(fparams), decoys, rows, order, seed);
        d.keep = digest_keep;
        if (d.keep.empty()) d.keep.push_back(std::max<int>(1, int(d.index->size()) / 100));
        digests.push_back(std::move(d));
      }
    const double enrol_rate = gallery.size() / enrol_s;
    std::fprintf(
        stderr,
        "eval: %zu products enrolled (%.0f features each on average, %.1f images/s on %d threads), matching on %s\n",
        entries.size(), mean_features, enrol_rate, cv::getNumThreads(), first.device_description().c_str());

    texture::SearchParams params;
    params.min_inliers = 4;  // collect the raw evidence; the threshold is chosen below
    params.shortlist = shortlist;
    params.min_significance = 0;
    ScoresCsv csv(out / "scores.csv");
    QuerySets sets(runs, digests, qparams, params, seed, decoys > 0, csv);
    if (enrol_views) sets.set_products(product_of, views_of);
    for (int p = 0; p < kPerturbationCount; ++p) {
      if (std::find(perturbations.begin(), perturbations.end(), p) == perturbations.end()) {
        sets.skip(gallery.size());  // not asked (--perturbations)
        continue;
      }
      std::vector<int> truth(gallery.size());
      for (size_t i = 0; i < gallery.size(); ++i) truth[i] = first.find(gallery[i].id);
      sets.run(kPerturbations[p], perturbed_queries(images, seed, p), truth);
    }
    // Oxford: real re-captures, img2..6 against img1, with the recovered homography checked.
    Recaptures ox;
    if (oxford) {
      ox = oxford_recaptures(data, true);
      std::vector<int> oxt;
      for (const std::string& product : ox.product) oxt.push_back(first.find(product));
      sets.run("oxford-affine", ox.images, oxt);
      corner_errors(runs, ox, texture::extract_features_batch(ox.images, qparams), oxt, params);
    }
    open_set(runs, outsider_features(qparams), params, csv, product_of);
    calibrate_thresholds(runs);
    std::vector<PairSet> pair_sets;
    DecisionSweep decisions;
    if (decisions_run) {
      pair_sets = decision_pairs(data);
      decisions = decision_sweep(pair_sets, runs.size(), fparams, query_device, params.ratio);
    }

    ReportInput in;
    in.products = entries.size();
    in.textures = textures;
    in.mean_features = mean_features;
    in.normalisation = normalisation.name();
    in.enrol_device = enrol_device;
    in.query_device = query_device;
    in.matching_on = first.device_description();
    in.runs = &runs;
    in.order = &sets.order();
    in.query_stats = &sets.stats();
    in.outsiders = outsiders.size();
    in.oxford_names = oxford ? &ox.name : nullptr;
    in.ratio = params.ratio;
    in.shortlist = params.shortlist;
    in.pair_sets = decisions_run ? &pair_sets : nullptr;
    in.decisions = decisions_run ? &decisions : nullptr;
    in.digests = &digests;
    in.decoys = decoys;
    in.total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    in.enrol_images_per_s = enrol_rate;
    in.threads = cv::getNumThreads();
    write_report(out, cand_md + report_markdown(in), runs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-texture-eval: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace

}  // namespace prism::eval

int main(int argc, char** argv) { return prism::eval::run(argc, argv); }
