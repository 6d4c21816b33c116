// CUDA convolution and pooling kernels: im2col and col2im over the (C*kh*kw, N*Ho*Wo) columns,
// conv2d's layout changes between GEMM operands and (N, O, H, W) planes, max and average pools and
// their backwards. The CPU versions
// (src/kernels/cpu/conv.cpp) are the reference.
//
// Rules: one thread per output element, in grid-stride loops, running window_ops.hpp's function
// for it: the very code the CPU loop runs, so results equal the CPU's bit for bit (f64 sums
// correctly rounded by ExactSum, f32 sums in double in the CPU's order). Backward kernels gather
// over the windows holding a pixel: no atomics, so every run gives the same bits.
#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/kernels/window_ops.hpp"

namespace tapegrad::cuda {

using kernels::Window2d;

namespace {

// The accumulator of a T sum: ExactSum for f64 (CPU: exact_sum, the same bits), double for f32.
template <class T>
using SumOf = std::conditional_t<std::is_same_v<T, double>, ExactSum, kernels::OrderedSum>;

template <class Sum>
__device__ void check_sum(const Sum& sum, const ErrorSite& site, int64_t e) {
  if constexpr (std::is_same_v<Sum, ExactSum>)
    if (sum.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, e, ExactSum::kPartials);
}

}  // namespace

// ----------------------------------------------------------------------------
// CUDA kernels

// cols (rows, width) = (C*kh*kw, N*Ho*Wo) = im2col of x (N, C, H, W)
template <class T>
__global__ void im2col_kernel(const T* x, Window2d w, int64_t C, int64_t H, int64_t W, T* cols, int64_t rows,
                              int64_t width) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * width; e += int64_t{gridDim.x} * blockDim.x)
    cols[e] = kernels::im2col_value(x, w, C, H, W, e / width, e % width);
}

// dx (N, C, H, W) = col2im of cols
template <class T>
__global__ void col2im_kernel(const T* cols, Window2d w, int64_t N, int64_t C, int64_t H, int64_t W, T* dx,
                              int64_t n, ErrorSite site) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    SumOf<T> sum;
    dx[e] = kernels::col2im_value(cols, w, N, C, H, W, e, sum);
    check_sum(sum, site, e);
  }
}

// out (N, O, Ho, Wo) = cols (O, N*Ho*Wo) moved into planes, + bias (nullptr: none)
template <class T>
__global__ void columns_to_planes_kernel(const T* cols, const T* bias, T* out, int64_t N, int64_t O, int64_t positions,
                                         int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    out[e] = kernels::columns_to_planes_value(cols, bias, N, O, positions, e);
}

// rows (N*Ho*Wo, O) = dy (N, O, Ho, Wo) laid out as rows
template <class T>
__global__ void planes_to_rows_kernel(const T* dy, T* rows, int64_t O, int64_t positions, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    rows[e] = kernels::planes_to_rows_value(dy, O, positions, e);
}

// out, indices (N, C, Ho, Wo) = each window's max of x (N, C, H, W) and where it is
template <class T, class I>
__global__ void max_pool2d_kernel(const T* x, Window2d w, int64_t H, int64_t W, T* out, I* indices, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    kernels::max_pool_value(x, w, H, W, e, out + e, indices + e);
}

// out (N, C, Ho, Wo) = each window's sum of x (N, C, H, W) / (kh * kw)
template <class T>
__global__ void avg_pool2d_kernel(const T* x, Window2d w, int64_t H, int64_t W, T* out, int64_t n, ErrorSite site) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    SumOf<T> sum;
    out[e] = kernels::avg_pool_value(x, w, H, W, e, sum);
    check_sum(sum, site, e);
  }
}

// dx (N, C, H, W) = a pool's backward (indices: max pool; nullptr: average pool)
template <class T, class I>
__global__ void pool_backward_kernel(const T* dy, const I* indices, Window2d w, int64_t H, int64_t W, T* dx, int64_t n,
                                     ErrorSite site) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    SumOf<T> sum;
    dx[e] = kernels::pool_backward_value(dy, indices, w, H, W, e, sum);
    check_sum(sum, site, e);
  }
}

// ----------------------------------------------------------------------------
// kernel launchers

namespace {

// An ErrorSite for the f64 sums (ExactSum may run out of partials), none for f32.
template <class T>
ErrorSite sum_site(DeviceContext& ctx, const char* op) {
  return std::is_same_v<T, double> ? ctx.error_site(op, 0, 0) : ErrorSite{};
}

// dx (N, C, H, W) = a pool's backward of dy (indices: the max pool's; nullptr: the average pool's)
template <class T, class I>
void pool_backward(const char* op, const Tensor& dy, const I* indices, const Window2d& win, Tensor& dx) {
  DeviceContext& ctx = context(dx);
  pool_backward_kernel<<<blocks_for(dx.numel()), kBlock, 0, ctx.stream>>>(
      cdata<T>(dy), indices, win, dx.dim(2), dx.dim(3), mdata<T>(dx), dx.numel(), sum_site<T>(ctx, op));
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void im2col(const Tensor& x, const Window2d& win, Tensor& cols) {
  const int64_t n = cols.numel();
  if (n == 0) return;
  dispatch_float("im2col", x.dtype(), [&]<class T>() {
    im2col_kernel<<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), win, x.dim(1), x.dim(2), x.dim(3),
                                                               mdata<T>(cols), cols.dim(0), cols.dim(1));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void col2im(const Tensor& cols, const Window2d& win, Tensor& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  DeviceContext& ctx = context(dx);
  dispatch_float("col2im", cols.dtype(), [&]<class T>() {
    col2im_kernel<<<blocks_for(n), kBlock, 0, ctx.stream>>>(cdata<T>(cols), win, dx.dim(0), dx.dim(1), dx.dim(2),
                                                            dx.dim(3), mdata<T>(dx), n, sum_site<T>(ctx, "col2im"));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void conv2d_columns_to_planes(const Tensor& cols, const Tensor& bias, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("conv2d", cols.dtype(), [&]<class T>() {
    columns_to_planes_kernel<<<blocks_for(n), kBlock, 0, stream_for(out)>>>(
        cdata<T>(cols), bias.defined() ? cdata<T>(bias) : nullptr, mdata<T>(out), out.dim(0), out.dim(1),
        out.dim(2) * out.dim(3), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void conv2d_planes_to_rows(const Tensor& dy, Tensor& rows) {
  const int64_t n = rows.numel();
  if (n == 0) return;
  dispatch_float("conv2d_backward", dy.dtype(), [&]<class T>() {
    planes_to_rows_kernel<<<blocks_for(n), kBlock, 0, stream_for(dy)>>>(cdata<T>(dy), mdata<T>(rows), dy.dim(1),
                                                                        dy.dim(2) * dy.dim(3), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void max_pool2d(const Tensor& x, const Window2d& win, Tensor& out, Tensor& indices) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("max_pool2d", x.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d", indices.dtype(), [&]<class I>() {
      max_pool2d_kernel<<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), win, x.dim(2), x.dim(3),
                                                                     mdata<T>(out), mdata<I>(indices), n);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Window2d& win, Tensor& dx) {
  if (dx.numel() == 0) return;
  dispatch_float("max_pool2d_backward", dy.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d_backward", indices.dtype(), [&]<class I>() {
      pool_backward<T>("max_pool2d_backward", dy, cdata<I>(indices), win, dx);
    });
  });
}

void avg_pool2d(const Tensor& x, const Window2d& win, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceContext& ctx = context(x);
  dispatch_float("avg_pool2d", x.dtype(), [&]<class T>() {
    avg_pool2d_kernel<<<blocks_for(n), kBlock, 0, ctx.stream>>>(cdata<T>(x), win, x.dim(2), x.dim(3), mdata<T>(out), n,
                                                                sum_site<T>(ctx, "avg_pool2d"));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool2d_backward(const Tensor& dy, const Window2d& win, Tensor& dx) {
  if (dx.numel() == 0) return;
  dispatch_float("avg_pool2d_backward", dy.dtype(), [&]<class T>() {
    pool_backward<T>("avg_pool2d_backward", dy, static_cast<const int64_t*>(nullptr), win, dx);
  });
}

}  // namespace tapegrad::cuda
