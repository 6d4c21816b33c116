// Tensor storage, the host backend, the backend registry and the host-fallback counter.
#include "tapegrad/tensor/tensor.hpp"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <sys/sysinfo.h>

#include "tapegrad/tensor/half.hpp"
#include "tapegrad/tensor/parallel.hpp"

namespace tapegrad {

namespace {

struct HostBackend final : DeviceBackend {
  void* allocate(size_t nbytes, int) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* ptr, size_t, int) noexcept override { std::free(ptr); }
  // Large copies and fills split over the intra-op threads (parallel.hpp).
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) override {
    TG_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "host backend copies host memory only");
    parallel_for(static_cast<int64_t>(nbytes), chunk_for(static_cast<int64_t>(nbytes), 1), [&](int64_t begin, int64_t end) {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, static_cast<size_t>(end - begin));
    });
  }
  void memset_zero(void* ptr, size_t nbytes, int) override {
    parallel_for(static_cast<int64_t>(nbytes), chunk_for(static_cast<int64_t>(nbytes), 1), [&](int64_t begin, int64_t end) {
      std::memset(static_cast<char*>(ptr) + begin, 0, static_cast<size_t>(end - begin));
    });
  }
};

HostBackend g_host;
DeviceBackend* g_backends[2] = {&g_host, nullptr};
std::atomic<uint64_t> g_host_fallbacks{0};

}  // namespace

DeviceBackend& backend_for(DeviceType type) {
  DeviceBackend* b = g_backends[static_cast<int>(type)];
  if (!b) throw DeviceError("[device] this tapegrad was built without CUDA (meson -Dcuda=enabled needs nvcc)");
  return *b;
}

void register_backend(DeviceType type, DeviceBackend* backend) { g_backends[static_cast<int>(type)] = backend; }

void synchronize(Device device) { backend_for(device.type).synchronize(device.index); }

std::unique_ptr<CapturedGraph> DeviceBackend::capture(int, const std::function<void()>&) {
  throw DeviceError("[capture] this device type cannot capture graphs");
}

std::unique_ptr<CapturedGraph> capture(Device device, const std::function<void()>& body) {
  if (device.is_cpu())
    throw DeviceError("[capture] graph capture records device work for replay; on the CPU ops run as they are "
                      "called, so call the body instead");
  return backend_for(device.type).capture(device.index, body);
}

uint64_t host_fallback_count() { return g_host_fallbacks.load(); }
void note_host_fallback(const char*) { g_host_fallbacks.fetch_add(1); }

// ---- host blocks: a per-thread cache of power-of-two blocks up to 64 KiB, so a training loop's
// small tensors reuse memory instead of going through malloc and free every op; and a cache of
// larger blocks by exact size (up to 256 MiB in all), so its large tensors, which come back at the
// same sizes every step, reuse theirs instead of being mapped and page-faulted in afresh every step
// (a 40 MB activation is 10^4 page faults each time: at 10^7 elements an elementwise chain or a
// softmax spends more time faulting than computing, docs/perf-cpu.md).

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kCachedBytesPerClass = 0;  // AddressSanitizer builds: every block goes back to malloc
constexpr size_t kCachedLargeBytes = 0;
#else
constexpr size_t kCachedBytesPerClass = size_t{1} << 20;  // up to 1 MiB of free blocks per size class
constexpr size_t kCachedLargeBytes = size_t{256} << 20;   // up to 256 MiB of free large blocks
#endif
constexpr size_t kMinBlock = 64, kMaxCachedBlock = 64 * 1024, kClasses = 11;

size_t size_class(size_t bytes) {  // kMinBlock << class >= bytes
  size_t c = 0;
  while ((kMinBlock << c) < bytes) ++c;
  return c;
}

struct LargeBlock {
  void* p;
  size_t bytes;
};

struct BlockCache {
  std::vector<void*> free[kClasses];
  std::vector<LargeBlock> large;  // free blocks above kMaxCachedBlock, least recently freed first
  size_t large_bytes = 0;
  ~BlockCache();
};
// initial-exec: the library is linked, not dlopen'ed, so its thread-locals can skip __tls_get_addr.
#define TG_TLS __attribute__((tls_model("initial-exec"))) thread_local
TG_TLS bool t_cache_gone = false;  // trivially destructible: safe to read during thread exit
TG_TLS BlockCache t_cache;
BlockCache::~BlockCache() {
  for (auto& list : free)
    for (void* p : list) std::free(p);
  for (const LargeBlock& block : large) std::free(block.p);
  t_cache_gone = true;
}

void* host_block(size_t bytes, size_t* block_bytes) {
  if (bytes <= kMaxCachedBlock) {
    size_t c = size_class(bytes);
    *block_bytes = kMinBlock << c;
    if (!t_cache_gone && !t_cache.free[c].empty()) {
      void* p = t_cache.free[c].back();
      t_cache.free[c].pop_back();
      return p;
    }
  } else {
    *block_bytes = (bytes + 63) / 64 * 64;
    if (!t_cache_gone) {
      std::vector<LargeBlock>& large = t_cache.large;
      for (size_t k = large.size(); k-- > 0;) {
        if (large[k].bytes != *block_bytes) continue;
        void* p = large[k].p;
        large.erase(large.begin() + static_cast<std::ptrdiff_t>(k));
        t_cache.large_bytes -= *block_bytes;
        return p;
      }
    }
  }
  void* p = std::aligned_alloc(64, *block_bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

void free_host_block(void* p, size_t block_bytes) {
  if (t_cache_gone) {
    std::free(p);
    return;
  }
  if (block_bytes <= kMaxCachedBlock) {
    auto& list = t_cache.free[size_class(block_bytes)];
    if ((list.size() + 1) * block_bytes <= kCachedBytesPerClass) {
      list.push_back(p);
      return;
    }
  } else if (block_bytes <= kCachedLargeBytes) {
    std::vector<LargeBlock>& large = t_cache.large;
    large.push_back({p, block_bytes});
    t_cache.large_bytes += block_bytes;
    size_t evicted = 0;  // over the limit: the least recently freed blocks go back to malloc
    for (; t_cache.large_bytes > kCachedLargeBytes; ++evicted) {
      std::free(large[evicted].p);
      t_cache.large_bytes -= large[evicted].bytes;
    }
    large.erase(large.begin(), large.begin() + static_cast<std::ptrdiff_t>(evicted));
    return;
  }
  std::free(p);
}

constexpr size_t kHeader = 64;  // the Storage header, padded so the data stays 64-byte aligned
static_assert(sizeof(Storage) <= kHeader);

}  // namespace

Storage* Storage::create(size_t nbytes, Device dev) {
  const bool host = dev.is_cpu();
  if (host && nbytes > SIZE_MAX - kHeader - 64)  // the header and the rounding to 64 bytes must fit
    throw Error("[tensor] cannot allocate " + std::to_string(nbytes) + " bytes on the host: with its header it is "
                "more than fit in 64 bits");
  size_t block = 0;
  void* mem = host_block(kHeader + (host ? nbytes : 0), &block);
  Storage* s = new (mem) Storage();
  s->nbytes = nbytes;
  s->device = dev;
  s->block_bytes_ = block;
  if (host) {
    s->data = static_cast<char*>(mem) + kHeader;
  } else {
    try {
      s->data = backend_for(dev.type).allocate(nbytes, dev.index);
    } catch (...) {
      s->~Storage();
      free_host_block(mem, block);
      throw;
    }
  }
  return s;
}

Storage* Storage::create_view(Storage* base, size_t byte_offset, size_t nbytes) {
  if (base->owner_) {
    byte_offset += static_cast<size_t>(static_cast<char*>(base->data) - static_cast<char*>(base->owner_->data));
    base = base->owner_;
  }
  size_t block = 0;
  Storage* s = new (host_block(kHeader, &block)) Storage();
  s->data = static_cast<char*>(base->data) + byte_offset;
  s->nbytes = nbytes;
  s->device = base->device;
  s->block_bytes_ = block;
  s->owner_ = base;
  base->retain();
  return s;
}

void Storage::destroy() noexcept {
  if (owner_) owner_->release();
  else if (!device.is_cpu()) backend_for(device.type).deallocate(data, nbytes, device.index);
  size_t block = block_bytes_;
  this->~Storage();
  free_host_block(this, block);
}

void Tensor::undefined(const char* what) {
  throw Error(std::string("[tensor] ") + what + " of an undefined tensor: it holds no value (a default-constructed "
              "Tensor, or the gradient of a value no gradient reached, such as a parameter the loss did not use or "
              "one after zero_grad()); check defined() first");
}

void* Tensor::host_data(DType want, const char* accessor) const {
  if (!storage_) undefined(accessor);
  if (want != dtype_)
    throw Error(std::string("[tensor] ") + accessor + "<" + dtype_name(want) + ">() on a " + dtype_name(dtype_) +
                " tensor");
  if (!storage_->device.is_cpu())
    throw Error(std::string("[tensor] ") + accessor + "<T>() on a " + storage_->device.str() +
                " tensor; call .to(cpu) first");
  return storage_->data;
}

void Tensor::check_count(size_t n, const Shape& shape) {
  if (static_cast<int64_t>(n) != shape.numel())
    throw Error("[tensor] " + std::to_string(n) + " values do not fill shape " + shape.str() + " (" +
                std::to_string(shape.numel()) + " elements)");
}

namespace {

// The host's memory and swap: a request above it can never be met (and where the kernel
// overcommits, it would be met only until its pages were touched), so it is refused before malloc
// is asked; sanitizer builds, whose allocators abort on such requests, then refuse it the same way.
// Asked only from kHostCheckBytes on: no host has less memory than that, and the system call costs
// more than the allocation of a small tensor, which a training step makes by the hundred.
constexpr size_t kHostCheckBytes = size_t{64} << 20;
uint64_t host_memory_bytes() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return UINT64_MAX;
  return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
}

std::string in_units(double bytes) {  // "149.0 GiB"
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  for (; bytes >= 1024 && u < 6; ++u) bytes /= 1024;
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", bytes, units[u]);
  return text;
}

}  // namespace

Tensor Tensor::allocate(const Shape& shape, DType dtype, Device device, const char* who) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  const std::string subject = std::string("a ") + dtype_name(dtype) + " tensor of shape " + shape.str() +
                              (device.is_cpu() ? "" : " on " + device.str());
  size_t nbytes = 0;  // numel fits an int64_t (shape.hpp); its bytes may still not fit a size_t
  if (__builtin_mul_overflow(static_cast<size_t>(shape.numel()), dtype_size(dtype), &nbytes))
    throw OutOfMemory(who, subject, "(" + std::to_string(shape.numel()) + " elements of " +
                                        std::to_string(dtype_size(dtype)) + " bytes) needs more bytes than fit in 64 bits");
  const std::string needs = "needs " + std::to_string(nbytes) + " bytes (" + in_units(static_cast<double>(nbytes)) + ")";
  if (device.is_cpu() && nbytes >= kHostCheckBytes) {
    const uint64_t host = host_memory_bytes();
    if (nbytes > host)
      throw OutOfMemory(who, subject, needs + ", more than this host's memory and swap (" +
                                          in_units(static_cast<double>(host)) + ")");
  }
  try {
    t.storage_ = Storage::create(nbytes, device);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(who, subject, needs + ", and the host could not allocate them");
  }
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return allocate(shape, dtype, device, "empty"); }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = allocate(shape, dtype, device, "zeros");
  t.zero_();
  return t;
}

void Tensor::zero_() {
  if (!storage_) return;
  backend_for(device().type).memset_zero(raw_data(), nbytes(), device().index);
  mark_modified();
}

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  check_count(values.size(), shape);
  Tensor t = allocate(shape, dtype, Device::cpu(), "from_doubles");
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    switch (dtype) {
      case DType::f64: static_cast<double*>(t.raw_data())[i] = v; break;
      case DType::f32: static_cast<float*>(t.raw_data())[i] = static_cast<float>(v); break;
      case DType::bf16: static_cast<uint16_t*>(t.raw_data())[i] = f32_to_bf16(static_cast<float>(v)); break;
      case DType::f16: static_cast<uint16_t*>(t.raw_data())[i] = f32_to_f16(static_cast<float>(v)); break;
      case DType::i32: static_cast<int32_t*>(t.raw_data())[i] = static_cast<int32_t>(v); break;
      case DType::i64: static_cast<int64_t*>(t.raw_data())[i] = static_cast<int64_t>(v); break;
      case DType::u8: static_cast<uint8_t*>(t.raw_data())[i] = static_cast<uint8_t>(v); break;
    }
  }
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) { return from_doubles({value}, Shape{}, dtype, device); }

Tensor Tensor::to(Device dst) const {
  if (!defined() || device() == dst) return *this;
  Tensor t = allocate(shape_, dtype_, dst, "to");
  t.copy_from(*this);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return *this;
  Tensor t = allocate(shape_, dtype_, device(), "clone");
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!storage_) undefined("copy_from()");
  if (!src.storage_) undefined("copy_from() from");
  if (!(src.shape_ == shape_) || src.dtype_ != dtype_)
    throw Error("[copy] cannot copy a " + std::string(dtype_name(src.dtype_)) + " " + src.shape_.str() +
                " tensor into a " + dtype_name(dtype_) + " " + shape_.str() + " one");
  Device a = device(), b = src.device();
  DeviceBackend& be = backend_for(a.is_cpu() ? b.type : a.type);
  be.copy(raw_data(), a, src.raw_data(), b, nbytes());
  mark_modified();
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (!storage_) undefined("reshape()");
  if (shape.numel() != numel())
    throw Error("[reshape] cannot reshape " + shape_.str() + " (" + std::to_string(numel()) + " elements) to " +
                shape.str() + " (" + std::to_string(shape.numel()) + " elements)");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::flat_view(int64_t offset, const Shape& shape) const {
  if (!storage_) throw Error("[flat_view] of an undefined tensor");
  if (offset < 0 || offset > numel() || shape.numel() > numel() - offset)
    throw Error("[flat_view] elements " + std::to_string(offset) + " to " + std::to_string(offset + shape.numel()) +
                " (shape " + shape.str() + ") are not inside a tensor of " + std::to_string(numel()) +
                " elements (shape " + shape_.str() + ")");
  Tensor t;
  const size_t size = dtype_size(dtype_);
  t.storage_ = Storage::create_view(storage_, static_cast<size_t>(offset) * size,
                                    static_cast<size_t>(shape.numel()) * size);
  t.shape_ = shape;
  t.dtype_ = dtype_;
  return t;
}

std::vector<double> Tensor::to_doubles() const {
  if (!storage_) undefined("to_doubles()");
  Tensor h = to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    const void* p = h.raw_data();
    switch (dtype_) {
      case DType::f64: out[i] = static_cast<const double*>(p)[i]; break;
      case DType::f32: out[i] = static_cast<const float*>(p)[i]; break;
      case DType::bf16: out[i] = bf16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::f16: out[i] = f16_to_f32(static_cast<const uint16_t*>(p)[i]); break;
      case DType::i32: out[i] = static_cast<const int32_t*>(p)[i]; break;
      case DType::i64: out[i] = static_cast<double>(static_cast<const int64_t*>(p)[i]); break;
      case DType::u8: out[i] = static_cast<const uint8_t*>(p)[i]; break;
    }
  }
  return out;
}

double Tensor::item() const {
  if (!storage_) undefined("item()");
  if (numel() != 1) throw Error("[item] needs a tensor of one element, got shape " + shape_.str());
  return to_doubles()[0];
}

}  // namespace tapegrad
