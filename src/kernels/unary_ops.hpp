// The elementwise unary ops, each written once: its forward y = f(x) and its derivative
// dx = dy * f'(x) as one functor that the CPU loop (cpu/elementwise.cpp) and the CUDA kernel
// (src/cuda/elementwise.cu) both instantiate, and the text that the op table (ops/op_table.cpp),
// the tape dumps, docs/ops.md and the op-case tests read.
//
// Adding an op (docs/adding-an-op.md): its functor below and its line in TG_UNARY_OPS. The enum,
// the kernels on both devices, ops::NAME(x), its row in the derivatives table and its tests
// follow from that line.
//
// Rules: forward and backward are pure functions of their arguments (x, y = f(x), dy), so an
// output may alias an input and any split of a tensor over threads gives the same bits. f64 exp
// and log: the C library's on the CPU, correctly rounded ones on CUDA (Note [exp and log on each
// device] in cr_math.hpp). NaN is never hidden: an op whose math is defined for NaN returns NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD, cr_exp, cr_log

namespace tapegrad::kernels {

// The math each device brings: on the host the C library's, on the device CUDA's (f32) or the
// correctly rounded ones (f64 exp and log).
template <class T> TG_HD T exp_of(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) return cr_exp(x);
  else return expf(x);
#else
  return std::exp(x);
#endif
}
template <class T> TG_HD T log_of(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) return cr_log(x);
  else return logf(x);
#else
  return std::log(x);
#endif
}
template <class T> TG_HD T tanh_of(T x) {
#if defined(__CUDA_ARCH__)
  return tanh(x);
#else
  return std::tanh(x);
#endif
}

template <class T> TG_HD T sqrt_of(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}
template <class T> TG_HD T erf_of(T x) {
#if defined(__CUDA_ARCH__)
  return erf(x);
#else
  return std::erf(x);
#endif
}
template <class T> TG_HD T pow_of(T x, T y) {
#if defined(__CUDA_ARCH__)
  return pow(x, y);
#else
  return std::pow(x, y);
#endif
}

// Each functor: its name, the forward and derivative as text, forward(x) and backward(x, y, dy).
// It derives from UnaryOp, whose defaults it overrides by declaring the same member.
struct UnaryOp {
  static constexpr double lo = -2, hi = 2;  // where the gradient check samples x (relu's keeps off 0)
  // a stream of memory more than arithmetic: the CPU splits it over threads later
  static constexpr bool streaming = false;
  // the backward reads y, else x (or neither): the CUDA kernels load only the one it reads
  static constexpr bool backward_reads_y = false;
};

struct Neg : UnaryOp {
  static constexpr const char *name = "neg", *forward_text = "y = -x", *backward_text = "dx = -dy";
  static constexpr bool streaming = true;
  template <class T> TG_HD static T forward(T x) { return -x; }
  template <class T> TG_HD static T backward(T, T, T dy) { return -dy; }
};

struct Exp : UnaryOp {
  static constexpr const char *name = "exp", *forward_text = "y = exp(x)", *backward_text = "dx = dy * y";
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) { return exp_of(x); }
  template <class T> TG_HD static T backward(T, T y, T dy) { return dy * y; }
};

struct Log : UnaryOp {
  static constexpr const char *name = "log", *forward_text = "y = log(x)", *backward_text = "dx = dy / x";
  static constexpr double lo = 0.5, hi = 3;
  template <class T> TG_HD static T forward(T x) { return log_of(x); }
  template <class T> TG_HD static T backward(T x, T, T dy) { return dy / x; }
};

struct Tanh : UnaryOp {
  static constexpr const char *name = "tanh", *forward_text = "y = tanh(x)", *backward_text = "dx = dy * (1 - y^2)";
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) { return tanh_of(x); }
  template <class T> TG_HD static T backward(T, T y, T dy) { return dy * (T(1) - y * y); }
};

// relu keeps NaN (as PyTorch's clamp_min does) and passes the gradient where y is not <= 0 (NaN
// included), as PyTorch's threshold_backward does.
struct Relu : UnaryOp {
  static constexpr const char *name = "relu", *forward_text = "y = max(x, 0)",
                              *backward_text = "dx = dy * [y > 0]";
  static constexpr bool streaming = true;
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) { return x > T(0) || x != x ? x : T(0); }
  template <class T> TG_HD static T backward(T, T y, T dy) { return y <= T(0) ? T(0) : dy; }
};

// sigmoid(x) = 1 / (1 + exp(-x)), as exp(x) / (1 + exp(x)) for x < 0 so that neither side overflows.
struct Sigmoid : UnaryOp {
  static constexpr const char *name = "sigmoid", *forward_text = "y = 1 / (1 + exp(-x))",
                              *backward_text = "dx = dy * y * (1 - y)";
  static constexpr double lo = -3, hi = 3;
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) {
    if (x >= T(0)) return T(1) / (T(1) + exp_of(-x));
    const T e = exp_of(x);
    return e / (T(1) + e);
  }
  template <class T> TG_HD static T backward(T, T y, T dy) { return dy * y * (T(1) - y); }
};

// silu(x) = x * sigmoid(x); its derivative s + x s (1 - s) = s (1 + x (1 - s)), s = sigmoid(x).
struct Silu : UnaryOp {
  static constexpr const char *name = "silu", *forward_text = "y = x * sigmoid(x)",
                              *backward_text = "dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x)";
  static constexpr double lo = -3, hi = 3;
  template <class T> TG_HD static T forward(T x) { return x * Sigmoid::forward(x); }
  template <class T> TG_HD static T backward(T x, T, T dy) {
    const T s = Sigmoid::forward(x);
    return dy * (s * (T(1) + x * (T(1) - s)));
  }
};

// sqrt: dx = dy / (2 y); rsqrt y = 1 / sqrt(x): dx = -dy y^3 / 2.
struct Sqrt : UnaryOp {
  static constexpr const char *name = "sqrt", *forward_text = "y = sqrt(x)", *backward_text = "dx = dy / (2 y)";
  static constexpr double lo = 0.5, hi = 3;
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) { return sqrt_of(x); }
  template <class T> TG_HD static T backward(T, T y, T dy) { return dy / (T(2) * y); }
};

struct Rsqrt : UnaryOp {
  static constexpr const char *name = "rsqrt", *forward_text = "y = 1 / sqrt(x)",
                              *backward_text = "dx = -dy * y^3 / 2";
  static constexpr double lo = 0.5, hi = 3;
  static constexpr bool backward_reads_y = true;
  template <class T> TG_HD static T forward(T x) { return T(1) / sqrt_of(x); }
  template <class T> TG_HD static T backward(T, T y, T dy) { return -dy * (y * y * y) * T(0.5); }
};

// abs: the gradient is dy * sign(x), 0 at x = 0 and at NaN (PyTorch's sgn); the value keeps NaN.
struct Abs : UnaryOp {
  static constexpr const char *name = "abs", *forward_text = "y = |x|", *backward_text = "dx = dy * sign(x)";
  static constexpr bool streaming = true;
  template <class T> TG_HD static T forward(T x) { return x < T(0) ? -x : x == T(0) ? T(0) : x; }
  template <class T> TG_HD static T backward(T x, T, T dy) {
    return x > T(0) ? dy : x < T(0) ? -dy : T(0);
  }
};

struct Square : UnaryOp {
  static constexpr const char *name = "square", *forward_text = "y = x^2", *backward_text = "dx = dy * 2x";
  static constexpr bool streaming = true;
  template <class T> TG_HD static T forward(T x) { return x * x; }
  template <class T> TG_HD static T backward(T x, T, T dy) { return dy * (T(2) * x); }
};

// gelu, exact (PyTorch's default, approximate='none'): y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
// dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
struct GeluErf : UnaryOp {
  static constexpr const char *name = "gelu_erf", *forward_text = "y = x/2 * (1 + erf(x / sqrt(2)))",
                              *backward_text = "dx = dy * (Phi(x) + x * exp(-x^2/2) / sqrt(2 pi))";
  static constexpr double lo = -3, hi = 3;
  static constexpr double kRsqrt2 = 0.7071067811865476, kRsqrt2Pi = 0.3989422804014327;
  template <class T> TG_HD static T forward(T x) { return T(0.5) * x * (T(1) + erf_of(x * T(kRsqrt2))); }
  template <class T> TG_HD static T backward(T x, T, T dy) {
    const T phi = T(0.5) * (T(1) + erf_of(x * T(kRsqrt2)));
    return dy * (phi + x * (exp_of(T(-0.5) * x * x) * T(kRsqrt2Pi)));
  }
};

// gelu, the tanh approximation (PyTorch's approximate='tanh', GPT-2's):
// y = x/2 (1 + t), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3);
// dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
struct GeluTanh : UnaryOp {
  static constexpr const char *name = "gelu_tanh", *forward_text = "y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))",
                              *backward_text = "dx = dy * ((1 + t)/2 + x/2 * (1 - t^2) * sqrt(2/pi) * (1 + 0.134145 x^2))";
  static constexpr double lo = -3, hi = 3;
  static constexpr double kC = 0.7978845608028654;  // sqrt(2 / pi)
  static constexpr double kA = 0.044715;
  template <class T> TG_HD static T forward(T x) {
    const T t = tanh_of(T(kC) * (x + T(kA) * x * x * x));
    return T(0.5) * x * (T(1) + t);
  }
  template <class T> TG_HD static T backward(T x, T, T dy) {
    const T t = tanh_of(T(kC) * (x + T(kA) * x * x * x));
    const T du = T(kC) * (T(1) + T(3 * kA) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
};

// X(name, Functor) for every unary op, in the order of the Unary enum.
#define TG_UNARY_OPS(X) \
  X(neg, Neg)           \
  X(exp, Exp)           \
  X(log, Log)           \
  X(tanh, Tanh)         \
  X(relu, Relu)         \
  X(sigmoid, Sigmoid)   \
  X(silu, Silu)         \
  X(gelu_tanh, GeluTanh) \
  X(gelu_erf, GeluErf)   \
  X(sqrt, Sqrt)         \
  X(rsqrt, Rsqrt)       \
  X(abs, Abs)           \
  X(square, Square)

enum class Unary : uint8_t {
#define TG_UNARY_ENUM(name, F) name,
  TG_UNARY_OPS(TG_UNARY_ENUM)
#undef TG_UNARY_ENUM
};

// Calls f.template operator()<F>() with F the functor of op.
template <class Fn>
TG_HD decltype(auto) visit_unary(Unary op, Fn&& f) {
  switch (op) {
#define TG_UNARY_CASE(name, F) \
  case Unary::name: return f.template operator()<F>();
    TG_UNARY_OPS(TG_UNARY_CASE)
#undef TG_UNARY_CASE
  }
  return f.template operator()<Neg>();
}

}  // namespace tapegrad::kernels
