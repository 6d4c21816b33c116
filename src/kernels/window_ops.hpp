// The arithmetic of one output element of the convolution and pooling kernels (kernels.hpp,
// "convolution and pooling"), written once for the CPU loops (cpu/conv.cpp) and the CUDA kernels
// (src/cuda/conv.cu): every function is __host__ __device__ and computes element e of its output
// from the inputs alone, so any split of the elements over threads or blocks gives the same bits.
// The CPU's loops walk whole rows and planes where that is faster, giving each element these
// terms in this order (Note [conv loops] in cpu/conv.cpp), so both devices give the same bits.
//
// Rules: a sum is taken by the accumulator the caller passes, in the order written here: f64 sums
// correctly rounded (exact_sum on the CPU, ExactSum on CUDA: the same bits), f32 sums in double in
// this order, rounded once (OrderedSum, the same on both devices). Backward kernels gather (each
// input pixel sums the windows that hold it), so no two threads write one element: no atomics.
// Layouts: images (N, C, H, W) and planes (N*C planes of H*W), row-major; a plane index is h*W + w.
#pragma once

#include <cstdint>
#include <limits>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD
#include "tapegrad/kernels/kernels.hpp"  // Window2d

namespace tapegrad::kernels {

// The f32 sums' accumulator on both devices: double, in the order of the adds.
struct OrderedSum {
  double total = 0.0;
  TG_HD void add(double v) { total += v; }
  TG_HD double result() const { return total; }
};

// The window positions o (0 <= o < out) whose windows hold input row (or column) h: those with
// o * stride - pad <= h < o * stride - pad + kernel, that is first..last (none when first > last).
struct WindowSpan {
  int64_t first, last;
};
TG_HD inline WindowSpan windows_holding(int64_t h, int64_t kernel, int64_t stride, int64_t pad, int64_t out) {
  const int64_t top = h + pad;            // h in padded coordinates: o * stride <= top
  const int64_t low = top - kernel + 1;   // and o * stride >= low
  WindowSpan s;
  s.first = low <= 0 ? 0 : (low + stride - 1) / stride;
  s.last = top / stride < out - 1 ? top / stride : out - 1;
  return s;
}

// cols (C*kh*kw, N*out_h*out_w)[r, c], r = (ci, i, j), c = (n, oh, ow):
// x[n, ci, oh * stride_h - pad_h + i, ow * stride_w - pad_w + j], 0 in the padding.
template <class T>
TG_HD T im2col_value(const T* x, const Window2d& w, int64_t C, int64_t H, int64_t W, int64_t r, int64_t c) {
  const int64_t positions = w.out_h * w.out_w, taps = w.kernel_h * w.kernel_w;
  const int64_t n = c / positions, oh = c % positions / w.out_w, ow = c % w.out_w;
  const int64_t ci = r / taps, i = r % taps / w.kernel_w, j = r % w.kernel_w;
  const int64_t h = oh * w.stride_h - w.pad_h + i, v = ow * w.stride_w - w.pad_w + j;
  return h >= 0 && h < H && v >= 0 && v < W ? x[((n * C + ci) * H + h) * W + v] : T(0);
}

// dx (N, C, H, W)[e] = the sum of every cols (C*kh*kw, N*out_h*out_w) entry that im2col_value
// copied x[e] to, windows in (oh, ow) order.
template <class T, class Sum>
TG_HD T col2im_value(const T* cols, const Window2d& w, int64_t N, int64_t C, int64_t H, int64_t W, int64_t e,
                     Sum& sum) {
  const int64_t v = e % W, h = e / W % H, ci = e / (W * H) % C, n = e / (W * H * C);
  const int64_t positions = w.out_h * w.out_w, taps = w.kernel_h * w.kernel_w, width = N * positions;
  const WindowSpan rows = windows_holding(h, w.kernel_h, w.stride_h, w.pad_h, w.out_h);
  const WindowSpan columns = windows_holding(v, w.kernel_w, w.stride_w, w.pad_w, w.out_w);
  for (int64_t oh = rows.first; oh <= rows.last; ++oh) {
    const int64_t i = h + w.pad_h - oh * w.stride_h;
    for (int64_t ow = columns.first; ow <= columns.last; ++ow) {
      const int64_t j = v + w.pad_w - ow * w.stride_w;
      sum.add(cols[(ci * taps + i * w.kernel_w + j) * width + n * positions + oh * w.out_w + ow]);
    }
  }
  return static_cast<T>(sum.result());
}

// out (N, O, out_h, out_w)[e] = cols (O, N*out_h*out_w)[o, n*out_h*out_w + p] (+ bias[o])
template <class T>
TG_HD T columns_to_planes_value(const T* cols, const T* bias, int64_t N, int64_t O, int64_t positions, int64_t e) {
  const int64_t p = e % positions, o = e / positions % O, n = e / (positions * O);
  const T y = cols[o * N * positions + n * positions + p];
  return bias ? y + bias[o] : y;
}

// rows (N*out_h*out_w, O)[e] = dy (N, O, out_h, out_w)[n, o, p], e = (n*out_h*out_w + p)*O + o
template <class T>
TG_HD T planes_to_rows_value(const T* dy, int64_t O, int64_t positions, int64_t e) {
  const int64_t o = e % O, p = e / O % positions, n = e / (O * positions);
  return dy[(n * O + o) * positions + p];
}

// The window of output cell (oh, ow) of a pool over a plane of H x W: its rows h0..h1-1 and
// columns v0..v1-1 clipped to the image.
struct PoolCell {
  int64_t h0, h1, v0, v1;
};
TG_HD inline PoolCell pool_cell(const Window2d& w, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  PoolCell c;
  c.h0 = oh * w.stride_h - w.pad_h;
  c.v0 = ow * w.stride_w - w.pad_w;
  c.h1 = c.h0 + w.kernel_h < H ? c.h0 + w.kernel_h : H;
  c.v1 = c.v0 + w.kernel_w < W ? c.v0 + w.kernel_w : W;
  c.h0 = c.h0 > 0 ? c.h0 : 0;
  c.v0 = c.v0 > 0 ? c.v0 : 0;
  return c;
}

// Max pool cell (oh, ow) of one plane: the window's max over the plane's pixels (the padding is
// -inf and never wins) and its plane index, PyTorch's CPU rule: start from -inf at the window's
// first pixel, then take every value that is larger, or NaN (so the first max wins a tie, and the
// last NaN wins).
template <class T, class I>
TG_HD void max_pool_at(const T* plane, const Window2d& w, int64_t H, int64_t W, int64_t oh, int64_t ow, T* out,
                       I* index) {
  const PoolCell c = pool_cell(w, H, W, oh, ow);
  T top = -std::numeric_limits<T>::infinity();
  int64_t at = c.h0 * W + c.v0;
  for (int64_t h = c.h0; h < c.h1; ++h)
    for (int64_t v = c.v0; v < c.v1; ++v) {
      const T value = plane[h * W + v];
      const bool take = value > top || value != value;  // selects, not branches: random data mispredicts
      top = take ? value : top;
      at = take ? h * W + v : at;
    }
  *out = top;
  *index = static_cast<I>(at);
}

// Max pool output cell e of x (N, C, H, W): max_pool_at in its plane.
template <class T, class I>
TG_HD void max_pool_value(const T* x, const Window2d& w, int64_t H, int64_t W, int64_t e, T* out, I* index) {
  const int64_t ow = e % w.out_w, oh = e / w.out_w % w.out_h, plane = e / (w.out_w * w.out_h);
  max_pool_at(x + plane * H * W, w, H, W, oh, ow, out, index);
}

// Avg pool cell (oh, ow) of one plane: the sum of the window's pixels (the padding adds 0) /
// (kh * kw), the padding counted (PyTorch's count_include_pad), rows then columns.
template <class T, class Sum>
TG_HD T avg_pool_at(const T* plane, const Window2d& w, int64_t H, int64_t W, int64_t oh, int64_t ow, Sum& sum) {
  const PoolCell c = pool_cell(w, H, W, oh, ow);
  for (int64_t h = c.h0; h < c.h1; ++h)
    for (int64_t v = c.v0; v < c.v1; ++v) sum.add(plane[h * W + v]);
  return static_cast<T>(sum.result() / static_cast<double>(w.kernel_h * w.kernel_w));
}

// Avg pool output cell e of x (N, C, H, W): avg_pool_at in its plane.
template <class T, class Sum>
TG_HD T avg_pool_value(const T* x, const Window2d& w, int64_t H, int64_t W, int64_t e, Sum& sum) {
  const int64_t ow = e % w.out_w, oh = e / w.out_w % w.out_h, plane = e / (w.out_w * w.out_h);
  return avg_pool_at(x + plane * H * W, w, H, W, oh, ow, sum);
}

// A pool's dx (N, C, H, W)[e]: the sum of dy over the windows that hold pixel e, in (oh, ow)
// order; max pool (indices defined) only those whose index names e, avg pool all of them, the
// sum / (kh * kw).
template <class T, class I, class Sum>
TG_HD T pool_backward_value(const T* dy, const I* indices, const Window2d& w, int64_t H, int64_t W, int64_t e,
                            Sum& sum) {
  const int64_t v = e % W, h = e / W % H, plane = e / (W * H), positions = w.out_h * w.out_w;
  const WindowSpan rows = windows_holding(h, w.kernel_h, w.stride_h, w.pad_h, w.out_h);
  const WindowSpan columns = windows_holding(v, w.kernel_w, w.stride_w, w.pad_w, w.out_w);
  for (int64_t oh = rows.first; oh <= rows.last; ++oh)
    for (int64_t ow = columns.first; ow <= columns.last; ++ow) {
      const int64_t cell = plane * positions + oh * w.out_w + ow;
      if (!indices || static_cast<int64_t>(indices[cell]) == h * W + v) sum.add(dy[cell]);
    }
  if (indices) return static_cast<T>(sum.result());
  return static_cast<T>(sum.result() / static_cast<double>(w.kernel_h * w.kernel_w));
}

}  // namespace tapegrad::kernels
