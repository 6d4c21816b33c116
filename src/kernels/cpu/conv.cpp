// CPU convolution and pooling kernels: im2col and its adjoint col2im over the (C*kh*kw, N*Ho*Wo)
// columns, conv2d's layout changes, max and average pools and their backwards. Each element gets
// window_ops.hpp's arithmetic, the one the CUDA kernels run, in its order: f64 sums correctly
// rounded (exact_sum), f32 sums accumulated in double in window order and rounded once. The loops
// walk planes and rows rather than single elements (Note [conv loops]); they split over the
// intra-op threads by whole rows or planes of the output, every element computed on one thread,
// so the bits do not depend on the thread count.
//
// Note [conv loops]
// A kernel that asks window_ops.hpp for element e alone spends most of its time dividing e into
// its coordinates and clipping its window; here each loop runs over a plane or a row whose
// coordinates it knows, and the copies and sums run along contiguous rows:
// - im2col takes a plane of x at a time, copied once with its padding around it (so no window
//   needs clipping): each tap (i, j) and window row oh of it is a run of out_w pixels of padded
//   row oh*s + i, copied into cols;
// - col2im sums a plane of dx at once into a padded plane of doubles: for each window row oh (in
//   order), each tap row i and each tap column j from kw - 1 down to 0 adds its cols run into
//   padded row oh*s + i. A pixel meets its windows' rows oh in order, and within one, the
//   window column ow = (v + p - j) / s rises as j falls: every pixel gets its terms in
//   col2im_value's (oh, ow) order, in double, and is rounded once: the same bits. f64 sums stay
//   per pixel (exact_sum);
// - the pools' backwards scatter: a plane's windows in (oh, ow) order each add dy into the pixels
//   they hold (max pool: the one its index names), so each pixel again sums its windows in
//   pool_backward_value's order. Where the windows do not overlap (stride >= kernel) a pixel gets
//   at most one term, which is then exact in any dtype: 0 + dy, as the accumulators give it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/window_ops.hpp"

namespace tapegrad::cpu {

using kernels::Window2d;

namespace {

// The f64 sums' accumulator: the terms kept (on the stack while few), then one exact_sum.
class TermSum {
 public:
  void add(double v) {
    if (n_ == kStack && heap_.empty()) heap_.assign(stack_, stack_ + kStack);
    if (n_ < kStack) stack_[n_] = v;
    else heap_.push_back(v);
    ++n_;
  }
  double result() const { return exact_sum(n_ <= kStack ? stack_ : heap_.data(), n_); }

 private:
  static constexpr size_t kStack = 64;
  double stack_[kStack];
  std::vector<double> heap_;
  size_t n_ = 0;
};

// The accumulator of a T sum: a fresh one per element.
template <class T>
using SumOf = std::conditional_t<std::is_same_v<T, double>, TermSum, kernels::OrderedSum>;

// out[e] = f(e, sum) for e in [0, n), split over the threads; each element costs about `terms`
// reads and additions.
template <class T, class F>
void for_each_element(T* out, int64_t n, int64_t terms, F&& f) {
  parallel_for(n, chunk_for(n, terms * static_cast<int64_t>(sizeof(T)), Work::arithmetic),
               [&](int64_t begin, int64_t end) {
                 for (int64_t e = begin; e < end; ++e) {
                   SumOf<T> sum;
                   out[e] = f(e, sum);
                 }
               });
}

// body(plane) for each of `planes` planes of `plane_bytes` each, whole planes split over the
// threads.
template <class F>
void for_each_plane(int64_t planes, int64_t plane_bytes, Work work, F&& body) {
  parallel_for(planes, chunk_for(planes, plane_bytes, work), [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) body(q);
  });
}

// The most windows along one axis that hold one pixel: ceil(kernel / stride).
int64_t overlap(int64_t kernel, int64_t stride) { return (kernel + stride - 1) / stride; }

// Plane (n, ci) of x with its padding: `padded`, (H + 2 pad_h) x (W + 2 pad_w), holds the plane
// with zeros around it (the plane itself where there is no padding).
template <class T>
const T* padded_plane(const T* plane, const Window2d& w, int64_t H, int64_t W, T* padded) {
  if (w.pad_h == 0 && w.pad_w == 0) return plane;
  const int64_t PW = W + 2 * w.pad_w;
  std::fill(padded, padded + w.pad_h * PW, T(0));
  for (int64_t h = 0; h < H; ++h) {
    T* row = padded + (h + w.pad_h) * PW;
    std::fill(row, row + w.pad_w, T(0));
    std::copy(plane + h * W, plane + (h + 1) * W, row + w.pad_w);
    std::fill(row + w.pad_w + W, row + PW, T(0));
  }
  std::fill(padded + (H + w.pad_h) * PW, padded + (H + 2 * w.pad_h) * PW, T(0));
  return padded;
}

// f(length) with the length of a window row's run (out_w) as a compile-time constant for the
// common short ones, where a loop of unknown length costs more in its set-up (or a memmove call)
// than in its copies; f(out_w) itself otherwise.
template <class F>
void with_run_length(int64_t out_w, F&& f) {
  switch (out_w) {
    case 2: return f(std::integral_constant<int64_t, 2>{});
    case 4: return f(std::integral_constant<int64_t, 4>{});
    case 8: return f(std::integral_constant<int64_t, 8>{});
    case 16: return f(std::integral_constant<int64_t, 16>{});
    default: return f(out_w);
  }
}

// im2col's runs of one plane: tap (i, j)'s row of cols at the plane's sample holds, for each
// window (oh, ow), padded pixel (oh s + i, ow s + j). `out` is cols at row (ci, 0, 0), column
// (n, 0, 0); rows are `width` apart; out_w = w.out_w.
template <class T, class Length>
void im2col_plane(const T* padded, const Window2d& w, int64_t PW, T* out, int64_t width, Length out_w) {
  for (int64_t i = 0; i < w.kernel_h; ++i)
    for (int64_t j = 0; j < w.kernel_w; ++j) {
      T* to = out + (i * w.kernel_w + j) * width;
      for (int64_t oh = 0; oh < w.out_h; ++oh, to += out_w) {
        const T* from = padded + (oh * w.stride_h + i) * PW + j;
        if (w.stride_w == 1)
          for (int64_t ow = 0; ow < out_w; ++ow) to[ow] = from[ow];
        else
          for (int64_t ow = 0; ow < out_w; ++ow) to[ow] = from[ow * w.stride_w];
      }
    }
}

// dx's plane from cols (f32), the adjoint of im2col_plane: each run added into a padded plane of
// doubles, windows in (oh, ow) order for every pixel (Note [conv loops]), the inside rounded once.
// `cols` is at row (ci, 0, 0), column (n, 0, 0); out_w = w.out_w.
template <class Length>
void col2im_plane(const float* cols, const Window2d& w, int64_t H, int64_t W, int64_t width, float* dx, double* acc,
                  Length out_w) {
  const int64_t PW = W + 2 * w.pad_w;
  std::fill(acc, acc + (H + 2 * w.pad_h) * PW, 0.0);
  for (int64_t oh = 0; oh < w.out_h; ++oh)
    for (int64_t i = 0; i < w.kernel_h; ++i) {
      double* row = acc + (oh * w.stride_h + i) * PW;
      for (int64_t j = w.kernel_w - 1; j >= 0; --j) {
        const float* from = cols + (i * w.kernel_w + j) * width + oh * out_w;
        double* to = row + j;
        if (w.stride_w == 1)
          for (int64_t ow = 0; ow < out_w; ++ow) to[ow] += static_cast<double>(from[ow]);
        else
          for (int64_t ow = 0; ow < out_w; ++ow) to[ow * w.stride_w] += static_cast<double>(from[ow]);
      }
    }
  for (int64_t h = 0; h < H; ++h) {
    const double* row = acc + (h + w.pad_h) * PW + w.pad_w;
    for (int64_t v = 0; v < W; ++v) dx[h * W + v] = static_cast<float>(row[v]);
  }
}

// Max pool cell by cell over one plane: max_pool_at's rule (the first max, the last NaN) with its
// choices made by masks, not branches, which random data mispredicts half the time.
template <class T, class I>
void max_pool_plane(const T* plane, const Window2d& w, int64_t H, int64_t W, T* out, I* index) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  for (int64_t oh = 0; oh < w.out_h; ++oh)
    for (int64_t ow = 0; ow < w.out_w; ++ow, ++out, ++index) {
      const kernels::PoolCell c = kernels::pool_cell(w, H, W, oh, ow);
      T top = -std::numeric_limits<T>::infinity();
      int64_t at = c.h0 * W + c.v0;
      for (int64_t h = c.h0; h < c.h1; ++h)
        for (int64_t v = c.v0; v < c.v1; ++v) {
          const T value = plane[h * W + v];
          const Bits take = Bits{0} - static_cast<Bits>((value > top) | (value != value));
          top = std::bit_cast<T>((std::bit_cast<Bits>(value) & take) | (std::bit_cast<Bits>(top) & ~take));
          at ^= (at ^ (h * W + v)) & static_cast<int64_t>(static_cast<std::make_signed_t<Bits>>(take));
        }
      *out = top;
      *index = static_cast<I>(at);
    }
}

}  // namespace

void im2col(const Tensor& x, const Window2d& win, Tensor& cols) {
  const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), width = cols.dim(1);
  const int64_t planes = x.dim(0) * C, taps = win.kernel_h * win.kernel_w, positions = win.out_h * win.out_w;
  const int64_t PW = W + 2 * win.pad_w, padded_size = (H + 2 * win.pad_h) * PW;
  dispatch_float("im2col", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(cols.raw_data());
    parallel_for(planes, chunk_for(planes, taps * positions * static_cast<int64_t>(sizeof(T))),
                 [&](int64_t begin, int64_t end) {
                   std::vector<T> padded(static_cast<size_t>(padded_size));
                   with_run_length(win.out_w, [&](auto out_w) {
                     for (int64_t q = begin; q < end; ++q) {
                       const int64_t n = q / C, ci = q % C;
                       im2col_plane(padded_plane(X + q * H * W, win, H, W, padded.data()), win, PW,
                                    out + ci * taps * width + n * positions, width, out_w);
                     }
                   });
                 });
  });
}

void col2im(const Tensor& cols, const Window2d& win, Tensor& dx) {
  const int64_t N = dx.dim(0), C = dx.dim(1), H = dx.dim(2), W = dx.dim(3), width = cols.dim(1);
  const int64_t taps = win.kernel_h * win.kernel_w, positions = win.out_h * win.out_w;
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  dispatch_float("col2im", cols.dtype(), [&]<class T>() {
    const T* cols_data = static_cast<const T*>(cols.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    if constexpr (std::is_same_v<T, float>) {
      parallel_for(N * C, chunk_for(N * C, H * W * terms * 4, Work::arithmetic), [&](int64_t begin, int64_t end) {
        std::vector<double> acc(static_cast<size_t>((H + 2 * win.pad_h) * (W + 2 * win.pad_w)));
        with_run_length(win.out_w, [&](auto out_w) {
          for (int64_t q = begin; q < end; ++q) {
            const int64_t n = q / C, ci = q % C;
            col2im_plane(cols_data + ci * taps * width + n * positions, win, H, W, width, out + q * H * W, acc.data(),
                         out_w);
          }
        });
      });
    } else {
      for_each_element(out, dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
        return kernels::col2im_value(cols_data, win, N, C, H, W, e, sum);
      });
    }
  });
}

void conv2d_columns_to_planes(const Tensor& cols, const Tensor& bias, Tensor& out) {
  const int64_t N = out.dim(0), O = out.dim(1), positions = out.dim(2) * out.dim(3);
  dispatch_float("conv2d", cols.dtype(), [&]<class T>() {
    const T* src = static_cast<const T*>(cols.raw_data());
    const T* B = static_cast<const T*>(bias.raw_data());  // nullptr without a bias
    T* Y = static_cast<T*>(out.raw_data());
    // plane (n, o) of out = row o of cols at columns n*positions.., + b[o] (columns_to_planes_value)
    for_each_plane(N * O, positions * static_cast<int64_t>(sizeof(T)), Work::streaming, [&](int64_t q) {
      const int64_t n = q / O, o = q % O;
      const T* from = src + (o * N + n) * positions;
      T* to = Y + q * positions;
      if (B) {
        const T b = B[o];
        for (int64_t p = 0; p < positions; ++p) to[p] = from[p] + b;
      } else {
        std::memcpy(to, from, static_cast<size_t>(positions) * sizeof(T));
      }
    });
  });
}

void conv2d_planes_to_rows(const Tensor& dy, Tensor& rows) {
  const int64_t N = dy.dim(0), O = dy.dim(1), positions = dy.dim(2) * dy.dim(3);
  dispatch_float("conv2d_backward", dy.dtype(), [&]<class T>() {
    const T* D = static_cast<const T*>(dy.raw_data());
    T* R = static_cast<T*>(rows.raw_data());
    // sample n: its (O, positions) planes transposed into rows (positions, O), in blocks of 16
    // positions so that both sides stay in the cache
    constexpr int64_t kBlock = 16;
    for_each_plane(N, O * positions * static_cast<int64_t>(sizeof(T)), Work::streaming, [&](int64_t n) {
      const T* from = D + n * O * positions;
      T* to = R + n * positions * O;
      for (int64_t p0 = 0; p0 < positions; p0 += kBlock) {
        const int64_t p1 = std::min(positions, p0 + kBlock);
        for (int64_t o = 0; o < O; ++o)
          for (int64_t p = p0; p < p1; ++p) to[p * O + o] = from[o * positions + p];
      }
    });
  });
}

void max_pool2d(const Tensor& x, const Window2d& win, Tensor& out, Tensor& indices) {
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3), cells = win.out_h * win.out_w;
  dispatch_float("max_pool2d", x.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d", indices.dtype(), [&]<class I>() {
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(out.raw_data());
      I* index = static_cast<I*>(indices.raw_data());
      for_each_plane(planes, cells * win.kernel_h * win.kernel_w * static_cast<int64_t>(sizeof(T)), Work::arithmetic,
                     [&](int64_t q) { max_pool_plane(X + q * H * W, win, H, W, Y + q * cells, index + q * cells); });
    });
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Window2d& win, Tensor& dx) {
  const int64_t planes = dx.dim(0) * dx.dim(1), H = dx.dim(2), W = dx.dim(3), cells = win.out_h * win.out_w;
  const bool disjoint = win.stride_h >= win.kernel_h && win.stride_w >= win.kernel_w;
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  dispatch_float("max_pool2d_backward", dy.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d_backward", indices.dtype(), [&]<class I>() {
      const T* D = static_cast<const T*>(dy.raw_data());
      const I* index = static_cast<const I*>(indices.raw_data());
      T* out = static_cast<T*>(dx.raw_data());
      if (disjoint) {  // a pixel is named by one window at most: 0 + dy (Note [conv loops])
        for_each_plane(planes, H * W * static_cast<int64_t>(sizeof(T)), Work::streaming, [&](int64_t q) {
          T* plane = out + q * H * W;
          std::fill(plane, plane + H * W, T(0));
          for (int64_t c = q * cells; c < (q + 1) * cells; ++c) plane[index[c]] = T(0) + D[c];
        });
      } else if constexpr (std::is_same_v<T, float>) {  // the windows in order, each into its max's sum
        parallel_for(planes, chunk_for(planes, H * W * terms * 4, Work::arithmetic), [&](int64_t begin, int64_t end) {
          std::vector<double> acc(static_cast<size_t>(H * W));
          for (int64_t q = begin; q < end; ++q) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t c = q * cells; c < (q + 1) * cells; ++c) acc[static_cast<size_t>(index[c])] += D[c];
            for (int64_t e = 0; e < H * W; ++e) out[q * H * W + e] = static_cast<float>(acc[static_cast<size_t>(e)]);
          }
        });
      } else {
        for_each_element(out, dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
          return kernels::pool_backward_value(D, index, win, H, W, e, sum);
        });
      }
    });
  });
}

void avg_pool2d(const Tensor& x, const Window2d& win, Tensor& out) {
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3), cells = win.out_h * win.out_w;
  dispatch_float("avg_pool2d", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(out.raw_data());
    for_each_plane(planes, cells * win.kernel_h * win.kernel_w * static_cast<int64_t>(sizeof(T)), Work::arithmetic,
                   [&](int64_t q) {
                     const T* plane = X + q * H * W;
                     for (int64_t oh = 0, e = q * cells; oh < win.out_h; ++oh)
                       for (int64_t ow = 0; ow < win.out_w; ++ow, ++e) {
                         SumOf<T> sum;
                         Y[e] = kernels::avg_pool_at(plane, win, H, W, oh, ow, sum);
                       }
                   });
  });
}

void avg_pool2d_backward(const Tensor& dy, const Window2d& win, Tensor& dx) {
  const int64_t planes = dx.dim(0) * dx.dim(1), H = dx.dim(2), W = dx.dim(3);
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  const double area = static_cast<double>(win.kernel_h * win.kernel_w);
  dispatch_float("avg_pool2d_backward", dy.dtype(), [&]<class T>() {
    const T* D = static_cast<const T*>(dy.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    if constexpr (std::is_same_v<T, float>) {  // the windows in order, each into its pixels' sums
      parallel_for(planes, chunk_for(planes, H * W * terms * 4, Work::arithmetic), [&](int64_t begin, int64_t end) {
        std::vector<double> acc(static_cast<size_t>(H * W));
        for (int64_t q = begin; q < end; ++q) {
          std::fill(acc.begin(), acc.end(), 0.0);
          const float* d = D + q * win.out_h * win.out_w;
          for (int64_t oh = 0; oh < win.out_h; ++oh)
            for (int64_t ow = 0; ow < win.out_w; ++ow) {
              const kernels::PoolCell c = kernels::pool_cell(win, H, W, oh, ow);
              const double g = d[oh * win.out_w + ow];
              for (int64_t h = c.h0; h < c.h1; ++h)
                for (int64_t v = c.v0; v < c.v1; ++v) acc[static_cast<size_t>(h * W + v)] += g;
            }
          for (int64_t e = 0; e < H * W; ++e) out[q * H * W + e] = static_cast<float>(acc[static_cast<size_t>(e)] / area);
        }
      });
    } else {
      for_each_element(out, dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
        return kernels::pool_backward_value(D, static_cast<const int64_t*>(nullptr), win, H, W, e, sum);
      });
    }
  });
}

}  // namespace tapegrad::cpu
