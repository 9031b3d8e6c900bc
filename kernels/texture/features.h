// Texture features: SIFT keypoints (Lowe 2004: OpenCV's cv::SIFT on the CPU, or kernels/sift's CUDA
// path, interchangeable with it within sift.h's tolerance), the strongest kMaxFeatures per image, with RootSIFT
// descriptors in 8 bits (match/match.h: COLMAP's round(512 x), what the gallery stores and the index matches) and each
// keypoint's geometry for the geometric verification.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "common/gpu.h"
#include "match/match.h"
#include "sift/sift.h"
#include "texture/normalise.h"

namespace prism::texture {

struct Keypoint {
  // Pixel coordinates (centres at integers) in the image given to extract_features, or in the
  // original image of a reduced decode once to_original_pixels has put them there.
  float x = 0, y = 0;
  float size = 0, angle = 0, response = 0;
  int32_t octave = 0;
};

struct Features {
  int width = 0, height = 0;         // the image's size (the original's: to_original_pixels)
  std::vector<Keypoint> keypoints;   // strongest first
  std::vector<uint8_t> descriptors;  // [count][match::kDim] RootSIFT, 8-bit (match::rootsift_u8)
  // The same RootSIFT in FP16 (match::rootsift), only when FeatureParams::keep_fp16 asked for it:
  // `prism-texture-eval` compares 8-bit against FP16 matching. Never stored in a gallery.
  std::vector<uint16_t> descriptors_fp16;
  // The same RootSIFT in float (match::rootsift_float), only when FeatureParams::keep_fp32 asked:
  // the FP32 reference the eval compares both precisions' ratio-test decisions against.
  std::vector<float> descriptors_fp32;
  int count() const { return int(keypoints.size()); }
};

// Whether two feature sets are equal as a gallery stores them (image size, keypoint positions,
// 8-bit descriptors): an enrolment of an image already enrolled so is a no-op, for the service
// and the CLI alike.
bool same_stored_features(const Features& a, const Features& b);

struct FeatureParams {
  int max_features = match::kSlot;  // the strongest by SIFT response; at most match::kSlot
  // Images whose longer side exceeds this are downscaled for detection (keypoints are reported in
  // the original image's coordinates); 0 keeps every size.
  int max_side = 1024;
  // The contrast normalisation applied to the grey image after the shrink and before SIFT
  // (normalise.h): a gallery's entries and its queries must use the same one, the gallery's
  // (Gallery::normalisation). None by default.
  Normalisation normalisation{};
  bool keep_fp16 = false;  // also fill Features::descriptors_fp16
  bool keep_fp32 = false;  // also fill Features::descriptors_fp32
  // Which SIFT: kCpu is OpenCV's cv::SIFT; kCuda is kernels/sift on the current GPU (a per-thread
  // extractor, kept between calls); kAuto is CUDA when a usable GPU is present. A gallery enrolled
  // with one is searched with the other (docs/TEXTUREID.md has the mixed runs).
  gpu::Device device = gpu::Device::kCpu;
};

// Features of an 8-bit image with 1, 3 (BGR) or 4 (BGRA) channels. Throws std::invalid_argument on
// an empty image or another type.
Features extract_features(const cv::Mat& image, const FeatureParams& params = {});

// Features of a reduced copy of an image, put in the original image's pixels: Features::width and
// height become `width` x `height` (the original's), and each keypoint's x, y and size are scaled by
// `reduction` about the pixel edge (x_original = (x + 0.5) reduction - 0.5, as extract_features maps
// its detection image's keypoints back). For an image decoded reduced (image/decode.h's
// decode_grey_reduced: a large JPEG reduced by 1/2, 1/4 or 1/8 in the DCT domain, then shrunk the
// rest of the way to max_side by extract_features as any image is): the service's uploads and
// `prism texture`'s images, so that their keypoints, and the homographies verified from them, are
// in the pixels of the image as uploaded, not of the reduced decode. A reduction of 1 changes
// nothing but the size. Throws std::invalid_argument for a reduction under 1.
void to_original_pixels(Features& f, int width, int height, int reduction);

// Where extract_features runs with `params`: "cuda:0 (NVIDIA H100 80GB HBM3)", "cpu (cv::SIFT)"
// when asked for the CPU, or "cpu (cv::SIFT; no GPU: WHY)" when kAuto finds none. For servers and
// tools to say so at start and in their stats: extraction is most of a request's time, and the two
// differ tenfold.
std::string extraction_device(const FeatureParams& params);

// Host memory extract_features holds at its peak for a width x height image (an estimate from the
// sizes, for a server's memory budget): the detection image and its normalised copy and, where
// cv::SIFT runs (kCpu, or kAuto without a GPU), its pyramids: the detection image doubled (as
// cv::SIFT's first octave is) in float, nOctaveLayers + 3 Gaussians and + 2 differences per octave
// (3 layers), each octave a quarter of the one before. About 235 bytes per detection pixel: 246 MB
// for a photo shrunk to 1024 x 1024. kernels/sift keeps its pyramids in GPU memory.
uint64_t extraction_host_bytes(int width, int height, const FeatureParams& params);

// extract_features in two halves, for callers that share the second (the service's concurrent
// requests: texture/extraction_batcher.h). prepare_detection is the host part, done on each caller's
// own thread: grey, the INTER_AREA shrink to max_side and the normalisation (params.max_side and
// params.normalisation). extract_prepared runs SIFT on many such images at once, with params.device
// (on the GPU, images of one size in one launch: sift.h's detect_and_compute_batch; on the CPU, one
// image per thread of OpenCV's pool) and gives each exactly what extract_features gives for its
// image, bit for bit. Throws as extract_features.
struct DetectionImage {
  cv::Mat pixels;             // 8-bit grey, what SIFT sees; smaller than 8x8: no features
  int width = 0, height = 0;  // the image's (Features::width, height)
  double scale = 1;           // image / detection coordinates
};
DetectionImage prepare_detection(const cv::Mat& image, const FeatureParams& params);
std::vector<Features> extract_prepared(const std::vector<DetectionImage>& images, const FeatureParams& params);

// Many images, for enrolment: each result equals extract_features of that image. On the GPU the
// detection images go through kernels/sift in batches (many images per launch: sift.h's
// detect_and_compute_batch); on the CPU, one image per thread of OpenCV's pool. Throws as
// extract_features for the first bad image, naming its position.
std::vector<Features> extract_features_batch(const std::vector<cv::Mat>& images, const FeatureParams& params = {});

// The order of Features::keypoints, on the detection image's keypoints: kernels/sift's
// (sift::strongest_first: strongest response first, then a total order), in which it lists its
// keypoints already, so its output is taken as it comes, and only cv::SIFT's is sorted.
using sift::strongest_first;

// Which rows of an image make its digest (the rows a search reads of a host-tier image before it picks
// the candidates it matches exactly: index.h, IndexOptions::host_digest_rows). kStrongest: the first
// rows, strongest response first, as stored. kSpread: a 4 x 4 grid over the image, in rounds, each round
// the next strongest keypoint of every cell that has one (strongest first within the round), so that a
// small digest covers the whole texture rather than its few most contrasted spots. kLargest: the
// largest keypoints first (SIFT scale; ties by response), which survive blur and noise best.
enum class DigestOrder { kStrongest, kSpread, kLargest };
const char* digest_order_name(DigestOrder o);
// Throws std::invalid_argument naming the choices.
DigestOrder parse_digest_order(const std::string& name);
// A permutation of f's rows, [0, f.count()): the first `first` in the order `o` takes them for a digest,
// the others after them in the stored order (the whole order when `first` is the count or more).
std::vector<int> digest_order(const Features& f, DigestOrder o, int first = match::kSlot);

// How many GPU extractors extract_on_gpu and extract_jpeg_on_gpu lend per device and params (each
// holds about 250 MB of GPU buffers and its own stream): the uploads a server extracts on the GPU
// at once. 1..64, default 8; a pool already made keeps its size, so a server sets it first
// (`prism texture serve --gpu-extractors`). Throws std::invalid_argument outside 1..64.
void set_gpu_extractors(int n);
int gpu_extractors();

#if defined(PRISM_HAVE_CUDA)
// extract_features (device kCuda) of an image with every step after its grey on the GPU: uploaded, then
// shrunk, normalised and described there (CudaFeatureExtractor::extract_device), where
// extract_features shrinks and normalises on the calling thread. Equal to it bit for bit (the
// device's shrink and normalisation give their host twins' bits: detection_image.h, normalise.h),
// for a fraction of the host time (a CLAHE of 640x480 takes 1.5 ms of a core): for a server whose
// request threads are its cores. Extractors come from a pool per device and params (gpu_extractors(),
// 8 unless set), each on its own stream, so concurrent callers' kernels overlap; a caller finding
// all of them out waits. Throws gpu::CudaError without a usable GPU, std::invalid_argument
// as extract_features.
Features extract_on_gpu(const cv::Mat& image, const FeatureParams& params);

// A JPEG's features with its decode on the GPU too (image/jpeg_parallel.h's CudaJpegDecoder, at
// `reduction`: 1, 2, 4 or 8, image/decode.h's jpeg_reduced_size for max_side), then as
// extract_on_gpu, put back in the file's `width` x `height` pixels (to_original_pixels): equal bit
// for bit to extract_features of decode_grey_reduced's image so put back. Nothing (with `why`) where
// the decoder does not take the file (progressive, arithmetic, damaged...): decode it on the host
// then. A phone photo's decode is most of its host time (45 of 60 ms on the GPU host's cores).
std::optional<Features> extract_jpeg_on_gpu(const uint8_t* jpeg, size_t size, int width, int height, int reduction,
                                            const FeatureParams& params, std::string* why = nullptr);
#endif

#if defined(PRISM_HAVE_CUDA)
// kernels/sift's CUDA path with its buffers kept between calls, for a caller that owns its CUDA
// context and stream (an element): one per thread. FeatureParams::device is ignored.
class CudaFeatureExtractor {
 public:
  explicit CudaFeatureExtractor(const FeatureParams& params = {});
  ~CudaFeatureExtractor();
  CudaFeatureExtractor(CudaFeatureExtractor&&) noexcept;
  CudaFeatureExtractor& operator=(CudaFeatureExtractor&&) noexcept;
  // As extract_features.
  Features extract(const cv::Mat& image);
  // An 8-bit grey image in device memory, `pitch` bytes per row, its writes ordered before the
  // call by the caller (or enqueued on stream()). The same features as extract() of the same pixels:
  // an image with a side over params.max_side is shrunk on the device as extract() shrinks it on the
  // host (cv::resize INTER_AREA, bit for bit: texture/detection_image.h), into a buffer kept between
  // calls; the shrink's tables are made once per size.
  Features extract_device(const uint8_t* grey, size_t pitch, int width, int height);
  // The stream extract_device works on (kernels/sift's): a caller that makes the grey image on the
  // device (textureid's RGBA frames) enqueues that work here and needs no sync of its own.
  cudaStream_t stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace prism::texture
