// CPU attention kernels: scaled dot-product attention forward and backward, the reference the
// CUDA kernels (src/cuda/attention.cu) are checked against. f64 row by row, as the formulas read
// (no tiles, no online softmax); f32 in blocks of query rows through OpenBLAS (Note [attention
// blocks]).
//
// Shapes: q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv), out (B, H, Tq, dv), lse and delta
// (B, H, Tq); "row" below is one (b, h, i). Causal (Tq == Tk) lets query i see keys 0..i.
//
// Note [attention arithmetic]
// Per query row i, over the keys j it sees:
//   s_j = (q_i . k_j) * scale;  m = max_j s_j;  e_j = exp(s_j - m);  l = sum_j e_j
//   p_j = e_j / l;  out_i = sum_j p_j v_j;  lse_i = m + log(l)
// and the backward recomputes the probabilities from lse (no (Tq, Tk) matrix is kept):
//   p_ij = exp(s_ij - lse_i);  delta_i = dout_i . out_i;  dP_ij = dout_i . v_j
//   dS_ij = p_ij * (dP_ij - delta_i);  dq_i = (sum_j dS_ij k_j) * scale
//   dk_j = (sum_i dS_ij q_i) * scale;  dv_j = sum_i p_ij dout_i
// f64: every sum is correctly rounded (exact_sum of the rounded products, as matmul_fsum's), and
// exp and log are the C library's; so the forward gives the bits of the composite
// softmax(scale(q @ k^T) + mask) @ v op by op with matmul_fsum's products (tests/ops checks it).
// f32: the products and sums in double, in index order, each result rounded to f32 once; lse is
// rounded to f32 and read back as such. delta stays in double (an f64 scratch for every dtype): a
// row whose probabilities are one 1 (T = 1, the first row when causal) has out = v exactly, so
// dP - delta is exactly 0 there and so are its dq and dk, on every device.
// The forward splits over rows; the backward makes dq row by row (pass 1, which also writes delta),
// then dk and dv key row by key row (pass 2, recomputing p and dS): every sum stays whole on one
// thread, so the bits do not depend on the thread count.
//
// Note [attention blocks]
// f32 takes the formulas above a block of 64 query rows at a time, with the products as sgemm
// calls: S = scale q_blk k^T over the keys the block sees (causal: keys 0 .. the block's last row,
// so the blocks above the diagonal are never computed), each row's softmax by softmax_rows' f32
// kernel on its visible keys (0 past them), out_blk = P v. The backward recomputes S and
// p = expf(s - lse), takes dP = dout_blk v^T, delta_i = sum_j p_ij dP_ij in double (equal to
// dout_i . out_i, and exactly dP where a row sees one key, p = 1: its dq and dk are exactly 0, as
// above), dS = p (dP - delta), then dq_blk = scale dS k, dk += scale dS^T q_blk and
// dv += P^T dout_blk, the blocks in order. The products are OpenBLAS's single-threaded sums (not
// in index order, so f32 results are not the row-by-row reference's bits, but within f32's
// rounding of them), and whole heads split over the threads: each head is the same BLAS calls
// on whichever thread runs it, so the bits do not depend on the thread count. delta is written
// as above (f64 scratch).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"

namespace tapegrad::cpu {

namespace {

// sum_{t < n} term(t), Note [attention arithmetic]: for f64 the terms (rounded products) summed
// correctly rounded through buf, for f32 the terms (exact products of floats, in double) added in
// order.
template <class T, class Term>
double sum_of(int64_t n, std::vector<double>& buf, Term term) {
  if constexpr (std::is_same_v<T, double>) {
    buf.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) buf[static_cast<size_t>(t)] = term(t);
    return exact_sum(buf.data(), static_cast<size_t>(n));
  } else {
    double acc = 0.0;
    for (int64_t t = 0; t < n; ++t) acc += term(t);
    return acc;
  }
}

// The sizes of one call, read from q (B, H, Tq, d), k and v.
struct Dims {
  int64_t heads, tq, tk, d, dv;  // heads = B * H
  explicit Dims(const Tensor& q, const Tensor& v)
      : heads(q.dim(0) * q.dim(1)), tq(q.dim(2)), tk(v.dim(2)), d(q.dim(3)), dv(v.dim(3)) {}
};

// Rows of `work` multiply-adds each, split over the threads: about 16K a chunk, from 64K in all
// (matmul's cut).
int64_t rows_chunk(int64_t rows, int64_t work) {
  work = std::max<int64_t>(work, 1);
  return rows * work < 65536 ? rows : std::max<int64_t>(1, 16384 / work);
}

template <class T>
struct Views {
  const T *q, *k, *v;
  double scale;
  Dims n;
  // The score of query row (h, i) and key j of head h: (q_i . k_j) * scale.
  double score(int64_t h, int64_t i, int64_t j, std::vector<double>& buf) const {
    const T* qi = q + (h * n.tq + i) * n.d;
    const T* kj = k + (h * n.tk + j) * n.d;
    return sum_of<T>(n.d, buf, [&](int64_t c) { return static_cast<double>(qi[c]) * kj[c]; }) * scale;
  }
  // dout_i . v_j, dout of head h's query row i.
  double dout_dot_v(const T* dout, int64_t h, int64_t i, int64_t j, std::vector<double>& buf) const {
    const T* gi = dout + (h * n.tq + i) * n.dv;
    const T* vj = v + (h * n.tk + j) * n.dv;
    return sum_of<T>(n.dv, buf, [&](int64_t c) { return static_cast<double>(gi[c]) * vj[c]; });
  }
};

template <class T>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out, Tensor& lse) {
  const Views<T> a{static_cast<const T*>(q.raw_data()), static_cast<const T*>(k.raw_data()),
                   static_cast<const T*>(v.raw_data()), scale, Dims(q, v)};
  const Dims& n = a.n;
  T* o = static_cast<T*>(out.raw_data());
  T* l_out = static_cast<T*>(lse.raw_data());
  const int64_t rows = n.heads * n.tq;
  parallel_for(rows, rows_chunk(rows, n.tk * (n.d + n.dv)), [&](int64_t begin, int64_t end) {
    std::vector<double> p(static_cast<size_t>(n.tk)), buf;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = row / n.tq, i = row % n.tq;
      const int64_t keys = causal ? i + 1 : n.tk;
      for (int64_t j = 0; j < keys; ++j) p[static_cast<size_t>(j)] = a.score(h, i, j, buf);
      double top = p[0];
      for (int64_t j = 1; j < keys; ++j) top = p[static_cast<size_t>(j)] > top ? p[static_cast<size_t>(j)] : top;
      for (int64_t j = 0; j < keys; ++j) p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - top);
      const double total = sum_of<T>(keys, buf, [&](int64_t j) { return p[static_cast<size_t>(j)]; });
      for (int64_t j = 0; j < keys; ++j) p[static_cast<size_t>(j)] = p[static_cast<size_t>(j)] / total;
      const T* vh = a.v + h * n.tk * n.dv;
      for (int64_t c = 0; c < n.dv; ++c)
        o[row * n.dv + c] = static_cast<T>(
            sum_of<T>(keys, buf, [&](int64_t j) { return p[static_cast<size_t>(j)] * vh[j * n.dv + c]; }));
      l_out[row] = static_cast<T>(top + std::log(total));
    }
  });
}

template <class T>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
              const Tensor& lse, bool causal, double scale, Tensor& delta, Tensor& dq, Tensor& dk, Tensor& dv) {
  const Views<T> a{static_cast<const T*>(q.raw_data()), static_cast<const T*>(k.raw_data()),
                   static_cast<const T*>(v.raw_data()), scale, Dims(q, v)};
  const Dims& n = a.n;
  const T* o = static_cast<const T*>(out.raw_data());
  const T* g = static_cast<const T*>(dout.raw_data());
  const T* l_in = static_cast<const T*>(lse.raw_data());
  double* dl = static_cast<double*>(delta.raw_data());
  T *gq = static_cast<T*>(dq.raw_data()), *gk = static_cast<T*>(dk.raw_data()), *gv = static_cast<T*>(dv.raw_data());
  const int64_t work = n.tk * (n.d + n.dv);  // per row of either pass, about

  // pass 1, by query rows: delta_i, then dq_i = (sum_j dS_ij k_j) * scale
  const int64_t qrows = n.heads * n.tq;
  parallel_for(qrows, rows_chunk(qrows, work), [&](int64_t begin, int64_t end) {
    std::vector<double> ds(static_cast<size_t>(n.tk)), buf;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = row / n.tq, i = row % n.tq;
      const int64_t keys = causal ? i + 1 : n.tk;
      dl[row] = sum_of<T>(n.dv, buf, [&](int64_t c) { return static_cast<double>(g[row * n.dv + c]) * o[row * n.dv + c]; });
      const double d_i = dl[row], lse_i = l_in[row];
      for (int64_t j = 0; j < keys; ++j) {
        const double p = std::exp(a.score(h, i, j, buf) - lse_i);
        ds[static_cast<size_t>(j)] = p * (a.dout_dot_v(g, h, i, j, buf) - d_i);
      }
      const T* kh = a.k + h * n.tk * n.d;
      for (int64_t c = 0; c < n.d; ++c)
        gq[row * n.d + c] = static_cast<T>(
            sum_of<T>(keys, buf, [&](int64_t j) { return ds[static_cast<size_t>(j)] * kh[j * n.d + c]; }) * scale);
    }
  });

  // pass 2, by key rows: dv_j = sum_i p_ij dout_i, dk_j = (sum_i dS_ij q_i) * scale
  const int64_t krows = n.heads * n.tk;
  parallel_for(krows, rows_chunk(krows, n.tq * (n.d + n.dv)), [&](int64_t begin, int64_t end) {
    std::vector<double> p(static_cast<size_t>(n.tq)), ds(static_cast<size_t>(n.tq)), buf;
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = row / n.tk, j = row % n.tk;
      const int64_t first = causal ? j : 0;  // the queries that see key j: first .. Tq - 1
      for (int64_t i = first; i < n.tq; ++i) {
        const int64_t r = h * n.tq + i;
        p[static_cast<size_t>(i)] = std::exp(a.score(h, i, j, buf) - static_cast<double>(l_in[r]));
        ds[static_cast<size_t>(i)] = p[static_cast<size_t>(i)] * (a.dout_dot_v(g, h, i, j, buf) - dl[r]);
      }
      const int64_t count = n.tq - first;
      const T* gh = g + (h * n.tq + first) * n.dv;
      const T* qh = a.q + (h * n.tq + first) * n.d;
      const double* ph = p.data() + first;
      const double* dsh = ds.data() + first;
      for (int64_t c = 0; c < n.dv; ++c)
        gv[row * n.dv + c] = static_cast<T>(sum_of<T>(count, buf, [&](int64_t t) { return ph[t] * gh[t * n.dv + c]; }));
      for (int64_t c = 0; c < n.d; ++c)
        gk[row * n.d + c] =
            static_cast<T>(sum_of<T>(count, buf, [&](int64_t t) { return dsh[t] * qh[t * n.d + c]; }) * scale);
    }
  });
}

// ---- f32: blocks of query rows through OpenBLAS (Note [attention blocks])

constexpr int64_t kBlock = 64;  // query rows per block

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// The query rows [i0, i0 + rows) of a block see keys [0, keys(i0, rows)); row i sees visible(i) of them.
struct Blocks {
  Dims n;
  bool causal;
  int64_t keys(int64_t i0, int64_t rows) const { return causal ? i0 + rows : n.tk; }
  int64_t visible(int64_t i) const { return causal ? i + 1 : n.tk; }
};

// Heads split over the threads, whole: each head's products are the same BLAS calls on any thread.
template <class F>
void for_each_head(const Dims& n, F&& f) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // Note [BLAS threads] in cpu/linalg.cpp
  parallel_for(n.heads, rows_chunk(n.heads, n.tq * n.tk * (n.d + n.dv)), [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(3 * kBlock * n.tk));
    for (int64_t h = begin; h < end; ++h) f(h, scratch.data());
  });
}

void forward_f32(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out, Tensor& lse) {
  const Blocks b{Dims(q, v), causal};
  const Dims& n = b.n;
  const float *Q = static_cast<const float*>(q.raw_data()), *K = static_cast<const float*>(k.raw_data()),
              *V = static_cast<const float*>(v.raw_data());
  float *O = static_cast<float*>(out.raw_data()), *L = static_cast<float*>(lse.raw_data());
  for_each_head(n, [&](int64_t h, float* scratch) {
    const float *qh = Q + h * n.tq * n.d, *kh = K + h * n.tk * n.d, *vh = V + h * n.tk * n.dv;
    float* S = scratch;               // (rows, keys): the scores
    float* P = scratch + kBlock * n.tk;  // (rows, keys): the probabilities, 0 past a row's keys
    for (int64_t i0 = 0; i0 < n.tq; i0 += kBlock) {
      const int64_t rows = std::min(kBlock, n.tq - i0), keys = b.keys(i0, rows);
      sgemm(false, true, rows, keys, n.d, static_cast<float>(scale), qh + i0 * n.d, n.d, kh, n.d, 0.0f, S, keys);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r, seen = b.visible(i);
        double top, total;
        softmax_row_f32(S + r * keys, P + r * keys, seen, &top, &total);
        std::fill(P + r * keys + seen, P + (r + 1) * keys, 0.0f);
        L[h * n.tq + i] = static_cast<float>(top + std::log(total));
      }
      sgemm(false, false, rows, n.dv, keys, 1.0f, P, keys, vh, n.dv, 0.0f, O + (h * n.tq + i0) * n.dv, n.dv);
    }
  });
}

void backward_f32(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse, bool causal,
                  double scale, Tensor& delta, Tensor& dq, Tensor& dk, Tensor& dv) {
  const Blocks b{Dims(q, v), causal};
  const Dims& n = b.n;
  const float *Q = static_cast<const float*>(q.raw_data()), *K = static_cast<const float*>(k.raw_data()),
              *V = static_cast<const float*>(v.raw_data()), *G = static_cast<const float*>(dout.raw_data()),
              *L = static_cast<const float*>(lse.raw_data());
  double* dl = static_cast<double*>(delta.raw_data());
  float *gq = static_cast<float*>(dq.raw_data()), *gk = static_cast<float*>(dk.raw_data()),
        *gv = static_cast<float*>(dv.raw_data());
  const float s = static_cast<float>(scale);
  for_each_head(n, [&](int64_t h, float* scratch) {
    const float *qh = Q + h * n.tq * n.d, *kh = K + h * n.tk * n.d, *vh = V + h * n.tk * n.dv, *gh = G + h * n.tq * n.dv;
    float *dkh = gk + h * n.tk * n.d, *dvh = gv + h * n.tk * n.dv;
    std::fill(dkh, dkh + n.tk * n.d, 0.0f);
    std::fill(dvh, dvh + n.tk * n.dv, 0.0f);
    float* P = scratch;                       // (rows, keys)
    float* dP = scratch + kBlock * n.tk;      // (rows, keys), then dS in place
    float* S = scratch + 2 * kBlock * n.tk;   // (rows, keys)
    for (int64_t i0 = 0; i0 < n.tq; i0 += kBlock) {
      const int64_t rows = std::min(kBlock, n.tq - i0), keys = b.keys(i0, rows);
      sgemm(false, true, rows, keys, n.d, s, qh + i0 * n.d, n.d, kh, n.d, 0.0f, S, keys);
      sgemm(false, true, rows, keys, n.dv, 1.0f, gh + i0 * n.dv, n.dv, vh, n.dv, 0.0f, dP, keys);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r, seen = b.visible(i), row = h * n.tq + i;
        float *p = P + r * keys, *d = dP + r * keys;
        // whole vectors past the visible keys too (overwritten with 0 below): no scalar tail
        exp_shifted_row(S + r * keys, L[row], p, std::min(keys, (seen + 15) / 16 * 16));
        double delta_i = 0.0;  // sum_j p_ij dP_ij = dout_i . out_i
        for (int64_t j = 0; j < seen; ++j) delta_i += static_cast<double>(p[j]) * d[j];
        for (int64_t j = 0; j < seen; ++j) d[j] = static_cast<float>(p[j] * (static_cast<double>(d[j]) - delta_i));
        std::fill(p + seen, p + keys, 0.0f);
        std::fill(d + seen, d + keys, 0.0f);
        dl[row] = delta_i;
      }
      sgemm(false, false, rows, n.d, keys, s, dP, keys, kh, n.d, 0.0f, gq + (h * n.tq + i0) * n.d, n.d);  // dq = dS k s
      sgemm(true, false, keys, n.d, rows, s, dP, keys, qh + i0 * n.d, n.d, 1.0f, dkh, n.d);       // dk += dS^T q s
      sgemm(true, false, keys, n.dv, rows, 1.0f, P, keys, gh + i0 * n.dv, n.dv, 1.0f, dvh, n.dv);  // dv += P^T dout
    }
  });
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out,
                       Tensor& lse) {
  if (out.numel() == 0 && lse.numel() == 0) return;
  dispatch_float("scaled_dot_product_attention", q.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) forward_f32(q, k, v, causal, scale, out, lse);
    else forward<T>(q, k, v, causal, scale, out, lse);
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, double scale, Tensor& delta, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  dispatch_float("scaled_dot_product_attention_backward", q.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) backward_f32(q, k, v, dout, lse, causal, scale, delta, dq, dk, dv);
    else backward<T>(q, k, v, out, dout, lse, causal, scale, delta, dq, dk, dv);
  });
}

}  // namespace tapegrad::cpu
