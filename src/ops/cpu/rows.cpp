// CPU row kernels: gather and its scatter backward, softmax, cross-entropy. f32 rows take AVX-512
// paths where the CPU has them (avx512.hpp, expf_avx512.hpp) and cross-entropy computes repeated
// rows once (repeated_rows.hpp); each of these gives the reference loop's bits. Large loops split
// over the intra-op threads (src/graph/parallel.hpp) by rows, or by columns for the gather's
// backward, whose additions into one row must stay in index order.
//
// Note [cross-entropy arithmetic]
// f64 follows the tiny step's reference exactly: p = exp(v - max) / fsum(exp(row - max)) and
// loss = -log(p[t]) with the C library's exp and log, the very functions the Python reference calls
// on this machine, so its trace matches byte for byte (Note [exp and log on each device] in
// src/ops/cr_math.hpp). f32 (bob) computes the loss as
// spec/bob.md writes it, logsumexp(row) - row[t], accumulating the exponentials in double: it
// stays finite where p[t] would underflow to 0. Both give dlogits = ((p - onehot) / B) * g.
//
// Note [saved distinct rows]
// cross_entropy computes each distinct logits row once (Note [repeated rows]), and with prob_rows
// it also saves each once: probs (k, V) for the k distinct rows and prob_rows (B,) i32, the row of
// probs that logits row i uses. The forward then writes k rows instead of B (bob: 26 instead of
// 256, 26 KiB instead of 256 KiB), and the backward reads dlogits' rows from those k rows, which
// stay in L1. A row's loss reads its target logit from its first row (the same bits). When every
// row is distinct there is no map and probs is (B, V), as on devices that never make one (CUDA).
// The distinct rows' softmax stays on one thread: split, half the rows the backward reads next
// are in the other core's cache, and fetching them cost more than the split saved (docs/bob.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/avx512.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dispatch.hpp"
#include "ops/cpu/exact_sum.hpp"
#include "ops/cpu/expf_avx512.hpp"
#include "ops/cpu/repeated_rows.hpp"

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

// The f32 softmax's exponential: the C library's expf.
float exp_f32(float x) { return std::exp(x); }

// Whether the AVX-512 exponentials reproduce exp_f32 on this machine (Note [vectorized expf]).
bool vector_expf() {
  static const bool reproduced = avx512::available() && avx512::reproduces(exp_f32);
  return reproduced;
}

// Softmax of one row of m values; returns the row's max and the sum of exponentials.
//
// Note [softmax max]
// The row's max only shifts the exponents: y = exp(x - max). A vectorized max (f32, no NaN in
// the row) may return -0 where the left-to-right loop returns +0 or the reverse, when the
// largest values are zeros; x - (+0) and x - (-0) differ only in the sign of a zero result,
// exp(+0) = exp(-0) = 1, and log(total) + (+-0) is the same number, so every result is the same.
// A row with a NaN takes the loop, whose choice of top (and NaN payload) stays as it was.
template <class T>
void softmax_row(const T* x, T* y, int64_t m, double* top_out, double* total_out) {
  T top = x[0];
  bool vectorized = false;
  if constexpr (std::is_same_v<T, float>) vectorized = avx512::available() && avx512::row_max(x, m, &top);
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
    // Note [block sums], Note [division by the total] in expf_avx512.hpp)
    int64_t j = vector_expf() ? avx512::exp_row(x, top, y, m, exp_f32) : 0;
    for (; j < m; ++j) y[j] = exp_f32(x[j] - top);
    double total = 0.0;
    if (!avx512::available()) {
      for (j = 0; j < m; ++j) total += y[j];
    } else if (!avx512::sum_if_exact(y, m, &total)) {
      total = avx512::sum_blocks(y, m);
    }
    j = avx512::available() ? avx512::divide_row(y, m, total) : 0;
    for (; j < m; ++j) y[j] = static_cast<T>(y[j] / total);
    *total_out = total;
  }
  *top_out = top;
}

}  // namespace

// With row_copies, only the first rows (row_copies[i] == i) are written (Note [deferred row copies]
// in graph.cpp); for bob 26 KiB of rows, which stay on this core for cross_entropy to read next.
void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out, const Tensor& row_copies) {
  const int64_t rows = table.dim(0), d = table.dim(1), b = ids.numel();
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(table.dtype());
  const int32_t* copy_of = row_copies.defined() ? static_cast<const int32_t*>(row_copies.raw_data()) : nullptr;
  TG_CHECK(!copy_of || (row_copies.dtype() == DType::i32 && row_copies.numel() == b && row_copies.device().is_cpu()),
           "[gather] row_copies must be host i32 with one entry per id");
  dispatch_index("gather", ids.dtype(), [&]<class I>() {
    const I* id = static_cast<const I*>(ids.raw_data());
    const char* src = static_cast<const char*>(table.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t i = 0; i < b; ++i) checked_index("gather", id, i, rows, table.shape());  // the first bad one first
    const int64_t chunk = copy_of ? b : chunk_for(b, static_cast<int64_t>(row_bytes));
    parallel_for(b, chunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        if (!copy_of || copy_of[i] == i)
          std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(id[i]) * row_bytes, row_bytes);
    });
  });
}

void fill_row_copies(Tensor& x, const Tensor& row_copies) {
  const int64_t b = x.dim(0);
  TG_CHECK(x.ndim() == 2 && row_copies.dtype() == DType::i32 && row_copies.numel() == b,
           "[gather] row_copies must be i32 with one entry per row");
  const size_t row_bytes = static_cast<size_t>(x.dim(1)) * dtype_size(x.dtype());
  const int32_t* copy_of = static_cast<const int32_t*>(row_copies.raw_data());
  char* bytes = static_cast<char*>(x.raw_data());
  parallel_for(b, chunk_for(b, static_cast<int64_t>(row_bytes)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)  // a copy's source is a first row, which no iteration writes
      if (copy_of[i] != i)
        std::memcpy(bytes + static_cast<size_t>(i) * row_bytes, bytes + static_cast<size_t>(copy_of[i]) * row_bytes,
                    row_bytes);
  });
}

namespace {

// grad[ids[i]] += rows[i] for i in order over the columns [begin, end) of every row; with `fresh`
// the gradient is uninitialized memory that scatter_rows_fresh treats as zeros: a row's first
// addition writes 0 + rows[i] (the bits zero-then-add gives, -0 turning into +0) and the rows no id
// touches are zeroed, so nothing is written twice.
template <class T, class I>
void scatter_columns(T* out, const I* id, const T* src, int64_t b, int64_t nrows, int64_t d, int64_t begin, int64_t end,
                     bool overwrite, bool fresh) {
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
        if (avx512::available()) j = avx512::zero_plus_row(o, s, n);
      for (; j < n; ++j) o[j] = T(0) + s[j];
    } else {
      int64_t j = 0;
      if constexpr (std::is_same_v<T, float>)
        if (avx512::available()) j = avx512::add_row(o, s, n);
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
      parallel_for(d, columns, [&](int64_t begin, int64_t end) {
        scatter_columns(out, id, src, b, nrows, d, begin, end, overwrite, fresh);
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
    parallel_for(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      double top, total;
      for (int64_t i = begin; i < end; ++i) softmax_row(X + i * m, Y + i * m, m, &top, &total);
    });
  });
}

void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  dispatch_float("softmax_backward", y.dtype(), [&]<class T>() {
    const T* Y = static_cast<const T*>(y.raw_data());
    const T* dY = static_cast<const T*>(dy.raw_data());
    T* dX = static_cast<T*>(dx.raw_data());
    parallel_for(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      std::vector<T> prod(static_cast<size_t>(m));
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < m; ++j) prod[static_cast<size_t>(j)] = dY[i * m + j] * Y[i * m + j];
        double dot;
        if constexpr (std::is_same_v<T, double>) dot = exact_sum(prod.data(), prod.size());
        else { dot = 0.0; for (T p : prod) dot += p; }
        for (int64_t j = 0; j < m; ++j) dX[i * m + j] = Y[i * m + j] * (dY[i * m + j] - static_cast<T>(dot));
      }
    });
  });
}

void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor* prob_rows,
                   const Tensor& row_copies) {
  const int64_t b = logits.dim(0), v = logits.dim(1);
  dispatch_float("cross_entropy", logits.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const T* X = static_cast<const T*>(logits.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      T* L = static_cast<T*>(losses.raw_data());
      for (int64_t i = 0; i < b; ++i) {
        const int64_t ti = static_cast<int64_t>(t[i]);
        if (ti < 0 || ti >= v)
          throw Error("[cross_entropy] target " + std::to_string(ti) + " at position " + std::to_string(i) +
                      " is out of range for " + std::to_string(v) + " classes (logits " + logits.shape().str() + ")");
      }
      // Each distinct row's softmax and logsumexp once (Note [repeated rows]). Which rows repeat:
      // given by the producer (row_copies), or found here: hash the rows, match them, check each
      // repeat's bytes against its candidate. The probabilities are saved once per distinct row
      // with a map from logits rows to them (Note [saved distinct rows]), or, without prob_rows,
      // copied for the repeats.
      const int64_t row_bytes = v * static_cast<int64_t>(sizeof(T));
      const int64_t chunk = chunk_for(b, row_bytes);  // the rows' split, the gather's and the backward's
      std::vector<int32_t> copy_of(static_cast<size_t>(b));  // the row whose bits row i has (or i)
      if (row_copies.defined()) {
        if (row_copies.dtype() != DType::i32 || row_copies.numel() != b || !row_copies.device().is_cpu())
          throw Error("[cross_entropy] row_copies must be host i32 (" + std::to_string(b) + ",), got " +
                      dtype_name(row_copies.dtype()) + " " + row_copies.shape().str());
        const int32_t* c = static_cast<const int32_t*>(row_copies.raw_data());
        for (int64_t i = 0; i < b; ++i) {
          if (c[i] < 0 || c[i] > i || c[c[i]] != c[i])
            throw Error("[cross_entropy] row_copies[" + std::to_string(i) + "] = " + std::to_string(c[i]) +
                        " does not name an earlier first row");
          copy_of[static_cast<size_t>(i)] = c[i];
        }
      } else {
        RepeatedRows repeats(X, b, static_cast<size_t>(row_bytes));
        parallel_for(b, chunk, [&](int64_t begin, int64_t end) { repeats.hash(begin, end); });
        repeats.match();
        parallel_for(b, chunk, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const int64_t c = repeats.candidate(i);
            copy_of[static_cast<size_t>(i)] = static_cast<int32_t>(c != i && repeats.same_as_candidate(i) ? c : i);
          }
        });
      }
      // row_of[i]: row i's distinct row, an index into firsts (the first row of each kind, in order)
      std::vector<int32_t> row_of(static_cast<size_t>(b));
      std::vector<int64_t> firsts;
      for (int64_t i = 0; i < b; ++i) {
        const int32_t c = copy_of[static_cast<size_t>(i)];
        if (c != i) {
          row_of[static_cast<size_t>(i)] = row_of[static_cast<size_t>(c)];
        } else {
          row_of[static_cast<size_t>(i)] = static_cast<int32_t>(firsts.size());
          firsts.push_back(i);
        }
      }
      const int64_t nfirst = static_cast<int64_t>(firsts.size());
      const bool compact = prob_rows != nullptr && nfirst < b;
      if (compact) {
        probs = Tensor::empty(Shape{nfirst, v}, logits.dtype(), logits.device());
        *prob_rows = Tensor::empty(Shape{b}, DType::i32, logits.device());
        std::memcpy(prob_rows->raw_data(), row_of.data(), row_of.size() * sizeof(int32_t));
      } else if (!probs.defined()) {
        probs = Tensor::empty(Shape{b, v}, logits.dtype(), logits.device());
      }
      T* P = static_cast<T*>(probs.raw_data());
      // where distinct row k's probabilities go: row k of the compact tensor, or its first row's
      auto prob_row = [&](int64_t k) { return P + (compact ? k : firsts[static_cast<size_t>(k)]) * v; };
      std::vector<double> logsumexp(static_cast<size_t>(nfirst));  // f32: log(total) + top
      parallel_for(nfirst, nfirst, [&](int64_t begin, int64_t end) {  // one range (Note [saved distinct rows])
        for (int64_t k = begin; k < end; ++k) {
          double top, total;
          softmax_row(X + firsts[static_cast<size_t>(k)] * v, prob_row(k), v, &top, &total);
          logsumexp[static_cast<size_t>(k)] = std::log(total) + top;
        }
      });
      parallel_for(b, chunk, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t k = row_of[static_cast<size_t>(i)];
          const T* p = prob_row(k);
          const int64_t first = firsts[static_cast<size_t>(k)];
          if (!compact && first != i) std::memcpy(P + i * v, p, static_cast<size_t>(v) * sizeof(T));
          const int64_t ti = static_cast<int64_t>(t[i]);
          if constexpr (std::is_same_v<T, double>) L[i] = -std::log(p[ti]);  // (row i's logits are its first row's bits)
          else L[i] = static_cast<T>(logsumexp[static_cast<size_t>(k)] - static_cast<double>(X[first * v + ti]));
        }
      });
    });
  });
}

void cross_entropy_backward(const Tensor& probs, const Tensor& prob_rows, const Tensor& targets, const Tensor& dloss,
                            double divisor, Tensor& dlogits, int64_t row_begin) {
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
      parallel_for(b, chunk_for(b, v * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const T gi = per_row ? g[i] : g[0];
          const T* p = P + (rows_of ? rows_of[i] : row_begin + i) * v;
          T* d = D + i * v;  // may be p itself (no row map): p[ti] is read before the row is written
          const int64_t ti = static_cast<int64_t>(t[i]);
          const T p_target = ti >= 0 && ti < v ? p[ti] : T(0);
          int64_t j = 0;  // ((p - onehot) / div) * gi, first with onehot = 0 everywhere (p - 0 is p)
          if constexpr (std::is_same_v<T, float>)
            if (avx512::available()) j = avx512::scale_row(p, d, v, power_of_two ? T(1) / div : div, power_of_two, gi);
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

}  // namespace tapegrad::cpu
