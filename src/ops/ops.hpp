// The differentiable ops. Each front-end checks its inputs (errors name the op and the shapes),
// computes through the kernel facades, and records a node whose backward rule is written beside
// its forward in the op's .cpp file. Derivatives, in one list (d = gradient of the loss):
//
//   op                     shapes                            backward
//   gather(E, ids)         E (V, d), ids (B,) int -> (B, d)  dE[ids[i]] += dy[i]   (row-wise accumulate)
//   matmul(a, b)           (n, k) @ (k, m) -> (n, m)         da = dy @ b^T, db = a^T @ dy
//   add_row(x, b)          (n, m) + (m,) -> (n, m)           dx = dy, db = sum over rows of dy
//   add(a, b), sub(a, b)   same shapes                       da = dy, db = +-dy
//   mul(a, b)              same shapes                       da = dy * b, db = dy * a
//   scale(x, s)            any                               dx = dy * s
//   exp(x)                 any                               dx = dy * y
//   log(x)                 any                               dx = dy / x
//   tanh(x)                any                               dx = dy * (1 - y^2)
//   relu(x)                any                               dx = dy * [x > 0]
//   softmax(x)             (n, m), along m                   dx = y * (dy - sum_j dy*y)
//   cross_entropy(z, t)    z (B, V), t (B,) int -> ()        dz = ((softmax(z) - onehot(t)) / B) * dy   (mean)
//                          Reduction::none -> (B,)           dz[i] = (softmax(z[i]) - onehot(t[i])) * dy[i]
//   sum(x), mean(x)        any -> ()                         dx = dy, dx = dy / n
//   transpose(x)           (n, m) -> (m, n)                  dx = dy^T
//   reshape(x, s)          any -> s (same numel)             dx = dy reshaped back
#pragma once

#include "tapegrad/graph/graph.hpp"

namespace tapegrad::ops {

enum class Reduction : uint8_t { mean, sum, none };

Var gather(Var table, Var ids);
Var matmul(Var a, Var b);
Var add_row(Var x, Var bias);
Var add(Var a, Var b);
Var sub(Var a, Var b);
Var mul(Var a, Var b);
Var scale(Var x, double s);
Var neg(Var x);
Var exp(Var x);
Var log(Var x);
Var tanh(Var x);
Var relu(Var x);
Var softmax(Var x);
Var cross_entropy(Var logits, Var targets, Reduction reduction = Reduction::mean);
Var sum(Var x);
Var mean(Var x);
Var transpose(Var x);
Var reshape(Var x, const Shape& shape);

}  // namespace tapegrad::ops

namespace tapegrad {
inline Var operator+(Var a, Var b) { return ops::add(a, b); }
inline Var operator-(Var a, Var b) { return ops::sub(a, b); }
inline Var operator*(Var a, Var b) { return ops::mul(a, b); }
inline Var operator-(Var a) { return ops::neg(a); }
}  // namespace tapegrad
