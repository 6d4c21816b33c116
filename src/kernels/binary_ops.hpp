// The elementwise binary ops, each written once, as unary_ops.hpp writes the unary ones: the
// forward y = f(a, b) and both partial derivatives as one functor that the CPU loops
// (cpu/elementwise.cpp, cpu/strided.cpp) and the CUDA kernels (src/cuda/elementwise.cu,
// src/cuda/strided.cu) instantiate, plus the text the derivatives table shows.
//
// The partials are written as the gradient that reaches each operand at one output element;
// broadcasting (an operand read at many output elements) is the front-end's business: it sums
// these over the broadcast axes (ops/elementwise.cpp).
//
// Rules as for the unary ops: pure functions of (a, b, y, dy); NaN is never hidden.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "tapegrad/kernels/unary_ops.hpp"  // TG_HD, exp_of, log_of, pow_of
#include "tapegrad/tensor/error.hpp"

namespace tapegrad::kernels {

struct Add {
  static constexpr const char *name = "add", *forward_text = "y = a + b", *backward_text = "da = dy, db = dy";
  template <class T> TG_HD static T forward(T a, T b) { return a + b; }
  template <class T> TG_HD static T da(T, T, T, T dy) { return dy; }
  template <class T> TG_HD static T db(T, T, T, T dy) { return dy; }
};

struct Sub {
  static constexpr const char *name = "sub", *forward_text = "y = a - b", *backward_text = "da = dy, db = -dy";
  template <class T> TG_HD static T forward(T a, T b) { return a - b; }
  template <class T> TG_HD static T da(T, T, T, T dy) { return dy; }
  template <class T> TG_HD static T db(T, T, T, T dy) { return -dy; }
};

struct Mul {
  static constexpr const char *name = "mul", *forward_text = "y = a * b", *backward_text = "da = dy * b, db = dy * a";
  template <class T> TG_HD static T forward(T a, T b) { return a * b; }
  template <class T> TG_HD static T da(T, T b, T, T dy) { return dy * b; }
  template <class T> TG_HD static T db(T a, T, T, T dy) { return dy * a; }
};

// db = -dy * a / b^2, computed as PyTorch does: -dy * a / (b * b)
struct Div {
  static constexpr const char *name = "div", *forward_text = "y = a / b",
                              *backward_text = "da = dy / b, db = -dy * a / b^2";
  template <class T> TG_HD static T forward(T a, T b) { return a / b; }
  template <class T> TG_HD static T da(T, T b, T, T dy) { return dy / b; }
  template <class T> TG_HD static T db(T a, T b, T, T dy) { return -dy * a / (b * b); }
};

// maximum and minimum propagate NaN (PyTorch's torch.maximum); at a tie each side gets half. The
// gradient is PyTorch's rule, where(a == b, dy/2, dy) zeroed on the smaller side (maximum) or the
// larger (minimum), so where either side is NaN (no order) both sides get dy, as in PyTorch.
struct Maximum {
  static constexpr const char *name = "maximum", *forward_text = "y = max(a, b) (NaN if either is)",
                              *backward_text = "da = dy * (1 - [a < b] - [a == b]/2), db = dy * (1 - [b < a] - [a == b]/2)";
  template <class T> TG_HD static T forward(T a, T b) { return a != a ? a : b != b ? b : a > b ? a : b; }
  template <class T> TG_HD static T da(T a, T b, T, T dy) { return a < b ? T(0) : a == b ? dy * T(0.5) : dy; }
  template <class T> TG_HD static T db(T a, T b, T, T dy) { return b < a ? T(0) : a == b ? dy * T(0.5) : dy; }
};

struct Minimum {
  static constexpr const char *name = "minimum", *forward_text = "y = min(a, b) (NaN if either is)",
                              *backward_text = "da = dy * (1 - [a > b] - [a == b]/2), db = dy * (1 - [b > a] - [a == b]/2)";
  template <class T> TG_HD static T forward(T a, T b) { return a != a ? a : b != b ? b : a < b ? a : b; }
  template <class T> TG_HD static T da(T a, T b, T, T dy) { return a > b ? T(0) : a == b ? dy * T(0.5) : dy; }
  template <class T> TG_HD static T db(T a, T b, T, T dy) { return b > a ? T(0) : a == b ? dy * T(0.5) : dy; }
};

// pow: da = dy * b * a^(b - 1); db = dy * y * log(a), taken as 0 where a == 0 and b >= 0 (PyTorch).
struct Pow {
  static constexpr const char *name = "pow", *forward_text = "y = a^b",
                              *backward_text = "da = dy * b * a^(b-1), db = dy * y * log(a) (0 where a = 0, b >= 0)";
  template <class T> TG_HD static T forward(T a, T b) { return pow_of(a, b); }
  template <class T> TG_HD static T da(T a, T b, T, T dy) { return b == T(0) ? T(0) : dy * b * pow_of(a, b - T(1)); }
  template <class T> TG_HD static T db(T a, T b, T y, T dy) {
    return a == T(0) && b >= T(0) ? T(0) : dy * (y * log_of(a));
  }
};

// X(name, Functor), in the order of the Binary enum.
#define TG_BINARY_OPS(X) \
  X(add, Add)            \
  X(sub, Sub)            \
  X(mul, Mul)            \
  X(div, Div)            \
  X(maximum, Maximum)    \
  X(minimum, Minimum)    \
  X(pow, Pow)

enum class Binary : uint8_t {
#define TG_BINARY_ENUM(name, F) name,
  TG_BINARY_OPS(TG_BINARY_ENUM)
#undef TG_BINARY_ENUM
};

template <class Fn>
TG_HD decltype(auto) visit_binary(Binary op, Fn&& f) {
  switch (op) {
#define TG_BINARY_CASE(name, F) \
  case Binary::name: return f.template operator()<F>();
    TG_BINARY_OPS(TG_BINARY_CASE)
#undef TG_BINARY_CASE
  }
  return f.template operator()<Add>();
}

// F on integers, wrapping around on overflow as PyTorch's integer ops do: computed in the unsigned
// type of T's width, where overflow is defined (modulo 2^bits), and converted back.
template <class F>
struct Wrapping {
  static constexpr const char* name = F::name;
  template <class T> TG_HD static T forward(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(F::forward(static_cast<U>(a), static_cast<U>(b))));
  }
};

// visit_binary(op, BinaryName{}): the op's name.
struct BinaryName {
  template <class F> const char* operator()() const { return F::name; }
};

// The binary ops of integer tensors (i32, i64): add, sub and mul, the arithmetic a model does on
// ids (offsets into a table, strides), each wrapping; f.template operator()<F>() as visit_binary's.
// Host only: the others are refused naming the op (the front-ends refuse them first).
template <class Fn>
decltype(auto) visit_integer_binary(Binary op, Fn&& f) {
  switch (op) {
    case Binary::add: return f.template operator()<Wrapping<Add>>();
    case Binary::sub: return f.template operator()<Wrapping<Sub>>();
    case Binary::mul: return f.template operator()<Wrapping<Mul>>();
    default: break;
  }
  throw Error(std::string("[") + visit_binary(op, BinaryName{}) + "] integer tensors take add, sub and mul");
}

// Comparisons: a u8 mask, 1 where the relation holds (NaN compares unequal to everything).
enum class Compare : uint8_t { eq, ne, lt, le, gt, ge };
template <class T> TG_HD inline bool compare_of(Compare op, T a, T b) {
  switch (op) {
    case Compare::eq: return a == b;
    case Compare::ne: return a != b;
    case Compare::lt: return a < b;
    case Compare::le: return a <= b;
    case Compare::gt: return a > b;
    case Compare::ge: return a >= b;
  }
  return false;
}

// clamp(x, lo, hi) = min(max(x, lo), hi) (all hi when lo > hi, as PyTorch has it), NaN kept;
// the gradient passes where lo <= x <= hi (not at NaN), as PyTorch's clamp_backward.
template <class T> TG_HD inline T clamp_of(T x, T lo, T hi) {
  if (x != x) return x;
  const T t = x < lo ? lo : x;
  return t > hi ? hi : t;
}
template <class T> TG_HD inline T clamp_grad_of(T x, T lo, T hi, T dy) { return x >= lo && x <= hi ? dy : T(0); }

}  // namespace tapegrad::kernels
