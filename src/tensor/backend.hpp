// The device seam: memory (allocate, free, copy, fill) per device type. The graph layer reaches a
// device only through this interface; src/cuda registers the CUDA implementation when built with it.
//
// Rule: nothing in src/graph or src/ops includes a CUDA header. A device that is not built in
// answers with a DeviceError that says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tapegrad/tensor/dtype.hpp"

namespace tapegrad {

// Device work recorded once and replayed with one launch (a CUDA graph). Made by capture() below.
struct CapturedGraph {
  virtual ~CapturedGraph() = default;
  // Queues the recorded work again on the device's stream; returns without waiting for it.
  virtual void replay() = 0;
  // The work items recorded (kernels, copies, fills).
  virtual size_t nodes() const = 0;
};

struct DeviceBackend {
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) noexcept = 0;
  // Copies nbytes between any two devices (either side may be the host). Synchronous for the host side.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) = 0;
  virtual void memset_zero(void* ptr, size_t nbytes, int device_index) = 0;
  // Waits for the device's queued work and throws what its kernels recorded (an out-of-range index).
  virtual void synchronize(int /*device_index*/) {}
  // Records the device work that body queues, without running it (see capture() below).
  // The default refuses: a device type without graphs.
  virtual std::unique_ptr<CapturedGraph> capture(int device_index, const std::function<void()>& body);
};

// The backend for a device type; throws DeviceError if that device type is not built in.
DeviceBackend& backend_for(DeviceType type);

// Called once by src/cuda at static initialization when tapegrad is built with CUDA.
void register_backend(DeviceType type, DeviceBackend* backend);

// Waits for `device` and reports its kernels' recorded errors as tapegrad::Error (a no-op on the
// CPU, whose kernels throw at once). Apps call it at the end of a step.
void synchronize(Device device);

// Records the device work that `body` queues on `device` as one graph, without running any of it;
// replay() then runs it, as often as asked, with one launch each time. Rules (Note [graph
// capture] in src/cuda/capture.cu):
// - body's host code runs once, at capture: the tape it records, the counters it moves, the
//   kernel arguments it computes are baked in. What must change between replays lives in device
//   memory and is written before replay() (AdamW::write_schedule does that for its step scalars).
// - body must not wait for the device: a copy to the host, item() or synchronize() inside it throw
//   Error, and nothing is captured.
// - tensors that body allocates come from a pool reserved for the graph until it is destroyed;
//   those still alive after capture (a loss it returns) are rewritten by every replay.
// Throws DeviceError on the CPU, whose ops run as they are called, and without CUDA.
std::unique_ptr<CapturedGraph> capture(Device device, const std::function<void()>& body);

// Host fallbacks: the number of times an op ran on the host although its inputs live on a device.
// Native-only runs (bob --device cuda) refuse to go on when this moves.
uint64_t host_fallback_count();
void note_host_fallback(const char* op);

}  // namespace tapegrad
