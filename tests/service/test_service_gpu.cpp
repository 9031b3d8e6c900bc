// The texture service with its index on the GPU: the same HTTP answers as on the CPU over the same
// gallery (uploads extracted on the CPU by both), uploads extracted on the GPU by default, and shard workers on the GPU
// (through a real redis-server) answering as one CPU gallery (8-bit matching is exact on both: GPU == CPU bit for bit,
// so the decisions, inliers and significances are equal).
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <random>
#include <thread>

#include "http_api.h"
#include "local_backend.h"
#include "prism_test.h"
#include "shard_fixture.h"
#include "test_env.h"
#include "ppm.h"
#include "jpeg_cases.h"
#include "texture_cases.h"

namespace prism::service {
namespace {

using json = nlohmann::json;

// The API over the gallery in `dir` with its index on `device`, served on its own thread; uploads
// extracted on `extraction` (ApiOptions' default: kAuto).
class Served {
 public:
  Served(const std::filesystem::path& dir, texture::Device device,
         gpu::Device extraction = ApiOptions{}.features.device, const texture::BatcherOptions& batching = {}) {
    LocalOptions lo;
    lo.gallery = dir;
    lo.index.device = device;
    lo.index.gpu_budget = lo.index.host_budget = int64_t(256) << 20;
    backend_ = std::make_unique<LocalBackend>(lo);
    ApiOptions api;
    api.features.device = extraction;
    api.batching = batching;
    api_ = std::make_unique<HttpApi>(*backend_, api);
    port_ = api_->bind("127.0.0.1", 0);
    thread_ = std::thread([this] { api_->serve(); });
  }
  ~Served() {
    api_->stop();
    thread_.join();
  }
  json post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(std::chrono::seconds(60));
    for (int i = 0; i < 100; ++i) {
      if (httplib::Result r = c.Post(path.c_str(), body, "image/x-portable-graymap")) return json::parse(r->body);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the listener is starting
    }
    return json{{"error", "no answer"}};
  }
  json get(const std::string& path) {
    httplib::Client c("127.0.0.1", port_);
    if (httplib::Result r = c.Get(path.c_str())) return json::parse(r->body);
    return json{{"error", "no answer"}};
  }
  LocalBackend& backend() { return *backend_; }

 private:
  std::unique_ptr<LocalBackend> backend_;
  std::unique_ptr<HttpApi> api_;
  int port_ = 0;
  std::thread thread_;
};

TEST(ServiceGpu, AnswersEqualTheCpuOnTheSameGallery) {
  PRISM_NEED_GPU();
  gst_init(nullptr, nullptr);
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> products;
  {
    Served gpu(dir.path() / "g", texture::Device::kCuda, gpu::Device::kCpu);
    ASSERT_TRUE(gpu.backend().stats({}).shards[0].index.device.rfind("cuda", 0) == 0);
    for (int i = 0; i < 12; ++i) {
      products.push_back(test::random_texture(rng));
      const json r = gpu.post("/v1/products/g" + std::to_string(i), test::pgm_bytes(products.back()));
      ASSERT_EQ(r["outcome"], "created") << r.dump();
    }
  }
  // One owner per gallery: the CPU server gets a copy of the same entries.
  std::filesystem::copy(dir.path() / "g", dir.path() / "g-cpu", std::filesystem::copy_options::recursive);
  Served gpu(dir.path() / "g", texture::Device::kCuda, gpu::Device::kCpu);
  Served cpu(dir.path() / "g-cpu", texture::Device::kCpu, gpu::Device::kCpu);
  int identified = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    cv::Mat query;
    cv::warpPerspective(products[i], query, cv::Mat(test::random_homography(rng, 320, 240)), products[i].size(),
                        cv::INTER_LINEAR, cv::BORDER_REFLECT);
    const std::string body = test::pgm_bytes(query);
    json a = gpu.post("/v1/search?top_k=4", body), b = cpu.post("/v1/search?top_k=4", body);
    for (json* j : {&a, &b}) j->erase("latency_ms");
    EXPECT_EQ(a, b) << "search " << i;
    identified += a["id"] == "g" + std::to_string(i);
    json va = gpu.post("/v1/products/g" + std::to_string(i) + "/verify", body);
    json vb = cpu.post("/v1/products/g" + std::to_string(i) + "/verify", body);
    for (json* j : {&va, &vb}) j->erase("latency_ms");
    EXPECT_EQ(va, vb) << "verify " << i;
  }
  EXPECT_EQ(identified, int(products.size()));
}

// What `prism texture serve` does without --device: SIFT of uploads on the GPU (cv::SIFT on the CPU
// took five times as long per request), said in /v1/stats, and the answers right.
TEST(ServiceGpu, UploadsAreExtractedOnTheGpuByDefault) {
  PRISM_NEED_GPU();
  gst_init(nullptr, nullptr);
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  Served served(dir.path() / "g", texture::Device::kAuto);
  const json stats = served.get("/v1/stats");
  ASSERT_TRUE(stats.contains("extraction")) << stats.dump();
  EXPECT_EQ(stats["extraction"].get<std::string>().rfind("cuda:", 0), 0u) << stats.dump();
  std::vector<cv::Mat> products;
  for (int i = 0; i < 6; ++i) {
    products.push_back(test::random_texture(rng));
    const json r = served.post("/v1/products/p" + std::to_string(i), test::pgm_bytes(products.back()));
    ASSERT_EQ(r["outcome"], "created") << r.dump();
  }
  for (size_t i = 0; i < products.size(); ++i) {
    const std::string body = test::pgm_bytes(test::noisy_capture(products[i], rng));
    const json s = served.post("/v1/search?top_k=2", body);
    EXPECT_EQ(s["id"], "p" + std::to_string(i)) << s.dump();
    const json v = served.post("/v1/products/p" + std::to_string(i) + "/verify", body);
    EXPECT_EQ(v["accepted"], true) << v.dump();
  }
}

// Requests arriving together are extracted as SIFT batches (texture/extraction_batcher.h), and each
// gets the answer it gets alone: 24 verifies and searches from 12 clients at once, then each again
// by itself, equal but for latency_ms. (That images of one size wait for each other and share a
// batch, exactly, is TextureGpu.ConcurrentExtractionsAreBatchedAndEachGetsItsOwn; here the batches
// depend on when the requests arrive.)
TEST(ServiceGpu, ConcurrentRequestsAreBatchedAndAnswerAsAlone) {
  PRISM_NEED_GPU();
  gst_init(nullptr, nullptr);
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  texture::BatcherOptions batching;
  batching.max_wait = std::chrono::milliseconds(50);
  Served served(dir.path() / "g", texture::Device::kAuto, gpu::Device::kCuda, batching);
  std::vector<cv::Mat> products;
  for (int i = 0; i < 8; ++i) {
    products.push_back(test::random_texture(rng, 640, 480));
    const json r = served.post("/v1/products/p" + std::to_string(i), test::pgm_bytes(products.back()));
    ASSERT_EQ(r["outcome"], "created") << r.dump();
  }
  std::vector<std::pair<std::string, std::string>> asks;  // path, body
  for (int i = 0; i < 12; ++i) {
    const std::string body = test::pgm_bytes(test::noisy_capture(products[size_t(i) % products.size()], rng));
    asks.emplace_back("/v1/search?top_k=3", body);
    asks.emplace_back("/v1/products/p" + std::to_string(i % 8) + "/verify", body);
  }
  std::vector<json> together(asks.size());
  std::vector<std::thread> clients;
  for (size_t c = 0; c < 12; ++c)
    clients.emplace_back([&, c] {
      for (size_t k = c; k < asks.size(); k += 12) together[k] = served.post(asks[k].first, asks[k].second);
    });
  for (std::thread& t : clients) t.join();
  const json batches = served.get("/v1/stats")["extraction_batches"];
  std::printf("24 requests from 12 clients: %s\n", batches.dump().c_str());
  EXPECT_EQ(batches["batching"], true) << batches.dump();
  EXPECT_GE(batches["images"].get<int>(), int(8 + asks.size())) << batches.dump();
  int identified = 0;
  for (size_t k = 0; k < asks.size(); ++k) {
    json alone = served.post(asks[k].first, asks[k].second);
    ASSERT_TRUE(together[k].contains("latency_ms")) << together[k].dump();
    together[k].erase("latency_ms");
    alone.erase("latency_ms");
    EXPECT_EQ(together[k], alone) << asks[k].first;
    identified += k % 2 == 0 ? together[k]["identified"] == true : together[k]["accepted"] == true;
  }
  EXPECT_EQ(identified, int(asks.size()));
}

// serve --batch 1 on a GPU: each upload extracted on its own request's thread with every step on the
// GPU, a JPEG's decode included (texture::extract_jpeg_on_gpu). Its answers are those of the
// batched server, which decodes on the host, on copies of one gallery: phone-sized JPEGs (decoded at
// 1/2) and small ones, enrolled, searched and verified.
TEST(ServiceGpu, UnbatchedJpegUploadsAreDecodedOnTheGpuAndAnswerAsTheHostsDecode) {
  PRISM_NEED_GPU();
  gst_init(nullptr, nullptr);
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  test::JpegCase q80;
  q80.quality = 80;
  std::vector<cv::Mat> products;
  {
    Served host(dir.path() / "g", texture::Device::kAuto, gpu::Device::kCuda);
    for (int i = 0; i < 4; ++i) {
      cv::Mat big;
      cv::resize(test::random_texture(rng, 400, 300), big, cv::Size(i % 2 ? 2400 : 640, i % 2 ? 1800 : 480), 0, 0,
                 cv::INTER_CUBIC);
      products.push_back(big);
      const std::vector<uint8_t> jpeg = test::encode_jpeg(big, q80);
      const json r = host.post("/v1/products/p" + std::to_string(i), std::string(jpeg.begin(), jpeg.end()));
      ASSERT_EQ(r["outcome"], "created") << r.dump();
    }
  }
  std::filesystem::copy(dir.path() / "g", dir.path() / "g-gpu", std::filesystem::copy_options::recursive);
  texture::BatcherOptions alone;
  alone.max_batch = 1;
  Served host(dir.path() / "g", texture::Device::kAuto, gpu::Device::kCuda);
  Served gpu(dir.path() / "g-gpu", texture::Device::kAuto, gpu::Device::kCuda, alone);
  for (size_t i = 0; i < products.size(); ++i) {
    const cv::Mat capture = test::noisy_capture(products[i], rng);
    const std::vector<uint8_t> jpeg = test::encode_jpeg(capture, q80);
    const std::string body(jpeg.begin(), jpeg.end());
    for (const std::string& path :
         {std::string("/v1/search?top_k=3"), "/v1/products/p" + std::to_string(i) + "/verify"}) {
      json a = gpu.post(path, body), b = host.post(path, body);
      for (json* j : {&a, &b}) j->erase("latency_ms");
      EXPECT_EQ(a, b) << path;
      EXPECT_TRUE(a.value("identified", false) || a.value("accepted", false)) << path << ": " << a.dump();
    }
  }
  const json g = gpu.get("/v1/stats")["extraction_batches"], h = host.get("/v1/stats")["extraction_batches"];
  EXPECT_EQ(g["batching"], false) << g.dump();
  EXPECT_EQ(g["jpeg_decoded_on_gpu"], 2 * products.size()) << g.dump();
  EXPECT_EQ(h["jpeg_decoded_on_gpu"], 0) << h.dump();
}

TEST(ServiceGpu, ShardWorkersOnTheGpuAnswerAsOneCpuGallery) {
  PRISM_NEED_GPU();
  PRISM_NEED_REDIS();
  using namespace test_support;
  test::TempDir dir;
  test::RedisServer redis(dir.path() / "redis");
  redis.start();
  std::mt19937 rng(std::random_device{}());
  const std::vector<texture::GalleryEntry> entries = products(60, rng);
  LocalBackend one(local_options(dir.path() / "one"));
  std::vector<std::unique_ptr<Worker>> workers;
  for (int k = 0; k < 2; ++k)
    workers.push_back(std::make_unique<Worker>(redis.url(), k, 2, "gpu", dir.path() / ("s" + std::to_string(k)),
                                               texture::Device::kCuda));
  ShardedBackend front(front_options(redis.url(), 2));
  for (const texture::GalleryEntry& e : entries) {
    one.write(e, false, in(10s));
    ASSERT_EQ(front.write(e, false, in(10s)).outcome, WriteOutcome::kCreated) << e.id;
  }
  const ServiceStats stats = front.stats(in(10s));
  ASSERT_EQ(stats.shards.size(), 2u);
  for (const ShardStats& s : stats.shards) EXPECT_EQ(s.index.device.rfind("cuda", 0), 0u) << s.index.device;
  for (int q = 0; q < 12; ++q) {
    // A product's own features with a third of the rows dropped: found, and significant.
    texture::Features query = entries[size_t(q) * 5].features;
    query.keypoints.resize(query.keypoints.size() * 2 / 3);
    query.descriptors.resize(query.keypoints.size() * match::kDim);
    SearchQuery sq;
    sq.features = query;
    sq.top_k = 5;
    sq.deadline = in(20s);
    const SearchAnswer a = front.search(sq), b = one.search(sq);
    ASSERT_EQ(a.candidates.size(), b.candidates.size()) << q;
    EXPECT_EQ(a.identified, b.identified);
    for (size_t i = 0; i < a.candidates.size(); ++i) expect_same_match(a.candidates[i], b.candidates[i]);
    const VerifyAnswer va = front.verify(entries[size_t(q)].id, query, {}, in(20s));
    const VerifyAnswer vb = one.verify(entries[size_t(q)].id, query, {}, in(20s));
    expect_same_match(va.match, vb.match);
  }
  for (auto& w : workers) EXPECT_EQ(w->error(), "");
}

}  // namespace
}  // namespace prism::service
