// The normalisation and dropout facades (kernels.hpp): dispatch on the tensors' device to cpu::
// (cpu/norm.cpp) or cuda:: (src/cuda/norm.cu).
#include "tapegrad/config.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/kernels.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/cuda_kernels.hpp"
#endif

namespace tapegrad::kernels {

namespace {

const char* norm_name(Norm kind) { return kind == Norm::layer ? "layer_norm" : "rms_norm"; }

// Whether the one device of the defined tensors is a CUDA device; an error naming op without CUDA.
bool on_cuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  if (!common_device(op, tensors).is_cuda()) return false;
#if !TAPEGRAD_WITH_CUDA
  throw DeviceError(std::string("[") + op + "] this tapegrad was built without CUDA");
#endif
  return true;
}

}  // namespace

#if TAPEGRAD_WITH_CUDA
#define TG_NORM_CALL(on_device, call) \
  do {                                \
    if (on_device) return cuda::call; \
    return cpu::call;                 \
  } while (0)
#else
#define TG_NORM_CALL(on_device, call) \
  do {                                \
    (void)(on_device);                \
    return cpu::call;                 \
  } while (0)
#endif

// A bf16 y or dy goes with f32 rows (autocast's); the CPU computes through an f32 copy of it (the
// f32 y rounded once; dy widened exactly), CUDA's kernels read and write bf16 themselves: the same
// values either way.
void norm_rows(Norm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
               Tensor& mean, Tensor& rstd) {
  const bool cuda = on_cuda(norm_name(kind), {&x, &weight, &bias, &y, &mean, &rstd});
  if (!cuda && y.dtype() == DType::bf16 && x.dtype() == DType::f32) {
    Tensor wide = Tensor::empty(y.shape(), DType::f32, y.device());
    cpu::norm_rows(kind, x, weight, bias, eps, wide, mean, rstd);
    return cast(wide, y);
  }
  TG_NORM_CALL(cuda, norm_rows(kind, x, weight, bias, eps, y, mean, rstd));
}

void add_norm_rows(Norm kind, const Tensor& a, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                   Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  const bool cuda = on_cuda(norm_name(kind), {&a, &r, &weight, &bias, &sum, &y, &mean, &rstd});
  TG_CHECK(a.shape() == r.shape() && sum.shape() == a.shape(), "[add_norm_rows] a, r and sum have one shape");
#if TAPEGRAD_WITH_CUDA
  if (cuda && sum.dtype() == DType::f32)
    return cuda::add_norm_rows(kind, a, r, weight, bias, eps, sum, y, mean, rstd);
#else
  (void)cuda;
#endif
  binary(Binary::add, a, r, sum);
  norm_rows(kind, sum, weight, bias, eps, y, mean, rstd);
}

void norm_rows_backward(Norm kind, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool dx_adds) {
  const bool cuda = on_cuda(norm_name(kind), {&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias});
  if (!cuda && dy.dtype() == DType::bf16 && x.dtype() == DType::f32) {
    Tensor wide = Tensor::empty(dy.shape(), DType::f32, dy.device());
    cast(dy, wide);
    return cpu::norm_rows_backward(kind, wide, x, weight, mean, rstd, dx, dweight, dbias, dx_adds);
  }
  TG_NORM_CALL(cuda, norm_rows_backward(kind, dy, x, weight, mean, rstd, dx, dweight, dbias, dx_adds));
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  TG_NORM_CALL(on_cuda("dropout", {&x, &y}), dropout(x, p, seed, offset, y));
}

}  // namespace tapegrad::kernels
