// CPU convolution and pooling kernels: im2col and its adjoint col2im, conv2d's layout changes
// between GEMM rows and (N, O, H, W) planes, max and average pools and their backwards. Each
// element is window_ops.hpp's function, the one the CUDA kernels run; f64 sums are correctly
// rounded (exact_sum), f32 sums accumulate in double in window order. Loops split over the
// intra-op threads by output element: every element is computed whole on one thread, so the bits
// do not depend on the thread count.
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

// The most windows along one axis that hold one pixel: ceil(kernel / stride).
int64_t overlap(int64_t kernel, int64_t stride) { return (kernel + stride - 1) / stride; }

}  // namespace

void im2col(const Tensor& x, const Window2d& win, Tensor& cols) {
  const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), rows = cols.dim(0), width = cols.dim(1);
  dispatch_float("im2col", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(cols.raw_data());
    parallel_for(rows, chunk_for(rows, width * static_cast<int64_t>(sizeof(T)), Work::arithmetic),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r)
                     for (int64_t c = 0; c < width; ++c)
                       out[r * width + c] = kernels::im2col_value(X, win, C, H, W, r, c);
                 });
  });
}

void col2im(const Tensor& cols, const Window2d& win, Tensor& dx) {
  const int64_t C = dx.dim(1), H = dx.dim(2), W = dx.dim(3);
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  dispatch_float("col2im", cols.dtype(), [&]<class T>() {
    const T* cols_data = static_cast<const T*>(cols.raw_data());
    for_each_element(static_cast<T*>(dx.raw_data()), dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
      return kernels::col2im_value(cols_data, win, C, H, W, e, sum);
    });
  });
}

void conv2d_rows_to_planes(const Tensor& rows, const Tensor& bias, Tensor& out) {
  const int64_t O = out.dim(1), positions = out.dim(2) * out.dim(3), n = out.numel();
  dispatch_float("conv2d", rows.dtype(), [&]<class T>() {
    const T* R = static_cast<const T*>(rows.raw_data());
    const T* B = static_cast<const T*>(bias.raw_data());  // nullptr without a bias
    T* Y = static_cast<T*>(out.raw_data());
    parallel_for(n, chunk_for(n, static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) Y[e] = kernels::rows_to_planes_value(R, B, O, positions, e);
    });
  });
}

void conv2d_planes_to_rows(const Tensor& dy, Tensor& rows) {
  const int64_t O = dy.dim(1), positions = dy.dim(2) * dy.dim(3), n = rows.numel();
  dispatch_float("conv2d_backward", dy.dtype(), [&]<class T>() {
    const T* D = static_cast<const T*>(dy.raw_data());
    T* R = static_cast<T*>(rows.raw_data());
    parallel_for(n, chunk_for(n, static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) R[e] = kernels::planes_to_rows_value(D, O, positions, e);
    });
  });
}

void max_pool2d(const Tensor& x, const Window2d& win, Tensor& out, Tensor& indices) {
  const int64_t H = x.dim(2), W = x.dim(3), n = out.numel();
  dispatch_float("max_pool2d", x.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d", indices.dtype(), [&]<class I>() {
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(out.raw_data());
      I* index = static_cast<I*>(indices.raw_data());
      const int64_t terms = win.kernel_h * win.kernel_w * static_cast<int64_t>(sizeof(T));
      parallel_for(n, chunk_for(n, terms, Work::arithmetic), [&](int64_t begin, int64_t end) {
        for (int64_t e = begin; e < end; ++e) kernels::max_pool_value(X, win, H, W, e, Y + e, index + e);
      });
    });
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Window2d& win, Tensor& dx) {
  const int64_t H = dx.dim(2), W = dx.dim(3);
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  dispatch_float("max_pool2d_backward", dy.dtype(), [&]<class T>() {
    dispatch_index("max_pool2d_backward", indices.dtype(), [&]<class I>() {
      const T* D = static_cast<const T*>(dy.raw_data());
      const I* index = static_cast<const I*>(indices.raw_data());
      for_each_element(static_cast<T*>(dx.raw_data()), dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
        return kernels::pool_backward_value(D, index, win, H, W, e, sum);
      });
    });
  });
}

void avg_pool2d(const Tensor& x, const Window2d& win, Tensor& out) {
  const int64_t H = x.dim(2), W = x.dim(3);
  dispatch_float("avg_pool2d", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    for_each_element(static_cast<T*>(out.raw_data()), out.numel(), win.kernel_h * win.kernel_w,
                     [&](int64_t e, SumOf<T>& sum) { return kernels::avg_pool_value(X, win, H, W, e, sum); });
  });
}

void avg_pool2d_backward(const Tensor& dy, const Window2d& win, Tensor& dx) {
  const int64_t H = dx.dim(2), W = dx.dim(3);
  const int64_t terms = overlap(win.kernel_h, win.stride_h) * overlap(win.kernel_w, win.stride_w);
  dispatch_float("avg_pool2d_backward", dy.dtype(), [&]<class T>() {
    const T* D = static_cast<const T*>(dy.raw_data());
    for_each_element(static_cast<T*>(dx.raw_data()), dx.numel(), terms, [&](int64_t e, SumOf<T>& sum) {
      return kernels::pool_backward_value(D, static_cast<const int64_t*>(nullptr), win, H, W, e, sum);
    });
  });
}

}  // namespace tapegrad::cpu
