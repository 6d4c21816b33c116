// CPU elementwise kernels and in-place optimizer updates (xtensor over flat views).
//
// Rule: assignments go through xt::noalias. Every kernel here reads and writes element i only
// at index i, so an output that aliases an input (the engine's in-place gradient add) is safe,
// and xtensor skips the temporary it would otherwise allocate per call. For the same reason a
// large tensor's elements split into ranges that run on several cores (parallel_for) and give
// the bits one thread gives.
#include <algorithm>
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

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s) {
  if (param.dtype() != DType::f32) throw Error(std::string("[adamw] no CPU kernel for ") + dtype_name(param.dtype()) + " (f32 only)");
  float* w = param.data<float>();
  const float* g = grad.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  // Elements with a zero gradient and moments cost a multiplication, the others a square root and
  // two divisions; the chunks, dealt round-robin to the threads, even that out where the used
  // rows of an embedding cluster (Note [intra-op threads]).
  parallel_for(param.numel(), chunk_for(param.numel(), sizeof(float), Work::arithmetic), [&](int64_t begin, int64_t end) {
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
  });
}

}  // namespace tapegrad::cpu
