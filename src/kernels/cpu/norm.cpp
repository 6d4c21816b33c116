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
// f32 forward: a row's sums accumulate in double, element j into lane j % 16 in increasing j, and
//   the 16 lanes meet in a fixed tree (lane l += lane l + 8, then + 4, + 2, + 1): deterministic,
//   and a form of sum the compiler vectorizes without reassociating it. mean and rstd are computed
//   in double and rounded to f32 once; the forward saves them rounded and computes y from them, so
//   the backward's xhat is the forward's exactly. Elementwise work is in f32.
// f32 backward: see Note [norm backward arithmetic]. CUDA sums in other fixed orders: its f32
//   results agree with the CPU's within f32 rounding, not bit for bit.
//
// Note [norm backward arithmetic]
// The f32 backward has four sums per element (g and g * xhat along the row; dy * xhat and dy down
// the column), and converting each f32 term to double before adding it was most of its time, about
// 1.6 times libtorch's (whose sums are all in f32). So its terms first meet in f32, in short fixed
// groups, and only the groups' sums are converted and accumulated in double:
// - along a row, lane j % 16 adds its f32 terms (g = dy * w and g * xhat, each rounded to f32) in
//   f32 over runs of 4 lane vectors (64 elements, the row's last run shorter), and adds each run's
//   f32 sum to its double accumulator; the lanes then meet in double as in the forward;
// - down a column, the rows of a block go in groups of 4 (the block's last group shorter); a
//   group's terms dy * xhat (and dy) meet in f32 as (t0 + t1) + (t2 + t3), and that f32 sum is
//   added to the block's double partial sum.
// Each f32 sum has at most 4 terms, so its rounding error is a few units of 2^-24 of the group's
// magnitudes, far below an f32 accumulation along the whole row or column; every order is fixed by
// the shape alone, so the bits do not depend on the thread count.
//
// Note [norm row blocks]
// The f32 backward's column sums must not depend on the thread count, so the rows are cut into
// blocks whose size comes from the row count alone: at least 16 rows, and at most 256 blocks (so
// the blocks' partial sums, 16 bytes per column each, stay a few percent of the tensors' bytes).
// Each block adds its groups of rows in order into its own partial sums; a thread takes whole
// blocks; then each column's partials are added in block order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "tapegrad/kernels/cpu/simd.hpp"  // simd::active(), Note [cpu paths]
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/philox.hpp"

namespace tapegrad::cpu {

namespace {

using kernels::Norm;

#define TG_NORM_INLINE [[gnu::always_inline]] inline

constexpr int kLanes = 16;
constexpr int kRun = 4;        // f32 backward sums: 16-lane vectors a lane adds in f32 before double
constexpr int kGroupRows = 4;  // f32 backward: rows whose dw and db terms meet in f32 first

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

// The backward's two row sums, sum(g) (Both) and sum(g * xhat), from f(j, u, v) giving the terms
// of element j: correctly rounded for f64 (terms through buf, 2 m doubles); for f32 in runs
// (Note [norm backward arithmetic]).
template <class T, bool Both, class F>
TG_NORM_INLINE void row_sums(int64_t m, F f, double* sum_u, double* sum_v, double* buf) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t j = 0; j < m; ++j) f(j, buf[j], buf[m + j]);
    if constexpr (Both) *sum_u = exact_sum(buf, static_cast<size_t>(m));
    *sum_v = exact_sum(buf + m, static_cast<size_t>(m));
  } else {
    (void)buf;
    double du[kLanes] = {}, dv[kLanes] = {};
    float fu[kLanes] = {}, fv[kLanes] = {};
    auto add = [&](int64_t j, int l) {
      float u = 0.0f, v;
      f(j, u, v);
      if constexpr (Both) fu[l] += u;
      fv[l] += v;
    };
    auto flush = [&] {
      for (int l = 0; l < kLanes; ++l) {
        if constexpr (Both) du[l] += static_cast<double>(fu[l]);
        dv[l] += static_cast<double>(fv[l]);
        fu[l] = 0.0f;
        fv[l] = 0.0f;
      }
    };
    int64_t j = 0;
    for (; j + kRun * kLanes <= m; j += kRun * kLanes) {  // whole runs
      for (int r = 0; r < kRun; ++r)
        for (int l = 0; l < kLanes; ++l) add(j + r * kLanes + l, l);
      flush();
    }
    for (; j + kLanes <= m; j += kLanes)  // the last, shorter run
      for (int l = 0; l < kLanes; ++l) add(j + l, l);
    for (int l = 0; j + l < m; ++l) add(j + l, l);
    flush();
    for (int width = kLanes / 2; width > 0; width /= 2)
      for (int l = 0; l < width; ++l) {
        if constexpr (Both) du[l] += du[l + width];
        dv[l] += dv[l + width];
      }
    if constexpr (Both) *sum_u = du[0];
    *sum_v = dv[0];
  }
}

// dx of row i: rstd * ((g - mean(g)) - xhat * mean(g * xhat)), rms_norm without the mean(g) term.
template <class T, bool Centered, bool W>
TG_NORM_INLINE void dx_row(const NormArgs<T>& a, int64_t i, double* buf) {
  const int64_t m = a.m;
  const T* __restrict x = a.x + i * m;
  const T* __restrict dy = a.dy + i * m;
  const T* __restrict w = a.w;
  T* __restrict dx = a.y + i * m;
  const T mean = Centered ? a.mean[i] : T(0), rstd = a.rstd[i];
  auto xhat = [&](int64_t j) -> T { return Centered ? (x[j] - mean) * rstd : x[j] * rstd; };
  auto g = [&](int64_t j) -> T {
    if constexpr (W) return dy[j] * w[j];
    else return dy[j];
  };
  double sum_g = 0.0, sum_gx = 0.0;
  row_sums<T, Centered>(m, [&](int64_t j, T& u, T& v) {
    const T gj = g(j);
    u = gj;
    v = gj * xhat(j);
  }, &sum_g, &sum_gx, buf);
  const T mean_g = static_cast<T>(sum_g / static_cast<double>(m)), mean_gx = static_cast<T>(sum_gx / static_cast<double>(m));
  for (int64_t j = 0; j < m; ++j)
    dx[j] = Centered ? rstd * ((g(j) - mean_g) - xhat(j) * mean_gx) : rstd * (g(j) - xhat(j) * mean_gx);
}

// f64: prod (row i) = dy * xhat, for the exact column sums of dw.
template <bool Centered>
TG_NORM_INLINE void prod_row(const NormArgs<double>& a, int64_t i) {
  const int64_t m = a.m;
  const double* __restrict x = a.x + i * m;
  const double* __restrict dy = a.dy + i * m;
  double* __restrict prod = a.prod + i * m;
  const double mean = Centered ? a.mean[i] : 0.0, rstd = a.rstd[i];
  for (int64_t j = 0; j < m; ++j) prod[j] = dy[j] * (Centered ? (x[j] - mean) * rstd : x[j] * rstd);
}

// f32: R consecutive rows' terms of dw and db, summed over the R rows in f32 by a fixed tree, then
// added to the block's partial sums in double: pw += (double) sum_r dy_r * xhat_r, pb likewise.
template <bool Centered, int R, bool PW, bool PB>
TG_NORM_INLINE void group_partials(const NormArgs<float>& a, int64_t i, double* __restrict pw, double* __restrict pb) {
  const int64_t m = a.m;
  const float* x[R];
  const float* dy[R];
  float mean[R], rstd[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.x + (i + r) * m;
    dy[r] = a.dy + (i + r) * m;
    mean[r] = Centered ? a.mean[i + r] : 0.0f;
    rstd[r] = a.rstd[i + r];
  }
  auto tree = [](auto term) {
    if constexpr (R == 4) return (term(0) + term(1)) + (term(2) + term(3));
    else if constexpr (R == 3) return (term(0) + term(1)) + term(2);
    else if constexpr (R == 2) return term(0) + term(1);
    else return term(0);
  };
  for (int64_t j = 0; j < m; ++j) {
    if constexpr (PW) {
      const float t = tree([&](int r) {
        const float xh = Centered ? (x[r][j] - mean[r]) * rstd[r] : x[r][j] * rstd[r];
        return dy[r][j] * xh;
      });
      pw[j] += static_cast<double>(t);
    }
    if constexpr (PB) pb[j] += static_cast<double>(tree([&](int r) { return dy[r][j]; }));
  }
}

template <bool Centered, int R>
TG_NORM_INLINE void group_partials(const NormArgs<float>& a, int64_t i, double* pw, double* pb) {
  if (pw && pb) group_partials<Centered, R, true, true>(a, i, pw, pb);
  else if (pw) group_partials<Centered, R, true, false>(a, i, pw, pb);
  else if (pb) group_partials<Centered, R, false, true>(a, i, pw, pb);
}

template <class T, bool Centered, bool W, bool B>
TG_NORM_INLINE void forward_rows(const NormArgs<T>& a, int64_t begin, int64_t end) {
  std::vector<double> buf(std::is_same_v<T, double> ? static_cast<size_t>(a.m) : 0);
  for (int64_t i = begin; i < end; ++i) forward_row<T, Centered, W, B>(a, i, buf.data());
}

// Blocks [begin, end) of Note [norm row blocks]: each row's dx, then its terms of dw and db.
template <class T, bool Centered, bool W>
TG_NORM_INLINE void backward_blocks(const NormArgs<T>& a, int64_t begin, int64_t end) {
  std::vector<double> buf(std::is_same_v<T, double> ? 2 * static_cast<size_t>(a.m) : 0);
  for (int64_t block = begin; block < end; ++block) {
    const int64_t first = block * a.rows_per_block, last = std::min(a.n, first + a.rows_per_block);
    if constexpr (std::is_same_v<T, double>) {
      for (int64_t i = first; i < last; ++i) {
        if (a.y) dx_row<T, Centered, W>(a, i, buf.data());
        if (a.prod) prod_row<Centered>(a, i);
      }
    } else {
      double* pw = a.partial_w ? a.partial_w + block * a.m : nullptr;
      double* pb = a.partial_b ? a.partial_b + block * a.m : nullptr;
      if (pw) std::fill(pw, pw + a.m, 0.0);
      if (pb) std::fill(pb, pb + a.m, 0.0);
      for (int64_t i = first; i < last; i += kGroupRows) {  // groups of 4 rows, the last one shorter
        const int64_t rows = std::min<int64_t>(kGroupRows, last - i);
        if (a.y)
          for (int64_t r = 0; r < rows; ++r) dx_row<T, Centered, W>(a, i + r, buf.data());
        switch (rows) {
          case 4: group_partials<Centered, 4>(a, i, pw, pb); break;
          case 3: group_partials<Centered, 3>(a, i, pw, pb); break;
          case 2: group_partials<Centered, 2>(a, i, pw, pb); break;
          default: group_partials<Centered, 1>(a, i, pw, pb); break;
        }
      }
    }
  }
}

// The same loops three times: as the baseline x86-64 build compiles them, and for AVX2 and AVX-512F
// (f32 only; the f64 rows spend their time in exact_sum), chosen by the CPU path (Note [cpu paths]
// in simd.hpp). The compiler vectorizes the loops without reordering any operation (no fast-math,
// no contraction), so every variant gives the same bits.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define TG_NORM_AVX2 __attribute__((target("avx2,fma")))
#define TG_NORM_AVX512 __attribute__((target("avx512f")))
#else
#define TG_NORM_AVX2
#define TG_NORM_AVX512
#endif
template <class T, bool Centered, bool W, bool B>
void forward_plain(const NormArgs<T>& a, int64_t begin, int64_t end) {
  forward_rows<T, Centered, W, B>(a, begin, end);
}
template <class T, bool Centered, bool W, bool B>
TG_NORM_AVX2 void forward_avx2(const NormArgs<T>& a, int64_t begin, int64_t end) {
  forward_rows<T, Centered, W, B>(a, begin, end);
}
template <class T, bool Centered, bool W, bool B>
TG_NORM_AVX512 void forward_avx512(const NormArgs<T>& a, int64_t begin, int64_t end) {
  forward_rows<T, Centered, W, B>(a, begin, end);
}
template <class T, bool Centered, bool W>
void backward_plain(const NormArgs<T>& a, int64_t begin, int64_t end) {
  backward_blocks<T, Centered, W>(a, begin, end);
}
template <class T, bool Centered, bool W>
TG_NORM_AVX2 void backward_avx2(const NormArgs<T>& a, int64_t begin, int64_t end) {
  backward_blocks<T, Centered, W>(a, begin, end);
}
template <class T, bool Centered, bool W>
TG_NORM_AVX512 void backward_avx512(const NormArgs<T>& a, int64_t begin, int64_t end) {
  backward_blocks<T, Centered, W>(a, begin, end);
}

// The variant of the active CPU path (f32; f64 takes the plain loops).
template <class T>
simd::Path path_for() {
  return std::is_same_v<T, float> ? simd::active() : simd::Path::scalar;
}
template <class T, bool Centered, bool W, bool B>
void forward_on_path(const NormArgs<T>& a, int64_t begin, int64_t end) {
  switch (path_for<T>()) {
    case simd::Path::avx512: return forward_avx512<T, Centered, W, B>(a, begin, end);
    case simd::Path::avx2: return forward_avx2<T, Centered, W, B>(a, begin, end);
    default: return forward_plain<T, Centered, W, B>(a, begin, end);
  }
}
template <class T, bool Centered, bool W>
void backward_on_path(const NormArgs<T>& a, int64_t begin, int64_t end) {
  switch (path_for<T>()) {
    case simd::Path::avx512: return backward_avx512<T, Centered, W>(a, begin, end);
    case simd::Path::avx2: return backward_avx2<T, Centered, W>(a, begin, end);
    default: return backward_plain<T, Centered, W>(a, begin, end);
  }
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
          forward_on_path<T, true, W, B>(a, begin, end);
        } else if constexpr (!B) {  // rms_norm has no bias
          forward_on_path<T, false, W, false>(a, begin, end);
        }
      });
    });
  });
}

// dx_adds: dx is made apart and added by the add kernel, which rounds as accumulate's add does.
void norm_rows_backward(Norm kind, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool dx_adds) {
  if (dx_adds && dx.defined()) {
    Tensor made = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
    cpu::norm_rows_backward(kind, dy, x, weight, mean, rstd, made, dweight, dbias, false);
    return cpu::binary(Binary::add, dx, made, dx);
  }
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
          if (centered) backward_on_path<T, true, true>(a, begin, end);
          else backward_on_path<T, false, true>(a, begin, end);
        } else {
          if (centered) backward_on_path<T, true, false>(a, begin, end);
          else backward_on_path<T, false, false>(a, begin, end);
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
TG_NORM_AVX2 void dropout_avx2(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold,
                              T scale, int64_t begin, int64_t end) {
  dropout_groups(x, y, n, seed, offset, threshold, scale, begin, end);
}
template <class T>
TG_NORM_AVX512 void dropout_avx512(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold,
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
                   switch (simd::active()) {
                     case simd::Path::avx512: dropout_avx512(X, Y, n, seed, offset, threshold, scale, begin, end); break;
                     case simd::Path::avx2: dropout_avx2(X, Y, n, seed, offset, threshold, scale, begin, end); break;
                     default: dropout_plain(X, Y, n, seed, offset, threshold, scale, begin, end);
                   }
                 });
  });
}

}  // namespace tapegrad::cpu
