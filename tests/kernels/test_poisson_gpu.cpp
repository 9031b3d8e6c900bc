// CUDA path of the seamless clone against OpenCV 4.6's cv::seamlessClone and our CPU path (which
// reproduces OpenCV bit for bit), both DST methods, every mode, binary/soft/alpha masks, fresh random
// and real images (PPM copies of ../shared/data/images made by tools/gpu-suite), 3x3 to 2400x1552.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "common/device_array.h"
#include "poisson_cases.h"
#include "poisson_yuv_cases.h"
#include "prism_test.h"

using namespace prism::test;
namespace poisson = prism::poisson;

namespace {

// A pitched device copy of a cv::Mat, as the element's frames are (DeviceArray has no pitch).
struct DeviceMat {
  uint8_t* data = nullptr;
  size_t pitch = 0;
  cv::Size size;
  int elem = 0;
  explicit DeviceMat(const cv::Mat& m) : size(m.size()), elem(static_cast<int>(m.elemSize())) {
    EXPECT_EQ(cudaMallocPitch(reinterpret_cast<void**>(&data), &pitch, m.cols * elem, m.rows), cudaSuccess);
    EXPECT_EQ(cudaMemcpy2D(data, pitch, m.data, m.step, m.cols * elem, m.rows, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceMat() { EXPECT_EQ(cudaFree(data), cudaSuccess); }
  cv::Mat download(int type) const {
    cv::Mat m(size, type);
    EXPECT_EQ(cudaMemcpy2D(m.data, m.step, data, pitch, size.width * elem, size.height, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return m;
  }
};

struct Gpu {
  // Blocking: DeviceMat's synchronous copies (legacy default stream) come before the clones queued here.
  const prism::gpu::Stream stream = prism::gpu::Stream::create(cudaStreamDefault);
};

// Our GPU result for a case with the given method.
cv::Mat ours_gpu(const CloneCase& c, poisson::CudaCloner& cloner, cudaStream_t stream) {
  cv::Mat host_dst = c.dst.clone();
  poisson::CloneJob job = make_job(c, host_dst);  // placement from the host mask
  DeviceMat dst(c.dst), src(c.src), mask(c.mask);
  job.background.data = dst.data;
  job.background.stride = static_cast<int64_t>(dst.pitch);
  job.overlay.data = src.data;
  job.overlay.stride = static_cast<int64_t>(src.pitch);
  job.mask.data = mask.data;
  job.mask.stride = static_cast<int64_t>(mask.pitch);
  EXPECT_EQ(cloner.mask_box(job.mask),
            poisson::mask_box({c.mask.data, c.mask.cols, c.mask.rows, static_cast<int64_t>(c.mask.step), 1}));
  cloner.clone(job);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return dst.download(CV_8UC3);
}

cv::Mat ours_cpu(const CloneCase& c) {
  cv::Mat out = c.dst.clone();
  poisson::clone_cpu(make_job(c, out));
  return out;
}

// What is asserted of Gemm and Fft against OpenCV: max difference 1 everywhere, nothing outside the
// box changed, and at most 0.1% of the box's values differing for boxes from 100x100 up (the
// issue's bar). They solve in double with OpenCV's own float roundings replayed for the lowest
// frequencies of the forward transforms (seamless_clone.cu), which are what moves OpenCV's answer;
// without that replay a double solve differs on 0.27% of values at 1078x719 (noise) and 0.14% at
// 2400x1552 (real image). Boxes under 100 pixels a side are dominated by exact-integer solutions
// (where erosion leaves no overlay, the solution is the background itself), which OpenCV's float
// DFT truncates to v or v-1 at random: no double solve matches them, and Auto takes Replay there,
// asserted bit-exact (expect_replay_exact).
CloneDiff expect_close(const CloneCase& c, const cv::Mat& ours, const cv::Mat& ref, const char* method) {
  const CloneDiff whole = compare(ours, ref);
  const poisson::Box box = poisson::mask_box({c.mask.data, c.mask.cols, c.mask.rows, (int64_t)c.mask.step, 1});
  const cv::Rect roi(c.p.x - box.width / 2, c.p.y - box.height / 2, box.width, box.height);
  const CloneDiff inside = compare(ours(roi), ref(roi));
  std::cout << "  " << method << " " << c.name << ": box " << inside.str() << "\n";
  EXPECT_EQ(whole.differing, inside.differing) << c.name << ": pixels outside the box changed";
  EXPECT_LE(whole.max_abs, 1) << method << " " << c.name;
  if (box.width >= 100 && box.height >= 100) {
    EXPECT_LE(inside.fraction(), 0.001) << method << " " << c.name;
  }
  return inside;
}

// The two GPU methods solve the same problem in double by different algorithms: they must agree
// (a value may flip only when the exact solution lies within ~1e-9 of an integer). Boxes under 7
// pixels a side are all such values: the 7x7 erosion leaves no overlay, the solution is the
// background itself, and each method lands a hair above or below each integer.
void expect_methods_agree(const CloneCase& c, const cv::Mat& a, const cv::Mat& b) {
  const CloneDiff d = compare(a, b);
  EXPECT_LE(d.max_abs, 1) << c.name;
  const poisson::Box box = poisson::mask_box({c.mask.data, c.mask.cols, c.mask.rows, (int64_t)c.mask.step, 1});
  if (box.width >= 7 && box.height >= 7) {
    EXPECT_LE(d.differing, d.total / 100000) << c.name << " gemm vs fft: " << d.str();
  }
}

// Replay (OpenCV's float solve replayed on the GPU) and Auto wherever it picks Replay: bit-exact.
void expect_replay_exact(const CloneCase& c, poisson::CudaCloner& replay, poisson::CudaCloner& automatic,
                         cudaStream_t stream, const cv::Mat& ref) {
  const poisson::Box box = poisson::mask_box({c.mask.data, c.mask.cols, c.mask.rows, (int64_t)c.mask.step, 1});
  if (std::min(box.width, box.height) < 100) {  // where the double methods miss the 0.1% bar
    EXPECT_EQ(automatic.method_for(box.width, box.height), poisson::DstMethod::Replay) << c.name;
  }
  if (poisson::CudaCloner::replay_cost(box.width, box.height) > 2e9) return;  // seconds per solve
  const CloneDiff d = compare(ours_gpu(c, replay, stream), ref);
  std::cout << "  replay " << c.name << ": " << d.str() << "\n";
  EXPECT_EQ(d.differing, 0u) << "replay " << c.name << ": " << d.str();
  if (automatic.method_for(box.width, box.height) == poisson::DstMethod::Replay) {
    EXPECT_EQ(compare(ours_gpu(c, automatic, stream), ref).differing, 0u) << "auto " << c.name;
  }
}

void run_cases(const std::vector<std::pair<int, int>>& sizes, const cv::Mat& src_image, const cv::Mat& dst_image,
               unsigned seed, bool all_kinds = true) {
  Gpu gpu;
  poisson::CudaCloner gemm(gpu.stream, poisson::DstMethod::Gemm), fft(gpu.stream, poisson::DstMethod::Fft),
      replay(gpu.stream, poisson::DstMethod::Replay), automatic(gpu.stream);
  std::mt19937 rng(seed);
  for (auto [w, h] : sizes)
    for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER})
      for (int kind : {0, 1, 2}) {
        if (!all_kinds && kind != (mode % 3)) continue;
        const cv::Size dst_size(std::max(64, w + 20), std::max(48, h + 12));
        CloneCase c =
            make_case(src_image.empty() ? "random" : "real", w, h, dst_size, mode, kind, src_image, dst_image, rng);
        const cv::Mat ref = opencv_clone(c);
        EXPECT_EQ(compare(ours_cpu(c), ref).differing, 0u) << "CPU path " << c.name;
        const cv::Mat a = ours_gpu(c, gemm, gpu.stream), b = ours_gpu(c, fft, gpu.stream);
        expect_close(c, a, ref, "gemm");
        expect_close(c, b, ref, "fft");
        expect_methods_agree(c, a, b);
        expect_replay_exact(c, replay, automatic, gpu.stream, ref);
      }
}

cv::Mat real(const char* name) {
  const std::string path = data_dir() + "/images/" + name;
  cv::Mat m = read_ppm(path);
  if (m.empty() && std::getenv("PRISM_REQUIRE_DATA")) ADD_FAILURE() << "cannot read " << path;
  return m;
}

}  // namespace

// The GPU replay of OpenCV's float DFT (the low frequencies spliced into the double solve) against
// cv::dft itself, bit for bit: lengths whose long odd factor is the last stage (2 x 2399 at
// 2400x1552, 4 x 359), is followed by other stages (2 x 3 x 197 at 592x592, 2 x 11 x 109, 2 x 101 x
// 103, 64 x 67 where the long stage has 33 columns), no long stage (2 x 3 x 11 x 47, powers of two,
// radix 3/5 only), and random lengths; 45 rows, so the last group of 32 is partial.
TEST(PoissonGpu, OpenCvDftReplayEqualsCvDft) {
  PRISM_NEED_GPU();
  std::mt19937 rng(31);
  std::vector<int> lengths = {2398, 717, 590, 1198, 1076, 10402, 2143, 1550, 63, 1199, 100, 152, 3, 1};
  for (int i = 0; i < 6; ++i) lengths.push_back(std::uniform_int_distribution<int>(2, 3000)(rng));
  std::uniform_real_distribution<float> val(-300.f, 300.f);
  const int rows = 45, count = 32;
  for (int n : lengths) {
    std::vector<float> x(static_cast<size_t>(rows) * n);
    for (float& v : x) v = val(rng);
    const int want = std::min(count, n);
    const std::vector<float> ours = poisson::detail::replay_odd_extension_gpu(x, n, want);
    ASSERT_EQ(ours.size(), static_cast<size_t>(rows) * want) << "length " << n;
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
      cv::Mat ext = cv::Mat::zeros(1, 2 * n + 2, CV_32FC2), ref;
      for (int i = 0; i < n; ++i) {
        ext.at<cv::Vec2f>(0, i + 1)[0] = x[static_cast<size_t>(r) * n + i];
        ext.at<cv::Vec2f>(0, 2 * n + 1 - i)[0] = -x[static_cast<size_t>(r) * n + i];
      }
      cv::dft(ext, ref, cv::DFT_ROWS);
      for (int k = 0; k < want; ++k)
        if (std::memcmp(&ref.at<cv::Vec2f>(0, k + 1)[1], &ours[static_cast<size_t>(r) * want + k], 4)) ++bad;
    }
    EXPECT_EQ(bad, 0) << "length " << n << " (transform " << 2 * n + 2 << "): outputs differing from cv::dft";
  }
}

TEST(PoissonGpu, SmallBoxesRandom) {
  PRISM_NEED_GPU();
  run_cases({{3, 3}, {3, 5}, {4, 3}, {5, 4}, {7, 9}, {16, 9}, {33, 47}}, {}, {}, 11);
}

// Thin boxes: the solution sits on integers, which only OpenCV's own roundings truncate as it does;
// Auto replays them.
TEST(PoissonGpu, ThinBoxesRandom) {
  PRISM_NEED_GPU();
  run_cases({{12, 300}, {301, 9}, {40, 701}, {99, 1201}, {1201, 64}}, {}, {}, 16, false);
}

TEST(PoissonGpu, ReferenceSizesRandom) {
  PRISM_NEED_GPU();
  run_cases({{154, 100}, {300, 194}}, {}, {}, 12);
}

TEST(PoissonGpu, PrimeLengthsRandom) {
  PRISM_NEED_GPU();
  run_cases({{360, 258}, {241, 199}, {1078, 719}}, {}, {}, 13, false);  // 1077 = 3 x 359, 718 = 2 x 359
}

TEST(PoissonGpu, RealImages) {
  PRISM_NEED_GPU();
  PRISM_NEED_FILE(data_dir() + "/images/fruits.ppm");
  PRISM_NEED_FILE(data_dir() + "/images/baboon.ppm");
  run_cases({{154, 100}, {301, 197}, {592, 592}}, real("baboon.ppm"), real("fruits.ppm"), 14, false);
}

TEST(PoissonGpu, LargeBoxes) {
  PRISM_NEED_GPU();
  Gpu gpu;
  poisson::CudaCloner gemm(gpu.stream, poisson::DstMethod::Gemm), fft(gpu.stream, poisson::DstMethod::Fft);
  std::mt19937 rng(15);
  CloneCase c = make_case("random", 1200, 776, cv::Size(1920, 1080), cv::MIXED_CLONE, 2, {}, {}, rng);
  cv::Mat ref = opencv_clone(c);
  cv::Mat a = ours_gpu(c, gemm, gpu.stream), b = ours_gpu(c, fft, gpu.stream);
  expect_close(c, a, ref, "gemm");
  expect_close(c, b, ref, "fft");
  expect_methods_agree(c, a, b);
  const char* large = std::getenv("PRISM_LARGE_TESTS");
  if (!large || std::string(large) != "1") {
    std::cerr << "*** 2400x1552 skipped (set PRISM_LARGE_TESTS=1) ***\n";
    return;
  }
  cv::Mat fruits = real("fruits.ppm");
  c = make_case(fruits.empty() ? "random" : "real", 2400, 1552, cv::Size(3840, 2160), cv::NORMAL_CLONE, 2, fruits, {},
                rng);
  ref = opencv_clone(c);  // 40-100 s
  a = ours_gpu(c, gemm, gpu.stream);
  b = ours_gpu(c, fft, gpu.stream);
  expect_close(c, a, ref, "gemm");
  expect_close(c, b, ref, "fft");
  expect_methods_agree(c, a, b);
}

// The overlay's own alpha channel as the mask (RGBA overlay, RGBA background).
TEST(PoissonGpu, AlphaMaskOnRgba) {
  PRISM_NEED_GPU();
  Gpu gpu;
  poisson::CudaCloner cloner(gpu.stream);
  std::mt19937 rng(16);
  CloneCase c = make_case("random", 120, 90, cv::Size(320, 240), cv::NORMAL_CLONE, 1, {}, {}, rng);
  const cv::Mat ref = opencv_clone(c);
  cv::Mat src_rgba, dst_rgba;
  cv::cvtColor(c.src, src_rgba, cv::COLOR_BGR2RGBA);
  cv::cvtColor(c.dst, dst_rgba, cv::COLOR_BGR2RGBA);
  cv::Mat planes[4];
  cv::split(src_rgba, planes);
  planes[3] = c.mask;
  cv::merge(planes, 4, src_rgba);
  DeviceMat dst(dst_rgba), src(src_rgba);
  poisson::CloneJob job;
  job.background = {dst.data, dst_rgba.cols, dst_rgba.rows, (int64_t)dst.pitch, 4, 0, 1, 2};
  job.overlay = {src.data, src_rgba.cols, src_rgba.rows, (int64_t)src.pitch, 4, 0, 1, 2};
  job.mask = {src.data + 3, src_rgba.cols, src_rgba.rows, (int64_t)src.pitch, 4};
  job.placement = poisson::place(cloner.mask_box(job.mask), c.p.x, c.p.y, dst_rgba.cols, dst_rgba.rows);
  cloner.clone(job);
  ASSERT_EQ(cudaStreamSynchronize(gpu.stream), cudaSuccess);
  cv::Mat out_rgba = dst.download(CV_8UC4), out;
  cv::cvtColor(out_rgba, out, cv::COLOR_RGBA2BGR);
  expect_close(c, out, ref, "auto");
  cv::split(out_rgba, planes);
  EXPECT_EQ(cv::countNonZero(planes[3] != 255), 0) << "alpha of the background must be kept";
}

TEST(PoissonGpu, ClippedOverlayEqualsCpuPath) {
  PRISM_NEED_GPU();
  Gpu gpu;
  poisson::CudaCloner cloner(gpu.stream);
  std::mt19937 rng(17);
  for (cv::Point p : {cv::Point(6, 70), cv::Point(95, 3), cv::Point(-5, 40), cv::Point(400, 400)}) {
    CloneCase c = make_case("random", 40, 30, cv::Size(100, 80), cv::MIXED_CLONE, 1, {}, {}, rng);
    c.p = p;
    const cv::Mat cpu = ours_cpu(c), gpu_out = ours_gpu(c, cloner, gpu.stream);
    const CloneDiff d = compare(cpu, gpu_out);
    EXPECT_LE(d.max_abs, 1) << p;
    EXPECT_LE(d.fraction(), 0.001) << p;
  }
}

// A stream of frames of one box size allocates nothing after the first.
TEST(PoissonGpu, NoDeviceAllocationPerFrame) {
  PRISM_NEED_GPU();
  Gpu gpu;
  poisson::CudaCloner cloner(gpu.stream);
  std::mt19937 rng(18);
  CloneCase c = make_case("random", 300, 194, cv::Size(640, 480), cv::NORMAL_CLONE, 0, {}, {}, rng);
  cv::Mat host = c.dst.clone();
  poisson::CloneJob job = make_job(c, host);
  DeviceMat dst(c.dst), src(c.src), mask(c.mask);
  job.background.data = dst.data;
  job.background.stride = (int64_t)dst.pitch;
  job.overlay.data = src.data;
  job.overlay.stride = (int64_t)src.pitch;
  job.mask.data = mask.data;
  job.mask.stride = (int64_t)mask.pitch;
  cloner.clone(job);
  ASSERT_EQ(cudaStreamSynchronize(gpu.stream), cudaSuccess);
  size_t free0 = 0, free1 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  for (int i = 0; i < 50; ++i) cloner.clone(job);
  ASSERT_EQ(cudaStreamSynchronize(gpu.stream), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0, free1);
}

// The RGB round trip of an NV12/I420 background on the GPU equals the CPU's bit for bit (Replay
// solves as the CPU does; colorconvert's paths agree bit for bit), boxes inside and clipped.
TEST(PoissonGpu, YuvRoundTripEqualsCpu) {
  PRISM_NEED_GPU();
  namespace gpu = prism::gpu;
  const gpu::Stream stream = gpu::Stream::create();
  poisson::CudaCloner cloner(stream, poisson::DstMethod::Replay);
  std::mt19937 rng(42);
  const cc::Colorimetry cm{cc::YuvMatrix::BT709, false};
  auto upload = [&](const void* host, size_t bytes) {
    gpu::DeviceArray<uint8_t> d(bytes);
    EXPECT_EQ(cudaMemcpyAsync(d.data(), host, bytes, cudaMemcpyHostToDevice, stream), cudaSuccess);
    return d;
  };
  for (cc::PixelFormat format : {cc::PixelFormat::NV12, cc::PixelFormat::I420})
    for (cv::Point p : {cv::Point(-1, -1), cv::Point(61, 47), cv::Point(3, 90), cv::Point(150, 115)})
      for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER}) {
        CloneCase c = make_case("random", 40, 30, cv::Size(160, 120), mode, mode - 1, {}, {}, rng);
        if (p.x >= 0) c.p = p;
        cv::Mat unused = c.dst.clone();
        poisson::CloneJob job = make_job(c, unused);
        YuvFrame cpu(format, c.dst, cm), gpu_frame(format, c.dst, cm);
        std::vector<uint8_t> scratch(static_cast<size_t>(c.dst.cols) * c.dst.rows * 4);
        poisson::clone_yuv_cpu(poisson::YuvBackground{cpu.image, cm, scratch.data()}, job);

        const gpu::DeviceArray<uint8_t> frame = upload(gpu_frame.bytes.data(), gpu_frame.bytes.size());
        const cv::Mat src_host = c.src.clone(), mask_host = c.mask.clone();  // (continuous)
        const gpu::DeviceArray<uint8_t> src = upload(src_host.data, src_host.total() * src_host.elemSize());
        const gpu::DeviceArray<uint8_t> mask = upload(mask_host.data, mask_host.total());
        const gpu::DeviceArray<uint8_t> rgba(scratch.size());
        job.overlay.data = src.data();
        job.overlay.stride = static_cast<int64_t>(src_host.step);
        job.mask.data = mask.data();
        job.mask.stride = static_cast<int64_t>(mask_host.step);
        poisson::clone_yuv_cuda(cloner, poisson::YuvBackground{gpu_frame.rebased(frame.data()), cm, rgba.data()}, job,
                                stream);
        std::vector<uint8_t> out(gpu_frame.bytes.size());
        ASSERT_EQ(cudaMemcpyAsync(out.data(), frame.data(), out.size(), cudaMemcpyDeviceToHost, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(out, cpu.bytes) << cc::format_name(format) << " " << c.name << " at " << c.p;
      }
}
