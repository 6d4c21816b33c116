// CPU row kernels: gather and its scatter backward, softmax, cross-entropy (and its distinct-row
// forms for the fused embedding_cross_entropy). f32 rows take the CPU's vector path (simd.hpp:
// AVX2 or AVX-512) and cross-entropy computes repeated rows once (repeated_rows.hpp);
// each of these gives the reference loop's bits. Large loops split
// over the intra-op threads (src/tensor/parallel.hpp) by rows, or by columns for the gather's
// backward, whose additions into one row must stay in index order.
//
// Note [cross-entropy arithmetic]
// f64 follows the tiny step's reference (docs/tiny_step.md, "Arithmetic") exactly:
// p = exp(v - max) / fsum(exp(row - max)) and loss = -log(p[t]) with the C library's exp and log,
// the very functions the Python reference calls on this machine, so its trace matches byte for
// byte (Note [exp and log on each device] in src/kernels/cr_math.hpp). f32 (bob) computes the loss
// as docs/bob.md ("Model and objective") writes it, logsumexp(row) - row[t], accumulating the
// exponentials in double: it stays finite where p[t] would underflow to 0. Both give
// dlogits = ((p - onehot) / B) * g.
//
// Note [saved distinct rows]
// cross_entropy computes each distinct logits row once (Note [repeated rows]). The fused
// embedding_cross_entropy knows its distinct rows from its ids and goes further with the _of_rows
// kernels: probs (k, V) holds each distinct row's probabilities once, row_of (B,) i32 names the row
// of probs that logits row i uses, and the backward reads dlogits' rows from those k rows, which
// stay in cache. A row's loss reads its target logit from its distinct row (the same bits). The
// distinct rows' softmax stays on one thread: split, half the rows the backward reads next are in
// the other core's cache, and fetching them cost more than the split saved (docs/bob.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/cpu/repeated_rows.hpp"
#include "tapegrad/kernels/cpu/simd.hpp"

namespace tapegrad::cpu {

namespace {

[[noreturn, gnu::cold, gnu::noinline]] void index_out_of_range(const char* op, int64_t r, int64_t i, int64_t rows,
                                                              const Shape& table_shape) {
  throw Error(std::string("[") + op + "] index " + std::to_string(r) + " at position " + std::to_string(i) +
              " is out of range for a table of " + std::to_string(rows) + " rows (shape " + table_shape.str() + ")");
}

template <class I>
int64_t checked_index(const char* op, const I* ids, int64_t i, int64_t rows, const Shape& table_shape) {
  int64_t r = static_cast<int64_t>(ids[i]);
  if (r < 0 || r >= rows) [[unlikely]] index_out_of_range(op, r, i, rows, table_shape);
  return r;
}

// The f32 softmax's exponential: the C library's expf. Below -0x1.9fe368p6 (about -103.97) the
// correctly rounded exp(x) is +0, and glibc returns it through its underflow handler, which raises
// the flag and sets errno: several times an ordinary call, and a causal attention's scores reach it
// in every row of a trained model. That +0 is answered here (glibc's bits, tested); every other x
// goes to expf.
float exp_f32(float x) { return x < simd::kExpfZeroBelow ? 0.0f : std::exp(x); }

// Whether path k's exponentials reproduce exp_f32 on this machine (Note [vectorized expf] in
// simd_paths.inc), checked once for each path this CPU has.
bool vector_expf(const simd::Kernels& k) {
  static const std::array<bool, 3> reproduced = [] {
    std::array<bool, 3> r{};
    for (simd::Path p : simd::all_paths)
      r[static_cast<size_t>(p)] = simd::supported(p) && simd::reproduces(simd::kernels_of(p), exp_f32);
    return r;
  }();
  return reproduced[static_cast<size_t>(k.path)];
}

// Softmax of one row of m values; returns the row's max and the sum of exponentials.
//
// Note [softmax max]
// The row's max only shifts the exponents: y = exp(x - max). A vectorized max (f32, no NaN in
// the row) may return -0 where the left-to-right loop returns +0 or the reverse, when the
// largest values are zeros; x - (+0) and x - (-0) differ only in the sign of a zero result,
// exp(+0) = exp(-0) = 1, and log(total) + (+-0) is the same number, so every result is the same.
// A row with a NaN takes the loop, whose choice of top (and NaN payload) stays as it was.
// vk: the CPU path's kernels (simd::active_kernels(), read once by the caller).
template <class T>
void softmax_row(const simd::Kernels& vk, const T* x, T* y, int64_t m, double* top_out, double* total_out) {
  T top = x[0];
  bool vectorized = false;
  if constexpr (std::is_same_v<T, float>) vectorized = vk.row_max(x, m, &top);
  if (!vectorized)
    for (int64_t j = 1; j < m; ++j) top = x[j] > top ? x[j] : top;
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t j = 0; j < m; ++j) y[j] = std::exp(x[j] - top);
    double total = exact_sum(y, static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) y[j] = y[j] / total;
    *total_out = total;
  } else {
    // exp_f32 of each shifted value, summed left to right in double, each divided by the sum;
    // the vector paths give the same bits (Note [vectorized expf], Note [exact f32 sums],
    // Note [block sums], Note [division by the total] in simd_paths.inc)
    int64_t j = vector_expf(vk) ? vk.exp_row(x, top, y, m, exp_f32) : 0;
    for (; j < m; ++j) y[j] = exp_f32(x[j] - top);
    double total = 0.0;
    if (!vk.sum_if_exact(y, m, &total)) total = vk.sum_blocks(y, m);  // the scalar path: left to right
    j = vk.divide_row(y, m, total);
    for (; j < m; ++j) y[j] = static_cast<T>(y[j] / total);
    *total_out = total;
  }
  *top_out = top;
}

}  // namespace

void softmax_row_f32(const float* x, float* y, int64_t m, double* top, double* total) {
  softmax_row(simd::active_kernels(), x, y, m, top, total);
}

void exp_shifted_row(const float* x, float shift, float* y, int64_t n) {
  const simd::Kernels& vk = simd::active_kernels();
  int64_t j = vector_expf(vk) ? vk.exp_row(x, shift, y, n, exp_f32) : 0;
  for (; j < n; ++j) y[j] = exp_f32(x[j] - shift);
}

void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t rows = table.dim(0), d = table.dim(1), b = ids.numel();
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(table.dtype());
  dispatch_index("gather", ids.dtype(), [&]<class I>() {
    const I* id = static_cast<const I*>(ids.raw_data());
    const char* src = static_cast<const char*>(table.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t i = 0; i < b; ++i) checked_index("gather", id, i, rows, table.shape());  // the first bad one first
    parallel_for(b, chunk_for(b, static_cast<int64_t>(row_bytes)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(id[i]) * row_bytes, row_bytes);
    });
  });
}

namespace {

// grad[ids[i]] += rows[i] for i in order over the columns [begin, end) of every row; with `fresh`
// the gradient is uninitialized memory that scatter_rows_fresh treats as zeros: a row's first
// addition writes 0 + rows[i] (the bits zero-then-add gives, -0 turning into +0) and the rows no id
// touches are zeroed, so nothing is written twice.
template <class T, class I>
void scatter_columns(const simd::Kernels& vk, T* out, const I* id, const T* src, int64_t b, int64_t nrows, int64_t d,
                     int64_t begin, int64_t end, bool overwrite, bool fresh) {
  const int64_t n = end - begin;
  std::vector<bool> touched(fresh ? static_cast<size_t>(nrows) : 0);
  for (int64_t i = 0; i < b; ++i) {  // in index order: deterministic, and the last write wins
    const int64_t r = static_cast<int64_t>(id[i]);
    T* o = out + r * d + begin;
    const T* s = src + i * d + begin;
    if (overwrite) {
      std::memcpy(o, s, static_cast<size_t>(n) * sizeof(T));
    } else if (fresh && !touched[static_cast<size_t>(r)]) {
      int64_t j = 0;
      if constexpr (std::is_same_v<T, float>)
        j = vk.zero_plus_row(o, s, n);
      for (; j < n; ++j) o[j] = T(0) + s[j];
    } else {
      int64_t j = 0;
      if constexpr (std::is_same_v<T, float>)
        j = vk.add_row(o, s, n);
      for (; j < n; ++j) o[j] = o[j] + s[j];
    }
    if (fresh) touched[static_cast<size_t>(r)] = true;
  }
  if (fresh)
    for (int64_t r = 0; r < nrows; ++r)
      if (!touched[static_cast<size_t>(r)]) std::memset(out + r * d + begin, 0, static_cast<size_t>(n) * sizeof(T));
}

void scatter(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite, bool fresh) {
  const int64_t nrows = dst.dim(0), d = dst.dim(1), b = ids.numel();
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      const I* id = static_cast<const I*>(ids.raw_data());
      const T* src = static_cast<const T*>(rows.raw_data());
      T* out = static_cast<T*>(dst.raw_data());
      for (int64_t i = 0; i < b; ++i) checked_index("gather_backward", id, i, nrows, dst.shape());
      // The columns split over the threads: each range of columns takes every row in index
      // order, so each element still gets its additions in index order (and the last write wins).
      const int64_t row_bytes = d * static_cast<int64_t>(sizeof(T));
      const int64_t bytes = (fresh ? std::max(b, nrows) : b) * row_bytes;
      const int64_t columns = chunk_for(bytes, 1) == bytes ? d : std::max<int64_t>(16, (d / num_threads() + 15) / 16 * 16);
      const simd::Kernels& vk = simd::active_kernels();
      parallel_for(d, columns, [&](int64_t begin, int64_t end) {
        scatter_columns(vk, out, id, src, b, nrows, d, begin, end, overwrite, fresh);
      });
    });
  });
}

}  // namespace

void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  scatter(dst, ids, rows, overwrite, false);
}

void scatter_rows_fresh(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  scatter(dst, ids, rows, overwrite, true);
}

void softmax_rows(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("softmax", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(y.raw_data());
    const simd::Kernels& vk = simd::active_kernels();
    parallel_for(n, range_per_thread(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T)))), [&](int64_t begin, int64_t end) {
      double top, total;
      for (int64_t i = begin; i < end; ++i) {
        if constexpr (std::is_same_v<T, float>)  // Note [vector softmax rows] in simd.hpp
          if (vk.softmax_row(X + i * m, Y + i * m, m)) continue;
        softmax_row(vk, X + i * m, Y + i * m, m, &top, &total);
      }
    });
  });
}

void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  dispatch_float("softmax_backward", y.dtype(), [&]<class T>() {
    const T* Y = static_cast<const T*>(y.raw_data());
    const T* dY = static_cast<const T*>(dy.raw_data());
    T* dX = static_cast<T*>(dx.raw_data());
    const simd::Kernels& vk = simd::active_kernels();
    parallel_for(n, range_per_thread(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T)))), [&](int64_t begin, int64_t end) {
      std::vector<T> prod(std::is_same_v<T, double> ? static_cast<size_t>(m) : 0);
      for (int64_t i = begin; i < end; ++i) {
        double dot;
        if constexpr (std::is_same_v<T, double>) {
          for (int64_t j = 0; j < m; ++j) prod[static_cast<size_t>(j)] = dY[i * m + j] * Y[i * m + j];
          dot = exact_sum(prod.data(), prod.size());
        } else {
          dot = vk.dot_row(dY + i * m, Y + i * m, m);  // f32: the path's double sum of the products
        }
        for (int64_t j = 0; j < m; ++j) dX[i * m + j] = Y[i * m + j] * (dY[i * m + j] - static_cast<T>(dot));
      }
    });
  });
}

namespace {

template <class I>
void check_targets(const I* t, int64_t b, int64_t v) {
  for (int64_t i = 0; i < b; ++i) {
    const int64_t ti = static_cast<int64_t>(t[i]);
    if (ti < 0 || ti >= v)
      throw Error("[cross_entropy] target " + std::to_string(ti) + " at position " + std::to_string(i) +
                  " is out of range for " + std::to_string(v) + " classes (logits " + Shape{b, v}.str() + ")");
  }
}

// The cross-entropy of b logits rows made of k distinct rows: distinct row j's logits at x_row(j),
// its probabilities written at p_row(j); example i reads distinct row row_of[i] and target t[i].
// Each distinct row's softmax and logsumexp once (Note [repeated rows]), on one thread (Note [saved
// distinct rows]); a row's loss reads its target logit from its distinct row (the same bits).
template <class T, class I, class XRow, class PRow>
void distinct_rows_cross_entropy(int64_t b, int64_t v, int64_t k, XRow x_row, PRow p_row, const int32_t* row_of,
                                 const I* t, T* L) {
  std::vector<double> logsumexp(static_cast<size_t>(k));  // f32: log(total) + top
  const simd::Kernels& vk = simd::active_kernels();
  parallel_for(k, k, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      double top, total;
      softmax_row(vk, x_row(j), p_row(j), v, &top, &total);
      logsumexp[static_cast<size_t>(j)] = std::log(total) + top;
    }
  });
  parallel_for(b, chunk_for(b, v * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t j = row_of[i], ti = static_cast<int64_t>(t[i]);
      if constexpr (std::is_same_v<T, double>) L[i] = -std::log(p_row(j)[ti]);
      else L[i] = static_cast<T>(logsumexp[static_cast<size_t>(j)] - static_cast<double>(x_row(j)[ti]));
    }
  });
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses) {
  const int64_t b = logits.dim(0), v = logits.dim(1);
  dispatch_float("cross_entropy", logits.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const T* X = static_cast<const T*>(logits.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      T* P = static_cast<T*>(probs.raw_data());
      check_targets(t, b, v);
      // Which rows repeat (Note [repeated rows]): hash the rows, match them, check each repeat's
      // bytes against its candidate; each distinct row is computed once and copied for its repeats.
      const int64_t row_bytes = v * static_cast<int64_t>(sizeof(T));
      const int64_t chunk = chunk_for(b, row_bytes);
      RepeatedRows repeats(X, b, static_cast<size_t>(row_bytes));
      parallel_for(b, chunk, [&](int64_t begin, int64_t end) { repeats.hash(begin, end); });
      repeats.match();
      std::vector<int64_t> copy_of(static_cast<size_t>(b));  // the row whose bits row i has (or i)
      parallel_for(b, chunk, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t c = repeats.candidate(i);
          copy_of[static_cast<size_t>(i)] = c != i && repeats.same_as_candidate(i) ? c : i;
        }
      });
      std::vector<int32_t> row_of(static_cast<size_t>(b));  // row i's distinct row, an index into firsts
      std::vector<int64_t> firsts;
      for (int64_t i = 0; i < b; ++i) {
        const int64_t c = copy_of[static_cast<size_t>(i)];
        if (c != i) row_of[static_cast<size_t>(i)] = row_of[static_cast<size_t>(c)];
        else {
          row_of[static_cast<size_t>(i)] = static_cast<int32_t>(firsts.size());
          firsts.push_back(i);
        }
      }
      auto first = [&](int64_t j) { return firsts[static_cast<size_t>(j)] * v; };
      distinct_rows_cross_entropy<T>(b, v, static_cast<int64_t>(firsts.size()), [&](int64_t j) { return X + first(j); },
                                     [&](int64_t j) { return P + first(j); }, row_of.data(), t,
                                     static_cast<T*>(losses.raw_data()));
      parallel_for(b, chunk, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          if (copy_of[static_cast<size_t>(i)] != i)
            std::memcpy(P + i * v, P + copy_of[static_cast<size_t>(i)] * v, static_cast<size_t>(row_bytes));
      });
    });
  });
}

void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean) {
  cross_entropy(logits, targets, probs, losses);
  if (mean) mean_all(losses, out);
  else sum_all(losses, out);
}

void cross_entropy_of_rows(const Tensor& table, const Tensor& rows, const Tensor& row_of, const Tensor& targets,
                           Tensor& probs, Tensor& losses) {
  const int64_t b = row_of.numel(), v = table.dim(1), k = rows.numel();
  TG_CHECK(rows.dtype() == DType::i32 && row_of.dtype() == DType::i32 && probs.dim(0) == k,
           "[cross_entropy_of_rows] rows and row_of are i32, probs (k, V)");
  dispatch_float("cross_entropy", table.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const T* W = static_cast<const T*>(table.raw_data());
      const int32_t* r = static_cast<const int32_t*>(rows.raw_data());
      T* P = static_cast<T*>(probs.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      check_targets(t, b, v);
      distinct_rows_cross_entropy<T>(b, v, k, [&](int64_t j) { return W + static_cast<int64_t>(r[j]) * v; },
                                     [&](int64_t j) { return P + j * v; },
                                     static_cast<const int32_t*>(row_of.raw_data()), t,
                                     static_cast<T*>(losses.raw_data()));
    });
  });
}

namespace {

// Rows row_begin .. row_begin + r - 1 of dlogits, into dlogits (r, V); row i's probabilities are
// row prob_rows[i] of probs when prob_rows is defined, else row row_begin + i.
void cross_entropy_backward_rows(const Tensor& probs, const Tensor& prob_rows, const Tensor& targets,
                                 const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin) {
  const int64_t b = dlogits.dim(0), v = dlogits.dim(1);
  TG_CHECK(row_begin >= 0 && row_begin + b <= targets.numel(), "[cross_entropy_backward] rows past the batch");
  const bool per_row = dloss.numel() != 1;
  const int32_t* row_of = prob_rows.defined() ? static_cast<const int32_t*>(prob_rows.raw_data()) : nullptr;
  dispatch_float("cross_entropy_backward", probs.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      // row i of this call is row row_begin + i of the batch: shift the per-row inputs
      const T* P = static_cast<const T*>(probs.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data()) + row_begin;
      const T* g = static_cast<const T*>(dloss.raw_data()) + (per_row ? row_begin : 0);
      const int32_t* rows_of = row_of ? row_of + row_begin : nullptr;
      T* D = static_cast<T*>(dlogits.raw_data());
      const T div = static_cast<T>(divisor);
      // x / div is x * (1 / div), bit for bit, when div is a power of two (both are x * 2^-k
      // rounded once): bob's mean over 256 examples multiplies instead of dividing.
      int exponent = 0;
      const bool power_of_two = std::frexp(div, &exponent) == T(0.5) && std::isnormal(T(1) / div);
      const simd::Kernels& vk = simd::active_kernels();
      parallel_for(b, chunk_for(b, v * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const T gi = per_row ? g[i] : g[0];
          const T* p = P + (rows_of ? rows_of[i] : row_begin + i) * v;
          T* d = D + i * v;  // may be p itself (no row map): p[ti] is read before the row is written
          const int64_t ti = static_cast<int64_t>(t[i]);
          const T p_target = ti >= 0 && ti < v ? p[ti] : T(0);
          int64_t j = 0;  // ((p - onehot) / div) * gi, first with onehot = 0 everywhere (p - 0 is p)
          if constexpr (std::is_same_v<T, float>)
            j = vk.scale_row(p, d, v, power_of_two ? T(1) / div : div, power_of_two, gi);
          if (power_of_two)
            for (const T inverse = T(1) / div; j < v; ++j) d[j] = (p[j] * inverse) * gi;
          else
            for (; j < v; ++j) d[j] = (p[j] / div) * gi;
          if (ti >= 0 && ti < v) d[ti] = ((p_target - T(1)) / div) * gi;  // then the target's, onehot = 1
        }
      });
    });
  });
}

}  // namespace

void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits) {
  cross_entropy_backward_rows(probs, Tensor(), targets, dloss, divisor, dlogits, 0);
}

void cross_entropy_backward_of_rows(const Tensor& probs, const Tensor& row_of, const Tensor& targets,
                                    const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin) {
  cross_entropy_backward_rows(probs, row_of, targets, dloss, divisor, dlogits, row_begin);
}

}  // namespace tapegrad::cpu
