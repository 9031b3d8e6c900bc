// The HTTP API over one gallery (service/http_api.h + service/local_backend.h), through a real
// cpp-httplib server on 127.0.0.1 (a free port) and a real client: answers equal the index's own on
// the same gallery; write semantics; API keys; every bad request a 4xx JSON error naming the field
// with the server still healthy; a bounded load of 32 concurrent clients; concurrent searches of the
// backend batched together (search_many) answering as alone.
#include <arpa/inet.h>
#include <gst/gst.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "gallery_cases.h"
#include "http_api.h"
#include "images.h"
#include "local_backend.h"
#include "process.h"
#include "shard_fixture.h"
#include "test_env.h"
#include "ppm.h"
#include "texture_cases.h"

namespace prism::service {
namespace {

using json = nlohmann::json;
using test::TempDir;

std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += a[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? a[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

texture::IndexOptions cpu_index() {
  texture::IndexOptions o;
  o.device = texture::Device::kCpu;
  o.host_budget = int64_t(64) << 20;
  return o;
}

// The API over `backend`, served on its own thread.
class ApiServer {
 public:
  ApiServer(Backend& backend, const ApiOptions& options) : api_(backend, options) {
    port_ = api_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { api_.serve(); });
    httplib::Client c = client();
    // At most 2 s for the listener to start (any answer: a sharded front without workers is
    // rightly unhealthy).
    for (int i = 0; i < 200; ++i) {
      if (auto r = c.Get("/healthz"); r) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "the server did not answer /healthz";
  }
  ~ApiServer() {
    api_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client client(bool keep_alive = false) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_keep_alive(keep_alive);
    c.set_tcp_nodelay(true);
    c.set_read_timeout(std::chrono::seconds(60));
    c.set_connection_timeout(std::chrono::seconds(5));
    return c;
  }

 private:
  HttpApi api_;
  int port_ = 0;
  std::thread thread_;
};

// The API on a fresh gallery of its own.
class Server {
 public:
  explicit Server(ApiOptions options = {}, std::optional<texture::Normalisation> normalisation = std::nullopt,
                  const texture::IndexOptions& index = cpu_index()) {
    gst_init(nullptr, nullptr);
    LocalOptions lo;
    lo.gallery = dir_.path() / "gallery";
    lo.index = index;
    lo.normalisation = normalisation;
    backend_ = std::make_unique<LocalBackend>(lo);
    api_ = std::make_unique<ApiServer>(*backend_, options);
  }
  httplib::Client client(bool keep_alive = false) const { return api_->client(keep_alive); }
  int port() const { return api_->port(); }
  std::filesystem::path gallery() const { return dir_.path() / "gallery"; }

 private:
  TempDir dir_;
  std::unique_ptr<LocalBackend> backend_;
  std::unique_ptr<ApiServer> api_;
};

json body_of(const httplib::Result& r) {
  if (!r) return json{{"transport_error", httplib::to_string(r.error())}};
  try {
    return json::parse(r->body);
  } catch (const json::parse_error&) {
    return json{{"not_json", r->body.substr(0, 200)}};
  }
}

httplib::Result post_image(httplib::Client& c, const std::string& path, const cv::Mat& grey,
                           const httplib::Headers& headers = {}) {
  return c.Post(path.c_str(), headers, test::pgm_bytes(grey), "image/x-portable-graymap");
}

// The farthest a corner of a w x h image lands under `a` from where it lands under `b`, in pixels.
double corner_error(const cv::Matx33d& a, const cv::Matx33d& b, int w, int h) {
  double worst = 0;
  for (cv::Point2d p : {cv::Point2d(0, 0), cv::Point2d(w, 0), cv::Point2d(w, h), cv::Point2d(0, h)}) {
    const cv::Vec3d u = a * cv::Vec3d(p.x, p.y, 1), v = b * cv::Vec3d(p.x, p.y, 1);
    worst = std::max(worst, std::hypot(u[0] / u[2] - v[0] / v[2], u[1] / u[2] - v[1] / v[2]));
  }
  return worst;
}

std::vector<cv::Mat> textures(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<cv::Mat> out;
  for (int i = 0; i < n; ++i) out.push_back(test::random_texture(rng));
  return out;
}

TEST(HttpApi, AnswersEqualTheIndexOnTheSameGallery) {
  Server server;
  httplib::Client c = server.client();
  const std::vector<cv::Mat> products = textures(6, std::random_device{}());
  for (size_t i = 0; i < products.size(); ++i) {
    const std::string path = "/v1/products/p" + std::to_string(i) + (i % 2 ? "?collection=odd" : "");
    const httplib::Result r = [&] {  // the three body forms
      if (i % 3 == 0) return post_image(c, path, products[i]);
      if (i % 3 == 1) {
        const httplib::MultipartFormDataItems form = {
            {"image", test::pgm_bytes(products[i]), "p.pgm", "image/x-portable-graymap"}};
        return c.Post(path.c_str(), form);
      }
      return c.Post(path.c_str(), json{{"image", base64(test::pgm_bytes(products[i]))}}.dump(), "application/json");
    }();
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 201) << r->body;
    EXPECT_EQ(body_of(r)["outcome"], "created");
  }
  // The same gallery read by an index of its own: what `prism texture search|verify` answer.
  texture::TextureIndex index(cpu_index());
  const texture::Gallery stored = texture::Gallery::open(server.gallery());
  index.build(stored.entries());
  ASSERT_EQ(index.size(), products.size());
  // A new gallery's default, which the server applied to every upload.
  EXPECT_EQ(stored.normalisation(), texture::poor_light_normalisation());
  texture::FeatureParams fparams;
  fparams.normalisation = stored.normalisation();
  std::mt19937 rng(7);
  for (size_t i = 0; i < products.size(); ++i) {
    const cv::Mat query = test::noisy_capture(products[i], rng);
    const texture::Features qf = texture::extract_features(query, fparams);
    const texture::SearchParams params;
    const texture::SearchResult want = index.search(qf, params);
    const json got = body_of(post_image(c, "/v1/search?top_k=3", query));
    ASSERT_TRUE(got.contains("identified")) << got.dump();
    EXPECT_EQ(got["identified"], want.identified);
    ASSERT_TRUE(want.identified) << "capture " << i << " of a random texture should be identified";
    EXPECT_EQ(got["id"], want.best.id);
    EXPECT_EQ(got["id"], "p" + std::to_string(i));
    EXPECT_EQ(got["candidates"][0]["inliers"], want.best.geometry.inliers);
    EXPECT_NEAR(got["candidates"][0]["significance"].get<double>(), want.best.significance, 1e-9);
    EXPECT_EQ(got["searched"], products.size());
    EXPECT_EQ(got["searched_share"], 1.0);
    // One word, one meaning: ratio_matches is the matcher's count (score its deprecated spelling),
    // matches the one-to-one correspondences verified, min_significance the threshold (threshold
    // its deprecated spelling).
    EXPECT_EQ(got["candidates"][0]["ratio_matches"], want.best.score);
    EXPECT_EQ(got["candidates"][0]["score"], want.best.score);
    EXPECT_EQ(got["candidates"][0]["matches"], want.best.geometry.matches);
    EXPECT_EQ(got["min_significance"], params.min_significance);
    EXPECT_EQ(got["threshold"], params.min_significance);

    const texture::SearchResult v = index.verify(qf, "p" + std::to_string((i + 1) % products.size()), params);
    const json gv =
        body_of(post_image(c, "/v1/products/p" + std::to_string((i + 1) % products.size()) + "/verify", query));
    EXPECT_EQ(gv["decision"], v.identified ? "accepted" : "rejected") << gv.dump();
    EXPECT_EQ(gv["inliers"], v.best.geometry.inliers);
    EXPECT_FALSE(v.identified) << "a wrong product accepted";
    const json gs = body_of(post_image(c, "/v1/products/p" + std::to_string(i) + "/verify", query));
    EXPECT_EQ(gs["decision"], "accepted") << gs.dump();
  }
  // The threshold by either spelling decides: a wrong product's verification is accepted or rejected as
  // its significance reaches the threshold given (and 5 inliers), echoed under both names.
  const cv::Mat again = test::noisy_capture(products[0], rng);
  for (const std::string field : {"min_significance", "threshold"})
    for (const double t : {0.0, 2.0, 1000.0}) {
      const json a = body_of(post_image(c, "/v1/products/p1/verify?" + field + "=" + std::to_string(t), again));
      const bool passes = a["significance"].get<double>() >= t && a["inliers"].get<int>() >= 5;
      EXPECT_EQ(a["decision"], passes ? "accepted" : "rejected") << field << "=" << t << ": " << a.dump();
      EXPECT_EQ(a["min_significance"], t) << field;
      EXPECT_EQ(a["threshold"], t) << field;
    }
  EXPECT_EQ(body_of(post_image(c, "/v1/products/p0/verify?min_significance=2&threshold=2", again))["decision"],
            "accepted");
  // A scoped search sees only its collection.
  const json scoped = body_of(post_image(c, "/v1/search?collections=odd", test::noisy_capture(products[2], rng)));
  EXPECT_EQ(scoped["searched"], 3) << scoped.dump();
  EXPECT_EQ(scoped["identified"], false);
}

// Approximate searches through the host tier's digests (digest_candidates): the API answers as an
// index with the same digests searched with the same parameters; a search that re-matches the best
// digest slot alone (3 products of 9 at 256 rows) still finds each product; without the parameter a
// search is exact; bad values are 400s naming the field; stats and metrics show the digests' memory.
TEST(HttpApi, DigestSearchesAnswerAsTheIndexWithTheSameDigests) {
  texture::IndexOptions io = cpu_index();  // on the CPU every image is in the host tier
  io.host_digest_rows = 256;
  Server server({}, std::nullopt, io);
  httplib::Client c = server.client();
  const std::vector<cv::Mat> products = textures(9, 2026);
  for (size_t i = 0; i < products.size(); ++i)
    ASSERT_EQ(post_image(c, "/v1/products/p" + std::to_string(i), products[i])->status, 201);
  texture::TextureIndex index(io);
  const texture::Gallery stored = texture::Gallery::open(server.gallery());
  index.build(stored.entries());
  texture::FeatureParams fparams;
  fparams.normalisation = stored.normalisation();
  texture::SearchParams one;
  one.digest_candidates = 1;
  std::mt19937 rng(5);
  for (size_t i = 0; i < products.size(); ++i) {
    SCOPED_TRACE("product " + std::to_string(i));
    const cv::Mat query = test::noisy_capture(products[i], rng);
    const texture::SearchResult want = index.search(texture::extract_features(query, fparams), one);
    const json got = body_of(post_image(c, "/v1/search?digest_candidates=1", query));
    ASSERT_TRUE(got.contains("digested")) << got.dump();
    EXPECT_EQ(got["identified"], want.identified);
    EXPECT_EQ(got["searched"], want.searched);
    EXPECT_EQ(got["digested"], want.digested);
    EXPECT_LE(got["searched"].get<int>(), 3);
    EXPECT_EQ(got["searched"].get<int>() + got["digested"].get<int>(), 9);
    EXPECT_EQ(got["id"], "p" + std::to_string(i)) << got.dump();
    if (want.identified) {
      EXPECT_EQ(got["id"], want.best.id);
    }
    const json exact = body_of(post_image(c, "/v1/search", query));
    EXPECT_EQ(exact["searched"], 9);
    EXPECT_EQ(exact["digested"], 0);
  }
  const std::string good = test::pgm_bytes(products[0]);
  for (const char* bad : {"-1", "many", "100000001", "1.5"}) {
    const httplib::Result r =
        c.Post(("/v1/search?digest_candidates=" + std::string(bad)).c_str(), good, "image/x-portable-graymap");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_EQ(body_of(r)["error"]["field"], "digest_candidates") << bad << " " << r->body;
  }
  const json stats = body_of(c.Get("/v1/stats"));
  EXPECT_GT(stats["shards"][0]["digest_bytes"].get<size_t>(), 0u) << stats.dump();
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("prism_gallery_bytes{shard=\"0\",tier=\"digest\"} " +
                               std::to_string(stats["shards"][0]["digest_bytes"].get<size_t>())),
            std::string::npos)
      << metrics->body;
}

// Poor light: a gallery recording a contrast normalisation is served with it. The API
// extracts every enrolment and query with the gallery's normalisation, so its answers equal an
// index of the same gallery searched with queries extracted as `prism texture search` does; a
// server told another normalisation than the record refuses to start, naming both.
TEST(HttpApi, ExtractsWithTheGalleryNormalisation) {
  const texture::Normalisation clahe = texture::parse_normalisation("clahe-4-8");
  Server server({}, clahe);
  EXPECT_EQ(texture::Gallery::read_normalisation(server.gallery()), clahe);
  httplib::Client c = server.client();
  const std::vector<cv::Mat> products = textures(3, std::random_device{}());
  texture::FeatureParams with;
  with.normalisation = clahe;
  for (size_t i = 0; i < products.size(); ++i) {
    const httplib::Result r = post_image(c, "/v1/products/p" + std::to_string(i), products[i]);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 201) << r->body;
  }
  const texture::Gallery gallery = texture::Gallery::open(server.gallery());
  for (size_t i = 0; i < products.size(); ++i) {  // enrolled exactly as with the normalisation
    const texture::GalleryEntry* e = gallery.find("p" + std::to_string(i));
    ASSERT_NE(e, nullptr);
    const texture::Features want = texture::extract_features(products[i], with);
    EXPECT_EQ(e->features.descriptors, want.descriptors) << i;
    EXPECT_NE(e->features.descriptors, texture::extract_features(products[i]).descriptors) << i;
  }
  texture::TextureIndex index(cpu_index());
  index.build(gallery.entries());
  std::mt19937 rng(11);
  // Dark captures: where the normalisation changes the query's features the most.
  for (size_t i = 0; i < products.size(); ++i) {
    cv::Mat dark;
    test::noisy_capture(products[i], rng).convertTo(dark, -1, 0.3, 0);
    const texture::SearchResult want = index.search(texture::extract_features(dark, with), {});
    const json got = body_of(post_image(c, "/v1/search", dark));
    ASSERT_TRUE(got.contains("candidates")) << got.dump();
    EXPECT_EQ(got["id"], want.best.id) << got.dump();
    EXPECT_EQ(got["candidates"][0]["inliers"], want.best.geometry.inliers) << got.dump();
  }
  LocalOptions other;
  other.gallery = server.gallery();
  other.index = cpu_index();
  other.normalisation = texture::Normalisation{};
  try {  // the server owns its gallery: a second backend on it is refused, whatever it asks
    LocalBackend refused(other);
    ADD_FAILURE() << "a second owner of one gallery was allowed";
  } catch (const texture::GalleryError& e) {
    EXPECT_NE(std::string(e.what()).find("is held by this process already"), std::string::npos) << e.what();
  }
  other.gallery = server.gallery().parent_path() / "copy";
  std::filesystem::copy(server.gallery(), other.gallery, std::filesystem::copy_options::recursive);
  try {
    LocalBackend refused(other);
    ADD_FAILURE() << "a gallery recording clahe-4-8 was opened with none";
  } catch (const texture::GalleryError& e) {
    EXPECT_NE(std::string(e.what()).find("normalisation none"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("records normalisation clahe-4-8"), std::string::npos) << e.what();
  }
}

TEST(HttpApi, WritesAreIdempotentAndDurable) {
  Server server;
  httplib::Client c = server.client();
  const std::vector<cv::Mat> t = textures(2, 11);
  auto status = [](const httplib::Result& r) { return r ? r->status : -1; };
  EXPECT_EQ(status(post_image(c, "/v1/products/a?collection=lot1", t[0])), 201);
  EXPECT_EQ(status(post_image(c, "/v1/products/a?collection=lot1", t[0])), 200);  // the same again: one product
  const json conflict = body_of(post_image(c, "/v1/products/a", t[1]));
  EXPECT_EQ(conflict["error"]["status"], 409) << conflict.dump();
  EXPECT_EQ(conflict["error"]["field"], "id");
  EXPECT_EQ(status(c.Put("/v1/products/missing", test::pgm_bytes(t[1]), "image/x-portable-graymap")), 404);
  const httplib::Result put = c.Put("/v1/products/a", test::pgm_bytes(t[1]), "image/x-portable-graymap");
  ASSERT_EQ(status(put), 200) << (put ? put->body : "");
  EXPECT_EQ(body_of(put)["outcome"], "updated");
  EXPECT_EQ(body_of(put)["product"]["collection"], "lot1");  // kept, as `prism texture update` does
  const json got = body_of(c.Get("/v1/products/a"));
  EXPECT_EQ(got["id"], "a");
  EXPECT_EQ(got["width"], t[1].cols);
  // On disk: a gallery opened afresh has exactly what was acknowledged.
  {
    const texture::Gallery g = texture::Gallery::open(server.gallery());
    ASSERT_EQ(g.entries().size(), 1u);
    EXPECT_EQ(g.entries()[0].collection, "lot1");
  }
  EXPECT_EQ(status(c.Delete("/v1/products/a")), 200);
  EXPECT_EQ(status(c.Delete("/v1/products/a")), 404);
  EXPECT_EQ(status(c.Get("/v1/products/a")), 404);
  EXPECT_TRUE(texture::Gallery::open(server.gallery()).entries().empty());
  const json stats = body_of(c.Get("/v1/stats"));
  EXPECT_EQ(stats["images"], 0) << stats.dump();
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_EQ(status(metrics), 200);
  EXPECT_NE(metrics->body.find("prism_http_requests_total{route=\"enrol\",code=\"409\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("prism_gallery_images{shard=\"0\",tier=\"host\"} 0"), std::string::npos);
}

// A large JPEG upload is decoded reduced in the DCT domain (2560x1920 at 1/2) and its features put
// back in its own pixels: the product's size is the upload's, and a full-size PGM of the same
// image verifies against it with a homography of about the identity.
TEST(HttpApi, ALargeJpegIsDecodedReducedAndDescribedInItsOwnPixels) {
  Server server;
  httplib::Client c = server.client();
  std::mt19937 rng(53);
  cv::Mat big;
  cv::resize(test::random_texture(rng, 1024, 768), big, cv::Size(2560, 1920), 0, 0, cv::INTER_CUBIC);
  std::vector<uint8_t> jpg;
  ASSERT_TRUE(cv::imencode(".jpg", big, jpg, {cv::IMWRITE_JPEG_QUALITY, 92}));
  const httplib::Result r = c.Post("/v1/products/big", std::string(jpg.begin(), jpg.end()), "image/jpeg");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(r->status, 201) << r->body;
  const json got = body_of(c.Get("/v1/products/big"));
  EXPECT_EQ(got["width"], 2560) << got.dump();
  EXPECT_EQ(got["height"], 1920);
  const json v = body_of(post_image(c, "/v1/products/big/verify", big));
  ASSERT_EQ(v["decision"], "accepted") << v.dump();
  ASSERT_EQ(v["homography"].size(), 9u) << v.dump();
  cv::Matx33d h;
  for (int i = 0; i < 9; ++i) h.val[i] = v["homography"][i].get<double>();
  EXPECT_LT(corner_error(h, cv::Matx33d::eye(), 2560, 1920), 3.0) << v.dump();
}

// An entry file put into the gallery behind the server's back (a replica repaired by
// copying entry files, as docs/SERVICE.md describes) made the POST of its id a 500.
TEST(HttpApi, AnEntryFileTheIndexDoesNotHoldIsAConflict) {
  Server server;
  httplib::Client c = server.client();
  std::mt19937 rng(5);
  const std::filesystem::path elsewhere = server.gallery().parent_path() / "elsewhere";
  {
    texture::Gallery g = texture::Gallery::open(elsewhere, /*create=*/true);
    g.add(test::random_gallery_entry("copied", rng, 40));
  }
  std::filesystem::copy_file(elsewhere / "entries" / "copied.tex", server.gallery() / "entries" / "copied.tex");
  const json got = body_of(post_image(c, "/v1/products/copied", textures(1, 12)[0]));
  EXPECT_EQ(got["error"]["status"], 409) << got.dump();
  EXPECT_EQ(got["error"]["field"], "id") << got.dump();
  EXPECT_NE(got["error"]["message"].get<std::string>().find("already enrolled"), std::string::npos) << got.dump();
}

// A damaged entry file made GET a 500 while the pack held a good copy, and lost
// redundancy was silent. It is answered from the pack's copy, the file written again, and counted
// in /v1/stats and /metrics.
TEST(HttpApi, ADamagedEntryFileIsServedFromItsCopyAndCounted) {
  Server server;
  httplib::Client c = server.client();
  ASSERT_EQ(post_image(c, "/v1/products/x", textures(1, 71)[0])->status, 201);
  const std::filesystem::path file = server.gallery() / "entries" / "x.tex";
  const std::string good = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(300);
    f.put(char(good[300] ^ 0x40));
  }
  const json got = body_of(c.Get("/v1/products/x"));
  EXPECT_EQ(got["id"], "x") << got.dump();
  std::ifstream in(file, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), good) << "the entry file was not written again";
  const json stats = body_of(c.Get("/v1/stats"));
  EXPECT_EQ(stats["shards"][0]["copies_repaired"], 1) << stats.dump();
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("prism_gallery_damaged_copies_total{shard=\"0\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("# TYPE prism_gallery_damaged_copies_total counter"), std::string::npos);
}

// Every answered upload says where its time went (latency_ms: queue, decode, extract, match,
// verify, total), and /metrics holds one histogram per route and stage counting exactly those
// requests, in seconds, whose sum is the answers' parts.
TEST(HttpApi, RequestStagesAreTimedInTheAnswerAndInMetrics) {
  Server server;
  httplib::Client c = server.client();
  const std::vector<cv::Mat> t = textures(2, 73);
  ASSERT_EQ(post_image(c, "/v1/products/a", t[0])->status, 201);
  std::map<std::string, double> verify_ms;  // stage -> sum over the verifies
  for (int i = 0; i < 3; ++i) {
    const json v = body_of(post_image(c, "/v1/products/a/verify", t[i % 2]));
    ASSERT_TRUE(v.contains("latency_ms")) << v.dump();
    const json& l = v["latency_ms"];
    for (const char* stage : {"queue", "decode", "extract", "match", "verify", "total"}) {
      ASSERT_TRUE(l.contains(stage) && l[stage].is_number()) << stage << " " << l.dump();
      EXPECT_GE(l[stage].get<double>(), 0.0) << stage;
      verify_ms[stage] += l[stage].get<double>();
    }
    EXPECT_GT(l["decode"].get<double>(), 0.0);
    EXPECT_GT(l["extract"].get<double>(), 0.0);
    EXPECT_LE(l["decode"].get<double>() + l["extract"].get<double>() + l["match"].get<double>(),
              l["total"].get<double>() + 1e-3);
  }
  const json s = body_of(post_image(c, "/v1/search", t[1]));
  for (const char* stage : {"queue", "decode", "extract", "match", "verify", "total"})
    EXPECT_TRUE(s["latency_ms"].contains(stage)) << stage << " " << s.dump();
  const httplib::Result m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("# TYPE prism_http_request_stage_duration_seconds histogram"), std::string::npos);
  const auto metric = [&](const std::string& series) {
    const size_t at = m->body.find(series + " ");
    EXPECT_NE(at, std::string::npos) << series << "\n" << m->body;
    return at == std::string::npos ? -1.0 : std::stod(m->body.substr(at + series.size() + 1));
  };
  for (const char* stage : {"queue", "decode", "extract", "match", "verify"}) {
    const std::string labels = std::string("{route=\"verify\",stage=\"") + stage + "\"}";
    EXPECT_EQ(metric("prism_http_request_stage_duration_seconds_count" + labels), 3.0) << stage;
    EXPECT_NEAR(metric("prism_http_request_stage_duration_seconds_sum" + labels), verify_ms[stage] / 1e3,
                1e-6 + 1e-6 * verify_ms[stage])
        << stage;
  }
  EXPECT_EQ(metric("prism_http_request_stage_duration_seconds_count{route=\"search\",stage=\"decode\"}"), 1.0);
  EXPECT_EQ(metric("prism_http_request_stage_duration_seconds_count{route=\"enrol\",stage=\"extract\"}"), 1.0);
  EXPECT_EQ(m->body.find("stage=\"total\""), std::string::npos) << "the total is the request histogram's";
}

int raw_status(int port, const std::string& request);

TEST(HttpApi, ApiKeysHaveRoles) {
  TempDir dir;
  const std::string file = dir.write("keys",
                                     "# key role name\nreader-key-0123456789 read phone\n"
                                     "writer-key-0123456789 write factory\n");
  ApiOptions o;
  o.keys = load_api_keys(file);
  ASSERT_EQ(o.keys.size(), 2u);
  Server server(o);
  httplib::Client c = server.client();
  const cv::Mat t = textures(1, 5)[0];
  auto status = [](const httplib::Result& r) { return r ? r->status : -1; };
  EXPECT_EQ(status(post_image(c, "/v1/products/k", t)), 401);
  EXPECT_EQ(status(post_image(c, "/v1/products/k", t, {{"Authorization", "Bearer wrong-key-0123456789"}})), 401);
  const json forbidden = body_of(post_image(c, "/v1/products/k", t, {{"X-API-Key", "reader-key-0123456789"}}));
  EXPECT_EQ(forbidden["error"]["status"], 403) << forbidden.dump();
  EXPECT_EQ(status(post_image(c, "/v1/products/k", t, {{"Authorization", "Bearer writer-key-0123456789"}})), 201);
  EXPECT_EQ(status(post_image(c, "/v1/search", t, {{"X-API-Key", "reader-key-0123456789"}})), 200);
  // The scheme in any case; a key with bytes after a NUL is not the key.
  EXPECT_EQ(status(c.Get("/v1/stats", {{"Authorization", "bearer reader-key-0123456789"}})), 200);
  EXPECT_EQ(status(c.Get("/v1/stats", {{"Authorization", "BEARER  reader-key-0123456789"}})), 200);
  // (httplib's client cuts a header at a NUL: sent raw)
  EXPECT_EQ(raw_status(server.port(), std::string("GET /v1/stats HTTP/1.1\r\nHost: x\r\nX-API-Key: "
                                                  "reader-key-0123456789\0junk\r\nConnection: close\r\n\r\n",
                                                  93)),
            400);
  EXPECT_EQ(status(c.Get("/v1/stats", {{"Authorization", "Basic reader-key-0123456789"}})), 401);
  // A photo posted form-encoded (curl's default): 401 without a key, then 415 naming Content-Type.
  const std::string photo(50000, 'x');
  EXPECT_EQ(status(c.Post("/v1/search", photo, "application/x-www-form-urlencoded")), 401);
  EXPECT_EQ(status(c.Post("/v1/search", {{"X-API-Key", "reader-key-0123456789"}}, photo,
                          "application/x-www-form-urlencoded")),
            415);
  EXPECT_EQ(status(c.Get("/v1/stats")), 401);
  EXPECT_EQ(status(c.Get("/healthz")), 200);  // health and metrics need no key
  EXPECT_EQ(body_of(c.Get("/v1/products/k", {{"X-API-Key", "reader-key-0123456789"}}))["source"], "http:factory");
}

TEST(HttpApi, KeyFileErrorsNameTheLine) {
  TempDir dir;
  auto error_of = [&](const std::string& text) {
    try {
      load_api_keys(dir.write("keys", text));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("short read\n").find("keys:1: a key is 16..256"), std::string::npos);
  EXPECT_NE(error_of("# c\nabcdefghijklmnopq admin\n").find("keys:2: the key's role"), std::string::npos);
  EXPECT_NE(error_of("abcdefghijklmnopq read a b\n").find("keys:1: expected KEY ROLE [NAME]"), std::string::npos);
  EXPECT_NE(error_of("abcdefghijklmnopq read\nabcdefghijklmnopq write\n").find("keys:2: this key is listed twice"),
            std::string::npos);
  // Found by fuzz_service_inputs: a NUL byte passed as a key character.
  EXPECT_NE(error_of(std::string("abcdefgh") + '\0' + "ijklmnopq read\n").find("keys:1: a key is 16..256"),
            std::string::npos);
  EXPECT_NE(error_of("# nothing\n").find("no keys"), std::string::npos);
  EXPECT_THROW(load_api_keys(dir.file("absent")), std::runtime_error);
}

struct BadRequest {
  std::string name, method, path, body, content_type;
  int status;
  std::string field;  // what the error names (null: "")
};

// Memory per request grows with the pixels, not the bytes. A budget admits decodes
// from their headers: what does not fit waits up to its deadline, then is 503 with Retry-After
// (the load's fault, never a 4xx blaming a valid image).
TEST(DecodeBudget, AdmitsWhatFitsAndRefusesAtTheDeadline) {
  DecodeBudget budget(100);
  const auto soon = [](int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); };
  std::optional<DecodeBudget::Lease> a(budget.admit(60, soon(1000)));
  EXPECT_EQ(budget.in_use(), 60u);
  try {
    budget.admit(60, soon(50));
    ADD_FAILURE() << "admitted 60 beside 60 of 100";
  } catch (const ServiceError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_EQ(e.retry_after_s, 1);
    EXPECT_NE(std::string(e.what()).find("busy"), std::string::npos) << e.what();
  }
  // Waiting, it gets in once the first is done.
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.reset();
  });
  { const DecodeBudget::Lease b = budget.admit(60, soon(10000)); }
  release.join();
  EXPECT_EQ(budget.in_use(), 0u);
  // Larger than the whole budget: admitted alone.
  { const DecodeBudget::Lease big = budget.admit(1000, soon(10)); }
  EXPECT_EQ(budget.in_use(), 0u);
}

uint64_t peak_rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (status >> key)
    if (key == "VmHWM:" && (status >> kb)) return kb;
  return 0;
}

// The flood, smaller: a 16-bit RGBA PNG of a few hundred KB that decodes to millions of
// pixels, sent by 12 clients at once. Every answer is the image's (200) or 503 busy with a
// Retry-After, and the server's peak memory stays near the budget, not 12 decodes' worth.
TEST(HttpApi, AFloodOfLargeImagesIsAdmittedAgainstTheDecodeMemory) {
  ApiOptions o;
  o.decode_memory_bytes = 300u << 20;  // room for one 2500x2500 image (12.5 MB + 246 MB) at a time
  o.threads = 16;
  Server server(o);
  cv::Mat image(2500, 2500, CV_16UC4);
  std::mt19937 rng(9);
  for (int y = 0; y < image.rows; ++y)
    for (int x = 0; x < image.cols; ++x) {
      const uint16_t v = uint16_t(((x / 50 + y / 50) % 2) * 40000 + (x * 7 + y * 3) % 9000);
      image.at<cv::Vec4w>(y, x) = cv::Vec4w(v, uint16_t(v / 2), uint16_t(65535 - v), 65535);
    }
  std::vector<uint8_t> png;
  ASSERT_TRUE(cv::imencode(".png", image, png, {cv::IMWRITE_PNG_COMPRESSION, 9}));
  const std::string body(png.begin(), png.end());
  const uint64_t before = peak_rss_kb();
  std::vector<std::thread> clients;
  std::mutex m;
  std::vector<std::pair<int, std::string>> answers;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c = server.client();
      c.set_read_timeout(std::chrono::seconds(120));
      // Half with a deadline too short to wait its turn: those may be refused, busy.
      const std::string path = i % 2 ? "/v1/search?deadline_ms=60000" : "/v1/search?deadline_ms=200";
      const httplib::Result r = c.Post(path.c_str(), body, "image/png");
      std::lock_guard<std::mutex> g(m);
      answers.emplace_back(r ? r->status : -1, r ? r->body + " Retry-After: " + r->get_header_value("Retry-After")
                                                 : httplib::to_string(r.error()));
    });
  for (std::thread& t : clients) t.join();
  const uint64_t grown_mb = (peak_rss_kb() - before) / 1024;
  int ok = 0, busy = 0;
  for (const auto& [status, text] : answers) {
    if (status == 200)
      ++ok;
    else if (status == 503 && text.find("Retry-After: 1") != std::string::npos &&
             (text.find("busy") != std::string::npos || text.find("deadline passed") != std::string::npos))
      ++busy;
    else
      ADD_FAILURE() << status << " " << text.substr(0, 400);
  }
  EXPECT_GE(ok, 6) << "every client that could wait was answered";
  std::printf("flood of 12 x %zu KB PNGs of 2500x2500: %d answered, %d busy (503); peak memory grew %llu MB\n",
              body.size() >> 10, ok, busy, (unsigned long long)grown_mb);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // (their shadow memory)
  // One image at a time: its decode holds 12.5 MB and cv::SIFT's pyramids of its 1024 x 1024
  // detection image about 245 MB (measured: 245 MB for one request alone). Without the budget
  // two at once took 465 MB, twelve 1,221 MB.
  EXPECT_LT(grown_mb, 400u);
#endif
}

TEST(HttpApi, BadRequestsGetAFourHundredNamingTheField) {
  ApiOptions o;
  o.max_body_bytes = 2 << 20;
  o.max_image_pixels = 4'000'000;
  Server server(o);
  httplib::Client c = server.client();
  const cv::Mat t = textures(1, 3)[0];
  ASSERT_EQ(post_image(c, "/v1/products/known", t)->status, 201);
  const std::string good = test::pgm_bytes(t);
  const std::string png_header = std::string("\x89PNG\r\n\x1a\n", 8);
  // A PNG header declaring 100000 x 100000 (the size is checked before any pixel is decoded).
  static const char ihdr[] = "\0\0\0\x0dIHDR\0\x01\x86\xa0\0\x01\x86\xa0\x08\x00\0\0\0";                // 21 bytes
  const std::string huge_png = png_header + std::string(ihdr, sizeof ihdr - 1) + std::string(4, '\0');  // bad CRC
  const std::vector<BadRequest> cases = {
      // Formats by allowlist, decided from the bytes: 415 naming what they are.
      {"garbage image", "POST", "/v1/products/x", "not an image at all", "image/png", 415, "image"},
      {"SVG image", "POST", "/v1/search",
       "<svg xmlns='http://www.w3.org/2000/svg' width='7000' height='7000'><filter id='b'><feGaussianBlur "
       "stdDeviation='800'/></filter><rect width='7000' height='7000' filter='url(#b)'/></svg>",
       "image/svg+xml", 415, "image"},
      {"GIF image", "POST", "/v1/search", std::string("GIF89a\x01\0\x01\0\0\0\0;", 14), "image/gif", 415, "image"},
      {"TIFF image", "POST", "/v1/search", std::string("II*\0\x08\0\0\0", 8), "image/tiff", 415, "image"},
      {"OpenEXR image", "POST", "/v1/search", std::string("v/1\x01\x02\0\0\0", 8), "image/x-exr", 415, "image"},
      {"plain PNM", "POST", "/v1/search", "P2\n2 2\n255\n0 1 2 3\n", "image/x-portable-graymap", 415, "image"},
      {"truncated image", "POST", "/v1/products/x", good.substr(0, good.size() / 3), "image/x-portable-graymap", 400,
       "image"},
      {"empty image", "POST", "/v1/search", "", "image/png", 400, "image"},
      {"image too large", "POST", "/v1/search", huge_png, "image/png", 413, "image"},
      {"body over the limit", "POST", "/v1/search", std::string(3 << 20, 'x'), "image/png", 413, "body"},
      {"a 2049x1 image", "POST", "/v1/products/x", "P5 2049 1 255\n" + std::string(2049, '\x80'),
       "image/x-portable-graymap", 422, "image"},
      {"a 1x3000 image", "POST", "/v1/products/x", "P5 1 3000 255\n" + std::string(3000, '\x10'),
       "image/x-portable-graymap", 422, "image"},
      {"blank image", "POST", "/v1/products/x", test::pgm_bytes(cv::Mat(240, 320, CV_8U, cv::Scalar(128))),
       "image/x-portable-graymap", 422, "image"},
      {"wrong content type", "POST", "/v1/search", good, "text/plain", 415, "Content-Type"},
      {"form body", "POST", "/v1/search", "top_k=3", "application/x-www-form-urlencoded", 415, "Content-Type"},
      // curl --data-binary @photo.jpg without -H: once 413 "larger than the limit", now 415.
      {"a photo sent form-encoded", "POST", "/v1/search", good + std::string(50000, 'x'),
       "application/x-www-form-urlencoded", 415, "Content-Type"},
      {"malformed JSON", "POST", "/v1/search", "{\"image\": \"abc", "application/json", 400, "body"},
      {"JSON not an object", "POST", "/v1/search", "[1,2]", "application/json", 400, "body"},
      {"JSON image not base64", "POST", "/v1/search", "{\"image\": \"***\"}", "application/json", 400, "image"},
      {"JSON without image", "POST", "/v1/search", "{\"top_k\": 3}", "application/json", 400, "image"},
      {"JSON member twice", "POST", "/v1/search", "{\"image\": \"" + base64(good) + "\", \"top_k\": 1, \"top_k\": 3}",
       "application/json", 400, "top_k"},
      {"JSON top_k not a number", "POST", "/v1/search", "{\"image\": \"" + base64(good) + "\", \"top_k\": [3]}",
       "application/json", 400, "top_k"},
      {"top_k not a number", "POST", "/v1/search?top_k=many", good, "image/x-portable-graymap", 400, "top_k"},
      {"top_k zero", "POST", "/v1/search?top_k=0", good, "image/x-portable-graymap", 400, "top_k"},
      {"threshold negative", "POST", "/v1/search?threshold=-1", good, "image/x-portable-graymap", 400, "threshold"},
      {"min_significance negative", "POST", "/v1/search?min_significance=-1", good, "image/x-portable-graymap", 400,
       "min_significance"},
      {"threshold and min_significance disagree", "POST", "/v1/search?min_significance=3&threshold=4", good,
       "image/x-portable-graymap", 400, "threshold"},
      {"collection name", "POST", "/v1/search?collections=a,b%20c", good, "image/x-portable-graymap", 400,
       "collections"},
      {"allow_partial", "POST", "/v1/search?allow_partial=maybe", good, "image/x-portable-graymap", 400,
       "allow_partial"},
      {"deadline zero", "POST", "/v1/search?deadline_ms=0", good, "image/x-portable-graymap", 400, "deadline_ms"},
      {"unknown parameter", "POST", "/v1/search?topk=3", good, "image/x-portable-graymap", 400, "topk"},
      {"parameter twice", "POST", "/v1/search?top_k=1&top_k=2", good, "image/x-portable-graymap", 400, "top_k"},
      {"bad product id", "POST", "/v1/products/.hidden", good, "image/x-portable-graymap", 400, "id"},
      {"id too long", "GET", "/v1/products/" + std::string(200, 'a'), "", "", 400, "id"},
      {"empty id", "GET", "/v1/products/", "", "", 400, "id"},
      {"verify unknown id", "POST", "/v1/products/nobody/verify", good, "image/x-portable-graymap", 404, "id"},
      {"delete unknown id", "DELETE", "/v1/products/nobody", "", "", 404, "id"},
      {"get unknown id", "GET", "/v1/products/nobody", "", "", 404, "id"},
      {"enrol collection", "POST", "/v1/products/x?collection=-bad", good, "image/x-portable-graymap", 400,
       "collection"},
      {"multipart without image", "POST", "/v1/search", "", "multipart", 400, "image"},
      {"unknown route", "GET", "/v2/everything", "", "", 404, "path"},
      // Found by tests/fuzz/fuzz_http.cpp: the error quoted the path, and JSON text of invalid UTF-8 threw.
      {"a path that is not UTF-8", "GET", "/v1/prod\x9d\x8b", "", "", 404, "path"},
      {"a parameter that is not UTF-8", "POST", "/v1/search?top_k=\xff", good, "image/x-portable-graymap", 400,
       "top_k"},
  };
  for (const BadRequest& bc : cases) {
    SCOPED_TRACE(bc.name);
    const httplib::Result r = [&] {
      if (bc.content_type == "multipart")
        return c.Post(bc.path.c_str(), httplib::MultipartFormDataItems{{"top_k", "3", "", ""}});
      if (bc.method == "POST") return c.Post(bc.path.c_str(), bc.body, bc.content_type.c_str());
      if (bc.method == "GET") return c.Get(bc.path.c_str());
      return c.Delete(bc.path.c_str());
    }();
    if (!r && bc.status == 413) {
      // The server may close the connection on an oversized body before the client has sent it all.
      SUCCEED();
    } else {
      ASSERT_TRUE(r) << httplib::to_string(r.error());
      EXPECT_EQ(r->status, bc.status) << r->body;
      const json e = body_of(r);
      ASSERT_TRUE(e.contains("error")) << r->body;
      EXPECT_EQ(e["error"]["field"], bc.field) << r->body;
      EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
    }
    const httplib::Result health = c.Get("/healthz");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
  }
  // Nothing above was enrolled.
  EXPECT_EQ(body_of(c.Get("/v1/stats"))["images"], 1);
}

// 3 CPU shard workers and a front through a real redis-server, with `kProducts` random textures
// enrolled through HTTP (each also written as NAME.pgm, listed in list.txt for `prism texture
// enroll`), and photos of 20 of them and of 5 textures never enrolled. The workers keep digests
// (256 rows: 3 products a digest slot). Built by each test that uses it (each test is its own
// process under ctest).
//
// 90 products, not the 300 of the check: under AddressSanitizer on CI's 2 cores every
// search matches each query against every product (the CLI's and the shards'), and at 300 the one
// test took 197-220 of its 300 s. 90 still spread over all 3 shards (about 30 each, in about 10
// digest slots; the test checks that each shard holds some), so a search still merges 3 shards'
// candidates against a gallery size that is not any one shard's, and the 2 digest slots re-matched
// per shard (at most 18 products) are still a small part of the 90.
struct ThreeShards {
  static constexpr int kProducts = 90;

  TempDir dir;
  test::RedisServer redis{dir.path() / "redis"};
  std::vector<std::unique_ptr<test_support::Worker>> workers;
  std::optional<ShardedBackend> front;
  std::optional<ApiServer> server;
  std::mt19937 rng{std::random_device{}()};
  std::vector<cv::Mat> textures;
  std::vector<std::string> queries;  // the photos' files
  std::vector<int> truth;            // each photo's product, -1 for a texture never enrolled

  // Call with ASSERT_NO_FATAL_FAILURE.
  void start_and_enrol() {
    gst_init(nullptr, nullptr);
    redis.start();
    for (int k = 0; k < 3; ++k) {
      ShardWorkerOptions wo =
          test_support::Worker::options(redis.url(), k, 3, "r", dir.path() / ("shard" + std::to_string(k)));
      wo.local.index.host_digest_rows = 256;
      workers.push_back(std::make_unique<test_support::Worker>(wo));
    }
    front.emplace(test_support::front_options(redis.url(), 3));
    server.emplace(*front, ApiOptions{});
    httplib::Client c = client();
    std::string list;
    for (int i = 0; i < kProducts; ++i) {
      textures.push_back(test::random_texture(rng, 200, 150));
      const std::string id = "t" + std::to_string(i), file = dir.file(id + ".pgm");
      std::ofstream(file, std::ios::binary) << test::pgm_bytes(textures.back());
      list += id + " " + file + "\n";
      const httplib::Result r = post_image(c, "/v1/products/" + id, textures.back());
      ASSERT_TRUE(r && r->status == 201) << id << ": " << (r ? r->body : httplib::to_string(r.error()));
    }
    std::ofstream(dir.file("list.txt")) << list;
    for (int q = 0; q < 25; ++q) {
      const int product = q < 20 ? int(rng() % textures.size()) : -1;
      const cv::Mat photo =
          test::noisy_capture(product >= 0 ? textures[size_t(product)] : test::random_texture(rng, 200, 150), rng);
      queries.push_back(dir.file("q" + std::to_string(q) + ".pgm"));
      std::ofstream(queries.back(), std::ios::binary) << test::pgm_bytes(photo);
      truth.push_back(product);
    }
  }
  httplib::Client client() const { return server->client(true); }
  static std::string bytes_of(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  ~ThreeShards() {
    for (auto& w : workers) EXPECT_EQ(w->error(), "");
  }
};

// The end-to-end check: 3 CPU shard workers and a front through a real redis-server, the
// products enrolled through HTTP; every search and verify answer equals what the single-gallery CLI
// (`prism texture search|verify --json`) answers for a gallery enrolled from the same images.
TEST(HttpApi, ThreeShardsThroughHttpAnswerAsTheSingleGalleryCli) {
  PRISM_NEED_REDIS();
  ThreeShards s;
  ASSERT_NO_FATAL_FAILURE(s.start_and_enrol());
  const int n = ThreeShards::kProducts;
  httplib::Client c = s.client();
  TempDir& dir = s.dir;
  const std::string exe = std::string("'") + PRISM_EXE + "' texture ";
  const std::string one = " --gallery '" + dir.file("one") + "' --device cpu --json";
  std::string out;
  ASSERT_EQ(test::run_command(exe + "enroll" + one + " --list '" + dir.file("list.txt") + "' 2>&1", out), 0) << out;
  const json stats = body_of(c.Get("/v1/stats"));
  EXPECT_EQ(stats["images"], n) << stats.dump();
  ASSERT_EQ(stats["shards"].size(), 3u);
  for (const json& sh : stats["shards"]) {  // each shard's one replica has applied every write
    ASSERT_EQ(sh["replicas"].size(), 1u) << stats.dump();
    EXPECT_EQ(sh["replicas"][0]["replica"], "r");
    EXPECT_EQ(sh["replicas"][0]["pending"], 0);
    EXPECT_EQ(sh["replicas"][0]["lag"], 0);
    EXPECT_EQ(sh["replicas"][0]["failing"], nullptr);
    EXPECT_EQ(sh["replicas"][0]["divergent"], 0);  // no sibling to differ from (replica repair)
    EXPECT_EQ(sh["replicas"][0]["repaired"], 0);
    EXPECT_GT(sh["images"].get<int>(), 0) << "every shard holds some of the products: " << stats.dump();
  }
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("prism_replica_pending_writes{shard=\"2\",replica=\"r\"} 0\n"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("prism_replica_repaired_entries_total{shard=\"2\",replica=\"r\"} 0\n"),
            std::string::npos)
      << metrics->body;

  // Photos of 20 products and of 5 textures never enrolled.
  const std::vector<std::string>& files = s.queries;
  const std::vector<int>& truth = s.truth;
  std::string quoted;
  for (const std::string& f : files) quoted += " '" + f + "'";
  // stdout alone: run_command adds 2>&1 after the command, so its stderr is closed in a subshell (under
  // the sanitizers LeakSanitizer's own failures at exit, "Tracer caught signal 11", land there).
  const int rc = test::run_command("(" + exe + "search" + one + " --top 3" + quoted + " 2>/dev/null)", out);
  ASSERT_TRUE(rc == 0 || rc == 1) << out;
  std::istringstream lines(out);
  int identified = 0;
  for (size_t q = 0; q < files.size(); ++q) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << out;
    const json cli = json::parse(line);
    const std::string bytes = ThreeShards::bytes_of(files[q]);
    // The requests may take their time (this test runs under the sanitizers on two busy cores too):
    // a 503 at the default 10 s deadline is not what it tests.
    const json http = body_of(c.Post("/v1/search?top_k=3&deadline_ms=120000", bytes, "image/x-portable-graymap"));
    SCOPED_TRACE("query " + std::to_string(q) + ": CLI " + line + "\nHTTP " + http.dump());
    ASSERT_TRUE(http.contains("identified") && http.contains("candidates")) << http.dump();
    ASSERT_EQ(http["identified"], cli["identified"]);
    EXPECT_EQ(http["searched"], n);
    EXPECT_EQ(http["digested"], 0);
    EXPECT_EQ(http["shards_answered"], 3);
    ASSERT_EQ(http["candidates"].size(), cli["candidates"].size());
    for (size_t i = 0; i < cli["candidates"].size(); ++i) {
      EXPECT_EQ(http["candidates"][i]["id"], cli["candidates"][i]["id"]);
      EXPECT_EQ(http["candidates"][i]["inliers"], cli["candidates"][i]["inliers"]);
      EXPECT_NEAR(http["candidates"][i]["significance"].get<double>(),
                  cli["candidates"][i]["significance"].get<double>(),
                  1e-5 * std::max(1.0, std::abs(cli["candidates"][i]["significance"].get<double>())));
    }
    if (cli["identified"] == true) {
      EXPECT_EQ(http["id"], cli["id"]);
      identified += truth[q] >= 0 && http["id"] == "t" + std::to_string(truth[q]);
    }
    if (q % 5 != 0) continue;
    // 1:1 against the true product (or any, for a texture never enrolled) and against another.
    for (int other = 0; other < 2; ++other) {
      const int claimed = (truth[q] >= 0 ? truth[q] : 0) + other * 7;
      const std::string id = "t" + std::to_string(claimed % n);
      std::string v;
      const int vrc =
          test::run_command("(" + exe + "verify" + one + " --id " + id + " '" + files[q] + "' 2>/dev/null)", v);
      ASSERT_TRUE(vrc == 0 || vrc == 1) << v;
      const json cv = json::parse(v);
      const json hv = body_of(
          c.Post(("/v1/products/" + id + "/verify?deadline_ms=120000").c_str(), bytes, "image/x-portable-graymap"));
      ASSERT_TRUE(hv.contains("decision")) << hv.dump();
      EXPECT_EQ(hv["decision"] == "accepted", cv["identified"].get<bool>()) << id << " " << v << hv.dump();
      EXPECT_EQ(hv["inliers"], cv["inliers"]) << id;
      EXPECT_NEAR(hv["significance"].get<double>(), cv["significance"].get<double>(),
                  1e-5 * std::max(1.0, std::abs(cv["significance"].get<double>())));
    }
  }
  EXPECT_GE(identified, 18) << "of 20 photos of enrolled products";
}

// The same deployment searched through the digests (once one test with the one above: apart, each
// is far from its limit under AddressSanitizer): each shard re-matches only the products of its 2
// best digest slots, the others are counted as digested, and the photos of enrolled products are
// still identified.
TEST(HttpApi, ThreeShardsThroughHttpSearchTheDigestsOfEachShard) {
  PRISM_NEED_REDIS();
  ThreeShards s;
  ASSERT_NO_FATAL_FAILURE(s.start_and_enrol());
  httplib::Client c = s.client();
  int digest_identified = 0;
  for (size_t q = 0; q < s.queries.size(); ++q) {
    SCOPED_TRACE("query " + std::to_string(q));
    const json digest = body_of(c.Post("/v1/search?top_k=3&digest_candidates=2&deadline_ms=120000",
                                       ThreeShards::bytes_of(s.queries[q]), "image/x-portable-graymap"));
    ASSERT_TRUE(digest.contains("searched") && digest.contains("digested")) << digest.dump();
    EXPECT_EQ(digest["searched"].get<int>() + digest["digested"].get<int>(), ThreeShards::kProducts) << digest.dump();
    EXPECT_LE(digest["searched"].get<int>(), 3 * 2 * 3) << digest.dump();
    EXPECT_EQ(digest["shards_answered"], 3) << digest.dump();
    if (s.truth[q] >= 0) digest_identified += digest["id"] == "t" + std::to_string(s.truth[q]);
  }
  EXPECT_GE(digest_identified, 18) << "of 20 photos of enrolled products, through the digests";
}

// A front started before any worker: until prism:normalise is set it cannot know how the
// gallery's images are extracted, so it refuses enrolments, updates, verifies and searches with 503
// and a Retry-After, sending nothing to the shards (an image extracted with a guess would be
// enrolled into, or searched in, a CLAHE shard with unnormalised features: silently worse). Gets,
// deletes and stats extract nothing and are not held back. Once a clahe-4-8 worker has started,
// the same enrolment succeeds and stores the normalised features.
TEST(HttpApi, AShardedFrontExtractsNothingUntilAWorkerAnnouncesTheNormalisation) {
  PRISM_NEED_REDIS();
  gst_init(nullptr, nullptr);
  TempDir dir;
  test::RedisServer redis(dir.path() / "redis");
  ShardedBackend front(test_support::front_options(redis.url(), 1));
  ApiServer server(front, {});
  httplib::Client c = server.client();
  const std::vector<cv::Mat> images = textures(1, 23);
  const std::string image = test::pgm_bytes(images[0]), type = "image/x-portable-graymap";
  auto expect_refused = [&](const httplib::Result& r, const std::string& what) {
    ASSERT_TRUE(r) << what << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 503) << what << ": " << r->body;
    EXPECT_NE(r->body.find("no shard worker has announced the gallery's contrast normalisation yet"), std::string::npos)
        << what << ": " << r->body;
    EXPECT_NE(r->body.find("prism:normalise is not set at " + redis.url()), std::string::npos) << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), std::to_string(ShardedBackend::kNormalisationRetryAfterSeconds))
        << what;
  };
  expect_refused(c.Post("/v1/products/p0", image, type.c_str()), "enrol");
  expect_refused(c.Put("/v1/products/p0", image, type.c_str()), "update");
  expect_refused(c.Post("/v1/products/p0/verify", image, type.c_str()), "verify");
  expect_refused(c.Post("/v1/search", image, type.c_str()), "search");
  Redis r(redis.url());
  EXPECT_EQ(r.command({"XLEN", shard::writes_key(0)}).integer, 0) << "a refused write reached the shard";
  EXPECT_EQ(r.command({"XLEN", shard::reads_key(0)}).integer, 0) << "a refused read reached the shard";
  // With no worker these wait for their shard like any read or write, and time out saying so.
  for (const httplib::Result& got :
       {c.Get("/v1/products/p0?deadline_ms=300"), c.Delete("/v1/products/gone?deadline_ms=300")}) {
    ASSERT_TRUE(got) << httplib::to_string(got.error());
    EXPECT_EQ(got->status, 503) << got->body;
    EXPECT_NE(got->body.find("shard 0 did not answer"), std::string::npos) << got->body;
  }
  const json stats = body_of(c.Get("/v1/stats?deadline_ms=300"));
  EXPECT_EQ(stats["shards_expected"], 1) << stats.dump();
  ASSERT_EQ(stats["shards"].size(), 1u) << stats.dump();  // every expected shard, answered or not
  EXPECT_EQ(stats["shards"][0]["answered"], false) << stats.dump();
  EXPECT_EQ(stats["shards"][0]["replicas"], json::array()) << stats.dump();

  const texture::Normalisation clahe = texture::parse_normalisation("clahe-4-8");
  ShardWorkerOptions wo = test_support::Worker::options(redis.url(), 0, 1, "w", dir.path() / "shard0");
  wo.local.normalisation = clahe;
  test_support::Worker worker(wo);
  ASSERT_EQ(test_support::health_when_live(front), "");
  const httplib::Result enrolled = c.Post("/v1/products/p0", image, type.c_str());
  ASSERT_TRUE(enrolled) << httplib::to_string(enrolled.error());
  ASSERT_EQ(enrolled->status, 201) << enrolled->body;
  EXPECT_EQ(worker.error(), "");
  texture::FeatureParams with;
  with.normalisation = clahe;
  const texture::Gallery gallery = texture::Gallery::open(dir.path() / "shard0");
  EXPECT_EQ(gallery.normalisation(), clahe);
  const texture::GalleryEntry* e = gallery.find("p0");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->features.descriptors, texture::extract_features(images[0], with).descriptors);
  EXPECT_NE(e->features.descriptors, texture::extract_features(images[0]).descriptors);
  const json found = body_of(c.Post("/v1/search", test::pgm_bytes(images[0]), type.c_str()));
  EXPECT_EQ(found["id"], "p0") << found.dump();
}

// The status of the raw `request` sent to 127.0.0.1:port (0: no answer within 5 s).
int raw_status(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (answer.find("\r\n") == std::string::npos && ::poll(&p, 1, 5000) > 0) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, size_t(n));
  }
  ::close(fd);
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(answer.c_str() + 9) : 0;
}

// cpp-httplib checks its body limit against Content-Length only and inflates compressed bodies:
// a chunked or gzip body could grow without bound, so both are refused before any body is read.
TEST(HttpApi, BodiesMustSayTheirLengthAndComeUncompressed) {
  ApiOptions o;
  o.max_body_bytes = 1 << 20;
  Server server(o);
  const int port = server.port();
  EXPECT_EQ(raw_status(port,
                       "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"),
            411);
  EXPECT_EQ(raw_status(port,
                       "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                       "Content-Encoding: gzip\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd"),
            415);
  EXPECT_EQ(raw_status(port,
                       "PUT /v1/products/a HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                       "Connection: close\r\n\r\n"),
            411);
  // A Content-Length that is no number (413 after 5 s before), and two that differ
  // (the first was used: a smuggling primitive behind a proxy that reads the other), are 400.
  EXPECT_EQ(raw_status(port,
                       "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                       "Content-Length: -1\r\nConnection: close\r\n\r\nabcd"),
            400);
  EXPECT_EQ(raw_status(port,
                       "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                       "Content-Length: 4\r\nContent-Length: 40\r\nConnection: close\r\n\r\nabcd"),
            400);
  EXPECT_EQ(raw_status(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200);
}

// Searches waiting on their shards took every thread, and /healthz and gets waited
// behind them. Beyond threads - reserved_threads slow requests (enrol, update, verify, search) the
// next is 503 at once with Retry-After, and gets and health are still answered.
class BlockingSearches : public Backend {
 public:
  WriteResult write(const texture::GalleryEntry&, bool, Clock::time_point) override { return {}; }
  bool remove(const std::string&, Clock::time_point) override { return false; }
  std::optional<Product> get(const std::string&, Clock::time_point) override { return std::nullopt; }
  VerifyAnswer verify(const std::string&, const texture::Features&, const texture::SearchParams&,
                      Clock::time_point) override {
    throw ServiceError(404, "id", "no such product");
  }
  SearchAnswer search(const SearchQuery&) override {
    std::unique_lock lock(mutex_);
    ++waiting_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return released_; });
    return {};
  }
  ServiceStats stats(Clock::time_point) override { return {}; }
  std::string health() override { return {}; }
  texture::Normalisation normalisation() override { return {}; }
  bool wait_for(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return waiting_ >= n; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int waiting_ = 0;
  bool released_ = false;
};

TEST(HttpApi, SlowRequestsLeaveThreadsForGetsAndHealth) {
  gst_init(nullptr, nullptr);
  BlockingSearches backend;
  ApiOptions options;
  options.threads = 6;
  options.reserved_threads = 2;
  ApiServer server(backend, options);
  const std::string image = test::pgm_bytes(textures(1, 31)[0]);
  std::vector<std::thread> searches;
  std::vector<int> statuses(4, 0);
  for (int i = 0; i < 4; ++i)
    searches.emplace_back([&, i] {
      httplib::Client c = server.client();
      const httplib::Result r = c.Post("/v1/search", image, "image/x-portable-graymap");
      statuses[size_t(i)] = r ? r->status : -1;
    });
  ASSERT_TRUE(backend.wait_for(4)) << "the 4 searches did not reach the backend";
  httplib::Client c = server.client();
  const httplib::Result busy = c.Post("/v1/search", image, "image/x-portable-graymap");
  ASSERT_TRUE(busy) << httplib::to_string(busy.error());
  EXPECT_EQ(busy->status, 503) << busy->body;
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_NE(busy->body.find("busy: 4 enrolments, updates, verifies and searches are running"), std::string::npos)
      << busy->body;
  const httplib::Result health = c.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200) << health->body;
  const httplib::Result get = c.Get("/v1/products/absent");
  ASSERT_TRUE(get) << httplib::to_string(get.error());
  EXPECT_EQ(get->status, 404) << get->body;
  backend.release();
  for (std::thread& t : searches) t.join();
  EXPECT_EQ(statuses, std::vector<int>(4, 200));
  // The slots came back: a search runs again.
  const httplib::Result again = c.Post("/v1/search", image, "image/x-portable-graymap");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

// A client that gave up (closed its connection) kept its request waiting on the shards
// until the deadline, holding a thread. Now the front stops waiting at its next liveness check
// (499 in the metrics), and the slots come back.
TEST(HttpApi, AClientThatClosesItsConnectionStopsTheWait) {
  PRISM_NEED_REDIS();
  gst_init(nullptr, nullptr);
  TempDir dir;
  test::RedisServer redis(dir.path() / "redis");
  std::mutex m;
  std::condition_variable cv;
  bool released = false;
  ShardWorkerOptions wo = test_support::Worker::options(redis.url(), 0, 1, "w", dir.path() / "shard0");
  wo.before_answer = [&](const std::string& op) {
    if (op != "search") return;
    std::unique_lock lock(m);
    cv.wait_for(lock, std::chrono::seconds(120), [&] { return released; });
  };
  test_support::Worker worker(wo);
  ShardedBackend front(test_support::front_options(redis.url(), 1));
  ASSERT_EQ(test_support::health_when_live(front), "");
  ApiOptions options;
  options.threads = 6;
  options.reserved_threads = 2;  // 4 slow slots
  ApiServer server(front, options);
  const std::string image = test::pgm_bytes(textures(1, 41)[0]), type = "image/x-portable-graymap";
  std::vector<std::thread> quitters;
  for (int i = 0; i < 4; ++i)
    quitters.emplace_back([&] {
      httplib::Client c = server.client();
      c.set_read_timeout(std::chrono::seconds(1));  // gives up long before the 60 s deadline
      EXPECT_FALSE(c.Post("/v1/search?deadline_ms=60000", image, type.c_str()));
    });
  for (std::thread& t : quitters) t.join();
  // Bounded wait (not a timing assertion): each wait ends at its next liveness check, within a
  // second or two; before, the four held their slots for the whole minute.
  httplib::Client c = server.client();
  std::string last;
  for (int i = 0; i < 100; ++i) {
    const httplib::Result r = c.Post("/v1/search?deadline_ms=300", image, type.c_str());
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    last = r->body;
    if (last.find("busy: ") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(last.find("busy: "), std::string::npos) << last;
  const httplib::Result metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("prism_http_requests_total{route=\"search\",code=\"499\"} 4"), std::string::npos)
      << metrics->body;
  {
    std::lock_guard lock(m);
    released = true;
  }
  cv.notify_all();
  EXPECT_EQ(worker.error(), "");
}

TEST(HttpApi, ThirtyTwoConcurrentClientsForAFixedTime) {
  Server server;
  const std::vector<cv::Mat> products = textures(4, 21);
  {
    httplib::Client c = server.client();
    for (size_t i = 0; i < products.size(); ++i)
      ASSERT_EQ(post_image(c, "/v1/products/q" + std::to_string(i), products[i])->status, 201);
  }
  std::vector<std::string> queries;
  std::mt19937 rng(3);
  for (const cv::Mat& p : products) queries.push_back(test::pgm_bytes(test::noisy_capture(p, rng)));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  std::atomic<int> errors{0}, wrong{0}, shed{0};
  std::vector<std::vector<double>> latency(32);
  std::vector<std::thread> clients;
  for (int k = 0; k < 32; ++k) {
    clients.emplace_back([&, k] {
      httplib::Client c = server.client(k % 2 == 0);  // half of them a connection per request
      // Every client has at least one search answered, however slow the machine. Beyond the
      // server's 12 slow slots (16 threads, 4 reserved) a search is shed: 503 busy with a
      // Retry-After, which this client honours, as a client should.
      bool answered = false;
      for (int n = 0; !answered || std::chrono::steady_clock::now() < until; ++n) {
        const size_t q = size_t(k + n) % queries.size();
        const auto t0 = std::chrono::steady_clock::now();
        const httplib::Result r = c.Post("/v1/search", queries[q], "image/x-portable-graymap");
        if (r && r->status == 503 && r->body.find("\"busy: ") != std::string::npos &&
            r->get_header_value("Retry-After") == "1") {
          ++shed;
          std::this_thread::sleep_for(std::chrono::seconds(1));
          continue;
        }
        latency[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        answered = true;
        if (!r || r->status != 200) {
          if (++errors <= 3)
            std::printf(
                "client %d: %s\n", k,
                r ? (std::to_string(r->status) + " " + r->body).c_str() : httplib::to_string(r.error()).c_str());
          continue;
        }
        if (body_of(r)["id"] != "q" + std::to_string(q)) ++wrong;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  std::vector<double> all;
  for (const auto& l : latency) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  ASSERT_GE(all.size(), 32u);
  std::printf("32 clients, %zu searches in about 4 s (%d shed): p50 %.1f ms, p99 %.1f ms (CPU, loopback)\n", all.size(),
              shed.load(), all[all.size() / 2], all[std::min(all.size() - 1, all.size() * 99 / 100)]);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

// Concurrent searches of one backend share search_many batches (LocalOptions::search_batching) and each
// answers as the same search alone: the whole gallery and a collection (parameters that never share a
// batch), and a query the index refuses, whose error is its own and not its batch's.
TEST(LocalBackendSearch, ConcurrentSearchesAnswerAsAlone) {
  TempDir dir;
  LocalOptions lo;
  lo.gallery = dir.path() / "gallery";
  lo.index = cpu_index();
  lo.search_batching.max_batch = texture::kMaxBatchQueries;
  LocalBackend backend(lo);
  std::mt19937 rng(std::random_device{}());
  std::vector<texture::GalleryEntry> entries;
  for (int i = 0; i < 24; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 40 + int(rng() % 200), i % 2 ? "a" : ""));
    backend.write(entries.back(), false, Clock::time_point::max());
  }
  std::vector<texture::Features> queries;
  for (int k = 0; k < 12; ++k) {
    texture::Features q = test::random_index_entry("q", rng, 100 + int(rng() % 300)).features;
    const texture::Features& t = entries[rng() % entries.size()].features;
    std::copy_n(t.descriptors.begin(), size_t(std::min(t.count(), 30)) * match::kDim, q.descriptors.begin());
    queries.push_back(std::move(q));
  }
  texture::Features bad = queries[0];
  bad.descriptors.resize(10 * match::kDim);
  texture::SearchParams whole, in_a;
  in_a.collections = {"a"};
  const auto key = [](const ShardSearch& s) {
    std::string out = std::to_string(s.searched);
    for (const Match& m : s.shortlist)
      out += " " + m.id + ":" + std::to_string(m.score) + "/" + std::to_string(m.matches) + "/" +
             std::to_string(m.inliers) + "/" + std::to_string(m.geometric_significance);
    return out;
  };
  std::vector<std::string> alone;
  for (size_t k = 0; k < queries.size(); ++k)
    alone.push_back(key(backend.search_part(queries[k], k % 3 ? whole : in_a)));
  const DynamicBatcherStats before = backend.search_batching();
  std::atomic<int> wrong{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        const size_t k = size_t(t + round) % queries.size();
        wrong += key(backend.search_part(queries[k], k % 3 ? whole : in_a)) != alone[k];
        if (t == 0) try {
            backend.search_part(bad, whole);
          } catch (const std::invalid_argument&) {
            ++refused;
          }
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(refused.load(), 4);
  const DynamicBatcherStats s = backend.search_batching();
  EXPECT_EQ(s.requests - before.requests, 12u * 4u + 4u);
  EXPECT_LE(s.largest, texture::kMaxBatchQueries);
  std::printf("%llu searches in %llu batches, the largest of %d\n", (unsigned long long)(s.requests - before.requests),
              (unsigned long long)(s.batches - before.batches), s.largest);
}

}  // namespace
}  // namespace prism::service
