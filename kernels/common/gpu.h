// Whether a usable CUDA GPU is present, and CUDA error helpers shared by the kernels.
#pragma once
#include <stdexcept>
#include <string>

namespace prism::gpu {

// True when this build has CUDA and the driver reports at least one device. `why` receives a
// one-line reason when it returns false ("built without CUDA", "no NVIDIA driver", ...).
bool available(std::string* why = nullptr);

// Number of CUDA devices (0 without a driver or in a CPU-only build).
int device_count();

// Name of device `id`, or an empty string.
std::string device_name(int id);

// Where an algorithm runs: kAuto = a usable GPU when there is one, else the CPU; kCuda fails
// without one.
enum class Device { kAuto, kCpu, kCuda };

// How a host thread waits for the GPU (cudaStreamSynchronize and the like): kAuto is CUDA's
// default (spin while the process has fewer active contexts than cores, else yield); kBlock sleeps
// on an OS primitive (CU_CTX_SCHED_BLOCKING_SYNC: a few microseconds more per wait, no core burnt
// spinning, which a server with more waiting threads than cores needs); kSpin, kYield force those.
enum class HostWait { kAuto, kSpin, kYield, kBlock };
// Sets it for the current device's primary context (the runtime's current device, the one the
// process's GPU work runs on; before or after the context is made); a CPU-only build or a machine
// without a GPU ignores it. Throws CudaError when the runtime refuses.
void set_host_wait(HostWait wait);
// "auto", "spin", "yield" or "block"; std::invalid_argument naming the accepted values otherwise.
HostWait parse_host_wait(const std::string& name);

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace prism::gpu

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
namespace prism::gpu {
// Throws CudaError with the call site on failure (and clears the runtime's last error, so a handled
// non-sticky error is not reported again by a later check).
void check(cudaError_t err, const char* what, const char* file, int line);
}  // namespace prism::gpu
#define PRISM_CUDA_CHECK(call) ::prism::gpu::check((call), #call, __FILE__, __LINE__)
#endif
