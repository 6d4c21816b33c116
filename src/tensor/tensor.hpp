// Tensor: a cheap handle to shared storage (bytes on one device) + dtype + shape.
//
// Rules: storage is contiguous and row-major; copying a Tensor copies the handle, not the bytes
// (clone() copies bytes); a kernel writes into an output tensor its caller allocated. Element
// access through data<T>() (reads, const T*) and mutable_data<T>() (writes) is for host tensors
// only and checks the dtype; a write into a tensor that already holds a value goes through
// copy_from, zero_, mutable_data or an optimizer, which count it (version()).
#pragma once

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "tapegrad/tensor/backend.hpp"
#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/error.hpp"
#include "tapegrad/tensor/shape.hpp"

namespace tapegrad {

// Bytes on one device, shared by every Tensor handle that points at them (intrusive count, one
// allocation: host storage keeps its header and bytes in one block from a per-thread cache).
class Storage {
 public:
  static Storage* create(size_t nbytes, Device device);
  // A view: nbytes of `base`'s bytes from byte_offset, sharing them and their version count (a
  // write through either is a write to both); it keeps the owner alive. A view of a view is a view
  // of its owner.
  static Storage* create_view(Storage* base, size_t byte_offset, size_t nbytes);
  void retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy();
  }
  uint32_t use_count() const noexcept { return refs_.load(std::memory_order_acquire); }
  // In-place writes so far (Note [saved versions] in src/graph/graph.cpp).
  uint32_t version() const noexcept { return (owner_ ? owner_ : this)->version_.load(std::memory_order_relaxed); }
  void bump_version() noexcept { (owner_ ? owner_ : this)->version_.fetch_add(1, std::memory_order_relaxed); }
  // No other handle reaches these bytes: this storage has one handle and, for a view, its owner
  // is held by this view alone.
  bool sole() const noexcept { return use_count() == 1 && (!owner_ || owner_->use_count() == 1); }

  void* data = nullptr;
  size_t nbytes = 0;
  Device device;

 private:
  Storage() = default;
  void destroy() noexcept;
  std::atomic<uint32_t> refs_{1};
  std::atomic<uint32_t> version_{0};
  size_t block_bytes_ = 0;  // the host block holding this header (and, on the host, the data)
  Storage* owner_ = nullptr;  // a view's owner, whose bytes it shares (retained)
};

// A tensor whose bytes cannot be had: more than fit in 64 bits, more than the host's memory and
// swap, or more than malloc found. The message names who asked (a factory, a layer), the tensor's
// dtype and shape, and the bytes: "[zeros] a f32 tensor of shape (200000, 200000) needs
// 160000000000 bytes (149.0 GiB), more than this host's memory and swap (22.9 GiB)".
class OutOfMemory : public Error {
 public:
  // `subject` is what was asked for ("a f32 tensor of shape (2, 3)"), `reason` what went wrong.
  OutOfMemory(const std::string& who, std::string subject, std::string reason)
      : Error("[" + who + "] " + subject + " " + reason), subject_(std::move(subject)), reason_(std::move(reason)) {}
  // The same failure told by another asker: a layer names its parameter ("[Linear] weight ...").
  OutOfMemory told_by(const std::string& who, const std::string& subject) const { return {who, subject, reason_}; }
  const std::string& reason() const { return reason_; }

 private:
  std::string subject_, reason_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& o) : storage_(o.storage_), shape_(o.shape_), dtype_(o.dtype_) {
    if (storage_) storage_->retain();
  }
  Tensor(Tensor&& o) noexcept : storage_(o.storage_), shape_(o.shape_), dtype_(o.dtype_) { o.storage_ = nullptr; }
  Tensor& operator=(const Tensor& o) {
    if (o.storage_) o.storage_->retain();
    if (storage_) storage_->release();
    storage_ = o.storage_;
    shape_ = o.shape_;
    dtype_ = o.dtype_;
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (storage_) storage_->release();
      storage_ = o.storage_;
      o.storage_ = nullptr;
      shape_ = o.shape_;
      dtype_ = o.dtype_;
    }
    return *this;
  }
  ~Tensor() {
    if (storage_) storage_->release();
  }

  // An uninitialised tensor; zeros() fills it with 0. A size no allocation can meet throws
  // OutOfMemory naming the factory ("empty", "zeros"), the shape and the bytes.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A host tensor holding `values` converted to dtype, then moved to `device`.
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                             Device device = Device::cpu());
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu()) {
    check_count(values.size(), shape);
    Tensor t = empty(shape, dtype_of<T>(), Device::cpu());
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return device.is_cpu() ? t : t.to(device);
  }
  static Tensor scalar(double value, DType dtype, Device device = Device::cpu());

  // An undefined tensor (default-constructed; the gradient of a value no gradient reached) has no
  // elements: numel() and nbytes() are 0, and every other accessor throws "[tensor] ... of an
  // undefined tensor" with what to do, where a read would have followed a null pointer.
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const {
    need_defined("shape()");
    return shape_;
  }
  int ndim() const { return shape().ndim(); }
  int64_t dim(int i) const { return shape()[i]; }
  int64_t numel() const { return storage_ ? shape_.numel() : 0; }
  DType dtype() const {
    need_defined("dtype()");
    return dtype_;
  }
  Device device() const {
    need_defined("device()");
    return storage_->device;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // The bytes, for kernels; nullptr for an undefined tensor (a kernel's optional operand).
  void* raw_data() const { return storage_ ? storage_->data : nullptr; }
  // The storage's count of in-place writes: copy_from, zero_, optimizer steps and mutable_data
  // move it, so the engine can tell that a value it saved was changed since (graph.hpp).
  uint32_t version() const { return storage_ ? storage_->version() : 0; }
  void mark_modified() { if (storage_) storage_->bump_version(); }  // after writing through raw_data()
  bool unique() const { return storage_ && storage_->sole(); }  // no other handle shares the bytes
  // Host elements, the dtype checked. data<T>() reads: a const T*, even through a non-const
  // handle. mutable_data<T>() writes: the same pointer, and the write is counted (version()), so a
  // backward that saved this value refuses to run on what was written (Note [saved versions]).
  template <class T> const T* data() const { return static_cast<const T*>(host_data(dtype_of<T>(), "data")); }
  template <class T> T* mutable_data() {
    T* p = static_cast<T*>(host_data(dtype_of<T>(), "mutable_data"));
    mark_modified();
    return p;
  }

  Tensor to(Device device) const;            // a copy on `device` (the same handle if already there)
  Tensor clone() const;                      // a copy of the bytes, same device
  Tensor reshape(const Shape& shape) const;  // shares storage; numel must match
  // Elements [offset, offset + shape.numel()) of this tensor, in its dtype, as a tensor of `shape`
  // that shares these bytes and their version count (PyTorch's view of a contiguous range):
  // flat_view(k * n, {n}) is row k of a (m, n) tensor. Refuses a range outside the tensor.
  Tensor flat_view(int64_t offset, const Shape& shape) const;
  void copy_from(const Tensor& src);         // bytes from src (same shape and dtype, any device)
  void zero_();

  std::vector<double> to_doubles() const;  // every element widened to double (copies to the host)
  double item() const;                       // the single element as double

 private:
  static void check_count(size_t n, const Shape& shape);
  static Tensor allocate(const Shape& shape, DType dtype, Device device, const char* who);
  void need_defined(const char* what) const {
    if (!storage_) [[unlikely]] undefined(what);
  }
  [[noreturn]] static void undefined(const char* what);
  void* host_data(DType want, const char* accessor) const;  // raw_data(), checked for data<T>()

  Storage* storage_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace tapegrad
