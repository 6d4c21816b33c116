// CPU elementwise kernels and in-place optimizer updates (xtensor over flat views).
//
// Rule: assignments go through xt::noalias. Every kernel here reads and writes element i only
// at index i, so an output that aliases an input (the engine's in-place gradient add) is safe,
// and xtensor skips the temporary it would otherwise allocate per call. For the same reason a
// large tensor's elements split into ranges that run on several cores (parallel_for) and give
// the bits one thread gives.
#include <algorithm>
#include <bit>
#include <cmath>

#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xoperation.hpp>

#include "ops/cpu/avx512.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dispatch.hpp"

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
    parallel_for(out.numel(), chunk_for(out.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      flat<T>(out, begin, end).fill(static_cast<T>(s / divisor));
    });
  });
}

void unary(Unary op, const Tensor& x, Tensor& y) {
  dispatch_float(kernels::unary_name(op), x.dtype(), [&]<class T>() {
    const Work work = op == Unary::neg || op == Unary::relu ? Work::streaming : Work::arithmetic;
    parallel_for(x.numel(), chunk_for(x.numel(), sizeof(T), work), [&](int64_t begin, int64_t end) {
      auto X = flat<T>(x, begin, end);
      auto Y = flat<T>(y, begin, end);
      switch (op) {
        case Unary::neg: xt::noalias(Y) = -X; break;
        case Unary::exp: xt::noalias(Y) = xt::exp(X); break;  // the C library's (Note [exp and log on each device])
        case Unary::log: xt::noalias(Y) = xt::log(X); break;
        case Unary::tanh: xt::noalias(Y) = xt::tanh(X); break;
        case Unary::relu: xt::noalias(Y) = xt::maximum(X, T(0)); break;
      }
    });
  });
}

void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(kernels::unary_name(op), x.dtype(), [&]<class T>() {
    const Work work = op == Unary::neg || op == Unary::relu ? Work::streaming : Work::arithmetic;
    parallel_for(x.numel(), chunk_for(x.numel(), sizeof(T), work), [&](int64_t begin, int64_t end) {
      auto X = flat<T>(x, begin, end);
      auto Y = flat<T>(y, begin, end);
      auto dY = flat<T>(dy, begin, end);
      auto dX = flat<T>(dx, begin, end);
      switch (op) {
        case Unary::neg: xt::noalias(dX) = -dY; break;
        case Unary::exp: xt::noalias(dX) = dY * Y; break;
        case Unary::log: xt::noalias(dX) = dY / X; break;
        case Unary::tanh: xt::noalias(dX) = dY * (T(1) - Y * Y); break;
        case Unary::relu: xt::noalias(dX) = xt::where(X > T(0), dY, T(0)); break;
      }
    });
  });
}

void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_float(kernels::binary_name(op), a.dtype(), [&]<class T>() {
    const Work work = op == Binary::div ? Work::arithmetic : Work::streaming;
    parallel_for(out.numel(), chunk_for(out.numel(), sizeof(T), work), [&](int64_t begin, int64_t end) {
      auto A = flat<T>(a, begin, end);
      auto B = flat<T>(b, begin, end);
      auto O = flat<T>(out, begin, end);
      switch (op) {
        case Binary::add: xt::noalias(O) = A + B; break;
        case Binary::sub: xt::noalias(O) = A - B; break;
        case Binary::mul: xt::noalias(O) = A * B; break;
        case Binary::div: xt::noalias(O) = A / B; break;
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
// With the gradient's row flags (Note [row-wise gradients] in graph.cpp) a block in rows flagged
// zero does not read the gradient either: such a block is one pass over w.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, uint8_t* zero_blocks,
                const uint8_t* grad_rows, int64_t grad_row_elems) {
  if (param.dtype() != DType::f32) throw Error(std::string("[adamw] no CPU kernel for ") + dtype_name(param.dtype()) + " (f32 only)");
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  auto update = [&](int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    const int64_t done = avx512::available() ? avx512::adamw_step(w + begin, g + begin, mm + begin, vv + begin, n, s)
                                             : 0;  // the same bits
    // spec/bob.md: per element, fp32, left to right, no fused multiply-add (-ffp-contract=off).
    for (int64_t i = begin + done; i < end; ++i) {
      float wi = w[i] * decay;
      float mi = s.beta1 * mm[i] + one_minus_b1 * g[i];
      float vi = s.beta2 * vv[i] + one_minus_b2 * g[i] * g[i];
      wi = wi - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
      w[i] = wi;
      mm[i] = mi;
      vv[i] = vi;
    }
  };
  // Elements with a zero gradient and moments cost a multiplication, the others a square root and
  // two divisions; the chunks, dealt round-robin to the threads, even that out where the used
  // rows of an embedding cluster (Note [intra-op threads]).
  const int64_t numel = param.numel();
  if (!zero_blocks) {
    parallel_for(numel, chunk_for(numel, sizeof(float), Work::arithmetic), update);
    return;
  }
  auto zero = [](const float* a, const float* b, int64_t n) {  // every bit of a[0..n) and b[0..n) clear
    if (avx512::available() && !avx512::all_zero_bits(a, b, n)) return false;
    for (int64_t j = avx512::available() ? n - n % 16 : 0; j < n; ++j)
      if (std::bit_cast<uint32_t>(a[j]) != 0 || std::bit_cast<uint32_t>(b[j]) != 0) return false;
    return true;
  };
  const bool decay_only_exact = avx512::adamw_zero_fast_path_exact(s);
  constexpr int64_t block = kernels::adamw_zero_block;
  const int64_t blocks = (numel + block - 1) / block;
  // Split like a streaming kernel: most blocks of an embedding are a pass over w alone, and
  // splitting the table over the cores hands the next kernels (which write the gradient's and
  // read the table's rows on one core) lines held by the other (docs/bob.md, Performance).
  const int64_t chunk = chunk_for(numel, sizeof(float), Work::streaming);  // in elements
  parallel_for(blocks, chunk >= numel ? blocks : std::max<int64_t>(1, chunk / block), [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const int64_t begin = k * block, end = std::min(numel, begin + block), n = end - begin;
      // the gradient's rows this block overlaps, when the engine knows which may be nonzero
      bool g_zero = false;
      if (grad_rows && grad_row_elems > 0) {
        g_zero = true;
        for (int64_t r = begin / grad_row_elems; r <= (end - 1) / grad_row_elems && g_zero; ++r) g_zero = !grad_rows[r];
      }
      if (decay_only_exact && zero_blocks[k] && (g_zero || zero(g + begin, g + begin, n))) {
        const int64_t done = avx512::available() ? avx512::scale_in_place(w + begin, n, decay) : 0;
        for (int64_t i = begin + done; i < end; ++i) w[i] = w[i] * decay;
        continue;
      }
      update(begin, end);
      zero_blocks[k] = zero(mm + begin, vv + begin, n);
    }
  });
}

}  // namespace tapegrad::cpu
