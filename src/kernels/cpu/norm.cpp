// CPU kernels of layer_norm, rms_norm and dropout (kernels.hpp, "normalisation"). A row of C values
// is normalised in one pass over it (its two sums, then its outputs, while the row is in cache);
// the backward makes a row's dx in one pass the same way, and sums the weight's and the bias's
// gradients over rows in fixed blocks. Rows split over the intra-op threads. f32 rows run an
// AVX-512 build of the same loops where the CPU has one: the same source compiled for the wider
// registers, which reorders nothing (no fused multiply-add, no reassociation), so the same bits.
//
// Note [norm arithmetic]
// f64: every sum is correctly rounded (exact_sum, = math.fsum) over products and differences
//   rounded first: mean = fsum(x) / C, var = fsum((x - mean)^2) / C (rms: fsum(x^2) / C),
//   rstd = 1 / sqrt(var + eps), y = ((x - mean) * rstd) * w + b; backward, with
//   xhat = (x - mean) * rstd and g = dy * w: A = fsum(g) / C, B = fsum(g * xhat) / C,
//   dx = rstd * ((g - A) - xhat * B), dw = fsum over rows of dy * xhat, db = fsum of dy. CUDA
//   evaluates the same expressions with ExactSum, so the two devices give the same bits.
// f32: a row's sums accumulate in double, element j into lane j % 16 in increasing j, and the 16
//   lanes meet in a fixed tree (lane l += lane l + 8, then + 4, + 2, + 1): deterministic, and a
//   form of sum the compiler vectorizes without reassociating it. mean, rstd, A and B are computed
//   in double and rounded to f32 once; the forward saves the rounded mean and rstd and computes y
//   from them, so the backward's xhat is the forward's exactly. Elementwise work is in f32.
//   dw and db accumulate in double per column, a block of rows at a time (Note [norm row blocks]),
//   the blocks' sums added in block order. CUDA sums in another fixed order: its f32 results agree
//   with these within f32 rounding, not bit for bit.
//
// Note [norm row blocks]
// The backward's column sums must not depend on the thread count, so the rows are cut into blocks
// whose size comes from the row count alone: at least 16 rows, and at most 256 blocks (so the
// blocks' partial sums, 16 bytes per column each, stay a few percent of the tensors' bytes). Each
// block adds its rows in order into its own partial sums; a thread takes whole blocks; then each
// column's partials are added in block order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "tapegrad/kernels/cpu/avx512.hpp"  // TG_AVX512, avx512::available()
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/philox.hpp"

namespace tapegrad::cpu {

namespace {

using kernels::Norm;

#define TG_NORM_INLINE [[gnu::always_inline]] inline

constexpr int kLanes = 16;

// The f32 rows' sum of f(0), ..., f(m - 1) in double (Note [norm arithmetic]).
template <class F>
TG_NORM_INLINE double lane_sum(int64_t m, F f) {
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= m; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += f(j + l);
  for (int l = 0; j + l < m; ++l) acc[l] += f(j + l);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

// A row's sum of f(j): correctly rounded for f64 (through buf, m doubles), lane_sum for f32.
template <class T, class F>
TG_NORM_INLINE double row_sum(int64_t m, F f, double* buf) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t j = 0; j < m; ++j) buf[j] = f(j);
    return exact_sum(buf, static_cast<size_t>(m));
  } else {
    (void)buf;
    return lane_sum(m, f);
  }
}

template <class T>
struct NormArgs {
  const T* x = nullptr;
  const T* dy = nullptr;        // backward
  const T* w = nullptr;         // null without a weight
  const T* b = nullptr;         // null without a bias (forward)
  T* y = nullptr;               // forward: y; backward: dx (null when not wanted)
  T* mean = nullptr;            // layer only
  T* rstd = nullptr;
  double* partial_w = nullptr;  // f32 backward: (blocks, m) per-block column sums of dy * xhat
  double* partial_b = nullptr;  // f32 backward: (blocks, m) of dy
  T* prod = nullptr;            // f64 backward: (n, m) dy * xhat, for the exact column sums
  int64_t n = 0, m = 0, rows_per_block = 0;
  double eps = 0;
};

// One row of the forward (Note [norm arithmetic]); Centered: layer_norm, else rms_norm.
template <class T, bool Centered, bool W, bool B>
TG_NORM_INLINE void forward_row(const NormArgs<T>& a, int64_t i, double* buf) {
  const int64_t m = a.m;
  const T* __restrict x = a.x + i * m;
  T* __restrict y = a.y + i * m;
  double mean = 0.0;
  if constexpr (Centered) mean = row_sum<T>(m, [&](int64_t j) { return static_cast<double>(x[j]); }, buf) / static_cast<double>(m);
  const double var = row_sum<T>(m, [&](int64_t j) {
                       const double d = static_cast<double>(x[j]) - mean;
                       return d * d;
                     }, buf) / static_cast<double>(m);
  const T mean_t = static_cast<T>(mean), rstd_t = static_cast<T>(1.0 / std::sqrt(var + a.eps));
  for (int64_t j = 0; j < m; ++j) {
    T v = Centered ? (x[j] - mean_t) * rstd_t : x[j] * rstd_t;
    if constexpr (W) v = v * a.w[j];
    if constexpr (B) v = v + a.b[j];
    y[j] = v;
  }
  if constexpr (Centered) a.mean[i] = mean_t;
  a.rstd[i] = rstd_t;
}

// One row of the backward: dx (when wanted), and its terms of dw and db (f32: into the block's
// partial sums; f64: dy * xhat into prod, summed exactly afterwards).
template <class T, bool Centered, bool W>
TG_NORM_INLINE void backward_row(const NormArgs<T>& a, int64_t i, double* __restrict pw, double* __restrict pb,
                                 double* buf) {
  const int64_t m = a.m;
  const T* __restrict x = a.x + i * m;
  const T* __restrict dy = a.dy + i * m;
  const T* __restrict w = a.w;
  const T mean = Centered ? a.mean[i] : T(0), rstd = a.rstd[i];
  auto xhat = [&](int64_t j) -> T { return Centered ? (x[j] - mean) * rstd : x[j] * rstd; };
  auto g = [&](int64_t j) -> T {
    if constexpr (W) return dy[j] * w[j];
    else return dy[j];
  };
  if (a.y) {
    T* __restrict dx = a.y + i * m;
    double sum_g = 0.0;
    if constexpr (Centered) sum_g = row_sum<T>(m, [&](int64_t j) { return static_cast<double>(g(j)); }, buf);
    const double sum_gx = row_sum<T>(m, [&](int64_t j) { return static_cast<double>(g(j)) * static_cast<double>(xhat(j)); }, buf);
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(m)), mean_gx = static_cast<T>(sum_gx / static_cast<double>(m));
    for (int64_t j = 0; j < m; ++j)
      dx[j] = Centered ? rstd * ((g(j) - mean_g) - xhat(j) * mean_gx) : rstd * (g(j) - xhat(j) * mean_gx);
  }
  if (pw)
    for (int64_t j = 0; j < m; ++j) pw[j] += static_cast<double>(dy[j]) * static_cast<double>(xhat(j));
  if (pb)
    for (int64_t j = 0; j < m; ++j) pb[j] += static_cast<double>(dy[j]);
  if (a.prod) {
    T* __restrict prod = a.prod + i * m;
    for (int64_t j = 0; j < m; ++j) prod[j] = dy[j] * xhat(j);
  }
}

template <class T, bool Centered, bool W, bool B>
TG_NORM_INLINE void forward_rows(const NormArgs<T>& a, int64_t begin, int64_t end) {
  std::vector<double> buf(std::is_same_v<T, double> ? static_cast<size_t>(a.m) : 0);
  for (int64_t i = begin; i < end; ++i) forward_row<T, Centered, W, B>(a, i, buf.data());
}

// Blocks [begin, end) of Note [norm row blocks].
template <class T, bool Centered, bool W>
TG_NORM_INLINE void backward_blocks(const NormArgs<T>& a, int64_t begin, int64_t end) {
  std::vector<double> buf(std::is_same_v<T, double> ? static_cast<size_t>(a.m) : 0);
  for (int64_t block = begin; block < end; ++block) {
    double* pw = a.partial_w ? a.partial_w + block * a.m : nullptr;
    double* pb = a.partial_b ? a.partial_b + block * a.m : nullptr;
    if (pw) std::fill(pw, pw + a.m, 0.0);
    if (pb) std::fill(pb, pb + a.m, 0.0);
    const int64_t last = std::min(a.n, (block + 1) * a.rows_per_block);
    for (int64_t i = block * a.rows_per_block; i < last; ++i) backward_row<T, Centered, W>(a, i, pw, pb, buf.data());
  }
}

// The same loops twice: as the baseline x86-64 build compiles them, and for AVX-512F (f32 only;
// the f64 rows spend their time in exact_sum).
template <class T, bool Centered, bool W, bool B>
void forward_plain(const NormArgs<T>& a, int64_t begin, int64_t end) {
  forward_rows<T, Centered, W, B>(a, begin, end);
}
template <class T, bool Centered, bool W, bool B>
TG_AVX512 void forward_avx512(const NormArgs<T>& a, int64_t begin, int64_t end) {
  forward_rows<T, Centered, W, B>(a, begin, end);
}
template <class T, bool Centered, bool W>
void backward_plain(const NormArgs<T>& a, int64_t begin, int64_t end) {
  backward_blocks<T, Centered, W>(a, begin, end);
}
template <class T, bool Centered, bool W>
TG_AVX512 void backward_avx512(const NormArgs<T>& a, int64_t begin, int64_t end) {
  backward_blocks<T, Centered, W>(a, begin, end);
}

template <class T>
bool wide() {
  return std::is_same_v<T, float> && avx512::available();
}

// f(bool_constant<W>, bool_constant<B>) for the runtime flags.
template <class F>
void with_flags(bool w, bool b, F&& f) {
  if (w) {
    if (b) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (b) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// The column sums of the f32 blocks' partials, in block order: out[j] = sum_b partial[b][j].
template <class T>
void sum_blocks(const double* partial, int64_t blocks, int64_t m, T* out) {
  parallel_for(m, chunk_for(m, blocks * static_cast<int64_t>(sizeof(double))), [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(end - begin), 0.0);
    for (int64_t block = 0; block < blocks; ++block) {
      const double* p = partial + block * m + begin;
      for (int64_t j = 0; j < end - begin; ++j) acc[static_cast<size_t>(j)] += p[j];
    }
    for (int64_t j = begin; j < end; ++j) out[j] = static_cast<T>(acc[static_cast<size_t>(j - begin)]);
  });
}

const char* op_name(Norm kind) { return kind == Norm::layer ? "layer_norm" : "rms_norm"; }

}  // namespace

void norm_rows(Norm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
               Tensor& mean, Tensor& rstd) {
  const int64_t m = x.shape()[x.ndim() - 1];
  const int64_t n = m == 0 ? 0 : x.numel() / m;
  if (n == 0) return;
  dispatch_float(op_name(kind), x.dtype(), [&]<class T>() {
    NormArgs<T> a;
    a.x = static_cast<const T*>(x.raw_data());
    a.w = data_or_null<const T>(weight);
    a.b = data_or_null<const T>(bias);
    a.y = static_cast<T*>(y.raw_data());
    a.mean = data_or_null<T>(mean);
    a.rstd = static_cast<T*>(rstd.raw_data());
    a.n = n;
    a.m = m;
    a.eps = eps;
    const int64_t chunk = chunk_for(n, m * static_cast<int64_t>(sizeof(T)), Work::arithmetic);
    with_flags(a.w != nullptr, a.b != nullptr, [&](auto w, auto b) {
      constexpr bool W = decltype(w)::value, B = decltype(b)::value;
      parallel_for(n, chunk, [&](int64_t begin, int64_t end) {
        if (kind == Norm::layer) {
          if (wide<T>()) forward_avx512<T, true, W, B>(a, begin, end);
          else forward_plain<T, true, W, B>(a, begin, end);
        } else if constexpr (!B) {  // rms_norm has no bias
          if (wide<T>()) forward_avx512<T, false, W, false>(a, begin, end);
          else forward_plain<T, false, W, false>(a, begin, end);
        }
      });
    });
  });
}

void norm_rows_backward(Norm kind, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const int64_t m = x.shape()[x.ndim() - 1];
  const int64_t n = m == 0 ? 0 : x.numel() / m;
  dispatch_float(op_name(kind), x.dtype(), [&]<class T>() {
    if (n == 0) {  // no rows: the sums over rows are zeros
      if (dweight.defined()) dweight.zero_();
      if (dbias.defined()) dbias.zero_();
      return;
    }
    NormArgs<T> a;
    a.x = static_cast<const T*>(x.raw_data());
    a.dy = static_cast<const T*>(dy.raw_data());
    a.w = data_or_null<const T>(weight);
    a.y = data_or_null<T>(dx);
    a.mean = data_or_null<T>(mean);
    a.rstd = static_cast<T*>(rstd.raw_data());
    a.n = n;
    a.m = m;
    a.rows_per_block = std::max<int64_t>(16, (n + 255) / 256);
    const int64_t blocks = (n + a.rows_per_block - 1) / a.rows_per_block;
    std::unique_ptr<double[]> partials;
    Tensor prod;
    if constexpr (std::is_same_v<T, float>) {
      const int64_t per = blocks * m;  // <= numel + m: fits
      const int64_t count = (dweight.defined() ? per : 0) + (dbias.defined() ? per : 0);
      if (count > 0) partials.reset(new double[static_cast<size_t>(count)]);
      if (dweight.defined()) a.partial_w = partials.get();
      if (dbias.defined()) a.partial_b = partials.get() + (dweight.defined() ? per : 0);
    } else if (dweight.defined()) {
      prod = Tensor::empty(Shape{n, m}, x.dtype());
      a.prod = static_cast<T*>(prod.raw_data());
    }
    if (a.y || a.partial_w || a.partial_b || a.prod) {
      const int64_t bytes = n * m * static_cast<int64_t>(sizeof(T));
      const int64_t chunk = bytes < kMinParallelArithmeticBytes ? blocks : 1;
      parallel_for(blocks, chunk, [&](int64_t begin, int64_t end) {
        const bool centered = kind == Norm::layer;
        if (a.w) {
          if (centered) (wide<T>() ? backward_avx512<T, true, true> : backward_plain<T, true, true>)(a, begin, end);
          else (wide<T>() ? backward_avx512<T, false, true> : backward_plain<T, false, true>)(a, begin, end);
        } else {
          if (centered) (wide<T>() ? backward_avx512<T, true, false> : backward_plain<T, true, false>)(a, begin, end);
          else (wide<T>() ? backward_avx512<T, false, false> : backward_plain<T, false, false>)(a, begin, end);
        }
      });
    }
    if constexpr (std::is_same_v<T, float>) {
      if (a.partial_w) sum_blocks(a.partial_w, blocks, m, static_cast<T*>(dweight.raw_data()));
      if (a.partial_b) sum_blocks(a.partial_b, blocks, m, static_cast<T*>(dbias.raw_data()));
    } else {  // correctly rounded column sums (sum_rows, linalg.cpp)
      if (dweight.defined()) sum_rows(prod, dweight);
      if (dbias.defined()) sum_rows(dy.reshape(Shape{n, m}), dbias);
    }
  });
}

namespace {

template <class T>
TG_NORM_INLINE void dropout_groups(const T* __restrict x, T* __restrict y, int64_t n, uint64_t seed, uint64_t offset,
                                   uint64_t threshold, T scale, int64_t begin, int64_t end) {
  for (int64_t q = begin; q < end; ++q) {
    const kernels::PhiloxBlock r = kernels::philox_block(seed, offset + static_cast<uint64_t>(q));
    const int64_t first = 4 * q, count = std::min<int64_t>(4, n - first);
    for (int64_t k = 0; k < count; ++k) y[first + k] = x[first + k] * kernels::dropout_multiplier(r.w[k], threshold, scale);
  }
}
template <class T>
void dropout_plain(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold, T scale,
                   int64_t begin, int64_t end) {
  dropout_groups(x, y, n, seed, offset, threshold, scale, begin, end);
}
template <class T>
TG_AVX512 void dropout_avx512(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold,
                              T scale, int64_t begin, int64_t end) {
  dropout_groups(x, y, n, seed, offset, threshold, scale, begin, end);
}

}  // namespace

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  const int64_t n = x.numel();
  const int64_t groups = n / 4 + (n % 4 != 0);
  const uint64_t threshold = kernels::dropout_threshold(p);
  dispatch_float("dropout", x.dtype(), [&]<class T>() {
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(y.raw_data());
    parallel_for(groups, chunk_for(groups, 4 * static_cast<int64_t>(sizeof(T)), Work::arithmetic),
                 [&](int64_t begin, int64_t end) {
                   if (avx512::available()) dropout_avx512(X, Y, n, seed, offset, threshold, scale, begin, end);
                   else dropout_plain(X, Y, n, seed, offset, threshold, scale, begin, end);
                 });
  });
}

}  // namespace tapegrad::cpu
