// The differentiable ops. Each front-end checks its inputs (errors name the op and the shapes),
// computes through the kernel facades, and records a node whose backward rule is written beside
// its forward in the op's .cpp file. Every op's shapes, forward and derivative are in one table,
// ops/op_table.cpp, which docs/ops.md shows; the elementwise unary ops are their functors in
// src/kernels/unary_ops.hpp (one line of TG_UNARY_OPS each), declared here from that list.
#pragma once

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/unary_ops.hpp"  // TG_UNARY_OPS

namespace tapegrad::ops {

enum class Reduction : uint8_t { mean, sum, none };

Var gather(Var table, Var ids);
Var matmul(Var a, Var b);
Var add_row(Var x, Var bias);
Var add(Var a, Var b);
Var sub(Var a, Var b);
Var mul(Var a, Var b);
Var scale(Var x, double s);
// neg exp log tanh relu sigmoid silu gelu (tanh approximation): y = f(x), any shape
#define TG_UNARY_DECLARE(name, F) Var name(Var x);
TG_UNARY_OPS(TG_UNARY_DECLARE)
#undef TG_UNARY_DECLARE
Var softmax(Var x);
Var cross_entropy(Var logits, Var targets, Reduction reduction = Reduction::mean);
Var sum(Var x);
Var mean(Var x);
Var transpose(Var x);
Var reshape(Var x, const Shape& shape);

}  // namespace tapegrad::ops

// ---- normalisation and dropout: layer_norm, rms_norm (fused/norm.hpp); dropout and its
// Generator (fused/dropout.hpp)
#include "tapegrad/ops/fused/dropout.hpp"
#include "tapegrad/ops/fused/norm.hpp"

namespace tapegrad {
inline Var operator+(Var a, Var b) { return ops::add(a, b); }
inline Var operator-(Var a, Var b) { return ops::sub(a, b); }
inline Var operator*(Var a, Var b) { return ops::mul(a, b); }
inline Var operator-(Var a) { return ops::neg(a); }
}  // namespace tapegrad
