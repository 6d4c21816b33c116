// CPU elementwise kernels and in-place optimizer updates (xtensor over flat views).
//
// Rule: assignments go through xt::noalias. Every kernel here reads and writes element i only
// at index i, so an output that aliases an input (the engine's in-place gradient add) is safe,
// and xtensor skips the temporary it would otherwise allocate per call.
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
  dispatch_float("fill", out.dtype(), [&]<class T>() { flat<T>(out).fill(static_cast<T>(value)); });
}

void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor) {
  dispatch_float("fill_from_scalar", out.dtype(), [&]<class T>() {
    const double s = static_cast<double>(*static_cast<const T*>(scalar.raw_data()));
    flat<T>(out).fill(static_cast<T>(s / divisor));
  });
}

void unary(Unary op, const Tensor& x, Tensor& y) {
  dispatch_float(kernels::unary_name(op), x.dtype(), [&]<class T>() {
    auto X = flat<T>(x);
    auto Y = flat<T>(y);
    switch (op) {
      case Unary::neg: xt::noalias(Y) = -X; break;
      case Unary::exp: xt::noalias(Y) = xt::exp(X); break;  // the C library's (Note [exp and log on each device])
      case Unary::log: xt::noalias(Y) = xt::log(X); break;
      case Unary::tanh: xt::noalias(Y) = xt::tanh(X); break;
      case Unary::relu: xt::noalias(Y) = xt::maximum(X, T(0)); break;
    }
  });
}

void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(kernels::unary_name(op), x.dtype(), [&]<class T>() {
    auto X = flat<T>(x);
    auto Y = flat<T>(y);
    auto dY = flat<T>(dy);
    auto dX = flat<T>(dx);
    switch (op) {
      case Unary::neg: xt::noalias(dX) = -dY; break;
      case Unary::exp: xt::noalias(dX) = dY * Y; break;
      case Unary::log: xt::noalias(dX) = dY / X; break;
      case Unary::tanh: xt::noalias(dX) = dY * (T(1) - Y * Y); break;
      case Unary::relu: xt::noalias(dX) = xt::where(X > T(0), dY, T(0)); break;
    }
  });
}

void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_float(kernels::binary_name(op), a.dtype(), [&]<class T>() {
    auto A = flat<T>(a);
    auto B = flat<T>(b);
    auto O = flat<T>(out);
    switch (op) {
      case Binary::add: xt::noalias(O) = A + B; break;
      case Binary::sub: xt::noalias(O) = A - B; break;
      case Binary::mul: xt::noalias(O) = A * B; break;
      case Binary::div: xt::noalias(O) = A / B; break;
    }
  });
}

void scale(const Tensor& x, double s, Tensor& y) {
  dispatch_float("scale", x.dtype(), [&]<class T>() {
    auto Y = flat<T>(y);
    xt::noalias(Y) = flat<T>(x) * static_cast<T>(s);
  });
}

void sgd_step(Tensor& param, const Tensor& grad, double lr) {
  dispatch_float("sgd", param.dtype(), [&]<class T>() {
    auto P = flat<T>(param);
    xt::noalias(P) = P - static_cast<T>(lr) * flat<T>(grad);  // p - lr * g, as the reference writes it
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
  const int64_t n = param.numel();
  const int64_t done = avx512::available() ? avx512::adamw_step(w, g, mm, vv, n, s) : 0;  // the same bits
  // spec/bob.md: per element, fp32, left to right, no fused multiply-add (-ffp-contract=off).
  for (int64_t i = done; i < n; ++i) {
    float wi = w[i] * decay;
    float mi = s.beta1 * mm[i] + one_minus_b1 * g[i];
    float vi = s.beta2 * vv[i] + one_minus_b2 * g[i] * g[i];
    wi = wi - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
    w[i] = wi;
    mm[i] = mi;
    vv[i] = vi;
  }
}

}  // namespace tapegrad::cpu
