// CUDA elementwise kernels: fill, unary ops and their backward, binary ops, scale.
//
// Rule: element i is computed from elements i only, the unary ops by the very functor the CPU
// loop runs (src/kernels/unary_ops.hpp), so an output may alias an input and the results equal
// the CPU's bit for bit, except where a functor calls f32 exp/log/tanh or f64 tanh, which are
// CUDA's own functions (within a few ulp), and f64 exp and log, correctly rounded here and the C
// library's on the CPU (Note [exp and log on each device]).
#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/binary_ops.hpp"
#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

// out (n,) = value
template <class T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  chain_start();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// out (n,) = scalar[0] / divisor, in double, rounded once to T
template <class T>
__global__ void fill_from_scalar_kernel(T* out, const T* scalar, double divisor, int64_t n) {
  const T value = static_cast<T>(static_cast<double>(scalar[0]) / divisor);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// out[i] = f(in_0[i], in_1[i], ...) for i < n, a Pack of elements per thread and step where every
// pointer is aligned (Note [packed loops]), element by element otherwise and for the tail.
template <class T, int K, class Fn>
__device__ void map_packed(int64_t n, bool packed, T* out, const T* const (&in)[K], Fn f) {
  constexpr int N = Pack<T>::N;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  int64_t done = 0;
  if (packed) {
    const int64_t packs = n / N;
    for (int64_t p = first; p < packs; p += step) {
      Pack<T> v[K], r;
      for (int k = 0; k < K; ++k) v[k] = reinterpret_cast<const Pack<T>*>(in[k])[p];
      for (int j = 0; j < N; ++j) {
        T args[K];
        for (int k = 0; k < K; ++k) args[k] = v[k].v[j];
        r.v[j] = f(args);
      }
      reinterpret_cast<Pack<T>*>(out)[p] = r;
    }
    done = packs * N;
  }
  for (int64_t i = done + first; i < n; i += step) {
    T args[K];
    for (int k = 0; k < K; ++k) args[k] = in[k][i];
    out[i] = f(args);
  }
}

// y (n,) = F::forward(x): the op's functor (unary_ops.hpp), the CPU loop's expression
template <class F, class T>
__global__ void unary_kernel(const T* x, T* y, int64_t n, bool packed) {
  const T* const in[1] = {x};
  map_packed<T, 1>(n, packed, y, in, [](const T (&v)[1]) { return F::forward(v[0]); });
}

// dx (n,) = F::backward(x, y, dy), given x and y = f(x); only the one of x and y that the backward
// reads is loaded (F::backward_reads_y), the other passed as 0
template <class F, class T>
__global__ void unary_backward_kernel(const T* x, const T* y, const T* dy, T* dx, int64_t n, bool packed) {
  const T* const in[2] = {F::backward_reads_y ? y : x, dy};
  map_packed<T, 2>(n, packed, dx, in, [](const T (&v)[2]) {
    return F::backward_reads_y ? F::backward(T(0), v[0], v[1]) : F::backward(v[0], T(0), v[1]);
  });
}

// out (n,) = a op b, F the op's functor (binary_ops.hpp)
template <class F, class T>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n, bool packed) {
  const T* const in[2] = {a, b};
  map_packed<T, 2>(n, packed, out, in, [](const T (&v)[2]) { return F::forward(v[0], v[1]); });
}

// ---- bf16 storage (Note [bf16 elementwise] in src/kernels/cpu/elementwise.cpp): each element
// widened to f32, computed by the f32 functor, a bf16 result rounded once; 8 elements a thread and
// step where every pointer is aligned (one 16-byte bf16 load, two f32 ones), one by one otherwise.
using kernels::bf16;

__device__ inline void load8(const float* p, int64_t i, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[2 * i], b = reinterpret_cast<const float4*>(p)[2 * i + 1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ inline void load8(const bf16* p, int64_t i, float (&v)[8]) {
  const uint4 u = reinterpret_cast<const uint4*>(p)[i];
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) v[2 * k] = __uint_as_float(w[k] << 16), v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
}
__device__ inline void store8(float* p, int64_t i, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ inline void store8(bf16* p, int64_t i, const float (&v)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = kernels::pack_bf16x2(v[2 * k], v[2 * k + 1]);
  reinterpret_cast<uint4*>(p)[i] = make_uint4(w[0], w[1], w[2], w[3]);
}

// out[i] = f(in_0[i], ...) over f32 or bf16 storage, in f32 (the K inputs share a type I)
template <class I, class O, int K, class Fn>
__device__ void map_wide(int64_t n, bool packed, O* out, const I* const (&in)[K], Fn f) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  int64_t done = 0;
  if (packed) {
    const int64_t packs = n / 8;
    for (int64_t p = first; p < packs; p += step) {
      float v[K][8], r[8];
      for (int k = 0; k < K; ++k) load8(in[k], p, v[k]);
      for (int j = 0; j < 8; ++j) {
        float args[K];
        for (int k = 0; k < K; ++k) args[k] = v[k][j];
        r[j] = f(args);
      }
      store8(out, p, r);
    }
    done = packs * 8;
  }
  for (int64_t i = done + first; i < n; i += step) {
    float args[K];
    for (int k = 0; k < K; ++k) args[k] = kernels::convert<float>(in[k][i]);
    out[i] = kernels::convert<O>(f(args));
  }
}

template <class F>
__global__ void unary_bf16_kernel(const bf16* x, bf16* y, int64_t n, bool packed) {
  const bf16* const in[1] = {x};
  map_wide<bf16, bf16, 1>(n, packed, y, in, [](const float (&v)[1]) { return F::forward(v[0]); });
}

template <class F>
__global__ void unary_backward_bf16_kernel(const bf16* x, const bf16* y, const bf16* dy, bf16* dx, int64_t n,
                                           bool packed) {
  const bf16* const in[2] = {F::backward_reads_y ? y : x, dy};  // as unary_backward_kernel
  map_wide<bf16, bf16, 2>(n, packed, dx, in, [](const float (&v)[2]) {
    return F::backward_reads_y ? F::backward(0.0f, v[0], v[1]) : F::backward(v[0], 0.0f, v[1]);
  });
}

// out (n,) = a op b with a, b, out each f32 or bf16
template <class F, class A, class B, class O>
__global__ void binary_wide_kernel(const A* a, const B* b, O* out, int64_t n, bool packed) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  int64_t done = 0;
  if (packed) {
    const int64_t packs = n / 8;
    for (int64_t p = first; p < packs; p += step) {
      float x[8], y[8], r[8];
      load8(a, p, x);
      load8(b, p, y);
      for (int j = 0; j < 8; ++j) r[j] = F::forward(x[j], y[j]);
      store8(out, p, r);
    }
    done = packs * 8;
  }
  for (int64_t i = done + first; i < n; i += step)
    out[i] = kernels::convert<O>(F::forward(kernels::convert<float>(a[i]), kernels::convert<float>(b[i])));
}

// y (n,) = x * s
template <class T>
__global__ void scale_kernel(const T* x, T s, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] * s;
}

// ----------------------------------------------------------------------------
// kernel launchers

void fill(Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("fill", out.dtype(), [&]<class T>() {
    launch_chained(fill_kernel<T>, blocks_for(n), kBlock, stream_for(out), mdata<T>(out), static_cast<T>(value), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("fill_from_scalar", out.dtype(), [&]<class T>() {
    fill_from_scalar_kernel<<<blocks_for(n), kBlock, 0, stream_for(out)>>>(mdata<T>(out), cdata<T>(scalar), divisor, n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void unary(Unary op, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::bf16) {
    const bool packed = packable({x.raw_data(), y.raw_data()});
    kernels::visit_unary(op, [&]<class F>() {
      unary_bf16_kernel<F><<<blocks_for(packed ? n / 8 + 1 : n), kBlock, 0, stream_for(x)>>>(cdata<bf16>(x),
                                                                                            mdata<bf16>(y), n, packed);
      TG_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      const bool packed = packable({x.raw_data(), y.raw_data()});
      unary_kernel<F, T><<<blocks_for(packed ? n / Pack<T>::N + 1 : n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), mdata<T>(y),
                                                                                                  n, packed);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::bf16) {
    const bool packed = packable({x.raw_data(), y.raw_data(), dy.raw_data(), dx.raw_data()});
    kernels::visit_unary(op, [&]<class F>() {
      unary_backward_bf16_kernel<F><<<blocks_for(packed ? n / 8 + 1 : n), kBlock, 0, stream_for(x)>>>(
          cdata<bf16>(x), cdata<bf16>(y), cdata<bf16>(dy), mdata<bf16>(dx), n, packed);
      TG_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      const bool packed = packable({x.raw_data(), y.raw_data(), dy.raw_data(), dx.raw_data()});
      unary_backward_kernel<F, T><<<blocks_for(packed ? n / Pack<T>::N + 1 : n), kBlock, 0, stream_for(x)>>>(
          cdata<T>(x), cdata<T>(y), cdata<T>(dy), mdata<T>(dx), n, packed);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

// Equal shapes: a flat packed loop; broadcasting walks (strided.cu).
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  const bool packed = packable({a.raw_data(), b.raw_data(), out.raw_data()});
  if (a.dtype() == DType::bf16 || b.dtype() == DType::bf16 || out.dtype() == DType::bf16) {  // equal shapes (the facade)
    if (n == 0) return;
    kernels::visit_binary(op, [&]<class F>() {
      auto run = [&]<class A, class B, class O>() {
        binary_wide_kernel<F, A, B, O><<<blocks_for(packed ? n / 8 + 1 : n), kBlock, 0, stream_for(a)>>>(
            cdata<A>(a), cdata<B>(b), mdata<O>(out), n, packed);
        TG_CUDA_CHECK_LAUNCH();
      };
      auto with_b = [&]<class A>() {
        if (b.dtype() == DType::bf16) out.dtype() == DType::bf16 ? run.template operator()<A, bf16, bf16>() : run.template operator()<A, bf16, float>();
        else out.dtype() == DType::bf16 ? run.template operator()<A, float, bf16>() : run.template operator()<A, float, float>();
      };
      if (a.dtype() == DType::bf16) with_b.template operator()<bf16>();
      else with_b.template operator()<float>();
    });
    return;
  }
  const bool integer = out.dtype() == DType::i32 || out.dtype() == DType::i64;
  if (!(a.shape() == b.shape()) || integer) return binary_walk(op, a, b, out);
  if (n == 0) return;
  kernels::visit_binary(op, [&]<class F>() {
    dispatch_float(F::name, a.dtype(), [&]<class T>() {
      binary_kernel<F, T><<<blocks_for(packed ? n / Pack<T>::N + 1 : n), kBlock, 0, stream_for(a)>>>(
          cdata<T>(a), cdata<T>(b), mdata<T>(out), n, packed);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void scale(const Tensor& x, double s, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float("scale", x.dtype(), [&]<class T>() {
    scale_kernel<<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), static_cast<T>(s), mdata<T>(y), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tapegrad::cuda
