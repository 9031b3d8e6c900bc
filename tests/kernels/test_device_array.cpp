// gpu::OwnedArray (common/device_array.h), the one owner of device memory, on the CPU: its rules do
// not depend on CUDA, so they are tested here with host policies. A stateful one stands for the
// elements' GstPrismContextAlloc (a GstCudaContext reference: here a shared_ptr, whose use_count
// shows who keeps the "context" alive) and a stateless one for DeviceAlloc/PinnedAlloc. The CUDA
// policies run in the GPU tests: kernels_gpu, cudamemory_gpu (GstPrismContextAlloc alone), and the
// elements' poissonblend_gpu, textureid_gpu, prismconvert_gpu.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/device_array.h"
#include "common/gpu.h"

namespace prism::gpu {
namespace {

// A "context": what it allocated and freed, and the most it may give.
struct Context {
  size_t limit = 1 << 20;
  int allocs = 0;
  std::vector<size_t> released;  // bytes, in order
};

// Stateful, as GstPrismContextAlloc: allocates "in" its context, throws CudaError without one or
// beyond its limit, frees in it.
struct ContextAlloc {
  std::shared_ptr<Context> context;

  ContextAlloc() noexcept = default;
  explicit ContextAlloc(std::shared_ptr<Context> c) noexcept : context(std::move(c)) {}
  void* alloc(size_t bytes) const {
    if (!context) throw CudaError("no context");
    if (bytes > context->limit) throw CudaError("out of memory");
    ++context->allocs;
    return std::malloc(bytes);
  }
  void release(void* p, size_t bytes) const noexcept {
    context->released.push_back(bytes);
    std::free(p);
  }
  bool operator==(const ContextAlloc& o) const { return context == o.context; }
};
using ContextArray = OwnedArray<int, ContextAlloc>;

// Stateless, as DeviceAlloc and PinnedAlloc.
struct HostAlloc {
  static inline int live = 0;
  static void* alloc(size_t bytes) {
    ++live;
    return std::malloc(bytes);
  }
  static void release(void* p, size_t) noexcept {
    --live;
    std::free(p);
  }
};
using HostArray = OwnedArray<int, HostAlloc>;

static_assert(sizeof(HostArray) == sizeof(int*) + sizeof(size_t), "a stateless policy takes no room");
static_assert(!std::is_copy_constructible_v<HostArray> && std::is_nothrow_move_constructible_v<HostArray> &&
              std::is_nothrow_move_assignable_v<ContextArray>);

TEST(DeviceArray, StatelessResizeIsExactReserveOnlyGrowsZeroHoldsNothing) {
  {
    HostArray a(10);
    EXPECT_EQ(a.size(), 10u);
    EXPECT_EQ(a.bytes(), 10 * sizeof(int));
    int* p = a.data();
    a.reserve(5);  // never shrinks
    EXPECT_EQ(a.data(), p);
    EXPECT_EQ(a.size(), 10u);
    a.resize(10);  // the same size: kept
    EXPECT_EQ(a.data(), p);
    a.resize(4);  // exact
    EXPECT_EQ(a.size(), 4u);
    a.reserve(20);
    EXPECT_EQ(a.size(), 20u);
    EXPECT_EQ(HostAlloc::live, 1);
    a.resize(0);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(HostAlloc::live, 0);
    a.resize(3);
    HostArray b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(b.size(), 3u);
    EXPECT_EQ(HostAlloc::live, 1);
  }
  EXPECT_EQ(HostAlloc::live, 0);  // freed by the destructor
}

TEST(DeviceArray, ReserveKeepsTheAllocationWhenLargeEnoughInTheSameContext) {
  auto ctx = std::make_shared<Context>();
  ContextArray a;
  a.reserve(100, ContextAlloc(ctx));
  int* p = a.data();
  ASSERT_NE(p, nullptr);
  a.reserve(50, ContextAlloc(ctx));
  a.reserve(100, ContextAlloc(ctx));
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(a.size(), 100u);
  EXPECT_EQ(ctx->allocs, 1);
  a.reserve(200, ContextAlloc(ctx));  // grows: the old array freed in its context first
  EXPECT_EQ(a.size(), 200u);
  EXPECT_EQ(ctx->allocs, 2);
  EXPECT_EQ(ctx->released, std::vector<size_t>{100 * sizeof(int)});
  a.reserve(300);  // without a policy: the current one
  EXPECT_EQ(ctx->allocs, 3);
  EXPECT_EQ(a.policy().context, ctx);
}

TEST(DeviceArray, ReserveInAnotherContextFreesInTheOldOneFirst) {
  auto one = std::make_shared<Context>(), two = std::make_shared<Context>();
  ContextArray a(100, ContextAlloc(one));
  a.reserve(10, ContextAlloc(two));  // large enough, but another context's
  EXPECT_EQ(one->released, std::vector<size_t>{100 * sizeof(int)});
  EXPECT_EQ(two->allocs, 1);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(a.policy().context, two);
  EXPECT_EQ(one.use_count(), 1);  // no longer kept alive by the array
}

TEST(DeviceArray, ResetAndMovesLeaveNoContextBehind) {
  auto ctx = std::make_shared<Context>();
  ContextArray a;
  a.reserve(0, ContextAlloc(ctx));  // zero elements: no allocation, no context
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(ctx.use_count(), 1);
  a.reserve(8, ContextAlloc(ctx));
  EXPECT_EQ(ctx.use_count(), 2);
  {
    ContextArray b = std::move(a);
    EXPECT_EQ(a.policy().context, nullptr);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(ctx.use_count(), 2);
    a = std::move(b);
  }
  EXPECT_EQ(ctx.use_count(), 2);
  EXPECT_TRUE(ctx->released.empty());
  a.reset();
  EXPECT_EQ(ctx->released, std::vector<size_t>{8 * sizeof(int)});
  EXPECT_EQ(ctx.use_count(), 1);
  EXPECT_EQ(a.policy().context, nullptr);
  { ContextArray c(4, ContextAlloc(ctx)); }
  EXPECT_EQ(ctx->released.size(), 2u);  // the destructor frees in the context
  EXPECT_EQ(ctx.use_count(), 1);
}

TEST(DeviceArray, AFailedAllocationThrowsCudaErrorAndLeavesTheArrayEmpty) {
  auto ctx = std::make_shared<Context>();
  ctx->limit = 1000;
  ContextArray a(10, ContextAlloc(ctx));
  EXPECT_THROW(a.reserve(1000, ContextAlloc(ctx)), CudaError);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(ctx->released, std::vector<size_t>{10 * sizeof(int)});  // the old array is not kept stale
  EXPECT_EQ(ctx.use_count(), 1);
  ContextArray none;
  EXPECT_THROW(none.resize(1), CudaError);  // the empty policy has no context to allocate in
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace prism::gpu
