#include "common/gpu.h"

#include <sstream>

namespace prism::gpu {

#if defined(PRISM_HAVE_CUDA)
bool available(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) {
      // The runtime says "CUDA driver version is insufficient" when there is no driver at all,
      // which sends a user of a CPU machine looking for a driver update.
      int driver = 0;
      if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
        *why = "CUDA unavailable: no NVIDIA driver is installed (libcuda.so.1 was not found)";
      else if (err == cudaErrorInsufficientDriver)
        *why = "CUDA unavailable: the NVIDIA driver (CUDA " + std::to_string(driver / 1000) + "." +
               std::to_string(driver % 1000 / 10) + ") is older than this build's CUDA " +
               std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
               " needs: update the driver";
      else if (err == cudaErrorNoDevice)
        *why = "CUDA unavailable: the NVIDIA driver sees no GPU";
      else
        *why = std::string("CUDA unavailable: ") + cudaGetErrorString(err);
    }
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int id) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, id) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return prop.name;
}

void check(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  // The runtime also keeps the error as its last error. A non-sticky one (a failed allocation, a bad
  // launch configuration) must not be reported again by the next launch's cudaGetLastError check,
  // after the caller has handled this exception; a sticky one comes back from every later call anyway.
  cudaGetLastError();
  std::ostringstream msg;
  msg << file << ":" << line << ": " << what << ": " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
  throw CudaError(msg.str());
}

void set_host_wait(HostWait wait) {
  const unsigned flag = wait == HostWait::kSpin    ? cudaDeviceScheduleSpin
                        : wait == HostWait::kYield ? cudaDeviceScheduleYield
                        : wait == HostWait::kBlock ? cudaDeviceScheduleBlockingSync
                                                   : cudaDeviceScheduleAuto;
  // Only the current device's (the one this process's work runs on): setting another device's flags
  // would make that device current and, since CUDA 12, create its primary context (memory on a GPU
  // the process never uses).
  if (device_count() > 0) check(cudaSetDeviceFlags(flag), "cudaSetDeviceFlags", __FILE__, __LINE__);
}
#else
bool available(std::string* why) {
  if (why) *why = "this build has no CUDA (nvcc was not found when it was configured)";
  return false;
}
int device_count() { return 0; }
std::string device_name(int) { return {}; }
void set_host_wait(HostWait) {}
#endif

HostWait parse_host_wait(const std::string& name) {
  if (name == "auto") return HostWait::kAuto;
  if (name == "spin") return HostWait::kSpin;
  if (name == "yield") return HostWait::kYield;
  if (name == "block") return HostWait::kBlock;
  throw std::invalid_argument("'" + name + "' is not a GPU wait (auto, spin, yield or block)");
}

}  // namespace prism::gpu
