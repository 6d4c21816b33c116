// The CPU's convolution and pooling loops (src/kernels/cpu/conv.cpp) against window_ops.hpp's
// element functions, which the CUDA kernels run one element a thread: the same bits, f32 and f64,
// over windows of every kind (strides below, at and above the kernel, padding, odd sizes, 1 x 1
// kernels), on values whose sums come out otherwise in another order, with ties, infinities and
// NaNs in the max pool's windows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/kernels/window_ops.hpp"

using namespace tapegrad;
using kernels::Window2d;

namespace {

std::mt19937_64 rng(37);

// f64: the terms, then one correctly rounded sum (the CPU's TermSum, CUDA's ExactSum)
struct ExactTerms {
  std::vector<double> terms;
  void add(double v) { terms.push_back(v); }
  double result() const { return cpu::exact_sum(terms.data(), terms.size()); }
};
template <class T>
using SumOf = std::conditional_t<std::is_same_v<T, double>, ExactTerms, kernels::OrderedSum>;

// Values whose sums in double depend on their order: huge ones that cancel (2^60 + 1 - 2^60 is 0
// or 1 by the order) among ordinary ones.
Tensor spread(const Shape& s, DType t) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> kind(0, 3), binade(-8, 8);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) {
    const int k = kind(rng);
    x = k == 0 ? std::ldexp(u(rng) < 0 ? -1.0 : 1.0, 60) : k == 1 ? std::ldexp(u(rng) < 0 ? -1.0 : 1.0, 59)
                                                            : std::ldexp(u(rng), binade(rng));
  }
  return Tensor::from_doubles(v, s, t);
}

// Pool inputs: few levels (ties), with a NaN, an infinity and a -infinity here and there.
Tensor pool_input(const Shape& s, DType t) {
  std::uniform_int_distribution<int> level(-3, 3), special(0, 40);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) {
    const int k = special(rng);
    x = k == 0 ? std::nan("") : k == 1 ? INFINITY : k == 2 ? -INFINITY : level(rng) * 0.25;
  }
  return Tensor::from_doubles(v, s, t);
}

Window2d window(int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride, int64_t pad) {
  return Window2d{kh, kw, stride, stride, pad, pad, (H + 2 * pad - kh) / stride + 1, (W + 2 * pad - kw) / stride + 1};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// want[e] = f(e) for every element of a tensor like `like`
template <class T, class F>
Tensor element_by_element(const Shape& shape, DType dtype, F&& f) {
  Tensor t = Tensor::empty(shape, dtype);
  T* out = static_cast<T*>(t.raw_data());
  for (int64_t e = 0; e < shape.numel(); ++e) out[e] = f(e);
  return t;
}

struct ConvCase {
  int64_t N, C, H, W, O, kh, kw, stride, pad;
};

template <class T>
void check_conv(const ConvCase& k, DType dtype) {
  const Window2d w = window(k.H, k.W, k.kh, k.kw, k.stride, k.pad);
  const int64_t taps = k.C * k.kh * k.kw, positions = w.out_h * w.out_w, columns = k.N * positions;
  const Tensor x = spread({k.N, k.C, k.H, k.W}, dtype);
  Tensor cols = Tensor::empty({taps, columns}, dtype);
  kernels::im2col(x, w, cols);
  const T* X = static_cast<const T*>(x.raw_data());
  CHECK(same_bits(cols, element_by_element<T>(cols.shape(), dtype, [&](int64_t e) {
    return kernels::im2col_value(X, w, k.C, k.H, k.W, e / columns, e % columns);
  })));

  const Tensor dcols = spread({taps, columns}, dtype);
  Tensor dx = Tensor::empty(x.shape(), dtype);
  kernels::col2im(dcols, w, dx);
  const T* D = static_cast<const T*>(dcols.raw_data());
  CHECK(same_bits(dx, element_by_element<T>(x.shape(), dtype, [&](int64_t e) {
    SumOf<T> sum;
    return kernels::col2im_value(D, w, k.N, k.C, k.H, k.W, e, sum);
  })));

  const Tensor y_columns = spread({k.O, columns}, dtype), bias = spread({k.O}, dtype);
  const Shape planes{k.N, k.O, w.out_h, w.out_w};
  for (const Tensor& b : {bias, Tensor()}) {
    Tensor y = Tensor::empty(planes, dtype);
    kernels::conv2d_columns_to_planes(y_columns, b, y);
    const T* Y = static_cast<const T*>(y_columns.raw_data());
    const T* B = b.defined() ? static_cast<const T*>(b.raw_data()) : nullptr;
    CHECK(same_bits(y, element_by_element<T>(planes, dtype, [&](int64_t e) {
      return kernels::columns_to_planes_value(Y, B, k.N, k.O, positions, e);
    })));
  }

  const Tensor dy = spread(planes, dtype);
  Tensor rows = Tensor::empty({columns, k.O}, dtype);
  kernels::conv2d_planes_to_rows(dy, rows);
  const T* DY = static_cast<const T*>(dy.raw_data());
  CHECK(same_bits(rows, element_by_element<T>(rows.shape(), dtype, [&](int64_t e) {
    return kernels::planes_to_rows_value(DY, k.O, positions, e);
  })));
}

struct PoolCase {
  int64_t N, C, H, W, kernel, stride, pad;
};

template <class T>
void check_pools(const PoolCase& k, DType dtype) {
  const Window2d w = window(k.H, k.W, k.kernel, k.kernel, k.stride, k.pad);
  const Shape in{k.N, k.C, k.H, k.W}, out{k.N, k.C, w.out_h, w.out_w};
  const Tensor x = pool_input(in, dtype);
  const T* X = static_cast<const T*>(x.raw_data());
  Tensor y = Tensor::empty(out, dtype), indices = Tensor::empty(out, DType::i64);
  kernels::max_pool2d(x, w, y, indices);
  Tensor want_y = Tensor::empty(out, dtype), want_indices = Tensor::empty(out, DType::i64);
  for (int64_t e = 0; e < out.numel(); ++e)
    kernels::max_pool_value(X, w, k.H, k.W, e, static_cast<T*>(want_y.raw_data()) + e,
                            static_cast<int64_t*>(want_indices.raw_data()) + e);
  CHECK(same_bits(y, want_y));
  CHECK(same_bits(indices, want_indices));

  const Tensor dy = spread(out, dtype);
  const T* DY = static_cast<const T*>(dy.raw_data());
  const int64_t* I = static_cast<const int64_t*>(indices.raw_data());
  Tensor dx = Tensor::empty(in, dtype);
  kernels::max_pool2d_backward(dy, indices, w, dx);
  CHECK(same_bits(dx, element_by_element<T>(in, dtype, [&](int64_t e) {
    SumOf<T> sum;
    return kernels::pool_backward_value(DY, I, w, k.H, k.W, e, sum);
  })));

  const Tensor xs = spread(in, dtype);
  const T* XS = static_cast<const T*>(xs.raw_data());
  kernels::avg_pool2d(xs, w, y);
  CHECK(same_bits(y, element_by_element<T>(out, dtype, [&](int64_t e) {
    SumOf<T> sum;
    return kernels::avg_pool_value(XS, w, k.H, k.W, e, sum);
  })));
  kernels::avg_pool2d_backward(dy, w, dx);
  CHECK(same_bits(dx, element_by_element<T>(in, dtype, [&](int64_t e) {
    SumOf<T> sum;
    return kernels::pool_backward_value(DY, static_cast<const int64_t*>(nullptr), w, k.H, k.W, e, sum);
  })));
}

}  // namespace

TEST_CASE("conv2d's CPU loops give window_ops' bits: im2col, col2im and the layout changes") {
  const ConvCase cases[] = {
      {2, 3, 8, 8, 4, 3, 3, 1, 1},  // the digits CNN's shape
      {3, 16, 4, 4, 5, 3, 3, 1, 1},  // its second layer's
      {2, 2, 7, 5, 3, 2, 3, 2, 1},   // a 2 x 3 kernel, stride 2, odd sizes
      {1, 2, 9, 10, 2, 3, 3, 3, 0},  // stride = kernel
      {2, 2, 9, 9, 2, 2, 2, 3, 1},   // stride > kernel: pixels no window holds
      {3, 1, 6, 7, 2, 1, 1, 1, 0},   // 1 x 1
      {1, 2, 5, 6, 3, 1, 1, 2, 1},   // 1 x 1, stride 2, padding 1: rows of padding alone
      {2, 3, 3, 20, 2, 3, 3, 1, 2},  // padding 2, a long row
      {1, 1, 2, 2, 1, 3, 3, 1, 1},   // smaller than the kernel without its padding
  };
  for (const ConvCase& k : cases) {
    CAPTURE(k.H);
    CAPTURE(k.W);
    CAPTURE(k.kh);
    CAPTURE(k.kw);
    CAPTURE(k.stride);
    CAPTURE(k.pad);
    check_conv<double>(k, DType::f64);
    check_conv<float>(k, DType::f32);
  }
}

TEST_CASE("the pools' CPU loops give window_ops' bits: max (ties, infinities, NaN) and average, both ways") {
  const PoolCase cases[] = {
      {2, 3, 8, 8, 2, 2, 0},   // disjoint windows (the backward's scatter)
      {2, 3, 4, 4, 2, 2, 0},   // the digits CNN's second pool
      {1, 2, 7, 9, 2, 2, 1},   // disjoint, padded, odd sizes
      {2, 2, 6, 7, 3, 2, 1},   // overlapping, padded
      {1, 3, 7, 5, 3, 1, 1},   // stride 1: every pixel in up to 9 windows
      {2, 2, 9, 8, 2, 3, 0},   // stride > kernel: pixels no window holds
      {1, 1, 5, 5, 1, 1, 0},   // 1 x 1
      {1, 2, 6, 6, 4, 2, 2},   // padding half the kernel
  };
  for (const PoolCase& k : cases) {
    CAPTURE(k.H);
    CAPTURE(k.W);
    CAPTURE(k.kernel);
    CAPTURE(k.stride);
    CAPTURE(k.pad);
    check_pools<double>(k, DType::f64);
    check_pools<float>(k, DType::f32);
  }
}
