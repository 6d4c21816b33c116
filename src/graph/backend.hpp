// The device seam: memory (allocate, free, copy, fill) per device type. The graph layer reaches a
// device only through this interface; src/cuda registers the CUDA implementation when built with it.
//
// Rule: nothing in src/graph or src/ops includes a CUDA header. A device that is not built in
// answers with a DeviceError that says so.
#pragma once

#include <cstddef>
#include <cstdint>

#include "graph/dtype.hpp"

namespace tapegrad {

struct DeviceBackend {
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) noexcept = 0;
  // Copies nbytes between any two devices (either side may be the host). Synchronous for the host side.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) = 0;
  virtual void memset_zero(void* ptr, size_t nbytes, int device_index) = 0;
  // Waits for the device's queued work and throws what its kernels recorded (an out-of-range index).
  virtual void synchronize(int /*device_index*/) {}
};

// The backend for a device type; throws DeviceError if that device type is not built in.
DeviceBackend& backend_for(DeviceType type);

// Called once by src/cuda at static initialization when tapegrad is built with CUDA.
void register_backend(DeviceType type, DeviceBackend* backend);

// Waits for `device` and reports its kernels' recorded errors as tapegrad::Error (a no-op on the
// CPU, whose kernels throw at once). Apps call it at the end of a step.
void synchronize(Device device);

// Host fallbacks: the number of times an op ran on the host although its inputs live on a device.
// Native-only runs (bob --device cuda) refuse to go on when this moves.
uint64_t host_fallback_count();
void note_host_fallback(const char* op);

}  // namespace tapegrad
