// CPU elementwise kernels and in-place optimizer updates (xtensor over flat views).
//
// Rule: assignments go through xt::noalias. Every kernel here reads and writes element i only
// at index i, so an output that aliases an input (the engine's in-place gradient add) is safe,
// and xtensor skips the temporary it would otherwise allocate per call. For the same reason a
// large tensor's elements split into ranges that run on several cores (parallel_for) and give
// the bits one thread gives.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xoperation.hpp>

#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/simd.hpp"

namespace tapegrad::cpu {

void fill(Tensor& out, double value) {
  dispatch_float("fill", out.dtype(), [&]<class T>() {
    parallel_for(out.numel(), chunk_for(out.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      flat<T>(out, begin, end).fill(static_cast<T>(value));
    });
  });
}

void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor) {
  dispatch_float("fill_from_scalar", out.dtype(), [&]<class T>() {
    const double s = static_cast<double>(*static_cast<const T*>(scalar.raw_data()));
    parallel_for(out.numel(), range_per_thread(out.numel(), chunk_for(out.numel(), sizeof(T), Work::arithmetic)),
                 [&](int64_t begin, int64_t end) {
      flat<T>(out, begin, end).fill(static_cast<T>(s / divisor));
    });
  });
}

namespace {

using kernels::bf16;

// Note [bf16 elementwise]
// bf16 tensors (autocast's activations) are storage: an elementwise kernel widens each bf16
// element to f32, computes in f32 with the f32 functor, and rounds the result once (to nearest
// even) where its output is bf16. A binary op may mix f32 and bf16 among its operands and output
// (f32 + bf16 -> f32, the residual stream meeting a product's output); shapes must be equal (the
// op front-ends cast a broadcast's bf16 operands to f32 first). CUDA computes the same way, so the
// two devices differ only where the f32 functor's exp, log or tanh do.
template <class T>
float wide(T x) { return kernels::convert<float>(x); }

// out[i] = f(a[i], b[i]) over flat ranges, each of a, b, out f32 or bf16
template <class F>
void binary_mixed(const Tensor& a, const Tensor& b, Tensor& out) {
  auto run = [&]<class A, class B, class O>() {
    const A* X = static_cast<const A*>(a.raw_data());
    const B* Y = static_cast<const B*>(b.raw_data());
    O* Z = static_cast<O*>(out.raw_data());
    parallel_for(out.numel(), range_per_thread(out.numel(), chunk_for(out.numel(), 4, Work::arithmetic)),
                 [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) Z[i] = kernels::convert<O>(F::forward(wide(X[i]), wide(Y[i])));
    });
  };
  auto with_b = [&]<class A>() {
    if (b.dtype() == DType::bf16) out.dtype() == DType::bf16 ? run.template operator()<A, bf16, bf16>() : run.template operator()<A, bf16, float>();
    else out.dtype() == DType::bf16 ? run.template operator()<A, float, bf16>() : run.template operator()<A, float, float>();
  };
  if (a.dtype() == DType::bf16) with_b.template operator()<bf16>();
  else with_b.template operator()<float>();
}

}  // namespace

// The functor's forward and backward over flat ranges (unary_ops.hpp): one loop for every op.
void unary(Unary op, const Tensor& x, Tensor& y) {
  if (x.dtype() == DType::bf16) {  // Note [bf16 elementwise]
    kernels::visit_unary(op, [&]<class F>() {
      const bf16* X = static_cast<const bf16*>(x.raw_data());
      bf16* Y = static_cast<bf16*>(y.raw_data());
      parallel_for(x.numel(), range_per_thread(x.numel(), chunk_for(x.numel(), 2, Work::arithmetic)),
                   [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) Y[i] = kernels::to_bf16(F::forward(wide(X[i])));
      });
    });
    return;
  }
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      const T* X = static_cast<const T*>(x.raw_data());
      T* Y = static_cast<T*>(y.raw_data());
      const Work work = F::streaming ? Work::streaming : Work::arithmetic;
      const simd::Kernels& k = simd::active_kernels();  // f32 tanh ... gelu: Note [vector unary math]
      parallel_for(x.numel(), range_per_thread(x.numel(), chunk_for(x.numel(), sizeof(T), work)), [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<T, float>)
          if (k.unary_row(op, X + begin, Y + begin, end - begin)) return;
        for (int64_t i = begin; i < end; ++i) Y[i] = F::forward(X[i]);
      });
    });
  });
}

void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (x.dtype() == DType::bf16) {  // Note [bf16 elementwise]
    kernels::visit_unary(op, [&]<class F>() {
      const bf16* X = static_cast<const bf16*>(x.raw_data());
      const bf16* Y = static_cast<const bf16*>(y.raw_data());
      const bf16* dY = static_cast<const bf16*>(dy.raw_data());
      bf16* dX = static_cast<bf16*>(dx.raw_data());
      parallel_for(x.numel(), range_per_thread(x.numel(), chunk_for(x.numel(), 2, Work::arithmetic)),
                   [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dX[i] = kernels::to_bf16(F::backward(wide(X[i]), wide(Y[i]), wide(dY[i])));
      });
    });
    return;
  }
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      const T* X = static_cast<const T*>(x.raw_data());
      const T* Y = static_cast<const T*>(y.raw_data());
      const T* dY = static_cast<const T*>(dy.raw_data());
      T* dX = static_cast<T*>(dx.raw_data());
      const Work work = F::streaming ? Work::streaming : Work::arithmetic;
      const simd::Kernels& k = simd::active_kernels();
      parallel_for(x.numel(), range_per_thread(x.numel(), chunk_for(x.numel(), sizeof(T), work)), [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<T, float>)
          if (k.unary_backward_row(op, X + begin, dY + begin, dX + begin, end - begin)) return;
        for (int64_t i = begin; i < end; ++i) dX[i] = F::backward(X[i], Y[i], dY[i]);
      });
    });
  });
}

// Equal shapes: add, sub, mul and div as loops over flat ranges; anything else (the
// other ops, broadcasting) walks (cpu/strided.cpp).
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::bf16 || b.dtype() == DType::bf16 || out.dtype() == DType::bf16)  // Note [bf16 elementwise]
    return kernels::visit_binary(op, [&]<class F>() { binary_mixed<F>(a, b, out); });
  const bool integer = out.dtype() == DType::i32 || out.dtype() == DType::i64;
  if (!(a.shape() == b.shape()) || op > Binary::div || integer) return binary_walk(op, a, b, out);
  dispatch_float(kernels::binary_name(op), a.dtype(), [&]<class T>() {
    const Work work = Work::arithmetic;  // split from 64 KiB: two cores' caches beat one core's
    const T* A = static_cast<const T*>(a.raw_data());
    const T* B = static_cast<const T*>(b.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    // plain loops over the range (the compiler vectorizes them; an output aliasing an input is read
    // before it is written at each index)
    parallel_for(out.numel(), range_per_thread(out.numel(), chunk_for(out.numel(), sizeof(T), work)), [&](int64_t begin, int64_t end) {
      switch (op) {
        case Binary::add: for (int64_t i = begin; i < end; ++i) O[i] = A[i] + B[i]; break;
        case Binary::sub: for (int64_t i = begin; i < end; ++i) O[i] = A[i] - B[i]; break;
        case Binary::mul: for (int64_t i = begin; i < end; ++i) O[i] = A[i] * B[i]; break;
        case Binary::div: for (int64_t i = begin; i < end; ++i) O[i] = A[i] / B[i]; break;
        default: break;
      }
    });
  });
}

void scale(const Tensor& x, double s, Tensor& y) {
  dispatch_float("scale", x.dtype(), [&]<class T>() {
    parallel_for(x.numel(), chunk_for(x.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      auto Y = flat<T>(y, begin, end);
      xt::noalias(Y) = flat<T>(x, begin, end) * static_cast<T>(s);
    });
  });
}

void sgd_step(Tensor& param, const Tensor& grad, double lr) {
  dispatch_float("sgd", param.dtype(), [&]<class T>() {
    parallel_for(param.numel(), chunk_for(param.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      auto P = flat<T>(param, begin, end);
      xt::noalias(P) = P - static_cast<T>(lr) * flat<T>(grad, begin, end);  // p - lr * g, as the reference writes it
    });
  });
}

// Note [adamw zero blocks]
// An embedding's moments stay +0 on the rows no input has touched, and AdamW only needs w *= decay
// there (Note [adamw zero fast path]); checking that costs reading g, m and v. With zero_blocks the
// optimizer keeps one flag per block of 256 elements saying m and v are all +0 there: a flagged
// block whose gradient is all +0 too gets w *= decay without reading m or v (what the fast path
// would give, under the same condition on the scalars), and every other block runs the full
// update, after which its flag is recomputed from the m and v it wrote. The flags are a cache of
// the moments' bits, so whoever writes the moments otherwise must drop them (AdamW::set_moments).
// With a row-sparse gradient (graph.hpp's RowSparse) a block in rows the gradient does not name is
// known to be +0 without reading anything: such a block is one pass over w.
namespace {

// f64 parameters: the same expressions in fp64 (no zero blocks, no vector path).
void adamw_step_f64(const kernels::AdamWSlot& slot, const AdamWScalars& s, const std::vector<const double*>& rows,
                    int64_t d) {
  double* w = slot.param->mutable_data<double>();
  const double* g = slot.grad->defined() ? slot.grad->data<double>() : nullptr;
  double* mm = slot.m->mutable_data<double>();
  double* vv = slot.v->mutable_data<double>();
  const double decay = 1.0 - s.lr64 * s.weight_decay64;
  const int64_t numel = slot.param->numel();
  parallel_for(numel, chunk_for(numel, sizeof(double), Work::arithmetic), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double gi = g ? g[i] : (rows[static_cast<size_t>(i / d)] ? rows[static_cast<size_t>(i / d)][i % d] : 0.0);
      double wi = w[i] * decay;
      const double mi = s.beta1_64 * mm[i] + (1.0 - s.beta1_64) * gi;
      const double vi = s.beta2_64 * vv[i] + (1.0 - s.beta2_64) * gi * gi;
      wi = wi - s.step_size64 * (mi / (std::sqrt(vi) / s.bc2_sqrt64 + s.eps64));
      w[i] = wi;
      mm[i] = mi;
      vv[i] = vi;
    }
  });
}

// For a row-sparse gradient of a (n, d) parameter: each row's gradient row, or nullptr for +0.
template <class T>
std::vector<const T*> sparse_rows(const kernels::AdamWSlot& slot, int64_t* d) {
  std::vector<const T*> out;
  if (!slot.rows) return out;
  const Tensor& p = *slot.param;
  *d = p.numel() / std::max<int64_t>(p.dim(0), 1);
  out.assign(static_cast<size_t>(p.dim(0)), nullptr);
  const T* rows = slot.rows->data<T>();
  dispatch_index("adamw", slot.row_ids->dtype(), [&]<class I>() {
    const I* ids = static_cast<const I*>(slot.row_ids->raw_data());
    for (int64_t j = 0; j < slot.row_ids->numel(); ++j) {
      const int64_t r = static_cast<int64_t>(ids[j]);
      if (r < 0 || r >= p.dim(0))
        throw Error("[adamw] a row-sparse gradient names row " + std::to_string(r) + " of a parameter " + p.shape().str());
      out[static_cast<size_t>(r)] = rows + j * *d;
    }
  });
  return out;
}

}  // namespace

void adamw_step(const kernels::AdamWSlot& slot, const AdamWScalars& s) {
  int64_t d = 1;
  if (slot.param->dtype() == DType::f64) {
    // sparse_rows sets d: called before d is read (a call's arguments have no order)
    const std::vector<const double*> rows = sparse_rows<double>(slot, &d);
    return adamw_step_f64(slot, s, rows, d);
  }
  if (slot.param->dtype() != DType::f32)
    throw Error(std::string("[adamw] no CPU kernel for ") + dtype_name(slot.param->dtype()) + " (f64 and f32)");
  const std::vector<const float*> rows = sparse_rows<float>(slot, &d);
  float* w = slot.param->mutable_data<float>();
  const float* dense = slot.grad->defined() ? slot.grad->data<float>() : nullptr;
  float* mm = slot.m->mutable_data<float>();
  float* vv = slot.v->mutable_data<float>();
  uint8_t* zero_blocks = slot.zero_blocks;
  const float decay = kernels::adamw_decay(s);
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  const simd::Kernels& vk = simd::active_kernels();
  // elements [begin, end) with their gradient at g[0 .. end - begin)
  auto update = [&](int64_t begin, int64_t end, const float* g) {
    const int64_t n = end - begin;
    const int64_t done = vk.adamw_step(w + begin, g, mm + begin, vv + begin, n, s);  // the same bits
    // per element, fp32, left to right, no fused multiply-add (-ffp-contract=off): docs/bob.md
    for (int64_t i = begin + done; i < end; ++i) {
      const float gi = g[i - begin];
      float wi = w[i] * decay;
      float mi = s.beta1 * mm[i] + one_minus_b1 * gi;
      float vi = s.beta2 * vv[i] + one_minus_b2 * gi * gi;
      wi = wi - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
      w[i] = wi;
      mm[i] = mi;
      vv[i] = vi;
    }
  };
  // A block's gradient: a pointer into the dense gradient or a sparse row, else gathered into
  // `buffer` (a block across rows, or a +0 row); *zero tells whether it is known to be all +0.
  auto block_grad = [&](int64_t begin, int64_t end, float* buffer, bool* zero) -> const float* {
    *zero = false;
    if (dense) return dense + begin;
    const int64_t first = begin / d, last = (end - 1) / d;
    if (first == last && rows[static_cast<size_t>(first)]) return rows[static_cast<size_t>(first)] + begin % d;
    *zero = true;
    for (int64_t r = first; r <= last; ++r) *zero = *zero && !rows[static_cast<size_t>(r)];
    static constexpr float kZeros[kernels::adamw_zero_block] = {};
    if (*zero) return kZeros;
    for (int64_t i = begin; i < end; ++i) {
      const float* row = rows[static_cast<size_t>(i / d)];
      buffer[i - begin] = row ? row[i % d] : 0.0f;
    }
    return buffer;
  };
  // Elements with a zero gradient and moments cost a multiplication, the others a square root and
  // two divisions; the chunks, dealt round-robin to the threads, even that out where the used
  // rows of an embedding cluster (Note [intra-op threads]).
  const int64_t numel = slot.param->numel();
  constexpr int64_t block = kernels::adamw_zero_block;
  if (!zero_blocks) {
    parallel_for(numel, chunk_for(numel, sizeof(float), Work::arithmetic), [&](int64_t begin, int64_t end) {
      float buffer[block];
      for (int64_t b = begin; b < end; b += block) {
        const int64_t e = std::min(end, b + block);
        bool zero;
        update(b, e, block_grad(b, e, buffer, &zero));
      }
    });
    return;
  }
  auto zero = [&](const float* a, const float* b, int64_t n) { return vk.all_zero_bits(a, b, n); };
  const bool decay_only_exact = simd::adamw_zero_fast_path_exact(s);
  const int64_t blocks = (numel + block - 1) / block;
  // Split like a streaming kernel: most blocks of an embedding are a pass over w alone, and
  // splitting the table over the cores hands the next kernels (which read the table's rows on one
  // core) lines held by the other (docs/bob.md, Performance).
  const int64_t chunk = chunk_for(numel, sizeof(float), Work::streaming);  // in elements
  parallel_for(blocks, chunk >= numel ? blocks : std::max<int64_t>(1, chunk / block), [&](int64_t first, int64_t last) {
    float buffer[block];
    for (int64_t k = first; k < last; ++k) {
      const int64_t begin = k * block, end = std::min(numel, begin + block), n = end - begin;
      bool g_zero;
      const float* g = block_grad(begin, end, buffer, &g_zero);
      if (decay_only_exact && zero_blocks[k] && (g_zero || zero(g, g, n))) {
        const int64_t done = vk.scale_in_place(w + begin, n, decay);
        for (int64_t i = begin + done; i < end; ++i) w[i] = w[i] * decay;
        continue;
      }
      update(begin, end, g);
      zero_blocks[k] = zero(mm + begin, vv + begin, n);
    }
  });
}

void adamw_step_many(const std::vector<kernels::AdamWSlot>& slots, const AdamWScalars& s) {
  for (const kernels::AdamWSlot& slot : slots) adamw_step(slot, s);
}

}  // namespace tapegrad::cpu
